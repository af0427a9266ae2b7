"""Materialise crash states and classify the checkpoint each one leaves.

Outcomes (the power-cut issue's terms):

* ``new_ok``: the checkpoint loads and equals the new state dict;
* ``old_ok``: it equals the previous state dict and the crash came before the
  save returned;
* ``rolled_back``: it equals the previous state dict but the save had already
  returned: the durability promise is broken, the data is not corrupt;
* ``corrupt``: it does not load, or loads but equals neither (error as text);
* ``missing``: no file at the checkpoint path.

A load is ``torch.load(weights_only=True)`` or safetensors ``load_file``;
every tensor is compared with the expected one, so a file that loads but
holds zeros where data was lost is still corrupt.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from ..checkpoint.verdict import classify
from ..common.units import ibytes
from .states import CrashState, Model, Op, apply_ops, enumerate_states

OUTCOMES = ("new_ok", "old_ok", "rolled_back", "corrupt", "missing")
UNSAFE = ("corrupt", "missing")
FORMATS = ("torch", "safetensors")


def verdict_of(counts: dict[str, int]) -> str:
    """A save's verdict from its crash states' outcome counts: unsafe if any lost the checkpoint
    (corrupt or missing), else rolled_back if any brought back the old one after the save returned,
    else safe."""
    if any(counts[o] for o in UNSAFE):
        return "unsafe"
    return "rolled_back" if counts["rolled_back"] else "safe"


def materialise(files: dict[str, bytes], scratch: Path) -> Path:
    """Write ``files`` (relative path -> bytes) into a fresh ``scratch`` directory; returns it."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    for rel, data in files.items():
        path = scratch / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return scratch


def load_verdict(path: Path, *, fmt: str, old_state: dict, new_state: dict) -> tuple[str, str | None]:
    """Load the checkpoint at ``path``: ("new" | "old" | "corrupt" | "missing", error text or None).

    The load and its checks are the crash lab's (:func:`disklab_host.checkpoint.verdict.classify`, torch.load
    with its default weights_only, every tensor compared with the saved states).
    Raises ValueError for a ``fmt`` other than "torch" or "safetensors".
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    old_step, new_step = int(old_state["step"]), int(new_state["step"])
    found = classify(
        path,
        fmt="pt" if fmt == "torch" else "safetensors",
        old_step=old_step,
        new_step=new_step,
        states={old_step: old_state, new_step: new_state},
    )
    kind = found["outcome"]
    if kind == "missing":
        return "missing", None
    if kind in ("new_ok", "old_ok"):
        return kind.removesuffix("_ok"), None
    if kind == "unexpected_step":
        return "corrupt", f"loaded, but holds step {found['step']}: neither the old nor the new state dict"
    return "corrupt", (found["error"] or "(no message)")[:300]


def outcome(verdict: str, returned: bool) -> str:
    """Map a load verdict and whether the save had returned to one of OUTCOMES."""
    if verdict == "new":
        return "new_ok"
    if verdict == "old":
        return "rolled_back" if returned else "old_ok"
    return verdict


def describe_loss(ops: list[Op], state: CrashState, names: dict[int, str]) -> str:
    """Plain words for what a state lost, e.g. "not persisted: 2 data op(s) (4.00 MiB) to ckpt.pt.tmp"."""
    if not state.lost:
        return "every call up to the crash persisted"
    parts = []
    lost = [ops[i] for i in state.lost]
    writes: dict[str, list[int]] = {}
    for op in lost:
        if op.kind in ("write", "truncate"):
            writes.setdefault(names.get(op.ino, f"inode {op.ino}"), []).append(len(op.data))
        elif op.kind == "rename":
            parts.append(f"rename {op.path} -> {op.dst}")
        elif op.kind == "exchange":
            parts.append(f"exchange {op.path} <-> {op.dst}")
        else:
            parts.append(f"{op.kind} {op.path}")
    for name, sizes in writes.items():
        parts.append(f"{len(sizes)} data op(s) ({ibytes(sum(sizes))}) to {name}")
    kept = [ops[i] for i in state.applied if ops[i].kind in ("rename", "exchange", "create", "unlink")]
    note = "not persisted: " + "; ".join(parts)
    if kept and any(op.kind in ("write", "truncate") for op in lost):
        note += " (while the directory changes did persist)"
    return note


def inode_names(ops: list[Op], initial_inodes: dict[str, int]) -> dict[int, str]:
    """The last name each inode had in the recording (for messages)."""
    names = {ino: p for p, ino in initial_inodes.items()}
    for op in ops:
        if op.kind == "create":
            names[op.ino] = op.path
    by_path = {p: ino for ino, p in names.items()}
    for op in ops:
        if op.kind == "rename" and op.path in by_path:
            ino = by_path.pop(op.path)
            names[ino] = f"{op.path} (renamed to {op.dst})"
            by_path[op.dst] = ino
        elif op.kind == "exchange":
            a, b = by_path.pop(op.path, None), by_path.pop(op.dst, None)
            for path, other, ino in ((op.dst, op.path, a), (op.path, op.dst, b)):
                if ino is not None:
                    names[ino] = f"{other} (exchanged with {path})"
                    by_path[path] = ino
    return names


def check_model(
    recording, model: Model, *, ckpt: str, fmt: str, old_state: dict, new_state: dict,
    scratch: Path, max_torn: int,
) -> dict:  # fmt: skip
    """Classify every crash state of ``recording`` under ``model``.

    Returns {"verdict", "states", "distinct_files", "counts", "first_unsafe",
    "first_rolled_back", "samples"}: ``samples`` keeps one row per state
    [call index, returned, state name, outcome]; ``first_unsafe`` is the
    earliest corrupt or missing state with the call text and why.
    """
    ops = recording.ops
    states = enumerate_states(ops, len(recording.calls), recording.returned, model, max_torn)
    keys: dict[frozenset, bytes] = {}
    verdicts: dict[bytes, tuple[str, str | None]] = {}
    counts = dict.fromkeys(OUTCOMES, 0)
    samples, first_unsafe, first_rb = [], None, None
    names = inode_names(ops, recording.initial_inodes)
    for st in states:
        if st.applied not in keys:  # keep hashes, not files: each state is a few MiB
            files = apply_ops(recording.initial, recording.initial_inodes, ops, st.applied)
            key = hashlib.sha256(files[ckpt]).digest() if ckpt in files else b"missing"
            keys[st.applied] = key
            if key not in verdicts:
                where = materialise(files, scratch)
                found = load_verdict(where / ckpt, fmt=fmt, old_state=old_state, new_state=new_state)
                verdicts[key] = (*found, len(files.get(ckpt, b"")))
                shutil.rmtree(where)
        verdict, error, size = verdicts[keys[st.applied]]
        out = outcome(verdict, st.returned)
        counts[out] += 1
        samples.append([st.point, st.returned, st.name, out])
        if out in UNSAFE and first_unsafe is None:
            first_unsafe = _point(recording, ops, st, out, error, names, ckpt, size)
        if out == "rolled_back" and first_rb is None:
            first_rb = _point(recording, ops, st, out, error, names, ckpt, size)
    return {
        "verdict": verdict_of(counts),
        "states": len(states),
        "distinct_files": len(verdicts),
        "counts": counts,
        "first_unsafe": first_unsafe,
        "first_rolled_back": first_rb,
        "samples": samples,
    }


def _point(recording, ops, st: CrashState, out: str, error, names, ckpt: str, size: int) -> dict:
    call = recording.calls[st.point]
    final = apply_ops(recording.initial, recording.initial_inodes, ops, frozenset(range(len(ops))))
    held = "absent" if out == "missing" else f"{size} bytes"
    done = len(final.get(ckpt, b""))
    why = f"{describe_loss(ops, st, names)}; {ckpt} is {held} ({ibytes(done)} when the save finishes)"
    return {
        "call_index": st.point,
        "call": call.text,
        "after_return": st.returned,
        "state": st.name,
        "outcome": out,
        "error": error,
        "why": why,
        "ckpt_bytes": None if out == "missing" else size,
    }
