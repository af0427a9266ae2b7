"""The layers of a write, counted: where a file's bytes sit after write(), flush() and fsync().

The lesson explains three layers: Python's buffer inside the process, the page
cache (dirty pages, then pages under writeback), and the device. cachestat(2)
counts a file's cached, dirty and writeback pages, so this module shows them
instead of telling them: :func:`write_flush_fsync` writes ``data`` with
``f.write`` on ``open(path, "wb")`` (Python's default buffering), and counts
the file's pages after ``write()``, after ``flush()`` and after ``os.fsync``,
with ``os.fstat`` st_size beside each count (the bytes that have left the
process). Where cachestat is missing every count is ``{"unavailable": reason}``
and the rows still give st_size. Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..common.facts import unavailable
from . import pagecache

POINTS = ("after_write", "after_flush", "after_fsync")


def count(path: str | os.PathLike) -> dict:
    """The file's pages now: ``{"cached_pages", "dirty_pages", "writeback_pages", "dirty_bytes",
    "writeback_bytes", "method": "cachestat"}``, or ``{"unavailable": reason}`` without cachestat."""
    try:
        cs = pagecache.cachestat(path)
    except pagecache.CachestatUnavailable as exc:
        return unavailable(exc.strerror or str(exc))
    return {
        "method": "cachestat",
        "cached_pages": cs["pages_cached"],
        "dirty_pages": cs["pages_dirty"],
        "writeback_pages": cs["pages_writeback"],
        "dirty_bytes": cs["dirty_bytes"],
        "writeback_bytes": cs["writeback_bytes"],
    }


def _row(point: str, call: str, path: Path, fd: int) -> dict:
    return {"point": point, "call": call, "st_size_bytes": os.fstat(fd).st_size, "pages": count(path)}


def write_flush_fsync(path: str | os.PathLike, data: bytes) -> dict:
    """Write ``data`` to a fresh ``path`` through Python's buffer; count its pages at each point.

    Returns ``{"size_bytes", "page_size_bytes", "rows": [{"point", "call",
    "st_size_bytes", "pages"}], "cachestat": "ok" | reason}``, one row per
    :data:`POINTS`. Deletes ``path`` afterwards.
    """
    path = Path(path)
    rows = []
    try:
        with open(path, "wb") as f:
            f.write(data)
            rows.append(_row("after_write", "f.write(data)", path, f.fileno()))
            f.flush()
            rows.append(_row("after_flush", "f.flush()", path, f.fileno()))
            os.fsync(f.fileno())
            rows.append(_row("after_fsync", "os.fsync(f.fileno())", path, f.fileno()))
    finally:
        path.unlink(missing_ok=True)
    first = rows[0]["pages"]
    return {
        "size_bytes": len(data),
        "page_size_bytes": pagecache.page_size(),
        "rows": rows,
        "cachestat": first.get("unavailable", "ok"),
    }
