"""One host's part in a checkpoint burst: every client saves its own shard into one shared directory at once.

A together run's burst (roles/together, after the storm) has every client save a checkpoint shard of the
same size into one directory on the shared filesystem at one common start, the way every rank of a training
job saves at once (MLPerf Storage v2.0's checkpointing, with fsync). Each shard is saved as an atomic save
is: a temp file, the durable sync (fsync; F_FULLFSYNC on macOS), rename to its final name, then an fsync of
the directory. Once every shard is durable, one host writes the commit marker, ``.metadata``, the same way:
the pattern torch.distributed.checkpoint uses for its own ``.metadata``, so a reader that finds the marker
finds every shard it lists. Then the read-back: each client reads a shard another client wrote (IOR's
``-C``: rank r reads rank r + 1's, the last reads rank 0's), cold in its own page cache, at a common start,
and checks every byte. disklab.burst computes the figures. Commands, run with the lab venv's Python:

- ``together-burst-prepare --dir DIR --ranks N --mib MIB``, on one host, outside any clock: makes DIR,
  removes an earlier burst's shards and marker, and refuses, with the numbers, a filesystem that has not
  room for N shards of MIB MiB;
- ``together-burst-save --dir DIR --rank R --ranks N --mib MIB (--at NS | --start-file PATH)``: makes its
  shard's bytes (:func:`shard_bytes`, deterministic from the rank) before it says it is ready, then at the
  start saves them; the result line gives each phase's time (write, sync, rename, directory fsync) and when
  the save started and ended on this host's clock;
- ``together-burst-commit --dir DIR --ranks N --mib MIB``: writes ``.metadata`` listing every shard, or
  refuses in one line when a shard is missing or not MIB MiB long (then nothing is committed, and there is no
  read-back);
- ``together-burst-read --dir DIR --rank R --ranks N --mib MIB (--at NS | --start-file PATH)
  [--become-allowed]``: reads the shard of rank (R + 1) mod N once the marker lists it: before it says it is
  ready, it makes the bytes that shard must hold, makes the shard cold in this host's page cache
  (cache.evict) and measures its residency (the proof: at most 1 % resident once evicted, just before it
  says it is ready: :func:`cache_state`); at the start it reads the whole shard into memory, then compares
  every byte;
- ``together-burst-clear --dir DIR``: removes the shards and the marker (the burst's scratch), on one host.

The shards are scratch: their bytes are random, made from the rank, so a reader knows what it must find.
Every command takes ``--shared SOURCE`` and refuses to work in a directory no longer on that mount
(together.storage). Exit status 2 on bad input or a refusal, in one line; 1 when the save or the read fails
(its OSError), naming the shared filesystem when its server stopped answering.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import stat
import time
from pathlib import Path

from ..cache import pagecache
from ..common.durable import durable_sync
from ..common.fsio import fsync_dir
from ..common.units import MIB
from . import storage
from .start import add_start_arguments, start_now

MARKER = ".metadata"  # the commit marker: torch.distributed.checkpoint's name for its own
CHUNK = MIB  # bytes per write(2) and per generated block


def shard_name(rank: int, ranks: int) -> str:
    return f"shard-{rank:05d}-of-{ranks:05d}.bin"


def shard_bytes(rank: int, size: int, seed: int = 0) -> bytes:
    """The bytes rank ``rank``'s shard holds: ``size`` random bytes, the same on every host for one rank."""
    rng = random.Random(f"disklab-burst:{seed}:{rank}")
    return b"".join(rng.randbytes(min(CHUNK, size - off)) for off in range(0, size, CHUNK))


def write_durably(directory: Path, name: str, data: bytes, sync) -> dict:
    """Save ``data`` as ``directory``/``name`` atomically: temp file, ``sync`` (the durable call), rename,
    directory fsync. Returns each phase's time in s: {"write_s", "sync_s", "rename_s", "dir_fsync_s",
    "time_s"} (the whole save). An OSError is raised as it comes, with the temp file removed."""
    final = directory / name
    tmp = directory / f"{name}.tmp"
    t0 = time.perf_counter_ns()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            done = 0
            while done < len(view):
                done += os.write(fd, view[done : done + CHUNK])
            t1 = time.perf_counter_ns()
            sync(fd)
            t2 = time.perf_counter_ns()
        finally:
            os.close(fd)
        os.rename(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    t3 = time.perf_counter_ns()
    fsync_dir(directory)
    t4 = time.perf_counter_ns()
    return {
        "write_s": (t1 - t0) / 1e9,
        "sync_s": (t2 - t1) / 1e9,
        "rename_s": (t3 - t2) / 1e9,
        "dir_fsync_s": (t4 - t3) / 1e9,
        "time_s": (t4 - t0) / 1e9,
    }


def clear(directory: Path) -> list[str]:
    """Remove an earlier burst's shards, temp files and marker from ``directory``; the names removed."""
    removed = []
    if directory.is_dir():
        for p in sorted(directory.iterdir()):
            if p.name.startswith("shard-") or p.name.startswith(MARKER):
                p.unlink(missing_ok=True)
                removed.append(p.name)
    return removed


def prepare(directory: Path, ranks: int, mib: int) -> dict:
    """Make ``directory`` ready for a burst of ``ranks`` shards of ``mib`` MiB; ValueError with the numbers
    when its filesystem has not room for them."""
    _checked(ranks, mib)
    directory.mkdir(parents=True, exist_ok=True)
    removed = clear(directory)
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    need = ranks * mib * MIB
    if free < need:
        raise ValueError(
            f"{directory} has {free / MIB:.0f} MiB free, and the burst's {ranks} shards of {mib} MiB need "
            f"{need / MIB:.0f} MiB: lower together_burst_mib or free space there"
        )
    return {"dir": str(directory), "free_bytes": free, "need_bytes": need, "removed": len(removed)}


def _checked(ranks: int, mib: int | None = None, rank: int | None = None) -> None:
    """ValueError naming the argument: --ranks and --mib at least 1, --rank in [0, --ranks)."""
    if ranks < 1:
        raise ValueError(f"--ranks must be at least 1, got {ranks}")
    if mib is not None and mib < 1:
        raise ValueError(f"--mib must be at least 1, got {mib}")
    if rank is not None and not 0 <= rank < ranks:
        raise ValueError(f"--rank must be at least 0 and below --ranks ({ranks}), got {rank}")


def save(directory: Path, rank: int, ranks: int, mib: int, args: argparse.Namespace) -> dict:
    """Rank ``rank``'s shard, saved at the start ``args`` give (together.start's arguments)."""
    _checked(ranks, mib, rank)
    try:  # a dead mount's OSError is raised as it is; a missing directory is refused
        is_dir = stat.S_ISDIR(directory.stat().st_mode)
    except FileNotFoundError:
        is_dir = False
    if not is_dir:
        raise ValueError(f"{directory}: no such directory: together-burst-prepare makes it on one host first")
    data = shard_bytes(rank, mib * MIB)
    sync = durable_sync(platform.system())
    started = start_now(args)
    phases = write_durably(directory, shard_name(rank, ranks), data, sync)
    return {
        "rank": rank,
        "file": shard_name(rank, ranks),
        "size_bytes": len(data),
        "sync_call": sync.name,
        "together": started,
        **phases,
    }


def commit(directory: Path, ranks: int, mib: int) -> dict:
    """Write the commit marker listing every shard of ``ranks``; ValueError naming the shards missing or
    not ``mib`` MiB long (a marker over a missing or short shard is the torn checkpoint it prevents)."""
    _checked(ranks, mib)
    shards = [directory / shard_name(r, ranks) for r in range(ranks)]
    missing = [p.name for p in shards if not p.is_file()]
    if missing:
        raise ValueError(f"not committed: {directory} holds no {', '.join(missing)}")
    short = [f"{p.name} ({p.stat().st_size} bytes)" for p in shards if p.stat().st_size != mib * MIB]
    if short:
        raise ValueError(f"not committed: not {mib} MiB long: {', '.join(short)}")
    listed = [{"rank": r, "file": p.name, "size_bytes": p.stat().st_size} for r, p in enumerate(shards)]
    data = json.dumps({"ranks": ranks, "shards": listed}, indent=1).encode()
    phases = write_durably(directory, MARKER, data, durable_sync(platform.system()))
    return {"marker": MARKER, "shards": listed, **phases}


def read_back(
    directory: Path, rank: int, ranks: int, mib: int, args: argparse.Namespace, become_allowed: bool
) -> dict:
    """Read rank (``rank`` + 1) mod ``ranks``'s shard, cold, at the start ``args`` give; check its bytes."""
    _checked(ranks, mib, rank)
    of = (rank + 1) % ranks
    name = shard_name(of, ranks)
    try:
        listed = json.loads((directory / MARKER).read_text(encoding="utf-8"))["shards"]
        files = {s.get("file") for s in listed if isinstance(s, dict)}
    except FileNotFoundError:
        raise ValueError(
            f"{directory} holds no commit marker ({MARKER}): the checkpoint was not committed"
        ) from None
    except (ValueError, KeyError, TypeError):  # not JSON, or not a list of shards
        raise ValueError(f"{directory}/{MARKER} is not a commit marker this burst wrote") from None
    if name not in files:
        raise ValueError(f"the commit marker in {directory} does not list {name}")
    path = directory / name
    size = mib * MIB
    expected = shard_bytes(of, size)
    eviction = pagecache.evict(path, become_allowed=become_allowed, system=platform.system())
    before = pagecache.residency(path)
    buf = bytearray(size)
    view = memoryview(buf)
    started = start_now(args)
    t0 = time.perf_counter_ns()
    got = 0
    with open(path, "rb", buffering=0) as f:
        while got < size and (n := f.readinto(view[got:])):
            got += n
        extra = f.read(1)
    t1 = time.perf_counter_ns()
    return {
        "rank": rank,
        "of_rank": of,
        "file": name,
        "size_bytes": got,
        "time_s": (t1 - t0) / 1e9,
        "together": started,
        "matches": got == size and not extra and buf == expected,
        "cache_state": cache_state(before),
        "residency_before": {k: before[k] for k in ("fraction", "resident_bytes", "trust")},
        "eviction": eviction["method"],
    }


def cache_state(residency: dict) -> str:
    """A read-back's cache state from its shard's residency once evicted, just before it says it is ready:
    ``cold`` (at most COLD_MAX_FRACTION resident, mincore trusted), ``not_cold`` (more: the eviction did
    not take), ``cold_unverified`` (mincore cannot be trusted here, cache.residency_trust)."""
    if residency["trust"] != "ok":
        return "cold_unverified"
    return "cold" if residency["fraction"] <= pagecache.COLD_MAX_FRACTION else "not_cold"


def _parser(prog: str, *, start: bool) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"disklab_host {prog}", description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="the burst's directory on the shared filesystem")
    storage.add_argument(ap)
    if start:
        add_start_arguments(ap)
    return ap


def main_prepare(argv: list[str] | None = None) -> int:
    ap = _parser("together-burst-prepare", start=False)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--mib", type=int, required=True)
    args = ap.parse_args(argv)
    return storage.run(
        "together-burst-prepare", lambda: prepare(args.dir, args.ranks, args.mib), args.dir, args.shared
    )


def main_save(argv: list[str] | None = None) -> int:
    ap = _parser("together-burst-save", start=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--mib", type=int, required=True)
    args = ap.parse_args(argv)
    work = lambda: save(args.dir, args.rank, args.ranks, args.mib, args)  # noqa: E731
    return storage.run("together-burst-save", work, args.dir, args.shared)


def main_commit(argv: list[str] | None = None) -> int:
    ap = _parser("together-burst-commit", start=False)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--mib", type=int, required=True)
    args = ap.parse_args(argv)
    work = lambda: commit(args.dir, args.ranks, args.mib)  # noqa: E731
    return storage.run("together-burst-commit", work, args.dir, args.shared)


def main_read(argv: list[str] | None = None) -> int:
    ap = _parser("together-burst-read", start=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--mib", type=int, required=True)
    ap.add_argument("--become-allowed", action="store_true", help="eviction may use sudo -n (drop_caches)")
    args = ap.parse_args(argv)
    return storage.run(
        "together-burst-read",
        lambda: read_back(args.dir, args.rank, args.ranks, args.mib, args, args.become_allowed),
        args.dir,
        args.shared,
    )


def main_clear(argv: list[str] | None = None) -> int:
    args = _parser("together-burst-clear", start=False).parse_args(argv)
    return storage.run("together-burst-clear", lambda: {"removed": clear(args.dir)}, args.dir, args.shared)
