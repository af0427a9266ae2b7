"""Part 8, changed or busy: does ``disklab compare`` tell a changed host from a busy one?

Four ``disklab run`` of the same steps on localhost, back to back, into one reports directory:

- **A** and **B**, on the quiet host: B against A counts the false calls (nothing changed);
- **C**, while fio writes to the workbench's filesystem (direct 1 MiB writes for the whole run): C against
  B must mark C's disturbed samples and call no figure changed because of them;
- **D**, under a block I/O throttle on the workbench's device (cgroup v2 ``io.max``, else v1
  ``blkio.throttle.*``: reads at :data:`READ_BPS`, writes at :data:`WRITE_IOPS` I/O per second), a real
  slowdown: D against B must call the cold loads changed, slower, and the durable syncs too under cgroup
  v2 (v1 throttles no writeback, so an fsync there is not slowed).

Printed: the quiet false calls (goal: at most the false-discovery level, 5 % of the judged figures), the
busy comparison's calls and disturbed figures (goal: none called changed), the slowdown's detection rate
among the figures the throttle slows (fsync_bench's sync modes, the cold loads at ``all_touched``) and
its calls in the wrong direction, and the rates overall. Needs root (the cgroup, drop_caches), fio and
Linux; the lab venv under ``lab_root`` is reused (a warm-up run makes it when missing).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from common import REPO

from disklab_host.common import iorecord

READ_BPS = 40 * 1024 * 1024
WRITE_IOPS = 200
STEPS = ["fsync_bench", "load"]
# The false-discovery level the quiet comparison is held to (disklab.verdicts.FDR).
FDR = 0.05


def _run(cmd: list[str], timeout_s: float, *, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)
    return proc


def _disklab(reports: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "disklab.cli", "--reports", str(reports), *args]


def _device_numbers(path: Path) -> tuple[str, str]:
    """(name, MAJ:MIN) of the whole disk behind ``path`` (a throttle takes the disk, not a partition)."""
    dev = iorecord.device_of(path)
    if "unavailable" in dev:
        raise RuntimeError(f"no block device to throttle: {dev['unavailable']}")
    block = Path("/sys/class/block") / dev["name"]
    if (block / "partition").exists():
        block = block.resolve().parent
    return block.name, (block / "dev").read_text().strip()


class Throttle:
    """A cgroup that limits the workbench device's reads (bytes/s) and writes (I/O per second)."""

    def __init__(self, majmin: str):
        self.majmin = majmin
        self.v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
        root = Path("/sys/fs/cgroup") if self.v2 else Path("/sys/fs/cgroup/blkio")
        self.dir = root / f"disklab-bench-{os.getpid()}"

    def __enter__(self) -> Throttle:
        self.dir.mkdir()
        if self.v2:
            (self.dir / "io.max").write_text(f"{self.majmin} rbps={READ_BPS} wiops={WRITE_IOPS}\n")
        else:
            (self.dir / "blkio.throttle.read_bps_device").write_text(f"{self.majmin} {READ_BPS}\n")
            (self.dir / "blkio.throttle.write_iops_device").write_text(f"{self.majmin} {WRITE_IOPS}\n")
        return self

    @property
    def how(self) -> str:
        if self.v2:
            return f"cgroup v2 io.max {self.majmin} rbps={READ_BPS} wiops={WRITE_IOPS}"
        return f"cgroup v1 blkio.throttle read_bps {READ_BPS}, write_iops {WRITE_IOPS} on {self.majmin}"

    def wrap(self, cmd: list[str]) -> list[str]:
        """``cmd`` started inside the cgroup (its children inherit it)."""
        procs = self.dir / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "throttled", *cmd]

    def __exit__(self, *exc) -> None:
        for _ in range(50):  # the cgroup empties as its processes end
            try:
                self.dir.rmdir()
                return
            except OSError:
                time.sleep(0.2)


def _compare(reports: Path, old: str, new: str) -> dict:
    host = reports / "localhost" / "runs"
    proc = _run(
        _disklab(reports, "compare", "--json", str(host / f"{old}.json"), str(host / f"{new}.json")), 120
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"disklab compare exited {proc.returncode}: {proc.stderr[-500:]}")
    return json.loads(proc.stdout)


def _expected_slower(f: dict, writeback_throttled: bool) -> bool:
    """A figure the throttle must slow: a cold load at all_touched (it reads the file, and a read is
    throttled in the process that waits for it), and a durable sync where the throttle holds the writeback
    too. cgroup v2 charges a file's writeback to the cgroup that dirtied it; cgroup v1's blkio controller
    does not (its writeback runs as the root cgroup), so there an fsync of a buffered write is not slowed."""
    return (f["measure"] == "durable_sync" and writeback_throttled) or (
        f["experiment"] == "load"
        and f["cache"] == "cold"
        and f["stage"] == "all_touched"
        and f["unit"] == "s"
    )


def _called(cmp: dict) -> list[dict]:
    return [
        {"figure": f["label"], "ratio": f["ratio"], "direction": f["direction"], "why": f["why"]}
        for f in cmp["figures"]
        if f["verdict"] == "changed"
    ]


def changed_or_busy(lab_root: Path, load_repeats: int, timeout_s: float = 2400) -> dict:
    """Part 8 (see the module doc). Raises RuntimeError when a run or a tool fails."""
    fio = shutil.which("fio")
    if fio is None:
        raise RuntimeError("fio is not installed")
    work = Path(tempfile.mkdtemp(prefix="disklab-bench-changed-"))
    workbench = lab_root / "workbench"
    try:
        host_vars = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "disklab_root": str(lab_root),
            "disklab_workbench": str(workbench),
            "lab_run_workbench_create": True,
            "lab_run_steps": STEPS,
            "lab_run_load_repeats": load_repeats,
        }
        inventory = work / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": host_vars}}}))
        reports = work / "reports"

        def lab(label: str, wrap=None) -> tuple[str, float]:
            cmd = _disklab(reports, "run", "-i", str(inventory), "--profile", "quick")
            t0 = time.perf_counter()
            proc = _run(wrap(cmd) if wrap else cmd, timeout_s)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"run {label} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-800:]}"
                )
            runs = sorted((reports / "localhost" / "runs").glob("*.json"))
            return runs[-1].stem, time.perf_counter() - t0

        lab("warm-up")  # the lab venv and the load step's files, made once and kept
        a, a_s = lab("A (quiet)")
        b, b_s = lab("B (quiet)")
        busy_file = workbench / "bench-busy.bin"
        fio_cmd = [
            *(fio, "--name=busy", f"--filename={busy_file}", "--rw=write", "--bs=1M", "--size=1G"),
            *("--direct=1", "--time_based", f"--runtime={int(timeout_s)}", "--output=/dev/null"),
        ]
        background = subprocess.Popen(fio_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(2)  # fio is writing before the run starts
            c, c_s = lab("C (beside fio)")
        finally:
            background.terminate()
            background.wait(timeout=30)
            busy_file.unlink(missing_ok=True)
        name, majmin = _device_numbers(workbench)
        with Throttle(majmin) as throttle:
            d, d_s = lab("D (throttled)", throttle.wrap)
        quiet, busy, slow = _compare(reports, a, b), _compare(reports, b, c), _compare(reports, b, d)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    expected = [f for f in slow["figures"] if _expected_slower(f, throttle.v2)]
    detected = [f for f in expected if f["verdict"] == "changed" and f["direction"] == "up"]
    wrong = [f for f in slow["figures"] if f["verdict"] == "changed" and f["direction"] == "down"]
    busy_side = [f for f in busy["figures"] if f["noise"]["new"] not in ("quiet", "not recorded")]
    judged = quiet["counts"]["judged"]
    out = {
        "status": "ok",
        "title": "changed or busy",
        "steps": STEPS,
        "load_repeats": load_repeats,
        "runs": {"A": a, "B": b, "C": c, "D": d},
        "run_wall_s": {"A": a_s, "B": b_s, "C": c_s, "D": d_s},
        "background": " ".join(fio_cmd[1:]),
        "throttle": f"{throttle.how} ({name})",
        "quiet": {
            "judged": judged,
            "changed": quiet["counts"]["changed"],
            "counts": quiet["counts"],
            "calls": _called(quiet),
            "false_call_rate": quiet["counts"]["changed"] / judged if judged else None,
            "goal": f"at most {FDR:g} of the judged figures (Benjamini–Hochberg at q = {FDR:g})",
        },
        "busy": {
            "judged": busy["counts"]["judged"],
            "changed": busy["counts"]["changed"],
            "disturbed": busy["counts"]["disturbed"],
            "figures_with_disturbed_samples": len(busy_side),
            "calls": _called(busy),
            "goal": "no figure called changed; C's disturbed samples marked",
        },
        "slowdown": {
            "judged": slow["counts"]["judged"],
            "expected_slower": len(expected),
            "detected": len(detected),
            "detection_rate": len(detected) / len(expected) if expected else None,
            "wrong_direction": len(wrong),
            "missed": [
                {"figure": f["label"], "verdict": f["verdict"], "why": f["why"]}
                for f in expected
                if f not in detected
            ],
            "calls": _called(slow),
            "goal": "the cold loads (and, under cgroup v2, the durable syncs) called changed, slower",
        },
    }
    q, bz, s = out["quiet"], out["busy"], out["slowdown"]
    out["met"] = (
        q["changed"] <= FDR * max(judged, 1)
        and bz["changed"] == 0
        and bz["figures_with_disturbed_samples"] > 0
        and s["wrong_direction"] == 0
        and (s["detection_rate"] or 0) >= 0.5
    )
    out["lines"] = [
        f"quiet host: {q['changed']} of {judged} figures called changed (false-call rate "
        f"{(q['false_call_rate'] or 0):.1%}; goal: {q['goal']})",
        f"beside fio: {bz['changed']} of {bz['judged']} called changed, {bz['disturbed']} disturbed, "
        f"{bz['figures_with_disturbed_samples']} figures with disturbed samples marked (goal: {bz['goal']})",
        f"under the throttle: {s['detected']} of {s['expected_slower']} expected figures called changed, "
        f"slower (detection rate {(s['detection_rate'] or 0):.0%}), {s['wrong_direction']} in the wrong "
        "direction"
        + ("" if throttle.v2 else "; no durable sync is among them: cgroup v1 throttles no writeback"),
        f"rates: false calls {(q['false_call_rate'] or 0):.1%} quiet, "
        f"{bz['changed'] / max(bz['judged'], 1):.1%} beside fio; detection {(s['detection_rate'] or 0):.0%}",
    ]
    return out
