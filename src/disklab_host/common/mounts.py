"""The mount that holds a path, from /proc/self/mountinfo: its mount point, source and filesystem type.

One place for the I/O record (common.iorecord: which device a workbench's reads reach) and a together
run's failure lines (together.storage: which shared filesystem stopped answering). A dead network mount
(its server gone) is still listed there, so this answers when the path itself cannot be reached. Linux
only: elsewhere, and when the file cannot be read, every field is None. Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path


def mount_of(path: str | os.PathLike, root: Path = Path("/"), *, resolve: bool = True) -> dict:
    """{"point", "source", "fstype"} of the mount holding ``path`` (the longest mount point that contains
    it; proc(5): the type and the source are the first two fields after the `` - `` separator).
    ``resolve=False`` takes the path as written (absolute, not through its symlinks): a path on a network
    mount whose server is gone is then never touched, where resolving it could wait on the server."""
    found = {"point": None, "source": None, "fstype": None}
    try:
        text = (Path(root) / "proc/self/mountinfo").read_text()
    except OSError:
        return found
    real = os.path.realpath(path) if resolve else os.path.abspath(path)
    best = ""
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 2:
            continue
        point = fields[4].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best = point
            found = {"point": point, "source": rest[1], "fstype": rest[0]}
    return found
