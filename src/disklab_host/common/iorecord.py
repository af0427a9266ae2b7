"""The I/O record of one timed interval: what storage delivered while the clock ran.

A residency check says what the page cache held before a call; it does not say
what the storage did during it (the lesson; reference/004: resident growth is
not a read count, a fault can be served from cache, readahead reads beyond the
request, and any read-traffic claim needs its storage boundary and interval).
So every timed interval gets a record of three counters, read just before the
clock starts and just after it stops:

- ``process``: this process's ``read_bytes`` and ``write_bytes`` from
  /proc/self/io (proc(5): bytes this process caused to be fetched from, or
  sent to, the storage layer; page cache hits count nothing). Linux only.
- ``device``: the block device's sectors read and written, fields 3 and 7 of
  /sys/class/block/<name>/stat (Documentation/block/stat.rst: always in
  512-byte units, whatever the device's sector size). Device-wide: every
  process's I/O on that device counts, so on a shared host it is an upper
  bound on this process's share. Linux only.
- ``faults`` and ``blocks``: major and minor page faults and block input and
  output counts of this process (getrusage(2): ru_majflt, ru_minflt,
  ru_inblock, ru_oublock; Linux counts the blocks in 512-byte units, macOS in
  operations). A major fault needed I/O; a minor one found its page in memory.

On macOS the record holds what the OS offers without privileges: getrusage,
and the process's disk bytes from proc_pid_rusage(2) (rusage_info_v2's
ri_diskio_bytesread/ri_diskio_byteswritten, through libproc) where it can be
reached; /proc and /sys fields are ``{"unavailable": reason}``. The macOS path
has been run only against injected test doubles on Linux, not on a real Mac;
its record says so in ``validation``.

:func:`device_of` finds the block device behind a file the way the audit does
(st_dev through /sys/dev/block, else the mount's source from
/proc/self/mountinfo, which also covers btrfs's anonymous st_dev). A
:class:`Recorder` made with ``enabled=False`` records nothing and costs nothing
(the bench's paired comparison). Standard library only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import resource
from pathlib import Path

from . import fstypes
from .facts import is_unavailable, unavailable
from .mounts import mount_of

SECTOR_BYTES = 512  # /sys/.../stat counts 512-byte sectors on every device
MACOS_VALIDATION = "macOS path run only against injected test doubles on Linux, not on real Mac hardware"
NO_PROC_IO = "/proc/self/io is Linux only"
NO_SYS_BLOCK = "per-device sector counts come from /sys/class/block (Linux); macOS offers them to an "
NO_SYS_BLOCK += "unprivileged process only through IOKit, which disklab does not read"
RUSAGE_INFO_V2 = 2
# Byte offsets in macOS <sys/resource.h> struct rusage_info_v2: 16-byte uuid, then uint64 fields.
_RI_DISKIO_READ_OFFSET = 16 + 16 * 8
_RI_DISKIO_WRITTEN_OFFSET = _RI_DISKIO_READ_OFFSET + 8
_RI_V2_SIZE = 16 + 20 * 8


def parse_proc_io(text: str) -> dict:
    """``read_bytes`` and ``write_bytes`` from the text of /proc/PID/io; ValueError when one is missing."""
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("read_bytes", "write_bytes"):
            found[key] = int(value)
    missing = sorted({"read_bytes", "write_bytes"} - set(found))
    if missing:
        raise ValueError(f"/proc/self/io lacks {missing}")
    return found


def parse_block_stat(text: str) -> dict:
    """Sectors read and written (fields 3 and 7) from a /sys/class/block/<name>/stat line."""
    fields = text.split()
    if len(fields) < 7:
        raise ValueError(f"a block stat line has at least 7 fields, got {len(fields)}: {text!r}")
    return {"sectors_read": int(fields[2]), "sectors_written": int(fields[6])}


def _mount_source(path: str, root: Path) -> str | None:
    """The source of the mount holding ``path`` (the longest mount point that contains it)."""
    return _mount_entry(path, root)[0]


def _mount_entry(path: str, root: Path) -> tuple[str | None, str | None]:
    """(source, filesystem type) of the mount holding ``path`` (common.mounts); (None, None) unread."""
    found = mount_of(path, root)
    return found["source"], found["fstype"]


def no_device_reason(path: str | os.PathLike, fstype: str | None, source: str | None, majmin: str) -> str:
    """Why no block device counts the reads of ``path``, in the words of its filesystem type."""
    where = f"no block device behind {path}"
    if fstype and (fstypes.is_fuse(fstype) or fstypes.is_network(fstype)):
        server = f" from {source}" if source else ""
        kind = "a network filesystem" if fstypes.is_network(fstype) else "a FUSE filesystem"
        return (
            f"{where}: it is on {fstype}, {kind}, whose reads go to its daemon or server{server}, not to a "
            "local block device, so no device counter on this host sees them"
        )
    if fstype in fstypes.RAM_TYPES:
        return f"{where}: it is on {fstype}, which lives in RAM: nothing is read from a device"
    return (
        f"{where}: st_dev {majmin} has no /sys/dev/block entry and its mount source is {source!r}"
        f"{f' ({fstype})' if fstype else ''} (tmpfs, overlay, network and FUSE filesystems have none)"
    )


def device_of(path: str | os.PathLike, *, system: str | None = None, root: Path = Path("/")) -> dict:
    """The block device whose /sys stat counts the I/O of ``path``.

    Returns ``{"name", "stat_path", "found_by"}`` (name as in /sys/class/block:
    vda, nvme0n1p2, loop3, dm-0, sda1) or ``{"unavailable": reason}`` on macOS,
    on a filesystem with no block device (tmpfs, overlay, network, FUSE), or
    when neither st_dev nor the mount source leads to a /sys entry. ``root``
    prefixes /sys and /proc (tests).
    """
    system = system or platform.system()
    if system != "Linux":
        return unavailable(NO_SYS_BLOCK if system == "Darwin" else f"no /sys/class/block on {system}")
    st = os.stat(path)
    majmin = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    link = root / "sys/dev/block" / majmin
    if link.exists():
        name = Path(os.path.realpath(link)).name
        found_by = f"st_dev {majmin} through /sys/dev/block"
    else:
        source, fstype = _mount_entry(str(path), root)
        if not source or not source.startswith("/dev/"):
            return unavailable(no_device_reason(path, fstype, source, majmin))
        name = Path(os.path.realpath(root / source.lstrip("/"))).name  # /dev/mapper/vg-lv -> dm-0
        found_by = f"mount source {source} (st_dev {majmin} has no /sys/dev/block entry)"
    stat_path = root / "sys/class/block" / name / "stat"
    if not stat_path.exists():
        return unavailable(f"{name}, the device behind {path}, has no {stat_path}")
    return {"name": name, "stat_path": str(stat_path), "found_by": found_by}


def _macos_rusage_fn():
    """proc_pid_rusage from libproc, or an unavailable fact saying why it cannot be reached."""
    name = ctypes.util.find_library("proc") or ctypes.util.find_library("System")
    if not name:
        return unavailable("libproc (proc_pid_rusage) not found")
    try:
        fn = ctypes.CDLL(name, use_errno=True).proc_pid_rusage
    except (OSError, AttributeError) as exc:
        return unavailable(f"proc_pid_rusage not reachable: {exc}")
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_int

    def call() -> dict:
        buf = ctypes.create_string_buffer(_RI_V2_SIZE)
        if fn(os.getpid(), RUSAGE_INFO_V2, buf) != 0:
            raise OSError(ctypes.get_errno(), "proc_pid_rusage(RUSAGE_INFO_V2) failed")
        raw = buf.raw
        return {
            "read_bytes": int.from_bytes(raw[_RI_DISKIO_READ_OFFSET : _RI_DISKIO_READ_OFFSET + 8], "little"),
            "write_bytes": int.from_bytes(
                raw[_RI_DISKIO_WRITTEN_OFFSET : _RI_DISKIO_WRITTEN_OFFSET + 8], "little"
            ),
        }

    return call


class Recorder:
    """Reads the counters of :func:`begin`/:func:`end` for one process and one device.

    ``path`` is the file whose device is recorded (:func:`device_of`), or None
    for no device. ``system`` and ``rusage_fn`` (macOS proc_pid_rusage, a
    callable returning ``{"read_bytes", "write_bytes"}``) are injectable, as is
    ``root`` (prefix of /proc and /sys). ``enabled=False``: :meth:`begin` and
    :meth:`end` do no reads and :meth:`end` returns None.
    """

    def __init__(
        self,
        path: str | os.PathLike | None,
        *,
        enabled: bool = True,
        system: str | None = None,
        root: Path = Path("/"),
        rusage_fn=None,
        getrusage=resource.getrusage,
    ) -> None:
        self.enabled = enabled
        self.system = system or platform.system()
        self.root = Path(root)
        self._getrusage = getrusage
        if not enabled:
            return
        if path is None:
            self.device = unavailable("no file named for this interval, so no device")
        else:
            self.device = device_of(path, system=self.system, root=self.root)
        self._proc_io = self.root / "proc/self/io"
        self._rusage_fn = None
        if self.system == "Darwin":
            self._rusage_fn = rusage_fn if rusage_fn is not None else _macos_rusage_fn()

    def _process(self):
        if self.system == "Linux":
            try:
                return parse_proc_io(self._proc_io.read_text())
            except (OSError, ValueError) as exc:
                return unavailable(f"/proc/self/io: {exc}")
        if self.system == "Darwin":
            if is_unavailable(self._rusage_fn):
                return self._rusage_fn
            try:
                return self._rusage_fn()
            except OSError as exc:
                return unavailable(f"proc_pid_rusage: {exc}")
        return unavailable(f"{NO_PROC_IO}; this host runs {self.system}")

    def _device(self):
        if is_unavailable(self.device):
            return self.device
        try:
            return parse_block_stat(Path(self.device["stat_path"]).read_text())
        except (OSError, ValueError) as exc:
            return unavailable(f"{self.device['stat_path']}: {exc}")

    def read(self) -> dict | None:
        """The counters now (raw), or None when disabled."""
        if not self.enabled:
            return None
        ru = self._getrusage(resource.RUSAGE_SELF)
        return {
            "process": self._process(),
            "device": self._device(),
            "ru": (ru.ru_majflt, ru.ru_minflt, ru.ru_inblock, ru.ru_oublock),
        }

    begin = read

    def end(self, before: dict | None, interval: str | None = None) -> dict | None:
        """The record of the interval since ``before`` (:meth:`begin`'s answer), or None when disabled."""
        if not self.enabled or before is None:
            return None
        return delta(before, self.read(), self.device, self.system, interval)


def _diff(a, b, keys) -> dict:
    if is_unavailable(a):
        return a
    if is_unavailable(b):
        return b
    return {k: b[k] - a[k] for k in keys}


def delta(before: dict, after: dict, device: dict, system: str, interval: str | None = None) -> dict:
    """The I/O record of one interval from two raw readings (see the module doc for the fields)."""
    proc = _diff(before["process"], after["process"], ("read_bytes", "write_bytes"))
    if not is_unavailable(proc):
        source = "/proc/self/io" if system == "Linux" else "proc_pid_rusage(RUSAGE_INFO_V2) ri_diskio_bytes*"
        proc = {**proc, "source": source}
    dev = _diff(before["device"], after["device"], ("sectors_read", "sectors_written"))
    if not is_unavailable(dev):
        dev = {
            "name": device["name"],
            "stat_path": device["stat_path"],
            "found_by": device["found_by"],
            **dev,
            "read_bytes": dev["sectors_read"] * SECTOR_BYTES,
            "written_bytes": dev["sectors_written"] * SECTOR_BYTES,
            "scope": f"device-wide: every process's I/O on {device['name']} in the interval counts",
        }
    b, a = before["ru"], after["ru"]
    out = {
        "interval": interval,
        "process": proc,
        "device": dev,
        "faults": {"major": a[0] - b[0], "minor": a[1] - b[1], "source": "getrusage(RUSAGE_SELF)"},
        "blocks": {
            "in": a[2] - b[2],
            "out": a[3] - b[3],
            "source": "getrusage(RUSAGE_SELF) ru_inblock, ru_oublock: 512-byte blocks on Linux, block "
            "operations on macOS",
        },
    }
    if system == "Darwin":
        out["validation"] = MACOS_VALIDATION
    return out


def not_recorded(reason: str) -> dict:
    """The I/O record field of an interval that has none (switched off, or an older run)."""
    return unavailable(f"no I/O record: {reason}")


def combine(records: list[dict], interval: str) -> dict:
    """One I/O record for several intervals (an fsync mode's rounds): each counter summed, the other
    fields of the first record kept; an unavailable part (in any record) stays unavailable."""
    if not records:
        return not_recorded("no interval was timed")
    if any(is_unavailable(r) for r in records):
        return next(r for r in records if is_unavailable(r))
    first = records[0]
    out = {**first, "interval": interval, "intervals": len(records)}
    for part, keys in (
        ("process", ("read_bytes", "write_bytes")),
        ("device", ("sectors_read", "sectors_written", "read_bytes", "written_bytes")),
        ("faults", ("major", "minor")),
        ("blocks", ("in", "out")),
    ):
        parts = [r.get(part) for r in records]
        if any(p is None or is_unavailable(p) for p in parts):
            out[part] = next((p for p in parts if p is None or is_unavailable(p)), None)
            continue
        out[part] = {**first[part], **{k: sum(p[k] for p in parts) for k in keys if k in first[part]}}
    return out
