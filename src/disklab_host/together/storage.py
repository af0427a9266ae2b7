"""A together run's shared filesystem, checked before each command's work and named in its failure line.

A client of a together run reads and writes one shared directory. When its file server stops (a crash, a
reboot, a network cut), each client's next call there fails with an errno of a lost connection, and the
line that says so ("Transport endpoint is not connected") names neither the server nor the mount; or the
mount is gone (a FUSE daemon such as sshfs exits when its connection drops), and the path is now a local
directory, where a write would succeed on the wrong disk. So each command is given the mount source the
first client found when it wrote the files (``--shared SOURCE``): :func:`check` refuses to work in a
directory no longer on it, and :func:`named` adds the server and the mount to a failure line that says a
connection was lost (common.mounts: a dead mount is still listed). Where mounts cannot be read (macOS: no
/proc), neither can say more, and both leave the line as it is. Standard library only.
"""

from __future__ import annotations

import errno
import os

from ..common.mounts import mount_of

# The errnos of a filesystem whose server or connection is gone (ENOTCONN: a FUSE daemon such as sshfs
# lost its server; ESTALE: an NFS handle the server no longer knows; the rest: the network or the server).
LOST = tuple(
    os.strerror(e)
    for e in (errno.ENOTCONN, errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.EHOSTDOWN, errno.EHOSTUNREACH,
              errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED)
)  # fmt: skip


def add_argument(ap) -> None:
    """``--shared SOURCE``: the mount source the directory must be on (the first client's, when it wrote)."""
    ap.add_argument("--shared", help="the mount source the directory must be on, e.g. server:/export")


def check(directory: str | os.PathLike, shared: str | None) -> None:
    """ValueError naming both when ``directory`` is no longer on the mount source ``shared``."""
    if not shared:
        return
    mount = mount_of(directory)
    if mount["point"] is not None and mount["source"] != shared:
        raise ValueError(
            f"{directory} is no longer on the shared filesystem {shared}: it is on {mount['fstype']} from "
            f"{mount['source']}, mounted at {mount['point']}; is the file server up?"
        )


def named(line: str, directory: str | os.PathLike) -> str:
    """``line``, with the shared filesystem of ``directory`` named when the line says its server or
    connection is gone; ``line`` as it is otherwise."""
    if not any(word in line for word in LOST):
        return line
    mount = mount_of(directory)
    if mount["point"] is None:
        return f"{line} (the storage of {directory} stopped answering: is its file server up?)"
    return (
        f"{line} (the shared filesystem {mount['fstype']} from {mount['source']}, mounted at "
        f"{mount['point']}, stopped answering: is its file server up?)"
    )
