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
directory. Calls outside the directory are ignored, except sync and syncfs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .states import Op

# Every call that changes file state, plus those that move offsets or copy fds.
TRACED_CALLS = (
    "open,openat,creat,write,writev,pwrite64,pwritev,pwritev2,ftruncate,truncate,"
    "fsync,fdatasync,sync,syncfs,sync_file_range,rename,renameat,renameat2,"
    "unlink,unlinkat,mkdir,mkdirat,close,fcntl,lseek,dup,dup2,dup3"
)
BEGIN_MARKER = ".disklab-powercut-begin"
END_MARKER = ".disklab-powercut-end"

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


def run_traced(
    argv: list[str], *, cwd: Path, trace_file: Path, string_limit_bytes: int, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``argv`` under strace in ``cwd``; returns the finished process (stdout/stderr as text).

    Raises RecordError when strace is not installed.
    """
    strace = find_strace()
    if strace is None:
        raise RecordError("strace is not installed")
    cmd = strace_argv(strace, trace_file, string_limit_bytes, argv)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


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
        raise RecordError("strace truncated a string: raise the -s limit")
    return _hex(m.group(1))


def _iov_data(arg: str, returned: int) -> bytes:
    parts = []
    for m in _IOV.finditer(arg):
        if m.group(2):
            raise RecordError("strace truncated an iovec: raise the -s limit")
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
            if fd is None or fd.rel is None:
                raise RecordError(f"relative path {path!r} against an fd outside the directory")
            base = os.path.join(self.root, fd.rel)
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
        fd = _Fd(rel, is_dir, append="O_APPEND" in flags, sync="O_SYNC" in flags or "O_DSYNC" in flags)
        self.fds[ret] = fd
        if rel is None:
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

    def _file_fd(self, arg: str) -> _Fd | None:
        fd = self.fds.get(int(arg))
        if fd is None or fd.rel is None or fd.is_dir:
            return None
        return fd

    def _write(self, name, args, ret):
        if fd := self._file_fd(args[0]):
            self._write_at(name, args, ret, fd, _string(args[1])[:ret], None)

    def _pwrite64(self, name, args, ret):
        if fd := self._file_fd(args[0]):
            self._write_at(name, args, ret, fd, _string(args[1])[:ret], int(args[3]))

    def _writev(self, name, args, ret):
        if fd := self._file_fd(args[0]):
            self._write_at(name, args, ret, fd, _iov_data(args[1], ret), None)

    def _pwritev(self, name, args, ret):
        if fd := self._file_fd(args[0]):
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
        rel = self.rel(self.resolve("AT_FDCWD", args[0]))
        if rel is not None:
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
        if rs is None and rd is None:
            return
        if rs is None:
            raise RecordError(f"rename from outside the directory into {rd!r} is not modelled")
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

    def _unlink(self, name, args, ret):
        if (rel := self.rel(self.resolve("AT_FDCWD", args[0]))) is not None:
            self._unlink_rel(name, args, ret, rel)

    def _unlinkat(self, name, args, ret):
        if (rel := self.rel(self.resolve(args[0], args[1]))) is not None:
            self._unlink_rel(name, args, ret, rel)

    def _mkdir_rel(self, name, args, ret, path: str) -> None:
        if (rel := self.rel(path)) is not None:
            self.dirs.add(rel)
            self.add(name, args, ret, [Op(len(self.calls), "mkdir", path=rel)])

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
    Raises RecordError when the begin marker is missing, a string was truncated,
    or the save did something this recorder does not model.
    """
    tr = _Translator(root, cwd, initial, initial_dirs)
    begun = returned = False
    counts: dict[str, int] = {}
    for _pid, name, args, ret, _rest in parse_lines(_after_begin(lines)):
        if not begun:
            begun = _is_marker(name, args, BEGIN_MARKER)
            continue
        if _is_marker(name, args, END_MARKER):
            returned = True
            break
        before = len(tr.calls)
        tr.handle(name, args, ret)
        if len(tr.calls) > before and name in _RECORDED:
            counts[name] = counts.get(name, 0) + 1
    if not begun:
        raise RecordError("the trace has no begin marker: the traced program did not reach the save")
    inodes = {rel: i for i, rel in enumerate(sorted(initial))}
    return Recording(tr.calls, dict(initial), inodes, set(initial_dirs), returned, counts)


def _after_begin(lines):
    """Skip, without parsing, the lines before the begin marker (interpreter start-up)."""
    needle = "".join(f"\\x{b:02x}" for b in BEGIN_MARKER.encode())
    found = False
    for line in lines:
        if not found and needle not in line:
            continue
        found = True
        yield line
