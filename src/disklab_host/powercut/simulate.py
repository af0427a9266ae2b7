"""The power-cut simulator: record a save under strace, enumerate crash states, classify them.

The lab step ``powercut`` (disklab_host.steps.powercut) runs :func:`analyse`
on each shipped recipe (recipes.py); the crash models are in states.py.

CLI, for one recipe or a user's own function ``save_fn(state_dict, path)``::

    python -m disklab_host.powercut.simulate check my_module.py:save_fn [--model power-cut] [--format torch]
    python -m disklab_host.powercut.simulate check recipe:atomic

Exit status: 0 when no state is corrupt or missing under the chosen model,
1 when one is, 2 for bad input (one line on stderr, no traceback); a save
that returns without leaving its state dict at the path, in the declared
format, is bad input (see :func:`check_after_return`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from ..common.child import child_env, module_argv
from ..common.fsio import atomic_write_json, fsync_dir
from ..common.units import MIB
from . import check as pc_check
from . import recipes as pc_recipes
from . import record as pc_record
from . import states as pc_states

OLD_STEP, NEW_STEP = 1, 2
SAVE_RAISED = 3  # exit status of the traced child when the save function raised
CKPT_NAMES = {"torch": "ckpt.pt", "safetensors": "ckpt.safetensors"}
MODEL_KEYS = {"process-kill": "process_kill", "power-cut": "power_cut"}


class SpecError(ValueError):
    """A save function spec that cannot be used (the message is one line for the user)."""


def resolve_save(spec: str):
    """``recipe:NAME`` or ``FILE.py:FUNC`` -> the save function. Raises SpecError."""
    if ":" not in spec:
        raise SpecError(f"save function must be FILE.py:FUNC or recipe:NAME, got {spec!r}")
    where, func = spec.rsplit(":", 1)
    if where == "recipe":
        try:
            return pc_recipes.recipe_named(func).save
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    path = Path(where)
    if not path.is_file():
        raise SpecError(f"{where}: no such file")
    mod_spec = importlib.util.spec_from_file_location(f"disklab_user_{path.stem}", path)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as exc:
        raise SpecError(f"{where}: importing it raised {type(exc).__name__}: {exc}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise SpecError(f"{where} has no function {func!r}")
    return fn


def _traced_child(args) -> int:
    """Runs under strace: build the new state, mark the begin, save, mark the end."""
    from ..checkpoint import saver

    try:
        save = resolve_save(args.spec)
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return SAVE_RAISED
    state = saver.make_state(args.state_mib, args.step)
    ckpt = Path(args.dir) / args.ckpt
    _marker(ckpt.parent / pc_record.BEGIN_MARKER)
    try:
        save(state, str(ckpt))
    except Exception as exc:
        print(f"save function raised {type(exc).__name__}: {exc}", file=sys.stderr)
        return SAVE_RAISED
    _marker(ckpt.parent / pc_record.END_MARKER)
    return 0


def _marker(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):  # expected: the marker names no file
        os.close(os.open(path, os.O_RDONLY))


def _make_durable(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(root)


def record(spec: str, fmt: str, base: Path, state_mib: int) -> tuple[pc_record.Recording, dict]:
    """Save the old checkpoint, snapshot, record the new save under strace, check the replay.

    Returns the recording and facts about it. Raises SpecError when the save
    function raises or, after either save returned, the file at the path does
    not hold that save's state dict in ``fmt`` (:func:`check_after_return`);
    pc_record.RecordError when the replay differs from the
    real files or strace fails.
    """
    from ..checkpoint import saver

    save = resolve_save(spec)
    if not spec.startswith("recipe:"):  # the traced child runs in another directory
        where, func = spec.rsplit(":", 1)
        spec = f"{Path(where).resolve()}:{func}"
    root = base / "ckpt_dir"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    ckpt = CKPT_NAMES[fmt]
    try:
        save(saver.make_state(state_mib, OLD_STEP), str(root / ckpt))
    except Exception as exc:
        raise SpecError(f"save function raised {type(exc).__name__}: {exc}") from None
    old_state, new_state = saver.make_state(state_mib, OLD_STEP), saver.make_state(state_mib, NEW_STEP)
    check_after_return(root / ckpt, fmt, "old", old_state, new_state)
    _make_durable(root)  # the model takes the old checkpoint as durable; make that true
    initial, dirs = pc_record.snapshot(root)
    trace = base / "trace.txt"
    argv = [
        *module_argv("disklab_host.powercut.simulate", "_traced"), "--spec", spec, "--dir", str(root),
        "--ckpt", ckpt, "--state-mib", str(state_mib), "--step", str(NEW_STEP),
    ]  # fmt: skip
    env = child_env(dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    start = time.perf_counter()
    proc = pc_record.run_traced(
        argv, cwd=root, trace_file=trace, string_limit_bytes=2 * state_mib * MIB + MIB, env=env
    )
    wall = time.perf_counter() - start
    if proc.returncode == SAVE_RAISED:
        raise SpecError(proc.stderr.strip().splitlines()[-1])
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise pc_record.RecordError(f"the traced save exited with status {proc.returncode}: {tail}")
    trace_bytes = trace.stat().st_size
    with trace.open() as lines:
        rec = pc_record.parse_trace(lines, root=root, cwd=root, initial=initial, initial_dirs=dirs)
    trace.unlink()
    real, _ = pc_record.snapshot(root)
    replay = pc_states.apply_ops(rec.initial, rec.initial_inodes, rec.ops, frozenset(range(len(rec.ops))))
    if replay != real:
        diff = sorted(k for k in set(real) | set(replay) if real.get(k) != replay.get(k))
        raise pc_record.RecordError(f"the replayed recording differs from the real files: {diff}")
    check_after_return(root / ckpt, fmt, "new", old_state, new_state)
    facts = {
        "calls": len(rec.calls),
        "writes_after_last_fsync": writes_after_last_fsync(rec.ops),
        "syscall_counts": rec.syscall_counts,
        "written_bytes": sum(len(op.data) for op in rec.ops if op.kind == "write"),
        "returned": rec.returned,
        "replay_matches_real": True,
        "record_wall_s": wall,
        "trace_bytes": trace_bytes,
        "call_texts": [c.text for c in rec.calls],
    }
    return rec, facts


def check_after_return(path: Path, fmt: str, want: str, old_state: dict, new_state: dict) -> None:
    """Check that the real file at ``path``, after a save returned, holds the ``want`` ("old"/"new") state.

    The crash states only mean something for a save that works when nothing
    crashes. Raises SpecError (one line) when ``path`` is absent, holds the
    other state, loads only in the other format (the message suggests that
    --format), or does not load in ``fmt`` at all.
    """
    verdict, error = _quiet_load(path, fmt, old_state, new_state)
    if verdict == want:
        return
    other = "safetensors" if fmt == "torch" else "torch"
    if verdict == "corrupt":
        # torch 2.13's torch.load reads any path ending in .safetensors with safetensors
        # (torch/serialization.py, load), so probe through a link named for the other format.
        with tempfile.TemporaryDirectory(prefix="disklab-probe-") as tmp:
            probe = Path(tmp) / CKPT_NAMES[other]
            probe.symlink_to(path.resolve())
            in_other, _ = _quiet_load(probe, other, old_state, new_state)
        if in_other in ("old", "new"):
            raise SpecError(
                f"--format {fmt} does not match the save: {path} does not load as {fmt} "
                f"but loads as {other}; pass --format {other}"
            )
    if verdict == "missing":
        held = sorted(p.name for p in path.parent.iterdir() if p.is_file())
        detail = "no file there; its directory holds " + (", ".join(held) if held else "nothing")
    elif verdict in ("old", "new"):
        step = int((old_state if verdict == "old" else new_state)["step"])
        detail = f"it holds the {verdict} checkpoint, step {step}"
    else:
        detail = f"{fmt} load: {error}"
    if want == "old":
        raise SpecError(
            f"the first save (step {int(old_state['step'])}, the old checkpoint) returned but {path} "
            f"does not hold it ({detail})"
        )
    step = int(new_state["step"])
    raise SpecError(f"the save returned but {path} does not hold the new checkpoint, step {step} ({detail})")


def _quiet_load(path: Path, fmt: str, old_state: dict, new_state: dict) -> tuple[str, str | None]:
    with warnings.catch_warnings():  # torch.load warns on a non-torch file; the verdict says it
        warnings.simplefilter("ignore")
        return pc_check.load_verdict(path, fmt=fmt, old_state=old_state, new_state=new_state)


def writes_after_last_fsync(ops: list) -> int:
    """Data ops on a file after the last fsync/fdatasync of that file (files never fsync'd excluded)."""
    last = {op.ino: op.call for op in ops if op.kind in ("fsync", "fdatasync")}
    return sum(1 for op in ops if op.kind in pc_states.DATA_KINDS and op.call > last.get(op.ino, 1 << 62))


def analyse(
    spec: str, fmt: str, base: Path, state_mib: int, max_torn: int = pc_states.DEFAULT_MAX_TORN
) -> dict:
    """Record ``spec`` and classify its crash states under both models; one JSON-able dict.

    Raises SpecError or pc_record.RecordError (see :func:`record`).
    """
    from ..checkpoint import saver

    if fmt not in CKPT_NAMES:
        raise SpecError(f"format must be one of {sorted(CKPT_NAMES)}, got {fmt!r}")
    rec, facts = record(spec, fmt, base, state_mib)
    old, new = saver.make_state(state_mib, OLD_STEP), saver.make_state(state_mib, NEW_STEP)
    start = time.perf_counter()
    models = {}
    for name, model in pc_states.MODELS.items():
        models[MODEL_KEYS[name]] = pc_check.check_model(
            rec, model, ckpt=CKPT_NAMES[fmt], fmt=fmt, old_state=old, new_state=new,
            scratch=base / "scratch", max_torn=max_torn,
        )  # fmt: skip
    return {
        "spec": spec,
        "format": fmt,
        "recording": facts,
        "models": models,
        "check_wall_s": time.perf_counter() - start,
    }


def compare_with_lesson(recipe: pc_recipes.Recipe, result: dict) -> dict:
    """The lesson's expectation next to what the recording gave, and each difference in words."""
    diffs = []
    for name, expected in recipe.expects.items():
        got = result["models"][MODEL_KEYS[name]]["verdict"]
        if expected is not None and got != expected:
            late = result["recording"]["writes_after_last_fsync"]
            diffs.append(
                f"{name}: the lesson expects {expected}, the recording gives {got}; "
                f"{late} data write(s) came after the last fsync of their file"
                + (" (nothing was left in Python's buffer when fsync ran)" if late == 0 else "")
            )
    known = [e for e in recipe.expects.values() if e is not None]
    return {
        "lesson_expects": {MODEL_KEYS[k]: v for k, v in recipe.expects.items()},
        "agrees_with_lesson": (not diffs) if known else None,
        "differences": diffs,
    }


def render(result: dict, title: str) -> str:
    """The verdict table and the first unsafe point per model, as plain text."""
    lines = [f"{title}: {result['recording']['calls']} recorded calls", ""]
    head = f"{'model':<13} {'verdict':<12}" + "".join(f"{o:>12}" for o in pc_check.OUTCOMES)
    lines.append(head)
    for key, m in result["models"].items():
        row = f"{key.replace('_', '-'):<13} {m['verdict']:<12}"
        lines.append(row + "".join(f"{m['counts'][o]:>12}" for o in pc_check.OUTCOMES))
    for key, m in result["models"].items():
        p = m["first_unsafe"]
        if p:
            lines += [
                "",
                f"first unsafe point ({key.replace('_', '-')}): after call {p['call_index']}: {p['call']}",
                f"  state {p['state']} -> {p['outcome']}" + (f": {p['error']}" if p["error"] else ""),
                f"  why: {p['why']}",
            ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="disklab power-cut simulator (host side)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    chk = sub.add_parser("check", help="record one save function and classify its crash states")
    chk.add_argument("spec", help="FILE.py:FUNC or recipe:NAME")
    chk.add_argument("--model", default="power-cut", choices=sorted(pc_states.MODELS))
    chk.add_argument("--format", default="torch", choices=sorted(CKPT_NAMES))
    chk.add_argument("--state-mib", type=int, default=4)
    chk.add_argument("--workdir", type=Path, default=None)
    chk.add_argument("--json", type=Path, default=None, help="also write the result here")
    tr = sub.add_parser("_traced")
    for opt in ("--spec", "--dir", "--ckpt"):
        tr.add_argument(opt, required=True)
    tr.add_argument("--state-mib", type=int, required=True)
    tr.add_argument("--step", type=int, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "_traced":
        return _traced_child(args)
    return _check(args)


def _check(args) -> int:
    if pc_record.find_strace() is None:
        print("disklab powercut: strace is not installed (apt-get install strace)", file=sys.stderr)
        return 2
    if args.state_mib <= 0 or args.state_mib % 4:
        print(
            f"disklab powercut: --state-mib must be a positive multiple of 4, got {args.state_mib}",
            file=sys.stderr,
        )
        return 2
    base = args.workdir or Path(tempfile.mkdtemp(prefix="disklab-powercut-"))
    try:
        result = analyse(args.spec, args.format, base, args.state_mib)
    except (SpecError, pc_record.RecordError) as exc:
        print(f"disklab powercut: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(render(result, args.spec))
    if args.json:
        atomic_write_json(args.json, result)
    chosen = result["models"][MODEL_KEYS[args.model]]
    print(f"\nverdict under {args.model}: {chosen['verdict']}")
    return 1 if chosen["verdict"] == "unsafe" else 0


if __name__ == "__main__":
    sys.exit(main())
