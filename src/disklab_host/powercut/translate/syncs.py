"""Durability: fsync, fdatasync, sync, syncfs, sync_file_range."""

from __future__ import annotations

from ..states import Op
from .state import State


class Syncs(State):
    """A sync is an op on the directory; outside it, it marks the files it covers clean."""

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
