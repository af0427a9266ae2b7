"""Render many hosts at once: a pool of processes, one per CPU this process may run on.

DISKLAB_RENDER_WORKERS sets the count (1 renders in this process). Most of a host's render is drawing
its plots with matplotlib, which one process does on one core.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from disklab import processes

# At least this many out-of-date hosts go to a pool.
PARALLEL_MIN_HOSTS = 4
# A spawned worker imports disklab and matplotlib and compiles the templates itself (seconds), so where
# workers cannot be forked (macOS, a process with threads) a pool starts only for this many hosts.
SPAWN_MIN_HOSTS = 24
# Hosts a pool worker takes at a time, at most: small chunks keep both workers busy to the end (a chunk
# of 60 hosts left to one worker kept the other idle for ten seconds and more), and a chunk's round trip
# costs far less than one host's render.
CHUNK_MAX = 4


def workers(stale: int) -> int:
    """How many processes render ``stale`` out-of-date hosts: DISKLAB_RENDER_WORKERS (default: one per CPU
    this process may run on), and 1 below PARALLEL_MIN_HOSTS (by default SPAWN_MIN_HOSTS where workers
    would be spawned)."""
    setting = os.environ.get("DISKLAB_RENDER_WORKERS", "").strip()
    least = PARALLEL_MIN_HOSTS
    if setting:
        try:
            cpus = max(1, int(setting))
        except ValueError:
            raise ValueError(f"DISKLAB_RENDER_WORKERS must be an integer >= 1, got {setting!r}") from None
    else:
        cpus = _cpus()
        if mp_context().get_start_method() != "fork":
            least = SPAWN_MIN_HOSTS
    return 1 if stale < least or cpus == 1 else min(cpus, stale)


def _cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS: no affinity
        return max(1, os.cpu_count() or 1)


def mp_context():
    """fork on Linux when this process runs no other thread (cheapest); spawn otherwise (macOS, threads)."""
    import multiprocessing

    fork = sys.platform.startswith("linux") and threading.active_count() == 1
    return multiprocessing.get_context("fork" if fork else "spawn")


def _chunksize(jobs: int, workers: int) -> int:
    """Hosts per pool task: a quarter of each worker's share, at most CHUNK_MAX, at least 1."""
    return max(1, min(CHUNK_MAX, jobs // (4 * workers)))


def run(render: Callable, jobs: list[tuple], n_workers: int, before_fork: Callable[[], None]) -> list:
    """``render(job)`` of each job in ``n_workers`` processes, in the jobs' order. ``before_fork`` runs
    first where the workers are forked (what it loads, they inherit)."""
    context = mp_context()
    if context.get_start_method() == "fork":
        before_fork()
    # a worker ends with this process, however it ends: a SIGKILLed render leaves no worker waiting
    die = {"initializer": processes.die_with_parent, "initargs": (os.getpid(),)}
    with ProcessPoolExecutor(max_workers=n_workers, mp_context=context, **die) as pool:
        return list(pool.map(render, jobs, chunksize=_chunksize(len(jobs), n_workers)))
