"""The lesson's Break It cases 2 and 3, run for real where the host allows.

2. A temp file on another filesystem: os.replace fails with EXDEV, and
   shutil.move "fixes" it by copying, so the final name exists before its
   data is complete (rename(2): EXDEV; shutil.move docs: copy, then delete).
3. An fsync error: injected with a test double for os.fsync (we cannot make
   the disk fail), to show that atomic_save raises and keeps the old
   checkpoint while a version that ignores the error replaces it.

Case 1 (fsync before flush) is run by crash.py under the same kills as the
other savers. Source: the lesson, Break It.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import torch

from . import saver
from .verdict import classify

MAX_SIZES_KEPT = 64  # distinct partial sizes kept from the watcher


def candidate_dirs() -> list[str]:
    """Where another filesystem may be writable: /dev/shm, /tmp, /run/user/$UID, $TMPDIR."""
    dirs = ["/dev/shm", "/tmp", f"/run/user/{os.getuid()}"]
    if os.environ.get("TMPDIR"):
        dirs.append(os.environ["TMPDIR"])
    return dirs


def other_filesystem(workbench: Path, candidates: list[str]) -> tuple[Path | None, list[dict]]:
    """The first writable candidate whose st_dev differs from the workbench's, and why each was skipped."""
    wb_dev = os.stat(workbench).st_dev
    tried = []
    for cand in candidates:
        p = Path(cand)
        if not p.is_dir():
            tried.append({"dir": cand, "skipped": "does not exist"})
        elif not os.access(p, os.W_OK | os.X_OK):
            tried.append({"dir": cand, "skipped": "not writable"})
        elif os.stat(p).st_dev == wb_dev:
            tried.append({"dir": cand, "skipped": "same filesystem as the workbench (same st_dev)"})
        else:
            tried.append({"dir": cand, "skipped": None})
            return p, tried
    return None, tried


def _watch(target: Path, full: int, started: threading.Event, stop: threading.Event, out: dict) -> None:
    sizes: list[int] = []
    polls = partial = 0
    started.set()
    while not stop.is_set():
        polls += 1
        try:
            size = os.stat(target).st_size
        except FileNotFoundError:
            continue
        if size < full:
            partial += 1
            if size not in sizes and len(sizes) < MAX_SIZES_KEPT:
                sizes.append(size)
    out.update(polls=polls, partial_polls=partial, sizes=sorted(sizes))


def cross_device(workdir: Path, state: dict, candidates: list[str] | None = None) -> dict:
    """Break It 2: save to a temp on another filesystem, os.replace it, then shutil.move it.

    ``state`` is the checkpoint to save (torch.save). Returns ``{"status":
    "reproduced" | "not_reproducible", "reason", "tried", ...}``; when
    reproduced: ``replace_error`` (e.g. "OSError: [Errno 18] Invalid
    cross-device link"), ``replace_errno``, ``move_partial_sizes_bytes``
    (sizes of the final name seen below full size during shutil.move, up to
    64), ``move_polls``, ``move_partial_polls``, ``full_bytes``, ``move_s``,
    ``same_inode_after_move`` (False: a copy, not a rename) and
    ``loads_after_move``.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    other, tried = other_filesystem(workdir, candidate_dirs() if candidates is None else candidates)
    base = {"tried": tried, "workbench_dev": os.stat(workdir).st_dev}
    if other is None:
        return {"status": "not_reproducible", "reason": "no writable directory on another filesystem", **base}
    need = sum(t.numel() * t.element_size() for t in state.values()) + (1 << 20)
    vfs = os.statvfs(other)
    if vfs.f_bavail * vfs.f_frsize < 2 * need:
        return {"status": "not_reproducible", "reason": f"{other} has too little free space", **base}
    final = workdir / "xdev_ckpt.pt"
    with tempfile.TemporaryDirectory(dir=other, prefix="disklab-xdev-") as tdir:
        tmp = Path(tdir) / (final.name + saver.TEMP_SUFFIX)
        torch.save(state, tmp)
        full = tmp.stat().st_size
        src_ino = tmp.stat().st_ino
        out = {"status": "reproduced", "reason": None, "other_dir": str(other), **base}
        out["other_dev"] = os.stat(other).st_dev
        try:
            os.replace(tmp, final)
            out.update(status="not_reproducible", reason="os.replace across the two directories succeeded")
            return out
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            out.update(replace_error=f"{type(exc).__name__}: {exc}", replace_errno=exc.errno)
        seen: dict = {}
        started, stop = threading.Event(), threading.Event()
        watcher = threading.Thread(target=_watch, args=(final, full, started, stop, seen), daemon=True)
        watcher.start()
        started.wait()
        t0 = time.perf_counter()
        shutil.move(str(tmp), str(final))
        out["move_s"] = time.perf_counter() - t0
        stop.set()
        watcher.join()
    st = final.stat()
    out.update(
        full_bytes=full,
        final_bytes=st.st_size,
        move_partial_sizes_bytes=seen["sizes"],
        move_polls=seen["polls"],
        move_partial_polls=seen["partial_polls"],
        same_inode_after_move=(st.st_ino == src_ino and st.st_dev == out["other_dev"]),
    )
    try:
        int(torch.load(final, map_location="cpu")["step"])
        out["loads_after_move"] = True
    except Exception:
        out["loads_after_move"] = False
    final.unlink()
    return out


class FailingFsync:
    """Test double for os.fsync that raises EIO and counts its calls (we cannot make a disk fail)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        raise OSError(errno.EIO, "Input/output error (injected by disklab's fsync test double)")


def fsync_error(workdir: Path, old_state: dict, new_state: dict) -> dict:
    """Break It 3: atomic_save vs a version that ignores the error, both under an injected fsync EIO.

    Returns ``{"injected": True, "atomic": {...}, "ignoring": {...}}``; each has
    ``raised``, ``error``, ``fsync_calls``, ``outcome``, ``step``,
    ``temp_left`` (the temp file still exists). Steps come from the states.
    """
    old, new = int(old_state["step"]), int(new_state["step"])
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    path = workdir / "ckpt.pt"
    out = {"injected": True}
    for name, save in (("atomic", saver.atomic_save), ("ignoring", saver.fsync_error_ignoring_save)):
        saver.atomic_save(old_state, path)
        double = FailingFsync()
        rec = {"raised": False, "error": None}
        try:
            save(new_state, path, fsync=double)
        except OSError as exc:
            rec.update(raised=True, error=f"{type(exc).__name__}: {exc}")
        rec["fsync_calls"] = double.calls
        rec["temp_left"] = saver.temp_path(path).exists()
        verdict = classify(path, fmt="pt", old_step=old, new_step=new)
        rec.update(outcome=verdict["outcome"], step=verdict["step"])
        out[name] = rec
        saver.recover(path)
    shutil.rmtree(workdir)
    return out
