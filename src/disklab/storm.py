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
Each round runs ``repeat`` times (together_repeats). Across N, per method and stage (:func:`figures`): the
median host's time at each N over its rounds, each N judged against N = 1 with the rounds as test units
(disklab.verdicts), and the first N shown at least twice as slow (:func:`doubling`). :func:`mapped_behind`
says at which N, and from which N on, a mapped method is shown slower than torch.load (eager reads) at
``all_touched``, from these rounds.
"""

from __future__ import annotations

import re
import statistics

from . import together, verdicts

STAGES = ("first_response", "all_touched")
EAGER = "torch.load"
MAPPED = ("torch.load-mmap", "load_file", "load_file+willneed")


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


def _flag(r: dict) -> str | None:
    """Why a round is not a clean unit of the storm's verdicts (verdicts.Side's flag), or None: its starts
    were not together, a sample was not proven cold, or fewer than its N hosts loaded."""
    why = []
    if r["spread"] is None or not r["spread"]["together"]:
        why.append("not simultaneous")
    if not r["cold"]:
        why.append("not proven cold")
    loaded = len(r["stages"].get("all_touched", {}).get("time_s", {}))
    if loaded < r["n"]:
        why.append(f"{loaded} of {r['n']} hosts loaded")
    return ", ".join(why) or None


def _side(units: list[tuple[float, str | None]]) -> verdicts.Side:
    """The rounds of one method at one N and stage as a verdicts.Side: each round's median host time, and
    why a round is not clean (:func:`_flag`), counted in the side's summary."""
    flags = [f for _, f in units]
    bad = [f for f in flags if f]
    summary = f"{len(bad)} of {len(flags)} rounds {'; '.join(sorted(set(bad)))}" if bad else None
    return verdicts.Side([v for v, _ in units], flags, summary)


def figures(rounds: list[dict], bound_ns: int = together.DEFAULT_BOUND_NS) -> dict:
    """Every round's figures, and per method and stage: the median host's time at each N over the rounds
    there (each round's median, then their median), each host's slowdown against it at N = 1, and each N
    judged against N = 1; then each mapped method judged against torch.load at each N.

    The test units are rounds: the hosts of one round load at once and slow each other, so a round's median
    host time is one unit, and each repeat of a round (together_repeats) is another. Every comparison on the
    page is one family (:func:`disklab.verdicts.judge_many`: Mann–Whitney, Hodges–Lehmann ratio and
    interval, Benjamini–Hochberg). A round that is not simultaneous, not proven cold or short of hosts is a
    disturbed unit (:func:`_flag`): judged without it when the others decide.

    Returns {"rounds": [...], "methods": {method: {stage: {"median_s": {N: s}, "rounds": {N: count},
    "reference_s": the N = 1 time or None, "against_one": {N: verdict}, "doubling_n": N or None,
    "doubling_unshown": [N, ...]}}}, "mapped_behind": {method: {...}}} (:func:`mapped_behind`)."""
    done = [round_figures(r, bound_ns) for r in rounds]
    units: dict[tuple, list[tuple[float, str | None]]] = {}  # (method, stage, N) -> [(round median, flag)]
    for r in done:
        for stage, fig in r["stages"].items():
            units.setdefault((r["method"], stage, r["n"]), []).append((fig["median_s"], _flag(r)))
    pairs, where = [], []
    for method, stage, n in units:
        if n > 1 and (method, stage, 1) in units:
            pairs.append(verdicts.Pair(_side(units[(method, stage, 1)]), _side(units[(method, stage, n)]),
                                       "load_time", "rounds", ("N = 1", f"N = {n}")))  # fmt: skip
            where.append(("one", method, stage, n))
    for method in MAPPED:
        for stage, n in [(st, n) for (m, st, n) in units if m == method and st == "all_touched"]:
            if (EAGER, stage, n) in units:
                pairs.append(verdicts.Pair(_side(units[(EAGER, stage, n)]), _side(units[(method, stage, n)]),
                                           "load_time", "rounds", (EAGER, method)))  # fmt: skip
                where.append(("eager", method, stage, n))
    judged = dict(zip(where, verdicts.judge_many(pairs), strict=True)) if pairs else {}
    methods: dict[str, dict] = {}
    for method in dict.fromkeys(r["method"] for r in done):
        per_stage = {}
        for stage in STAGES:
            ns = sorted(n for (m, st, n) in units if m == method and st == stage)
            medians = {n: statistics.median(v for v, _ in units[(method, stage, n)]) for n in ns}
            ref = medians.get(1)
            for r in done:
                fig = r["stages"].get(stage) if r["method"] == method else None
                if fig is not None:
                    fig["slowdown"] = {h: t / ref for h, t in fig["time_s"].items()} if ref else None
            against = {
                n: judged[("one", method, stage, n)] for n in ns if ("one", method, stage, n) in judged
            }
            per_stage[stage] = {
                "median_s": medians,
                "rounds": {n: len(units[(method, stage, n)]) for n in ns},
                "reference_s": ref,
                "against_one": against,
                **doubling(against),
            }
        methods[method] = per_stage
    behind = {
        method: mapped_behind(
            {n: j for (kind, m, _, n), j in judged.items() if kind == "eager" and m == method}
        )
        for method in MAPPED
        if any(kind == "eager" and m == method for (kind, m, _, _) in judged)
    }
    return {"rounds": done, "methods": methods, "mapped_behind": behind}


def doubling(against: dict[int, dict]) -> dict:
    """From each N's verdict against N = 1 (verdicts.judge_many's dicts): ``doubling_n``, the first N shown
    slower (changed) by at least twice (the Hodges–Lehmann ratio at least 2), None when none is; and
    ``doubling_unshown``, the N before it whose ratio is at least 2 but whose slowdown these rounds do not
    show (inconclusive or disturbed)."""
    unshown = []
    for n in sorted(against):
        j = against[n]
        if j["ratio"] is None or j["ratio"] < 2:
            continue
        if j["verdict"] == verdicts.CHANGED and j["direction"] == "up":
            return {"doubling_n": n, "doubling_unshown": unshown}
        unshown.append(n)
    return {"doubling_n": None, "doubling_unshown": unshown}


def doubling_text(m: dict) -> str:
    """The "doubles at" cell of one method and stage (:func:`figures`' per-stage dict)."""
    if not m["reference_s"]:
        return "n/a (no N = 1 time)"
    unshown = ", ".join(
        f"{verdicts.ratio_text(m['against_one'][n]['ratio'])} at N = {n}" for n in m["doubling_unshown"]
    )
    if m["doubling_n"] is not None:
        j = m["against_one"][m["doubling_n"]]
        before = f"; {unshown}, not shown" if unshown else ""
        return (
            f"N = {m['doubling_n']} ({verdicts.ratio_text(j['ratio'])}, {verdicts.interval_text(j)}){before}"
        )
    most = max(m["median_s"])
    if unshown:
        return f"not shown by N = {most} ({unshown}, without the rounds to show it)"
    return f"not by N = {most} (every ratio under 2×)"


def mapped_behind(by_n: dict[int, dict]) -> dict:
    """One mapped method against torch.load at all_touched, from each N's verdict (judged eager as old,
    mapped as new): ``at``, the N at which it is shown slower (changed, up); ``ahead``, shown faster;
    ``same``, shown within the minimum effect (no change); ``undecided``, the rest; ``from``, the least N
    from which it is shown behind at every N measured (None when the last N is not one of them); ``ns``, the
    N compared; ``verdicts``: each N's verdict in a few words (verdicts.brief)."""
    common = sorted(by_n)

    def shown(j: dict, direction: str) -> bool:
        return j["verdict"] == verdicts.CHANGED and j["direction"] == direction

    at = [n for n in common if shown(by_n[n], "up")]
    tail = next((i for i in range(len(common)) if all(shown(by_n[n], "up") for n in common[i:])), None)
    return {
        "at": at,
        "ahead": [n for n in common if shown(by_n[n], "down")],
        "same": [n for n in common if by_n[n]["verdict"] == verdicts.NO_CHANGE],
        "undecided": [n for n in common if by_n[n]["verdict"] in (verdicts.INCONCLUSIVE, verdicts.DISTURBED)],
        "from": common[tail] if tail is not None else None,
        "ns": common,
        "verdicts": {n: verdicts.brief(by_n[n]) for n in common},
    }


def behind_text(v: dict) -> str:
    """:func:`mapped_behind`'s verdict for one method as the pages say it, after the method's name."""
    eager = f"`{EAGER}` (eager reads)"

    def listed(ns: list[int]) -> str:
        return ", ".join(map(str, ns))

    if v["from"] is not None:
        said = f"falls behind {eager} from N = {v['from']} on, shown at every N measured from there"
    elif v["at"]:
        said = f"is shown behind {eager} at N = {listed(v['at'])} only"
    else:
        said = f"is not shown behind {eager} at any N measured (N = {listed(v['ns'])})"
    rest = [f"ahead at N = {listed(v['ahead'])}" if v.get("ahead") else "",
            f"no slower beyond the minimum effect at N = {listed(v['same'])}" if v.get("same") else "",
            f"undecided at N = {listed(v['undecided'])}" if v.get("undecided") else ""]  # fmt: skip
    rest = [r for r in rest if r]
    return said + (f" ({'; '.join(rest)})" if rest else "")
