"""Which tz database rules a zone is read with: a fingerprint and a version, from the files zoneinfo loads.

`zoneinfo` reads a zone from the first directory of `zoneinfo.TZPATH` that
has it (the system's /usr/share/zoneinfo on Debian), else from the `tzdata`
package. `current(zone)` reads the same file and returns its bytes, their
SHA-256 (the fingerprint: any change of the zone's rules changes it) and
the tzdata release it belongs to. A file is read again only when its size or
modification time changes, so asking every few minutes costs one stat() per
zone. When a fingerprint changes, this process's zoneinfo cache of the zone
is cleared, so every later occurrence is computed with the new rules.
"""

import dataclasses
import hashlib
import importlib.resources
import io
import os
import threading
import zoneinfo


@dataclasses.dataclass(frozen=True)
class ZoneData:
    zone: str
    fingerprint: str
    version: str
    tzif: bytes

    def load(self):
        """A ZoneInfo built from these bytes (not from the disk, which may hold other rules by now)."""
        return zoneinfo.ZoneInfo.from_file(io.BytesIO(self.tzif), key=self.zone)


_memo = {}  # zone -> (path, stat signature, ZoneData)
_lock = threading.Lock()


def current(zone):
    """The rules zoneinfo would load for `zone` now. Raises zoneinfo.ZoneInfoNotFoundError."""
    path = _path(zone)
    signature = _signature(path)
    with _lock:
        known = _memo.get(zone)
    if known and known[0] == path and known[1] == signature:
        return known[2]
    data = _read(zone, path)
    with _lock:
        before = _memo.get(zone)
        _memo[zone] = (path, signature, data)
    if before and before[2].fingerprint != data.fingerprint:
        zoneinfo.ZoneInfo.clear_cache(only_keys=[zone])  # this process's zoneinfo reads the new rules
    return data


def _path(zone):
    for directory in zoneinfo.TZPATH:
        candidate = os.path.join(directory, zone)
        if os.path.isfile(candidate):
            return candidate
    return None  # the tzdata package


def _signature(path):
    if path is None:
        return "package"
    stat = os.stat(path)
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)


def _read(zone, path):
    if path is None:
        try:
            resource = importlib.resources.files("tzdata.zoneinfo").joinpath(*zone.split("/"))
            data = resource.read_bytes()
        except (ModuleNotFoundError, FileNotFoundError, IsADirectoryError) as exc:
            raise zoneinfo.ZoneInfoNotFoundError(f"No time zone found with key {zone}") from exc
        return ZoneData(zone, hashlib.sha256(data).hexdigest(), f"{_package_version()} (tzdata package)", data)
    with open(path, "rb") as handle:
        data = handle.read()
    root = path[: -len(zone)].rstrip(os.sep)
    return ZoneData(zone, hashlib.sha256(data).hexdigest(), f"{_directory_version(root)} ({root})", data)


def _package_version():
    try:
        import tzdata

        return tzdata.IANA_VERSION
    except (ImportError, AttributeError):
        return "unknown"


def _directory_version(root):
    """The release a zoneinfo directory was built from: tzdata.zi's first line, or +VERSION; else 'unknown'."""
    try:
        with open(os.path.join(root, "tzdata.zi"), encoding="ascii", errors="replace") as handle:
            first = handle.readline().strip()
        if first.startswith("# version "):
            return first.removeprefix("# version ")
    except OSError:
        pass
    try:
        with open(os.path.join(root, "+VERSION"), encoding="ascii", errors="replace") as handle:
            return handle.read().strip() or "unknown"
    except OSError:
        return "unknown"


def forget():
    """Drop what this process read (tests that swap zone files in and out)."""
    with _lock:
        _memo.clear()
