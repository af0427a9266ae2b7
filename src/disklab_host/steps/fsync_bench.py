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
sync call the write part alone is kept too. ``WARMUP_BLOCKS`` blocks of each
mode are written first and kept apart. The measured blocks are written in
``ROUNDS`` rounds, the modes taking turns round by round (the first mode of
each round rotates), so drift on the host lands on every mode alike; each
round is one test unit when two runs are compared (disklab.verdicts: its
median), and carries its I/O record (common.iorecord), its noise record
(common.noise: pressure stall, steal, swap on the host meanwhile) and its
time split (common.timesplit: CPU, blocked on I/O, waiting to run), read
outside the clock (common.sampling). Each mode's ``io_record`` is its rounds'
summed. A mode this OS lacks is recorded as unsupported
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

from ..common import iorecord, sampling, stats
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
    "ROUNDS",
    "WARMUP_BLOCKS",
    "barrierfsync_command",
    "bench_mode",
    "bench_modes",
    "fullfsync_command",
    "main",
    "rotation",
    "round_sizes",
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


# The rounds a mode's measured blocks are split into (common.stats.ROUNDS): each round is one test unit of
# a comparison (its median), and modes take turns round by round, so drift lands on every mode alike.
ROUNDS = stats.ROUNDS


def round_sizes(blocks: int, rounds: int = ROUNDS) -> list[int]:
    """How many measured blocks each round writes (common.stats.round_sizes); ValueError naming
    fsync_blocks when it is not > 0."""
    require_positive("fsync_blocks", blocks)
    return stats.round_sizes(blocks, rounds)


def rotation(modes: list[str], r: int) -> list[str]:
    """The order the modes run in round ``r``: ``modes`` rotated left by r, so no mode always goes first."""
    if not modes:
        return []
    k = r % len(modes)
    return modes[k:] + modes[:k]


class _Mode:
    """One mode's open file: writes blocks, times each write and its sync, keeps the rounds' records."""

    def __init__(self, mode: str, path: Path, blocks: int, block_bytes: int, system: str, fcntl_mod):
        self.mode, self.path, self.block_bytes = mode, path, block_bytes
        self.call, self.sync = _sync_call(mode, system, fcntl_mod)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DSYNC if mode == "o_dsync" else 0)
        self.total: list[int] = []
        self.write_only: list[int] = []
        self.rounds: list[dict] = []
        self.fd = os.open(path, flags, 0o644)

    def write(self, count: int) -> None:
        """Write ``count`` blocks, each followed by this mode's sync; append each latency in ns."""
        for _ in range(count):
            # fresh random bytes per block, made before the clock: one call for the whole mode (GBs at a
            # large lab_run_fsync_blocks) would hold off SIGTERM until it returned
            block = os.urandom(self.block_bytes)
            t0 = time.perf_counter_ns()
            if os.write(self.fd, block) != self.block_bytes:
                raise OSError(f"short write of a {self.block_bytes}-byte block to {self.path}")
            t1 = time.perf_counter_ns()
            if self.sync is not None:
                self.sync(self.fd)
            t2 = time.perf_counter_ns()
            self.total.append(t2 - t0)
            self.write_only.append(t1 - t0)

    def measure_round(self, count: int, interval: sampling.Interval) -> None:
        """One round of ``count`` measured blocks, with its I/O, noise and time-split records."""
        first = len(self.total) - WARMUP_BLOCKS
        before = interval.begin()
        t0 = time.perf_counter_ns()
        self.write(count)
        wall = (time.perf_counter_ns() - t0) / 1e9
        recs = interval.end(
            before, f"round {len(self.rounds)}: {count} blocks, first write to last sync", wall
        )
        self.rounds.append({"first": first, "count": count, "wall_s": wall, **recs})

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)

    def result(self, system: str, fcntl_mod) -> dict:
        measured = self.total[WARMUP_BLOCKS:]
        ios = [r["io_record"] for r in self.rounds]
        out = {
            "status": "ok",
            "call": self.call,
            "warmup_samples_ns": self.total[:WARMUP_BLOCKS],
            "samples_ns": measured,
            "latency": latency_summary_us(measured),
            "rounds": self.rounds,
            "io_record": iorecord.combine(
                ios, f"the {len(measured)} measured blocks, its {len(ios)} rounds summed"
            ),
        }
        if self.sync is not None:
            out["write_samples_ns"] = self.write_only[WARMUP_BLOCKS:]
            out["write_latency"] = latency_summary_us(self.write_only[WARMUP_BLOCKS:])
        if self.mode in FCNTL_MODES:
            out["fcntl_command"] = self.sync.command
            out["fcntl_command_source"] = _COMMANDS[self.mode](system, fcntl_mod)[1]
            out["fallback"] = self.sync.fallback
            out["validation"] = NOT_ON_REAL_HARDWARE
        return out


def bench_modes(
    modes: list[str],
    workdir: Path,
    blocks: int,
    block_bytes: int,
    *,
    system: str | None = None,
    fcntl_mod=fcntl,
    interval: sampling.Interval | None = None,
    rounds: int = ROUNDS,
    paths: dict[str, Path] | None = None,
) -> dict:
    """Each of ``modes`` on a fresh file in ``workdir``: its warm-up blocks, then ``blocks`` measured
    blocks in rounds (:func:`round_sizes`) that take turns across the modes (:func:`rotation`).
    ``paths`` names a mode's file (default ``workdir/fsync_<mode>.bin``).

    Returns ``{mode: {"status": "ok", "call", "samples_ns" (time order), "latency", "rounds":
    [{"first", "count", "wall_s", "io_record", "noise", "time_split"}], "io_record" (the rounds
    summed), ...}}`` or ``{"status": "unsupported", "reason"}`` for a mode this OS lacks. The fcntl modes
    add ``fcntl_command``, ``fcntl_command_source``, ``fallback`` and ``validation``. Files are deleted
    afterwards. Raises OSError on a short write or an ``os.fsync`` / ``os.fdatasync`` error (a failed
    sync is never retried).
    """
    system = system or platform.system()
    interval = interval or sampling.Interval(workdir, enabled=False)
    out: dict[str, dict] = {}
    open_modes: dict[str, _Mode] = {}
    try:
        for mode in modes:
            reason = unsupported_reason(mode, system, fcntl_mod)
            if reason:
                out[mode] = {"status": "unsupported", "reason": reason}
                continue
            m = open_modes[mode] = _Mode(
                mode, workdir / f"fsync_{mode}.bin", blocks, block_bytes, system, fcntl_mod
            )
            m.write(WARMUP_BLOCKS)
        running = list(open_modes)
        for r, count in enumerate(round_sizes(blocks, rounds)):
            for mode in rotation(running, r):
                open_modes[mode].measure_round(count, interval)
        for mode, m in open_modes.items():
            out[mode] = m.result(system, fcntl_mod)
    finally:
        for m in open_modes.values():
            m.close()
    return {mode: out[mode] for mode in modes}


def bench_mode(
    mode: str,
    path: Path,
    blocks: int,
    block_bytes: int,
    *,
    system: str | None = None,
    fcntl_mod=fcntl,
    interval: sampling.Interval | None = None,
    rounds: int = 1,
) -> dict:
    """One mode alone, on a fresh ``path`` (the bench compares it with fio): :func:`bench_modes`'s record
    of it, in one round unless ``rounds`` says more."""
    path = Path(path)
    return bench_modes([mode], path.parent, blocks, block_bytes, system=system, fcntl_mod=fcntl_mod,
                       interval=interval, rounds=rounds, paths={mode: path})[mode]  # fmt: skip


def run(cfg: dict, workdir: Path, *, fcntl_mod=fcntl) -> dict:
    """Run every mode in MODE_ORDER in ``workdir``, in interleaved rounds; the ``fsync_bench`` section.

    Sizes: ``cfg["sizes"]["fsync_blocks"]`` and ``["fsync_block_bytes"]``,
    integers > 0 (else ValueError naming the setting). ``modes`` maps each mode
    to its :func:`bench_modes` record; ``round_order`` lists the modes in the order they ran in each round.
    ``fcntl_mod`` is injectable for tests.
    """
    sizes = cfg["sizes"]
    for name in ("fsync_blocks", "fsync_block_bytes"):
        require_positive(name, sizes[name])
        if not isinstance(sizes[name], int):
            raise ValueError(f"{name} must be an integer, got {sizes[name]!r}")
    blocks, block_bytes = sizes["fsync_blocks"], sizes["fsync_block_bytes"]
    workdir = Path(workdir)
    system = cfg.get("system") or platform.system()
    modes = bench_modes(MODE_ORDER, workdir, blocks, block_bytes, system=system, fcntl_mod=fcntl_mod,
                        interval=sampling.Interval(workdir, system=system))  # fmt: skip
    ran = [m for m in MODE_ORDER if modes[m]["status"] == "ok"]
    return {
        "status": "ok",
        "system": system,
        "blocks": blocks,
        "block_bytes": block_bytes,
        "warmup_blocks": WARMUP_BLOCKS,
        "mode_order": MODE_ORDER,
        "rounds": len(round_sizes(blocks)),
        "round_order": [rotation(ran, r) for r in range(len(round_sizes(blocks)))],
        "data": "os.urandom, a fresh file per mode, deleted afterwards",
        "workdir_st_blksize_bytes": os.stat(workdir).st_blksize,
        "modes": modes,
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
