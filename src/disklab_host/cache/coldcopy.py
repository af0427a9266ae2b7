"""Copy a file without leaving it in the page cache (macOS): the coldcopy_nocache eviction method.

Usage: python coldcopy.py SRC DST

Both files are opened with fcntl F_NOCACHE, so neither the reads nor the
writes keep pages in the unified buffer cache, and the copy is finished with
F_FULLFSYNC so it is on flash, not only in the drive's cache (the lesson,
Build It, coldcopy.py; macOS fcntl(2)). Writing a copy with plain
shutil.copy would leave it warm (the lesson, Break It 4).
SRC is only read: DST must not be SRC itself, nor a symlink (it is refused
rather than written through), so a user's file is never truncated.
macOS only: on other systems :func:`coldcopy` raises OSError. Run here only
against a test double on Linux, not yet on real macOS hardware.
"""

from __future__ import annotations

import os
import sys

from ..common.units import MIB

CHUNK_BYTES = 8 * MIB


def coldcopy(src: str | os.PathLike, dst: str | os.PathLike, *, fcntl_mod=None) -> int:
    """Copy ``src`` to ``dst`` (created or truncated, mode 0644) past the cache; return bytes copied.

    ``fcntl_mod`` is the fcntl module; tests pass a stand-in because F_NOCACHE
    and F_FULLFSYNC exist only on macOS. Raises OSError when the platform has
    no F_NOCACHE, when ``dst`` is a symlink (ELOOP), or when a read, write or
    F_FULLFSYNC fails; ValueError when ``dst`` is ``src`` itself (through any
    link), which O_TRUNC would empty.
    """
    if fcntl_mod is None:
        import fcntl as fcntl_mod
    if not hasattr(fcntl_mod, "F_NOCACHE") or not hasattr(fcntl_mod, "F_FULLFSYNC"):
        raise OSError("coldcopy needs fcntl F_NOCACHE and F_FULLFSYNC (macOS only)")
    if os.path.exists(dst) and os.path.samefile(src, dst):
        raise ValueError(f"coldcopy: {dst} is {src} itself; copying would truncate the source")
    total = 0
    fi = os.open(src, os.O_RDONLY)
    try:
        fcntl_mod.fcntl(fi, fcntl_mod.F_NOCACHE, 1)
        fo = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl_mod.fcntl(fo, fcntl_mod.F_NOCACHE, 1)
            while chunk := os.read(fi, CHUNK_BYTES):
                view = memoryview(chunk)
                while view:  # os.write may write less than asked
                    n = os.write(fo, view)
                    view = view[n:]
                    total += n
            fcntl_mod.fcntl(fo, fcntl_mod.F_FULLFSYNC)
        finally:
            os.close(fo)
    finally:
        os.close(fi)
    return total


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: coldcopy.py SRC DST")
    print(coldcopy(sys.argv[1], sys.argv[2]))
