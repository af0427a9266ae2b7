"""Stop a save at an exact write, then kill it: the crash lab's progress kills, made deterministic.

A SIGKILL timed by watching the file grow lands wherever the scheduler lets
it: on a loaded machine the save may have finished before the watcher looked.
Instead, the save's file-writing calls are recorded once with strace (its
:class:`Plan`); for a target of N bytes, the stop point is the first of those
calls after which the file being written holds at least N bytes; and the
killed save runs with strace attached, told to inject SIGSTOP at the exit of
exactly that call (``-e inject=SYSCALL:signal=SIGSTOP:when=K``, counted per
traced process). The saver then sits stopped with that call done and the next
one not begun, whatever the machine's load, and only then gets SIGKILL.

The precision is one system call: a save that writes a whole tensor in one
write(2) can be stopped before or after that tensor, never inside it (the
crash lab's kills by time sample the inside of calls). Linux with strace
only; :func:`unusable` says why not elsewhere, and the crash lab then falls
back to watching the file (its results say which method each kill used).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Calls that put bytes into (or size) a file; ftruncate counts as a progress point of 0 bytes.
FILE_WRITE_CALLS = ("write", "writev", "pwrite64", "pwritev", "pwritev2", "ftruncate")
ATTACH_TIMEOUT_S = 60.0
# prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY): lets strace attach under Yama ptrace_scope 1.
_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1).value
# "1234  writev(3</wb/ckpt.pt>, [...], 2) = 4195136": optional pid, call, fd with its path (-y), result.
_LINE = re.compile(
    r"^(?:\[pid\s+(?P<bracketed>\d+)\]|(?P<pid>\d+))?\s*"
    r"(?P<call>\w+)\((?P<fd>\d+)<(?P<path>[^>]*)>.*\)\s+=\s+(?P<ret>-?\d+)"
)


class KillpointError(RuntimeError):
    """strace could not attach or stop the saver; the caller falls back to watching the file."""


def unusable() -> str | None:
    """Why a save cannot be stopped at an exact call on this host, or None when it can."""
    if platform.system() != "Linux":
        return f"strace stops need Linux; this is {platform.system()}"
    if shutil.which("strace") is None:
        return "strace is not installed"
    return None


def allow_tracing() -> None:
    """In the saver: let any process of this user attach (Yama ptrace_scope 1); a no-op where refused."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0)


@dataclass(frozen=True)
class StopPoint:
    """The ``ordinal``-th ``syscall`` of the saver (1-based, counted for that call alone)."""

    syscall: str
    ordinal: int
    planned_bytes: int  # bytes in the file being written once this call returned, in the recorded save

    def to_json(self) -> dict:
        return {"syscall": self.syscall, "ordinal": self.ordinal, "planned_bytes": self.planned_bytes}


@dataclass(frozen=True)
class Plan:
    """The file-writing calls of one recorded save, in order, with the bytes the file held after each."""

    points: tuple[StopPoint, ...]

    def stop_for(self, target_bytes: float) -> StopPoint:
        """The first call after which the file holds at least ``target_bytes``, else the last one."""
        for p in self.points:
            if p.planned_bytes >= target_bytes:
                return p
        return self.points[-1]


def parse_plan(trace: str, pid: int, is_writing_file: Callable[[str], bool]) -> Plan:
    """The :class:`Plan` in strace ``-f -y`` output of the saver ``pid``.

    ``is_writing_file(path)`` says which file's growth is the save's progress.
    Raises KillpointError when another thread wrote that file (strace's
    counters are per thread, so the stop would not be exact) or when no call
    wrote it.
    """
    counts: dict[str, int] = {}
    points, held = [], 0
    for line in trace.splitlines():
        m = _LINE.match(line)
        if not m or m["call"] not in FILE_WRITE_CALLS:
            continue
        tid = int(m["pid"] or m["bracketed"] or pid)
        if tid == pid:
            counts[m["call"]] = counts.get(m["call"], 0) + 1
        if not is_writing_file(m["path"]):
            continue
        if tid != pid:
            raise KillpointError(f"thread {tid} of the saver wrote {m['path']}: no exact stop")
        ret = int(m["ret"])
        if m["call"] != "ftruncate" and ret > 0:
            held += ret
        points.append(StopPoint(m["call"], counts[m["call"]], held))
    if not points:
        raise KillpointError("the recorded save wrote nothing to the file it was expected to write")
    return Plan(tuple(points))


class Tracer:
    """strace attached to a waiting saver; the saver starts when :meth:`attached` has returned."""

    def __init__(self, pid: int, args: list[str]):
        self.pid = pid
        self.proc = subprocess.Popen(
            ["strace", "-p", str(pid), *args], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, bufsize=0
        )
        self._buf = b""

    def _line(self, deadline: float) -> str | None:
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stderr], [], [], left)[0]:
                raise KillpointError(f"strace -p {self.pid}: no word within the timeout")
            chunk = os.read(self.proc.stderr.fileno(), 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def attached(self) -> None:
        """Wait for strace's "Process N attached"; raise KillpointError (strace ended) if it cannot."""
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        seen = []
        while (line := self._line(deadline)) is not None:
            if "attached" in line and str(self.pid) in line:
                return
            seen.append(line)
        self.proc.wait()
        raise KillpointError(f"strace could not attach to {self.pid}: {' '.join(seen)[-300:]}")

    def stopped(self, timeout_s: float) -> bool:
        """Wait until the saver is stopped by the injected SIGSTOP (True) or has ended (False)."""
        deadline = time.monotonic() + timeout_s
        while (line := self._line(deadline)) is not None:
            if "--- stopped by SIGSTOP ---" in line:
                return True
            if line.startswith("+++") or f"{self.pid} detached" in line:
                return False
        return False

    def close(self, timeout_s: float = 30.0) -> None:
        """Wait for strace to end (it ends with its tracee); kill it if it does not."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()


def record_args(out: Path) -> list[str]:
    """strace arguments that record the saver's file-writing calls, with paths, to ``out``."""
    return ["-f", "-y", "-e", "trace=" + ",".join(FILE_WRITE_CALLS), "-o", str(out)]


def stop_args(point: StopPoint) -> list[str]:
    """strace arguments that stop the saver with SIGSTOP at the exit of ``point``."""
    return [
        "-e",
        f"trace={point.syscall}",
        "-e",
        f"inject={point.syscall}:signal=SIGSTOP:when={point.ordinal}",
    ]
