"""A cold-start storm's figures: N hosts load one copy of the model, cold, from shared storage, at once.

A round is one method at one N (a production loader of ``lab_run_load_loaders`` is a method too): the first N
clients in the play's order, the same every time (roles/together chooses them), each make the file cold in
their own page cache and start their load call at one common start (disklab_host.together.load); a host
where a loader cannot run says why (``not_run``), and the round's figures are the other hosts'. Each host's
sample says when its load call started on its own clock (``together.started_ns``) and how long each readiness
stage took from there; its clock offset to the controller's (the collection's lab_clock) moves the start
onto the controller's clock, so every host's start and end are on one time line.

For each round and readiness stage (:data:`STAGES`), as elbencho and IOR define them:

- each host's time (the stage's ``time_s``) and its slowdown: that time over the N = 1 time (the median of
  the N = 1 rounds, one host loading alone);
- ``first_done_s`` and ``last_done_s``: from the first start to the first and to the last host's end
  (elbencho's "First Done" and "Last Done");
- ``aggregate_bytes_per_s`` at ``all_touched`` only: every host's file bytes over (last end minus first
  start), IOR's aggregate. At ``first_response`` a mapped loader has not read every byte, so no byte count
  is known to divide.

A round's figures are simultaneous only when its starts were together (disklab.together.spread), and cold
only when every host's sample was proven cold (loadlab.proof); each round says which it is and why not.
Each round runs together_repeats times (its ``repeat``). Across N, per method and stage (:func:`figures`):
the median host's time at each N over its rounds, and the verdicts of disklab.stormverdicts: each N against
N = 1, the first N shown to double, and where a mapped method is shown behind torch.load (eager reads).
"""

from __future__ import annotations

import re
import statistics

from . import stormverdicts, together

STAGES = ("first_response", "all_touched")


def natural(name: str) -> list:
    """host2 before host10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def round_figures(rnd: dict, bound_ns: int = together.DEFAULT_BOUND_NS) -> dict:
    """One round's figures. ``rnd``: {"n", "method", "repeat" (1 when absent), "hosts": {host: {"clock":
    lab_clock's result, "sample": together-load's sample} or {"failed": why} or, a production loader that
    cannot run on that host, {"not_run": why}}}."""
    ran = {h: r for h, r in rnd["hosts"].items() if "sample" in r}
    not_run = {h: r["not_run"] for h, r in rnd["hosts"].items() if "not_run" in r}
    failed = {h: r["failed"] for h, r in rnd["hosts"].items() if "failed" in r}
    hosts = sorted(rnd["hosts"], key=natural)
    out = {"n": rnd["n"], "method": rnd["method"], "repeat": rnd.get("repeat", 1), "hosts": hosts,
           "failed": failed, "not_run": not_run}  # fmt: skip
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
    """Every round's figures, and per method and stage: the median host's time at each N over the rounds
    there (each round's median, then their median), each host's slowdown against it at N = 1, and each N
    judged against N = 1; then each mapped method judged against torch.load at each N
    (disklab.stormverdicts: the rounds are the test units, one family per run).

    Returns {"rounds": [...], "methods": {method: {stage: {"median_s": {N: s}, "rounds": {N: count},
    "clean": {N: count}, "reference_s": the N = 1 time or None, "against_one": {N: verdict}, "doubling_n":
    N or None, "doubling_unshown": [N, ...]}}}, "mapped_behind": {method: {...}}, "family": {...} or None}
    (stormverdicts.mapped_behind, stormverdicts.family)."""
    done = [round_figures(r, bound_ns) for r in rounds]
    units = stormverdicts.units_of(done)
    judged = stormverdicts.judge(units)
    methods: dict[str, dict] = {}
    for method in dict.fromkeys(r["method"] for r in done):
        mine = [r for r in done if r["method"] == method]
        per_stage = {}
        for stage in STAGES:
            ns = sorted(n for (m, st, n) in units if m == method and st == stage)
            medians = {n: statistics.median(v for v, _ in units[(method, stage, n)]) for n in ns}
            ref = medians.get(1)
            for r in mine:
                fig = r["stages"].get(stage)
                if fig is not None:
                    fig["slowdown"] = {h: t / ref for h, t in fig["time_s"].items()} if ref else None
            against = {
                n: judged[("one", method, stage, n)] for n in ns if ("one", method, stage, n) in judged
            }
            per_stage[stage] = {
                "median_s": medians,
                "rounds": {n: len(units[(method, stage, n)]) for n in ns},
                "clean": {n: sum(1 for _, why in units[(method, stage, n)] if not why) for n in ns},
                "reference_s": ref,
                "against_one": against,
                **stormverdicts.doubling(against),
            }
        methods[method] = per_stage
    return {
        "rounds": done,
        "methods": methods,
        "mapped_behind": stormverdicts.behind_all(judged),
        "family": stormverdicts.family(judged),
    }
