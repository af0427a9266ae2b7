"""A reports directory that cannot be written: full, over its quota, or on a read-only filesystem.

Every write under the reports directory is atomic (disklab.fsio): one that fails for room leaves the old
file or none, never half of one. What such a failure must tell the user is one line, naming the directory,
its free space, and what was kept: :func:`guard` turns the OSError into :class:`NoRoom` with that line, and
the command prints it (exit status 1). :func:`said` finds the same errors in words another process wrote
(the fetch task's message).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from disklab_host.common.units import ibytes

# The errors of a directory that cannot take a write, and their words (os.strerror, as an OSError says them).
ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
_WORDS = {code: os.strerror(code) for code in ERRNOS}


class NoRoom(Exception):
    """The reports directory cannot be written; its message is the one line the user sees."""


def describe(reports: Path, code: int) -> str:
    """``reports`` and why it takes no write: ``the reports directory R is full (0 B free of 8.00 MiB)``."""
    where = Path(reports)
    while not where.exists() and where != where.parent:  # the free space of the filesystem it would be on
        where = where.parent
    try:
        usage = shutil.disk_usage(where)
        space = f"{ibytes(usage.free)} free of {ibytes(usage.total)}"
    except OSError as exc:
        space = f"its free space unreadable: {exc.strerror or exc}"
    if code == errno.EROFS:
        return f"the reports directory {reports} is on a read-only filesystem ({space})"
    if code == errno.EDQUOT:
        return f"the reports directory {reports} is over your disk quota ({space})"
    return f"the reports directory {reports} is full ({space})"


@contextlib.contextmanager
def guard(reports: Path, kept: str) -> Iterator[None]:
    """Raise :class:`NoRoom` (``describe(reports): kept``) for an OSError of :data:`ERRNOS` in the block;
    ``kept`` says what was kept and how to go on."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in ERRNOS:
            raise
        raise NoRoom(f"{describe(reports, exc.errno)}: {kept}") from None


def cannot_write(path: Path) -> int | None:
    """EROFS when ``path``'s filesystem is mounted read-only, ENOSPC when it has no free block left (for
    this user: root may use the reserved ones), else None (statvfs(3); also when ``path`` cannot be asked)."""
    try:
        vfs = os.statvfs(path)
    except OSError:
        return None
    if vfs.f_flag & os.ST_RDONLY:
        return errno.EROFS
    free = vfs.f_bfree if os.geteuid() == 0 else vfs.f_bavail
    return errno.ENOSPC if free == 0 else None


def said(message: str | None) -> int | None:
    """The errno of :data:`ERRNOS` whose words ``message`` holds (``[Errno 28] No space left on device``),
    or None."""
    return next((code for code, words in _WORDS.items() if words in (message or "")), None)
