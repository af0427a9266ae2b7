"""fsync bench: the latency of a block write followed by each kind of sync.

For each mode, a fresh file gets ``fsync_blocks`` blocks of ``fsync_block_bytes``
random bytes with ``os.write``; after each write comes:

- ``none``: nothing; the write returns once the page cache has a copy;
- ``fsync``: ``os.fsync`` (fsync(2): data and metadata to stable storage on
  Linux, including the drive cache flush; on macOS it stops at the drive's cache);
- ``fdatasync``: ``os.fdatasync`` (fdatasync(2): skips metadata not needed to
  read the data back; Python has no os.fdatasync on macOS);
- ``f_fullfsync``: ``fcntl(fd, F_FULLFSYNC)`` (macOS fsync(2) and fcntl(2):
  plain fsync there does not ask the drive to flush its cache; F_FULLFSYNC
  does, so only it reaches flash);
- ``f_barrierfsync``: ``fcntl(fd, F_BARRIERFSYNC)`` (macOS fcntl(2), command 85:
  fsync plus a barrier, so writes before it reach the drive's media before
  writes after it, without waiting for a full flush; Apple recommends it when
  ordering is enough);
- ``o_dsync``: no call, the file is opened with ``O_DSYNC`` (open(2)), so each
  write returns only once its data is durable.

One sample is the write plus its sync, in ns; for the modes with a separate
sync call the write part alone is kept too. Each mode's measured blocks have
one I/O record (common.iorecord) from the first measured write to the last
sync, loop included. ``WARMUP_BLOCKS`` blocks are
written first and kept apart. A mode this OS lacks is recorded as unsupported
with the reason. When an fcntl sync (F_FULLFSYNC, F_BARRIERFSYNC) fails with
any errno, the bench falls back to ``os.fsync`` for that mode and records the
errno's name, the message and whether it was a refusal (ENOTTY, ENOTSUP,
EOPNOTSUPP: the volume cannot do it) or an error (EIO, ...). An error from
``os.fsync`` itself still fails the step. The fcntl commands and that fallback
rule live in common.durable, shared with big_write. The fcntl paths have only
been run against a test double on Linux, not on real macOS hardware, and each
such mode says so in its ``validation`` field. Source of the design: the lesson, Build It
(fsync_bench.py).

Run alone: ``python fsync_bench.py --workdir DIR --blocks N`` prints the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from ..common import iorecord
from ..common.durable import (
    NOT_ON_REAL_HARDWARE,
    REFUSAL_ERRNOS,
    FcntlSync,
    barrierfsync_command,
    fcntl,
    fullfsync_command,
)
from ..common.facts import require_positive
from ..common.stats import latency_summary_us
from ..registry import SIZES

MODE_ORDER = ["none", "fsync", "fdatasync", "f_fullfsync", "f_barrierfsync", "o_dsync"]
WARMUP_BLOCKS = 5
# The fcntl sync modes: mode -> the fcntl command's name.
FCNTL_MODES = {"f_fullfsync": "F_FULLFSYNC", "f_barrierfsync": "F_BARRIERFSYNC"}
_COMMANDS = {"f_fullfsync": fullfsync_command, "f_barrierfsync": barrierfsync_command}
# The step's public names; NOT_ON_REAL_HARDWARE, REFUSAL_ERRNOS and the *_command functions are
# common.durable's, named here as well because the step's results and the report's tests use them.
__all__ = [
    "FCNTL_MODES",
    "MODE_ORDER",
    "NOT_ON_REAL_HARDWARE",
    "REFUSAL_ERRNOS",
    "WARMUP_BLOCKS",
    "barrierfsync_command",
    "bench_mode",
    "fullfsync_command",
    "main",
    "run",
    "unsupported_reason",
]


def unsupported_reason(mode: str, system: str, fcntl_mod=fcntl) -> str | None:
    """Why ``mode`` cannot run on this OS, or None when it can.

    Raises ValueError for a mode not in MODE_ORDER.
    """
    if mode not in MODE_ORDER:
        raise ValueError(f"fsync_bench mode must be one of {MODE_ORDER}, got {mode!r}")
    if mode == "fdatasync" and not hasattr(os, "fdatasync"):
        return f"os has no fdatasync on {system}: Python exposes it on Linux, not on macOS"
    if mode == "f_fullfsync" and fullfsync_command(system, fcntl_mod) is None:
        return f"fcntl has no F_FULLFSYNC on {system}: it is a macOS call"
    if mode == "f_barrierfsync" and barrierfsync_command(system, fcntl_mod) is None:
        return f"fcntl has no F_BARRIERFSYNC on {system}: it is a macOS call (fcntl command 85 there)"
    if mode == "o_dsync" and not hasattr(os, "O_DSYNC"):
        return f"os has no O_DSYNC on {system}"
    return None


def _sync_call(mode: str, system: str, fcntl_mod):
    """(name of the call, callable(fd) or None) run after each write in ``mode``."""
    if mode == "fsync":
        return "os.fsync", os.fsync
    if mode == "fdatasync":
        return "os.fdatasync", os.fdatasync
    if mode in FCNTL_MODES:
        command, _ = _COMMANDS[mode](system, fcntl_mod)
        return f"fcntl {FCNTL_MODES[mode]}", FcntlSync(fcntl_mod, FCNTL_MODES[mode], command)
    if mode == "o_dsync":
        return "none: the file is opened with O_DSYNC", None
    return "none", None


def bench_mode(
    mode: str,
    path: Path,
    blocks: int,
    block_bytes: int,
    *,
    system: str | None = None,
    fcntl_mod=fcntl,
    recorder: iorecord.Recorder | None = None,
) -> dict:
    """Write ``blocks`` blocks to a fresh ``path`` in ``mode``; per-call latencies in ns.

    Returns ``{"status": "ok", "call", "samples_ns", "latency", ...}`` (samples
    and ``latency`` from common.stats.latency_summary_us, in µs) or
    ``{"status": "unsupported", "reason"}``. The fcntl modes add
    ``fcntl_command`` (int), ``fcntl_command_source``, ``fallback`` (None or
    :class:`FcntlSync`'s record) and ``validation``. The file is deleted
    afterwards. Raises OSError on a short write or on an ``os.fsync`` /
    ``os.fdatasync`` error (a failed sync is never retried).
    """
    system = system or platform.system()
    reason = unsupported_reason(mode, system, fcntl_mod)
    if reason:
        return {"status": "unsupported", "reason": reason}
    call, sync = _sync_call(mode, system, fcntl_mod)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DSYNC if mode == "o_dsync" else 0)
    data = memoryview(os.urandom((WARMUP_BLOCKS + blocks) * block_bytes))
    total, write_only = [], []
    recorder = recorder or iorecord.Recorder(path.parent, enabled=False)
    io_before = None
    fd = os.open(path, flags, 0o644)
    try:
        for i in range(WARMUP_BLOCKS + blocks):
            if i == WARMUP_BLOCKS:
                io_before = recorder.begin()
            block = data[i * block_bytes : (i + 1) * block_bytes]
            t0 = time.perf_counter_ns()
            if os.write(fd, block) != block_bytes:
                raise OSError(f"short write of a {block_bytes}-byte block to {path}")
            t1 = time.perf_counter_ns()
            if sync is not None:
                sync(fd)
            t2 = time.perf_counter_ns()
            total.append(t2 - t0)
            write_only.append(t1 - t0)
        io = recorder.end(io_before, f"the {blocks} measured blocks, first write to last sync")
    finally:
        os.close(fd)
        os.unlink(path)
    out = {
        "status": "ok",
        "call": call,
        "warmup_samples_ns": total[:WARMUP_BLOCKS],
        "samples_ns": total[WARMUP_BLOCKS:],
        "latency": latency_summary_us(total[WARMUP_BLOCKS:]),
        "io_record": io if io is not None else iorecord.not_recorded("switched off"),
    }
    if sync is not None:
        out["write_samples_ns"] = write_only[WARMUP_BLOCKS:]
        out["write_latency"] = latency_summary_us(write_only[WARMUP_BLOCKS:])
    if mode in FCNTL_MODES:
        out["fcntl_command"] = sync.command
        out["fcntl_command_source"] = _COMMANDS[mode](system, fcntl_mod)[1]
        out["fallback"] = sync.fallback
        out["validation"] = NOT_ON_REAL_HARDWARE
    return out


def run(cfg: dict, workdir: Path, *, fcntl_mod=fcntl) -> dict:
    """Run every mode in MODE_ORDER in ``workdir``; the ``fsync_bench`` section.

    Sizes: ``cfg["sizes"]["fsync_blocks"]`` and ``["fsync_block_bytes"]``,
    integers > 0 (else ValueError naming the setting). ``modes`` maps each mode
    to :func:`bench_mode`'s result. ``fcntl_mod`` is injectable for tests.
    """
    sizes = cfg["sizes"]
    for name in ("fsync_blocks", "fsync_block_bytes"):
        require_positive(name, sizes[name])
        if not isinstance(sizes[name], int):
            raise ValueError(f"{name} must be an integer, got {sizes[name]!r}")
    blocks, block_bytes = sizes["fsync_blocks"], sizes["fsync_block_bytes"]
    workdir = Path(workdir)
    system = cfg.get("system") or platform.system()
    recorder = iorecord.Recorder(workdir)
    return {
        "status": "ok",
        "system": system,
        "blocks": blocks,
        "block_bytes": block_bytes,
        "warmup_blocks": WARMUP_BLOCKS,
        "mode_order": MODE_ORDER,
        "data": "os.urandom, a fresh file per mode, deleted afterwards",
        "workdir_st_blksize_bytes": os.stat(workdir).st_blksize,
        "modes": {
            mode: bench_mode(
                mode,
                workdir / f"fsync_{mode}.bin",
                blocks,
                block_bytes,
                system=system,
                fcntl_mod=fcntl_mod,
                recorder=recorder,
            )
            for mode in MODE_ORDER
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--blocks", type=int, default=SIZES["fsync_blocks"].quick)
    ap.add_argument("--block-bytes", type=int, default=SIZES["fsync_block_bytes"].quick)
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    sizes = {"fsync_blocks": args.blocks, "fsync_block_bytes": args.block_bytes}
    print(json.dumps(run({"sizes": sizes, "system": platform.system()}, args.workdir), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
