"""The controller's processes: what a process is (its program, its parent, whether it runs), and ending
every process it started.

Every fact comes from psutil, which asks each platform its own way (Linux: /proc; macOS: sysctl and
libproc), so no controller module reads /proc itself and the same code holds on a Mac. :data:`FACTS` is
the one source (disklab.ownership, disklab.runner, disklab.powercut_cli read it); a test may put a
platform's answers in its place (tests/test_process_facts.py gives macOS's).

A process is named by its pid and its start time (psutil's ``create_time``, seconds since the epoch):
a pid that the kernel has given to a new process since is not the one recorded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

# How close two readings of one process's start time are (psutil reads it from the same clock each time;
# Linux counts it in clock ticks, 1/100 s).
SAME_START_S = 0.05
# After SIGTERM, how long the processes of a tree have to end before SIGKILL.
GRACE_S = 10.0


class Facts:
    """What the platform says of a process, through psutil. Each method answers None (or False) for a
    process that has gone or that this user may not ask about; none raises."""

    def program(self, pid: int) -> str | None:
        """``ansible-playbook`` or ``disklab`` when one of its first three words is that script (a Python
        script's first word is its interpreter), else the name of its first word (``sleep``); None when it
        cannot be read (gone, or another user's process on macOS)."""
        try:
            argv = psutil.Process(pid).cmdline()
        except (psutil.Error, OSError):
            return None
        return program_of(argv)

    def parent(self, pid: int) -> int | None:
        try:
            return psutil.Process(pid).ppid()
        except (psutil.Error, OSError):
            return None

    def started(self, pid: int) -> float | None:
        """When ``pid`` started (seconds since the epoch), or None when it is gone or cannot be read."""
        try:
            return psutil.Process(pid).create_time()
        except (psutil.Error, OSError):
            return None

    def running(self, pid: int, started: float | None = None) -> bool:
        """Whether ``pid`` exists and has not ended (a zombie has ended), and when ``started`` is given,
        whether it is the process that started then (not a later one given the same pid)."""
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            if started is not None and abs(proc.create_time() - started) > SAME_START_S:
                return False
        except psutil.NoSuchProcess:
            return False
        except (psutil.AccessDenied, OSError):
            return True  # it exists; another user's
        return True


def program_of(argv: list[str]) -> str | None:
    """The program an argument vector runs (see :meth:`Facts.program`): ``ansible-playbook`` or ``disklab``
    (its console script, or ``python -m disklab.cli``) when one of its first three words is that, else the
    name of its first word."""
    words = [Path(a).name for a in argv[:3] if a]
    for word in words:
        if word.startswith("ansible-playbook"):
            return "ansible-playbook"
        if word == "disklab" or word.startswith("disklab."):
            return "disklab"
    return words[0] if words else None


FACTS = Facts()


def _ended(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except (psutil.AccessDenied, OSError):
        return False


def _ssh_master(proc: psutil.Process) -> bool:
    """ssh's connection-sharing master (ControlPersist; it names itself ``ssh: PATH [mux]``), which a task's
    ssh forks and which outlives it on purpose: the next connection (the stop playbook's) uses it."""
    try:
        title = " ".join(proc.cmdline())
    except (psutil.Error, OSError):
        return False
    return title.startswith("ssh: ") and title.endswith("[mux]")


def tree(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and every process below it, parents first (none that has gone)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def end(procs: list[psutil.Process], grace_s: float = GRACE_S, poll_s: float = 0.05) -> list[int]:
    """End ``procs`` and whatever they start meanwhile: SIGTERM to each (so each can pass it on and clean
    up: ansible-playbook passes it to its workers, each worker to its task's processes), then SIGKILL to
    each still running after ``grace_s``. A process's children are found while it runs, so one orphaned
    later (its parent ended first) is still ended. ssh's connection-sharing master is left running.

    Returns the pids that had to be killed. Waits until every process has ended or is a zombie (a zombie
    whose parent is this process is this process's to reap: subprocess or pexpect does).
    """
    seen: dict[psutil.Process, None] = {}

    def gather() -> list[psutil.Process]:
        for proc in list(seen):
            if not _ended(proc):
                for child in tree(proc)[1:]:
                    seen.setdefault(child)
        return [p for p in seen if not _ended(p)]

    for proc in procs:
        if not _ssh_master(proc):
            seen.setdefault(proc)
    killed: list[int] = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        deadline = time.monotonic() + wait_s
        sent: set[psutil.Process] = set()
        while True:
            running = [p for p in gather() if not _ssh_master(p)]
            for proc in running:
                if proc not in sent:
                    with contextlib.suppress(psutil.Error, OSError):
                        proc.send_signal(sig)
                    sent.add(proc)
                    if sig == signal.SIGKILL:
                        killed.append(proc.pid)
            if not running or time.monotonic() > deadline:
                break
            time.sleep(poll_s)
        if not running:
            break
    return killed


def child_ids() -> set[tuple[int, float]]:
    """(pid, start time) of each process this one has started that is still running: what
    :func:`end_children` is told to spare."""
    out = set()
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error, OSError):
            out.add((child.pid, child.create_time()))
    return out


def end_children(grace_s: float = GRACE_S, spared: set[tuple[int, float]] = frozenset()) -> list[int]:
    """End every process this one started, and theirs (:func:`end`), but the children in ``spared``
    (:func:`child_ids` taken before the work whose processes are to end) and what is below them; the pids
    that had to be killed."""
    procs = []
    for child in psutil.Process().children():
        try:
            if (child.pid, child.create_time()) in spared:
                continue
        except (psutil.Error, OSError):
            continue
        procs += tree(child)
    return end(procs, grace_s)


def parent_death_signal(sig: int, parent: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when ``parent``, the process that started it, dies
    (Linux prctl PR_SET_PDEATHSIG; it outlasts exec). False where the platform has no such request
    (macOS). A parent that died before the request (getppid is no longer ``parent``) ends this process."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, sig)
    if os.getppid() != parent:  # it died before the request
        os._exit(128 + sig)
    return True


def die_with_parent(parent: int) -> None:
    """Make this process end when ``parent`` (the pid that started it) ends, however it ends: SIGKILL from
    the kernel on Linux (:func:`parent_death_signal`); elsewhere a daemon thread that checks each half
    second whether ``parent`` is still this process's parent, and ends the process when it is not."""
    if parent_death_signal(signal.SIGKILL, parent):
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="disklab-parent-watch", daemon=True).start()
