"""The fd table: open, openat, creat, pipe, pipe2, dup, fcntl, lseek, close."""

from __future__ import annotations

import re

from ..states import Op
from ..trace import RecordError
from .state import LAZY, Fd, Pipe, State, counts_outside


class Opens(State):
    """Opens make names and fds; the rest of the table follows them (an F_FULLFSYNC is an fsync)."""

    def _open_path(self, name, args, ret, path: str, flags: str) -> None:
        rel = self.rel(path)
        is_dir = "O_DIRECTORY" in flags or (rel is not None and rel in self.dirs)
        sync = "O_SYNC" in flags or "O_DSYNC" in flags
        fd = Fd(rel, is_dir, path, append="O_APPEND" in flags, sync=sync)
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

    def _open_outside(self, fd: Fd, path: str, flags: str) -> None:
        """Follow a file outside the directory: its content feeds copies into it."""
        if "O_CREAT" in flags or "O_TRUNC" in flags:
            self.note_outside(path, "written")
        if fd.is_dir or not counts_outside(path):
            return
        if path not in self.outside_names:
            if "O_CREAT" in flags:
                self.created_outside.add(path)
            self.outside_names[path] = self.next_ino
            # O_CREAT with O_EXCL made it (it was not there); O_TRUNC emptied it
            new = "O_TRUNC" in flags or ("O_CREAT" in flags and "O_EXCL" in flags)
            self.content[self.next_ino] = bytearray() if new else LAZY
            self.sizes[self.next_ino] = 0 if new else -1
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
            pipe = Pipe()
            for fdnum in m.groups():
                self.fds[int(fdnum)] = Fd(None, False, None, pipe=pipe)

    _pipe = _pipe2

    def _lseek(self, name, args, ret):
        if ret >= 0 and (fd := self.fds.get(int(args[0]))):
            fd.pos = ret

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
