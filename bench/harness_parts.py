"""Parts 3 and 4: what Ansible and the controller add around the lab.

Part 3, harness overhead: ``disklab run`` on localhost at the quick profile,
against the lab runner (disklab_host.lab, from the shipped zipapp) started directly with the lab
venv's Python and the very config.json and host.json that a ``disklab run``
wrote. A first ``disklab run`` is a warm-up, not measured: it makes sure the
lab venv exists, so every measured run reuses it (same ``disklab_root``).

Part 4, fleet scaling: ``disklab audit`` on one host of the test fleet and on
all 16, timed with Python's perf_counter around the CLI in a fresh process.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import task_times
import yaml
from common import REPO, judged_part, pair_orders, summary

FLEET_HOSTS = 16
FLEET_IDS = range(230, 250)  # fleet ids tried in turn; the tests use others
# Targets: disklab run / the lab runner alone, and the harness's fixed cost per host at the quick profile.
OVERHEAD_TARGET = 1.05
FIXED_COST_TARGET_S = 8.0
# Controller CPU per host at 16 hosts / at 1 host.
CPU_PER_HOST_TARGET = 1.2
FLEET_MODULE = REPO / "tests" / "fleet" / "fleet.py"


def _fleet_module():
    """The test fleet's module (tests/fleet/fleet.py), loaded from its file: no sys.path edit."""
    spec = importlib.util.spec_from_file_location("disklab_test_fleet", FLEET_MODULE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def bring_up_fleet(hosts: int, state_root: Path, fleet_ids: range):
    """A test fleet of ``hosts`` hosts (300 MiB workbenches) under ``state_root``, with the first fleet id
    of ``fleet_ids`` that comes up; raises RuntimeError naming the last failures when none does."""
    fleet_module = _fleet_module()
    # mkfs.*, sshd, ip and losetup live in /usr/sbin or /sbin, which a non-root PATH can lack
    path = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join(path + [d for d in ("/usr/sbin", "/sbin") if d not in path])
    errors = []
    for fid in fleet_ids:
        try:
            return fleet_module.Fleet.up(hosts, state_root / f"f{fid}", fleet_id=fid, size_mib=300)
        except (fleet_module.FleetError, ValueError) as exc:
            errors.append(f"{fid}: {exc}")
    raise RuntimeError(f"no test fleet could be brought up: {errors[-3:]}")


def _timed(cmd: list[str], timeout_s: float, cpu: list[float] | None = None, **kw) -> float:
    """Run ``cmd`` to completion; its wall time in s. Raises RuntimeError on a non-zero exit.

    With ``cpu``, appends the user+system CPU s of ``cmd`` and the descendants
    it waited for (getrusage(2) RUSAGE_CHILDREN): on the fleet that is the
    controller's CPU (ansible, ssh clients), not the hosts' (their processes
    are children of each host's sshd).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, **kw)
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip()[-800:]
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}: {tail}")
    if cpu is not None:
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return wall_s


def _disklab(reports: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "disklab.cli", "--reports", str(reports), *args]


def lab_duration_s(results_path: Path) -> float:
    """finished_utc - started_utc of one lab.py results file, in s (lab.py's own clock)."""
    doc = json.loads(Path(results_path).read_text())
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
    start, end = (dt.datetime.strptime(doc[k], fmt) for k in ("started_utc", "finished_utc"))
    return (end - start).total_seconds()


def step_walls_s(results_path: Path) -> dict[str, float]:
    """Each step's own wall time (step_wall_s) in one results file, in s: where a slower lab is slower."""
    doc = json.loads(Path(results_path).read_text())
    return {name: sec["step_wall_s"] for name, sec in doc["experiments"].items() if "step_wall_s" in sec}


def _newest_run_dir(lab_root: Path) -> Path:
    runs = sorted((lab_root / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    return runs[-1]


def harness_overhead(lab_root: Path, repeats: int, steps: list[str] | None, timeout_s: float = 1800) -> dict:
    """Part 3: ``repeats`` pairs of ``disklab run`` (quick) and lab.py started directly, in s.

    ``lab_root`` is the ``disklab_root`` of both (its venv is reused; the
    warm-up run creates it when missing). ``steps`` overrides lab_run_steps
    (None: the role's default). Raises RuntimeError when a run fails.
    """
    work = Path(tempfile.mkdtemp(prefix="disklab-bench-harness-"))
    try:
        host_vars = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "disklab_root": str(lab_root),
            "disklab_workbench": str(lab_root / "workbench"),
            "lab_run_workbench_create": True,
        }
        if steps:
            host_vars["lab_run_steps"] = steps
        inventory = work / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": host_vars}}}))
        reports = work / "reports"
        run_cmd = _disklab(reports, "run", "-i", str(inventory), "--profile", "quick")
        warmup_s = _timed(run_cmd, timeout_s, cwd=REPO)
        src = _newest_run_dir(lab_root)
        config, facts = work / "config.json", work / "host.json"
        shutil.copy(src / "host.json", facts)
        cfg = json.loads((src / "config.json").read_text())
        direct_out = work / "direct"
        direct_out.mkdir()
        samples: dict[str, list[float]] = {"disklab_run": [], "lab_py_direct": []}
        cpu: dict[str, list[float]] = {k: [] for k in samples}
        inside_s = []  # per disklab run: how long its lab.py ran, from the results it wrote
        direct_inside_s = []  # the same per direct run: its wall less this is the runner's own start and exit
        steps_s: dict[str, list[dict]] = {k: [] for k in samples}  # per run: each step's wall time
        breakdowns = []  # per disklab run: seconds per task, from its kept artifacts (bench/task_times.py)
        for i, order in enumerate(pair_orders(repeats, ("disklab_run", "lab_py_direct"))):
            for name in order:
                if name == "disklab_run":
                    samples[name].append(_timed(run_cmd, timeout_s, cpu[name], cwd=REPO))
                    inside_s.append(lab_duration_s(_newest_run_dir(lab_root) / "results.json"))
                    steps_s[name].append(step_walls_s(_newest_run_dir(lab_root) / "results.json"))
                    kept = max((reports / ".artifacts").iterdir(), key=lambda d: d.stat().st_mtime)
                    breakdowns.append(task_times.breakdown(kept, "site"))
                    continue
                cfg["run_id"] = f"bench-direct-{i}"
                config.write_text(json.dumps(cfg))
                direct = [
                    str(lab_root / "venv" / "bin" / "python"),
                    str(lab_root / "disklab_host.pyz"), "lab",
                    "--config", str(config), "--facts", str(facts),
                    "--out", str(direct_out / f"{i}.json"),
                ]  # fmt: skip
                samples[name].append(_timed(direct, timeout_s, cpu[name], cwd=lab_root))
                direct_inside_s.append(lab_duration_s(direct_out / f"{i}.json"))
                steps_s[name].append(step_walls_s(direct_out / f"{i}.json"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    part = judged_part(
        title="harness overhead",
        quantity=f"wall time of the quick profile (steps: {', '.join(cfg['steps'])})",
        unit="s",
        sides=samples,
        target={"op": "<=", "value": OVERHEAD_TARGET},
        notes=[
            "lab_py_direct uses the config.json and host.json of a disklab run, the lab venv's Python "
            "and the staged host zipapp, exactly as the lab_run role starts it",
            "disklab_run includes argument checks, fact gathering, staging, preflight, the pip check of the "
            "venv, the host audit, the lab, the fetch, storing and rendering the report",
        ],
    )
    part["warmup_disklab_run_s"] = warmup_s
    part["lab_inside_disklab_run_s"] = inside_s
    part["cpu"] = {k: summary(v, "s") for k, v in cpu.items()}
    part["overhead_outside_lab_s"] = summary(
        [w - x for w, x in zip(samples["disklab_run"], inside_s, strict=True)], "s"
    )
    # The lab runner's own start-up and exit (interpreter, imports, lock, teardown) lie outside its
    # started_utc..finished_utc on both sides: the direct side's share is the runner's, not the harness's.
    part["lab_inside_direct_s"] = direct_inside_s
    part["runner_outside_lab_s"] = summary(
        [w - x for w, x in zip(samples["lab_py_direct"], direct_inside_s, strict=True)], "s"
    )
    gross = part["overhead_outside_lab_s"]["median_s"]
    runner_own = part["runner_outside_lab_s"]["median_s"]
    fixed = gross - runner_own
    part["fixed_cost_per_host"] = {"median_s": fixed, "gross_median_s": gross,
                                   "runner_own_median_s": runner_own, "target_s": FIXED_COST_TARGET_S,
                                   "met": fixed <= FIXED_COST_TARGET_S}  # fmt: skip
    part["met"] = part["met"] and fixed <= FIXED_COST_TARGET_S
    part["task_breakdown"] = median_breakdown(breakdowns)
    part["step_wall_s"] = {  # the lab's own steps on each side: a lab slower inside disklab run shows here
        step: {
            side: summary([run[step] for run in runs if step in run], "s")["median_s"]
            for side, runs in steps_s.items()
        }
        for step in cfg["steps"]
        if all(any(step in run for run in runs) for runs in steps_s.values())
    }
    part["steps"] = cfg["steps"]
    return part


def median_breakdown(breakdowns: list[dict], host: str = "localhost") -> dict:
    """The median seconds of each task over several runs' breakdowns (task_times.breakdown) of ``host``."""
    per_task: dict[str, list[float]] = {}
    for b in breakdowns:
        for task, s, _ in b["hosts"][host]["tasks"]:
            per_task.setdefault(task, []).append(s)
    extra = {k: summary([b["hosts"][host][k] for b in breakdowns], "s")["median_s"]
             for k in ("lab_s", "fixed_s", "between_tasks_s")}  # fmt: skip
    rows = sorted(((t, summary(v, "s")["median_s"]) for t, v in per_task.items()), key=lambda r: -r[1])
    return {"runs": len(breakdowns), **extra, "tasks_median_s": [[t, round(s, 3)] for t, s in rows]}


def fleet_scaling(repeats: int, state_root: Path, timeout_s: float = 900) -> dict:
    """Part 4: ``repeats`` pairs of ``disklab audit`` on 16 fleet hosts and on 1, in s.

    Brings up a 16-host test fleet (tests/fleet/fleet.py; root, sshd, loop
    mounts) under ``state_root`` with the first free fleet id in FLEET_IDS, and
    always takes it down. Raises RuntimeError (or the fleet's FleetError) when
    the fleet or an audit fails.
    """
    fleet = bring_up_fleet(FLEET_HOSTS, state_root, FLEET_IDS)
    reports = Path(tempfile.mkdtemp(prefix="disklab-bench-fleet-"))
    try:
        inv = str(fleet.inventory_path)
        cmds = {
            "audit_16_hosts": _disklab(reports, "audit", "-i", inv),
            "audit_1_host": _disklab(reports, "audit", "-i", inv, "--limit", "host0"),
        }
        warmup_s = _timed(cmds["audit_16_hosts"], timeout_s, cwd=REPO)
        samples: dict[str, list[float]] = {k: [] for k in cmds}
        cpu: dict[str, list[float]] = {k: [] for k in cmds}
        for order in pair_orders(repeats, tuple(cmds)):
            for name in order:
                samples[name].append(_timed(cmds[name], timeout_s, cpu[name], cwd=REPO))
    finally:
        shutil.rmtree(reports, ignore_errors=True)
        problems = fleet.down()
    per_host = {
        f"audit_{FLEET_HOSTS}_hosts": [c / FLEET_HOSTS for c in cpu["audit_16_hosts"]],
        "audit_1_host": [c / 1 for c in cpu["audit_1_host"]],
    }
    # Judged on the controller's CPU per host (the target); the wall times are kept beside it and
    # not judged: the hosts are network namespaces of this machine, so their own work shares its cores.
    part = judged_part(
        title="fleet scaling",
        quantity=f"controller CPU s per host of disklab audit, {FLEET_HOSTS} hosts vs 1 host",
        unit="s",
        sides=per_host,
        target={"op": "<=", "value": CPU_PER_HOST_TARGET},
        notes=[
            "controller CPU: user+sys of disklab audit and the processes it waited for (ansible-playbook, "
            "its forks, the ssh clients); the hosts' own work runs under their sshd and is not in it",
            "hosts are network namespaces of this machine: they share its CPUs, disk and page cache, so the "
            "wall times (kept in 'wall', not judged) grow with the host count on 2 cores",
        ],
    )
    part["warmup_audit_16_hosts_s"] = warmup_s
    part["controller_cpu"] = {k: summary(v, "s") for k, v in cpu.items()}
    part["wall"] = {
        **{k: summary(v, "s") for k, v in samples.items()},
        "ratio_16_to_1": summary(
            [a / b for a, b in zip(samples["audit_16_hosts"], samples["audit_1_host"], strict=True)]
        ),
    }
    part["controller_cpu_per_host"] = {
        **{k: summary(v, "s") for k, v in per_host.items()},
        "ratio_16_to_1": part["ratio"],
        "target": part["target"],
        "met": part["met"],
    }
    part["machine_cpus"] = os.cpu_count()
    part["fleet_down_problems"] = problems
    return part
