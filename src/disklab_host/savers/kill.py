"""The crash lab for a framework saver: real SIGKILLs at exact calls of its save, fresh and reused directory.

One save is recorded first (strace ``-f -y`` attached to the waiting saver, :mod:`.gate`): its
calls on the checkpoint directory, each with the process that made it and its count of that call in that
process. The kill points are the calls that reach 10, 50 and 90 % of the bytes the save writes there, and
every rename and removal there (and the call just before each rename). Each kill restores the earlier
checkpoint, starts the saver again, attaches strace with an injected SIGSTOP at the exit of that call
(``-e inject=CALL:signal=SIGSTOP:when=N``, counted per process), SIGKILLs the saver and every process it
started once one stops, and judges what a restart finds (:func:`.powercut.restart_finds`).

The stop is exact for the process that stops. With ranks (``dcp``), the counter is each process's own: the
first rank to reach its N-th such call stops, and its peers are killed wherever they were at that moment,
as when a job is killed. Linux with strace only (:func:`disklab_host.checkpoint.killpoint.unusable`).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..checkpoint import killpoint
from ..common.child import child_env
from ..powercut import record as pc_record
from ..powercut import simulate
from ..powercut.trace import hex_bytes, parse_lines, string_arg
from . import model
from . import powercut as sp
from .registry import Spec

PLAN_CALLS = ("openat", "write", "writev", "pwrite64", "pwritev", "ftruncate", "rename", "renameat",
              "renameat2", "unlink", "unlinkat")  # fmt: skip
WRITES = ("write", "writev", "pwrite64", "pwritev")
PROGRESS = (0.1, 0.5, 0.9)
READY_TIMEOUT_S = 300.0  # starting Python and importing the framework
TEMP_NAME = re.compile(
    r"\.tmp[A-Za-z0-9_]{6,8}"
)  # random temp names (Rust's tempfile crate, Python's tempfile)


@dataclass(frozen=True)
class Point:
    """A kill point: the ``ordinal``-th ``syscall`` of a process of the save, and what it did."""

    syscall: str
    ordinal: int
    text: str
    why: str
    bytes_fraction: float
    paths: tuple[str, ...] = ()  # strace -P: the ordinal counts only calls on these (empty: every call)
    ordinal_all: int = 0  # the count among every call of that name in its process (where -P cannot be used)

    def to_json(self) -> dict:
        return {"syscall": self.syscall, "ordinal": self.ordinal, "call": self.text, "why": self.why,
                "bytes_fraction": round(self.bytes_fraction, 4)}  # fmt: skip


def _path(arg: str, cwd: Path) -> str | None:
    """The absolute path in a -y fd argument (``3<\\x2f...>``) or a quoted path, else None."""
    if arg[:1].isalnum() and "<" in arg and arg.endswith(">"):
        return hex_bytes(arg[arg.index("<") + 1 : -1]).decode("utf-8", "surrogateescape")
    if arg.startswith('"') and not arg.endswith("..."):  # a path; a written buffer is cut at strace's -s
        p = string_arg(arg).decode("utf-8", "surrogateescape")
        return os.path.normpath(p if os.path.isabs(p) else os.path.join(cwd, p))
    return None


def plan(trace: str, cwd: Path, target: Path) -> list[Point]:
    """The kill points in a ``-f -y -xx`` trace of one save whose checkpoint directory is ``target``."""
    found = parse_lines(trace.splitlines())
    # Where every file the save touches there has a name known in advance (no random temp name), strace
    # counts only the calls on them (-P), so another process's calls (a launcher's pipes) never come first.
    named = {p for _pid, _n, args, _r, _x in found for p in _dir_paths(args, cwd, target)}
    paths = () if any(TEMP_NAME.search(os.path.basename(p)) for p in named) else tuple(sorted(named))
    counts: dict[tuple[int, str], int] = {}  # on the directory's files, where -P can count them
    every: dict[tuple[int, str], int] = {}
    calls = []  # (syscall, ordinal, text, bytes written there so far, is a name change, ordinal among all)
    total = 0
    for pid, name, args, ret, _rest in found:
        every[(pid, name)] = every.get((pid, name), 0) + 1
        if not paths or _dir_paths(args, cwd, target):
            counts[(pid, name)] = counts.get((pid, name), 0) + 1
        if ret < 0 or name not in PLAN_CALLS:
            continue
        text = _call_text(name, args, ret, cwd, target)
        if text is None:
            continue
        if name in WRITES:
            total += ret
        calls.append((name, counts[(pid, name)], text, total, name.startswith(("rename", "unlink")),
                      every[(pid, name)]))  # fmt: skip
    if not calls:
        return []
    points: dict[tuple[str, int], Point] = {}

    def point(i: int, why: str) -> None:
        name, n, text, held, _, n_all = calls[i]
        points.setdefault((name, n), Point(name, n, text, why, held / total if total else 1.0, paths, n_all))

    for frac in PROGRESS:
        i = next((i for i, c in enumerate(calls) if c[0] in WRITES and c[3] >= frac * total), None)
        if i is not None:
            point(i, f"{frac:.0%} of the bytes written")
    for i, (name, *_rest) in enumerate(calls):
        if name.startswith("rename") and i:
            point(i - 1, "the call before a rename")
        if name.startswith(("rename", "unlink")):
            point(i, "a rename or removal")
    order = {(c[0], c[1]): i for i, c in reversed(list(enumerate(calls)))}
    return sorted(points.values(), key=lambda p: order[(p.syscall, p.ordinal)])


def _dir_paths(args: list[str], cwd: Path, target: Path) -> list[str]:
    """The paths of a call's arguments inside ``target`` (absolute)."""
    where = str(target.resolve())
    return [p for p in (_path(a, cwd) for a in args) if p and (p == where or p.startswith(where + "/"))]


def _call_text(name: str, args: list[str], ret: int, cwd: Path, target: Path) -> str | None:
    """``name(paths in target, relative to its parent) = ret``; None when the call touches no path there."""
    inside = _dir_paths(args, cwd, target)
    if not inside:
        return None
    return f"{name}({', '.join(os.path.relpath(p, target.parent) for p in inside)}) = {ret}"


def _stopped_call(lines: list[str], stop_line: str, cwd: Path, target: Path) -> str | None:
    """The stopped process's last call (the one at whose exit it stopped), as :func:`_call_text` shows it."""
    stopped = int(stop_line.split()[0])
    calls = [c for c in parse_lines(lines) if c[0] == stopped]
    if not calls:
        return None
    _pid, name, args, ret, _ = calls[-1]
    return _call_text(name, args, ret, cwd, target) or f"{name}(outside the checkpoint directory) = {ret}"


def _same_call(a: str | None, b: str) -> bool:
    """Whether two call texts are the same call (a random temp name such as safetensors' .tmpXXXXXX aside)."""
    return a is not None and TEMP_NAME.sub(".tmp*", a) == TEMP_NAME.sub(".tmp*", b)


class _Traced:
    """One save with strace attached at its gate (:func:`.gate.wait`): the saver (and its ranks) first
    saves once and waits, strace attaches to every process that will save (``-f -p``, with ``args``), and
    only then does the save begin, so strace neither sees nor slows the start-up. strace's lines come on a
    pipe of their own unless ``args`` sends them to a file (``-o``)."""

    def __init__(self, spec: Spec, root: Path, directory: Path, state_mib: int, step: int, timeout_s: float,
                 args: list[str], gate: Path):  # fmt: skip
        shutil.rmtree(gate, ignore_errors=True)
        gate.mkdir(parents=True)
        argv = [*sp.saver_argv(spec, root, directory, state_mib, step, timeout_s), "--gate", str(gate)]
        self.proc = subprocess.Popen(
            argv, cwd=root, env=child_env(dict(os.environ, PYTHONDONTWRITEBYTECODE="1")),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        self.tracer = None
        self.read_fd = None
        self.lines: list[str] = []
        try:
            pids = self._pids(gate, spec.ranks or 1, READY_TIMEOUT_S)
            self.read_fd, write_fd = os.pipe()
            out = [] if "-o" in args else ["-o", f"/dev/fd/{write_fd}"]
            attach = [arg for pid in pids for arg in ("-p", str(pid))]
            try:
                self.tracer = subprocess.Popen(
                    [pc_record.find_strace(), "-f", *out, *args, *attach], stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(write_fd,),
                )  # fmt: skip
            finally:
                os.close(write_fd)
            self._attached(pids)
            (gate / "go").touch()
        except BaseException:
            self.kill()
            raise

    def _pids(self, gate: Path, n: int, timeout_s: float) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while len(found := sorted(gate.glob("pid-*"))) < n:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise simulate.SpecError(f"the saver did not reach its gate (exit status {self.proc.poll()})")
            time.sleep(0.01)
        return [int(p.read_text()) for p in found]

    def _attached(self, pids: list[int]) -> None:
        """Wait until strace says it attached to each of ``pids`` ("Process N attached")."""
        left, deadline = {str(p) for p in pids}, time.monotonic() + killpoint.ATTACH_TIMEOUT_S
        said = b""
        while left:
            if time.monotonic() > deadline:
                raise killpoint.KillpointError(f"strace could not attach to {sorted(left)} in time")
            if not select.select([self.tracer.stderr], [], [], 1.0)[0]:
                continue  # nothing said yet
            chunk = os.read(self.tracer.stderr.fileno(), 65536)  # unbuffered: several lines may come at once
            if not chunk:
                raise killpoint.KillpointError(f"strace could not attach to {sorted(left)}: it ended")
            said += chunk
            left -= {p for p in left if f"Process {p} attached".encode() in said}

    def stopped(self, timeout_s: float) -> str | None:
        """Wait for the injected SIGSTOP: the line that says which process stopped, or None when the save
        ended (or the time ran out) first. :attr:`lines` holds strace's lines before it."""
        deadline, buf = time.monotonic() + timeout_s, b""
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([self.read_fd], [], [], min(left, 1.0))[0]:
                if self.proc.poll() is not None and self.tracer.poll() is not None:
                    return None
                continue
            chunk = os.read(self.read_fd, 65536)
            if not chunk:
                return None
            *done, buf = (buf + chunk).split(b"\n")
            for raw in done:
                line = raw.decode("utf-8", "replace")
                if "--- stopped by SIGSTOP ---" in line:
                    return line
                self.lines.append(line)
        return None

    def wait(self, timeout_s: float) -> int | None:
        """The saver's exit status once it ends, None when it does not within ``timeout_s``."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL the saver and every process it started (torch's launcher runs ranks in sessions of their
        own), then let strace end."""
        for pid in [*_descendants(self.proc.pid), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        if self.tracer is not None:
            try:
                self.tracer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.tracer.kill()
                self.tracer.wait()
            self.tracer.stderr.close()
        if self.read_fd is not None:
            os.close(self.read_fd)


def _descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (from /proc's parent links), children first."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
    out, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parents.items() if parent in frontier]
        out = kids + out
        frontier = kids
    return out


def _save(spec: Spec, root: Path, directory: Path, state_mib: int, step: int, timeout_s: float,
          args: list[str], gate: Path) -> None:  # fmt: skip
    traced = _Traced(spec, root, directory, state_mib, step, timeout_s, args, gate)
    try:
        code = traced.wait(timeout_s)
    finally:
        traced.kill()
    if code != 0:
        raise simulate.SpecError(
            f"{spec.label}: the save of step {step} did not complete (exit status {code})"
        )


def record_plan(
    spec: Spec, case: str, base: Path, state_mib: int, timeout_s: float
) -> tuple[list[Point], Path]:
    """Save the earlier checkpoint, keep it as the pristine copy, record one new save; (points, pristine)."""
    old_dir, new_dir = sp.dirs(spec, case)
    root = base / "ckpt_dir"
    shutil.rmtree(base, ignore_errors=True)
    root.mkdir(parents=True)
    _save(spec, root, root / old_dir, state_mib, simulate.OLD_STEP, timeout_s,
          ["-e", "trace=none", "-o", os.devnull], base / "gate")  # fmt: skip
    pristine = base / "pristine"
    shutil.copytree(root, pristine, symlinks=True)
    trace = base / "plan.strace"
    calls = ",".join(f"?{c}" for c in PLAN_CALLS)
    _save(spec, root, root / new_dir, state_mib, simulate.NEW_STEP, timeout_s,
          ["-y", "-xx", "-e", f"trace={calls}", "-o", str(trace)], base / "gate")  # fmt: skip
    return plan(trace.read_text(errors="replace"), root, root / new_dir), pristine


def kill_at(spec: Spec, case: str, base: Path, pristine: Path, point: Point, state_mib: int,
            timeout_s: float) -> dict:  # fmt: skip
    """Restore the earlier checkpoint, start the save, stop it at ``point``, SIGKILL it, judge the result."""
    old_dir, new_dir = sp.dirs(spec, case)
    root = base / "ckpt_dir"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(pristine, root, symlinks=True)
    # strace resolves each -P path when it starts: one in a directory the save has yet to make matches nothing
    known = bool(point.paths) and all(Path(p).parent.is_dir() for p in point.paths)
    only = [arg for p in point.paths for arg in ("-P", p)] if known else []
    when = point.ordinal if known else point.ordinal_all
    stop = ["-y", "-xx", *only, "-e", f"trace={point.syscall}",
            "-e", f"inject={point.syscall}:signal=SIGSTOP:when={when}"]  # fmt: skip
    start = time.perf_counter()
    traced = _Traced(spec, root, root / new_dir, state_mib, simulate.NEW_STEP, timeout_s, stop, base / "gate")
    try:
        stop_line = traced.stopped(timeout_s)
        stopped_at = _stopped_call(traced.lines, stop_line, root, root / new_dir) if stop_line else None
    finally:
        traced.kill()
    old, new = model.state(state_mib, simulate.OLD_STEP), model.state(state_mib, simulate.NEW_STEP)
    found = sp.restart_finds(root, spec, case, state_mib, old, new)
    earlier = None
    if case == "fresh":
        earlier = sp.judge_dir(root / old_dir, spec, state_mib, old, new)["outcome"]
    return {
        **point.to_json(),
        "stopped": stop_line is not None,
        "stopped_at": stopped_at,
        "exact": _same_call(stopped_at, point.text),
        "wall_s": time.perf_counter() - start,
        "outcome": found["outcome"],
        "found": sp.judge.describe(found),
        "new_dir": found["new_dir"],
        "earlier": earlier,
        "files": sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()),
    }


def run(spec: Spec, case: str, base: Path, state_mib: int, timeout_s: float = sp.DEFAULT_TIMEOUT_S) -> dict:
    """Every kill point of ``spec``'s save in ``case``; the kills and their counts."""
    why = killpoint.unusable()
    if why:
        return {"status": "not_run", "reason": why}
    try:
        points, pristine = record_plan(spec, case, base, state_mib, timeout_s)
        if not points:
            return {
                "status": "not_run",
                "reason": "the recorded save made no call on its directory to stop at",
            }
        kills = [kill_at(spec, case, base, pristine, p, state_mib, timeout_s) for p in points]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    landed = [k for k in kills if k["stopped"]]  # a save that ended before its point was not killed
    counts = dict.fromkeys(("new_ok", "old_ok", "mixed", "corrupt", "missing"), 0)
    for k in landed:
        counts[k["outcome"]] += 1
    return {
        "status": "ok",
        "kills": kills,
        "not_stopped": len(kills) - len(landed),
        "counts": counts,
        "loads": counts["new_ok"] + counts["old_ok"],
        "earlier_lost": sum(k["earlier"] not in (None, "old_ok") for k in landed)
        if case == "fresh"
        else None,
        "verdict": "unsafe" if any(counts[o] for o in sp.UNSAFE) else "safe" if landed else "not_killed",
    }
