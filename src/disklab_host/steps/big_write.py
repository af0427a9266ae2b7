"""Big write: one large write, then fsync, with the two parts timed apart.

The write returns once the page cache holds the data as dirty pages; fsync then
waits for whatever writeback has not yet sent to the drive (the lesson, "Layer
2: the page cache" and Measure, "The big write"). How the time splits between
the two tells how much writeback did while the write was still running.

Each repeat writes a fresh file with ``os.write`` calls (one call unless the
OS returns a short write), fsyncs it and deletes it. ``WARMUP_REPEATS`` repeats
come first and are kept apart (the first large write of a process also pays
for faulting in fresh page-cache pages), then ``REPEATS`` measured ones. The
data is pseudo-random bytes, so no filesystem compression can shrink it.
Each measured write and each fsync has its I/O record (common.iorecord), and
``layers`` counts the file's dirty and writeback pages (cachestat) after
f.write(), flush() and fsync() of the same data (cache.layers).

The sync that makes the figure durable is the OS's durable call
(common.durable.durable_sync): ``os.fsync`` on Linux. On macOS plain fsync
stops at the drive's write cache (Apple's fsync(2) man page), so there each
repeat runs plain ``os.fsync`` first, timed and kept apart as not durable,
then ``fcntl(fd, F_FULLFSYNC)``, which asks the drive to flush its cache; the
data is durable only once F_FULLFSYNC returns, so the time to durable is the
write plus both syncs. ``durable_call`` names the call behind ``fsync_*``. A
failed F_FULLFSYNC falls back to ``os.fsync`` and the result says so
(``fallback``). The macOS path has been run only against a test double on
Linux, not on real macOS hardware, and its ``validation`` field says so.

Run alone: ``python big_write.py --workdir DIR --mib N`` prints the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

from ..cache import layers
from ..common import durable, iorecord, sampling
from ..common.facts import require_positive
from ..common.stats import spread
from ..common.units import MIB
from ..registry import SIZES

WARMUP_REPEATS = 1
REPEATS = 3
SEED = 20240611


# randbytes(n) asks getrandbits for n * 8 bits, which must fit a C int: 512 MiB at once overflows.
DATA_CHUNK_BYTES = 64 * MIB


def make_data(n_bytes: int, seed: int = SEED) -> bytes:
    """``n_bytes`` pseudo-random bytes, incompressible: random.Random(seed).randbytes in 64 MiB chunks.

    Any size works (one randbytes call is limited to 2**31 - 1 bits). Raises
    ValueError for a negative size.
    """
    if n_bytes < 0:
        raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < n_bytes:
        out += rng.randbytes(min(DATA_CHUNK_BYTES, n_bytes - len(out)))
    return bytes(out)


def write_then_fsync(
    path: Path,
    data: bytes,
    recorder: iorecord.Recorder | None = None,
    *,
    system: str | None = None,
    fcntl_mod=durable.fcntl,
    sync: durable.Fsync | durable.FcntlSync | None = None,
) -> dict:
    """Write ``data`` to a fresh ``path``, then make it durable; times in s. Deletes ``path``.

    Returns ``{"write_s", "fsync_s", "write_calls", "write_io", "fsync_io",
    "durable_call"}``: ``fsync_s`` is the durable call's time
    (common.durable.durable_sync for ``system``, default platform.system():
    ``"fsync"`` on Linux, ``"fcntl F_FULLFSYNC"`` on Darwin), the I/O records
    (common.iorecord) those of the write's and the durable call's timed
    intervals, read just outside each clock. Where plain fsync is not durable
    (Darwin) plain ``os.fsync`` runs first and adds ``plain_fsync_s`` and
    ``plain_fsync_io``; the durable call then runs after it. ``sync`` is the
    durable call to use (one per run, so a refused F_FULLFSYNC is never
    retried); without it one is made from ``system`` and ``fcntl_mod``
    (injectable for tests). ``os.write`` may write less than asked (Linux caps
    one call at 0x7ffff000 bytes, write(2)), so it loops until all is written.
    Raises OSError from the write or from ``os.fsync`` (a failed fsync is
    never retried), ValueError on Darwin without F_FULLFSYNC.
    """
    system = system or platform.system()
    sync = sync or durable.durable_sync(system, fcntl_mod)
    plain_first = not durable.plain_fsync_is_durable(system)
    recorder = recorder or iorecord.Recorder(path.parent, enabled=False)
    view = memoryview(data)
    out = {}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        calls, done = 0, 0
        io0 = recorder.begin()
        t0 = time.perf_counter()
        while done < len(view):
            done += os.write(fd, view[done:])
            calls += 1
        t1 = time.perf_counter()
        write_io = recorder.end(io0, "the write loop")
        if plain_first:
            io_plain = recorder.begin()
            tp0 = time.perf_counter()
            os.fsync(fd)
            tp1 = time.perf_counter()
            out["plain_fsync_io"] = recorder.end(io_plain, "the plain fsync, not durable on macOS")
            out["plain_fsync_s"] = tp1 - tp0
        io1 = recorder.begin()
        t2 = time.perf_counter()
        sync(fd)
        t3 = time.perf_counter()
        fsync_io = recorder.end(io1, f"the durable call ({sync.call})")
    finally:
        os.close(fd)
        os.unlink(path)
    return {
        "write_s": t1 - t0,
        "fsync_s": t3 - t2,
        "write_calls": calls,
        "write_io": write_io,
        "fsync_io": fsync_io,
        "durable_call": sync.call,
        **out,
    }


def run(cfg: dict, workdir: Path, *, fcntl_mod=durable.fcntl) -> dict:
    """Write ``cfg["sizes"]["big_write_mib"]`` MiB then make it durable, repeatedly, in ``workdir``.

    ``big_write_mib`` must be an integer > 0 (else ValueError naming it). The
    OS is ``cfg["system"]`` (default platform.system()); ``fcntl_mod`` is
    injectable for tests. Returns the ``big_write`` section: raw per-repeat
    samples of write and durable-call time (s) and of the write's rate
    (MiB/s), each with median/min/max; ``system`` and ``durable_call`` (the
    call behind ``fsync_*``). Where plain fsync is not durable (Darwin) it adds
    ``plain_fsync_durable: false``, plain fsync's samples
    (``plain_fsync_samples_s``, ``warmup_plain_fsync_samples_s``,
    ``plain_fsync_s``, ``plain_fsync_io_records``) and F_FULLFSYNC's
    ``fcntl_command``, ``fcntl_command_source``, ``fallback`` (None or
    common.durable.FcntlSync's record) and ``validation``.
    """
    mib = cfg["sizes"]["big_write_mib"]
    require_positive("big_write_mib", mib)
    if not isinstance(mib, int):
        raise ValueError(f"big_write_mib must be an integer, got {mib!r}")
    system = cfg.get("system") or platform.system()
    sync = durable.durable_sync(system, fcntl_mod)
    data = make_data(mib * MIB)
    path = Path(workdir) / "big_write.bin"
    recorder = iorecord.Recorder(Path(workdir))
    interval = sampling.Interval(Path(workdir), system=system)
    kw = {"system": system, "sync": sync}
    warmup = [write_then_fsync(path, data, **kw) for _ in range(WARMUP_REPEATS)]
    runs, rounds = [], []
    for i in range(REPEATS):
        before = interval.begin()
        runs.append(write_then_fsync(path, data, recorder, **kw))
        rounds.append({"first": i, "count": 1, **interval.end(before, "one repeat: the write and its sync")})
    write_s = [r["write_s"] for r in runs]
    fsync_s = [r["fsync_s"] for r in runs]
    rate = [mib / s for s in write_s]
    out = {
        "status": "ok",
        "system": system,
        "durable_call": sync.call,
        "size_bytes": mib * MIB,
        "repeats": REPEATS,
        "warmup_repeats": WARMUP_REPEATS,
        "warmup_write_samples_s": [r["write_s"] for r in warmup],
        "warmup_fsync_samples_s": [r["fsync_s"] for r in warmup],
        "data": (
            "random.Random(seed).randbytes in 64 MiB chunks: incompressible, "
            "a fresh file per repeat, deleted afterwards"
        ),
        "write_calls": [r["write_calls"] for r in runs],
        "write_samples_s": write_s,
        "fsync_samples_s": fsync_s,
        "write_rate_samples_mib_s": rate,
        "write_s": spread(write_s),
        "fsync_s": spread(fsync_s),
        "write_rate_mib_s": spread(rate),
        "write_io_records": [r["write_io"] for r in runs],
        "fsync_io_records": [r["fsync_io"] for r in runs],
        "rounds": rounds,
    }
    if not durable.plain_fsync_is_durable(system):
        plain = [r["plain_fsync_s"] for r in runs]
        out.update(
            {
                "plain_fsync_durable": False,
                "warmup_plain_fsync_samples_s": [r["plain_fsync_s"] for r in warmup],
                "plain_fsync_samples_s": plain,
                "plain_fsync_s": spread(plain),
                "plain_fsync_io_records": [r["plain_fsync_io"] for r in runs],
                "fcntl_command": sync.command,
                "fcntl_command_source": sync.source,
                "fallback": sync.fallback,
                "validation": durable.NOT_ON_REAL_HARDWARE,
            }
        )
    out["layers"] = layers.write_flush_fsync(path, data)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--mib", type=int, default=SIZES["big_write_mib"].quick, help="size of the write in MiB")
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    cfg = {"sizes": {"big_write_mib": args.mib}, "system": platform.system()}
    print(json.dumps(run(cfg, args.workdir), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
