"""Atomic writes with a directory fsync: the one implementation of both sides.

Temp file in the same directory, flush, fsync, rename, then fsync the
directory (the lesson's atomic save; rename(2), fsync(2)): a crash leaves
either the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory, so that a create or rename inside it is durable (fsync(2))."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file under ``root``, then ``root`` itself: what exists there is then durable."""
    root = Path(root)
    for p in sorted(root.rglob("*")):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(root)


def atomic_write_bytes(
    path: str | os.PathLike, data: bytes, *, overwrite: bool = True, durable: bool = True
) -> Path:
    """Write ``data`` to ``path`` so that no crash leaves a half-written file; returns ``path``.

    Parent directories are created. On any error the temp file is removed and
    ``path`` keeps its previous content. With ``overwrite=False`` an existing
    ``path`` is never replaced: the new file is linked into place with
    link(2), which fails if the name exists, and FileExistsError is raised.
    ``durable=False`` leaves out both fsyncs, for a cache that only saves work (a plot's digest, the
    stored files found valid): after a power cut it holds the old bytes, the new ones or none, never
    another file's, and each costs at most that work again. Write it after what it vouches for.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file a normal file's mode
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # atomic, and refuses an existing name
            os.unlink(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)
    return path


def atomic_write_text(
    path: str | os.PathLike, text: str, *, overwrite: bool = True, durable: bool = True
) -> Path:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"), overwrite=overwrite, durable=durable)


def atomic_write_json(path: str | os.PathLike, obj: object, *, overwrite: bool = True) -> Path:
    """:func:`atomic_write_bytes` for indented, key-sorted JSON."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", overwrite=overwrite)
