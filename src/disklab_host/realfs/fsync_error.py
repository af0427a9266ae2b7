"""A real fsync error: a device that fails the writeback of one file's pages, on this kernel.

The device is a loop device over the recorder's file (recorder.py), told to
answer EIO to every write whose bytes hold a tag that only the victim file's
new contents hold (``fail match``): the data writeback fails, the
filesystem's own metadata writes do not, as when a drive fails the sectors of
one file. For each filesystem :func:`measure` records:

* what the first ``fsync`` returns, what a second ``fsync`` on the same
  descriptor returns, and what a third returns once the device is healthy
  again (what a retry loop would have believed);
* the file's pages before and after each, from cachestat(2) (syscall 451:
  pages cached, dirty, under writeback): still dirty, or marked clean;
* what a read through the page cache returns, and what is on the device
  afterwards (read again after an unmount and a fresh mount);
* the lab's atomic save (checkpoint.saver.atomic_save) on the same failing
  device: it must raise on the first error and never rename (the old
  checkpoint stays); and the save that swallows the error and renames anyway
  (saver.fsync_error_ignoring_save, Break It 3 the wrong way), for contrast.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from pathlib import Path

from ..common.units import MIB
from .mounts import FILESYSTEMS, Resources, make_image
from .recorder import FILE_NAME

CACHESTAT_NR = {"x86_64": 451, "aarch64": 451}
VICTIM_BYTES = 1 * MIB
PAGE = 4096
# 16-byte tags: the victim's old contents (fsync'd on a healthy device), its new ones (writeback fails)
OLD, NEW = b"disklab-old--v1:", b"disklab-new--v2:"


def cachestat(fd: int, length: int) -> dict | None:
    """cachestat(2) of ``fd``'s first ``length`` bytes: pages cached, dirty, writeback; None where absent."""
    nr = CACHESTAT_NR.get(platform.machine())
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    rng = ctypes.create_string_buffer(struct.pack("<QQ", 0, length))
    out = ctypes.create_string_buffer(40)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(nr), ctypes.c_int(fd), rng, out, ctypes.c_uint(0)) != 0:
        return None
    cache, dirty, writeback, _evicted, _recent = struct.unpack("<QQQQQ", out.raw)
    return {"cached_pages": cache, "dirty_pages": dirty, "writeback_pages": writeback}


def page_pattern(tag: bytes, n_bytes: int) -> bytes:
    """``n_bytes`` of pages, each page ``tag`` + its page number + filler (no page equals another)."""
    pages = []
    for i in range(n_bytes // PAGE):
        head = tag + i.to_bytes(8, "little")
        pages.append(head + bytes([0x5A]) * (PAGE - len(head)))
    return b"".join(pages)


def which_pages(data: bytes) -> dict:
    """Counts of the pages of ``data`` that hold the old contents, the new ones, zeros, or other bytes."""
    out = {"old": 0, "new": 0, "zeros": 0, "other": 0}
    for i in range(0, len(data), PAGE):
        page = data[i : i + PAGE]
        if page.startswith(OLD):
            out["old"] += 1
        elif page.startswith(NEW):
            out["new"] += 1
        elif page.count(0) == len(page):
            out["zeros"] += 1
        else:
            out["other"] += 1
    return out


def _fsync(fd: int) -> str:
    try:
        os.fsync(fd)
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok"


def _read_direct(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def _is_read_only(target: Path) -> bool:
    want = str(target.resolve())
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if parts[1] == want:
                return "ro" in parts[3].split(",")
    return False


def measure(fs: str, work: Path, res: Resources, *, state_mib: int = 4) -> dict:
    """The fsync-error row of ``fs`` (see the module docstring); the device is healthy again at the end."""
    from .crashlab import Recorder

    spec = FILESYSTEMS[fs]
    work.mkdir(parents=True, exist_ok=True)
    img = work / "fsync_error.img"
    make_image(fs, img)
    rec = Recorder(img, work / "fuse", work / "fe.jsonl", work / "fe.bin", res)
    dev = res.loop(work / "fuse" / FILE_NAME, direct_io=True, btrfs=fs == "btrfs")
    mnt = Path(res.mount(dev, work / "mnt", fs, spec.options))
    victim = mnt / "victim.bin"
    fd = os.open(victim, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    row: dict = {"fs": fs, "victim_bytes": VICTIM_BYTES}
    try:
        os.write(fd, page_pattern(OLD, VICTIM_BYTES))
        row["old_fsync"] = _fsync(fd)
        os.pwrite(fd, page_pattern(NEW, VICTIM_BYTES), 0)
        row["pages_before"] = cachestat(fd, VICTIM_BYTES)
        rec.ask(f"fail match {NEW.hex()}")
        row["first_fsync"] = _fsync(fd)
        row["pages_after_first"] = cachestat(fd, VICTIM_BYTES)
        row["second_fsync"] = _fsync(fd)
        row["pages_after_second"] = cachestat(fd, VICTIM_BYTES)
        rec.ask("fail off")
        row["third_fsync_device_healthy"] = _fsync(fd)
        row["pages_after_third"] = cachestat(fd, VICTIM_BYTES)
        row["read_through_cache"] = which_pages(os.pread(fd, VICTIM_BYTES, 0))
    finally:
        os.close(fd)
    row["read_only_after"] = _is_read_only(mnt)
    row["failed_device_writes"] = int(rec.ask("count").split()[3])
    res.release(str(mnt))
    mnt = Path(res.mount(dev, work / "mnt", fs, spec.options))
    row["on_device_after_remount"] = which_pages(_read_direct(mnt / "victim.bin", VICTIM_BYTES))
    row["saves"] = _atomic_saves(mnt, rec, state_mib)
    res.release(str(mnt))
    mnt = Path(res.mount(dev, work / "mnt", fs, spec.options))
    finish_saves(row, mnt, state_mib)
    res.release(str(mnt))
    res.release(dev)
    res.release(rec.mount_name)
    res.release(rec.name)
    for name in ("fsync_error.img", "fe.jsonl", "fe.bin"):
        (work / name).unlink(missing_ok=True)
    return row


def _tensor_tag(state: dict) -> str:
    """32 bytes of the new state's first tensor: only the new checkpoint's data pages hold them."""
    return state["layer0"].numpy().tobytes()[:32].hex()


def _atomic_saves(mnt: Path, rec, state_mib: int) -> dict:
    """atomic_save and the error-swallowing save on a device that fails the new checkpoint's writeback."""
    from ..checkpoint import saver
    from ..powercut import check as pc_check

    old, new = saver.make_state(state_mib, 1), saver.make_state(state_mib, 2)
    out = {}
    for name, save in (
        ("atomic_save", saver.atomic_save),
        ("error_ignoring_save", saver.fsync_error_ignoring_save),
    ):
        d = mnt / name
        d.mkdir()
        path = d / "ckpt.pt"
        saver.atomic_save(old, path)  # the old checkpoint, durable (healthy device)
        rec.ask(f"fail match {_tensor_tag(new)}")
        try:
            save(new, path)
            raised = None
        except OSError as exc:
            raised = errno.errorcode.get(exc.errno, str(exc.errno))
        finally:
            rec.ask("fail off")
        entry = {"raised": raised, "temp_left": saver.temp_path(path).exists()}
        entry["in_cache"] = pc_check.load_verdict(path, fmt="torch", old_state=old, new_state=new)[0]
        out[name] = entry
    return out


def finish_saves(row: dict, mnt: Path, state_mib: int) -> None:
    """After a fresh mount: what each save left on the device (``after_remount`` per save)."""
    from ..checkpoint import saver
    from ..powercut import check as pc_check

    old, new = saver.make_state(state_mib, 1), saver.make_state(state_mib, 2)
    for name, entry in row["saves"].items():
        verdict, error = pc_check.load_verdict(
            mnt / name / "ckpt.pt", fmt="torch", old_state=old, new_state=new
        )
        entry["after_remount"] = verdict
        entry["after_remount_error"] = error
