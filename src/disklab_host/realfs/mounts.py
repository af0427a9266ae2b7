"""Loop devices, mounts, mkfs and processes, each ended by its id, even after a failure.

:class:`Resources` is the cleanup registry: every loop device, mount and
process a run makes is registered the moment it exists and undone in reverse
order by :meth:`Resources.close` (a ``with`` block's exit), whatever failed.
It only ever undoes what it made: the loop devices it attached (by their
/dev/loopN), the mounts it made (by their mount point, after checking that the
mount point still holds its device), the processes it started (by pid). It
never formats, mounts or detaches anything it was not handed.

A run killed outright (SIGKILL of the lab runner's process group) never
reaches ``close``. So, given a journal file, each resource is also written
there, one JSON line, the moment it exists (a loop device with its backing
file, a mount with its source, a FUSE mount, a process with its start time),
and a line is added when it is undone. :func:`sweep` reads a journal that a
dead run left and ends what it still holds, newest first, each only while it
is still the thing the journal names: the mounts of loop devices, the loop
devices (a loop device over a file on the FUSE mount keeps that mount busy),
the FUSE mounts (lazily: a dead FUSE server leaves "Transport endpoint is not
connected"), then the processes. The realfs step sweeps its journal before
it starts, and `disklab_host stop` after it has stopped a run.

Filesystems: :data:`FILESYSTEMS` names what each one needs to be made and
mounted here (mkfs command, smallest image, mount options for the recording
and for a crash image).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..common.units import MIB


@dataclass(frozen=True)
class Filesystem:
    """How to make and mount one filesystem on an image file."""

    name: str
    mkfs: tuple[str, ...]  # the image path is appended
    image_bytes: int
    options: str  # mount options of the recording (the defaults, with what a loop device needs)
    crash_options: str  # mount options of a crash image (a copy: same UUID as the recording)
    notes: str


FILESYSTEMS: dict[str, Filesystem] = {
    "ext4": Filesystem(
        "ext4",
        ("mkfs.ext4", "-q", "-F"),
        64 * MIB,
        "",
        "",
        "defaults: data=ordered, auto_da_alloc, commit=5, barriers on",
    ),
    # mkfs.xfs refuses a filesystem under 300 MB; -K: no discard of the (sparse) image at mkfs time
    "xfs": Filesystem(
        "xfs",
        ("mkfs.xfs", "-q", "-f", "-K"),
        320 * MIB,
        "",
        "nouuid",
        "defaults; crash images mounted with nouuid (a copy has the recording's UUID)",
    ),
    # nodiscard: the loop device over the recorder's file has no discard to offer
    "btrfs": Filesystem(
        "btrfs",
        ("mkfs.btrfs", "-q", "-f"),
        128 * MIB,
        "nodiscard",
        "nodiscard",
        "defaults (DUP metadata, commit=30) with nodiscard; each device forgotten before its loop is "
        "detached",
    ),
}
TOOLS = {"ext4": "mkfs.ext4", "xfs": "mkfs.xfs", "btrfs": "mkfs.btrfs"}
COMMON_TOOLS = ("losetup", "mount", "umount", "fusermount3")


def missing_tools(filesystems: list[str]) -> list[str]:
    """The tools that ``filesystems`` need and that are not on PATH (btrfs also needs ``btrfs``)."""
    need = list(COMMON_TOOLS) + [TOOLS[f] for f in filesystems]
    if "btrfs" in filesystems:
        need.append("btrfs")
    return [t for t in need if shutil.which(t) is None]


def check_filesystems(names: list[str]) -> list[str]:
    """``names`` when each is a known filesystem; ValueError naming the known ones."""
    bad = [n for n in names if n not in FILESYSTEMS]
    if bad or not names:
        raise ValueError(f"filesystems must be some of {sorted(FILESYSTEMS)}, got {names}")
    return names


def run(argv: list[str], *, timeout_s: float = 120) -> str:
    """Run a command; its stdout. Raises RuntimeError with the command and its stderr on failure."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {err[-1] if err else ''}")
    return proc.stdout


def make_image(fs: str, path: Path) -> None:
    """A fresh sparse image file at ``path`` with filesystem ``fs`` on it (mkfs on the file itself)."""
    spec = FILESYSTEMS[fs]
    with open(path, "wb") as f:
        f.truncate(spec.image_bytes)
    run([*spec.mkfs, str(path)])


def syncfs(path: Path) -> None:
    """syncfs(2) on the filesystem holding ``path``. Raises OSError."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def mounted_source(target: Path) -> str | None:
    """The device mounted at ``target`` (from /proc/self/mounts), or None."""
    want = str(Path(target).resolve())
    found = None
    with open("/proc/self/mounts") as f:
        for line in f:
            src, where = line.split()[:2]
            if where.replace("\\040", " ") == want:
                found = src  # the last one is the top of the stack
    return found


# The journal's name in the realfs step's workbench (beside the step's own directory, which a failed
# step's cleanup removes).
JOURNAL_NAME = ".disklab-realfs-resources.jsonl"


class Resources:
    """The cleanup registry: what this run made, undone in reverse order on close.

    With ``journal``, each resource is also recorded there as it is made, and
    marked released when it is undone (see the module docstring, :func:`sweep`).
    """

    def __init__(self, journal: Path | None = None) -> None:
        self._undo: list[tuple[str, Callable[[], None], str | None]] = []
        self.errors: list[str] = []
        self.journal = journal

    def __enter__(self) -> Resources:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, what: str, undo: Callable[[], None], record: dict | None = None) -> str:
        """Register ``undo`` for ``what``; ``record`` (kind, and what identifies it) goes to the journal."""
        entry = (
            _journal(self.journal, {"id": uuid.uuid4().hex, **record}) if record and self.journal else None
        )
        self._undo.append((what, undo, entry))
        return what

    def release(self, what: str) -> None:
        """Undo ``what`` now (the last one registered under that name). Raises what the undo raises."""
        for i in range(len(self._undo) - 1, -1, -1):
            if self._undo[i][0] == what:
                _, undo, entry = self._undo.pop(i)
                undo()
                self._released(entry)
                return
        raise KeyError(f"nothing registered as {what!r}")

    def close(self) -> list[str]:
        """Undo everything still registered, newest first; each failure kept in ``errors``."""
        while self._undo:
            what, undo, entry = self._undo.pop()
            try:
                undo()
            except Exception as exc:  # noqa: BLE001 -- every other undo must still run
                self.errors.append(f"{what}: {exc}")
                continue
            self._released(entry)
        return self.errors

    def _released(self, entry: str | None) -> None:
        if entry is not None:
            _journal(self.journal, {"released": entry})

    @property
    def held(self) -> list[str]:
        return [what for what, _, _ in self._undo]

    # --- what it makes -------------------------------------------------------------------------
    def loop(self, image: Path, *, direct_io: bool = False, btrfs: bool = False) -> str:
        """Attach a fresh loop device over ``image``; its path. Detached on close (btrfs: forgotten first)."""
        argv = ["losetup", "--show", "-f"] + (["--direct-io=on"] if direct_io else []) + [str(image)]
        dev = run(argv).strip()

        def detach() -> None:
            if btrfs and shutil.which("btrfs"):
                with contextlib.suppress(RuntimeError):  # not registered: nothing to forget
                    run(["btrfs", "device", "scan", "--forget", dev])
            run(["losetup", "-d", dev])

        record = {"kind": "loop", "dev": dev, "backing": str(Path(image).resolve()), "btrfs": btrfs}
        return self.add(dev, detach, record)

    def mount(self, dev: str, target: Path, fstype: str, options: str = "") -> str:
        """Mount ``dev`` at ``target``; unmounted on close (only while ``target`` still holds ``dev``)."""
        target.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", fstype] + (["-o", options] if options else []) + [dev, str(target)])
        where = str(target)

        def unmount() -> None:
            if mounted_source(target) == dev:
                _retry_busy(["umount", where])

        return self.add(
            where, unmount, {"kind": "mount", "target": str(Path(where).resolve()), "source": dev}
        )

    def process(self, proc: subprocess.Popen, name: str) -> str:
        """A started process; ended by its pid on close (SIGTERM, then SIGKILL after 10 s)."""

        def end() -> None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

        record = {"kind": "process", "pid": proc.pid, "name": name, "start": _start_time(proc.pid)}
        return self.add(f"{name} pid {proc.pid}", end, record)

    def fuse(self, what: str, target: Path, source: str, undo: Callable[[], None]) -> str:
        """A FUSE mount at ``target`` (its server a registered process); ``undo`` unmounts it on close."""
        return self.add(what, undo, {"kind": "fuse", "target": str(Path(target).resolve()), "source": source})


def _journal(path: Path, doc: dict) -> str | None:
    """Append ``doc`` to the journal as one line, written through to disk; its id."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(doc) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return doc.get("id")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22): a pid's identity."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _loop_backing(dev: str) -> str | None:
    try:
        return Path(f"/sys/block/{Path(dev).name}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def held(journal: Path) -> list[dict]:
    """The journal's resources not marked released, oldest first."""
    try:
        lines = journal.read_text().splitlines()
    except FileNotFoundError:
        return []
    docs = []
    for line in lines:
        with contextlib.suppress(ValueError):
            docs.append(json.loads(line))
    released = {d["released"] for d in docs if "released" in d}
    return [d for d in docs if "id" in d and d["id"] not in released]


_SWEEP_ORDER = {"mount": 0, "loop": 1, "fuse": 2, "process": 3}


def sweep(journal: Path) -> tuple[list[str], list[str]]:
    """End what a dead run's journal still holds: (what was ended, what could not be); the journal goes
    when nothing is left. Each resource only while it is still what the journal names."""
    from .recorder import umount as fuse_umount

    ended, errors = [], []
    left = held(journal)
    # newest first within each kind, kinds in the order that works (see the module docstring)
    for doc in sorted(reversed(left), key=lambda d: _SWEEP_ORDER.get(d.get("kind"), 9)):
        kind = doc.get("kind")
        try:
            if kind == "mount" and mounted_source(Path(doc["target"])) == doc["source"]:
                _retry_busy(["umount", doc["target"]])
                ended.append(f"mount {doc['target']} ({doc['source']})")
            elif kind == "loop" and _loop_backing(doc["dev"]) == doc["backing"]:
                if doc.get("btrfs") and shutil.which("btrfs"):
                    with contextlib.suppress(RuntimeError):
                        run(["btrfs", "device", "scan", "--forget", doc["dev"]])
                run(["losetup", "-d", doc["dev"]])
                ended.append(f"loop device {doc['dev']} ({doc['backing']})")
            elif kind == "fuse" and mounted_source(Path(doc["target"])) == doc["source"]:
                fuse_umount(Path(doc["target"]), lazy=True)  # its server may be dead: not connected
                ended.append(f"FUSE mount {doc['target']}")
            elif kind == "process" and doc.get("start") and _start_time(doc["pid"]) == doc["start"]:
                os.kill(doc["pid"], signal.SIGKILL)
                ended.append(f"{doc.get('name', 'process')} pid {doc['pid']}")
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{kind} {doc.get('target') or doc.get('dev') or doc.get('pid')}: {exc}")
            continue
        _journal(journal, {"released": doc["id"]})
    if not held(journal):
        journal.unlink(missing_ok=True)
    return ended, errors


def _retry_busy(argv: list[str], tries: int = 20) -> None:
    """umount, retried while the device is busy (udev's probe of a new device can hold it a moment)."""
    for i in range(tries):
        try:
            run(argv)
            return
        except RuntimeError as exc:
            if "busy" not in str(exc) or i == tries - 1:
                raise
            time.sleep(0.1 * (i + 1))
