"""A framework saver under the power-cut simulator: every crash state of its recording, judged by content.

The recorder, the crash models and the limits are the lab's (:mod:`disklab_host.powercut`); what differs is
the checkpoint, a directory of files written by one process or by several ranks (strace follows them), and
the judge: the framework's own load of the directory, each tensor compared with the two saved states
(:mod:`.judge`). Two cases, as users save:

* ``fresh``: the earlier checkpoint is in ``old/``, the new save goes into a new directory ``new/`` (as the
  Trainer's ``checkpoint-N``). A restart takes ``new/`` where it loads, else falls back to ``old/``; a
  ``new/`` that loads with the wrong tensors is taken as it is, which is what makes it unsafe;
* ``reuse``: both saves go into ``ckpt/``, the second over the first (DCP's default ``overwrite=True``).

Outcomes per state: ``new_ok``, ``old_ok`` (before the save returned), ``rolled_back`` (after), and the
unsafe ``mixed`` (old and new tensors together), ``corrupt`` and ``missing``.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from pathlib import Path

from ..common.child import module_argv
from ..common.fsio import fsync_tree
from ..powercut import check as pc_check
from ..powercut import record as pc_record
from ..powercut import simulate
from ..powercut import states as pc_states
from . import frameworks, judge, mechanism, model
from .registry import Spec

CASES = ("fresh", "reuse")
OUTCOMES = ("new_ok", "old_ok", "rolled_back", "mixed", "corrupt", "missing")
UNSAFE = ("mixed", "corrupt", "missing")
DIRS = {"fresh": ("old", "new"), "reuse": ("ckpt", "ckpt")}


def dirs(spec: Spec, case: str) -> tuple[str, str]:
    """The earlier and the new save's directories in ``case``: :data:`DIRS`, or the saver's own names."""
    return (spec.saver.dirs or DIRS)[case]


# A saver's save is slower than a recipe's (its framework's imports are before the clock, its ranks'
# collectives are not): bounds per save, from the call to the return.
DEFAULT_TIMEOUT_S = 120.0


def verdict_of(counts: dict[str, int]) -> str:
    """unsafe if a state lost the checkpoint or mixed it, rolled_back if one brought back the earlier one
    after the save returned, else safe."""
    if any(counts[o] for o in UNSAFE):
        return "unsafe"
    return "rolled_back" if counts["rolled_back"] else "safe"


def saver_argv(spec: Spec, root: Path, directory: Path, state_mib: int, step: int, timeout_s: float) -> list:
    ranks = [] if spec.ranks is None else ["--ranks", str(spec.ranks)]
    return [
        *module_argv("disklab_host.savers.traced"), "--saver", spec.saver.name, *ranks, "--root", str(root),
        "--dir", str(directory), "--state-mib", str(state_mib), "--step", str(step),
        "--timeout-s", str(timeout_s),
    ]  # fmt: skip


def restart_finds(root: Path, spec: Spec, case: str, state_mib: int, old: dict, new: dict) -> dict:
    """What a restart finds under ``root`` (:mod:`.judge`'s result), with ``new_dir``: the new directory's
    own outcome. In the fresh case a new directory that does not load (an error, or none) is skipped and
    the earlier one judged instead; one that loads is taken, whatever it holds."""
    old_dir, new_dir = dirs(spec, case)
    found = judge_dir(root / new_dir, spec, state_mib, old, new)
    if case == "fresh" and "error" in found:
        earlier = judge_dir(root / old_dir, spec, state_mib, old, new)
        return {**earlier, "new_dir": found["outcome"], "new_dir_error": found["error"]}
    return {**found, "new_dir": found["outcome"]}


def judge_dir(directory: Path, spec: Spec, state_mib: int, old: dict, new: dict) -> dict:
    return judge.judge_load(lambda: frameworks.load(spec.saver.name, directory, state_mib), old, new)


def _after_return(found: dict, want: str, spec: Spec, step: int) -> None:
    """Refuse a save that returned without leaving its state where the framework loads it back."""
    if found["outcome"] != want:
        raise simulate.SpecError(
            f"{spec.label}: the save of step {step} returned, but its directory does not load back as that "
            f"step ({judge.describe(found)})"
        )


def record(spec: Spec, case: str, base: Path, state_mib: int, *, timeout_s: float = DEFAULT_TIMEOUT_S,
           max_write_mib: int = simulate.DEFAULT_MAX_WRITE_MIB, max_files: int = simulate.DEFAULT_MAX_FILES,
           stop: threading.Event | None = None):  # fmt: skip
    """Save the earlier checkpoint, then record the new save under strace; (recording, facts).

    Each save is the framework's own, in a child under strace (with its ranks), within ``timeout_s`` from
    the call to the return and ``max_write_mib`` written. Raises simulate.SpecError when a save does not
    return within the limits, writes outside its directory, or returns without leaving its state where the
    framework loads it back; RecordError when the trace cannot be read or placed.
    """
    if case not in CASES:
        raise simulate.SpecError(f"case must be one of {CASES}, got {case!r}")
    simulate.check_limits(state_mib, timeout_s, max_write_mib)
    root = base / "ckpt_dir"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    old_dir, new_dir = dirs(spec, case)
    old, new = model.state(state_mib, simulate.OLD_STEP), model.state(state_mib, simulate.NEW_STEP)
    since_ns = time.time_ns() - simulate.CLOCK_SLACK_NS  # file times run a tick behind the clock
    common = dict(spec="", root=root, ckpt="", state_mib=state_mib, since_ns=since_ns, timeout_s=timeout_s,
                  max_write_mib=max_write_mib, stop=stop)  # fmt: skip
    simulate.run_save(
        step=simulate.OLD_STEP, trace=base / "trace-step1.txt", who=f"{spec.label} (the earlier save)",
        argv=saver_argv(spec, root, root / old_dir, state_mib, simulate.OLD_STEP, timeout_s), **common,
    )  # fmt: skip
    _after_return(judge_dir(root / old_dir, spec, state_mib, old, new), "old_ok", spec, simulate.OLD_STEP)
    fsync_tree(root)  # the models take the earlier checkpoint as durable; make that true
    initial, initial_dirs = pc_record.snapshot(root)
    start = time.perf_counter()
    rec, trace_bytes, save_s = simulate.run_save(
        step=simulate.NEW_STEP, trace=base / "trace.txt", initial=initial, dirs=initial_dirs,
        who=f"{spec.label} (the traced save)",
        argv=saver_argv(spec, root, root / new_dir, state_mib, simulate.NEW_STEP, timeout_s), **common,
    )  # fmt: skip
    wall = time.perf_counter() - start
    real, _ = pc_record.snapshot(root)
    files = len(set(real) | set(rec.initial))
    if files > max_files:
        raise simulate.SpecError(
            f"{spec.label} left {files} files in its directory; the analysis builds every crash state of "
            f"every file and is bounded at --max-files {max_files}: raise --max-files to analyse it"
        )
    diff = simulate.check_replay(rec, real, ckpt="")
    if any(d.startswith(new_dir + "/") for d in diff):
        calls = "; ".join(
            f"call {u['call_index']} {u['syscall']} {u['path']}: {u['why']}" for u in rec.unplaced
        )
        raise pc_record.RecordError(
            f"no verdict: {', '.join(diff)} is changed by what the model cannot place, so its crash states "
            f"would not show what the save leaves there ({calls})"
        )
    _after_return(judge_dir(root / new_dir, spec, state_mib, old, new), "new_ok", spec, simulate.NEW_STEP)
    facts = {
        "calls": len(rec.calls),
        "writes_after_last_fsync": simulate.writes_after_last_fsync(rec.ops),
        "syscall_counts": rec.syscall_counts,
        "written_bytes": sum(len(op.data) for op in rec.ops if op.kind == "write"),
        "returned": rec.returned,
        "replay_matches_real": not diff,
        "replay_differs": diff,
        "unplaced_calls": rec.unplaced,
        "judged_on": "the placed calls only" if rec.unplaced else "every recorded call",
        "record_wall_s": wall,
        "save_s": save_s,
        "trace_bytes": trace_bytes,
        "files": sorted(real),
        "call_texts": [c.text for c in rec.calls],
    }
    return rec, facts


def _files_after(rec, applied: frozenset, made_dirs: dict[str, int]) -> dict[str, bytes]:
    """The files of a crash state; those in a directory whose mkdir did not persist are not there."""
    files = pc_states.apply_ops(rec.initial, rec.initial_inodes, rec.ops, applied)
    lost = [d for d, i in made_dirs.items() if i not in applied]
    return {p: b for p, b in files.items() if not any(p.startswith(d + "/") for d in lost)}


def _digest(files: dict[str, bytes]) -> bytes:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{path}\0{len(files[path])}\0".encode())
        h.update(files[path])
    return h.digest()


def check_model(rec, model_: pc_states.Model, *, spec: Spec, case: str, state_mib: int, old: dict,
                new: dict, scratch: Path, max_torn: int) -> dict:  # fmt: skip
    """Judge every crash state of ``rec`` under ``model_``: the verdict, the outcome counts, the states
    whose earlier checkpoint no longer loads, and the first unsafe and rolled-back states with why."""
    ops = rec.ops
    states = pc_states.enumerate_states(ops, len(rec.calls), rec.returned, model_, max_torn)
    made_dirs = {op.path: i for i, op in enumerate(ops) if op.kind == "mkdir"}
    names = pc_check.inode_names(ops, rec.initial_inodes)
    keys: dict[frozenset, bytes] = {}  # applied ops -> the hash of the files they leave
    seen: dict[bytes, dict] = {}  # that hash -> what a restart finds
    counts = dict.fromkeys(OUTCOMES, 0)
    earlier_lost = 0
    samples, first = [], {}
    for st in states:
        if st.applied in keys:
            key = keys[st.applied]
        else:
            files = _files_after(rec, st.applied, made_dirs)
            key = keys[st.applied] = _digest(files)
        if key not in seen:
            where = pc_check.materialise(files, scratch)
            seen[key] = restart_finds(where, spec, case, state_mib, old, new)
            if case == "fresh":
                old_dir = dirs(spec, case)[0]
                seen[key]["earlier"] = judge_dir(where / old_dir, spec, state_mib, old, new)["outcome"]
            shutil.rmtree(where)
        found = seen[key]
        out = found["outcome"]
        if out == "old_ok" and st.returned:
            out = "rolled_back"
        counts[out] += 1
        if case == "fresh" and found.get("earlier") != "old_ok":
            earlier_lost += 1
        samples.append([st.point, st.returned, st.name, out])
        kinds = ["unsafe"] if out in UNSAFE else ["rolled_back"] if out == "rolled_back" else []
        kinds += ["mixed"] if out == "mixed" else []
        for kind in (k for k in kinds if k not in first):
            call = rec.calls[st.point]
            first[kind] = {
                "call_index": st.point, "call": call.text, "after_return": st.returned, "state": st.name,
                "outcome": out, "found": judge.describe(found), "why": pc_check.describe_loss(ops, st, names),
            }  # fmt: skip
    return {
        "verdict": verdict_of(counts),
        "states": len(states),
        "distinct_states": len(seen),
        "counts": counts,
        "earlier_lost": earlier_lost if case == "fresh" else None,
        "first_unsafe": first.get("unsafe"),
        "first_mixed": first.get("mixed"),  # the most serious: it loads, old and new together
        "first_rolled_back": first.get("rolled_back"),
        "samples": samples,
    }


def analyse(spec: Spec, case: str, base: Path, state_mib: int, max_torn: int = pc_states.DEFAULT_MAX_TORN,
            **limits) -> dict:  # fmt: skip
    """Record ``spec``'s save in ``case`` and judge its crash states under both models; one JSON-able dict
    with the recording's facts, each model's verdict and the mechanisms the recording shows."""
    rec, facts = record(spec, case, base, state_mib, **limits)
    old, new = model.state(state_mib, simulate.OLD_STEP), model.state(state_mib, simulate.NEW_STEP)
    start = time.perf_counter()
    models = {
        simulate.MODEL_KEYS[name]: check_model(
            rec,
            m,
            spec=spec,
            case=case,
            state_mib=state_mib,
            old=old,
            new=new,
            scratch=base / "scratch",
            max_torn=max_torn,
        )  # fmt: skip
        for name, m in pc_states.MODELS.items()
    }
    target = dirs(spec, case)[1]
    return {
        "saver": spec.label,
        "case": case,
        "directory": target,
        "recording": facts,
        "models": models,
        "mechanisms": mechanism.find(rec.ops, rec.initial, target),
        "check_wall_s": time.perf_counter() - start,
    }
