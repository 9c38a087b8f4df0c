"""The network wall itself: which addresses are public, URLs parsed once, names resolved once, checked before connecting."""

import ipaddress
import logging
import threading

import pytest

from jobs import addresses
from jobs.addresses import Allowance, Destination

ALLOWED_10_20 = Allowance([ipaddress.ip_network("10.20.0.0/16")], "tenant acme")


@pytest.mark.parametrize(
    "address, found",
    [
        ("93.184.215.14", None),
        ("8.8.8.8", None),
        ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", None),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.1.2.3", "private"),
        ("172.31.255.255", "private"),
        ("172.32.0.1", None),
        ("192.168.0.1", "private"),
        ("100.64.0.1", "shared address space (CGNAT)"),
        ("100.128.0.1", None),
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("0.0.0.0", "unspecified (this host)"),
        ("192.0.0.9", "reserved (IETF protocol assignments)"),
        ("192.0.2.1", "documentation"),
        ("198.51.100.1", "documentation"),
        ("203.0.113.1", "documentation"),
        ("198.19.255.1", "benchmarking"),
        ("224.0.0.251", "multicast"),
        ("255.255.255.255", "reserved (and broadcast)"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "IPv4-mapped of 127.0.0.1, loopback"),
        ("::ffff:93.184.215.14", None),
        ("::127.0.0.1", "IPv4-compatible (deprecated)"),
        ("::8.8.8.8", "IPv4-compatible (deprecated)"),
        ("::ffff:0:7f00:1", "reserved (IPv4-translated and others)"),
        ("64:ff9b::7f00:1", "NAT64 of 127.0.0.1, loopback"),
        ("64:ff9b::a9fe:a9fe", "NAT64 of 169.254.169.254, link-local (cloud metadata)"),
        ("64:ff9b::5db8:d70e", None),
        ("64:ff9b:1::a00:1", "NAT64 local-use"),
        ("2002:7f00:1::", "6to4 of 127.0.0.1, loopback"),
        ("2002:c0a8:101::1", "6to4 of 192.168.1.1, private"),
        ("2002:5db8:d70e::1", None),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo of 127.0.0.1, loopback"),
        ("2001:0:c000:0201:8000:63bf:a2a5:ea85", "Teredo of 192.0.2.1, documentation"),
        ("2001:db8::1", "documentation"),
        ("3fff::1", "documentation"),
        ("2001:2::1", "reserved (IETF protocol assignments)"),
        ("100::1", "discard-only"),
        ("fc00::1", "unique-local"),
        ("fd12:3456::1", "unique-local"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local (deprecated)"),
        ("ff02::1", "multicast"),
        ("4000::1", "reserved (outside global unicast 2000::/3)"),
    ],
)
def test_it_classifies_each_address(address, found):
    assert addresses.classify(address) == found


def test_it_does_not_trust_pythons_is_global_for_addresses_that_embed_a_private_one():
    """Python calls these global; each carries a loopback address the packets end at."""
    for embedding in ("64:ff9b::7f00:1", "2002:7f00:1::", "::127.0.0.1"):
        assert ipaddress.ip_address(embedding).is_global
        assert addresses.classify(embedding) is not None


@pytest.mark.parametrize(
    "address, found",
    [
        ("10.20.3.4", None),
        ("::ffff:10.20.3.4", None),  # the embedded address is inside the tenant's network
        ("64:ff9b::a14:304", None),
        ("10.21.0.1", "private"),
        ("::ffff:10.21.0.1", "IPv4-mapped of 10.21.0.1, private"),
        ("127.0.0.1", "loopback"),
    ],
)
def test_it_lets_through_what_the_tenants_networks_cover_and_nothing_else(address, found):
    assert addresses.classify(address, ALLOWED_10_20) == found


def test_it_lets_everything_through_while_the_development_switch_is_on(settings):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True
    assert addresses.classify("127.0.0.1") is None and addresses.classify("::ffff:10.0.0.1") is None


def test_it_reads_a_tenants_networks_one_per_line_with_notes():
    text = "10.20.0.0/16  # billing\n\n fd00:20::/64\n10.20.0.0/16\n192.168.7.9\n# old: 172.16.0.0/12"
    assert [str(n) for n in addresses.networks(text)] == ["10.20.0.0/16", "fd00:20::/64", "192.168.7.9/32"]


@pytest.mark.parametrize(
    "line, message",
    [
        ("10.20.0.1/16", "did you mean 10.20.0.0/16?"),
        ("10.20.0.0/33", "'10.20.0.0/33' is not a network in CIDR notation"),
        ("billing.internal", "'billing.internal' is not a network"),
    ],
)
def test_it_says_which_line_is_not_a_network(line, message):
    with pytest.raises(ValueError, match=message.replace("?", r"\?").replace(".", r"\.")):
        addresses.networks(f"10.0.0.0/8\n{line}")


def test_it_loads_a_lazy_allowance_only_when_an_address_is_not_public():
    loads = []
    allowance = Allowance(load=lambda: loads.append(1) or ("tenant acme", [ipaddress.ip_network("10.0.0.0/8")]))
    assert addresses.classify("93.184.215.14", allowance) is None
    assert loads == []
    assert addresses.classify("10.1.1.1", allowance) is None and addresses.classify("10.2.2.2", allowance) is None
    assert loads == [1], "read once, when first needed"


@pytest.mark.parametrize(
    "url, scheme, host, port, target",
    [
        (
            "https://billing.example.com/hooks/export?team=b",
            "https",
            "billing.example.com",
            443,
            "/hooks/export?team=b",
        ),
        ("HTTP://Billing.Example.COM", "http", "billing.example.com", 80, "/"),
        ("http://[::1]:8080/x", "http", "::1", 8080, "/x"),
        ("http://[64:ff9b::7f00:1]/", "http", "64:ff9b::7f00:1", 80, "/"),
        ("http://[::127.0.0.1]/", "http", "::127.0.0.1", 80, "/"),
        ("https://[2002:7f00:1::]/", "https", "2002:7f00:1::", 443, "/"),
        ("http://public@127.0.0.1/", "http", "127.0.0.1", 80, "/"),
        ("http://user:pw@billing.example.com:81/", "http", "billing.example.com", 81, "/"),
        ("http://127.0.0.1#@billing.example.com/", "http", "127.0.0.1", 80, "/"),
        ("http://localhost./", "http", "localhost.", 80, "/"),
    ],
)
def test_it_parses_a_url_once_for_the_check_and_the_connection(url, scheme, host, port, target):
    assert Destination.of(url) == Destination(scheme, host, port, target)


@pytest.mark.parametrize(
    "url, message",
    [
        ("ftp://example.com/", "the scheme must be http or https"),
        ("file:///etc/passwd", "the scheme must be http or https"),
        ("billing.example.com/hooks", "the scheme must be http or https"),
        ("http:///hooks", "it names no host"),
        ("http://[::1/", "Invalid IPv6 URL"),
        ("http://example.com:99999/", "Port out of range"),
        ("http://example.com:http/", "Port could not be cast"),
        ("http://example.com:0/", "port 0 cannot be called"),
        ("http://[v1.billing]/", "is not an IPv6 address"),
        ("http://[fe80::1%25eth0]/", "zone ids"),
        ("http://example.com/a b", "a space or a control character"),
        ("http://example.com/\r\nX-Injected: 1", "a space or a control character"),
    ],
)
def test_it_says_what_is_wrong_with_a_url(url, message):
    with pytest.raises(addresses.BadURL, match=message.replace("[", r"\[")):
        Destination.of(url)


def test_it_keeps_every_address_a_name_resolves_to_in_order(dns):
    dns.add("two.test", "93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "93.184.215.14")
    found = addresses.resolve("two.test", 443)
    assert [sockaddr[:2] for _, sockaddr in found] == [
        ("93.184.215.14", 443),
        ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", 443),
    ]


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1", "１２７.０.０.１"])
def test_it_checks_what_the_resolver_makes_of_an_odd_ipv4_spelling(host):
    """The system resolver reads these as 127.0.0.1; the check sees what it read, not the spelling."""
    with pytest.raises(addresses.NotPublic):
        addresses.checked(host, 80)


def test_it_gives_up_on_a_slow_resolver_within_the_bound(dns):
    release = threading.Event()
    dns.add("slow.test", lambda: release.wait(30) and ["93.184.215.14"])
    try:
        with pytest.raises(addresses.Unresolvable, match="could not resolve slow.test within 0.05 s"):
            addresses.resolve("slow.test", 80, within=0.05)
    finally:
        release.set()


def test_it_tells_the_operator_what_was_refused_and_the_tenant_only_that_it_was(dns, caplog):
    dns.add("db.internal.test", "10.9.8.7")
    with caplog.at_level(logging.WARNING, logger="duetime.network"):
        with pytest.raises(addresses.NotPublic) as refused:
            addresses.checked("db.internal.test", 5432, ALLOWED_10_20, context="run 7")
    assert str(refused.value) == (
        "refused: not a public address, nor in the allowed private networks of tenant acme (10.20.0.0/16)"
    )
    assert "10.9.8.7" not in str(refused.value)
    assert caplog.messages == [
        "refused a call (run 7): db.internal.test port 5432 resolves to 10.9.8.7 (private); "
        "not in the private networks allowed to tenant acme"
    ]


def test_it_connects_only_after_the_check_and_to_the_checked_address(listener, dns):
    dns.add("sidecar.test", "127.0.0.1")
    with pytest.raises(addresses.NotPublic):
        addresses.connect("sidecar.test", listener.port, 5)
    assert listener.connections() == 0
    sock = addresses.connect("sidecar.test", listener.port, 5, Allowance([ipaddress.ip_network("127.0.0.0/8")]))
    sock.close()
    assert listener.connections() == 1


def test_it_tries_the_next_checked_address_when_one_does_not_answer(listener, dns, closed_port):
    dns.add("two.test", "127.0.0.2", "127.0.0.1")  # nothing listens on 127.0.0.2 at the listener's port
    sock = addresses.connect("two.test", listener.port, 5, Allowance([ipaddress.ip_network("127.0.0.0/8")]))
    assert sock.getpeername() == ("127.0.0.1", listener.port)
    sock.close()


def test_it_refuses_the_whole_name_when_one_address_is_not_public(dns, dials):
    dns.add("mixed.test", "93.184.215.14", "169.254.169.254")
    with pytest.raises(addresses.NotPublic):
        addresses.connect("mixed.test", 80, 5)
    assert dials.made == []
