"""Page cache control for the load lab: residency (mincore), eviction and warming.

Every load measurement names its cache state, so the runner makes a file cold
or warm before each one and checks the result with mincore:

- :func:`residency` counts the bytes of a file resident in the page cache
  (mincore(2) over a read-only shared mapping of the file, through ctypes,
  since Python's standard library has no mincore).
- :func:`evict` makes a file cold with the first method that works, in the
  order given (by default :data:`DEFAULT_METHODS`, the order docs/fleet.md
  documents), and records every attempt with the residency after it
  (fadvise_dontneed, drop_caches, coldcopy_nocache, purge). The user's file is
  never changed: a method that must copy writes its cold copy into a scratch
  directory, and evict says which file the caller must time.
- :func:`warm` reads the whole file once, so its pages are in the page cache.
- :func:`open_keeps_cache` reads a file through one descriptor and checks, on
  that same descriptor, whether a second open(2) of it left its pages cached:
  a FUSE filesystem whose daemon opens files without FOPEN_KEEP_CACHE (sshfs
  without ``-o kernel_cache``) drops a file's page cache at every open, so no
  file there can be warm for a loader that opens it, and a residency probe
  that opens the file empties what it measures (:class:`HeldResidency` opens
  once, before a load, and reads every later probe on that descriptor).
- :func:`madvise_willneed` hints that a whole file is about to be read, with
  madvise(2) over a mapping made through ctypes (:data:`WILLNEED_HINTS` names
  each way a hint is given, for the results and the report).
- :func:`cachestat` counts a file's cached, dirty and writeback pages with
  cachestat(2) (Linux 6.5+, syscall 451 on x86_64 and aarch64, the
  architectures disklab knows it for), and :func:`cache_state` answers with
  cachestat where the kernel has it and mincore otherwise, naming which.

Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import mmap
import os
from pathlib import Path

from ..common import asroot
from ..common.fsio import fsync_dir
from ..common.units import MIB
from . import coldcopy

EVICTION_METHODS = ("fadvise_dontneed", "drop_caches", "coldcopy_nocache", "purge")
# Tried in this order when the caller names none; docs/fleet.md ("Making a file cold") documents the same
# order and tests/test_cache.py checks that both agree. Per-file, in-place methods come first on Linux;
# on macOS purge (global, root) comes first because it leaves the user's own file to be timed, and
# coldcopy_nocache, which times a copy instead, is the fallback without root.
DEFAULT_METHODS = {
    "Linux": ("fadvise_dontneed", "drop_caches"),
    "Darwin": ("purge", "coldcopy_nocache"),
}
# Methods that make a cold copy instead of evicting the file itself: they need scratch_dir.
COPYING_METHODS = ("coldcopy_nocache",)
COLD_COPY_SUFFIX = ".coldcopy"
# A cold run is verified only at or below this resident fraction before its start.
COLD_MAX_FRACTION = 0.01
# open_keeps_cache: a second open(2) keeps the cache when at least this share of what a read cached stays.
WARM_AFTER_REOPEN = 0.9
DROP_CACHES = "/proc/sys/vm/drop_caches"
# Linux >= 5.2 reports every page of a file the caller may not write as resident
# (kernel commit "mm/mincore.c: make mincore() more conservative").
UNTRUSTED_TRUST = (
    "unverifiable: the caller cannot write this file, and on Linux 5.2+ mincore reports "
    "every page of such a file as resident"
)

# cachestat(2): syscall 451 on x86_64 (arch/x86/entry/syscalls/syscall_64.tbl) and aarch64
# (include/uapi/asm-generic/unistd.h), Linux 6.5+; other architectures are not checked here.
CACHESTAT_NR = 451
# Architectures whose syscall table gives cachestat CACHESTAT_NR (platform.machine() names).
CACHESTAT_MACHINES = ("x86_64", "aarch64", "arm64")

# Each way the load lab gives load_file+willneed's hint (the record's ``hint``), and what it did.
# CPython's mmap.mmap(fd, ...) calls fcntl(fd, F_FULLFSYNC) on macOS (Modules/mmapmodule.c), a drive
# cache flush inside the timed load, so the macOS hint maps the file through ctypes instead.
FADVISE_WILLNEED = "posix_fadvise(POSIX_FADV_WILLNEED)"
MADVISE_WILLNEED_CTYPES = "madvise(MADV_WILLNEED) on a ctypes mmap"
MADVISE_WILLNEED_PY_MMAP = "madvise(MADV_WILLNEED)"  # older results only: over CPython's mmap.mmap
WILLNEED_HINTS = {
    FADVISE_WILLNEED: "posix_fadvise(2) POSIX_FADV_WILLNEED over the whole file (Linux)",
    MADVISE_WILLNEED_CTYPES: (
        "madvise(2) MADV_WILLNEED over a read-only mapping made with libc's mmap(2) through ctypes "
        "(macOS), not CPython's mmap.mmap, which on macOS also calls fcntl(F_FULLFSYNC)"
    ),
    MADVISE_WILLNEED_PY_MMAP: (
        "madvise(2) MADV_WILLNEED over CPython's mmap.mmap: on macOS that mapping also called "
        "fcntl(F_FULLFSYNC), a drive cache flush, inside the timed load, so this figure includes one"
    ),
}

_libc = None


def _c():
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.syscall.restype = ctypes.c_long
        _libc = lib
    return _libc


def page_size() -> int:
    """The VM page size in bytes (os.sysconf("SC_PAGE_SIZE"))."""
    return os.sysconf("SC_PAGE_SIZE")


def residency_trust(path: str | os.PathLike, system: str | None = None) -> str:
    """``"ok"`` when mincore's answer for ``path`` can be believed, else ``"unverifiable: ..."``.

    On Linux 5.2+ mincore on a file mapping reports real page cache state only
    when the caller owns the file, may write it, or has CAP_FOWNER; otherwise
    it reports every page resident (kernel commit "mm/mincore.c: make mincore()
    more conservative"). Root passes all three checks.
    """
    system = system or os.uname().sysname
    if system != "Linux" or os.geteuid() == 0:
        return "ok"
    if os.stat(path).st_uid == os.geteuid() or os.access(path, os.W_OK):
        return "ok"
    return UNTRUSTED_TRUST


def residency(path: str | os.PathLike) -> dict:
    """Bytes of ``path`` resident in the page cache, from mincore(2).

    Maps the file read-only and shared (mmap(2)), asks mincore for one status
    byte per page (bit 0 set: resident), and unmaps it. Mapping does not read
    the file; opening it does, on a workbench whose open(2) drops the page
    cache (see :class:`HeldResidency`, which opens once for many probes).

    Returns ``{"resident_bytes", "size_bytes", "fraction", "pages_resident",
    "pages_total", "trust"}``: bytes are exact (a resident last page counts
    only up to the end of file), fraction is resident_bytes / size_bytes in
    [0, 1] (0.0 for an empty file), trust as :func:`residency_trust`.
    Raises OSError (with errno) when the file cannot be opened or mapped.
    """
    with HeldResidency([path]) as held:
        return held.residency()[0]


def _mincore_residency(addr: int, size: int, path: str | os.PathLike, trust: str) -> dict:
    """:func:`residency`'s dict for the ``size`` bytes of ``path`` mapped at ``addr``, from mincore(2)."""
    if size == 0:
        return _residency_dict(0, 0, 0, 0, trust)
    ps = page_size()
    pages = (size + ps - 1) // ps
    vec = (ctypes.c_ubyte * pages)()
    if _c().mincore(addr, size, vec) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mincore on {path} failed: {os.strerror(err)}")
    flags = bytes(vec)
    resident_pages = sum(b & 1 for b in flags)
    resident = resident_pages * ps
    if flags[-1] & 1:
        resident -= pages * ps - size  # the last page holds only the file's tail
    return _residency_dict(resident, size, resident_pages, pages, trust)


class HeldResidency:
    """Files opened and mapped once, whose residency is then read on those mappings, opening nothing.

    A probe that opened the file each time would change what it measures where open(2) drops a file's
    page cache (FUSE without FOPEN_KEEP_CACHE, as sshfs mounts by default; see :func:`open_keeps_cache`):
    there each open empties the cache, mapped pages included, so a probe at every stop event would make a
    mapped loader read the file again. Opened before the load call, one HeldResidency reads every stop
    event's residency on the same descriptors. A mapping that is never touched reads nothing and holds no
    page, so it neither warms the file nor keeps it from eviction. Use it as a context manager, or call
    :meth:`close`; raises OSError when a file cannot be opened or mapped (what is open by then is closed).
    """

    def __init__(self, paths: list[str | os.PathLike]):
        self._held: list[tuple[str | os.PathLike, int | None, int, str]] = []
        with contextlib.ExitStack() as stack:
            for path in paths:
                fd = os.open(path, os.O_RDONLY)
                stack.callback(os.close, fd)
                size = os.fstat(fd).st_size
                addr = stack.enter_context(_fd_mapped(fd, size, path, "mincore")) if size else None
                self._held.append((path, addr, size, residency_trust(path)))
            self._stack = stack.pop_all()  # held until close

    def residency(self) -> list[dict]:
        """Each file's :func:`residency` dict now, in the order given."""
        return [_mincore_residency(addr, size, path, trust) for path, addr, size, trust in self._held]

    def close(self) -> None:
        self._held = []
        self._stack.close()

    def __enter__(self) -> HeldResidency:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def _fd_mapped(fd: int, size: int, name: str | os.PathLike, what: str):
    """A read-only shared mapping of ``size`` bytes of the open file ``fd`` (``name`` in errors), made with
    libc's mmap(2) through ctypes (never CPython's mmap.mmap, which on macOS calls fcntl(F_FULLFSYNC));
    yields its address and unmaps it after. Raises OSError naming ``what`` the mapping was for."""
    libc = _c()
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {name} for {what} failed: {os.strerror(err)}")
    try:
        yield addr
    finally:
        libc.munmap(addr, size)


@contextlib.contextmanager
def _mapped(path: str | os.PathLike, size: int, what: str):
    """:func:`_fd_mapped` of ``path``, opened read-only for the mapping and closed after it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with _fd_mapped(fd, size, path, what) as addr:
            yield addr
    finally:
        os.close(fd)


def madvise_willneed(path: str | os.PathLike) -> str:
    """Hint that all of ``path`` is about to be read: madvise(2) MADV_WILLNEED over a read-only mapping
    made through ctypes (:func:`_mapped`); returns MADVISE_WILLNEED_CTYPES. The mapping is gone on
    return; the hint starts the reads. Raises OSError when the file cannot be mapped or advised."""
    size = os.stat(path).st_size
    if size:
        with _mapped(path, size, "madvise") as addr:
            if _c().madvise(addr, size, mmap.MADV_WILLNEED) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"madvise(MADV_WILLNEED) on {path} failed: {os.strerror(err)}")
    return MADVISE_WILLNEED_CTYPES


def _residency_dict(resident: int, size: int, pages_resident: int, pages: int, trust: str) -> dict:
    return {
        "resident_bytes": resident,
        "size_bytes": size,
        "fraction": resident / size if size else 0.0,
        "pages_resident": pages_resident,
        "pages_total": pages,
        "trust": trust,
    }


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [
        ("nr_cache", ctypes.c_uint64),
        ("nr_dirty", ctypes.c_uint64),
        ("nr_writeback", ctypes.c_uint64),
        ("nr_evicted", ctypes.c_uint64),
        ("nr_recently_evicted", ctypes.c_uint64),
    ]


class CachestatUnavailable(OSError):
    """cachestat(2) cannot answer here: not Linux, an unknown architecture, a kernel before 6.5 (ENOSYS),
    or EPERM (the same write-permission rule as mincore). The message says which."""


def cachestat_unavailable_reason(system: str | None = None, machine: str | None = None) -> str | None:
    """Why cachestat(2) cannot be called on this host before trying it, or None when it can be tried."""
    system = system or os.uname().sysname
    machine = machine or os.uname().machine
    if system != "Linux":
        return f"cachestat(2) is a Linux 6.5+ system call; this host runs {system}"
    if machine not in CACHESTAT_MACHINES:
        return f"cachestat's syscall number is known here for {list(CACHESTAT_MACHINES)}, not {machine}"
    return None


def cachestat(path: str | os.PathLike) -> dict:
    """The page cache's counts for the whole of ``path``, from cachestat(2), in pages and bytes.

    Returns ``{"method": "cachestat", "pages_cached", "pages_dirty",
    "pages_writeback", "pages_evicted", "pages_recently_evicted",
    "pages_total", "cached_bytes", "dirty_bytes", "writeback_bytes",
    "size_bytes", "fraction"}``: fraction is cached pages over the file's pages
    (a resident last page counts whole, so a file of a few bytes is 0 or 1).
    Raises :class:`CachestatUnavailable` when the call cannot answer (see its
    doc) and OSError when the file cannot be opened.
    """
    reason = cachestat_unavailable_reason()
    if reason:
        raise CachestatUnavailable(reason)
    size = os.stat(path).st_size
    rng, cs = _CachestatRange(0, 0), _Cachestat()  # len 0: to the end of the file
    fd = os.open(path, os.O_RDONLY)
    try:
        if _c().syscall(CACHESTAT_NR, fd, ctypes.byref(rng), ctypes.byref(cs), 0) != 0:
            err = ctypes.get_errno()
            why = {
                errno.ENOSYS: "this kernel has no cachestat(2) (added in Linux 6.5)",
                errno.EPERM: "cachestat(2) refused (EPERM): like mincore, it answers only for a file the "
                "caller owns, may write, or holds CAP_FOWNER over",
            }.get(err)
            if why:
                raise CachestatUnavailable(err, why)
            raise OSError(err, f"cachestat on {path} failed: {os.strerror(err)}")
    finally:
        os.close(fd)
    ps = page_size()
    pages = (size + ps - 1) // ps
    return {
        "method": "cachestat",
        "pages_cached": cs.nr_cache,
        "pages_dirty": cs.nr_dirty,
        "pages_writeback": cs.nr_writeback,
        "pages_evicted": cs.nr_evicted,
        "pages_recently_evicted": cs.nr_recently_evicted,
        "pages_total": pages,
        "cached_bytes": min(cs.nr_cache * ps, size),
        "dirty_bytes": cs.nr_dirty * ps,
        "writeback_bytes": cs.nr_writeback * ps,
        "size_bytes": size,
        "fraction": min(1.0, cs.nr_cache / pages) if pages else 0.0,
    }


def cache_state(path: str | os.PathLike) -> dict:
    """Residency of ``path`` just now: cachestat(2) where it answers, else mincore with its trust caveat.

    Returns ``{"method": "cachestat" | "mincore", "fraction", "resident_bytes",
    "trust", "dirty_bytes", "writeback_bytes", "cachestat_unavailable"}``; the
    dirty and writeback counts are ``{"unavailable": reason}`` with mincore,
    which cannot see them, and ``cachestat_unavailable`` says why cachestat was
    not used (None when it was). ``trust`` is "ok" for cachestat (it refuses
    with EPERM instead of answering falsely) and :func:`residency_trust` for mincore.
    """
    try:
        cs = cachestat(path)
    except CachestatUnavailable as exc:
        why = exc.strerror or str(exc)
        res = residency(path)
        missing = {"unavailable": f"mincore shows residency only: {why}"}
        return {
            "method": "mincore",
            "fraction": res["fraction"],
            "resident_bytes": res["resident_bytes"],
            "trust": res["trust"],
            "dirty_bytes": missing,
            "writeback_bytes": missing,
            "cachestat_unavailable": why,
        }
    return {
        "method": "cachestat",
        "fraction": cs["fraction"],
        "resident_bytes": cs["cached_bytes"],
        "trust": "ok",
        "dirty_bytes": cs["dirty_bytes"],
        "writeback_bytes": cs["writeback_bytes"],
        "cachestat_unavailable": None,
    }


# What the load lab says of a workbench whose open(2) drops a file's page cache (see open_keeps_cache).
OPEN_DROPS_CACHE = (
    "this workbench drops a file's page cache at every open(2): {after_read} of the file was cached after "
    "a read, {after_reopen} once it was opened again ({method} on the reading descriptor). A FUSE "
    "filesystem does this when its daemon opens files without FOPEN_KEEP_CACHE (sshfs without "
    "`-o kernel_cache` or `-o auto_cache`), so a loader that opens the file always starts with none of "
    "it cached: no warm run is possible here, and a residency probe that opens the file empties the cache "
    "it measures"
)
READ_NOT_CACHED = (
    "a read of the whole file left only {after_read} of it in the page cache ({method}): this workbench "
    "bypasses the page cache (direct I/O, as FUSE's FOPEN_DIRECT_IO or sshfs `-o direct_io` does), so no "
    "warm run is possible here"
)


def _fd_fraction(fd: int, size: int) -> tuple[float, str]:
    """The cached fraction of the open file ``fd`` of ``size`` bytes, without opening it again: cachestat(2)
    on ``fd`` where it answers, else mincore over a mapping of ``fd``; returns (fraction, method)."""
    if size == 0:
        return 0.0, "none (empty file)"
    ps = page_size()
    pages = (size + ps - 1) // ps
    if cachestat_unavailable_reason() is None:
        rng, cs = _CachestatRange(0, 0), _Cachestat()
        if _c().syscall(CACHESTAT_NR, fd, ctypes.byref(rng), ctypes.byref(cs), 0) == 0:
            return min(1.0, cs.nr_cache / pages), "cachestat"
    with _fd_mapped(fd, size, f"descriptor {fd}", "mincore") as addr:
        res = _mincore_residency(addr, size, f"descriptor {fd}", "ok")
    return res["pages_resident"] / pages, "mincore"


def open_keeps_cache(path: str | os.PathLike) -> dict:
    """Whether opening ``path`` again leaves its page cache in place; leaves the file warm where it does.

    Reads the whole file through one descriptor, measures its cached fraction
    on that descriptor (:func:`_fd_fraction`, which opens nothing), opens and
    closes the file a second time, and measures again on the first
    descriptor. On a local filesystem nothing changes. FUSE drops the cache
    at an open whose reply lacks FOPEN_KEEP_CACHE (the kernel's
    fs/fuse/file.c, fuse_finish_open: invalidate_inode_pages2), which sshfs
    sends unless mounted with ``-o kernel_cache`` or ``auto_cache``.

    Returns ``{"keeps_cache": bool, "after_read_fraction",
    "after_reopen_fraction", "method", "why"}``: ``keeps_cache`` is False
    when the read cached less than WARM_AFTER_REOPEN of the file (``why``:
    READ_NOT_CACHED) or the second open left less than WARM_AFTER_REOPEN of
    what the read had cached (``why``: OPEN_DROPS_CACHE); ``why`` is None
    when it keeps. Raises OSError when the file cannot be read.
    """
    size = os.stat(path).st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(8 * MIB)
        with open(fd, "rb", buffering=0, closefd=False) as f:
            while f.readinto(buf):
                pass
        after_read, method = _fd_fraction(fd, size)
        os.close(os.open(path, os.O_RDONLY))
        after_reopen, _ = _fd_fraction(fd, size)
    finally:
        os.close(fd)
    words = {"after_read": f"{100 * after_read:.1f} %", "after_reopen": f"{100 * after_reopen:.1f} %"}
    keeps, why = True, None
    if size and after_read < WARM_AFTER_REOPEN:
        keeps, why = False, READ_NOT_CACHED.format(**words, method=method)
    elif after_reopen < WARM_AFTER_REOPEN * after_read:
        keeps, why = False, OPEN_DROPS_CACHE.format(**words, method=method)
    return {
        "keeps_cache": keeps,
        "after_read_fraction": after_read,
        "after_reopen_fraction": after_reopen,
        "method": method,
        "why": why,
    }


def warm(path: str | os.PathLike) -> int:
    """Read ``path`` once from start to end so its pages are in the page cache; return bytes read."""
    buf = bytearray(8 * MIB)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    return total


def evict(
    path: str | os.PathLike,
    methods: list[str] | tuple[str, ...] | None = None,
    *,
    become_allowed: bool,
    system: str | None = None,
    scratch_dir: str | os.PathLike | None = None,
    fcntl_mod=None,
) -> dict:
    """Make ``path`` cold: try each eviction method in order until one works; never change ``path``.

    A method works when it runs without error and mincore then finds at most
    ``COLD_MAX_FRACTION`` of the file to be timed resident (when mincore can be
    trusted). Methods, with their sources:

    - ``fadvise_dontneed`` (Linux, no root): fsync, then posix_fadvise(2)
      POSIX_FADV_DONTNEED over the whole file. Dirty pages are written first
      because DONTNEED drops only clean ones. In place.
    - ``drop_caches`` (Linux; euid 0, or ``become_allowed`` through ``sudo -n``):
      sync, then write 3 to /proc/sys/vm/drop_caches (proc(5)). Global: it
      empties the page cache of the whole machine, not just this file. In place.
    - ``coldcopy_nocache`` (macOS): copy the file with F_NOCACHE and F_FULLFSYNC
      to ``scratch_dir/<name>.coldcopy`` (the lesson's coldcopy.py); the
      original is only read. Refused (a failed attempt) without ``scratch_dir``,
      or when the copy would be the original itself. A copy that is not cold is
      deleted.
    - ``purge`` (macOS; euid 0, or ``become_allowed`` through ``sudo -n``):
      purge(8), global. In place.

    ``scratch_dir`` is a directory in the workbench for copying methods;
    ``fcntl_mod`` replaces the fcntl module in coldcopy (tests).

    Returns ``{"method": name or None, "attempts": [{"method", "ok", "error",
    "fraction_after", "residency_path", "residency_trust"}], "fraction_after":
    float, "timed_path": str}``: each attempt's ``fraction_after`` is the
    resident fraction of ``residency_path`` right after it (the cold copy for a
    copying method that made one, else ``path``; None when mincore failed);
    ``timed_path`` is the file the caller must time: ``path`` for an in-place
    method or when every method failed (``method`` None), the cold copy for a
    copying method. Raises ValueError naming the rule for an unknown method.
    """
    system = system or os.uname().sysname
    methods = list(methods if methods is not None else DEFAULT_METHODS.get(system, ()))
    unknown = [m for m in methods if m not in EVICTION_METHODS]
    if unknown:
        raise ValueError(f"eviction methods must be among {list(EVICTION_METHODS)}, got {unknown}")
    ctx = _Context(become_allowed, system, None if scratch_dir is None else Path(scratch_dir), fcntl_mod)
    path = Path(path)
    attempts = []
    fraction = residency(path)["fraction"]
    for method in methods:
        measured, copy = path, None
        try:
            copy = _METHODS[method](path, ctx)
            measured = copy or path
            res = residency(measured)
            if res["trust"] == "ok" and res["fraction"] > COLD_MAX_FRACTION:
                raise RuntimeError(
                    f"{100 * res['fraction']:.1f} % of {measured.name} still resident after {method}"
                )
        except Exception as exc:  # recorded; the next method is tried
            attempt = {"method": method, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            attempt.update(_residency_after(measured))
            if copy is not None:  # a copy that is not cold is of no use: the original is timed instead
                copy.unlink(missing_ok=True)
            elif attempt["fraction_after"] is not None:
                fraction = attempt["fraction_after"]
            attempts.append(attempt)
            continue
        attempts.append(
            {
                "method": method,
                "ok": True,
                "error": None,
                "fraction_after": res["fraction"],
                "residency_path": str(measured),
                "residency_trust": res["trust"],
            }
        )
        return {
            "method": method,
            "attempts": attempts,
            "fraction_after": res["fraction"],
            "timed_path": str(measured),
        }
    return {"method": None, "attempts": attempts, "fraction_after": fraction, "timed_path": str(path)}


def _residency_after(path: Path) -> dict:
    """An attempt's residency fields for ``path``; fraction None when mincore cannot answer."""
    try:
        res = residency(path)
    except OSError as exc:
        return {"fraction_after": None, "residency_path": str(path), "residency_trust": f"unmeasured: {exc}"}
    return {"fraction_after": res["fraction"], "residency_path": str(path), "residency_trust": res["trust"]}


class _Context:
    """What every eviction method may use: become, the OS, the scratch directory, the fcntl module."""

    def __init__(self, become_allowed: bool, system: str, scratch_dir: Path | None, fcntl_mod) -> None:
        self.become_allowed = become_allowed
        self.system = system
        self.scratch_dir = scratch_dir
        self.fcntl_mod = fcntl_mod


def cold_copy_path(path: str | os.PathLike, scratch_dir: str | os.PathLike) -> Path:
    """Where a copying method writes the cold copy of ``path``: ``scratch_dir/<name>.coldcopy``."""
    return Path(scratch_dir) / (Path(path).name + COLD_COPY_SUFFIX)


def _require(system: str, wanted: str, method: str) -> None:
    if system != wanted:
        raise OSError(f"{method} works on {wanted} only, this host is {system}")


# What a refused become costs the cold path: the eviction that needs no root still works.
_NO_ROOT_HINT = "fadvise_dontneed needs no root"


def _fadvise_dontneed(path: Path, ctx: _Context) -> None:
    _require(ctx.system, "Linux", "fadvise_dontneed")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _drop_caches(path: Path, ctx: _Context) -> None:
    _require(ctx.system, "Linux", "drop_caches")
    asroot.prefix(ctx.become_allowed, "drop_caches")  # refused before the sync when it cannot run
    os.sync()
    asroot.write_file(DROP_CACHES, b"3", ctx.become_allowed, "drop_caches", _NO_ROOT_HINT)


def _coldcopy_nocache(path: Path, ctx: _Context) -> Path:
    """Copy ``path`` past the cache into the scratch directory; return the copy. ``path`` is only read."""
    _require(ctx.system, "Darwin", "coldcopy_nocache")
    if ctx.scratch_dir is None:
        raise ValueError(
            "coldcopy_nocache makes a cold copy and needs scratch_dir (a directory in the workbench); "
            "it never replaces the original file"
        )
    dst = cold_copy_path(path, ctx.scratch_dir)
    if dst.resolve() == path.resolve() or (dst.exists() and os.path.samefile(dst, path)):
        raise ValueError(f"the cold copy {dst} would be the original file itself; use another scratch_dir")
    dst.unlink(missing_ok=True)  # never write through an old copy's name (a link made since)
    try:
        coldcopy.coldcopy(path, dst, fcntl_mod=ctx.fcntl_mod)
    except BaseException:
        dst.unlink(missing_ok=True)
        raise
    fsync_dir(dst.parent)
    return dst


def _purge(path: Path, ctx: _Context) -> None:
    _require(ctx.system, "Darwin", "purge")
    prefix = asroot.prefix(ctx.become_allowed, "purge")
    os.sync()
    asroot.run(prefix + ["purge"], "purge", _NO_ROOT_HINT, timeout=300)


_METHODS = {
    "fadvise_dontneed": _fadvise_dontneed,
    "drop_caches": _drop_caches,
    "coldcopy_nocache": _coldcopy_nocache,
    "purge": _purge,
}
