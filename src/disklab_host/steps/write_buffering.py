"""Write buffering: what one 1-byte write costs with and without Python's buffer.

``unbuffered`` calls ``os.write(fd, b"x")``: every call is a write(2) syscall.
``buffered`` calls ``f.write(b"x")`` on a file opened ``"wb"`` with Python's
default buffering: the byte is copied into a buffer in this process, and one
write(2) carries the whole buffer when it fills (the lesson, "Layer 1: the
buffer inside your process"; Python docs, ``open()`` and ``io``).

Each mode runs ``WARMUP_REPEATS`` repeats that are kept apart, then ``REPEATS``
measured repeats of ``write_buffering_calls`` calls each, on a fresh file per
repeat, the modes taking turns repeat by repeat; each measured repeat is a
round with its I/O, noise and time-split records (common.sampling). A
sample is the wall time of one repeat divided by its calls, in ns per call.
Both clocks cover the write(2) calls their mode makes and nothing else:
open and close stay outside them, and the buffered clock ends after
``f.flush()``, the write(2) that carries the buffer's last bytes. (Timing the
buffered open and close as well once made buffered look slower than unbuffered
on a CI machine whose journal was busy: creating the file waited on it.)

Run alone: ``python write_buffering.py --workdir DIR --calls N`` prints the JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import time
from pathlib import Path

from ..cache import layers
from ..common import sampling
from ..common.facts import require_positive
from ..common.stats import spread
from ..registry import SIZES

WARMUP_REPEATS = 1
REPEATS = 5
# Stop looking for the first flush after this many 1-byte writes (Python caps
# its buffer at 8 MiB, Python docs for open(); twice that is always enough).
_PROBE_LIMIT_BYTES = 16 * 1024 * 1024


def _unbuffered_ns(path: Path, calls: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write, one = os.write, b"x"
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            write(fd, one)
        return time.perf_counter_ns() - t0
    finally:
        os.close(fd)


def _buffered_ns(path: Path, calls: int) -> int:
    with open(path, "wb") as f:
        write, one = f.write, b"x"
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            write(one)
        f.flush()
        return time.perf_counter_ns() - t0


MODES = {
    "unbuffered": ("os.write(fd, b'x')", _unbuffered_ns),
    "buffered": ("f.write(b'x') on open(path, 'wb')", _buffered_ns),
}


def observed_buffer_bytes(path: Path) -> int:
    """Bytes Python's default ``open(path, "wb")`` buffers before its first write(2).

    Writes 1 byte at a time and reads the file size with fstat after 1, 2, 4, ...
    writes in total. BufferedWriter keeps bytes until its buffer is full and
    writes the whole buffer on the next call (CPython's Modules/_io/bufferedio.c),
    so the first non-zero size is the buffer size. Raises RuntimeError when no
    flush happens within 16 MiB.
    """
    with open(path, "wb") as f:
        fd, write, one = f.fileno(), f.write, b"x"
        written, batch = 0, 1
        while written < _PROBE_LIMIT_BYTES:
            for _ in range(batch):
                write(one)
            written += batch
            size = os.fstat(fd).st_size
            if size:
                return size
            batch = written  # doubles the total each round
    raise RuntimeError(f"no flush from Python's buffer within {_PROBE_LIMIT_BYTES} one-byte writes")


def buffer_facts(path: Path) -> dict:
    """The buffer size Python uses for ``open(path, "wb")``, three ways, in bytes.

    ``default_buffer_size_bytes`` is ``io.DEFAULT_BUFFER_SIZE``; ``st_blksize_bytes``
    is ``os.fstat().st_blksize`` of a file there, which the Python docs say
    open() prefers when it is known; ``observed_buffer_bytes`` is what the
    running Python actually used (:func:`observed_buffer_bytes`).
    """
    observed = observed_buffer_bytes(path)
    st_blksize = os.stat(path).st_blksize
    os.unlink(path)
    return {
        "default_buffer_size_bytes": io.DEFAULT_BUFFER_SIZE,
        "st_blksize_bytes": st_blksize,
        "observed_buffer_bytes": observed,
        "observed_method": "size of the file at the first flush of 1-byte f.write calls (os.fstat)",
    }


def measure(modes: list[str], path: Path, calls: int, interval: sampling.Interval | None = None) -> dict:
    """Warm-up and measured repeats of each mode; per-call times in ns, and each repeat's records.

    Warm-ups run first, then the measured repeats take turns across the modes (the first mode of each
    repeat rotates), so drift on the host lands on both alike. Each measured repeat is one round:
    ``{"first", "count": 1, "io_record", "noise", "time_split"}`` (common.sampling), read around the timed
    function's call, open to close. Raises KeyError for an unknown mode.
    """
    interval = interval or sampling.Interval(path.parent)
    out = {m: {"call": MODES[m][0], "warmup_per_call_ns": [], "per_call_samples_ns": [], "rounds": []}
           for m in modes}  # fmt: skip
    for mode in modes:
        timed = MODES[mode][1]
        out[mode]["warmup_per_call_ns"] = [timed(path, calls) / calls for _ in range(WARMUP_REPEATS)]
    for r in range(REPEATS):
        for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
            timed, rec = MODES[mode][1], out[mode]
            before = interval.begin()
            rec["per_call_samples_ns"].append(timed(path, calls) / calls)
            rounds = interval.end(before, "one measured repeat, open to close")
            rec["rounds"].append({"first": len(rec["rounds"]), "count": 1, **rounds})
    os.unlink(path)
    for rec in out.values():
        rec["per_call_ns"] = spread(rec["per_call_samples_ns"])
    return out


def layer_bytes(observed_buffer: int) -> int:
    """Bytes of the layers' write: less than Python's buffer, so write() leaves them in the process."""
    return max(1, min(4000, observed_buffer // 2))


def run(cfg: dict, workdir: Path) -> dict:
    """Time 1-byte unbuffered and buffered writes in ``workdir``.

    ``cfg["sizes"]["write_buffering_calls"]`` is the calls per repeat (int > 0,
    else ValueError naming it). Returns the ``write_buffering`` section:
    ``buffer`` facts in bytes and, per mode, per-call samples in ns with their
    median/min/max. Files are deleted afterwards.
    """
    calls = cfg["sizes"]["write_buffering_calls"]
    require_positive("write_buffering_calls", calls)
    if not isinstance(calls, int):
        raise ValueError(f"write_buffering_calls must be an integer, got {calls!r}")
    workdir = Path(workdir)
    path = workdir / "write_buffering.bin"
    buffer = buffer_facts(path)
    return {
        "status": "ok",
        "python_version": platform.python_version(),
        "calls_per_repeat": calls,
        "warmup_repeats": WARMUP_REPEATS,
        "repeats": REPEATS,
        "buffer": buffer,
        "modes": measure(list(MODES), path, calls, sampling.Interval(workdir)),
        "layers": layers.write_flush_fsync(
            workdir / "layers.bin", os.urandom(layer_bytes(buffer["observed_buffer_bytes"]))
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument(
        "--calls", type=int, default=SIZES["write_buffering_calls"].quick, help="1-byte calls per repeat"
    )
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    cfg = {"sizes": {"write_buffering_calls": args.calls}, "system": platform.system()}
    print(json.dumps(run(cfg, args.workdir), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
