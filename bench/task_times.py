"""Where a run's seconds went, per host and task, from the artifacts ansible-runner kept.

    python bench/task_times.py REPORTS/.artifacts/RUN_ID [--playbook site] [--top 25]

Reads ``<playbook>/job_events/*.json`` (every event of the run) and sums each
task's ``duration`` (ansible-runner's event_data: the time from the task's
start on that host to its result) per host. The rest of the wall time, from
the first event to the last, is Ansible's own work between tasks (forking
workers, templating, the play's bookkeeping) and is shown as its own line.
The lab itself is the task that polls it ("Run the storage lab experiments on
the host"): everything else is the harness's fixed cost per host.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections import defaultdict
from pathlib import Path

RESULT_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")
LAB_TASKS = ("Start the storage lab experiments on the host", "Run the storage lab experiments on the host")


def _when(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp).timestamp()


def breakdown(artifacts: Path, playbook: str = "site") -> dict:
    """``{"wall_s", "hosts": {host: {"tasks": [[task, s, n]...], "task_s", "lab_s", "fixed_s"}}}``.

    ``tasks`` is sorted by time, largest first; ``n`` counts the task's results
    (a loop or an include gives several). ``lab_s`` is the time of the lab
    tasks (LAB_TASKS), ``fixed_s`` the wall time less ``lab_s``: the harness's
    cost for that host. Raises FileNotFoundError when there are no events.
    """
    events_dir = Path(artifacts) / playbook / "job_events"
    events = []
    for path in sorted(events_dir.glob("*.json")):
        try:
            events.append(json.loads(path.read_text()))
        except ValueError:
            continue  # a file being written when the run was stopped
    if not events:
        raise FileNotFoundError(f"no job events under {events_dir}")
    created = [_when(e["created"]) for e in events if e.get("created")]
    wall_s = max(created) - min(created)
    per_host: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for e in events:
        data = e.get("event_data", {})
        if e.get("event") not in RESULT_EVENTS or "duration" not in data or not data.get("host"):
            continue
        cell = per_host[data["host"]][data.get("task", "?")]
        cell[0] += float(data["duration"])
        cell[1] += 1
    hosts = {}
    for host, tasks in sorted(per_host.items()):
        rows = sorted(([t, round(s, 3), n] for t, (s, n) in tasks.items()), key=lambda r: -r[1])
        lab_s = sum(s for t, s, _ in rows if t in LAB_TASKS)
        task_s = sum(s for _, s, _ in rows)
        hosts[host] = {
            "tasks": rows,
            "task_s": round(task_s, 3),
            "between_tasks_s": round(wall_s - task_s, 3),
            "lab_s": round(lab_s, 3),
            "fixed_s": round(wall_s - lab_s, 3),
        }
    return {"artifacts": str(artifacts), "playbook": playbook, "wall_s": round(wall_s, 3), "hosts": hosts}


def render(b: dict, top: int = 25) -> str:
    lines = [f"{b['artifacts']} ({b['playbook']}): {b['wall_s']:.1f} s from the first event to the last"]
    for host, h in b["hosts"].items():
        lines.append(
            f"\n{host}: lab {h['lab_s']:.1f} s, harness {h['fixed_s']:.1f} s "
            f"(tasks {h['task_s'] - h['lab_s']:.1f} s, between tasks {h['between_tasks_s']:.1f} s)"
        )
        lines.append(f"  {'s':>7}  {'n':>3}  task")
        for task, s, n in h["tasks"][:top]:
            lines.append(f"  {s:7.2f}  {n:3d}  {task}")
        if len(h["tasks"]) > top:
            rest = sum(s for _, s, _ in h["tasks"][top:])
            lines.append(f"  {rest:7.2f}  {len(h['tasks']) - top:3d}  (the other tasks)")
        lines.append(f"  {h['between_tasks_s']:7.2f}       (Ansible between tasks)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifacts", type=Path, help="reports/.artifacts/<run_id>")
    ap.add_argument("--playbook", default="site", help="site (disklab run) or audit (disklab audit)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        b = breakdown(args.artifacts, args.playbook)
    except FileNotFoundError as exc:
        print(f"task_times: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(b, indent=2) if args.json else render(b, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
