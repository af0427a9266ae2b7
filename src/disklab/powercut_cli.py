"""``disklab powercut FILE.py:FUNC`` (or ``--saver NAME[:RANKS]``): check a user's save function, or a
framework's own save, against simulated crashes.

The controller never imports torch, nor the user's file. This module checks
the input (FILE must be a .py file that compiles) and runs ``python -m
disklab_host.powercut.simulate check`` with a Python that has torch (see
:func:`python_candidates`) in a temp directory it owns and removes afterwards,
passing its output and exit status through: 0 when no crash state under the
chosen model is corrupt or missing, 1 when one is, 2 for bad input or a save that gets no verdict (a
one-line error, never a traceback): one that exits, is killed, hangs past
--timeout-s, raises, writes more than --max-write-mib, leaves a file
outside its directory, or returns without leaving its state dict at the
path in the declared --format. Calls the model cannot place are listed,
and the verdict is judged on the others. 130 when interrupted (Ctrl-C): the check stops its save,
and the temp directories are removed. ``main`` parses the raw argument list
itself: ``-h``/``--help`` print the usage and return 0, and options may come
before or after the spec.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from disklab_host.common.child import child_env
from disklab_host.common.interrupts import interrupt_once
from disklab_host.powercut import check, states
from disklab_host.savers import registry as saverlib

# The host side's limits (disklab_host.powercut.simulate, which imports torch through its recipes).
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_WRITE_MIB = 32
DEFAULT_MAX_FILES = 200  # simulate.DEFAULT_MAX_FILES (tests/test_powercut_cli.py keeps them equal)
# The whole host-side check (the saves, their recordings and the analysis): its address space (RLIMIT_AS;
# torch's import alone maps about 0.6 GiB) and its wall time.
DEFAULT_MAX_MEMORY_MIB = 4096
DEFAULT_ANALYSIS_TIMEOUT_S = 900.0
INTERRUPTED = 130  # 128 + SIGINT
CHILD_CLEANUP_S = 60.0  # how long an interrupted check may take to stop its save and remove its files

LOCAL_LAB_PYTHON = Path(".lab/venv/bin/python")
SIMULATOR = "disklab_host.powercut.simulate"
SAVER_CHECK = "disklab_host.savers.check"  # --saver NAME: a framework's own save
SAVER_TIMEOUT_S = 120.0  # disklab_host.savers.powercut.DEFAULT_TIMEOUT_S
MODELS = tuple(states.MODELS)
FORMATS = check.FORMATS


class UsageError(ValueError):
    """Bad input; the message is the one line the user sees."""


def python_candidates(requested: str | None) -> list[str]:
    """The Pythons to run the check with, in order: --python if given, else this interpreter, then
    ./.lab/venv/bin/python where it exists.

    The first that can import torch and safetensors runs it. No separate probe imports torch first: the
    check says on its --ready-fd pipe that it started ("check") and, when the first save's child could
    not import them ("notorch"), says nothing else, so the next candidate is tried (:func:`_run_check`).
    """
    if requested:
        return [requested]
    return [sys.executable] + ([str(LOCAL_LAB_PYTHON)] if LOCAL_LAB_PYTHON.is_file() else [])


def no_torch_message(requested: str | None) -> str:
    """The one line when no candidate Python could import torch and safetensors."""
    if requested:
        return f"--python {requested} cannot import torch and safetensors"
    return "no Python with torch found: pass --python PATH (the lab venv's python)"


def check_spec(spec: str) -> str:
    """Validate FILE.py:FUNC; returns it with FILE made absolute. Raises UsageError.

    FILE must exist, end in .py and compile (it is not run here: the save's child imports it).
    """
    if ":" not in spec:
        raise UsageError(f"save function must be FILE.py:FUNC, got {spec!r}")
    where, func = spec.rsplit(":", 1)
    if where == "recipe":
        return spec
    if not func.isidentifier():
        raise UsageError(f"{func!r} is not a Python function name")
    path = Path(where)
    if not path.is_file():
        raise UsageError(f"{where}: no such file")
    if path.suffix != ".py":
        raise UsageError(f"{where}: not a Python file (the save function must be FILE.py:FUNC)")
    try:
        compile(path.read_bytes(), str(path), "exec")
    except (SyntaxError, ValueError) as exc:
        where_in = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        msg = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise UsageError(f"{where}: cannot be imported: {type(exc).__name__}: {msg}{where_in}") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot be read: {exc.strerror}") from None
    return f"{path.resolve()}:{func}"


EPILOG = """exit status:
  0  no crash state is corrupt or missing under --model
  1  at least one is (the first unsafe point is printed), or with --real-fs a
     real crash image lost the checkpoint
  2  no verdict, one line on stderr: bad input (no such file or function,
     not a .py file that imports, strace or a Python with torch missing, a
     bad limit), or a save that exits (sys.exit or os._exit, any status), is
     killed, does not return within --timeout-s, raises (KeyboardInterrupt
     and SystemExit too), writes more than --max-write-mib, leaves a file
     outside its directory (what it created there is removed and named; a
     temp file it removed again is followed, not refused), or returns
     without leaving its state dict at the path in --format
  Calls the model cannot place (a shared writable mmap, a link...)
  are listed after the table; the verdict is then judged on the others.
  130  interrupted (Ctrl-C); the save is stopped and temp files removed

Options may come before or after FILE.py:FUNC. See docs/powercut.md."""


def parser() -> argparse.ArgumentParser:
    """The ``disklab powercut`` argument parser (``-h``/``--help`` print usage and the exit statuses)."""
    ap = argparse.ArgumentParser(
        prog="disklab powercut",
        description="Check your own save function against simulated crashes (process kill, power cut).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "spec", metavar="FILE.py:FUNC", nargs="?", default=None,
        help="FUNC(state_dict, path) saves a checkpoint to path",
    )  # fmt: skip
    ap.add_argument(
        "--saver", metavar="NAME[:RANKS]", default=None,
        help=f"instead of FILE.py:FUNC, a framework's own save: {', '.join(saverlib.NAMES)} (dcp:4 for four "
        "ranks), into a fresh directory and over an earlier checkpoint, each crash state loaded back by the "
        "framework and checked tensor by tensor; --state-mib is then the model's size, any whole MiB",
    )  # fmt: skip
    ap.add_argument("--model", default="power-cut", choices=MODELS, help="model that decides the exit status")
    ap.add_argument("--format", default="torch", choices=FORMATS, help="what FUNC writes (default torch)")
    ap.add_argument("--state-mib", type=int, default=4, help="state dict size in MiB, a multiple of 4")
    ap.add_argument(
        "--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
        help=f"each save must return within S seconds of its call (default {DEFAULT_TIMEOUT_S:g})",
    )  # fmt: skip
    ap.add_argument(
        "--max-write-mib", type=int, default=DEFAULT_MAX_WRITE_MIB, metavar="N",
        help=f"each save may write at most N MiB, in one write or many (default {DEFAULT_MAX_WRITE_MIB})",
    )  # fmt: skip
    ap.add_argument(
        "--max-files", type=int, default=DEFAULT_MAX_FILES, metavar="N",
        help=f"the save may leave at most N files in its directory (default {DEFAULT_MAX_FILES}): the "
        "analysis holds every file in every crash state",
    )  # fmt: skip
    ap.add_argument(
        "--max-memory-mib", type=int, default=DEFAULT_MAX_MEMORY_MIB, metavar="N",
        help=f"the whole check's address space, RLIMIT_AS (default {DEFAULT_MAX_MEMORY_MIB})",
    )  # fmt: skip
    ap.add_argument(
        "--analysis-timeout-s", type=float, default=DEFAULT_ANALYSIS_TIMEOUT_S, metavar="S",
        help=f"the whole check, saves and analysis, in S seconds (default {DEFAULT_ANALYSIS_TIMEOUT_S:g})",
    )  # fmt: skip
    ap.add_argument("--python", metavar="PY", default=None, help="a Python with torch and safetensors")
    ap.add_argument("--json", metavar="OUT", type=Path, default=None, help="also write the full result here")
    ap.add_argument(
        "--real-fs", metavar="FS,...", default=None,
        help="also run the save on real crash images of these filesystems (ext4, xfs, btrfs; needs root, "
        "loop devices, FUSE; see docs/realfs.md); an unsafe real image also makes the exit status 1",
    )  # fmt: skip
    return ap


def main(argv: list[str]) -> int:
    """Run the check on ``argv`` (the raw arguments after ``powercut``); returns the exit status.

    0 safe, 1 unsafe, 2 bad input or no verdict, 130 interrupted; ``-h``/``--help`` print the
    usage and return 0. The temp directory it makes for the check is removed on every path.
    """
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed its one-line error or the help
        return int(exc.code or 0)
    with interrupt_once(STOP_SIGNALS):
        try:
            return _run(args)
        except KeyboardInterrupt:
            print("disklab powercut: interrupted; no verdict", file=sys.stderr)
            return INTERRUPTED


def _run(args) -> int:
    try:
        if (args.spec is None) == (args.saver is None):
            raise UsageError("give either FILE.py:FUNC or --saver NAME[:RANKS], not both and not neither")
        if args.saver is not None:
            try:
                saverlib.parse(args.saver, "--saver")
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if args.real_fs:
                raise UsageError("--real-fs takes FILE.py:FUNC only: a --saver is judged by the simulator")
        spec = check_spec(args.spec) if args.spec is not None else None
        if shutil.which("strace") is None:
            raise UsageError("strace is not installed (on Debian/Ubuntu: apt-get install strace)")
        if spec is not None and (args.state_mib <= 0 or args.state_mib % 4):
            raise UsageError(f"--state-mib must be a positive multiple of 4, got {args.state_mib}")
        if args.state_mib <= 0:
            raise UsageError(f"--state-mib must be > 0, got {args.state_mib}")
        if not args.timeout_s > 0:
            raise UsageError(f"--timeout-s must be > 0, got {args.timeout_s:g}")
        if args.max_write_mib <= args.state_mib:
            raise UsageError(
                f"--max-write-mib must be more than --state-mib {args.state_mib} (a save writes the "
                f"state dict at least once), got {args.max_write_mib}"
            )
        for name in ("max_files", "max_memory_mib"):
            if getattr(args, name) <= 0:
                raise UsageError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
        if not args.analysis_timeout_s > 0:
            raise UsageError(f"--analysis-timeout-s must be > 0, got {args.analysis_timeout_s:g}")
    except UsageError as exc:
        print(f"disklab powercut: {exc}", file=sys.stderr)
        return 2
    if args.saver is not None:
        cmd = ["-m", SAVER_CHECK, "--saver", args.saver, "--model", args.model]
        if args.timeout_s == DEFAULT_TIMEOUT_S:  # a framework's save (its ranks' collectives) takes longer
            args.timeout_s = SAVER_TIMEOUT_S
    else:
        cmd = ["-m", SIMULATOR, "check", spec, "--model", args.model, "--format", args.format]
        cmd += ["--max-memory-mib", str(args.max_memory_mib)]
        if args.real_fs:
            cmd += ["--real-fs", args.real_fs]
    cmd += ["--state-mib", str(args.state_mib), "--timeout-s", repr(args.timeout_s)]
    cmd += ["--max-write-mib", str(args.max_write_mib), "--max-files", str(args.max_files)]
    if args.json:
        cmd += ["--json", str(args.json.resolve())]
    workdir = Path(tempfile.mkdtemp(prefix="disklab-powercut-"))
    try:
        for python in python_candidates(args.python):
            rc = _run_check([python, *cmd, "--workdir", str(workdir)], args)
            if rc is not None:
                return rc
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"disklab powercut: {no_torch_message(args.python)}", file=sys.stderr)
    return 2


def _run_check(cmd: list[str], args) -> int | None:
    """Run the host-side check ``cmd``; its exit status, or None when its Python cannot import torch and
    safetensors (it never started the check, or the check said "notorch" on its --ready-fd pipe)."""
    read_fd, write_fd = os.pipe()
    proc = None
    try:
        # Its own session, SIGINT ignored until its handler is in place: Ctrl-C reaches only this
        # process, which passes it on (_stop), so the check sees it once and cleans up.
        try:
            proc = subprocess.Popen(
                [*cmd, "--ready-fd", str(write_fd)], env=child_env(), start_new_session=True,
                pass_fds=(write_fd,), preexec_fn=lambda: _child_setup(args.max_memory_mib),
            )  # fmt: skip
        except OSError:  # not an executable at all
            return None
        finally:
            os.close(write_fd)
        try:
            rc = proc.wait(timeout=args.analysis_timeout_s)
        except subprocess.TimeoutExpired:
            _kill_check(proc)
            print(
                f"disklab powercut: no verdict: the check took longer than --analysis-timeout-s "
                f"{args.analysis_timeout_s:g} (its saves, recordings and analysis); it was stopped. Raise "
                "--analysis-timeout-s, or make the save leave fewer files (--max-files)",
                file=sys.stderr,
            )
            return 2
    except KeyboardInterrupt:
        rc = _stop(proc)
        if rc != INTERRUPTED:  # the check printed its own line when it saw the interrupt
            print("disklab powercut: interrupted; no verdict", file=sys.stderr)
        return INTERRUPTED
    finally:
        said = _read_all(read_fd).split()
        os.close(read_fd)
    if "check" not in said or "notorch" in said:
        return None
    if rc == -signal.SIGKILL:
        print(
            "disklab powercut: no verdict: the host-side check was killed (SIGKILL; the kernel's OOM killer "
            f"when memory ran out): lower --max-memory-mib {args.max_memory_mib} below this host's free "
            f"memory, or --max-files {args.max_files}",
            file=sys.stderr,
        )
        return 2
    if rc not in (0, 1, 2, INTERRUPTED):
        print(f"disklab powercut: the host-side check ended with status {rc}", file=sys.stderr)
        return 2
    return rc


def _kill_check(proc: subprocess.Popen) -> None:
    """SIGKILL the check and every process it started, reap it, and wait (a while) until they have ended.

    The check leads its own group, but each save it traces runs in a session of its own (strace and
    the save: disklab_host.powercut.record.run_traced), which killing the check's group would leave
    running. So the check's group is stopped first (it starts nothing more), the groups of all its
    descendants are found (disklab.processes), and every one of those groups is killed. A SIGKILL takes effect
    when its process next runs, so each descendant is waited for until it is gone or a zombie (the
    check's children are no longer this process's to reap).
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGSTOP)
    found = _descendants(proc.pid)
    for pgid in {proc.pid} | {pgid for _, pgid in found}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + CHILD_CLEANUP_S
    for pid, _ in found:
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.02)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (neither gone nor a zombie): disklab.processes."""
    from disklab import processes  # psutil, only when a check is killed: the rest needs the stdlib alone

    return processes.FACTS.running(pid)


def _descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, process group) of every live descendant of ``pid`` (disklab.processes: psutil)."""
    import psutil

    from disklab import processes

    try:
        below = processes.tree(psutil.Process(pid))[1:]
    except psutil.Error:
        return []
    found = []
    for child in below:
        with contextlib.suppress(OSError):
            found.append((child.pid, os.getpgid(child.pid)))
    return found


def _read_all(fd: int) -> str:
    """What is in the pipe ``fd`` now (its writer has ended, or its lines are not needed any more)."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _child_setup(max_memory_mib: int) -> None:
    """In the check's process before exec: SIGINT ignored until its handler is in place, and its address
    space bounded (a save or an analysis past it gets MemoryError, named in one line, not the OOM killer)."""
    import resource

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit = max_memory_mib * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _stop(proc: subprocess.Popen | None) -> int | None:
    """After Ctrl-C: SIGINT the check (again each second: it ignores one that comes before its handler
    is in place, and every one after the first) until it has stopped its save and cleaned up."""
    if proc is None:
        return None
    deadline = time.monotonic() + CHILD_CLEANUP_S
    while time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    return proc.wait()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
