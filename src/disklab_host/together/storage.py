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
import sys

from ..common import fstypes
from ..common.mounts import mount_of
from ..common.result import emit as emit_result

# The errnos of a filesystem whose server or connection is gone (ENOTCONN: a FUSE daemon such as sshfs
# lost its server; ESTALE: an NFS handle the server no longer knows; the rest: the network or the server).
LOST = tuple(
    os.strerror(e)
    for e in (errno.ENOTCONN, errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.EHOSTDOWN, errno.EHOSTUNREACH,
              errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED)
)  # fmt: skip


def run(prog: str, work, directory: str | os.PathLike, shared: str | None = None) -> int:
    """A together command's run: ``work()`` once ``directory`` is found still on the mount source ``shared``
    (:func:`check`), and its result line printed. A refusal (ValueError, TimeoutError, KeyError) is one line
    and exit status 2; an I/O error one line and 1; each line naming the shared filesystem of ``directory``
    when its server stopped answering (:func:`named`)."""
    try:
        check(directory, shared)
        result = work()
    except (ValueError, TimeoutError, KeyError) as exc:
        print(named(f"{prog}: {exc}", directory, shared), file=sys.stderr)
        return 2
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(named(f"{prog}: {where}{exc.strerror or exc}", directory, shared), file=sys.stderr)
        return 1
    emit_result(result)
    return 0


def add_argument(ap) -> None:
    """``--shared SOURCE``: the mount source the directory must be on (the first client's, when it wrote)."""
    ap.add_argument("--shared", help="the mount source the directory must be on, e.g. server:/export")


def check(directory: str | os.PathLike, shared: str | None) -> None:
    """ValueError naming both when ``directory`` is no longer on the mount source ``shared``."""
    if not shared:
        return
    mount = mount_of(directory, resolve=False)
    if mount["point"] is not None and mount["source"] != shared:
        raise ValueError(
            f"{directory} is no longer on the shared filesystem {shared}: it is on {mount['fstype']} from "
            f"{mount['source']}, mounted at {mount['point']}; is the file server up?"
        )


def server_dir(directory: str | os.PathLike, mount: dict) -> str | None:
    """Where the file server holds ``directory``, from its mount (``mount_of``): the path in the source
    (``server:/export``) and the path inside the mount; None when the source names no server path (a local
    disk, or a source without ``:/``). A storage server whose exports differ (NFSv4's pseudo-root) is
    given the directory by hand (the together role's together_server_dir)."""
    source, point = mount.get("source") or "", mount.get("point")
    if point is None or ":/" not in source:
        return None
    export = source.split(":", 1)[1].rstrip("/")
    inside = os.path.relpath(os.path.realpath(directory), point)
    return export if inside == "." else f"{export}/{inside}"


def named(line: str, directory: str | os.PathLike, shared: str | None = None) -> str:
    """``line``, with the shared filesystem of ``directory`` named when the line says its server or
    connection is gone and the directory is on ``shared`` (or, not given, on a network or FUSE mount);
    ``line`` as it is otherwise: an EIO from a local disk is no file server's."""
    if not any(word in line for word in LOST):
        return line
    mount = mount_of(directory, resolve=False)  # a hard NFS mount's server gone: resolving would hang
    fstype = mount["fstype"] or ""
    ours = mount["source"] == shared if shared else fstypes.is_network(fstype) or fstypes.is_fuse(fstype)
    if mount["point"] is None or not ours:
        return line
    return (
        f"{line} (the shared filesystem {mount['fstype']} from {mount['source']}, mounted at "
        f"{mount['point']}, stopped answering: is its file server up?)"
    )
