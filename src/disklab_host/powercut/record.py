"""Record a save under strace and turn the trace into calls with file effects.

The power-cut simulator needs the content of every file in the checkpoint
directory after every call. We capture the written bytes themselves: strace
prints every string in hex (``-xx``) and up to ``-s`` bytes of it, so each
write, writev, pwrite64 and pwritev line carries its data. The directory is
read before the save (the snapshot), and the replay of the recorded calls on
that snapshot is checked against the real files afterwards (simulate.check_replay).
Reconstructing from the final files and offsets would miss data that a later
write overwrote or a temp file that was unlinked, so we do not rely on it.

torch.save to a path writes with writev (libstdc++'s file stream), so the
trace filter includes writev. The save runs between two marker opens of
files that do not exist; only the calls between them are kept.

The trace becomes calls with file effects in :mod:`.translate` (one module per family of system calls), its
text is read in :mod:`.trace`. Calls outside the directory are not crash points; every write, create,
truncate, rename, unlink or mkdir of a path outside it (from the import of the user's file on) is kept in
``Recording.outside`` so the caller can refuse the save, except under /dev (not /dev/shm) and /proc, and
except the save's temp files: paths it created and removed again (``Recording.outside_files``, with their
filesystem). Calls on the directory that the model cannot place are crash points with no effect, listed in
``Recording.unplaced``.

:func:`run_traced` owns the traced process: it runs in its own session,
is killed with its whole process group when it ends or breaks a limit
(:class:`Limits`: time from the save's begin, trace growth as a bound on
the bytes written, a fixed start-up limit), and reports what happened.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .states import Op
from .trace import QUOTED, RecordError, hex_text, parse_lines
from .translate import Translator
from .translate.state import Call

# Every call that changes file state, plus those that move offsets or copy fds. Each name carries strace's
# "?" prefix, so a call this architecture lacks is skipped, not an error: aarch64 (DGX Spark) has no open,
# creat, rename, pipe, dup2, unlink, rmdir, mkdir, link or symlink, only their *at forms.
TRACED_CALLS = re.sub(
    r"(^|,)",
    r"\1?",
    "open,openat,creat,write,writev,pwrite64,pwritev,pwritev2,ftruncate,truncate,fallocate,"
    "sendfile,sendfile64,copy_file_range,splice,tee,vmsplice,pipe,pipe2,ioctl,mmap,"
    "fsync,fdatasync,sync,syncfs,sync_file_range,rename,renameat,renameat2,"
    "unlink,unlinkat,rmdir,mkdir,mkdirat,link,linkat,symlink,symlinkat,close,fcntl,lseek,dup,dup2,dup3,"
    "chdir,fchdir,clone,clone3,fork,vfork",
)
IMPORT_MARKER = ".disklab-powercut-import"  # before the user's file is imported: outside writes count
BEGIN_MARKER = ".disklab-powercut-begin"
END_MARKER = ".disklab-powercut-end"
PATH_MAX = 4096  # -s never goes below this, so paths are never truncated


def open_marker(path: Path) -> None:
    """Open a marker name (it names no file): the trace shows the open, and nothing is changed."""
    with contextlib.suppress(FileNotFoundError):
        os.close(os.open(path, os.O_RDONLY))


# Calls that are crash points when they touch the directory (lseek, dup, fcntl only track).
_RECORDED = {
    "open", "openat", "creat", "write", "writev", "pwrite64", "pwritev", "pwritev2", "ftruncate",
    "truncate", "fallocate", "sendfile", "sendfile64", "copy_file_range", "splice", "ioctl", "mmap",
    "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "rename", "renameat", "renameat2",
    "unlink", "unlinkat", "rmdir", "mkdir", "mkdirat", "link", "linkat", "symlink", "symlinkat", "close",
}  # fmt: skip
# What changes the directory's bytes or names (not a close, an open or a sync): after the save returned, one
# of these from a thread or child of it is a writer the save left running.
_CHANGES = _RECORDED - {"open", "openat", "close", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range"}


@dataclass
class Recording:
    """Calls between the markers, the directory before them, and whether the save returned.

    ``initial`` maps a path relative to the directory to its bytes; ``initial_inodes``
    gives each initial file its inode number (0..n-1), as used by ``Op.ino``.
    """

    calls: list[Call]
    initial: dict[str, bytes]
    initial_inodes: dict[str, int]
    initial_dirs: set[str]
    returned: bool
    syscall_counts: dict[str, int] = field(default_factory=dict)
    outside: dict[str, str] = field(default_factory=dict)  # absolute path -> "written", "made", ...
    outside_bytes: int = 0  # bytes written to files outside the directory
    unplaced: list[dict] = field(default_factory=list)  # {call_index, syscall, path, why} per call
    outside_files: list[dict] = field(default_factory=list)  # the save's temp files outside (see below)

    @property
    def ops(self) -> list[Op]:
        """Every effect, in call order."""
        return [op for call in self.calls for op in call.ops]


def find_strace() -> str | None:
    """Path of the strace binary, or None when it is not installed."""
    return shutil.which("strace")


def snapshot(root: Path) -> tuple[dict[str, bytes], set[str]]:
    """Every regular file under ``root`` (relative posix path -> bytes) and every directory."""
    files: dict[str, bytes] = {}
    dirs = {"."}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            dirs.add(os.path.normpath(os.path.join(rel, d)))
        for f in filenames:
            files[os.path.normpath(os.path.join(rel, f))] = (Path(dirpath) / f).read_bytes()
    return files, dirs


@functools.cache
def takes_seccomp_bpf(strace: str) -> bool:
    """Whether this strace accepts ``--seccomp-bpf`` (strace 5.3 and later); tried once on ``true``.

    With it the traced process stops only at the traced calls. Without it, it stops at every
    system call, and starting Python and importing torch (read, fstat, brk, futex: tens of
    thousands of calls) makes each traced save seconds slower. Where the kernel refuses the
    filter, strace itself falls back to stopping at every call; the trace is the same either way.
    """
    argv = [strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=close", "-o", os.devnull, "--", "true"]
    try:
        run = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return run.returncode == 0


def strace_argv(strace: str, trace_file: Path, string_limit_bytes: int, argv: list[str]) -> list[str]:
    """The strace command line: follow threads and children, hex strings, full arrays, ``-s`` bytes.

    ``--seccomp-bpf`` where this strace takes it (:func:`takes_seccomp_bpf`).
    """
    seccomp = ["--seccomp-bpf"] if takes_seccomp_bpf(strace) else []
    return [
        strace, "-f", *seccomp, "-qq", "-xx", "-e", "abbrev=none", "-s", str(string_limit_bytes),
        "-e", f"trace={TRACED_CALLS}", "-o", str(trace_file), "--", *argv,
    ]  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """Bounds on one traced save.

    ``timeout_s``: from the begin message on the status pipe (the save is called) to the
    process's end; ``startup_s``: from the start to that message (Python, torch, the user's
    import); ``max_trace_growth_bytes``: how much the trace may grow after the begin
    message (None: no bound); ``linger_s``: how long the process group may outlive the
    save's final message; ``stop``: set by another thread to end the run at once (the
    recording then raises KeyboardInterrupt, as on Ctrl-C).
    """

    timeout_s: float
    max_trace_growth_bytes: int | None = None
    startup_s: float = 300.0
    linger_s: float = 20.0
    stop: threading.Event | None = None


@dataclass
class TracedRun:
    """How one traced run ended.

    ``returncode`` is strace's (the traced program's status; -N when a signal N killed
    it), None when it was stopped; ``stopped`` is None, "startup", "timeout", "bytes"
    or "lingering"; ``status`` holds the lines the program sent on its status pipe;
    ``save_s`` the seconds from the begin message to the end.
    """

    returncode: int | None
    stdout: str
    stderr: str
    status: list[str]
    stopped: str | None
    save_s: float | None


def run_traced(
    argv: list[str], *, cwd: Path, trace_file: Path, string_limit_bytes: int, env: dict | None = None,
    limits: Limits | None = None, status_option: str | None = None,
) -> TracedRun:  # fmt: skip
    """Run ``argv`` under strace in ``cwd``, in its own session, within ``limits``.

    With ``status_option`` (e.g. "--status-fd"), ``argv`` gets that option and the
    number of a pipe the program writes status lines to ("begin" when the save starts).
    The whole process group is SIGKILLed when the run ends, breaks a limit, or this
    call is interrupted (KeyboardInterrupt is re-raised), so nothing it started
    outlives it. Raises RecordError when strace is not installed.
    """
    strace = find_strace()
    if strace is None:
        raise RecordError("strace is not installed")
    limits = limits or Limits(timeout_s=60.0)
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    extra = [status_option, str(write_fd)] if status_option else []
    cmd = strace_argv(strace, trace_file, max(string_limit_bytes, PATH_MAX), [*argv, *extra])
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                pass_fds=(write_fd,), start_new_session=True,
            )  # fmt: skip
        finally:
            os.close(write_fd)
        try:
            returncode, stopped, status, save_s = _supervise(proc, read_fd, trace_file, limits)
        finally:
            _kill_group(proc)
            os.close(read_fd)
        out.seek(0)
        err.seek(0)
        stdout, stderr = (f.read().decode("utf-8", "replace") for f in (out, err))
    return TracedRun(returncode, stdout, stderr, status, stopped, save_s)


def _supervise(proc: subprocess.Popen, read_fd: int, trace_file: Path, limits: Limits):
    start, buf, status = time.monotonic(), b"", []
    begun_at = final_at = None
    trace_at_begin = 0
    while True:
        # WNOWAIT: the leader stays a zombie, holding its group id until _kill_group reaps it
        exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(read_fd, 65536):
                buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            status.append(line.decode("utf-8", "replace"))
            if status[-1] == "begin" and begun_at is None:
                begun_at, trace_at_begin = time.monotonic(), _size(trace_file)
            elif begun_at is not None and final_at is None:
                final_at = time.monotonic()
        if limits.stop is not None and limits.stop.is_set():
            raise KeyboardInterrupt  # run_traced kills the group on its way out
        now = time.monotonic()
        save_s = None if begun_at is None else now - begun_at
        if exited is not None:
            code = exited.si_status if exited.si_code == os.CLD_EXITED else -exited.si_status
            return code, None, status, save_s
        if begun_at is None and now - start > limits.startup_s:
            return None, "startup", status, save_s
        if final_at is not None and now - final_at > limits.linger_s:
            return None, "lingering", status, save_s
        if begun_at is not None and final_at is None and now - begun_at > limits.timeout_s:
            return None, "timeout", status, save_s
        growth = limits.max_trace_growth_bytes
        if begun_at is not None and growth is not None and _size(trace_file) - trace_at_begin > growth:
            return None, "bytes", status, save_s
        time.sleep(0.05)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process's group (its session), while the leader, unreaped, still holds the id."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _is_marker(name: str, args: list[str], marker: str) -> bool:
    if name not in ("open", "openat") or not args:
        return False
    path = args[0] if name == "open" else args[1] if len(args) > 1 else ""
    m = QUOTED.fullmatch(path)
    return bool(m) and m.group(1).endswith(hex_text(b"/" + marker.encode()))


def parse_trace(
    lines, *, root: Path, cwd: Path, initial: dict[str, bytes], initial_dirs: set[str]
) -> Recording:
    """Build a Recording from strace ``lines`` (an iterable of text lines).

    ``root`` is the checkpoint directory, ``cwd`` the traced process's working
    directory, ``initial``/``initial_dirs`` the snapshot taken before the run.
    Crash points are the calls between the begin and end markers; effects
    outside ``root`` count from the import marker (when there is one) on.
    Raises RecordError when the begin marker is missing, the save did something
    this recorder does not model, or (TruncatedError) a string was truncated.
    """
    tr = Translator(root, cwd, initial, initial_dirs)
    if hasattr(lines, "seek"):
        tr.family = family(lines)
        lines.seek(0)
    else:
        lines = list(lines)
        tr.family = family(lines)
    begun = returned = False
    counts: dict[str, int] = {}
    tr.recording = False
    for pid, name, args, ret, _rest in parse_lines(_after_marker(lines)):
        if not begun and _is_marker(name, args, BEGIN_MARKER):
            begun = tr.recording = True
            continue
        if begun and _is_marker(name, args, END_MARKER):
            returned = True
            continue
        if returned:  # after the save returned: a thread or child of it still writing is refused, named
            before = len(tr.calls)
            try:
                tr.handle(name, args, ret, pid)
            except RecordError:
                continue  # what cannot be translated after the return (the interpreter ending) is ignored
            if len(tr.calls) > before and name in _CHANGES:
                raise RecordError(
                    f"the save returned while a thread or child process of it was still changing its "
                    f"directory ({name} after the return, process {pid}): a save must finish its writes "
                    "before it returns, or the caller's next step races them"
                )
            continue
        before = len(tr.calls)
        tr.handle(name, args, ret, pid)
        if len(tr.calls) > before and name in _RECORDED:
            counts[name] = counts.get(name, 0) + 1
    inodes = {rel: i for i, rel in enumerate(sorted(initial))}
    rec = Recording(tr.calls, dict(initial), inodes, set(initial_dirs), returned, counts)
    temp = tr.temp_outside - tr.created_outside  # created outside, and gone again when the save ended
    rec.outside = {path: effect for path, effect in tr.outside.items() if path not in temp}
    rec.outside_bytes, rec.unplaced, rec.outside_files = tr.outside_bytes, tr.unplaced, tr.temp_files()
    if not begun:
        if rec.outside:
            return rec  # the caller refuses the outside writes; the save never began
        raise RecordError("the trace has no begin marker: the traced program did not reach the save")
    return rec


_STARTS = ("clone", "fork")  # clone, clone3, fork, vfork


def family(lines) -> dict[int, tuple[int, bool]]:
    """Every thread and process the trace shows starting: child pid -> (parent pid, shares the parent's
    file table), from the clone, clone3, fork and vfork calls of the whole trace."""
    starts = (line for line in lines if any(s in line for s in _STARTS))
    out = {}
    for pid, name, args, ret, _rest in parse_lines(starts):
        if name in ("clone", "clone3", "fork", "vfork") and ret > 0:
            out[ret] = (pid, "CLONE_FILES" in " ".join(args))
    return out


def _after_marker(lines):
    """Skip, without parsing, the lines before the import (or else begin) marker (interpreter start-up)."""
    needles = [hex_text(m.encode()) for m in (IMPORT_MARKER, BEGIN_MARKER)]
    found = False
    for line in lines:
        if not found and not any(n in line for n in needles):
            continue
        found = True
        yield line
