"""Start the lab runner in the background, out of the session that started it, and record how it ended.

``python disklab_host.pyz lab --detach ...`` (the lab_run role's start task, one
shell command with no module) returns at once, printing the result line
(common.result) of ``{"pid", "run_dir", "started"}``.
``pid`` is a small supervisor that leads a session of its own (setsid(2)), so
neither a dropped SSH session nor its SIGHUP reaches it or the runner, its
child. The supervisor waits for the runner and writes ``exit.json`` in the run
directory (atomically) when it ends, whatever ended it, a SIGKILL or an
out-of-memory kill included: ``{"rc", "pid", "signal", "stdout", "stderr"}``,
with the last lines of the runner's stdout and stderr (``runner.out``,
``runner.err`` beside it). Being the runner's parent, it also reaps it at once,
so no zombie outlives the run on a host whose init does not reap orphans (a
container's). The role's poll waits for ``exit.json``, or for the supervisor
to be gone without one.

This is what an Ansible async task did (async_wrapper), without its two module
runs per host.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from .common.fsio import atomic_write_json
from .common.result import emit as emit_result

EXIT_NAME = "exit.json"
OUT_NAME, ERR_NAME = "runner.out", "runner.err"
TAIL_BYTES = 4096  # of each stream, in exit.json


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _redirect(fd: int, path: Path, flags: int) -> None:
    new = os.open(path, flags, 0o644)
    os.dup2(new, fd)
    os.close(new)


def start(
    run_dir: Path, body: Callable[[], int], results: Path, after: Callable[[], None] | None = None
) -> int:
    """Run ``body`` (the runner) under a detached supervisor; return 0 in the caller once it started.

    When ``results`` exists already (a finished attempt of this run), nothing
    is started: exit.json then says so, with rc 0, as Ansible's ``creates`` did.
    ``after`` runs in the supervisor once the runner has ended, however it ended, before exit.json is
    written: what a runner killed outright could not undo itself (its errors go to runner.err).
    """
    exit_path = run_dir / EXIT_NAME
    if results.exists():
        if not exit_path.exists():
            note = f"{results} exists: not run again"
            atomic_write_json(exit_path, {"rc": 0, "pid": None, "signal": None, "stdout": note, "stderr": ""})
        emit_result({"pid": None, "run_dir": str(run_dir), "started": False})
        return 0
    exit_path.unlink(missing_ok=True)  # an earlier, failed attempt's record
    sys.stdout.flush()
    sys.stderr.flush()
    supervisor = os.fork()
    if supervisor:
        emit_result({"pid": supervisor, "run_dir": str(run_dir), "started": True})
        return 0
    try:
        os.setsid()
        _redirect(0, Path(os.devnull), os.O_RDONLY)
        _redirect(1, run_dir / OUT_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        _redirect(2, run_dir / ERR_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        runner = os.fork()
        if runner == 0:
            _run_body(body)
        _, status = os.waitpid(runner, 0)
        rc = os.waitstatus_to_exitcode(status)  # -N: ended by signal N
        if after is not None:
            try:
                after()
            except Exception:
                traceback.print_exc()
        atomic_write_json(exit_path, {"rc": rc, "pid": runner, "signal": -rc if rc < 0 else None,
                                      "stdout": _tail(run_dir / OUT_NAME),
                                      "stderr": _tail(run_dir / ERR_NAME)})  # fmt: skip
    except BaseException as exc:  # the supervisor itself failed: say so where the poll looks
        why = f"disklab lab --detach: {type(exc).__name__}: {exc}"
        with contextlib.suppress(BaseException):
            atomic_write_json(exit_path, {"rc": 1, "pid": None, "signal": None, "stdout": "", "stderr": why})
    finally:
        os._exit(0)


def _run_body(body: Callable[[], int]) -> None:
    """The runner's process: ``body``'s return value is its exit status; never returns."""
    rc = 1
    try:
        rc = body()
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc if isinstance(rc, int) else 1)
