"""A cold-start storm's figures: N hosts load one copy of the model, cold, from shared storage, at once.

A round is one method at one N: the first N clients in the play's order, the same every time (roles/together
chooses them), each make the file cold in their own page cache and start their load call at one common
start (disklab_host.together.load). Each host's sample says when its load call started on its own clock
(``together.started_ns``) and how long each readiness stage took from there; its clock offset to the
controller's (the collection's lab_clock) moves the start onto the controller's clock, so every host's start
and end are on one time line.

For each round and readiness stage (:data:`STAGES`), as elbencho and IOR define them:

- each host's time (the stage's ``time_s``) and its slowdown: that time over the N = 1 round's time, the
  one host loading alone;
- ``first_done_s`` and ``last_done_s``: from the first start to the first and to the last host's end
  (elbencho's "First Done" and "Last Done");
- ``aggregate_bytes_per_s`` at ``all_touched`` only: every host's file bytes over (last end minus first
  start), IOR's aggregate. At ``first_response`` a mapped loader has not read every byte, so no byte count
  is known to divide.

A round's figures are simultaneous only when its starts were together (disklab.together.spread), and cold
only when every host's sample was proven cold (loadlab.proof); each round says which it is and why not.
Across N, per method and stage: the median host's time at each N, and the first N at which it is twice the
N = 1 time (:func:`doubling_n`), or None when no N measured reached it. :func:`mapped_behind` says at which N,
and from which N on, a mapped method's median time at ``all_touched`` exceeds torch.load's (eager reads), from
these numbers.
"""

from __future__ import annotations

import re
import statistics

from . import together

STAGES = ("first_response", "all_touched")
EAGER = "torch.load"
MAPPED = ("torch.load-mmap", "load_file", "load_file+willneed")


def natural(name: str) -> list:
    """host2 before host10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def round_figures(rnd: dict, bound_ns: int = together.DEFAULT_BOUND_NS) -> dict:
    """One round's figures. ``rnd``: {"n", "method", "hosts": {host: {"clock": lab_clock's result,
    "sample": together-load's sample} or {"failed": why}}}."""
    ran = {h: r for h, r in rnd["hosts"].items() if "sample" in r}
    failed = {h: r["failed"] for h, r in rnd["hosts"].items() if "sample" not in r}
    hosts = sorted(rnd["hosts"], key=natural)
    out = {"n": rnd["n"], "method": rnd["method"], "hosts": hosts, "failed": failed}
    if not ran:
        return {**out, "spread": None, "cold": False, "not_cold": {}, "stages": {}}
    clocks = {h: together.HostClock.from_action(r["clock"]) for h, r in ran.items()}
    starts = {h: r["sample"]["together"]["started_ns"] for h, r in ran.items()}
    late = {h: r["sample"]["together"]["late_ns"] for h, r in ran.items()}
    spread = together.spread(starts, clocks, late, bound_ns)
    not_cold = {h: r["sample"]["cache_state"] for h, r in ran.items() if r["sample"]["cache_state"] != "cold"}
    begin = {h: starts[h] - clocks[h].offset_ns for h in ran}  # on the controller's clock
    first_start = min(begin.values())
    stages = {}
    for stage in STAGES:
        times = {h: r["sample"]["stages"].get(stage, {}).get("time_s") for h, r in ran.items()}
        times = {h: t for h, t in times.items() if t is not None}
        if not times:
            continue
        ends = {h: begin[h] + round(t * 1e9) for h, t in times.items()}
        last_end = max(ends.values())
        fig = {
            "time_s": {h: times[h] for h in sorted(times, key=natural)},
            "first_done_s": (min(ends.values()) - first_start) / 1e9,
            "last_done_s": (last_end - first_start) / 1e9,
            "median_s": statistics.median(times.values()),
        }
        if stage == "all_touched" and last_end > first_start:
            total = sum(ran[h]["sample"]["file_size_bytes"] for h in times)
            fig["aggregate_bytes_per_s"] = total / ((last_end - first_start) / 1e9)
        stages[stage] = fig
    return {**out, "spread": spread, "cold": not not_cold, "not_cold": not_cold, "stages": stages}


def figures(rounds: list[dict], bound_ns: int = together.DEFAULT_BOUND_NS) -> dict:
    """Every round's figures, and per method and stage: each host's slowdown against N = 1, the median host's
    time at each N and the N at which it doubles. Returns {"rounds": [...], "methods": {method: {stage:
    {"median_s": {N: s}, "doubling_n": N or None, "reference_s": the N = 1 time or None}}}, "mapped_behind":
    {method: N or None}}."""
    done = [round_figures(r, bound_ns) for r in rounds]
    methods: dict[str, dict] = {}
    for method in dict.fromkeys(r["method"] for r in done):
        mine = sorted((r for r in done if r["method"] == method), key=lambda r: r["n"])
        per_stage = {}
        for stage in STAGES:
            medians = {r["n"]: r["stages"][stage]["median_s"] for r in mine if stage in r["stages"]}
            ref = medians.get(1)
            for r in mine:
                fig = r["stages"].get(stage)
                if fig is not None:
                    fig["slowdown"] = {h: t / ref for h, t in fig["time_s"].items()} if ref else None
            per_stage[stage] = {"median_s": medians, "reference_s": ref, "doubling_n": doubling_n(medians)}
        methods[method] = per_stage
    return {"rounds": done, "methods": methods, "mapped_behind": mapped_behind(methods)}


def doubling_n(medians: dict[int, float]) -> int | None:
    """The first N whose median time is at least twice the N = 1 time; None when none is (or no N = 1)."""
    ref = medians.get(1)
    if not ref:
        return None
    return next((n for n in sorted(medians) if n > 1 and medians[n] >= 2 * ref), None)


def mapped_behind(methods: dict) -> dict[str, dict]:
    """For each mapped method measured beside torch.load, at all_touched and the N both have: ``at``, the N
    at which its median time exceeds torch.load's; ``from``, the least N from which it does at every N
    measured (None when the last N is not one of them); ``ns``, the N compared. A method behind at N = 1
    only is behind ``at`` [1] and ``from`` None: it does not fall behind as N grows."""
    eager = methods.get(EAGER, {}).get("all_touched", {}).get("median_s", {})
    out = {}
    for method in MAPPED:
        mine = methods.get(method, {}).get("all_touched", {}).get("median_s", {})
        common = sorted(set(mine) & set(eager))
        if not common:
            continue
        at = [n for n in common if mine[n] > eager[n]]
        tail = next((i for i in range(len(common)) if all(mine[n] > eager[n] for n in common[i:])), None)
        out[method] = {"at": at, "from": common[tail] if tail is not None else None, "ns": common}
    return out


def behind_text(v: dict) -> str:
    """:func:`mapped_behind`'s verdict for one method as the pages say it, after the method's name."""
    eager = f"`{EAGER}` (eager reads)"
    listed = ", ".join
    if v["from"] is not None:
        return f"falls behind {eager} from N = {v['from']} on, at every N measured from there"
    if v["at"]:
        ahead = [n for n in v["ns"] if n not in v["at"]]
        return f"is behind {eager} at N = {listed(map(str, v['at']))}, not at N = {listed(map(str, ahead))}"
    return f"is not behind {eager} at any N measured (N = {listed(map(str, v['ns']))})"
