"""Filesystem types by kind, as findmnt, /proc/self/mountinfo and macOS's mount name them.

One place for the audit (audit.collect: the workbench's flags and why it has no block device) and the I/O
record (common.iorecord: why no device counter sees a read). Standard library only.
"""

from __future__ import annotations

# Read over a network. NFS is listed though the kernel of disklab's own test machine has no NFS client (its
# test fleet's network filesystem is sshfs): a host that has one reports nfs or nfs4. macOS names its FUSE
# mounts (sshfs among them) macfuse or osxfuse.
NETWORK_TYPES = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre",
        "afs", "afpfs", "webdav", "virtiofs", "sshfs", "macfuse", "osxfuse",
    }
)  # fmt: skip
# FUSE filesystems (Linux names them fuse.<daemon>) whose daemon reads over a network.
NETWORK_FUSE = frozenset(
    {"fuse.sshfs", "fuse.rclone", "fuse.s3fs", "fuse.gcsfuse", "fuse.glusterfs", "fuse.ceph-fuse"}
)
RAM_TYPES = frozenset({"tmpfs", "ramfs"})


def is_fuse(fstype: str) -> bool:
    """True for a FUSE mount (``fuse``, ``fuseblk``, ``fuse.<daemon>``) or macOS's macfuse/osxfuse."""
    return fstype.startswith("fuse") or fstype in ("macfuse", "osxfuse")


def is_network(fstype: str) -> bool:
    """True when ``fstype`` reads over a network: a network filesystem or a network FUSE daemon."""
    return fstype in NETWORK_TYPES or fstype in NETWORK_FUSE
