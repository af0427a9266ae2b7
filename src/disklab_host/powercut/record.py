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
(chdir is not traced), no hard links or symlinks are created in the
directory. Calls outside the directory are not crash points; every write,
create, truncate, rename, unlink or mkdir of a path outside it (from the
import of the user's file on) is kept in ``Recording.outside`` so the
caller can refuse the save, except under /dev (not /dev/shm) and /proc.

:func:`run_traced` owns the traced process: it runs in its own session,
is killed with its whole process group when it ends or breaks a limit
(:class:`Limits`: time from the save's begin, trace growth as a bound on
the bytes written, a fixed start-up limit), and reports what happened.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .states import Op

# Every call that changes file state, plus those that move offsets or copy fds.
TRACED_CALLS = (
    "open,openat,creat,write,writev,pwrite64,pwritev,pwritev2,ftruncate,truncate,"
    "fsync,fdatasync,sync,syncfs,sync_file_range,rename,renameat,renameat2,"
    "unlink,unlinkat,mkdir,mkdirat,close,fcntl,lseek,dup,dup2,dup3"
)
IMPORT_MARKER = ".disklab-powercut-import"  # before the user's file is imported: outside writes count
BEGIN_MARKER = ".disklab-powercut-begin"
END_MARKER = ".disklab-powercut-end"
HEX_BYTES_PER_BYTE = 4  # -xx prints each byte as \xNN
PATH_MAX = 4096  # -s never goes below this, so paths are never truncated

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+|\?)(.*)$")
_STR = re.compile(r'"((?:\\x[0-9a-f]{2})*)"(\.\.\.)?')
_IOV = re.compile(r'iov_base="((?:\\x[0-9a-f]{2})*)"(\.\.\.)?')

# Calls that are crash points when they touch the directory (lseek, dup, fcntl only track).
_RECORDED = {
    "open", "openat", "creat", "write", "writev", "pwrite64", "pwritev", "pwritev2", "ftruncate",
    "truncate", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "rename", "renameat",
    "renameat2", "unlink", "unlinkat", "mkdir", "mkdirat", "close",
}  # fmt: skip


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


def strace_argv(strace: str, trace_file: Path, string_limit_bytes: int, argv: list[str]) -> list[str]:
    """The strace command line: follow threads and children, hex strings, full arrays, ``-s`` bytes."""
    return [
        strace, "-f", "-qq", "-xx", "-e", "abbrev=none", "-s", str(string_limit_bytes),
        "-e", f"trace={TRACED_CALLS}", "-o", str(trace_file), "--", *argv,
    ]  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """Bounds on one traced save.

    ``timeout_s``: from the begin message on the status pipe (the save is called) to the
    process's end; ``startup_s``: from the start to that message (Python, torch, the user's
    import); ``max_trace_growth_bytes``: how much the trace may grow after the begin
    message (None: no bound); ``linger_s``: how long the process group may outlive the
    save's final message.
    """

    timeout_s: float
    max_trace_growth_bytes: int | None = None
    startup_s: float = 300.0
    linger_s: float = 20.0


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
    return bytes.fromhex(s.replace("\\x", ""))


def split_args(text: str) -> list[str]:
    """Split a strace argument list at top-level commas (outside quotes, [] and {})."""
    out, depth, start, quoted = [], 0, 0, False
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
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


@dataclass
class _Fd:
    rel: str | None  # path relative to the directory, or None outside it
    is_dir: bool
    path: str | None = None  # the absolute path it was opened with
    ino: int | None = None
    pos: int = 0
    append: bool = False
    sync: bool = False


class _Translator:
    """Turns raw calls into Calls with Ops, tracking fds, offsets, sizes and names."""

    def __init__(self, root: Path, cwd: Path, initial: dict[str, bytes], dirs: set[str]):
        self.root, self.cwd = str(root.resolve()), str(cwd.resolve())
        self.names = {rel: i for i, rel in enumerate(sorted(initial))}
        self.sizes = {i: len(initial[rel]) for rel, i in self.names.items()}
        self.dirs = set(dirs)
        self.next_ino = len(self.names)
        self.fds: dict[int, _Fd] = {}
        self.calls: list[Call] = []
        self.recording = True  # False between the import marker and the begin marker
        self.outside: dict[str, str] = {}
        self.outside_bytes = 0

    def note_outside(self, path: str | None, effect: str) -> None:
        """Keep the first effect on a path outside the directory (not /dev, except /dev/shm, nor /proc)."""
        if (
            path is None
            or path.startswith("/proc/")
            or (path.startswith("/dev/") and not path.startswith("/dev/shm/"))
        ):
            return
        self.outside.setdefault(path, effect)

    def rel(self, path: str) -> str | None:
        rel = os.path.relpath(path, self.root)
        return None if rel == ".." or rel.startswith("../") else os.path.normpath(rel)

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

    def handle(self, name: str, args: list[str], ret: int) -> None:
        if ret < 0 and name != "lseek":
            return  # a failed call changes nothing
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
            if "O_CREAT" in flags or "O_TRUNC" in flags:
                self.note_outside(path, "written")
            return
        index, ops = len(self.calls), []
        if not is_dir:
            if rel not in self.names:
                if "O_CREAT" not in flags:
                    raise RecordError(f"{rel!r} was opened but is not in the snapshot")
                self.names[rel] = self.next_ino
                self.sizes[self.next_ino] = 0
                self.next_ino += 1
                ops.append(Op(index, "create", ino=self.names[rel], path=rel))
            elif "O_TRUNC" in flags:
                ops.append(Op(index, "truncate", ino=self.names[rel], size=0))
                self.sizes[self.names[rel]] = 0
            fd.ino = self.names[rel]
        self.add(name, args, ret, ops)

    def _open(self, name, args, ret):
        self._open_path(name, args, ret, self.resolve("AT_FDCWD", args[0]), args[1])

    def _openat(self, name, args, ret):
        self._open_path(name, args, ret, self.resolve(args[0], args[1]), args[2])

    def _creat(self, name, args, ret):
        self._open_path(name, args, ret, self.resolve("AT_FDCWD", args[0]), "O_CREAT|O_WRONLY|O_TRUNC")

    # data -----------------------------------------------------------------------
    def _write_at(self, name, args, ret, fd: _Fd, data: bytes, offset: int | None) -> None:
        if offset is None:
            offset = self.sizes[fd.ino] if fd.append else fd.pos
            fd.pos = offset + len(data)
        self.sizes[fd.ino] = max(self.sizes[fd.ino], offset + len(data))
        ops = [Op(len(self.calls), "write", ino=fd.ino, offset=offset, data=data, durable=fd.sync)]
        self.add(name, args, ret, ops)

    def _file_fd(self, arg: str, written: int = 0) -> _Fd | None:
        """The fd's file in the directory; None for other fds (a write to a file outside is noted)."""
        fd = self.fds.get(int(arg))
        if fd is not None and fd.rel is None and fd.path is not None and not fd.is_dir:
            self.note_outside(fd.path, "written")
            if fd.path in self.outside:
                self.outside_bytes += written
        if fd is None or fd.rel is None or fd.is_dir:
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

    def _lseek(self, name, args, ret):
        if ret >= 0 and (fd := self.fds.get(int(args[0]))):
            fd.pos = ret

    def _ftruncate(self, name, args, ret):
        if fd := self._file_fd(args[0]):
            self.sizes[fd.ino] = int(args[1])
            self.add(name, args, ret, [Op(len(self.calls), "truncate", ino=fd.ino, size=int(args[1]))])

    def _truncate(self, name, args, ret):
        path = self.resolve("AT_FDCWD", args[0])
        rel = self.rel(path)
        if rel is None:
            self.note_outside(path, "written")
        else:
            ino = self.names[rel]
            self.sizes[ino] = int(args[1])
            self.add(name, args, ret, [Op(len(self.calls), "truncate", ino=ino, size=int(args[1]))])

    # durability -------------------------------------------------------------------
    def _fsync(self, name, args, ret):
        fd = self.fds.get(int(args[0]))
        if fd is None or fd.rel is None:
            return
        index = len(self.calls)
        op = Op(index, "dirsync", path=fd.rel) if fd.is_dir else Op(index, name, ino=fd.ino)
        self.add(name, args, ret, [op])

    _fdatasync = _fsync

    def _sync(self, name, args, ret):
        self.add(name, args, ret, [Op(len(self.calls), "sync")])

    _syncfs = _sync

    def _sync_file_range(self, name, args, ret):
        if self._file_fd(args[0]):
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
    def _rename_paths(self, name, args, ret, src: str, dst: str) -> None:
        rs, rd = self.rel(src), self.rel(dst)
        if rd is None:
            self.note_outside(dst, "written")
        if rs is None:
            self.note_outside(src, f"renamed to {dst}")
            if rd is not None:
                self.names.pop(rd, None)  # not modelled; the outside write refuses the save
            return
        if rd is None:
            self._unlink_rel(name, args, ret, rs)
            return
        if rs in self.dirs:
            raise RecordError(f"renaming the directory {rs!r} is not modelled")
        self.names[rd] = self.names.pop(rs)
        self.add(name, args, ret, [Op(len(self.calls), "rename", path=rs, dst=rd)])

    def _rename(self, name, args, ret):
        self._rename_paths(
            name, args, ret, self.resolve("AT_FDCWD", args[0]), self.resolve("AT_FDCWD", args[1])
        )

    def _renameat(self, name, args, ret):
        if len(args) > 4 and "RENAME_EXCHANGE" in args[4]:
            raise RecordError("renameat2 with RENAME_EXCHANGE is not modelled")
        self._rename_paths(name, args, ret, self.resolve(args[0], args[1]), self.resolve(args[2], args[3]))

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

    def _unlink(self, name, args, ret):
        self._unlink_path(name, args, ret, self.resolve("AT_FDCWD", args[0]))

    def _unlinkat(self, name, args, ret):
        self._unlink_path(name, args, ret, self.resolve(args[0], args[1]))

    def _mkdir_rel(self, name, args, ret, path: str) -> None:
        if (rel := self.rel(path)) is not None:
            self.dirs.add(rel)
            self.add(name, args, ret, [Op(len(self.calls), "mkdir", path=rel)])
        else:
            self.note_outside(path, "made")

    def _mkdir(self, name, args, ret):
        self._mkdir_rel(name, args, ret, self.resolve("AT_FDCWD", args[0]))

    def _mkdirat(self, name, args, ret):
        self._mkdir_rel(name, args, ret, self.resolve(args[0], args[1]))


def _is_marker(name: str, args: list[str], marker: str) -> bool:
    if name not in ("open", "openat") or not args:
        return False
    path = args[0] if name == "open" else args[1] if len(args) > 1 else ""
    m = _STR.fullmatch(path)
    return bool(m) and _hex(m.group(1)).endswith(b"/" + marker.encode())


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
    for _pid, name, args, ret, _rest in parse_lines(_after_marker(lines)):
        if not begun and _is_marker(name, args, BEGIN_MARKER):
            begun = tr.recording = True
            continue
        if begun and _is_marker(name, args, END_MARKER):
            returned = True
            break
        before = len(tr.calls)
        tr.handle(name, args, ret)
        if len(tr.calls) > before and name in _RECORDED:
            counts[name] = counts.get(name, 0) + 1
    inodes = {rel: i for i, rel in enumerate(sorted(initial))}
    rec = Recording(tr.calls, dict(initial), inodes, set(initial_dirs), returned, counts)
    rec.outside, rec.outside_bytes = tr.outside, tr.outside_bytes
    if not begun:
        if tr.outside:
            return rec  # the caller refuses the outside writes; the save never began
        raise RecordError("the trace has no begin marker: the traced program did not reach the save")
    return rec


def _after_marker(lines):
    """Skip, without parsing, the lines before the import (or else begin) marker (interpreter start-up)."""
    needles = ["".join(f"\\x{b:02x}" for b in m.encode()) for m in (IMPORT_MARKER, BEGIN_MARKER)]
    found = False
    for line in lines:
        if not found and not any(n in line for n in needles):
            continue
        found = True
        yield line
