"""The power-cut simulator: record a save under strace, enumerate crash states, classify them.

The lab step ``powercut`` (disklab_host.steps.powercut) runs :func:`analyse`
on each shipped recipe (recipes.py); the crash models are in states.py.

CLI, for one recipe or a user's own function ``save_fn(state_dict, path)``::

    python -m disklab_host.powercut.simulate check my_module.py:save_fn [--model power-cut] [--format torch]
        [--timeout-s 60] [--max-write-mib 32]
    python -m disklab_host.powercut.simulate check recipe:atomic

Exit status: 0 when no state is corrupt or missing under the chosen model,
1 when one is, 2 for bad input (one line on stderr, no traceback), 130 when
interrupted. Both saves (step 1, the old checkpoint, and the traced step 2)
run in a child process, under strace, within a time and a byte limit; a save
that exits, is killed, hangs, raises, writes more than the limit or leaves
a file outside its directory gets no verdict (exit 2), and neither does one that
returns without leaving its state dict at the path in the declared format
(see :func:`check_after_return`). Temp directories are removed on every path.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from ..common.child import child_env, module_argv
from ..common.formats import output
from ..common.fsio import atomic_write_json, fsync_tree
from ..common.interrupts import in_main_thread, interrupt_once
from ..common.units import MIB, ibytes
from . import check as pc_check
from . import record as pc_record
from . import states as pc_states
from .trace import HEX_BYTES_PER_BYTE, RecordError, TruncatedError

OLD_STEP, NEW_STEP = 1, 2
SAVE_RAISED = 3  # exit status of the traced child when the save function raised (or could not be imported)
INTERRUPTED = 130  # 128 + SIGINT: the check itself was interrupted; no verdict
CKPT_NAMES = {"torch": "ckpt.pt", "safetensors": "ckpt.safetensors"}
MODEL_KEYS = {"process-kill": "process_kill", "power-cut": "power_cut"}
# Limits on one save. The quick profile's recipes (4 MiB, about 4.2 MiB written, a few s traced) and the
# full profile's (8 MiB) pass well within them.
DEFAULT_TIMEOUT_S = 60.0  # from the call of FUNC to its return, per save
DEFAULT_MAX_WRITE_MIB = 32  # bytes one save may write; strace's -s is this too (one write up to the limit)
# Files one save may leave in its directory: every crash state holds every file, so the analysis's memory
# and time grow with files x states (5,000 small files before an atomic save reached 23.9 GB).
DEFAULT_MAX_FILES = 200
STARTUP_TIMEOUT_S = 300.0  # starting Python, importing torch and the user's file, building the state dict
TRACE_SLACK_BYTES = 8 * MIB  # trace lines' own text beyond 4 characters per written byte
CLOCK_SLACK_NS = 50_000_000  # file timestamps come from a coarse clock, a tick behind time.time_ns()
STEP_WORDS = {
    OLD_STEP: "the save function (step 1, the old checkpoint)",
    NEW_STEP: "the save function (step 2, traced)",
}


class SpecError(ValueError):
    """A spec, a limit, or a save that cannot be checked (the message is one line for the user)."""


class NoTorchError(SpecError):
    """This Python cannot import torch and safetensors (the first save's child, the first to import them)."""


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_exception(exc: BaseException) -> str:
    """``raised RuntimeError: msg`` or ``called sys.exit(0)``, one line."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    text = _one_line(exc)
    return f"raised {type(exc).__name__}" + (f": {text}" if text else "")


def resolve_save(spec: str):
    """``recipe:NAME`` or ``FILE.py:FUNC`` -> the save function. Raises SpecError.

    Imports the user's file; called only in the save's child process, never in the check itself.
    """
    where, func = check_spec_file(spec)
    if where == "recipe":
        from . import recipes as pc_recipes  # imports torch

        try:
            return pc_recipes.recipe_named(func).save
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    path = Path(where)
    mod_spec = importlib.util.spec_from_file_location(f"disklab_user_{path.stem}", path)
    if mod_spec is None or mod_spec.loader is None:
        raise SpecError(f"{where}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 -- SystemExit and KeyboardInterrupt are the user's too
        raise SpecError(f"{where}: importing it {describe_exception(exc)}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise SpecError(f"{where} has no function {func!r}")
    return fn


def check_spec_file(spec: str) -> tuple[str, str]:
    """``FILE.py:FUNC`` or ``recipe:NAME`` -> (FILE or "recipe", FUNC or NAME), FILE an existing .py file.

    Imports nothing: the check refuses a spec with no such file before it starts a save's child
    (only the child imports the file, :func:`resolve_save`). Raises SpecError.
    """
    if ":" not in spec:
        raise SpecError(f"save function must be FILE.py:FUNC or recipe:NAME, got {spec!r}")
    where, func = spec.rsplit(":", 1)
    if where == "recipe":
        return where, func
    path = Path(where)
    if not path.is_file():
        raise SpecError(f"{where}: no such file")
    if path.suffix != ".py":
        raise SpecError(f"{where}: not a Python file (the save function must be FILE.py:FUNC)")
    return where, func


def check_limits(state_mib: int, timeout_s: float, max_write_mib: int) -> None:
    """Raises SpecError (naming the option) unless the limits are positive and leave room for the state."""
    if not timeout_s > 0:
        raise SpecError(f"--timeout-s must be > 0, got {timeout_s:g}")
    if max_write_mib <= 0:
        raise SpecError(f"--max-write-mib must be > 0, got {max_write_mib}")
    if max_write_mib <= state_mib:
        raise SpecError(
            f"--max-write-mib must be more than --state-mib {state_mib} (a save writes the state dict "
            f"at least once), got {max_write_mib}"
        )


class Status:
    """The child's side of the status pipe: "begin", then "ok", "raised ..." or "spec ..."."""

    def __init__(self, fd: int | None):
        self.fd = fd

    def send(self, line: str) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):  # the save may have closed it; the parent then says so
                os.write(self.fd, (_one_line(line, 3000) + "\n").encode())


def _traced_child(args) -> int:
    """Runs under strace: import torch, the save, build the state, mark the begin, save, mark the end.

    The first save's child is the first process of a check to import torch and safetensors (the check
    itself imports them once that save has returned): when it cannot, it says so ("notorch ...").
    """
    status = Status(args.status_fd)
    try:
        from ..checkpoint import saver

        saver.import_safetensors()
    except Exception as exc:  # noqa: BLE001 -- not installed, or an install that fails on import
        why = f"{type(exc).__name__}: {_one_line(exc)}"
        status.send(f"notorch {why}")
        print(f"cannot import torch and safetensors: {why}", file=sys.stderr)
        return SAVE_RAISED
    ckpt = Path(args.dir) / args.ckpt
    pc_record.open_marker(
        ckpt.parent / pc_record.IMPORT_MARKER
    )  # from here on, writes outside the directory count
    try:
        save = resolve_save(args.spec)
    except SpecError as exc:
        status.send(f"spec {exc}")
        print(str(exc), file=sys.stderr)
        return SAVE_RAISED
    state = saver.make_state(args.state_mib, args.step)
    status.send("begin")
    pc_record.open_marker(ckpt.parent / pc_record.BEGIN_MARKER)
    try:
        save(state, str(ckpt))
    except BaseException as exc:  # noqa: BLE001 -- sys.exit() and KeyboardInterrupt get no verdict either
        status.send(f"raised {describe_exception(exc)}")
        print(f"save function {describe_exception(exc)}", file=sys.stderr)
        return SAVE_RAISED
    pc_record.open_marker(ckpt.parent / pc_record.END_MARKER)
    status.send("ok")
    return 0


def _absolute_spec(spec: str) -> str:
    if ":" not in spec or spec.startswith("recipe:"):
        return spec
    where, func = spec.rsplit(":", 1)
    return f"{Path(where).resolve()}:{func}"


def record(
    spec: str, fmt: str, base: Path, state_mib: int, *,
    timeout_s: float = DEFAULT_TIMEOUT_S, max_write_mib: int = DEFAULT_MAX_WRITE_MIB,
    stop: threading.Event | None = None, max_files: int | None = None,
) -> tuple[pc_record.Recording, dict]:  # fmt: skip
    """Save the old checkpoint, snapshot, record the new save under strace, check the replay.

    Each save runs in its own child process under strace (:func:`run_save`), within
    ``timeout_s`` from the call to the return and ``max_write_mib`` MiB written.
    Returns the recording and facts about it. Raises SpecError when the spec or the
    limits are bad, when a save does not return (it exits, is killed, hangs past
    the limit, raises, SystemExit and KeyboardInterrupt included), writes more than
    the limit, writes outside its directory (what it created there is removed
    and named), or, after it returned, the file at the path does not hold that
    save's state dict in ``fmt`` (:func:`check_after_return`); RecordError
    when the replay differs from the real files although every call was placed, or
    the trace cannot be read. Calls the model cannot place are in the facts
    (``unplaced_calls``, with the files where the replay differs, ``replay_differs``).
    NoTorchError when the first save's child cannot import torch and safetensors; this
    process imports them only after that save returned, so a save refused there costs one.
    """
    check_limits(state_mib, timeout_s, max_write_mib)
    check_spec_file(spec)  # no such file: refused before any child starts
    max_files = DEFAULT_MAX_FILES if max_files is None else max_files
    spec = _absolute_spec(spec)  # the child runs in another directory
    root = base / "ckpt_dir"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    ckpt = CKPT_NAMES[fmt]
    since_ns = time.time_ns() - CLOCK_SLACK_NS
    run = dict(spec=spec, root=root, ckpt=ckpt, state_mib=state_mib, since_ns=since_ns)
    limits = dict(timeout_s=timeout_s, max_write_mib=max_write_mib, stop=stop)
    run_save(step=OLD_STEP, trace=base / "trace-step1.txt", **run, **limits)
    from ..checkpoint import saver  # imports torch

    old_state, new_state = saver.make_state(state_mib, OLD_STEP), saver.make_state(state_mib, NEW_STEP)
    check_after_return(root / ckpt, fmt, "old", old_state, new_state)
    fsync_tree(root)  # the model takes the old checkpoint as durable; make that true
    initial, dirs = pc_record.snapshot(root)
    start = time.perf_counter()
    traced = dict(step=NEW_STEP, trace=base / "trace.txt", initial=initial, dirs=dirs)
    rec, trace_bytes, save_s = run_save(**traced, **run, **limits)
    wall = time.perf_counter() - start
    real, _ = pc_record.snapshot(root)
    files = len(set(real) | set(rec.initial))
    if files > max_files:  # every crash state holds every file: the analysis grows with files x states
        raise SpecError(
            f"the save left {files} files in its directory ({len(rec.calls)} recorded calls); the analysis "
            f"builds every crash state of every file and is bounded at --max-files {max_files}: raise "
            "--max-files (with memory to match, --max-memory-mib) to analyse it"
        )
    diff = check_replay(rec, real, ckpt)
    check_after_return(root / ckpt, fmt, "new", old_state, new_state)
    facts = {
        "calls": len(rec.calls),
        "writes_after_last_fsync": writes_after_last_fsync(rec.ops),
        "syscall_counts": rec.syscall_counts,
        "written_bytes": sum(len(op.data) for op in rec.ops if op.kind == "write"),
        "returned": rec.returned,
        "replay_matches_real": not diff,
        "replay_differs": diff,  # only where calls are unplaced (else the recording is refused)
        "unplaced_calls": rec.unplaced,
        "judged_on": "the placed calls only" if rec.unplaced else "every recorded call",
        "outside_files": rec.outside_files,
        "record_wall_s": wall,
        "save_s": save_s,  # from the call of the save to the end of its process (what --timeout-s bounds)
        "trace_bytes": trace_bytes,
        "call_texts": [c.text for c in rec.calls],
    }
    return rec, facts


def check_replay(rec: pc_record.Recording, real: dict[str, bytes], ckpt: str) -> list[str]:
    """The files where replaying every placed call differs from ``real`` (only where calls are unplaced).

    Raises RecordError when they differ although every call was placed (the
    recorder is wrong, not the save), or when the checkpoint itself differs: then the
    crash states do not show what the save leaves there, and no verdict is given.
    """
    replay = pc_states.apply_ops(rec.initial, rec.initial_inodes, rec.ops, frozenset(range(len(rec.ops))))
    diff = sorted(k for k in set(real) | set(replay) if real.get(k) != replay.get(k))
    if diff and not rec.unplaced:
        raise RecordError(
            f"the replayed recording differs from the real files: {diff} (every call was placed: "
            "a disklab bug; please report it with the save function)"
        )
    if ckpt in diff:
        calls = "; ".join(
            f"call {u['call_index']} {u['syscall']} {u['path']}: {u['why']}" for u in rec.unplaced
        )
        raise RecordError(
            f"no verdict: {ckpt} is changed by what the model cannot place, so its crash states would "
            f"not show what the save leaves there ({calls})"
        )
    return diff


def run_save(
    *, spec: str, step: int, root: Path, ckpt: str, state_mib: int, trace: Path, since_ns: int,
    timeout_s: float, max_write_mib: int, initial: dict | None = None, dirs: set | None = None,
    stop: threading.Event | None = None, argv: list[str] | None = None, who: str | None = None,
) -> tuple[pc_record.Recording, int, float]:  # fmt: skip
    """One save in a child under strace: its recording, the trace's size (the trace is removed), save_s.

    ``argv`` (default: this module's ``_traced`` child for ``spec``) is the child, which speaks the status
    pipe's words; ``who`` names the save in messages (default: :data:`STEP_WORDS`). Raises SpecError for
    every way the save fails to return within the limits, and for writes outside ``root`` (those it
    created are removed; the message names each path and what became of it).
    """
    who = who or STEP_WORDS[step]
    max_bytes = max_write_mib * MIB
    argv = argv or [
        *module_argv("disklab_host.powercut.simulate", "_traced"), "--spec", spec, "--dir", str(root),
        "--ckpt", ckpt, "--state-mib", str(state_mib), "--step", str(step),
    ]  # fmt: skip
    env = child_env(dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    growth = HEX_BYTES_PER_BYTE * max_bytes + TRACE_SLACK_BYTES
    limits = pc_record.Limits(
        timeout_s=timeout_s, max_trace_growth_bytes=growth, startup_s=STARTUP_TIMEOUT_S, stop=stop
    )
    try:
        run = pc_record.run_traced(
            argv, cwd=root, trace_file=trace, string_limit_bytes=max_bytes, env=env, limits=limits,
            status_option="--status-fd",
        )  # fmt: skip
        notorch = next((line for line in run.status if line.startswith("notorch ")), None)
        if notorch is not None:
            raise NoTorchError(
                f"this Python ({sys.executable}) cannot import torch and safetensors: "
                f"{notorch.removeprefix('notorch ')}"
            )
        problem = _run_problem(run, who, timeout_s, max_write_mib, growth)
        rec, parse_error, trace_bytes = None, None, 0
        if trace.exists():
            trace_bytes = trace.stat().st_size
            try:
                with trace.open(errors="replace") as lines:
                    rec = pc_record.parse_trace(
                        lines, root=root, cwd=root, initial=initial or {}, initial_dirs=dirs or {"."}
                    )
            except RecordError as exc:
                parse_error = exc
    finally:
        trace.unlink(missing_ok=True)
    if rec is not None and rec.outside:
        where = f"wrote outside its checkpoint directory: {_clean_outside(rec.outside, since_ns)}"
        problem = f"{problem}; it also {where}" if problem else f"{who} {where}"
    if problem:
        raise SpecError(problem)
    if isinstance(parse_error, TruncatedError):
        raise SpecError(
            f"{who} made a single write longer than --max-write-mib {max_write_mib} MiB allows "
            f"(strace -s {max_bytes} cut it); raise --max-write-mib"
        )
    if parse_error is not None:
        raise parse_error
    if rec is None:
        raise RecordError(f"{who} returned but strace left no trace")
    written = sum(len(op.data) for op in rec.ops if op.kind == "write") + rec.outside_bytes
    if written > max_bytes:
        raise SpecError(
            f"{who} wrote {ibytes(written)}, more than --max-write-mib {max_write_mib} MiB; "
            "raise --max-write-mib"
        )
    if not rec.returned:
        raise RecordError(f"{who} returned but the trace has no end marker")
    return rec, trace_bytes, run.save_s


def _run_problem(run: pc_record.TracedRun, who: str, timeout_s: float, max_write_mib: int, growth: int):
    """Why the run gets no verdict, in words (None when the save returned and its process exited 0)."""
    if run.stopped == "startup":
        return (
            f"{who} was not called within {STARTUP_TIMEOUT_S:g} s of its process starting "
            "(Python, torch, importing the file); it was killed"
        )
    if run.stopped == "timeout":
        return f"{who} did not return within --timeout-s {timeout_s:g}; it was killed"
    if run.stopped == "bytes":
        return (
            f"{who} was stopped: its trace grew past {ibytes(growth)}, the bound for --max-write-mib "
            f"{max_write_mib} (4 trace characters per written byte); raise --max-write-mib"
        )
    if run.stopped == "lingering":
        return f"{who} finished but left a process running; its processes were killed"
    final = next((line for line in reversed(run.status) if line != "begin"), None)
    if final is not None and final.startswith("spec "):
        return final.removeprefix("spec ")
    if final is not None and final.startswith("raised "):
        return f"{who} {final.removeprefix('raised ')}"
    code = run.returncode
    if final == "ok":
        return None if code == 0 else f"{who} returned, but its process then ended with status {code}"
    if code is not None and code < 0:
        return f"{who} was killed by {signal.Signals(-code).name} before it returned"
    tail = (run.stderr.strip().splitlines() or [""])[-1]
    last = f" (its last output: {_one_line(tail, 200)})" if tail else ""
    return f"{who} ended its process with exit status {code} before returning (os._exit or a crash){last}"


def _clean_outside(outside: dict[str, str], since_ns: int) -> str:
    """Remove what the save created outside its directory since ``since_ns``; each path and its fate."""
    fate = {}
    for path in sorted(outside, key=lambda p: -p.count("/")):  # files in a directory it made first
        effect = outside[path]
        fate[path] = _remove_if_created(path, since_ns) if effect in ("written", "made") else effect
    parts = [f"{path} ({fate[path]})" for path in outside]
    shown = parts[:3] + ([f"and {len(parts) - 3} more"] if len(parts) > 3 else [])
    return ", ".join(shown)


def _remove_if_created(path: str, since_ns: int) -> str:
    if not os.path.lexists(path):
        return "no longer there"
    born = _birth_time_ns(path)
    if born is None:
        return "left in place: its creation time is unknown"
    if born < since_ns:
        return "left in place: it was there before the check"
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError as exc:
        return f"left in place: {exc.strerror}"
    return "removed"


def _birth_time_ns(path: str) -> int | None:
    """The file's creation time (statx(2) STATX_BTIME, not following links), or None where unknown."""
    statx = getattr(ctypes.CDLL(None, use_errno=True), "statx", None)
    if statx is None:
        return None
    at_fdcwd, at_symlink_nofollow, statx_btime = -100, 0x100, 0x800
    buf = ctypes.create_string_buffer(256)  # struct statx
    statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    if statx(at_fdcwd, os.fsencode(path), at_symlink_nofollow, statx_btime, buf) != 0:
        return None
    raw = buf.raw
    if not int.from_bytes(raw[0:4], sys.byteorder) & statx_btime:  # stx_mask
        return None
    sec = int.from_bytes(raw[80:88], sys.byteorder, signed=True)  # stx_btime.tv_sec
    return sec * 1_000_000_000 + int.from_bytes(raw[88:92], sys.byteorder)


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
    spec: str, fmt: str, base: Path, state_mib: int, max_torn: int = pc_states.DEFAULT_MAX_TORN, *,
    timeout_s: float = DEFAULT_TIMEOUT_S, max_write_mib: int = DEFAULT_MAX_WRITE_MIB,
    stop: threading.Event | None = None, max_files: int | None = None,
) -> dict:  # fmt: skip
    """Record ``spec`` and classify its crash states under both models; one JSON-able dict.

    ``timeout_s`` and ``max_write_mib`` bound each save (see :func:`record`); setting
    ``stop`` from another thread kills the save's process and raises KeyboardInterrupt.
    Raises SpecError or RecordError (see :func:`record`).
    """
    if fmt not in CKPT_NAMES:
        raise SpecError(f"format must be one of {sorted(CKPT_NAMES)}, got {fmt!r}")
    limits = dict(timeout_s=timeout_s, max_write_mib=max_write_mib, stop=stop)
    rec, facts = record(spec, fmt, base, state_mib, **limits, max_files=max_files)
    from ..checkpoint import saver  # imports torch (record did, once the first save returned)

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
        "checkpoint": CKPT_NAMES[fmt],
        "recording": facts,
        "models": models,
        "check_wall_s": time.perf_counter() - start,
    }


def compare_with_lesson(recipe, result: dict) -> dict:
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


def verdict_table(models: dict, outcomes: tuple[str, ...]) -> list[str]:
    """A line per model (its verdict and how many crash states gave each of ``outcomes``), under a head."""
    lines = [f"{'model':<13} {'verdict':<12}" + "".join(f"{o:>12}" for o in outcomes)]
    for key, m in models.items():
        row = f"{key.replace('_', '-'):<13} {m['verdict']:<12}"
        lines.append(row + "".join(f"{m['counts'][o]:>12}" for o in outcomes))
    return lines


def render(result: dict, title: str) -> str:
    """The verdict table and the first unsafe point per model, as plain text."""
    lines = [f"{title}: {result['recording']['calls']} recorded calls", ""]
    lines += verdict_table(result["models"], pc_check.OUTCOMES)
    for key, m in result["models"].items():
        p = m["first_unsafe"]
        if p:
            lines += [
                "",
                f"first unsafe point ({key.replace('_', '-')}): after call {p['call_index']}: {p['call']}",
                f"  state {p['state']} -> {p['outcome']}" + (f": {p['error']}" if p["error"] else ""),
                f"  why: {p['why']}",
            ]
    return "\n".join(lines + render_recording_notes(result["recording"]))


def render_recording_notes(rec: dict) -> list[str]:
    """Lines on the save's temp files outside the directory and on the calls the model could not place."""
    lines = []
    if rec.get("outside_files"):
        lines += ["", "temp files outside the checkpoint directory (created and removed by the save):"]
        for f in rec["outside_files"]:
            lines.append(f"  {f['path']} ({describe_fs(f)})")
    if rec.get("unplaced_calls"):
        lines += ["", "unplaced calls (not in the model; the verdict is judged on the placed calls only):"]
        for u in rec["unplaced_calls"]:
            lines.append(f"  call {u['call_index']} {u['syscall']} {u['path']}: {u['why']}")
        if rec.get("replay_differs"):
            where = ", ".join(rec["replay_differs"])
            lines.append(f"  the replay of the placed calls differs from the real files in {where}")
    return lines


def describe_fs(f: dict) -> str:
    """One outside file's filesystem and what a power cut does to it, in words."""
    where = f"{f['fs']} at {f['mount_point']}"
    if f["volatile"]:
        return f"{where}: in memory, nothing of it survives a power cut"
    if f["same_fs_as_checkpoint"]:
        return f"{where}, the checkpoint's filesystem: durable by its own fsyncs"
    return f"{where}, another filesystem: durable by its own fsyncs; no rename from it reaches the checkpoint"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="disklab power-cut simulator (host side)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    chk = sub.add_parser("check", help="record one save function and classify its crash states")
    chk.add_argument("spec", help="FILE.py:FUNC or recipe:NAME")
    chk.add_argument("--model", default="power-cut", choices=sorted(pc_states.MODELS))
    chk.add_argument("--format", default="torch", choices=sorted(CKPT_NAMES))
    chk.add_argument("--state-mib", type=int, default=4)
    chk.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S)
    chk.add_argument("--max-write-mib", type=int, default=DEFAULT_MAX_WRITE_MIB)
    chk.add_argument("--max-files", type=int, default=DEFAULT_MAX_FILES)
    chk.add_argument(
        "--max-memory-mib", type=int, default=None, help="the bound the caller set (for messages)"
    )
    chk.add_argument("--workdir", type=Path, default=None, help="kept; by default a temp dir, always removed")
    chk.add_argument("--json", type=Path, default=None, help="also write the result here")
    chk.add_argument(
        "--real-fs", default=None, metavar="FS,...", help="also on real crash images (realfs/user.py)"
    )
    chk.add_argument(
        "--ready-fd", type=int, default=None, metavar="FD",
        help="the caller's pipe: 'check' when this check starts, 'notorch' (and nothing on stderr) when "
        "this Python cannot import torch and safetensors (disklab powercut then tries another Python)",
    )  # fmt: skip
    tr = sub.add_parser("_traced")
    for opt in ("--spec", "--dir", "--ckpt"):
        tr.add_argument(opt, required=True)
    tr.add_argument("--state-mib", type=int, required=True)
    tr.add_argument("--step", type=int, required=True)
    tr.add_argument("--status-fd", type=int, default=None)
    args = ap.parse_args(argv)
    if args.cmd == "_traced":
        return _traced_child(args)
    with interrupt_once(STOP_SIGNALS):
        return _check(args)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _check_real_fs(text: str) -> None:
    """Raises SpecError naming --real-fs when a filesystem is unknown or this host cannot run them."""
    from ..realfs import user as realfs_user

    try:
        reason = realfs_user.why_not(realfs_user.parse(text))
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    if reason:
        raise SpecError(reason)


def _real_fs(args, result: dict, base: Path) -> list[dict]:
    """The save on real crash images of each --real-fs filesystem (disklab_host.realfs.user), printed."""
    from ..realfs import user as realfs_user

    verdict = result["models"][MODEL_KEYS["power-cut"]]["verdict"]
    cells = realfs_user.check(
        result["spec"], args.format, realfs_user.parse(args.real_fs), base, args.state_mib, verdict
    )
    result["real_fs"] = cells
    print(realfs_user.render(cells))
    return cells


def tell(fd: int | None, line: str) -> None:
    """One line to the caller's --ready-fd pipe (nothing without one)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(fd, f"{line}\n".encode())


def _check(args) -> int:
    base = None
    tell(args.ready_fd, "check")
    try:
        if pc_record.find_strace() is None:
            raise SpecError("strace is not installed (apt-get install strace)")
        if args.state_mib <= 0 or args.state_mib % 4:
            raise SpecError(f"--state-mib must be a positive multiple of 4, got {args.state_mib}")
        check_limits(args.state_mib, args.timeout_s, args.max_write_mib)
        if args.real_fs:
            _check_real_fs(args.real_fs)
        base = args.workdir or Path(tempfile.mkdtemp(prefix="disklab-powercut-"))
        result = analyse(
            args.spec, args.format, base, args.state_mib,
            timeout_s=args.timeout_s, max_write_mib=args.max_write_mib, max_files=args.max_files,
        )  # fmt: skip
        print(render(result, args.spec))
        real = _real_fs(args, result, base) if args.real_fs else []
        if args.json:
            atomic_write_json(args.json, output("powercut", result))
        chosen = result["models"][MODEL_KEYS[args.model]]
        judged = result["recording"]["judged_on"]
        note = "" if not result["recording"]["unplaced_calls"] else f" (judged on {judged}; see above)"
        print(f"\nverdict under {args.model}: {chosen['verdict']}{note}")
        return 1 if chosen["verdict"] == "unsafe" or any(c.get("verdict") == "unsafe" for c in real) else 0
    except NoTorchError as exc:
        if args.ready_fd is None:
            print(f"disklab powercut: {_one_line(exc, 2000)}", file=sys.stderr)
        tell(args.ready_fd, "notorch")  # the caller says it, or tries another Python
        return 2
    except (SpecError, RecordError) as exc:
        print(f"disklab powercut: {_one_line(exc, 2000)}", file=sys.stderr)
        return 2
    except MemoryError:
        bound = f"--max-memory-mib {args.max_memory_mib}" if args.max_memory_mib else "this host's memory"
        print(
            f"disklab powercut: no verdict: the analysis needed more memory than {bound} allows (the save's "
            f"crash states, about --max-files {args.max_files} files each); raise --max-memory-mib, or save "
            "fewer files",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("disklab powercut: interrupted; no verdict (the save was stopped)", file=sys.stderr)
        return INTERRUPTED
    finally:
        if in_main_thread():  # interrupt_once restores the handlers afterwards
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        if base is not None and args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
