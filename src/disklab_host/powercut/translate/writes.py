"""Writes and size changes: write, pwrite64, writev, pwritev, vmsplice, ftruncate, truncate, fallocate,
mmap."""

from __future__ import annotations

from ..states import Op
from ..trace import RecordError, iov_data, string_arg
from .state import Fd, State


class Writes(State):
    """Bytes written at an offset, into the directory (an op each) or outside it (content only)."""

    def _write_at(self, name, args, ret, fd: Fd, data: bytes | None, offset: int | None, n=None, why=""):
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

    def _file_fd(self, arg: str, written: int = 0) -> Fd | None:
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
            self._write_at(name, args, ret, fd, string_arg(args[1])[:ret], None)

    def _pwrite64(self, name, args, ret):
        if fd := self._file_fd(args[0], ret):
            self._write_at(name, args, ret, fd, string_arg(args[1])[:ret], int(args[3]))

    def _writev(self, name, args, ret):
        if fd := self._file_fd(args[0], ret):
            self._write_at(name, args, ret, fd, iov_data(args[1], ret), None)

    def _pwritev(self, name, args, ret):
        if fd := self._file_fd(args[0], ret):
            self._write_at(name, args, ret, fd, iov_data(args[1], ret), int(args[3]))

    _pwritev2 = _pwritev

    def _vmsplice(self, name, args, ret):
        if (fd := self.fds.get(int(args[0]))) is not None and fd.pipe is not None:
            try:
                data = iov_data(args[1], ret)
            except RecordError:
                data = None
            self._write_at(name, args, ret, fd, data, None, n=ret)

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
