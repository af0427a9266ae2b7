"""One run at a time: an exclusive lock on a file, naming its holder.

The lab runner holds ``<lab root>/lab.lock`` on each host for the whole run,
and ``disklab run``/``audit`` hold ``<reports>/.lock`` on the controller. The
lock is flock(2) on the open file, so the kernel drops it when the holder dies
however it dies: a lock file whose lock can be taken was left by a dead run,
and taking it over is stated. The file holds the holder's run id, pid, host
name and start time (UTC), for the refusal message.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
from pathlib import Path


class LockHeld(RuntimeError):
    """Another live run holds the lock; the message names it (run id, pid, host, start time)."""


class RunLock:
    """``with RunLock(path, run_id, what="the lab root ..."):`` holds ``path`` exclusively.

    On entry: raises LockHeld naming the holder when another live process holds
    it; otherwise takes it, and ``self.took_over`` describes a dead holder's
    stale lock (or is None). On exit the file is emptied and the lock released;
    the file stays, so two runs never lock two different files of one name.
    """

    def __init__(self, path: str | os.PathLike, run_id: str, *, what: str):
        self.path = Path(path)
        self.run_id = run_id
        self.what = what
        self.took_over: str | None = None
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_read(fd))
            os.close(fd)
            raise LockHeld(f"{self.what} is in use by {holder}; wait for it to finish, or stop it") from None
        previous = _read(fd)
        if previous:
            self.took_over = f"took over the stale lock of {_describe(previous)}, which is no longer running"
        me = {
            "run_id": self.run_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def note(self, **fields) -> None:
        """Add ``fields`` (e.g. the step running now) to the holder record others read."""
        if self._fd is not None:
            holder = {**_read(self._fd), **fields}
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, (json.dumps(holder) + "\n").encode(), 0)

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # an empty file is not a stale lock
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def holder_of(path: str | os.PathLike) -> dict | None:
    """The live holder's record of the lock at ``path``, or None when no live process holds it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        doc = json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {"unreadable": True}
    return doc if isinstance(doc, dict) else {"unreadable": True}


def _describe(holder: dict) -> str:
    if not holder or holder.get("unreadable"):
        return "another run (its lock file does not say which)"
    return (
        f"run {holder.get('run_id', '?')} (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, "
        f"started {holder.get('started_utc', '?')} UTC)"
    )
