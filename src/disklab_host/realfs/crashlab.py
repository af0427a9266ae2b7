"""Record one save on a real filesystem at the block level, then mount and classify each crash image.

:func:`run_save` is the whole experiment for one (filesystem, save function):

1. make the filesystem on a sparse image file and save the old checkpoint
   (step 1) there through a plain loop device; fsync it, its directory and the
   filesystem, unmount: this image is the starting point;
2. serve a copy of it through the recorder (recorder.py), attach a loop
   device over the recorder's file with direct I/O, mount the filesystem with
   its defaults, syncfs, mark ``begin``, run the new save (step 2) in the save
   process, mark ``end``; then write and fsync a small file next to the
   checkpoint directory (another process's fsync, and what a journal's commit
   timer does: ext4 commits its running transaction, xfs forces its log),
   mark ``bystander``, unmount (its sync writes the rest), mark ``umount``;
3. for each crash state of the log from ``begin`` to ``umount`` (images.py),
   build the image, mount it on a fresh loop device (journal recovery runs, as
   on a reboot), classify the checkpoint with the crash lab's verdict
   (checkpoint/verdict.classify through powercut.check.load_verdict),
   unmount and detach.

The recording device is mounted read-write once; crash images are copies.
Every loop device, mount and process is registered in a mounts.Resources and
ended by its id on every path.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path

from ..common.child import child_env, module_argv
from ..common.fsio import fsync_tree
from ..common.units import MIB
from ..powercut import check as pc_check
from . import images
from .mounts import FILESYSTEMS, Resources, mounted_source, syncfs
from .recorder import umount as fuse_umount

OLD_STEP, NEW_STEP = 1, 2
CKPT_NAMES = {"torch": "ckpt.pt", "safetensors": "ckpt.safetensors"}
CKPT_DIR = "ckpt_dir"
BYSTANDER_BYTES = 4096
RECORDER_SOURCE = "disklab-recorder"


class SaveError(RuntimeError):
    """The save function did not return on the real filesystem (no verdict)."""


class SaveProcess:
    """The save function's own process (saver_child.py): one save per request."""

    def __init__(self, spec: str, state_mib: int, res: Resources, cwd: Path):
        argv = [*module_argv("disklab_host.realfs.saver_child", spec, "--state-mib", str(state_mib))]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=cwd, env=child_env()
        )
        res.process(self.proc, "save process")
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            raise SaveError(f"the save process did not start: {line or 'it exited'}")

    def save(self, step: int, path: Path) -> float:
        """Run one save; its seconds (from the call to the return). Raises SaveError."""
        self.proc.stdin.write(f"save {step} {path}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        if not line.startswith("saved "):
            raise SaveError(f"save of step {step} on a real filesystem: {line or 'its process exited'}")
        return float(line.split()[1])


class Recorder:
    """The recorder's process and mount; ``mark`` and ``count`` talk to it."""

    def __init__(self, backing: Path, mountpoint: Path, log: Path, data: Path, res: Resources):
        mountpoint.mkdir(parents=True, exist_ok=True)
        argv = module_argv(
            "disklab_host.realfs.recorder", "--backing", str(backing), "--mountpoint", str(mountpoint),
            "--log", str(log), "--data", str(data),
        )  # fmt: skip
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env()
        )
        self.name = res.process(self.proc, "recorder")
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"the recorder did not start: {line or 'it exited'}")
        self.mountpoint = mountpoint
        self.file = mountpoint / "disk.img"

        def unmount() -> None:
            if mounted_source(mountpoint) == RECORDER_SOURCE:
                fuse_umount(mountpoint)
            self.proc.wait(timeout=30)

        self.mount_name = res.fuse(f"recorder mount {mountpoint}", mountpoint, RECORDER_SOURCE, unmount)

    def ask(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer or answer.startswith("error"):
            raise RuntimeError(f"the recorder answered {answer!r} to {line!r}")
        return answer

    def mark(self, name: str) -> None:
        self.ask(f"mark {name}")


def loop_dio(dev: str) -> bool:
    """Whether the loop device really does direct I/O (/sys/block/loopN/loop/dio)."""
    try:
        return Path(f"/sys/block/{Path(dev).name}/loop/dio").read_text().strip() == "1"
    except OSError:
        return False


def prepare(fs: str, work: Path, saver: SaveProcess, ckpt: str, res: Resources) -> Path:
    """The starting image: ``fs`` made, the old checkpoint saved and made durable, unmounted."""
    from .mounts import make_image

    spec = FILESYSTEMS[fs]
    base = work / "start.img"
    make_image(fs, base)
    dev = res.loop(base, btrfs=fs == "btrfs")
    mnt = res.mount(dev, work / "mnt", fs, spec.options)
    (Path(mnt) / CKPT_DIR).mkdir()
    saver.save(OLD_STEP, Path(mnt) / CKPT_DIR / ckpt)
    fsync_tree(Path(mnt) / CKPT_DIR)
    syncfs(Path(mnt))
    res.release(mnt)
    res.release(dev)
    return base


class Neighbour:
    """Another writer on the same filesystem: write and fsync a small file, again and again, until stopped.

    Each fsync commits what the filesystem holds at that moment (ext4 its running transaction, xfs its
    log up to that file), so a save it runs beside is recorded with commits in its middle, as a long save
    on a busy host would be (ext4's 5 s commit timer, another process's fsync).
    """

    def __init__(self, path: Path):
        self.path, self.fsyncs, self.error = path, 0, None
        self._stop, self._first = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="realfs-neighbour", daemon=True)

    def _run(self) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                while not self._stop.is_set():
                    os.pwrite(fd, b"n" * BYSTANDER_BYTES, (self.fsyncs % 16) * BYSTANDER_BYTES)
                    os.fsync(fd)
                    self.fsyncs += 1
                    self._first.set()
            finally:
                os.close(fd)
        except OSError as exc:  # reported with the recording; the save's verdict does not depend on it
            self.error = str(exc)
        finally:
            self._first.set()

    def __enter__(self) -> Neighbour:
        """Start the neighbour; returns once its first fsync is done, so the save has one beside it."""
        self._thread.start()
        self._first.wait()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def record(
    fs: str, work: Path, saver: SaveProcess, ckpt: str, res: Resources, start: Path, *,
    neighbour: bool = False,
) -> dict:  # fmt: skip
    """Record the new save on a copy of ``start`` through the recorder; facts about the recording.

    With ``neighbour``, a :class:`Neighbour` writes and fsyncs beside the save while it runs.
    """
    spec = FILESYSTEMS[fs]
    live = work / "live.img"
    images.sparse_copy(start, live)
    rec = Recorder(live, work / "fuse", work / "writes.jsonl", work / "writes.bin", res)
    dev = res.loop(rec.file, direct_io=True, btrfs=fs == "btrfs")
    dio = loop_dio(dev)
    mnt = Path(res.mount(dev, work / "mnt", fs, spec.options))
    syncfs(mnt)
    rec.mark("begin")
    busy = Neighbour(mnt / "neighbour") if neighbour else contextlib.nullcontext()
    with busy:
        wall = time.perf_counter()
        save_s = saver.save(NEW_STEP, mnt / CKPT_DIR / ckpt)
        wall = time.perf_counter() - wall
    rec.mark("end")
    fd = os.open(mnt / "bystander", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"b" * BYSTANDER_BYTES)
        os.fsync(fd)
    finally:
        os.close(fd)
    rec.mark("bystander")
    res.release(str(mnt))
    rec.mark("umount")
    counts = rec.ask("count").split()
    res.release(dev)
    res.release(rec.mount_name)
    res.release(rec.name)
    live.unlink()
    return {
        "loop_direct_io": dio,
        "save_s": save_s,
        "save_wall_s": wall,
        "recorded_writes": int(counts[1]),
        "recorded_flushes": int(counts[2]),
        "neighbour_fsyncs": busy.fsyncs if neighbour else None,
        "neighbour_error": busy.error if neighbour else None,
    }


def plain_save_s(fs: str, work: Path, saver: SaveProcess, ckpt: str, res: Resources, start: Path) -> float:
    """The same save on the same kind of loop device (direct I/O) over a plain copy of ``start``: seconds."""
    spec = FILESYSTEMS[fs]
    plain = work / "plain.img"
    images.sparse_copy(start, plain)
    dev = res.loop(plain, direct_io=True, btrfs=fs == "btrfs")
    mnt = Path(res.mount(dev, work / "mnt", fs, spec.options))
    syncfs(mnt)
    wall = time.perf_counter()
    saver.save(NEW_STEP, mnt / CKPT_DIR / ckpt)
    wall = time.perf_counter() - wall
    res.release(str(mnt))
    res.release(dev)
    plain.unlink()
    return wall


def check_states(
    fs: str, work: Path, start: Path, fmt: str, ckpt: str, state_mib: int, res: Resources, *,
    subsets: int, max_states: int, seed: int = 0,
) -> dict:  # fmt: skip
    """Mount and classify every crash state of the recording in ``work``; counts, verdict, examples."""
    from ..checkpoint import saver

    log = images.read_log(work / "writes.jsonl", "begin", "umount")
    data = work / "writes.bin"
    begin = work / "begin.img"
    images.sparse_copy(start, begin)
    images.apply_writes(begin, data, log.before)
    states = images.crash_states(log, returned="end", subsets=subsets, seed=seed)
    listed = len(states)
    if len(states) > max_states:  # keep the first and last, spread the rest evenly
        step = (len(states) - 1) / (max_states - 1)
        states = [states[round(i * step)] for i in range(max_states)]
    old, new = saver.make_state(state_mib, OLD_STEP), saver.make_state(state_mib, NEW_STEP)
    counts = dict.fromkeys(pc_check.OUTCOMES, 0)
    rows, first_unsafe, first_rb = [], None, None
    wall = time.perf_counter()
    for st in states:
        out, error = check_image(fs, work, begin, data, log, st, fmt, ckpt, old, new, res)
        counts[out] += 1
        rows.append([st.name, st.after_return, out])
        example = {"state": st.name, "after_return": st.after_return, "outcome": out, "error": error}
        if out in pc_check.UNSAFE and first_unsafe is None:
            first_unsafe = example
        if out == "rolled_back" and first_rb is None:
            first_rb = example
    begin.unlink()
    verdict = pc_check.verdict_of(counts)
    final = rows[-1][2] if rows else None
    return {
        "verdict": verdict,
        "states_listed": listed,
        "states": len(states),
        "counts": counts,
        "first_unsafe": first_unsafe,
        "first_rolled_back": first_rb,
        "final_state_outcome": final,
        "writes": len(log.writes),
        "flushes": len(log.flushes),
        "writes_before_begin_unflushed": log.unflushed_before,
        "written_bytes": sum(w.length for w in log.writes),
        "samples": rows,
        "check_wall_s": time.perf_counter() - wall,
    }


def check_image(fs, work, begin, data, log, st, fmt, ckpt, old, new, res) -> tuple[str, str | None]:
    """Build, mount, classify, unmount and detach one crash image: (outcome, error text)."""
    spec = FILESYSTEMS[fs]
    img = work / "crash.img"
    images.build_image(begin, data, log, st, img)
    dev = res.loop(img, btrfs=fs == "btrfs")
    try:
        try:
            mnt = Path(res.mount(dev, work / "crash_mnt", fs, spec.crash_options))
        except RuntimeError as exc:  # the image does not mount at all: nothing at the path can be read
            return "corrupt", f"the crash image does not mount: {exc}"
        try:
            verdict, error = pc_check.load_verdict(
                mnt / CKPT_DIR / ckpt, fmt=fmt, old_state=old, new_state=new
            )
        finally:
            res.release(str(mnt))
        return pc_check.outcome(verdict, st.after_return), error
    finally:
        res.release(dev)
        img.unlink()


def run_save(
    fs: str, spec: str, fmt: str, work: Path, state_mib: int, res: Resources, saver: SaveProcess, *,
    subsets: int, max_states: int, measure_cost: bool = False, neighbour: bool = False,
) -> dict:  # fmt: skip
    """The whole experiment for one filesystem and save function (see the module docstring)."""
    ckpt = CKPT_NAMES[fmt]
    work.mkdir(parents=True, exist_ok=True)
    total = time.perf_counter()
    start = prepare(fs, work, saver, ckpt, res)
    facts = record(fs, work, saver, ckpt, res, start, neighbour=neighbour)
    if measure_cost:
        facts["plain_save_wall_s"] = plain_save_s(fs, work, saver, ckpt, res, start)
    result = check_states(fs, work, start, fmt, ckpt, state_mib, res, subsets=subsets, max_states=max_states)
    for name in ("start.img", "writes.jsonl", "writes.bin"):
        (work / name).unlink(missing_ok=True)
    return {
        "fs": fs, "spec": spec, "format": fmt, "recording": facts, **result,
        "wall_s": time.perf_counter() - total, "state_mib": state_mib,
        "image_mib": FILESYSTEMS[fs].image_bytes // MIB,
    }  # fmt: skip
