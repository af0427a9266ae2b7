"""A case-insensitive, case-preserving filesystem over a directory, in FUSE (mfusepy): macOS's default.

``python tests/casefold_fs.py BACKING MOUNTPOINT`` serves BACKING at MOUNTPOINT in the foreground until
it is unmounted (``fusermount3 -u MOUNTPOINT``). As on APFS and HFS+ (case-insensitive, their default):
a name is found whatever its case (``web1`` opens ``Web1``), a new name keeps the case it was created
with, creating ``web1`` where ``Web1`` exists fails with EEXIST (mkdir, O_EXCL, link(2)), and a rename
to another case of the same name renames it. This kernel has no casefold ext4, so the tests that need a
case-insensitive filesystem mount this one (tests/test_casefold.py).
"""

from __future__ import annotations

import errno
import os
import sys

import mfusepy as fuse


class CaseFold(fuse.Operations):
    """Every path resolved one component at a time, each matched without regard to case."""

    use_ns = True

    def __init__(self, root: str):
        self.root = os.path.realpath(root)

    # --- names -----------------------------------------------------------------------------------

    def _find(self, real_dir: str, name: str) -> str | None:
        """The entry of ``real_dir`` that is ``name`` without regard to case, or None."""
        if os.path.lexists(os.path.join(real_dir, name)):
            return name
        folded = name.casefold()
        try:
            entries = os.listdir(real_dir)
        except OSError:
            return None
        return next((e for e in sorted(entries) if e.casefold() == folded), None)

    def _real(self, path: str) -> str:
        """The backing path of ``path``, each existing component in the case it was created with."""
        real = self.root
        parts = [p for p in path.split("/") if p]
        for i, part in enumerate(parts):
            found = self._find(real, part)
            if found is None:  # the rest does not exist: the name as given (for a create)
                return os.path.join(real, *parts[i:])
            real = os.path.join(real, found)
        return real

    def _new(self, path: str) -> str:
        """The backing path for a new entry ``path``: EEXIST where another case of it exists."""
        parent, name = os.path.split(path.rstrip("/"))
        real_parent = self._real(parent)
        if self._find(real_parent, name) is not None:
            raise fuse.FuseOSError(errno.EEXIST)
        return os.path.join(real_parent, name)

    @staticmethod
    def _call(fn, *args):
        try:
            return fn(*args)
        except OSError as exc:
            raise fuse.FuseOSError(exc.errno or errno.EIO) from None

    # --- operations --------------------------------------------------------------------------------

    def getattr(self, path, fh=None):
        st = self._call(os.lstat, self._real(path))
        keys = ("st_ino", "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns")
        out = {k.replace("_ns", ""): getattr(st, k) for k in keys}
        out["st_ctime"] = st.st_ctime_ns
        return out

    def access(self, path, amode):
        if not os.access(self._real(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def readdir(self, path, fh):
        real = self._real(path)
        out = []
        for name in (".", "..", *self._call(os.listdir, real)):
            st = self._call(os.lstat, os.path.join(real, name))
            out.append((name, {"st_ino": st.st_ino, "st_mode": st.st_mode}, 0))  # an entry of ino 0 is unseen
        return out

    def mkdir(self, path, mode):
        return self._call(os.mkdir, self._new(path), mode)

    def rmdir(self, path):
        return self._call(os.rmdir, self._real(path))

    def unlink(self, path):
        return self._call(os.unlink, self._real(path))

    def chmod(self, path, mode):
        return self._call(os.chmod, self._real(path), mode)

    def chown(self, path, uid, gid):
        return self._call(os.chown, self._real(path), uid, gid)

    def utimens(self, path, times=None):
        return self._call(
            lambda: os.utime(self._real(path), ns=times) if times else os.utime(self._real(path))
        )

    def truncate(self, path, length, fh=None):
        return self._call(os.truncate, self._real(path), length)

    def link(self, target, source):
        return self._call(os.link, self._real(source), self._new(target))

    def symlink(self, target, source):
        return self._call(os.symlink, source, self._new(target))

    def readlink(self, path):
        return self._call(os.readlink, self._real(path))

    def rename(self, old, new):
        real_old = self._real(old)
        parent, name = os.path.split(new.rstrip("/"))
        real_parent = self._real(parent)
        found = self._find(real_parent, name)
        if found is not None and os.path.join(real_parent, found) != real_old:
            real_new = os.path.join(real_parent, found)  # replaces the entry there, as rename(2) does
            self._call(os.rename, real_old, real_new)
            if found != name:  # the name keeps the case the rename gave it
                self._call(os.rename, real_new, os.path.join(real_parent, name))
            return 0
        return self._call(os.rename, real_old, os.path.join(real_parent, name))  # new, or a case change

    def create(self, path, mode, flags):
        return self._call(os.open, self._new(path), flags | os.O_CREAT | os.O_EXCL, mode)

    def open(self, path, flags):
        return self._call(os.open, self._real(path), flags & ~(os.O_CREAT | os.O_EXCL))

    def read(self, path, size, offset, fh):
        return self._call(os.pread, fh, size, offset)

    def write(self, path, data, offset, fh):
        return self._call(os.pwrite, fh, data, offset)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        return self._call(os.fsync, fh) or 0

    def fsyncdir(self, path, datasync, fh):
        return 0

    def release(self, path, fh):
        return self._call(os.close, fh) or 0

    def statfs(self, path):
        st = os.statvfs(self._real(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag")
        return {k: getattr(st, k) for k in (*keys, "f_frsize", "f_namemax")}


def main(argv: list[str]) -> int:
    backing, mountpoint = argv
    fuse.FUSE(CaseFold(backing), mountpoint, foreground=True, nothreads=True, fsname="casefold", use_ino=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
