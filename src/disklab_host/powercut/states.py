"""Persistence models and the crash states each one allows after each recorded call.

The idea is ALICE's (Pillai et al., OSDI 2014): record the calls, then build
every on-disk state a crash could leave from a model of what reaches the disk.

Models (docs/powercut.md states them in full):

* ``process-kill`` (SIGKILL, OOM kill): every call up to the crash took
  effect, because the page cache outlives the process (the lesson, Layer 2).
  One state per crash point.
* ``power-cut`` (the POSIX minimum, fsync(2) and rename(2)): a file's data and
  size are durable only after fsync or fdatasync of that file (or sync/syncfs);
  a directory entry (create, mkdir, rename, exchange, unlink) is durable only after
  fsync of its directory. Anything not yet durable may or may not have
  reached the disk, and metadata may reach it before data. Writes through an
  fd opened with O_SYNC/O_DSYNC are durable when they return.

Power-cut states enumerated per crash point (U = ops not yet durable):
``none`` (no op of U persisted), ``all`` (all of U), ``metadata_only`` (the
directory ops of U but none of its data ops: the rename reached the disk
before the data, the 2009 ext4 case), ``data_only`` (the reverse), and
``torn_<m>``: the directory ops of U plus the first m data ops of U in call
order (torn writes, at call boundaries). Bound: at most ``max_torn`` torn
states per crash point, spread evenly over 1..len(data ops)-1; a single call
is never split, so tears inside one write are not enumerated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

DATA_KINDS = frozenset({"write", "truncate"})
META_KINDS = frozenset({"create", "mkdir", "rename", "exchange", "unlink"})
BARRIER_KINDS = frozenset({"fsync", "fdatasync", "dirsync", "sync"})
DEFAULT_MAX_TORN = 32


@dataclass(frozen=True)
class Op:
    """One effect of a recorded call on the checkpoint directory.

    ``call`` is the call index. Paths are posix, relative to the directory.
    ``ino`` names a file across renames (initial files 0..n-1). ``offset`` and
    ``size`` are in bytes; ``data`` is the bytes written; ``durable`` marks a
    write through an O_SYNC/O_DSYNC fd.
    """

    call: int
    kind: str
    ino: int | None = None
    path: str | None = None
    dst: str | None = None
    offset: int = 0
    size: int = 0
    data: bytes = b""
    durable: bool = False

    def __post_init__(self):
        if self.kind not in DATA_KINDS | META_KINDS | BARRIER_KINDS:
            raise ValueError(f"Op.kind must be one of the known kinds, got {self.kind!r}")


def _parent(path: str) -> str:
    head = path.rsplit("/", 1)[0] if "/" in path else "."
    return head or "."


def posix_covers(barrier: Op, op: Op) -> bool:
    """True when ``barrier`` (an earlier-or-later barrier op) makes ``op`` durable under POSIX.

    fsync/fdatasync of a file cover that file's data ops (fsync(2), fdatasync(2));
    fsync of a directory covers the entries created, renamed or removed in it;
    sync/syncfs cover everything (sync(2)). The caller checks the order.
    """
    if barrier.kind == "sync":
        return True
    if barrier.kind in ("fsync", "fdatasync"):
        return op.kind in DATA_KINDS and op.ino == barrier.ino
    if barrier.kind == "dirsync" and op.kind in META_KINDS:
        touched = {_parent(op.path)} | ({_parent(op.dst)} if op.dst else set())
        return barrier.path in touched
    return False


@dataclass(frozen=True)
class Model:
    """A persistence model. ``covers`` None means every op persists at once (process-kill)."""

    name: str
    label: str
    covers: Callable[[Op, Op], bool] | None


PROCESS_KILL = Model("process-kill", "SIGKILL or OOM kill: the page cache survives", None)
POWER_CUT = Model(
    "power-cut", "POSIX minimum: only fsync'd data and fsync'd directories survive", posix_covers
)
MODELS = {m.name: m for m in (PROCESS_KILL, POWER_CUT)}


def model_named(name: str) -> Model:
    """The model called ``name``; raises ValueError listing the known ones."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {name!r}")
    return MODELS[name]


@dataclass(frozen=True)
class CrashState:
    """One state: crash after call ``point`` (the save had ``returned`` or not), ops applied."""

    point: int
    returned: bool
    name: str
    applied: frozenset[int]  # positions in the flat op list
    lost: tuple[int, ...]  # positions of ops up to the point that did not persist


def durable_positions(ops: list[Op], upto: int, covers: Callable[[Op, Op], bool]) -> set[int]:
    """Positions of ops (with call <= upto) made durable by a later barrier (call <= upto)."""
    live = [i for i, op in enumerate(ops) if op.call <= upto]
    barriers = [ops[i] for i in live if ops[i].kind in BARRIER_KINDS]
    out = set()
    for i in live:
        op = ops[i]
        synced = any(b.call >= op.call and b is not op and covers(b, op) for b in barriers)
        if op.kind in BARRIER_KINDS or op.durable or synced:
            out.add(i)
    return out


def _spread(n: int, k: int) -> list[int]:
    """Up to k values evenly spread over 1..n-1 (all of them when n-1 <= k)."""
    if n - 1 <= k:
        return list(range(1, n))
    return sorted({1 + round(j * (n - 2) / (k - 1)) for j in range(k)})


def states_at(
    ops: list[Op], point: int, returned: bool, model: Model, max_torn: int = DEFAULT_MAX_TORN
) -> list[CrashState]:
    """The distinct crash states ``model`` allows when the crash follows call ``point``.

    Raises ValueError when max_torn < 1.
    """
    if max_torn < 1:
        raise ValueError(f"max_torn must be >= 1, got {max_torn}")
    live = [i for i, op in enumerate(ops) if op.call <= point]
    if model.covers is None:
        return [CrashState(point, returned, "all", frozenset(live), ())]
    durable = durable_positions(ops, point, model.covers)
    pending = [i for i in live if i not in durable]
    meta = [i for i in pending if ops[i].kind in META_KINDS]
    data = [i for i in pending if ops[i].kind in DATA_KINDS]
    choices = {"none": [], "all": pending, "metadata_only": meta, "data_only": data}
    for m in _spread(len(data), max_torn):
        choices[f"torn_{m}"] = meta + data[:m]
    out, seen = [], set()
    for name, extra in choices.items():
        applied = frozenset(durable | set(extra))
        if applied in seen:
            continue
        seen.add(applied)
        lost = tuple(i for i in pending if i not in applied)
        out.append(CrashState(point, returned, name, applied, lost))
    return out


def enumerate_states(
    ops: list[Op], n_calls: int, returned: bool, model: Model, max_torn: int = DEFAULT_MAX_TORN
) -> list[CrashState]:
    """States after every call 0..n_calls-1, plus after the save returned (when it did)."""
    out = []
    for point in range(n_calls):
        out += states_at(ops, point, False, model, max_torn)
    if returned and n_calls:
        out += states_at(ops, n_calls - 1, True, model, max_torn)
    return out


def apply_ops(
    initial: dict[str, bytes], initial_inodes: dict[str, int], ops: list[Op], applied: frozenset[int]
) -> dict[str, bytes]:
    """The files (relative path -> bytes) after applying the ``applied`` ops, in call order.

    An op whose name is gone (its create did not persist) changes nothing; a
    write past the end of a file leaves zeros in the gap, as a sparse write does.
    """
    names = dict(initial_inodes)
    content = {initial_inodes[p]: bytearray(b) for p, b in initial.items()}
    for i, op in enumerate(ops):
        if i not in applied:
            continue
        if op.kind == "create":
            names[op.path] = op.ino
            content.setdefault(op.ino, bytearray())
        elif op.kind == "rename" and op.path in names:
            names[op.dst] = names.pop(op.path)
        elif op.kind == "exchange":  # renameat2 RENAME_EXCHANGE: the two names swap their files
            a, b = names.pop(op.path, None), names.pop(op.dst, None)
            for path, ino in ((op.path, b), (op.dst, a)):
                if ino is not None:
                    names[path] = ino
        elif op.kind == "unlink":
            names.pop(op.path, None)
        elif op.kind == "truncate":
            buf = content.setdefault(op.ino, bytearray())
            del buf[op.size :]
            buf.extend(b"\0" * (op.size - len(buf)))
        elif op.kind == "write":
            buf = content.setdefault(op.ino, bytearray())
            if len(buf) < op.offset:
                buf.extend(b"\0" * (op.offset - len(buf)))
            buf[op.offset : op.offset + len(op.data)] = op.data
    return {p: bytes(content.get(ino, b"")) for p, ino in names.items()}
