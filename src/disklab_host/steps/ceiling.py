"""The host's own ceiling: how fast this workbench reads a file cold, and warm, with large reads.

The load figures are read against it, measured in the same run on the same
workbench: a cold load that reached 90 % of the cold ceiling is bound by the
storage; one far below it is bound by the loader; a "cold" read faster than the
cold ceiling was probably served by a cache below this OS (the hypervisor's, a
RAID controller's, a network filer's).

One file of ``ceiling_mib`` MiB of pseudo-random bytes is written and fsynced.
Then, ``REPEATS`` times each:

- ``cold``: the file is evicted (cache.evict, the load step's methods), its
  residency checked just before the read (cache.cache_state: cachestat, else
  mincore), and it is read start to end with ``readinto`` calls of
  ``READ_BYTES`` (8 MiB) on an unbuffered file, buffered I/O through the page
  cache as a loader does (no O_DIRECT). The read's I/O record
  (common.iorecord) shows what the device delivered; a run is ``proven`` cold
  when residency was at most 1 % before it and the device delivered at least
  the file's size during it.
- ``warm``: the file is read once to warm it, its residency checked (at least
  99 %), then read the same way: a memory copy out of the page cache, the
  fastest a buffered read can be on this host.

The cold ceiling is the median over proven cold runs (unavailable when none
was proven); the warm ceiling the median over the verified warm runs. The file
is deleted afterwards. The device facts that bound durability (model,
write-cache mode, rotational, NVMe link) are audit facts (audit.collect).

On macOS the eviction is purge (root) or a cold copy (coldcopy_nocache, timed
instead of the file and deleted after the run) and the device counters are
unavailable, so a cold run is proven by residency alone there; that path has
been run only in tests on Linux, not on a real Mac.

Run alone: ``python -m disklab_host.steps.ceiling --workdir DIR --mib N`` prints the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from ..cache import pagecache as cache
from ..common import iorecord
from ..common.facts import not_run, unavailable
from ..common.stats import spread
from ..common.units import MIB
from ..registry import SIZES

REPEATS = 3
READ_BYTES = 8 * MIB
WARM_MIN_FRACTION = 0.99
SEED_CHUNK = 64 * MIB


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


def timed_read(path: Path, recorder: iorecord.Recorder) -> dict:
    """Read ``path`` start to end in READ_BYTES calls; ``{"time_s", "bytes", "mib_s", "io"}``."""
    buf = bytearray(READ_BYTES)
    total = 0
    with open(path, "rb", buffering=0) as f:
        before = recorder.begin()
        t0 = time.perf_counter()
        while n := f.readinto(buf):
            total += n
        t1 = time.perf_counter()
        io = recorder.end(before, f"one sequential read of the file in {READ_BYTES // MIB} MiB calls")
    elapsed = t1 - t0
    return {
        "time_s": elapsed,
        "bytes": total,
        "mib_s": total / MIB / elapsed if elapsed > 0 else 0.0,
        "io": io,
    }


def _device_read(io: dict | None) -> int | None:
    if not io or "unavailable" in io["device"]:
        return None
    return io["device"]["read_bytes"]


def cold_run(path: Path, cfg: dict, recorder: iorecord.Recorder, scratch: Path) -> dict:
    """Evict, check, read once: one cold run with its proof (``proven``, ``failed``)."""
    rec = cache.evict(
        path, become_allowed=bool(cfg.get("become_allowed")), system=cfg.get("system"), scratch_dir=scratch
    )
    timed = Path(rec.get("timed_path") or path)
    try:
        before = cache.cache_state(timed)
        read = timed_read(timed, recorder)
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
    }


def warm_run(path: Path, recorder: iorecord.Recorder) -> dict:
    """Warm the file, check its residency, read once: one warm run (``verified``)."""
    cache.warm(path)
    before = cache.cache_state(path)
    read = timed_read(path, recorder)
    verified = before["trust"] == "ok" and before["fraction"] >= WARM_MIN_FRACTION
    return {**read, "before": before, "verified": verified}


def _ceiling(runs: list[dict], key: str, what: str) -> object:
    good = [r["mib_s"] for r in runs if r[key]]
    return spread(good) if good else unavailable(f"no {what} run of {len(runs)} passed its cache check")


def run(cfg: dict, workdir: Path) -> dict:
    """The ``ceiling`` step: ``cfg["sizes"]["ceiling_mib"]`` MiB read cold and warm; the section."""
    system = cfg.get("system") or platform.system()
    if system not in cache.DEFAULT_METHODS:
        return not_run(
            f"the ceiling needs a page-cache eviction, known on Linux and macOS only, not {system}"
        )
    mib = SIZES["ceiling_mib"].check(cfg["sizes"]["ceiling_mib"])
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "ceiling.bin"
    scratch = workdir / "cold_copies"
    scratch.mkdir(exist_ok=True)
    recorder = iorecord.Recorder(workdir)
    try:
        write_file(path, mib * MIB)
        cold = [cold_run(path, {**cfg, "system": system}, recorder, scratch) for _ in range(REPEATS)]
        warm = [warm_run(path, recorder) for _ in range(REPEATS)]
    finally:
        path.unlink(missing_ok=True)
    return {
        "status": "ok",
        "system": system,
        "file_bytes": mib * MIB,
        "read_call_bytes": READ_BYTES,
        "repeats": REPEATS,
        "device": recorder.device,
        "cold_runs": cold,
        "warm_runs": warm,
        "cold_mib_s": _ceiling(cold, "proven", "cold"),
        "warm_mib_s": _ceiling(warm, "verified", "warm"),
        "data": "os.urandom, fsynced, deleted afterwards",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--mib", type=int, default=SIZES["ceiling_mib"].quick, help="size of the file in MiB")
    args = ap.parse_args(argv)
    cfg = {"sizes": {"ceiling_mib": args.mib}, "system": platform.system(), "become_allowed": False}
    print(json.dumps(run(cfg, args.workdir), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
