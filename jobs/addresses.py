"""Which addresses Duetime's outgoing calls may reach: the network wall of http targets and owner webhooks.

A tenant names a URL; a worker (or the scheduler, for an owner's webhook) calls it
from inside the operator's network. Unguarded, that URL reaches the operator's
loopback services, the cloud's metadata endpoint and private networks, and the
answer tells the tenant which ports are open there. The wall:

1. `Destination.of(url)` parses the URL once, the same way at save and at execution.
2. `checked()` resolves its host once and checks every address it resolved to
   (`classify`); one refused address refuses the call (`NotPublic`).
3. `connect()` opens a TCP connection to a checked address itself, never to the
   name again, so a DNS answer that changes between check and use (rebinding)
   cannot slip past. No byte goes to an address that was refused.

An address is callable when it is public, or when the caller's `Allowance` covers
it: a tenant's private networks (`Tenant.private_networks`, edited by superusers),
or every address while DUETIME_HTTP_ALLOW_PRIVATE is on (development). A refusal
reads the same to the tenant whatever the address was and whether anything
listens there (REFUSED); what was resolved and why it was refused goes to the
operator's log only (logger `duetime.network`). docs/security.md lists every
address class and encoding tried, with the result at save and at execution.
"""

import dataclasses
import ipaddress
import logging
import socket
import threading
import urllib.parse

from django.conf import settings

log = logging.getLogger("duetime.network")

REFUSED = "refused: not a public address"
SCHEMES = {"http": 80, "https": 443}


class NotPublic(Exception):
    """A call refused before any byte was sent. `str()` is what the tenant sees; `detail` is for the operator."""

    def __init__(self, message, detail):
        super().__init__(message)
        self.detail = detail


class Unresolvable(OSError):
    """The host did not resolve (no such name, the resolver failed or was too slow): nothing was called."""


class BadURL(ValueError):
    """Not an http(s) URL Duetime can call; the message says what is wrong."""


def _v4_embedded_last(ip):
    return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]


def _v4_6to4(ip):
    return [ip.sixtofour]


def _v4_teredo(ip):
    return list(ip.teredo)  # the Teredo server and the client (de-obfuscated) behind it


def _net(text):
    return ipaddress.ip_network(text)


# IPv6 forms that carry an IPv4 address: judged by the IPv4 address(es) they carry. First match wins.
EMBEDDINGS = [
    (_net("::ffff:0:0/96"), "IPv4-mapped", _v4_embedded_last),
    (_net("64:ff9b::/96"), "NAT64", _v4_embedded_last),
    (_net("2002::/16"), "6to4", _v4_6to4),
    (_net("2001::/32"), "Teredo", _v4_teredo),
]

# Ranges that are never public (IANA's special-purpose registries). The first match names the class.
NON_PUBLIC = [
    (_net("0.0.0.0/8"), "unspecified (this host)"),
    (_net("10.0.0.0/8"), "private"),
    (_net("100.64.0.0/10"), "shared address space (CGNAT)"),
    (_net("127.0.0.0/8"), "loopback"),
    (_net("169.254.0.0/16"), "link-local (cloud metadata)"),
    (_net("172.16.0.0/12"), "private"),
    (_net("192.0.0.0/24"), "reserved (IETF protocol assignments)"),
    (_net("192.0.2.0/24"), "documentation"),
    (_net("192.88.99.0/24"), "reserved (6to4 relay anycast)"),
    (_net("192.168.0.0/16"), "private"),
    (_net("198.18.0.0/15"), "benchmarking"),
    (_net("198.51.100.0/24"), "documentation"),
    (_net("203.0.113.0/24"), "documentation"),
    (_net("224.0.0.0/4"), "multicast"),
    (_net("240.0.0.0/4"), "reserved (and broadcast)"),
    (_net("::/128"), "unspecified"),
    (_net("::1/128"), "loopback"),
    (_net("::/96"), "IPv4-compatible (deprecated)"),
    (_net("64:ff9b:1::/48"), "NAT64 local-use"),
    (_net("::/8"), "reserved (IPv4-translated and others)"),
    (_net("100::/64"), "discard-only"),
    (_net("2001::/23"), "reserved (IETF protocol assignments)"),
    (_net("2001:db8::/32"), "documentation"),
    (_net("3fff::/20"), "documentation"),
    (_net("fc00::/7"), "unique-local"),
    (_net("fe80::/10"), "link-local"),
    (_net("fec0::/10"), "site-local (deprecated)"),
    (_net("ff00::/8"), "multicast"),
]
GLOBAL_UNICAST_V6 = _net("2000::/3")


class Allowance:
    """Where a caller may connect besides public addresses.

    `networks`: the ip_network objects it may call (a tenant's private
    networks); `owner` names whose they are in messages ("tenant acme").
    `load`, instead of both: a callable returning (owner, networks), called the
    first time an address is not public, so a call to a public address never
    reads them (the worker's allowance is a database read, at use).
    DUETIME_HTTP_ALLOW_PRIVATE on allows every address (read at each check).
    """

    def __init__(self, networks=(), owner="", *, load=None):
        self._loaded = None if load else (owner, tuple(networks))
        self._load = load

    @property
    def owner(self):
        return self._get()[0]

    @property
    def networks(self):
        return self._get()[1]

    def _get(self):
        if self._loaded is None:
            owner, networks = self._load()
            self._loaded = (owner, tuple(networks))
        return self._loaded

    def permits(self, ip):
        """True if `ip` is inside one of the allowed networks (or everything is allowed)."""
        if settings.DUETIME_HTTP_ALLOW_PRIVATE:
            return True
        return any(ip in network for network in self.networks)

    def refusal(self):
        """What the tenant reads when a call is refused: the same for every refused address."""
        whose = f" of {self.owner}" if self.owner else ""
        if not self.networks:
            return f"{REFUSED} (Duetime calls public addresses only, unless an operator allows private networks{whose})"
        listed = ", ".join(str(network) for network in self.networks)
        return f"{REFUSED}, nor in the allowed private networks{whose} ({listed})"


PUBLIC_ONLY = Allowance()


def classify(ip, allowance=PUBLIC_ONLY):
    """None when `ip` may be called under `allowance`; otherwise why not, e.g. 'loopback'.

    An IPv6 form that embeds IPv4 addresses (mapped, NAT64, 6to4, Teredo) is
    callable only when every address it embeds is (or the form itself is
    allowed). The allowance is asked only about an address that is not public.
    """
    ip = ipaddress.ip_address(ip)
    found = _not_public(ip, allowance)
    if found is None or allowance.permits(ip):
        return None
    return found


def _not_public(ip, allowance):
    for network, form, embedded in EMBEDDINGS:
        if ip in network:
            for inner in embedded(ip):
                found = classify(inner, allowance)
                if found:
                    return f"{form} of {inner}, {found}"
            return None
    for network, name in NON_PUBLIC:
        if ip in network:
            return name
    if ip.version == 6 and ip not in GLOBAL_UNICAST_V6:
        return "reserved (outside global unicast 2000::/3)"
    return None


def networks(text):
    """The networks of an allowance written one per line (`10.20.0.0/16`, `fd00:1::/64`, `# notes`).

    Raises ValueError naming the line that is not a network.
    """
    found = []
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry)
        except ValueError as exc:
            hint = _host_bits_hint(entry)
            raise ValueError(f"'{entry}' is not a network in CIDR notation such as 10.20.0.0/16 ({exc}){hint}")
        if network not in found:
            found.append(network)
    return found


def _host_bits_hint(entry):
    try:
        return f"; did you mean {ipaddress.ip_network(entry, strict=False)}?"
    except ValueError:
        return ""


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where an http(s) URL points: what the guard checks is what the connection uses."""

    scheme: str  # http | https (urlsplit lowercases HTTP:// and HTTPS://)
    host: str  # the URL's host without brackets, lowercased: the Host header and the TLS SNI name
    port: int  # explicit, or the scheme's default
    target: str  # path and query, as the request line carries them

    @classmethod
    def of(cls, url):
        """Parse `url`; raises BadURL saying what is wrong. User-info (`user@`) is never sent."""
        if not isinstance(url, str) or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
            raise BadURL("it contains a space or a control character")
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", a port that is not a number
            raise BadURL(str(exc)) from exc
        if parts.scheme not in SCHEMES:
            raise BadURL("the scheme must be http or https")
        if not parts.hostname:
            raise BadURL("it names no host")
        if parts.netloc.rpartition("@")[2].startswith("[") and not _ipv6_literal(parts.hostname):
            raise BadURL(f"[{parts.hostname}] is not an IPv6 address (zone ids such as %eth0 are not supported)")
        if port == 0:
            raise BadURL("port 0 cannot be called")
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme, parts.hostname, port or SCHEMES[parts.scheme], target)


def _ipv6_literal(host):
    try:
        return "%" not in host and ipaddress.IPv6Address(host) is not None
    except ValueError:
        return False


# The resolver and the dialler, module attributes so that tests put their own DNS zone and recorder here.
getaddrinfo = socket.getaddrinfo


def dial(family, sockaddr, timeout):
    """A TCP socket connected to `sockaddr`, or OSError (ConnectionRefusedError, TimeoutError, ...)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if isinstance(timeout, int | float):
            sock.settimeout(timeout)
        sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


def resolve(host, port, *, within=None):
    """[(family, sockaddr)] that `host` resolves to, in the resolver's order, without repeats.

    `within` seconds bounds the wait (a definition's save must not hang on a slow
    resolver); None waits as long as the system resolver does. Raises Unresolvable.
    """
    if within is None:
        answers = _lookup(host, port)
    else:
        answers = _lookup_within(host, port, within)
    found = []
    for family, _type, _proto, _name, sockaddr in answers:
        if family in (socket.AF_INET, socket.AF_INET6) and (family, sockaddr) not in found:
            found.append((family, sockaddr))
    if not found:
        raise Unresolvable(f"could not resolve {host}: no IPv4 or IPv6 address")
    return found


def _lookup(host, port):
    try:
        return getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:  # gaierror; a name IDNA cannot encode; a NUL
        raise Unresolvable(f"could not resolve {host}: {exc}") from exc


def _lookup_within(host, port, seconds):
    box = {}

    def run():
        try:
            box["answers"] = _lookup(host, port)
        except Unresolvable as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, name="duetime-resolve", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():  # left to finish on its own: getaddrinfo cannot be interrupted
        raise Unresolvable(f"could not resolve {host} within {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["answers"]


def checked(host, port, allowance=PUBLIC_ONLY, *, within=None, context=""):
    """[(family, sockaddr)] of `host`, every one of them callable under `allowance`.

    Raises NotPublic when any address is not (the tenant reads `allowance.refusal()`,
    the operator's log gets each address and its class), or Unresolvable.
    `context` says in the log line who asked (a run, a webhook, a save).
    """
    found = resolve(host, port, within=within)
    refused = [(sockaddr[0], why) for _, sockaddr in found if (why := classify(sockaddr[0], allowance))]
    if refused:
        detail = f"{host} port {port} resolves to " + ", ".join(f"{address} ({why})" for address, why in refused)
        if allowance.owner:
            detail += f"; not in the private networks allowed to {allowance.owner}"
        log.warning("refused a call%s: %s", f" ({context})" if context else "", detail)
        raise NotPublic(allowance.refusal(), detail)
    return found


def connect(host, port, timeout, allowance=PUBLIC_ONLY, *, context=""):
    """A TCP socket to `host`:`port`, connected to an address checked by `checked()`, never to another.

    The name is resolved once: the socket goes to an address that answer held,
    in its order, the next one only when connecting to the one before failed.
    Raises NotPublic (nothing was sent anywhere), Unresolvable, or the last
    connection error (OSError; TimeoutError after `timeout` seconds).
    """
    failures = []
    for family, sockaddr in checked(host, port, allowance, context=context):
        try:
            return dial(family, sockaddr, timeout)
        except OSError as exc:
            failures.append(exc)
    raise failures[-1]
