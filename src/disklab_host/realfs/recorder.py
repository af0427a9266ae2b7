"""The block-level write recorder: a one-file FUSE filesystem that logs every write and flush reaching it.

A loop device is set up over the one file this filesystem serves; the
filesystem under test lives on that loop device. Every write the loop driver
sends to its backing file arrives here as a FUSE WRITE (offset, bytes), and
every cache flush of the loop device (REQ_PREFLUSH, FUA) arrives as a FUSE
FSYNC: the loop driver turns a flush into vfs_fsync of its backing file. The
log is dm-log-writes' record, in user space, without kernel modules.

This is a minimal server of the FUSE kernel protocol (linux/fuse_kernel.h),
in pure Python over /dev/fuse, mounted with mount(2) as root: no libfuse, no
compiled binding. A single-file filesystem needs INIT, LOOKUP, GETATTR, OPEN,
READ, WRITE, FSYNC, FLUSH, RELEASE, STATFS and DESTROY; every other request
gets ENOSYS. The file is opened with FOPEN_DIRECT_IO and the connection has no
writeback cache, so there is no page cache between the loop device and this
log: a write is logged, applied to the backing file and only then answered,
one request at a time, so the log's order is the order writes completed, and
a flush covers exactly the writes logged before it.

Run as ``python -m disklab_host.realfs.recorder --backing IMG --mountpoint DIR
--log LOG --data DATA``. It prints ``ready`` once mounted; then reads commands
on stdin, one a line, and answers each on stdout: ``mark NAME`` (a marker in
the log, answered ``marked NAME``), ``fail writes`` / ``fail match HEX`` /
``fail fsync`` / ``fail off`` (from now on answer EIO to every WRITE, to every
WRITE whose bytes contain HEX, to every FSYNC; or stop failing), ``count``
(``count WRITES FSYNCS ERRORS``). It exits when its filesystem is unmounted or stdin
closes (then it detaches its own mount).

Log format: one JSON array a line: ``["w", offset, length, data_pos]`` (the
bytes are at ``data_pos`` in the data file), ``["f"]`` (a flush),
``["m", name]``, ``["e", "write" | "fsync", offset, length]`` (an error this
server returned on command).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import select
import stat
import struct
import sys
from pathlib import Path

FILE_NAME = "disk.img"
ROOT_ID, FILE_ID = 1, 2
MAX_WRITE = 1 << 20  # with FUSE_MAX_PAGES and 256 pages
BUF_BYTES = MAX_WRITE + 64 * 1024

# Opcodes (linux/fuse_kernel.h)
LOOKUP, FORGET, GETATTR, SETATTR = 1, 2, 3, 4
OPEN, READ, WRITE, STATFS, RELEASE, FSYNC, FLUSH, INIT = 14, 15, 16, 17, 18, 20, 25, 26
OPENDIR, RELEASEDIR, ACCESS, INTERRUPT, DESTROY, BATCH_FORGET = 27, 29, 34, 36, 38, 42
NO_REPLY = (FORGET, BATCH_FORGET, INTERRUPT)
FUSE_BIG_WRITES, FUSE_MAX_PAGES = 1 << 5, 1 << 22
FOPEN_DIRECT_IO = 1
IN_HEADER = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # fuse_attr, 88 bytes
MS_NOSUID, MS_NODEV = 2, 4


def mount_fuse(fd: int, mountpoint: Path) -> None:
    """mount(2) a FUSE filesystem served on ``fd`` at ``mountpoint`` (root only). Raises OSError."""
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0,default_permissions".encode()
    src, target, kind = b"disklab-recorder", os.fsencode(mountpoint), b"fuse.disklab"
    if libc.mount(src, target, kind, MS_NOSUID | MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount of the recorder at {mountpoint}: {os.strerror(err)}")


def umount(mountpoint: Path, *, lazy: bool = False) -> None:
    """umount2(2) ``mountpoint`` (MNT_DETACH when ``lazy``). Raises OSError."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(mountpoint), 2 if lazy else 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {mountpoint}: {os.strerror(err)}")


class Server:
    """The FUSE server: one regular file, backed by ``backing``, every write and flush logged."""

    def __init__(self, backing: Path, log: Path, data: Path):
        self.backing = os.open(backing, os.O_RDWR)
        self.size = os.fstat(self.backing).st_size
        self.log = open(log, "w", buffering=1 << 16)  # noqa: SIM115 -- closed in close()
        self.data = open(data, "wb", buffering=0)  # noqa: SIM115
        self.data_pos = 0
        self.fail = {"write": False, "fsync": False, "match": b""}
        self.writes = self.fsyncs = self.errors = 0
        self.fd = -1

    def record(self, entry: list) -> None:
        self.log.write(json.dumps(entry, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self.log.close()
        self.data.close()
        os.close(self.backing)

    # --- replies -------------------------------------------------------------------------------
    def reply(self, unique: int, payload: bytes = b"", error: int = 0) -> None:
        body = b"" if error else payload
        try:
            os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique) + body)
        except OSError as exc:  # ENOENT: the request was interrupted and is gone
            if exc.errno != errno.ENOENT:
                raise

    def attr(self, node: int) -> bytes:
        if node == ROOT_ID:
            mode, size, nlink = stat.S_IFDIR | 0o700, 0, 2
        else:
            mode, size, nlink = stat.S_IFREG | 0o600, self.size, 1
        blocks = (size + 511) // 512
        return ATTR.pack(node, size, blocks, 0, 0, 0, 0, 0, 0, mode, nlink, 0, 0, 0, 4096, 0)

    def attr_out(self, node: int) -> bytes:
        return struct.pack("<QII", 0, 0, 0) + self.attr(node)  # attr_valid 0: always ask

    # --- requests ------------------------------------------------------------------------------
    def handle(self, buf: bytes) -> bool:
        """Answer one request; False when the filesystem is being destroyed."""
        length, opcode, unique, node, _uid, _gid, _pid, _ext, _pad = IN_HEADER.unpack_from(buf)
        arg = memoryview(buf)[IN_HEADER.size : length]
        if opcode in NO_REPLY:
            return True
        if opcode == INIT:
            major, minor, readahead, _flags = struct.unpack_from("<IIII", arg)
            minor = min(minor, 31)
            flags = FUSE_BIG_WRITES | FUSE_MAX_PAGES
            out = struct.pack("<IIIIHHIIHHII", 7, minor, readahead, flags, 16, 12, MAX_WRITE, 1, 256, 0, 0, 0)
            self.reply(unique, out + bytes(24))
        elif opcode == LOOKUP:
            name = bytes(arg).split(b"\0", 1)[0]
            if node != ROOT_ID or name != FILE_NAME.encode():
                self.reply(unique, error=errno.ENOENT)
            else:
                self.reply(unique, struct.pack("<QQQQII", FILE_ID, 0, 0, 0, 0, 0) + self.attr(FILE_ID))
        elif opcode in (GETATTR, SETATTR):
            self.reply(unique, self.attr_out(node))
        elif opcode == OPEN:
            self.reply(unique, struct.pack("<QIi", 0, FOPEN_DIRECT_IO, 0))
        elif opcode == OPENDIR:
            self.reply(unique, struct.pack("<QIi", 0, 0, 0))
        elif opcode == READ:
            _fh, offset, size = struct.unpack_from("<QQI", arg)
            self.reply(unique, os.pread(self.backing, size, offset))
        elif opcode == WRITE:
            _fh, offset, size = struct.unpack_from("<QQI", arg)
            data = bytes(arg[40 : 40 + size])
            if self.fail["write"] or (self.fail["match"] and self.fail["match"] in data):
                self.record(["e", "write", offset, size])
                self.errors += 1
                self.reply(unique, error=errno.EIO)
                return True
            os.pwrite(self.backing, data, offset)
            self.data.write(data)
            self.record(["w", offset, size, self.data_pos])
            self.data_pos += size
            self.writes += 1
            self.reply(unique, struct.pack("<II", size, 0))
        elif opcode == FSYNC:
            if self.fail["fsync"]:
                self.record(["e", "fsync", 0, 0])
                self.errors += 1
                self.reply(unique, error=errno.EIO)
                return True
            self.record(["f"])
            self.fsyncs += 1
            self.reply(unique)
        elif opcode in (FLUSH, RELEASE, RELEASEDIR, ACCESS):
            self.reply(unique)
        elif opcode == STATFS:
            blocks = self.size // 4096
            self.reply(unique, struct.pack("<QQQQQIIII", blocks, 0, 0, 2, 0, 4096, 255, 4096, 0) + bytes(24))
        elif opcode == DESTROY:
            self.reply(unique)
            return False
        else:
            self.reply(unique, error=errno.ENOSYS)
        return True

    def command(self, line: str) -> str:
        words = line.split()
        if words[:1] == ["mark"] and len(words) == 2:
            self.record(["m", words[1]])
            self.log.flush()
            return f"marked {words[1]}"
        if words[:1] == ["fail"] and len(words) == 2 and words[1] in ("writes", "fsync", "off"):
            self.fail = {"write": words[1] == "writes", "fsync": words[1] == "fsync", "match": b""}
            return f"fail {words[1]}"
        if words[:2] == ["fail", "match"] and len(words) == 3:
            self.fail = {"write": False, "fsync": False, "match": bytes.fromhex(words[2])}
            return "fail match"
        if words == ["count"]:
            self.log.flush()
            return f"count {self.writes} {self.fsyncs} {self.errors}"
        return f"error unknown command {line.strip()!r}"

    def serve(self, mountpoint: Path) -> None:
        self.fd = os.open("/dev/fuse", os.O_RDWR)
        mount_fuse(self.fd, mountpoint)
        print("ready", flush=True)
        stdin = sys.stdin.fileno()
        watch = [self.fd, stdin]
        try:
            while True:
                ready, _, _ = select.select(watch, [], [])
                if stdin in ready:
                    line = sys.stdin.readline()
                    if not line:  # the parent went away: take our mount with us
                        umount(mountpoint, lazy=True)
                        watch.remove(stdin)
                        continue
                    print(self.command(line), flush=True)
                if self.fd in ready:
                    try:
                        buf = os.read(self.fd, BUF_BYTES)
                    except OSError as exc:
                        if exc.errno == errno.ENODEV:  # unmounted
                            return
                        if exc.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):
                            continue
                        raise
                    if not self.handle(buf):
                        return
        finally:
            os.close(self.fd)
            self.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="disklab's block-level write recorder (a one-file FUSE server)")
    ap.add_argument("--backing", type=Path, required=True, help="the image file whose writes are logged")
    ap.add_argument("--mountpoint", type=Path, required=True)
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    args = ap.parse_args(argv)
    Server(args.backing, args.log, args.data).serve(args.mountpoint)
    return 0


if __name__ == "__main__":
    sys.exit(main())
