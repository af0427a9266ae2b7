"""Copies: sendfile, copy_file_range, splice, tee and reflink clones (ioctl FICLONE, FICLONERANGE).

Each becomes a write of the bytes its source held at the moment of the call.
"""

from __future__ import annotations

import re

from ..states import Op
from ..trace import offset_arg
from .state import LAZY, Fd
from .writes import Writes


class Copies(Writes):
    """A copy is a write whose bytes come from the source's content (or a pipe's) at that moment."""

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
            offset = offset_arg(src_off)
            start = (src.pos if src is not None else 0) if offset is None else offset
            got = self.source(src, start, ret)
            data, why = (got, "") if isinstance(got, bytes) else (None, f"{name} into it: {got}")
            if offset is None and src is not None:
                src.pos += ret
        if dst is None:
            return
        out_off = None if dst_off is None else offset_arg(dst_off)
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

    def _known_size(self, fd: Fd | None) -> int | None:
        if fd is None or fd.ino is None:
            return None
        if self.content.get(fd.ino) is LAZY:
            self.source(fd, 0, 0)  # reads it
        buf = self.content.get(fd.ino)
        return len(buf) if isinstance(buf, bytearray) else None
