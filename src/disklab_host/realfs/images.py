"""Crash states of a recorded write log, CrashMonkey's way, and the device image of each.

A device with a volatile write cache promises only this: a write that
completed before a flush is on the medium once the flush completes. So a power
cut can leave, at each flush of the log, the image with every write before it;
and between two flushes, the writes since the last flush in any subset (the
drive may reorder what it has not flushed). :func:`crash_states` lists the
image at each flush, and between two flushes a prefix and a bounded number of
seeded random subsets of the writes since the last one. Each write is taken
as atomic (4 KiB and larger writes are not torn here).

:func:`build_image` makes one crash image: a sparse copy of the base image
(FICLONE where the workbench's filesystem offers reflinks, else only its data
extents, by copy_file_range) plus the chosen writes from the log, in log order.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)


@dataclass(frozen=True)
class Write:
    offset: int
    length: int
    pos: int  # where its bytes are in the data file


@dataclass(frozen=True)
class Log:
    """The log between two marks: its writes, and after how many of them each flush came."""

    before: tuple[Write, ...]  # writes before the first mark (the base image plus these is the start)
    writes: tuple[Write, ...]
    flushes: tuple[int, ...]  # flush k covers writes[: flushes[k]]
    flush_seq: tuple[int, ...]  # where each flush is in the log (line number)
    marks: dict[str, int]  # mark name -> number of writes before it
    mark_seq: dict[str, int]  # mark name -> its line number
    unflushed_before: int  # writes before the first mark that no flush before it covered
    errors: int  # writes and flushes the recorder failed on command


@dataclass(frozen=True)
class CrashState:
    name: str
    writes: tuple[int, ...]  # indexes into Log.writes, applied in this order
    after_return: bool  # the power cut this state stands for may come after the save returned


def read_log(path: Path, start: str, stop: str) -> Log:
    """The log at ``path`` from mark ``start`` to mark ``stop``. Raises ValueError if a mark is missing."""
    before: list[Write] = []
    writes: list[Write] = []
    flushes: list[int] = []
    flush_seq: list[int] = []
    marks: dict[str, int] = {}
    mark_seq: dict[str, int] = {}
    unflushed = errors = 0
    phase = "before"
    with open(path) as f:
        for seq, line in enumerate(f):
            entry = json.loads(line)
            kind = entry[0]
            if kind == "m":
                if entry[1] == start and phase == "before":
                    phase = "in"
                    marks[start], mark_seq[start] = 0, seq
                elif phase == "in":
                    marks[entry[1]], mark_seq[entry[1]] = len(writes), seq
                    if entry[1] == stop:
                        phase = "after"
                continue
            if phase == "after":
                continue
            if kind == "e":
                errors += 1
            elif kind == "w":
                (before if phase == "before" else writes).append(Write(*entry[1:4]))
                unflushed += phase == "before"
            elif kind == "f":
                if phase == "before":
                    unflushed = 0
                else:
                    flushes.append(len(writes))
                    flush_seq.append(seq)
    if start not in marks or stop not in marks:
        raise ValueError(f"the write log {path} lacks the mark {start if start not in marks else stop!r}")
    return Log(
        tuple(before), tuple(writes), tuple(flushes), tuple(flush_seq), marks, mark_seq, unflushed, errors
    )


def crash_states(log: Log, *, returned: str, subsets: int, seed: int = 0) -> list[CrashState]:
    """The crash states of ``log``: each flush's image; between flushes a prefix and ``subsets`` subsets.

    ``returned`` is the mark made when the save returned. A state stands for
    power cuts from its last write until the next flush (the first that would
    change it); it may come after the return when that flush is after the mark
    (or it holds a write made after it). States with the same writes are listed once.
    """
    rng = random.Random(seed)
    n = len(log.writes)
    ret_writes, ret_seq = log.marks[returned], log.mark_seq[returned]
    seen: set[tuple[int, ...]] = set()
    out: list[CrashState] = []

    def add(name: str, chosen: tuple[int, ...], next_flush_seq: int | None) -> None:
        if chosen in seen:
            return
        seen.add(chosen)
        late = next_flush_seq is None or next_flush_seq > ret_seq
        out.append(CrashState(name, chosen, late or (bool(chosen) and chosen[-1] >= ret_writes)))

    points = [(0, log.mark_seq[min(log.mark_seq, key=log.mark_seq.get)])] + list(
        zip(log.flushes, log.flush_seq, strict=True)
    )
    for k, (durable, seq) in enumerate(points):
        later = [(b, s) for b, s in zip(log.flushes, log.flush_seq, strict=True) if s > seq and b > durable]
        nxt, nxt_seq = later[0] if later else (None, None)
        label = "start" if k == 0 else f"flush {k}"
        add(f"{label}: {durable}/{n} writes", tuple(range(durable)), nxt_seq)
        pending = list(range(durable, nxt if nxt is not None else n))
        if len(pending) < 2:
            continue
        half = len(pending) // 2
        add(
            f"{label} + first {half} of {len(pending)} pending",
            tuple(range(durable)) + tuple(pending[:half]),
            nxt_seq,
        )
        for i in range(subsets):
            size = rng.randint(1, len(pending) - 1)
            pick = tuple(sorted(rng.sample(pending, size)))
            add(
                f"{label} + subset {i + 1}: {size} of {len(pending)} pending",
                tuple(range(durable)) + pick,
                nxt_seq,
            )
    add(f"all {n} writes", tuple(range(n)), None)
    return out


def sparse_copy(src: Path, dst: Path) -> str:
    """Copy ``src`` to ``dst`` keeping holes; "reflink" or "extents" (how)."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        with contextlib.suppress(OSError):
            fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
            return "reflink"
        size = os.fstat(fin.fileno()).st_size
        fout.truncate(size)
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fin.fileno(), pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            end = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            off = start
            while off < end:
                done = os.copy_file_range(fin.fileno(), fout.fileno(), end - off, off, off)
                if done == 0:
                    raise OSError(f"copy_file_range made no progress copying {src} at {off}")
                off += done
            pos = end
    return "extents"


def apply_writes(image: Path, data: Path, writes: list[Write] | tuple[Write, ...]) -> None:
    """Write each of ``writes`` (bytes from ``data``) into ``image``, in order."""
    fd = os.open(image, os.O_WRONLY)
    try:
        with open(data, "rb") as src:
            for w in writes:
                src.seek(w.pos)
                os.pwrite(fd, src.read(w.length), w.offset)
    finally:
        os.close(fd)


def build_image(base: Path, data: Path, log: Log, state: CrashState, dst: Path) -> None:
    """The crash image of ``state``: ``base`` (the image at the start mark) plus the state's writes."""
    sparse_copy(base, dst)
    apply_writes(dst, data, [log.writes[i] for i in state.writes])
