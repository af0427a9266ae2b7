"""Names: rename, renameat, renameat2, unlink, unlinkat, rmdir, mkdir, mkdirat, link, linkat, symlink,
symlinkat."""

from __future__ import annotations

from ..states import Op
from ..trace import string_arg
from .state import State, counts_outside


class Names(State):
    """Names made, moved and removed, in the directory (ops) and outside it (the save's temp files)."""

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
            if ino is not None and counts_outside(dst):
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
        target = string_arg(args[0]).decode("utf-8", "surrogateescape")
        self._link_paths(name, args, ret, target, self.resolve("AT_FDCWD", args[1]))

    def _symlinkat(self, name, args, ret):
        target = string_arg(args[0]).decode("utf-8", "surrogateescape")
        self._link_paths(name, args, ret, target, self.resolve(args[1], args[2]))
