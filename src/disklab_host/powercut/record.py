"""Record a save under strace and turn the trace into calls with file effects.

The power-cut simulator needs the content of every file in the checkpoint
directory after every call. We capture the written bytes themselves: strace
prints every string in hex (``-xx``) and up to ``-s`` bytes of it, so each
write, writev, pwrite64 and pwritev line carries its data. The directory is
read before the save (the snapshot), and the replay of the recorded calls on
that snapshot is checked against the real files afterwards (see powercut.py).
Reconstructing from the final files and offsets would miss data that a later
write overwrote or a temp file that was unlinked, so we do not rely on it.

torch.save to a path writes with writev (libstdc++'s file stream), so the
trace filter includes writev. The save runs between two marker opens of
files that do not exist; only the calls between them are kept.

Modelled: one process's file table (threads share it; forked children are
not modelled), the working directory of the traced process does not change
(chdir is not traced). Copies (sendfile, copy_file_range, splice, reflink
clones) become writes of the bytes the source held at that moment (see
:class:`_Translator`). Calls outside the directory are not crash points;
every write, create, truncate, rename, unlink or mkdir of a path outside it
(from the import of the user's file on) is kept in ``Recording.outside`` so
the caller can refuse the save, except under /dev (not /dev/shm) and /proc,
and except the save's temp files: paths it created and removed again
(``Recording.outside_files``, with their filesystem). Calls on the directory
that the model cannot place (a shared writable mmap, a renamed directory, links)
are crash points with no effect, listed in ``Recording.unplaced``.

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
    "chdir,fchdir",
)
IMPORT_MARKER = ".disklab-powercut-import"  # before the user's file is imported: outside writes count
BEGIN_MARKER = ".disklab-powercut-begin"
END_MARKER = ".disklab-powercut-end"
HEX_BYTES_PER_BYTE = 4  # -xx prints each byte as \xNN
PATH_MAX = 4096  # -s never goes below this, so paths are never truncated

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+|\?)(.*)$")
# A quoted string of the trace. With -xx strace writes every byte as \xNN, so no raw quote is inside one and
# a plain scan to the closing quote finds its end; _hex then checks it is \xNN and nothing else. (A pattern of
# \xNN groups took seconds for each MiB of a saved tensor: the written bytes are the bulk of a trace.)
_STR = re.compile(r'"([^"]*)"(\.\.\.)?')
_IOV = re.compile(r'iov_base="([^"]*)"(\.\.\.)?')
# What split_args looks at: a whole quoted string (skipped; an unclosed one runs to the end), or a bracket or
# a comma.
_ARG_TOKENS = re.compile(r'"[^"]*(?:"|$)|[\[\]{},]')

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
VOLATILE_FS = frozenset({"tmpfs", "ramfs"})  # nothing on them survives a power cut
_LAZY = object()  # content of a file that was there before the save: read from the real file when needed


class RecordError(RuntimeError):
    """The trace cannot be turned into a faithful recording (the message says why)."""


class TruncatedError(RecordError):
    """strace cut a string at its -s limit: one write was longer than the limit."""


@dataclass(frozen=True)
class Call:
    """One recorded call: its index (0-based crash point), its text, and its effects on the directory."""

    index: int
    name: str
    text: str
    ops: tuple[Op, ...]


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


def filesystem_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> dict:
    """The filesystem ``path`` is on: {"fs", "mount_point", "dev", "volatile"}.

    The path itself may be gone (a temp file the save removed): its nearest existing
    parent is asked. ``dev`` is that parent's st_dev; the mount is the one with that
    device number whose mount point is the longest prefix of the resolved path (the
    longest prefix of any mount when no device number matches, as on btrfs subvolumes).
    ``volatile`` is true on tmpfs and ramfs, whose files do not survive a power cut.
    """
    probe = os.path.abspath(path)
    while not os.path.lexists(probe) and probe != "/":
        probe = os.path.dirname(probe)
    real = os.path.realpath(probe)
    dev = os.stat(real).st_dev
    want = f"{os.major(dev)}:{os.minor(dev)}"
    best, best_dev = ("?", "/"), None
    with contextlib.suppress(OSError), open(mountinfo) as f:
        for line in f:
            fields = line.split()
            if " - " not in line or len(fields) < 5:
                continue
            point = fields[4].replace("\\040", " ")
            fstype = line.split(" - ", 1)[1].split()[0]
            if not (real == point or real.startswith(point.rstrip("/") + "/")):
                continue
            if fields[2] == want and (best_dev is None or len(point) >= len(best_dev[1])):
                best_dev = (fstype, point)
            if len(point) >= len(best[1]):
                best = (fstype, point)
    fstype, point = best_dev or best
    return {"fs": fstype, "mount_point": point, "dev": dev, "volatile": fstype in VOLATILE_FS}


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


def _hex(s: str) -> bytes:
    """The bytes of strace's -xx text of a string (``\\x41\\x42``, no quotes).

    Raises RecordError when ``s`` is anything else. Checked with slices, in C: every fourth character from
    the first is a backslash, from the second an ``x``, and the rest are hex digits, one byte each.
    """
    n = len(s) // HEX_BYTES_PER_BYTE
    try:
        data = bytes.fromhex(s.replace("\\x", ""))
    except ValueError:
        data = None
    if (
        data is None
        or len(data) != n
        or len(s) != HEX_BYTES_PER_BYTE * n
        or s[::4] != "\\" * n
        or s[1::4] != "x" * n
    ):
        raise RecordError(f"expected strace's \\xNN bytes in a string, got {s[:60]!r}")
    return data


def _hex_text(data: bytes) -> str:
    """``data`` as strace's -xx writes it."""
    return "".join(f"\\x{b:02x}" for b in data)


def split_args(text: str) -> list[str]:
    """Split a strace argument list at top-level commas (outside quotes, [] and {})."""
    out, depth, start = [], 0, 0
    for m in _ARG_TOKENS.finditer(text):
        token = m.group()
        if token[0] == '"':
            continue
        if token in "[{":
            depth += 1
        elif token in "]}":
            depth -= 1
        elif depth == 0:
            out.append(text[start : m.start()].strip())
            start = m.end()
    if text.strip():
        out.append(text[start:].strip())
    return out


def _string(arg: str) -> bytes:
    m = _STR.fullmatch(arg)
    if not m:
        raise RecordError(f"expected a hex string argument, got {arg[:60]!r}")
    if m.group(2):
        raise TruncatedError("strace truncated a string at its -s limit")
    return _hex(m.group(1))


def _iov_data(arg: str, returned: int) -> bytes:
    parts = []
    for m in _IOV.finditer(arg):
        if m.group(2):
            raise TruncatedError("strace truncated an iovec at its -s limit")
        parts.append(_hex(m.group(1)))
    data = b"".join(parts)
    if len(data) < returned:
        raise RecordError(f"iovec holds {len(data)} bytes but the call wrote {returned}")
    return data[:returned]


def parse_lines(lines) -> list[tuple[int, str, list[str], int, str]]:
    """Join unfinished/resumed lines; return (pid, name, args, ret, rest) per finished call."""
    pending: dict[int, str] = {}
    out = []
    for raw in lines:
        m = _LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        pid, body = int(m.group(1)), m.group(2)
        if body.endswith("<unfinished ...>"):
            pending[pid] = body[: -len("<unfinished ...>")].rstrip()
            continue
        if body.startswith("<..."):
            body = pending.pop(pid, "") + body.split("resumed>", 1)[1]
        c = _CALL.match(body)
        if not c:
            continue  # signals, exits, and calls killed before they returned
        ret = c.group(3)
        value = -1 if ret == "?" else int(ret, 0)
        out.append((pid, c.group(1), split_args(c.group(2)), value, c.group(4)))
    return out


class _Pipe:
    """The bytes in a pipe, as far as the recording knows (None: not known, e.g. read with read(2))."""

    def __init__(self):
        self.data: bytearray | None = bytearray()


@dataclass
class _Fd:
    rel: str | None  # path relative to the directory, or None outside it
    is_dir: bool
    path: str | None = None  # the absolute path it was opened with
    ino: int | None = None  # inside or outside the directory (outside files produce no ops)
    pos: int = 0
    append: bool = False
    sync: bool = False
    pipe: _Pipe | None = None


def _offset_arg(arg: str) -> int | None:
    """A copy call's offset argument: None for NULL, N for ``[N]`` or ``[N] => [M]``."""
    if arg == "NULL":
        return None
    m = re.match(r"\[(\d+)\]", arg)
    if not m:
        raise RecordError(f"expected an offset argument, got {arg[:60]!r}")
    return int(m.group(1))


class _Translator:
    """Turns raw calls into Calls with Ops, tracking fds, offsets, contents and names.

    It keeps the content of every file the recording knows, in the directory and
    outside it (a temp file in /dev/shm), as the page cache holds it after each
    call: a copy (sendfile, copy_file_range, splice, a reflink clone) becomes a
    write op of the bytes the source held at that moment. A file outside that was
    there before the save is read from the real file when a copy needs it
    (``_LAZY``), as long as the recording has not changed it. Calls on the directory
    the model cannot place are kept in ``unplaced``, with why.
    """

    def __init__(self, root: Path, cwd: Path, initial: dict[str, bytes], dirs: set[str]):
        self.root, self.cwd = str(root.resolve()), str(cwd.resolve())
        self.names = {rel: i for i, rel in enumerate(sorted(initial))}
        self.sizes = {i: len(initial[rel]) for rel, i in self.names.items()}
        self.content: dict[int, object] = {i: bytearray(initial[rel]) for rel, i in self.names.items()}
        self.dirs = set(dirs)
        self.next_ino = len(self.names)
        self.fds: dict[int, _Fd] = {}
        self.calls: list[Call] = []
        self.recording = True  # False between the import marker and the begin marker
        self.outside: dict[str, str] = {}
        self.outside_bytes = 0
        self.outside_names: dict[str, int] = {}  # outside path -> ino, for files the recording knows
        self.created_outside: set[str] = set()  # outside paths the save created (O_CREAT, mkdir, rename)
        self.temp_outside: set[str] = set()  # of those, the ones it removed (or renamed away) again
        self.dirty: dict[int, bool] = {}  # outside ino -> written since its last fsync
        self.fs_cache: dict[str, dict] = {}
        self.unplaced: list[dict] = []

    def note_outside(self, path: str | None, effect: str) -> None:
        """Keep the first effect on a path outside the directory (not /dev, except /dev/shm, nor /proc)."""
        if path is None or not _counts_outside(path):
            return
        self.outside.setdefault(path, effect)

    def rel(self, path: str) -> str | None:
        rel = os.path.relpath(path, self.root)
        return None if rel == ".." or rel.startswith("../") else os.path.normpath(rel)

    @property
    def root_dev(self) -> int:
        return self.fs(os.path.join(self.root, "."))["dev"]

    def fs(self, path: str) -> dict:
        parent = os.path.dirname(path)
        if parent not in self.fs_cache:
            self.fs_cache[parent] = filesystem_of(parent)
        return self.fs_cache[parent]

    def resolve(self, dirfd: str, raw: str) -> str:
        path = _string(raw).decode("utf-8", "surrogateescape")
        if os.path.isabs(path):
            return os.path.normpath(path)
        if dirfd == "AT_FDCWD":
            base = self.cwd
        else:
            fd = self.fds.get(int(dirfd))
            if fd is None or fd.path is None:
                raise RecordError(f"relative path {path!r} against an fd this recording does not know")
            base = fd.path
        return os.path.normpath(os.path.join(base, path))

    def text(self, name: str, args: list[str], ret: int) -> str:
        def show(m: re.Match) -> str:
            if len(m.group(1)) > 120 * HEX_BYTES_PER_BYTE:  # shown by its length alone: not decoded
                return f"<{len(m.group(1)) // HEX_BYTES_PER_BYTE} bytes>"
            data = _hex(m.group(1))
            s = data.decode("utf-8", "replace")
            if len(data) <= 120 and s.isprintable():
                r = self.rel(s) if os.path.isabs(s) else None
                return repr(r if r is not None else s)
            return f"<{len(data)} bytes>"

        return f"{name}({_STR.sub(show, ', '.join(args))}) = {ret}"

    def add(self, name: str, args: list[str], ret: int, ops: list[Op]) -> None:
        if not self.recording:
            if ops:
                raise RecordError(f"{self.text(name, args, ret)} changed the directory before the save began")
            return
        self.calls.append(Call(len(self.calls), name, self.text(name, args, ret), tuple(ops)))

    def unplace(self, name: str, args: list[str], ret: int, path: str | None, why: str) -> None:
        """Keep a call on the directory that the model cannot place: a crash point with no effect."""
        if not self.recording:
            text = self.text(name, args, ret)
            raise RecordError(f"{text} changed the directory before the save began: {why}")
        self.unplaced.append({"call_index": len(self.calls), "syscall": name, "path": path, "why": why})
        self.add(name, args, ret, [])

    def handle(self, name: str, args: list[str], ret: int) -> None:
        if ret < 0 and name != "lseek":
            return  # a failed call changes nothing
        if name in ("chdir", "fchdir") and self.recording:
            said = self.text(name, args, ret)  # paths in the checkpoint's directory are shown relative to it
            if said.startswith("chdir('.')"):
                said += ", the checkpoint's own directory"
            raise RecordError(
                f"the save changed its working directory ({said}): the recorder "
                "follows paths from one working directory, so its later relative paths cannot be placed; "
                "save without chdir (use absolute paths, or paths relative to the checkpoint's own path)"
            )
        handler = getattr(self, f"_{name}", None)
        if handler is not None:
            handler(name, args, ret)

    # open family --------------------------------------------------------------
    def _open_path(self, name, args, ret, path: str, flags: str) -> None:
        rel = self.rel(path)
        is_dir = "O_DIRECTORY" in flags or (rel is not None and rel in self.dirs)
        sync = "O_SYNC" in flags or "O_DSYNC" in flags
        fd = _Fd(rel, is_dir, path, append="O_APPEND" in flags, sync=sync)
        self.fds[ret] = fd
        if rel is None:
            self._open_outside(fd, path, flags)
            return
        index, ops = len(self.calls), []
        if not is_dir:
            if rel not in self.names:
                if "O_CREAT" not in flags:
                    raise RecordError(f"{rel!r} was opened but is not in the snapshot")
                self.names[rel] = self.next_ino
                self.sizes[self.next_ino] = 0
                self.content[self.next_ino] = bytearray()
                self.next_ino += 1
                ops.append(Op(index, "create", ino=self.names[rel], path=rel))
            elif "O_TRUNC" in flags:
                ops.append(Op(index, "truncate", ino=self.names[rel], size=0))
                self._set_size(self.names[rel], 0)
            fd.ino = self.names[rel]
        self.add(name, args, ret, ops)

    def _open_outside(self, fd: _Fd, path: str, flags: str) -> None:
        """Follow a file outside the directory: its content feeds copies into it."""
        if "O_CREAT" in flags or "O_TRUNC" in flags:
            self.note_outside(path, "written")
        if fd.is_dir or not _counts_outside(path):
            return
        if path not in self.outside_names:
            if "O_CREAT" in flags:
                self.created_outside.add(path)
            self.outside_names[path] = self.next_ino
            self.content[self.next_ino] = bytearray() if "O_TRUNC" in flags else _LAZY
            self.sizes[self.next_ino] = 0 if "O_TRUNC" in flags else -1
            self.next_ino += 1
        elif "O_TRUNC" in flags:
            self._set_size(self.outside_names[path], 0)
        fd.ino = self.outside_names[path]
        if "O_TRUNC" in flags:
            self.dirty[fd.ino] = True

    def _open(self, name, args, ret):
        self._open_path(name, args, ret, self.resolve("AT_FDCWD", args[0]), args[1])

    def _openat(self, name, args, ret):
        self._open_path(name, args, ret, self.resolve(args[0], args[1]), args[2])

    def _creat(self, name, args, ret):
        self._open_path(name, args, ret, self.resolve("AT_FDCWD", args[0]), "O_CREAT|O_WRONLY|O_TRUNC")

    def _pipe2(self, name, args, ret):
        m = re.fullmatch(r"\[(\d+), (\d+)\]", args[0])
        if m:
            pipe = _Pipe()
            for fdnum in m.groups():
                self.fds[int(fdnum)] = _Fd(None, False, None, pipe=pipe)

    _pipe = _pipe2

    # contents -------------------------------------------------------------------
    def _set_size(self, ino: int, size: int) -> None:
        buf = self.content.get(ino)
        if isinstance(buf, bytearray):
            del buf[size:]
            buf.extend(b"\0" * (size - len(buf)))
        elif buf is _LAZY:
            self.content[ino] = None  # changed before its old bytes were seen
        self.sizes[ino] = size
        self.dirty[ino] = True

    def _put_content(self, ino: int, offset: int, data: bytes | None, n: int) -> None:
        buf = self.content.get(ino)
        if data is None or not isinstance(buf, bytearray):
            self.content[ino] = None
        else:
            if len(buf) < offset:
                buf.extend(b"\0" * (offset - len(buf)))
            buf[offset : offset + n] = data
        self.sizes[ino] = max(self.sizes.get(ino, 0), offset + n)
        self.dirty[ino] = True

    def source(self, fd: _Fd | None, offset: int, n: int) -> bytes | str:
        """The ``n`` bytes a copy read from ``fd`` at ``offset``, or why the recording does not know them."""
        if fd is None:
            return "its source fd is not one the recording opened (a socket, or opened before the save began)"
        if fd.ino is None:
            return f"its source {fd.path or 'fd'} is not a regular file the recording follows"
        buf = self.content.get(fd.ino)
        if buf is _LAZY:
            try:
                buf = self.content[fd.ino] = bytearray(Path(fd.path).read_bytes())
            except OSError as exc:
                return f"its source {fd.path} was there before the save and cannot be read ({exc.strerror})"
        if buf is None:
            where = fd.rel or fd.path
            return f"the content of its source {where} is not known (changed by a call the model cannot see)"
        data = bytes(buf[offset : offset + n])
        if len(data) < n:
            return f"the recording knows {len(buf)} bytes of its source; the call copied {n} from {offset}"
        return data

    # data -----------------------------------------------------------------------
    def _write_at(self, name, args, ret, fd: _Fd, data: bytes | None, offset: int | None, n=None, why=""):
        """``n`` bytes (``data``, or None when not known: ``why``) written at ``offset`` (None: fd's)."""
        n = len(data) if n is None else n
        if fd.pipe is not None:
            if fd.pipe.data is not None and data is not None:
                fd.pipe.data += data
            else:
                fd.pipe.data = None
            return
        if fd.ino is None:
            return
        if offset is None:
            offset = self.sizes[fd.ino] if fd.append and self.sizes[fd.ino] >= 0 else fd.pos
            fd.pos = offset + n
        self._put_content(fd.ino, offset, data, n)
        if fd.rel is None:
            return
        if data is None:
            self.unplace(name, args, ret, fd.rel, why)
            return
        ops = [Op(len(self.calls), "write", ino=fd.ino, offset=offset, data=data, durable=fd.sync)]
        self.add(name, args, ret, ops)

    def _file_fd(self, arg: str, written: int = 0) -> _Fd | None:
        """The fd, when it is a file or a pipe the recording follows (a write outside is noted)."""
        fd = self.fds.get(int(arg))
        if fd is not None and fd.rel is None and fd.path is not None and not fd.is_dir:
            self.note_outside(fd.path, "written")
            if fd.path in self.outside:
                self.outside_bytes += written
        if fd is None or fd.is_dir or (fd.ino is None and fd.pipe is None):
            return None
        return fd

    def _write(self, name, args, ret):
        if fd := self._file_fd(args[0], ret):
            self._write_at(name, args, ret, fd, _string(args[1])[:ret], None)

    def _pwrite64(self, name, args, ret):
        if fd := self._file_fd(args[0], ret):
            self._write_at(name, args, ret, fd, _string(args[1])[:ret], int(args[3]))

    def _writev(self, name, args, ret):
        if fd := self._file_fd(args[0], ret):
            self._write_at(name, args, ret, fd, _iov_data(args[1], ret), None)

    def _pwritev(self, name, args, ret):
        if fd := self._file_fd(args[0], ret):
            self._write_at(name, args, ret, fd, _iov_data(args[1], ret), int(args[3]))

    _pwritev2 = _pwritev

    def _vmsplice(self, name, args, ret):
        if (fd := self.fds.get(int(args[0]))) is not None and fd.pipe is not None:
            try:
                data = _iov_data(args[1], ret)
            except RecordError:
                data = None
            self._write_at(name, args, ret, fd, data, None, n=ret)

    # copies: the bytes come from the source's content at the moment of the call ----------
    def _copy(self, name, args, ret, src_fd: str, src_off: str, dst_fd: str, dst_off: str | None) -> None:
        """One copy of ``ret`` bytes: from the source's offset (or its position), to the destination's."""
        src, dst = self.fds.get(int(src_fd)), self._file_fd(dst_fd, ret)
        if src is not None and src.pipe is not None:
            data = src.pipe.data
            if data is None or len(data) < ret:
                got = "what the recording cannot see (read(2), or a write before the save began)"
                data, why = None, f"its source is a pipe that holds {got}"
            else:
                data, why = bytes(data[:ret]), ""
                del src.pipe.data[:ret]
        else:
            offset = _offset_arg(src_off)
            start = (src.pos if src is not None else 0) if offset is None else offset
            got = self.source(src, start, ret)
            data, why = (got, "") if isinstance(got, bytes) else (None, f"{name} into it: {got}")
            if offset is None and src is not None:
                src.pos += ret
        if dst is None:
            return
        out_off = None if dst_off is None else _offset_arg(dst_off)
        self._write_at(name, args, ret, dst, data, out_off, n=ret, why=why)

    def _sendfile(self, name, args, ret):
        self._copy(name, args, ret, args[1], args[2], args[0], None)

    _sendfile64 = _sendfile

    def _copy_file_range(self, name, args, ret):
        self._copy(name, args, ret, args[0], args[1], args[2], args[3])

    def _splice(self, name, args, ret):
        self._copy(name, args, ret, args[0], args[1], args[2], args[3])

    def _tee(self, name, args, ret):
        src, dst = self.fds.get(int(args[0])), self.fds.get(int(args[1]))
        if dst is not None and dst.pipe is not None:
            ok = src is not None and src.pipe is not None and src.pipe.data is not None
            self._write_at(name, args, ret, dst, bytes(src.pipe.data[:ret]) if ok else None, None, n=ret)

    def _ioctl(self, name, args, ret):
        """FICLONE (BTRFS_IOC_CLONE) and FICLONERANGE: the destination gets the source's bytes."""
        request = args[1] if len(args) > 1 else ""
        dst = self.fds.get(int(args[0]))
        if dst is None or dst.ino is None or "CLONE" not in request:
            return
        if "FICLONERANGE" in request or "CLONE_RANGE" in request:
            fields = dict(re.findall(r"(\w+)=(\d+)", args[2]))
            src = self.fds.get(int(fields["src_fd"]))
            start, length, at = (int(fields[k]) for k in ("src_offset", "src_length", "dest_offset"))
        elif "FICLONE" in request or "BTRFS_IOC_CLONE" in request:
            src, start, length, at = self.fds.get(int(args[2])), 0, 0, 0
        else:
            if dst.rel is not None:
                self.unplace(name, args, ret, dst.rel, f"{request} is not modelled")
            return
        size = self._known_size(src)
        if length == 0:  # to the end of the source
            length = max(size - start, 0) if size is not None else 0
        got = self.source(src, start, length) if size is not None else self.source(src, 0, 1 << 62)
        data, why = (got, "") if isinstance(got, bytes) else (None, f"a reflink clone into it: {got}")
        if "RANGE" not in request and data is not None and dst.rel is not None:
            ops = [Op(len(self.calls), "truncate", ino=dst.ino, size=0)] if self.sizes[dst.ino] else []
            self._set_size(dst.ino, 0)
            ops.append(Op(len(self.calls), "write", ino=dst.ino, offset=0, data=data))
            self._put_content(dst.ino, 0, data, len(data))
            self.add(name, args, ret, ops)
            return
        if "RANGE" not in request:
            self._set_size(dst.ino, 0)
        self._write_at(name, args, ret, dst, data, at, n=length, why=why)

    def _known_size(self, fd: _Fd | None) -> int | None:
        if fd is None or fd.ino is None:
            return None
        if self.content.get(fd.ino) is _LAZY:
            self.source(fd, 0, 0)  # reads it
        buf = self.content.get(fd.ino)
        return len(buf) if isinstance(buf, bytearray) else None

    def _mmap(self, name, args, ret):
        if len(args) < 6 or "MAP_SHARED" not in args[3] or "PROT_WRITE" not in args[2]:
            return
        fd = self.fds.get(int(args[4])) if args[4].lstrip("-").isdigit() else None
        if fd is None or fd.ino is None:
            return
        self.content[fd.ino] = None  # stores through the mapping are not system calls
        if fd.rel is not None:
            why = "stores through a shared writable mapping are not system calls: strace cannot see them"
            self.unplace(name, args, ret, fd.rel, why)

    def _fallocate(self, name, args, ret):
        fd = self._file_fd(args[0])
        if fd is None or fd.pipe is not None:
            return
        mode, offset, length = args[1], int(args[2]), int(args[3])
        keep = "FALLOC_FL_KEEP_SIZE" in mode
        size = self.sizes[fd.ino]
        if mode in ("0", "FALLOC_FL_KEEP_SIZE"):  # allocation: the size may grow, the bytes stay
            if not keep and offset + length > size:
                self._set_size(fd.ino, offset + length)
                if fd.rel is not None:
                    op = Op(len(self.calls), "truncate", ino=fd.ino, size=offset + length)
                    self.add(name, args, ret, [op])
                    return
            if fd.rel is not None:
                self.add(name, args, ret, [])
            return
        if "FALLOC_FL_PUNCH_HOLE" in mode or "FALLOC_FL_ZERO_RANGE" in mode:
            end = min(offset + length, size) if keep else offset + length
            if end > offset:
                self._write_at(name, args, ret, fd, b"\0" * (end - offset), offset)
            elif fd.rel is not None:
                self.add(name, args, ret, [])
            return
        self.content[fd.ino] = None
        if fd.rel is not None:
            why = f"fallocate mode {mode} moves bytes within the file; not modelled"
            self.unplace(name, args, ret, fd.rel, why)

    def _lseek(self, name, args, ret):
        if ret >= 0 and (fd := self.fds.get(int(args[0]))):
            fd.pos = ret

    def _ftruncate(self, name, args, ret):
        if (fd := self._file_fd(args[0])) and fd.pipe is None:
            self._set_size(fd.ino, int(args[1]))
            if fd.rel is not None:
                self.add(name, args, ret, [Op(len(self.calls), "truncate", ino=fd.ino, size=int(args[1]))])

    def _truncate(self, name, args, ret):
        path = self.resolve("AT_FDCWD", args[0])
        rel = self.rel(path)
        if rel is None:
            self.note_outside(path, "written")
            if path in self.outside_names:
                self._set_size(self.outside_names[path], int(args[1]))
        else:
            ino = self.names[rel]
            self._set_size(ino, int(args[1]))
            self.add(name, args, ret, [Op(len(self.calls), "truncate", ino=ino, size=int(args[1]))])

    # durability -------------------------------------------------------------------
    def _fsync(self, name, args, ret):
        fd = self.fds.get(int(args[0]))
        if fd is None:
            return
        if fd.rel is None:
            if fd.ino is not None:
                self.dirty[fd.ino] = False
            return
        index = len(self.calls)
        op = Op(index, "dirsync", path=fd.rel) if fd.is_dir else Op(index, name, ino=fd.ino)
        self.add(name, args, ret, [op])

    _fdatasync = _fsync

    def _sync(self, name, args, ret):
        self.dirty = dict.fromkeys(self.dirty, False)
        self.add(name, args, ret, [Op(len(self.calls), "sync")])

    def _syncfs(self, name, args, ret):
        """syncfs(2) writes back the filesystem of its fd only: another one leaves the directory as it was."""
        fd = self.fds.get(int(args[0]))
        if fd is None or fd.path is None:
            return
        dev = self.root_dev if fd.rel is not None else self.fs(fd.path)["dev"]
        for ino, path in ((i, p) for p, i in self.outside_names.items()):
            if self.fs(path)["dev"] == dev:
                self.dirty[ino] = False
        if dev == self.root_dev:
            self.add(name, args, ret, [Op(len(self.calls), "sync")])

    def _sync_file_range(self, name, args, ret):
        if (fd := self._file_fd(args[0])) and fd.rel is not None:
            self.add(name, args, ret, [])  # starts writeback, promises nothing (sync_file_range(2))

    def _fcntl(self, name, args, ret):
        fd = self.fds.get(int(args[0]))
        if fd is None:
            return
        if args[1].startswith("F_DUPFD"):
            self.fds[ret] = fd
        elif args[1] == "F_FULLFSYNC" and fd.rel is not None:
            self.add(name, args, ret, [Op(len(self.calls), "fsync", ino=fd.ino)])

    def _dup(self, name, args, ret):
        if (fd := self.fds.get(int(args[0]))) is not None:
            self.fds[ret] = fd

    _dup2 = _dup3 = _dup

    def _close(self, name, args, ret):
        fd = self.fds.pop(int(args[0]), None)
        if fd is not None and fd.rel is not None:
            self.add(name, args, ret, [])

    # names ------------------------------------------------------------------------
    def _rename_paths(self, name, args, ret, src: str, dst: str, exchange: bool = False) -> None:
        rs, rd = self.rel(src), self.rel(dst)
        if exchange:
            self._exchange(name, args, ret, src, dst, rs, rd)
            return
        if rd is None:
            self.note_outside(dst, "written")
        if rs is None:
            self.note_outside(src, f"renamed to {dst}")
            ino = self.outside_names.pop(src, None)
            if src in self.created_outside and rd is None:
                self.created_outside.add(dst)
            self.removed(src)
            if rd is None:
                if ino is not None:
                    self.outside_names[dst] = ino
                return
            self._rename_in(name, args, ret, src, rd, ino)
            return
        if rd is None:
            ino = self.names.get(rs)
            self._unlink_rel(name, args, ret, rs)
            if ino is not None and _counts_outside(dst):
                self.outside_names[dst] = ino
                self.created_outside.add(dst)
            return
        if rs in self.dirs:
            self._rename_dir(rs, rd)
            self.unplace(name, args, ret, rs, f"renaming the directory {rs!r} to {rd!r} is not modelled")
            return
        self.names[rd] = self.names.pop(rs)
        self.add(name, args, ret, [Op(len(self.calls), "rename", path=rs, dst=rd)])

    def _rename_in(self, name, args, ret, src: str, rd: str, ino: int | None) -> None:
        """A file from outside (on the directory's filesystem: rename(2) fails across filesystems) moves in.

        Placed as the creation of its name in the directory (durable when the directory is fsync'd)
        and one write of all its bytes, durable when it was fsync'd after its last change.
        """
        buf = self.content.get(ino) if ino is not None else None
        if ino is None or not isinstance(buf, bytearray):
            self.names.pop(rd, None)
            why = f"{src} was renamed in, and the recording does not know its bytes"
            self.unplace(name, args, ret, rd, why)
            return
        self.names[rd] = ino
        index = len(self.calls)
        ops = [Op(index, "create", ino=ino, path=rd)]
        synced = not self.dirty.get(ino, True)
        ops.append(Op(index, "write", ino=ino, offset=0, data=bytes(buf), durable=synced))
        self.add(name, args, ret, ops)

    def _exchange(self, name, args, ret, src, dst, rs, rd) -> None:
        if rs is None and rd is None:
            a, b = self.outside_names.pop(src, None), self.outside_names.pop(dst, None)
            for path, ino in ((src, b), (dst, a)):
                if ino is not None:
                    self.outside_names[path] = ino
            self.note_outside(src, "written")
            self.note_outside(dst, "written")
            return
        if rs is not None and rd is not None and rs not in self.dirs and rd not in self.dirs:
            a, b = self.names.pop(rs, None), self.names.pop(rd, None)
            for rel, ino in ((rs, b), (rd, a)):
                if ino is not None:
                    self.names[rel] = ino
            self.add(name, args, ret, [Op(len(self.calls), "exchange", path=rs, dst=rd)])
            return
        if rs is not None and rd is not None:
            self.names.pop(rs, None)
            self.names.pop(rd, None)
        else:
            self.names.pop(rs or rd, None)
        what = "directories" if rs in self.dirs or rd in self.dirs else "a file outside with one inside"
        why = f"RENAME_EXCHANGE of {rs or src!r} and {rd or dst!r} ({what}) is not modelled"
        self.unplace(name, args, ret, rs or rd, why)

    def _rename_dir(self, rs: str, rd: str) -> None:
        moved = {p: rd + p[len(rs) :] for p in list(self.names) if p.startswith(rs + "/")}
        for old, new in moved.items():
            self.names[new] = self.names.pop(old)
        self.dirs = {rd + d[len(rs) :] if d == rs or d.startswith(rs + "/") else d for d in self.dirs}

    def _rename(self, name, args, ret):
        self._rename_paths(
            name, args, ret, self.resolve("AT_FDCWD", args[0]), self.resolve("AT_FDCWD", args[1])
        )

    def _renameat(self, name, args, ret):
        exchange = len(args) > 4 and "RENAME_EXCHANGE" in args[4]
        src, dst = self.resolve(args[0], args[1]), self.resolve(args[2], args[3])
        self._rename_paths(name, args, ret, src, dst, exchange)

    _renameat2 = _renameat

    def _unlink_rel(self, name, args, ret, rel: str) -> None:
        if rel in self.dirs:
            self.dirs.discard(rel)
        else:
            self.names.pop(rel, None)
        self.add(name, args, ret, [Op(len(self.calls), "unlink", path=rel)])

    def _unlink_path(self, name, args, ret, path: str) -> None:
        if (rel := self.rel(path)) is not None:
            self._unlink_rel(name, args, ret, rel)
        else:
            self.note_outside(path, "deleted")
            self.outside_names.pop(path, None)
            self.removed(path)

    def removed(self, path: str) -> None:
        """A path is gone: when the save created it (outside), it was the save's temp file."""
        if path in self.created_outside:
            self.created_outside.discard(path)
            self.temp_outside.add(path)

    def _unlink(self, name, args, ret):
        self._unlink_path(name, args, ret, self.resolve("AT_FDCWD", args[0]))

    _rmdir = _unlink

    def _unlinkat(self, name, args, ret):
        self._unlink_path(name, args, ret, self.resolve(args[0], args[1]))

    def _mkdir_rel(self, name, args, ret, path: str) -> None:
        if (rel := self.rel(path)) is not None:
            self.dirs.add(rel)
            self.add(name, args, ret, [Op(len(self.calls), "mkdir", path=rel)])
        else:
            self.note_outside(path, "made")
            self.created_outside.add(path)

    def _mkdir(self, name, args, ret):
        self._mkdir_rel(name, args, ret, self.resolve("AT_FDCWD", args[0]))

    def _mkdirat(self, name, args, ret):
        self._mkdir_rel(name, args, ret, self.resolve(args[0], args[1]))

    def _link_paths(self, name, args, ret, src: str, dst: str) -> None:
        rd = self.rel(dst)
        if rd is None:
            self.note_outside(dst, "written")
            return
        self.names.pop(rd, None)
        self.unplace(name, args, ret, rd, f"{name} makes a second name for {src}; links are not modelled")

    def _link(self, name, args, ret):
        src, dst = self.resolve("AT_FDCWD", args[0]), self.resolve("AT_FDCWD", args[1])
        self._link_paths(name, args, ret, src, dst)

    def _linkat(self, name, args, ret):
        self._link_paths(name, args, ret, self.resolve(args[0], args[1]), self.resolve(args[2], args[3]))

    def _symlink(self, name, args, ret):
        target = _string(args[0]).decode("utf-8", "surrogateescape")
        self._link_paths(name, args, ret, target, self.resolve("AT_FDCWD", args[1]))

    def _symlinkat(self, name, args, ret):
        target = _string(args[0]).decode("utf-8", "surrogateescape")
        self._link_paths(name, args, ret, target, self.resolve(args[1], args[2]))

    def temp_files(self) -> list[dict]:
        """The save's temp files outside (created by it, gone when it returned) and their filesystems."""
        out = []
        for path in sorted(self.temp_outside - self.created_outside):
            fs = self.fs(path)
            same = fs["dev"] == self.root_dev
            out.append({
                "path": path, "fs": fs["fs"], "mount_point": fs["mount_point"], "volatile": fs["volatile"],
                "same_fs_as_checkpoint": same,
            })  # fmt: skip
        return out


def _counts_outside(path: str) -> bool:
    """Paths outside the directory that count as the save's effects: not /proc, nor /dev except /dev/shm."""
    return not (path.startswith("/proc/") or (path.startswith("/dev/") and not path.startswith("/dev/shm/")))


def _is_marker(name: str, args: list[str], marker: str) -> bool:
    if name not in ("open", "openat") or not args:
        return False
    path = args[0] if name == "open" else args[1] if len(args) > 1 else ""
    m = _STR.fullmatch(path)
    return bool(m) and m.group(1).endswith(_hex_text(b"/" + marker.encode()))


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
    tr = _Translator(root, cwd, initial, initial_dirs)
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
                tr.handle(name, args, ret)
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
        tr.handle(name, args, ret)
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


def _after_marker(lines):
    """Skip, without parsing, the lines before the import (or else begin) marker (interpreter start-up)."""
    needles = [_hex_text(m.encode()) for m in (IMPORT_MARKER, BEGIN_MARKER)]
    found = False
    for line in lines:
        if not found and not any(n in line for n in needles):
            continue
        found = True
        yield line
