"""The host's own ceilings: how fast this workbench reads a file cold, one stream and in parallel, and warm.

The load figures are read against them, measured in the same run on the same
workbench: a cold load that reached 90 % of a cold ceiling is bound by the
storage; one far below both is bound by the loader; a "cold" read faster than
both was probably served by a cache below this OS (the hypervisor's, a RAID
controller's, a network filer's).

One file of ``ceiling_mib`` MiB of pseudo-random bytes is written and fsynced.
Then, ``REPEATS`` times each:

- ``cold`` (the single-stream ceiling): the file is evicted (cache.evict, the
  load step's methods), its residency checked just before the read
  (cache.cache_state: cachestat, else mincore), and it is read start to end
  with ``readinto`` calls of ``READ_BYTES`` (8 MiB) on an unbuffered file,
  buffered I/O through the page cache as a loader does (no O_DIRECT). The
  read's I/O record (common.iorecord) shows what the device delivered; a run
  is ``proven`` cold when residency was at most 1 % before it and the device
  delivered at least the file's size during it.
- ``parallel`` (the parallel ceiling): evicted and checked the same way, then
  read as a production loader reads: ``ceiling_streams`` threads, each
  reading its own contiguous slice of the file front to back with
  os.preadv calls of ``ceiling_block_bytes`` into its own page-aligned buffer
  (os.preadv releases the GIL, so the threads' reads are in flight at once:
  a queue depth of ``ceiling_streams``), on a descriptor opened with O_DIRECT
  (``ceiling_direct`` 1; on macOS fcntl F_NOCACHE instead), or through the
  page cache (``ceiling_direct`` 0). Proven the same way. With O_DIRECT the
  page cache is bypassed: the residency check then shows no cached copy of the
  file existed to be confused with (and the residency after the read, kept
  too, that the read left none), and the device's count is the proof that the
  bytes came from below the page cache. F_NOCACHE asks macOS not to keep what
  it reads, but a page already cached may still serve a read, so there the
  residency check before is what makes the run cold. A workbench whose
  filesystem refuses O_DIRECT (EINVAL or EOPNOTSUPP, at open or at the first
  read: tmpfs on some kernels, some FUSE filesystems) gets the parallel
  ceiling ``not_run`` with the reason; the single-stream ceiling is still
  measured.
- ``warm``: the file is read once to warm it, its residency checked (at least
  99 %), then read the single-stream way: a memory copy out of the page
  cache, the fastest a buffered read can be on this host. The parallel
  ceiling has no warm figure: a direct read does not use the page cache.

The cold ceiling is the median over proven cold runs (unavailable when none
was proven), the parallel ceiling the median over its proven runs; the warm
ceiling the median over the verified warm runs. The file is deleted
afterwards. The device facts that bound durability (model, write-cache mode,
rotational, NVMe link) are audit facts (audit.collect).

The defaults, 4 streams of 4 MiB reads with O_DIRECT, were picked on the
2-core virtual machine of issue 27 (a virtio disk, ext4, shared with other
work), which cannot tell the settings apart: fio's psync direct reads of a
512 MiB file gave 0.9 to 1.4 GiB/s at every stream count from 1 to 16 and
block size from 1 to 16 MiB, three repeats each, with no setting ahead in
every repeat; 4 x 4 MiB was at or above 1 x 4 MiB in each. One buffered
stream varied more (fio: 448 MiB/s once; this step's own single stream 0.6 to
1.9 GiB/s across runs), so on this VM either ceiling may be the higher. 4 x
4 MiB keeps 16 MiB in flight in four outstanding requests, the kind of load
on which a drive with a deep queue (NVMe) delivers more than to one stream
(issue 27's premise, not shown by this virtio disk), and needs no more
threads than a small host has cores. The inventory sets them
(lab_run_ceiling_streams, lab_run_ceiling_block_bytes, lab_run_ceiling_direct);
the results record them.

On macOS the eviction is purge (root) or a cold copy (coldcopy_nocache, timed
instead of the file and deleted after the run) and the device counters are
unavailable, so a cold run is proven by residency alone there; that path,
F_NOCACHE included, has been run only in tests on Linux, not on a real Mac.

Run alone: ``python -m disklab_host.steps.ceiling --workdir DIR --mib N`` prints the JSON.
"""

from __future__ import annotations

import argparse
import errno
import json
import mmap
import os
import platform
import sys
import threading
import time
from pathlib import Path

from ..cache import pagecache as cache
from ..common import sampling
from ..common.facts import not_run, unavailable
from ..common.stats import spread
from ..common.units import MIB
from ..registry import BY_NAME, SIZES

REPEATS = 3
READ_BYTES = 8 * MIB
WARM_MIN_FRACTION = 0.99
SEED_CHUNK = 64 * MIB
# fcntl F_NOCACHE on macOS (<sys/fcntl.h>: 48), where Python's fcntl module lacks the name.
F_NOCACHE = 48
# What a filesystem that does not do direct I/O answers (open(2), read(2)): EINVAL on tmpfs and FUSE.
REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP))
PARTITIONING = "one contiguous slice per stream, read front to back; slices of whole blocks"
MACOS_NOTE = "F_NOCACHE path run only in tests on Linux (fcntl replaced), not on a real Mac"


def write_file(path: Path, n_bytes: int) -> None:
    """``n_bytes`` of os.urandom bytes (incompressible) to a fresh ``path``, fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done = 0
        while done < n_bytes:
            done += os.write(fd, os.urandom(min(SEED_CHUNK, n_bytes - done)))
        os.fsync(fd)
    finally:
        os.close(fd)


def _records(recs: dict) -> dict:
    """A read's records as the section keeps them: ``io`` (the I/O record), ``noise``, ``time_split``."""
    return {"io": recs["io_record"], "noise": recs["noise"], "time_split": recs["time_split"]}


def timed_read(path: Path, interval: sampling.Interval) -> dict:
    """Read ``path`` start to end in READ_BYTES calls; ``{"time_s", "bytes", "mib_s", "io", "noise",
    "time_split"}`` (common.sampling's records of the read, taken outside its clock)."""
    buf = bytearray(READ_BYTES)
    total = 0
    with open(path, "rb", buffering=0) as f:
        before = interval.begin()
        t0 = time.perf_counter()
        while n := f.readinto(buf):
            total += n
        t1 = time.perf_counter()
        recs = interval.end(
            before, f"one sequential read of the file in {READ_BYTES // MIB} MiB calls", t1 - t0
        )
    elapsed = t1 - t0
    return {
        "time_s": elapsed,
        "bytes": total,
        "mib_s": total / MIB / elapsed if elapsed > 0 else 0.0,
        **_records(recs),
    }


class DirectRefused(OSError):
    """The workbench's filesystem refused direct I/O (EINVAL or EOPNOTSUPP) at open or at the first read."""


def open_for_parallel(path: Path, system: str, direct: bool, fcntl_mod=None) -> tuple[int, str]:
    """A read-only descriptor of ``path`` for the parallel read, and its direct I/O mode's name.

    Linux: O_DIRECT (open(2)); macOS: fcntl(fd, F_NOCACHE, 1) (fcntl(2)); ``direct`` False: neither,
    ``"none"``. ``fcntl_mod`` replaces the fcntl module (tests). Raises :class:`DirectRefused` when
    the filesystem refuses direct I/O, OSError otherwise.
    """
    if not direct:
        return os.open(path, os.O_RDONLY), "none"
    try:
        if system == "Darwin":
            if fcntl_mod is None:
                import fcntl as fcntl_mod
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl_mod.fcntl(fd, getattr(fcntl_mod, "F_NOCACHE", F_NOCACHE), 1)
            except BaseException:
                os.close(fd)
                raise
            return fd, "F_NOCACHE"
        return os.open(path, os.O_RDONLY | os.O_DIRECT), "O_DIRECT"
    except OSError as exc:
        if exc.errno in REFUSED:
            raise DirectRefused(exc.errno, f"open with direct I/O: {exc.strerror}") from exc
        raise


def slices(n_bytes: int, streams: int, block: int) -> list[tuple[int, int]]:
    """``[(start, end)]`` byte ranges, one per stream, of whole ``block``s (the last ends at the file's
    end); fewer than ``streams`` when the file has fewer blocks."""
    blocks = -(-n_bytes // block)
    per = -(-blocks // streams) * block
    return [(start, min(n_bytes, start + per)) for start in range(0, n_bytes, per)]


def pread_into(fd: int, buf: mmap.mmap, offset: int) -> int:
    """Read up to ``len(buf)`` bytes at ``offset`` into ``buf``; the bytes read.

    os.preadv(2) where this Python has it, else (a build without it) os.pread and a copy into
    ``buf`` (one extra memory copy; a direct read needs the aligned buffer only on Linux's O_DIRECT).
    """
    if hasattr(os, "preadv"):
        return os.preadv(fd, [buf], offset)
    data = os.pread(fd, len(buf), offset)
    buf[: len(data)] = data
    return len(data)


def _stream(fd: int, start: int, end: int, buf: mmap.mmap, barrier, done: list, errors: list) -> None:
    """One stream: wait for the others, then os.preadv its slice in block-sized calls."""
    try:
        barrier.wait()
        off, total = start, 0
        while off < end:
            n = pread_into(fd, buf, off)
            if n == 0:
                break
            off += n
            total += n
        done.append(total)
    except BaseException as exc:  # raised again by the caller, after every stream has ended
        barrier.abort()
        errors.append(exc)


def parallel_read(path: Path, fd: int, streams: int, block: int, interval: sampling.Interval) -> dict:
    """Read ``path`` through ``fd`` in ``streams`` threads of ``block``-byte os.preadv calls.

    The clock starts when every thread is ready (a barrier; threads and buffers are made before it)
    and stops when the last has ended. Returns ``{"time_s", "bytes", "mib_s", "io", "noise",
    "time_split", "streams_used"}``. Raises the first stream's error (OSError) after all have ended.
    """
    parts = slices(os.fstat(fd).st_size, streams, block)
    bufs = [mmap.mmap(-1, block) for _ in parts]  # page-aligned: what O_DIRECT needs
    for buf in bufs:  # touched before the clock, so no first-touch page fault lands inside it
        for off in range(0, block, mmap.PAGESIZE):
            buf[off] = 0
    start: list[float] = []
    barrier = threading.Barrier(len(parts), action=lambda: start.append(time.perf_counter()))
    done: list[int] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_stream, args=(fd, a, b, buf, barrier, done, errors), daemon=True)
        for (a, b), buf in zip(parts, bufs, strict=True)
    ]
    before = interval.begin()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.perf_counter()
    recs = interval.end(before, f"{len(parts)} parallel streams of {block} B os.preadv calls")
    for b in bufs:
        b.close()
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if errors:  # a stream's own error first: the others then saw only the broken barrier
        raise (real or errors)[0]
    elapsed = t1 - start[0]
    total = sum(done)
    return {
        "time_s": elapsed,
        "bytes": total,
        "mib_s": total / MIB / elapsed if elapsed > 0 else 0.0,
        **_records(recs),
        "streams_used": len(parts),
    }


def probe_direct(path: Path, system: str, direct: bool, block: int, fcntl_mod=None) -> str:
    """The direct I/O mode's name, after one block read at offset 0 shows the filesystem does it.

    Raises :class:`DirectRefused` when open or the read is refused (a FUSE filesystem may open with
    O_DIRECT and refuse the read).
    """
    fd, mode = open_for_parallel(path, system, direct, fcntl_mod)
    buf = mmap.mmap(-1, block)
    try:
        pread_into(fd, buf, 0)
    except OSError as exc:
        if direct and exc.errno in REFUSED:
            raise DirectRefused(exc.errno, f"a read with direct I/O: {exc.strerror}") from exc
        raise
    finally:
        buf.close()
        os.close(fd)
    return mode


def _device_read(io: dict | None) -> int | None:
    if not io or "unavailable" in io["device"]:
        return None
    return io["device"]["read_bytes"]


def cold_run(path: Path, cfg: dict, recorder: sampling.Interval, scratch: Path, read_fn=None) -> dict:
    """Evict, check, read once: one cold run with its proof (``proven``, ``failed``).

    ``read_fn(timed_path, recorder)`` is the read (default :func:`timed_read`, the single stream);
    a parallel run also keeps ``after``, the residency just after its read.
    """
    rec = cache.evict(
        path, become_allowed=bool(cfg.get("become_allowed")), system=cfg.get("system"), scratch_dir=scratch
    )
    timed = Path(rec.get("timed_path") or path)
    extra = {}
    try:
        before = cache.cache_state(timed)
        read = (read_fn or timed_read)(timed, recorder)
        if read_fn is not None:
            extra["after"] = cache.cache_state(timed)
    finally:
        if timed != path:
            timed.unlink(missing_ok=True)  # a cold copy made for this run
    failed = []
    if before["trust"] != "ok" or before["fraction"] > cache.COLD_MAX_FRACTION:
        failed.append("residency")
    delivered = _device_read(read["io"])
    if delivered is not None and delivered < read["bytes"]:
        failed.append("device_reads")
    return {
        **read,
        "eviction_method": rec["method"],
        "before": before,
        "device_read_bytes": delivered,
        "proven": not failed,
        "failed": failed,
        "unchecked": ["device_reads"] if delivered is None else [],
        **extra,
    }


def warm_run(path: Path, recorder: sampling.Interval) -> dict:
    """Warm the file, check its residency, read once: one warm run (``verified``)."""
    cache.warm(path)
    before = cache.cache_state(path)
    read = timed_read(path, recorder)
    verified = before["trust"] == "ok" and before["fraction"] >= WARM_MIN_FRACTION
    return {**read, "before": before, "verified": verified}


def _ceiling(runs: list[dict], key: str, what: str) -> object:
    good = [r["mib_s"] for r in runs if r[key]]
    return spread(good) if good else unavailable(f"no {what} run of {len(runs)} passed its cache check")


def parallel_settings(sizes: dict) -> dict:
    """``{"streams", "block_bytes", "direct"}`` from the step's sizes (a missing one: the quick profile's),
    each checked; raises ValueError naming the lab_run_ setting."""
    names = [size.name for size in BY_NAME["ceiling"].sizes]
    got = {name: SIZES[name].check(sizes.get(name, SIZES[name].quick)) for name in names}
    BY_NAME["ceiling"].check_sizes(got)
    return {
        "streams": got["ceiling_streams"],
        "block_bytes": got["ceiling_block_bytes"],
        "direct": bool(got["ceiling_direct"]),
    }


def parallel_ceiling(path: Path, cfg: dict, settings: dict, recorder, scratch: Path, fcntl_mod=None) -> dict:
    """The parallel ceiling's section: ``REPEATS`` proven-cold parallel reads, or not_run when the
    workbench's filesystem refuses direct I/O, or failed with the error when a read raised (the rest
    of the step keeps its figures). Each carries the settings and the direct I/O mode."""
    system = cfg["system"]
    asked = {
        "streams": settings["streams"],
        "block_bytes": settings["block_bytes"],
        "direct_io": ("F_NOCACHE" if system == "Darwin" else "O_DIRECT") if settings["direct"] else "none",
        "partitioning": PARTITIONING,
    }
    if system == "Darwin" and settings["direct"]:
        asked["validation"] = MACOS_NOTE
    try:
        mode = probe_direct(path, system, settings["direct"], settings["block_bytes"], fcntl_mod)
    except DirectRefused as exc:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        why = f"the workbench's filesystem refused {asked['direct_io']} ({name} from {exc.strerror})"
        return {**not_run(f"{why}; the single-stream ceiling was measured"), **asked}

    def read(timed: Path, rec: sampling.Interval) -> dict:
        fd, _ = open_for_parallel(timed, system, settings["direct"], fcntl_mod)
        try:
            return parallel_read(timed, fd, settings["streams"], settings["block_bytes"], rec)
        finally:
            os.close(fd)

    try:
        runs = [cold_run(path, cfg, recorder, scratch, read) for _ in range(REPEATS)]
    except Exception as exc:  # the single-stream and warm figures are kept; the error is recorded
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", **asked, "direct_io": mode}
    return {
        "status": "ok",
        **asked,
        "direct_io": mode,
        "cold_runs": runs,
        "cold_mib_s": _ceiling(runs, "proven", "parallel cold"),
    }


def run(cfg: dict, workdir: Path, fcntl_mod=None) -> dict:
    """The ``ceiling`` step: ``cfg["sizes"]["ceiling_mib"]`` MiB read cold (one stream, and in parallel)
    and warm; the section. ``fcntl_mod`` replaces the fcntl module of the F_NOCACHE path (tests)."""
    system = cfg.get("system") or platform.system()
    if system not in cache.DEFAULT_METHODS:
        return not_run(
            f"the ceiling needs a page-cache eviction, known on Linux and macOS only, not {system}"
        )
    mib = SIZES["ceiling_mib"].check(cfg["sizes"]["ceiling_mib"])
    settings = parallel_settings(cfg["sizes"])
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "ceiling.bin"
    scratch = workdir / "cold_copies"
    scratch.mkdir(exist_ok=True)
    recorder = sampling.Interval(workdir, system=system)
    try:
        write_file(path, mib * MIB)
        cold = [cold_run(path, {**cfg, "system": system}, recorder, scratch) for _ in range(REPEATS)]
        parallel = parallel_ceiling(path, {**cfg, "system": system}, settings, recorder, scratch, fcntl_mod)
        warm = [warm_run(path, recorder) for _ in range(REPEATS)]
    finally:
        path.unlink(missing_ok=True)
    return {
        "status": "ok",
        "system": system,
        "file_bytes": mib * MIB,
        "read_call_bytes": READ_BYTES,
        "repeats": REPEATS,
        "device": recorder.io.device,
        "cold_runs": cold,
        "warm_runs": warm,
        "cold_mib_s": _ceiling(cold, "proven", "cold"),
        "warm_mib_s": _ceiling(warm, "verified", "warm"),
        "parallel": parallel,
        "data": "os.urandom, fsynced, deleted afterwards",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--mib", type=int, default=SIZES["ceiling_mib"].quick, help="size of the file in MiB")
    ap.add_argument("--streams", type=int, default=SIZES["ceiling_streams"].quick, help="parallel streams")
    ap.add_argument("--block-bytes", type=int, default=SIZES["ceiling_block_bytes"].quick, help="read size")
    ap.add_argument("--direct", type=int, default=SIZES["ceiling_direct"].quick, help="1 = direct I/O")
    args = ap.parse_args(argv)
    sizes = {"ceiling_mib": args.mib, "ceiling_streams": args.streams,
             "ceiling_block_bytes": args.block_bytes, "ceiling_direct": args.direct}  # fmt: skip
    cfg = {"sizes": sizes, "system": platform.system(), "become_allowed": False}
    print(json.dumps(run(cfg, args.workdir), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
