"""The crash lab: does a checkpoint survive a SIGKILL in the middle of its save?

For each saver mode: one complete save (the good checkpoint, step N), then
saves of step N+1 killed with SIGKILL partway, by progress (when the file
being written holds 10 %, 50 %, 90 % of the full size: the saver is stopped by
strace at the exit of the first write(2) that took the file that far, and
killed there, see ``checkpoint/killpoint.py``) and by time (delays spread over
the save time measured first on this host). After each kill it
records every file in the checkpoint's directory, whether the final path
loads, which step it holds and the exact error when it does not.

The saves run in children of ``saver.py --serve`` (a fresh process per save,
forked after torch is imported and the state is built, so a kill does not cost
a torch import). Source: the lesson, "Saving a file so no crash can break it"
and Measure ("The crash").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import torch

from ..checkpoint import breakit, killpoint, layers, saver
from ..checkpoint.verdict import classify
from ..common.child import child_env, module_argv
from ..common.facts import require_positive
from ..common.pipelines import Lines
from ..common.units import MIB

OLD_STEP = 1000  # the good checkpoint's step; the killed save writes OLD_STEP + 1
PROGRESS_POINTS = (0.1, 0.5, 0.9)
KILL_MODES = ("naive", "atomic", "safetensors", "fsync_before_flush")
TIME_MODES = ("naive", "atomic", "safetensors")
SAVER_MODULE = "disklab_host.checkpoint.saver"
PLAN_DIR = ".disklab-killplan"  # scratch directory of the one recorded save per mode, removed after


def written_bytes(st: os.stat_result) -> int:
    """Bytes actually written to a file: min(st_size, allocated bytes).

    safetensors ftruncates its temp file to the full size before writing, so
    its st_size alone says "complete"; the allocated blocks (st_blocks, in
    512-byte units per stat(2), delayed allocation included on ext4/xfs/btrfs)
    grow as it writes.
    """
    return min(st.st_size, st.st_blocks * 512)


def list_files(path: Path, fmt: str) -> list[dict]:
    """Every file in the checkpoint's directory: name, size_bytes, allocated_bytes, temp (a saver temp)."""
    out = []
    for entry in sorted(os.scandir(path.parent), key=lambda e: e.name):
        if entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            out.append(
                {
                    "name": entry.name,
                    "size_bytes": st.st_size,
                    "allocated_bytes": st.st_blocks * 512,
                    "temp": saver.is_temp_name(path, entry.name, fmt=fmt),
                }
            )
    return out


class SaverServer:
    """``saver.py --serve`` as a context manager; :meth:`save` runs one save and may kill it.

    Raises RuntimeError with the child's stderr tail when the server dies or
    says something unexpected.
    """

    def __init__(self, state_mib: int, seed: int = 0, timeout_s: float = 600.0):
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            module_argv(SAVER_MODULE, "--serve", "--state-mib", str(state_mib), "--seed", str(seed)),
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        self.lines = Lines(self.proc.stdout.fileno())
        self.plans: dict[tuple, killpoint.Plan | None] = {}
        # Why progress kills watch the file instead of stopping the saver at a call (None: they stop it).
        self.stop_unusable: str | None = killpoint.unusable()
        self._expect("serving")

    def __enter__(self) -> SaverServer:
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _expect(self, word: str) -> list[str]:
        line = self.lines.next(self.timeout_s)
        if line is None or not line.startswith(word):
            self.proc.kill()
            err = self.proc.stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"saver.py: expected {word!r}, got {line!r}; stderr: {err}")
        return line.split(maxsplit=1)[1:]

    def save(self, mode: str, path: Path, step: int, *, kill_at=None, kill_after_s=None, full_bytes=None):
        """Save ``step`` to ``path`` with ``mode``; kill it at a progress fraction or a delay, or not.

        ``kill_at``: fraction in (0, 1] of ``full_bytes`` written to the file
        being written. Where strace can stop the saver (:mod:`..checkpoint.killpoint`),
        it is stopped at the exit of the first write after which the file
        holds that much, and killed there; elsewhere the file is watched and
        the kill sent when it has grown that far. ``kill_after_s``: seconds
        after "ready". Returns ``{"recovered_at_start", "save_s" (None if
        killed first), "kill_after_s", "progress_at_kill_fraction",
        "exit_code" (-9: SIGKILL), "kill_method" ("strace_stop", "poll",
        "timer" or None), "stopped_at" (the call, for strace_stop)}``.
        """
        path = Path(path)
        point = None
        if kill_at is not None:
            plan = self._plan(mode, path, step)
            point = plan.stop_for(kill_at * full_bytes) if plan else None
        recovered, pid = self._start(mode, path, step, gate=point is not None)
        tracer = None
        if point is not None:
            tracer = killpoint.Tracer(pid, killpoint.stop_args(point))
            try:
                tracer.attached()
            except killpoint.KillpointError as exc:  # nothing written yet: watch the file instead
                self.stop_unusable, tracer, point = str(exc), None, None
            self._go()
        t0 = time.perf_counter()
        seen, method = None, None
        if tracer is not None:
            method = "strace_stop"
            if tracer.stopped(self.timeout_s):
                st = _writing_stat(mode, path, None)
                seen = 0.0 if st is None else written_bytes(st) / full_bytes
        elif kill_at is not None:
            method = "poll"
            seen = _wait_progress(mode, path, kill_at * full_bytes, full_bytes, pid)
        elif kill_after_s is not None:
            method = "timer"
            _sleep_until(t0 + kill_after_s)
        t_kill = None
        if method is not None:
            t_kill = time.perf_counter() - t0
            with contextlib.suppress(ProcessLookupError):  # the save may have ended first
                os.kill(pid, signal.SIGKILL)
        if tracer is not None:
            tracer.close()
        save_s, code = self._finish(mode, path)
        return {
            "recovered_at_start": recovered,
            "save_s": save_s,
            "kill_after_s": t_kill,
            "progress_at_kill_fraction": seen,
            "exit_code": code,
            "kill_method": method,
            "stopped_at": point.to_json() if tracer is not None else None,
        }

    def _start(self, mode: str, path: Path, step: int, *, gate: bool) -> tuple[list, int]:
        """Ask for one save; return what recovery removed and the saver's pid (waiting, if ``gate``)."""
        self.proc.stdin.write(f"save {mode} {path} {step}{' gate' if gate else ''}\n".encode())
        self.proc.stdin.flush()
        recovered = json.loads(self._expect("recovered")[0])
        return recovered, int(self._expect("ready")[0])

    def _go(self) -> None:
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def _finish(self, mode: str, path: Path) -> tuple[float | None, int]:
        """Read the save's words until it is reaped: (save seconds or None if killed first, exit code)."""
        save_s = None
        while True:
            line = self.lines.next(self.timeout_s)
            if line is None:
                raise RuntimeError(f"saver.py: no word from save of {path.name} within {self.timeout_s} s")
            word, _, rest = line.partition(" ")
            if word == "saved":
                save_s = float(rest)
            elif word == "error":
                raise RuntimeError(f"saver.py {mode}: {rest}")
            elif word == "reaped":
                return save_s, int(rest.split()[1])

    def _plan(self, mode: str, path: Path, step: int) -> killpoint.Plan | None:
        """The recorded write plan of this save (recorded once, on a scratch copy beside ``path``)."""
        if self.stop_unusable is not None:
            return None
        key = (mode, step, path.name)
        if key not in self.plans:
            self.plans[key] = self._record_plan(mode, path, step)
        return self.plans[key]

    def _record_plan(self, mode: str, path: Path, step: int) -> killpoint.Plan | None:
        scratch = path.parent / PLAN_DIR
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        target, trace = scratch / path.name, scratch / "save.strace"
        try:
            _, pid = self._start(mode, target, step, gate=True)
            tracer = killpoint.Tracer(pid, killpoint.record_args(trace))
            try:
                tracer.attached()
            except killpoint.KillpointError as exc:
                self.stop_unusable = str(exc)
            self._go()
            save_s, code = self._finish(mode, target)
            tracer.close()
            if self.stop_unusable is not None:
                return None
            if save_s is None or code != 0:
                raise RuntimeError(f"{mode}: the recorded save of {path.name} did not complete (exit {code})")
            try:
                return killpoint.parse_plan(trace.read_text(), pid, _writes_to(mode, target))
            except killpoint.KillpointError as exc:
                self.stop_unusable = f"{mode}: {exc}"
                return None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _sleep_until(t: float) -> None:
    left = t - time.perf_counter()
    if left > 0.002:
        time.sleep(left - 0.002)
    while time.perf_counter() < t:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def _writing_stat(mode: str, path: Path, good_stat: os.stat_result | None):
    """stat of the file the save is writing now, or None before it exists."""
    try:
        if mode == "naive":
            st = os.stat(path)
            started = good_stat is None or (st.st_mtime_ns, st.st_size) != (
                good_stat.st_mtime_ns,
                good_stat.st_size,
            )
            return st if started else None
        if mode == "safetensors":
            for entry in os.scandir(path.parent):
                if saver.SAFETENSORS_TEMP_RE.fullmatch(entry.name):
                    return entry.stat()
            return None
        return os.stat(saver.temp_path(path))
    except FileNotFoundError:
        return None


def _writes_to(mode: str, path: Path):
    """Whether a path strace printed is the file ``mode``'s save of ``path`` writes (its progress)."""
    real = Path(os.path.realpath(path))
    if mode == "naive":
        return lambda p: Path(p) == real
    if mode == "safetensors":
        return lambda p: (
            Path(p).parent == real.parent and bool(saver.SAFETENSORS_TEMP_RE.fullmatch(Path(p).name))
        )
    temp = saver.temp_path(real)
    return lambda p: Path(p) == temp


def _wait_progress(mode: str, path: Path, target: float, full: int, pid: int) -> float | None:
    """Busy-poll the file being written until it holds ``target`` bytes; return the fraction seen.

    Returns None if the save process ended first. Polls without sleeping: a
    small checkpoint is written in milliseconds.
    """
    good = os.stat(path) if mode == "naive" and path.exists() else None
    n = 0
    while True:
        st = _writing_stat(mode, path, good)
        if st is not None and written_bytes(st) >= target:
            return written_bytes(st) / full
        n += 1
        if n % 256 == 0 and not _alive(pid):
            return None


def _new_written(mode: str, path: Path, files: list[dict], verdict: dict, full: int) -> int:
    """Bytes of the new checkpoint on disk at the kill (the plot's y)."""
    temps = [f for f in files if f["temp"]]
    if mode == "naive":
        final = [f for f in files if f["name"] == path.name]
        return (
            0
            if verdict["outcome"] == "old_ok" or not final
            else min(final[0]["size_bytes"], final[0]["allocated_bytes"])
        )
    if temps:
        return min(temps[0]["size_bytes"], temps[0]["allocated_bytes"])
    return full if verdict["outcome"] == "new_ok" else 0


def kill_once(server: SaverServer, mode: str, path: Path, pristine: Path, full: int, states, **kill) -> dict:
    """Restore the good checkpoint, run one killed save, record files, outcome and recovery."""
    fmt = saver.FORMATS[mode]
    shutil.copyfile(pristine, path)
    res = server.save(mode, path, OLD_STEP + 1, full_bytes=full, **kill)
    files = list_files(path, fmt)
    verdict = classify(path, fmt=fmt, old_step=OLD_STEP, new_step=OLD_STEP + 1, states=states)
    rec = {
        "kill_after_s": res["kill_after_s"],
        "progress_at_kill_fraction": res["progress_at_kill_fraction"],
        "exit_code": res["exit_code"],
        "kill_method": res["kill_method"],
        "stopped_at": res["stopped_at"],
        "killed": res["exit_code"] == -signal.SIGKILL,
        "save_completed": res["save_s"] is not None,
        "files": files,
        "stray_temp_files": [f["name"] for f in files if f["temp"]],
        "new_written_bytes": _new_written(mode, path, files, verdict, full),
        **verdict,
    }
    rec["recovered"] = saver.recover(path, fmt=fmt)
    return rec


def run_mode(server, mode: str, workdir: Path, *, states, progress_points, delays_fn, repeats: int) -> dict:
    """Good save, then progress kills and time kills of one mode. Returns the mode's section part."""
    fmt = saver.FORMATS[mode]
    mdir = workdir / mode
    shutil.rmtree(mdir, ignore_errors=True)
    mdir.mkdir(parents=True)
    path = mdir / ("ckpt.safetensors" if fmt == "safetensors" else "ckpt.pt")
    good = server.save(mode, path, OLD_STEP)
    check = classify(path, fmt=fmt, old_step=OLD_STEP, new_step=OLD_STEP + 1, states=states)
    if check["outcome"] != "old_ok":
        raise RuntimeError(f"{mode}: the good save of step {OLD_STEP} does not load back: {check}")
    full = path.stat().st_size
    pristine = workdir / "pristine" / f"{mode}.{fmt}"
    pristine.parent.mkdir(exist_ok=True)
    shutil.copyfile(path, pristine)
    kills = []
    for frac in progress_points:
        attempt = 0
        while attempt < 3:  # retry only when the kill landed after the save ended
            attempt += 1
            rec = kill_once(server, mode, path, pristine, full, states, kill_at=frac)
            if rec["progress_at_kill_fraction"] is not None and not rec["save_completed"]:
                break
        kills.append({"kill_by": "progress", "kill_point": frac, "attempts": attempt, **rec})
    for delay in delays_fn(good["save_s"]):
        for rep in range(repeats):
            rec = kill_once(server, mode, path, pristine, full, states, kill_after_s=delay)
            kills.append({"kill_by": "time", "kill_point": delay, "repeat": rep, **rec})
    pristine.unlink()
    shutil.rmtree(mdir)
    return {"format": fmt, "full_bytes": full, "good_save_s": good["save_s"], "kills": kills}


def time_delays(save_s: float, points: int) -> list[float]:
    """``points`` kill delays in seconds, spread evenly inside a save of ``save_s`` seconds."""
    require_positive("crash_time_points", points)
    return [save_s * (i + 0.5) / points for i in range(points)]


def run(cfg: dict, workdir: Path) -> dict:
    """The "crash" step: kills per mode, plus the Break It cases. Returns the section (see the schema)."""
    sizes = cfg["sizes"]
    state_mib = require_positive("crash_state_mib", sizes["crash_state_mib"])
    points = require_positive("crash_time_points", sizes["crash_time_points"])
    repeats = require_positive("crash_repeats", sizes["crash_repeats"])
    states = {s: saver.make_state(state_mib, s) for s in (OLD_STEP, OLD_STEP + 1)}
    modes = {}
    with SaverServer(state_mib) as server:
        for mode in KILL_MODES:
            timed = mode in TIME_MODES
            modes[mode] = run_mode(
                server,
                mode,
                workdir,
                states=states,
                progress_points=PROGRESS_POINTS,
                delays_fn=(lambda s: time_delays(s, points)) if timed else (lambda s: []),
                repeats=repeats,
            )
        stop_unusable = server.stop_unusable
    shutil.rmtree(workdir / "pristine", ignore_errors=True)
    fbf = modes["fsync_before_flush"]["kills"]
    break_it = {
        "fsync_before_flush": {
            "kills": len(fbf),
            "passed": sum(k["outcome"] in ("old_ok", "new_ok") for k in fbf),
            "powercut_section": "powercut",
        },
        "cross_device": breakit.cross_device(workdir, states[OLD_STEP + 1]),
        "fsync_error": breakit.fsync_error(workdir / "fsync_error", states[OLD_STEP], states[OLD_STEP + 1]),
    }
    return {
        "status": "ok",
        "state_bytes": state_mib * MIB,
        "old_step": OLD_STEP,
        "new_step": OLD_STEP + 1,
        "torch_version": torch.__version__,
        "safetensors_version": _safetensors_version(),
        "progress_points": list(PROGRESS_POINTS),
        "progress_stop_unusable": stop_unusable,
        "modes": modes,
        "break_it": break_it,
        "layers": layers.kill_after_naive_save(workdir / "layers", state_mib),
    }


def _safetensors_version() -> str:
    import safetensors

    return safetensors.__version__
