"""Part 9, together start: how simultaneous a together run's common start is on the test fleet.

Brings up four hosts of the test fleet (tests/fleet/fleet.py: network namespaces with their own sshd, on
this machine) and runs bench/together_start.yml ``repeats`` times. Each run starts ``disklab_host.pyz
together-start`` on every host and waits until each is ready, measures every host's clock offset to the
controller over its SSH connection (the collection's ``lab_clock`` action), sets one start ``MARGIN_NS``
ahead on the controller's clock, moves it onto each host's clock by that host's offset and writes it to
each host's start file; each host waits for it and records when it started.

The hosts share this machine's kernel clock, so the spread of their raw starts is the true spread the
mechanism achieved: each host's start was moved by its measured offset, whose true value is 0, so the
offsets' measurement error is in it, and so is each wait's overshoot (the scheduler's wake-up). That spread
is judged (goal: within 5 ms). Beside it, what a fleet with separate clocks would be told
(disklab.together.spread): the starts moved back by the measured offsets, and the upper bound with the
offsets' uncertainty; and whether that stated bound held, the true spread being known here.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, summary
from harness_parts import bring_up_fleet

from disklab.together import HostClock, spread
from disklab_host.common.result import parse

HOSTS = 4
FLEET_IDS = range(200, 230)  # tried in turn; the fleet_scaling part uses 230 to 249, the tests others
MARGIN_NS = 2_000_000_000  # the start is set this far ahead: the hosts' launch must fit in it
GOAL_MS = 5.0
PLAYBOOK = REPO / "bench" / "together_start.yml"
ORDINARY = REPO / "bench" / "ordinary_start.yml"


def _playbook(playbook: Path, inventory: Path, extra: list[str], timeout_s: float) -> tuple[float, float]:
    """Run ``playbook`` on ``inventory``'s hosts; (wall s, controller CPU s: user + system of
    ansible-playbook and every process it waited for, from getrusage(RUSAGE_CHILDREN) before and after).
    Raises RuntimeError when it fails."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory), str(playbook),
         *extra],
        capture_output=True, text=True, env=env, timeout=timeout_s, cwd=REPO,
    )  # fmt: skip
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{playbook.name} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-800:]}")
    return wall_s, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def ordinary_run(inventory: Path, pyz: Path, timeout_s: float, margin_ns: int = MARGIN_NS) -> dict:
    """One run of bench/ordinary_start.yml: the same command started the ordinary way; its wall and
    controller CPU seconds."""
    extra = ["-e", f"together_pyz={pyz}", "-e", f"disklab_together_margin_ns={margin_ns}"]
    wall_s, cpu_s = _playbook(ORDINARY, inventory, extra, timeout_s)
    return {"playbook_wall_s": wall_s, "controller_cpu_s": cpu_s}


def one_run(inventory: Path, pyz: Path, out: Path, timeout_s: float, margin_ns: int = MARGIN_NS) -> dict:
    """One run of bench/together_start.yml on ``inventory``'s hosts, the start ``margin_ns`` ahead; its
    clocks, starts and spreads (ms), and its wall and controller CPU seconds. Raises RuntimeError when the
    playbook fails or a host printed no result."""
    extra = ["-e", f"together_pyz={pyz}", "-e", f"disklab_together_margin_ns={margin_ns}", "-e",
             f"together_out={out}"]  # fmt: skip
    wall_s, cpu_s = _playbook(PLAYBOOK, inventory, extra, timeout_s)
    doc = json.loads(out.read_text())
    starts = {host: parse(text) for host, text in doc["start"].items()}
    missing = sorted(h for h, s in starts.items() if s is None)
    if missing:
        raise RuntimeError(f"no together-start result from {', '.join(missing)}")
    clocks = {host: HostClock.from_action(c) for host, c in doc["clock"].items()}
    raw = [s["started_ns"] for s in starts.values()]
    verdict = spread({h: s["started_ns"] for h, s in starts.items()}, clocks,
                     {h: s["late_ns"] for h, s in starts.items()})  # fmt: skip
    raw_spread_ns = max(raw) - min(raw)
    return {
        "raw_spread_ms": raw_spread_ns / 1e6,
        "bound_held": raw_spread_ns <= verdict["spread_bound_ns"],
        "corrected_spread_ms": verdict["spread_ns"] / 1e6,
        "spread_bound_ms": verdict["spread_bound_ns"] / 1e6,
        "together": verdict["together"],
        "why": verdict["why"],
        "late_hosts": verdict["late_hosts"],
        "overshoot_ms": {h: (s["started_ns"] - s["at_ns"]) / 1e6 for h, s in starts.items()},
        "offset_ms": {h: c["offset_ns"] / 1e6 for h, c in doc["clock"].items()},
        "method": {h: c["method"] for h, c in doc["clock"].items()},
        "round_trip_ms": {h: c["round_trip_ns"] / 1e6 for h, c in doc["clock"].items()},
        "playbook_wall_s": wall_s,
        "controller_cpu_s": cpu_s,
    }


def together_start(repeats: int, state_root: Path, timeout_s: float = 600) -> dict:
    """Part 9: ``repeats`` together starts on a four-host test fleet; the spread of the starts in ms.

    Raises RuntimeError (or the fleet's FleetError) when the fleet or a run fails; the fleet is always
    taken down.
    """
    fleet = bring_up_fleet(HOSTS, state_root, FLEET_IDS)
    work = Path(tempfile.mkdtemp(prefix="disklab-bench-together-"))
    try:
        pyz = work / "disklab_host.pyz"
        subprocess.run([sys.executable, "-m", "disklab.ship", str(pyz)], check=True, capture_output=True,
                       cwd=REPO, timeout=120)  # fmt: skip
        runs, ordinary = [], []
        for i in range(repeats):  # side by side: each together start, then the same command the ordinary way
            runs.append(one_run(fleet.inventory_path, pyz, work / f"run{i}.json", timeout_s))
            ordinary.append(ordinary_run(fleet.inventory_path, pyz, timeout_s))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        problems = fleet.down()
    raw = summary([r["raw_spread_ms"] for r in runs], "ms")
    return {
        "status": "ok",
        "title": "together start",
        "quantity": f"spread of {HOSTS} hosts' starts at one common start, one kernel clock",
        "unit": "ms",
        "value": raw,
        "target": {"op": "<=", "value": GOAL_MS},
        "met": raw["median_ms"] <= GOAL_MS,
        "hosts": HOSTS,
        "margin_ms": MARGIN_NS / 1e6,
        "corrected_spread": summary([r["corrected_spread_ms"] for r in runs], "ms"),
        "spread_bound": summary([r["spread_bound_ms"] for r in runs], "ms"),
        "round_trip": summary([min(r["round_trip_ms"].values()) for r in runs], "ms"),
        "called_together": sum(r["together"] for r in runs),
        "bound_held": sum(r["bound_held"] for r in runs),
        "overshoot": summary([max(r["overshoot_ms"].values()) for r in runs], "ms"),
        "controller_cost": {
            "together_cpu": summary([r["controller_cpu_s"] for r in runs], "s"),
            "ordinary_cpu": summary([r["controller_cpu_s"] for r in ordinary], "s"),
            "cpu_ratio": summary(
                [t["controller_cpu_s"] / o["controller_cpu_s"] for t, o in zip(runs, ordinary, strict=True)]
            ),
            "together_wall": summary([r["playbook_wall_s"] for r in runs], "s"),
            "ordinary_wall": summary([r["playbook_wall_s"] for r in ordinary], "s"),
            "wall_ratio": summary(
                [t["playbook_wall_s"] / o["playbook_wall_s"] for t, o in zip(runs, ordinary, strict=True)]
            ),
        },
        "runs": runs,
        "ordinary_runs": ordinary,
        "notes": [
            "judged: the spread of the raw starts, its median over the runs; the hosts share this machine's "
            "kernel clock, so it is the true spread: the offsets' measurement error (each start was moved by "
            "its measured offset, whose true value is 0) and each wait's overshoot",
            "not judged: the spread after moving each start back by its measured offset, and its upper "
            "bound with the offsets' uncertainty (half the best round trip each): what a fleet with separate "
            "clocks would be told; here every true offset is 0, so the measured offsets are the "
            "measurement's error",
            "the hosts are network namespaces of this machine: their waits share its cores, so a busy "
            "machine delays a host's wake-up and widens the spread",
            "not judged: the controller's cost, each together start against the same command started the "
            "ordinary way (bench/ordinary_start.yml: one raw task, the start given at launch), run right "
            "after it: the wall seconds of each playbook and the CPU seconds of ansible-playbook and what it "
            "waited for (its SSH control masters, shared by both, are not counted), and their ratios",
        ],
        "fleet_down_problems": problems,
    }
