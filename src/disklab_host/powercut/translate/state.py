"""What the translator knows after each call: fds, names, file contents, effects outside the directory.

Its content of every file it knows, in the directory and outside it (a temp file in /dev/shm), is what the
page cache holds after each call; a file outside that was there before the save is read from the real file
when a copy needs it (``LAZY``), as long as the recording has not changed it. :meth:`State.handle` sends
each call to the ``_NAME`` method of its family (opens, writes, copies, syncs, names).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..states import Op
from ..trace import HEX_BYTES_PER_BYTE, QUOTED, RecordError, hex_bytes, string_arg

VOLATILE_FS = frozenset({"tmpfs", "ramfs"})  # nothing on them survives a power cut
LAZY = object()  # content of a file that was there before the save: read from the real file when needed


@dataclass(frozen=True)
class Call:
    """One recorded call: its index (0-based crash point), its text, and its effects on the directory."""

    index: int
    name: str
    text: str
    ops: tuple[Op, ...]


class Pipe:
    """The bytes in a pipe, as far as the recording knows (None: not known, e.g. read with read(2))."""

    def __init__(self):
        self.data: bytearray | None = bytearray()


@dataclass
class Fd:
    rel: str | None  # path relative to the directory, or None outside it
    is_dir: bool
    path: str | None = None  # the absolute path it was opened with
    ino: int | None = None  # inside or outside the directory (outside files produce no ops)
    pos: int = 0
    append: bool = False
    sync: bool = False
    pipe: Pipe | None = None


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


def counts_outside(path: str) -> bool:
    """Paths outside the directory that count as the save's effects: not /proc, nor /dev except /dev/shm."""
    return not (path.startswith("/proc/") or (path.startswith("/dev/") and not path.startswith("/dev/shm/")))


class State:
    """The state every family of calls reads and changes, and the call list they add to."""

    def __init__(self, root: Path, cwd: Path, initial: dict[str, bytes], dirs: set[str]):
        self.root, self.cwd = str(root.resolve()), str(cwd.resolve())
        self.names = {rel: i for i, rel in enumerate(sorted(initial))}
        self.sizes = {i: len(initial[rel]) for rel, i in self.names.items()}
        self.content: dict[int, object] = {i: bytearray(initial[rel]) for rel, i in self.names.items()}
        self.dirs = set(dirs)
        self.next_ino = len(self.names)
        self.fds: dict[int, Fd] = {}  # the file table of the process whose call is being handled
        self.main_table = self.fds  # the first process's, and any whose start the trace does not show
        self.tables: dict[int, dict[int, Fd]] = {}  # pid -> its file table (a thread shares its parent's)
        self.family: dict[int, tuple[int, bool]] = {}  # pid -> (its parent, whether it shares the table)
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
        if path is None or not counts_outside(path):
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
        path = string_arg(raw).decode("utf-8", "surrogateescape")
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
            data = hex_bytes(m.group(1))
            s = data.decode("utf-8", "replace")
            if len(data) <= 120 and s.isprintable():
                r = self.rel(s) if os.path.isabs(s) else None
                return repr(r if r is not None else s)
            return f"<{len(data)} bytes>"

        return f"{name}({QUOTED.sub(show, ', '.join(args))}) = {ret}"

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

    def handle(self, name: str, args: list[str], ret: int, pid: int | None = None) -> None:
        """Translate one finished call of process ``pid`` (None: the one process of the recording)."""
        self.fds = self.main_table if pid is None else self.table(pid)
        if ret < 0 and name != "lseek":
            return  # a failed call changes nothing
        if name in ("clone", "clone3", "fork", "vfork") and ret not in self.tables:
            self.table(ret)  # a child that has not run yet: its table as its parent's is now
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

    def table(self, pid: int) -> dict[int, Fd]:
        """``pid``'s file table, made when its parent's clone, fork or vfork returns, or at the child's first
        call where that comes first, from :attr:`family` (those calls, read from the whole trace before any
        call is placed): a thread shares its parent's (CLONE_FILES); a process gets a copy, whose fds name
        the same open files, offsets shared (fork(2)). A pid whose start the trace does not show has the
        first process's."""
        if pid not in self.tables:
            parent, shares = self.family.get(pid, (None, True))
            theirs = self.main_table if parent is None or parent == pid else self.table(parent)
            self.tables[pid] = theirs if shares else dict(theirs)
        return self.tables[pid]

    # contents: what the page cache holds
    def _set_size(self, ino: int, size: int) -> None:
        buf = self.content.get(ino)
        if isinstance(buf, bytearray):
            del buf[size:]
            buf.extend(b"\0" * (size - len(buf)))
        elif buf is LAZY:  # cut to nothing, it is known; else changed before its old bytes were seen
            self.content[ino] = bytearray(size) if size == 0 else None
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

    def source(self, fd: Fd | None, offset: int, n: int) -> bytes | str:
        """The ``n`` bytes a copy read from ``fd`` at ``offset``, or why the recording does not know them."""
        if fd is None:
            return "its source fd is not one the recording opened (a socket, or opened before the save began)"
        if fd.ino is None:
            return f"its source {fd.path or 'fd'} is not a regular file the recording follows"
        buf = self.content.get(fd.ino)
        if buf is LAZY:
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
