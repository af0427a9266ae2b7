"""The cold-start storm's verdicts: each N against N = 1, and mapped loading against eager reads.

The test units are rounds (disklab.storm's round figures): the N hosts of one round load at once and slow
each other, so their times are not N independent draws. A round's median host time is one unit; each repeat
of the round (together_repeats) is another. Every comparison of one run is judged as one family by
:func:`disklab.verdicts.judge_many` (Mann–Whitney U, the Hodges–Lehmann ratio and its interval,
Benjamini–Hochberg). A round that was not simultaneous, not proven cold or short of hosts is a disturbed
unit (:func:`flags`): judged without it where the other rounds decide.

- each N > 1 against N = 1, per method and readiness stage: :func:`doubling` finds the first N whose ratio's
  whole 95 % interval is at or above 2× and whose slowdown the family calls (*changed*);
- each mapped method against ``torch.load`` at ``all_touched`` and each N both have: :func:`mapped_behind`.

:func:`family` says what the family's size asks of one comparison: with m comparisons, a lone change is
called only at p <= q / m, and the exact test at k rounds a side cannot give a p below 2 / C(2k, k). The
2× of "doubles" is read on each comparison's own 95 % interval, not one widened for the family.
Controller side, standard library only.
"""

from __future__ import annotations

import math
from collections import Counter

from . import ranktests, verdicts

EAGER = "torch.load"
MAPPED = ("torch.load-mmap", "load_file", "load_file+willneed")
FACTOR = 2.0  # "doubles": the ratio to N = 1 whose interval must lie at or above it
MEASURE = "load_time"  # verdicts.MIN_EFFECT's kind of a load's time to a readiness stage

Units = dict[tuple[str, str, int], list[tuple[float, tuple[str, ...]]]]


def flags(r: dict) -> tuple[str, ...]:
    """Why a round (disklab.storm.round_figures) is not a clean unit: its starts were not together, a sample
    was not proven cold, or fewer than its N hosts loaded. Empty when it is clean."""
    why = []
    if r["spread"] is None or not r["spread"]["together"]:
        why.append("not simultaneous")
    if not r["cold"]:
        why.append("not proven cold")
    loaded = len(r["stages"].get("all_touched", {}).get("time_s", {}))
    if loaded < r["n"]:
        why.append("short of hosts")
    return tuple(why)


def units_of(done: list[dict]) -> Units:
    """(method, stage, N) -> each round's (median host time, :func:`flags`), in the rounds' order; a round
    with no time at a stage gives no unit there."""
    out: Units = {}
    for r in done:
        for stage, fig in r["stages"].items():
            out.setdefault((r["method"], stage, r["n"]), []).append((fig["median_s"], flags(r)))
    return out


def side(units: list[tuple[float, tuple[str, ...]]]) -> verdicts.Side:
    """One N's rounds as a verdicts.Side, each round's flag its reasons, and the side's summary counting
    each reason on its own ("2 of 5 rounds not simultaneous, 1 of 5 not proven cold")."""
    count = Counter(why for _, whys in units for why in whys)
    total = len(units)
    said = [f"{k} of {total} {'rounds ' if i == 0 else ''}{why}" for i, (why, k) in enumerate(count.items())]
    return verdicts.Side(
        [v for v, _ in units], [", ".join(whys) or None for _, whys in units], ", ".join(said) or None
    )


def judge(units: Units) -> dict[tuple, dict]:
    """Every comparison of one run, judged as one family: ("one", method, stage, N) for N against N = 1, and
    ("eager", method, "all_touched", N) for a mapped method against torch.load."""
    pairs, where = [], []
    for method, stage, n in units:
        if n > 1 and (method, stage, 1) in units:
            old, new = side(units[(method, stage, 1)]), side(units[(method, stage, n)])
            pairs.append(verdicts.Pair(old, new, MEASURE, "rounds", ("N = 1", f"N = {n}")))
            where.append(("one", method, stage, n))
    for method, stage, n in units:
        if method in MAPPED and stage == "all_touched" and (EAGER, stage, n) in units:
            old, new = side(units[(EAGER, stage, n)]), side(units[(method, stage, n)])
            pairs.append(verdicts.Pair(old, new, MEASURE, "rounds", (EAGER, method)))
            where.append(("eager", method, stage, n))
    judged = dict(zip(where, verdicts.judge_many(pairs), strict=True)) if pairs else {}
    for pair, key in zip(pairs, where, strict=True):  # a disturbed verdict names the ratio of every round
        if judged[key]["verdict"] == verdicts.DISTURBED:
            logs = [[math.log(v) for v in one.values] for one in (pair.old, pair.new)]
            judged[key] = {**judged[key], "ratio_all": math.exp(ranktests.hodges_lehmann(*logs)["shift"])}
    return judged


def family(judged: dict[tuple, dict]) -> dict | None:
    """What the family asks of one comparison: its ``size`` (the comparisons Benjamini–Hochberg counts: those
    with a p), the ``lone_p`` at or below which a change is called when it is the only one (q / size), and
    how many comparisons, at the rounds each was judged on, cannot reach it but can reach q (``short_alone``:
    the least p the exact test can give them lies between) or cannot be called at all (``never``: above q,
    or no test); None when nothing was judged."""
    if not judged:
        return None
    tested = [j for j in judged.values() if j["p"] is not None]
    lone_p = verdicts.FDR / max(len(tested), 1)
    least = [j["smallest_p"] for j in tested]
    return {
        "size": len(tested),
        "lone_p": lone_p,
        "short_alone": sum(1 for p in least if lone_p < p <= verdicts.FDR),
        "never": sum(1 for p in least if p > verdicts.FDR) + len(judged) - len(tested),
        "min_effect": verdicts.MIN_EFFECT[MEASURE],
    }


def doubling(against: dict[int, dict]) -> dict:
    """From each N's verdict against N = 1: ``doubling_n``, the first N whose slowdown the family calls
    (changed, up) with the whole 95 % interval of its ratio at or above :data:`FACTOR`, None when none is;
    and ``doubling_unshown``, the N before it whose estimated ratio is at least :data:`FACTOR` but not shown
    to be (not called, or its interval reaching below)."""
    unshown = []
    for n in sorted(against):
        j = against[n]
        if j["ratio"] is None or j["ratio"] < FACTOR:
            continue
        called = j["verdict"] == verdicts.CHANGED and j["direction"] == "up"
        if called and j["low"] is not None and j["low"] >= FACTOR:
            return {"doubling_n": n, "doubling_unshown": unshown}
        unshown.append(n)
    return {"doubling_n": None, "doubling_unshown": unshown}


def doubling_text(m: dict) -> str:
    """The "doubles at" cell of one method and stage (disklab.storm.figures' per-stage dict)."""
    if not m["median_s"]:
        return "no round gave a time"
    if not m["reference_s"]:
        return "n/a (no N = 1 time)"
    if len(m["median_s"]) == 1:
        return "n/a (only N = 1 was measured)"
    unshown = ", ".join(
        f"{verdicts.ratio_text(m['against_one'][n]['ratio'])} at N = {n}" for n in m["doubling_unshown"]
    )
    if m["doubling_n"] is not None:
        j = m["against_one"][m["doubling_n"]]
        before = f"; {unshown}, not shown to be 2×" if unshown else ""
        ratio = verdicts.ratio_text(j["ratio"])
        return f"N = {m['doubling_n']} ({ratio}, {verdicts.interval_text(j)}){before}"
    most = max(m["median_s"])
    if unshown:
        return f"not shown by N = {most} ({unshown}, estimated, not shown to be 2×)"
    return f"not by N = {most} (every estimated ratio under 2×)"


def verdict_text(j: dict) -> str:
    """One comparison in a few words (verdicts.brief), except where rounds that were not clean decide what
    it says: a storm's round is set aside for how it ran (not together, not cold, short of hosts), not for a
    busy host, and the words say so."""
    why = "; ".join(j["noise"]["reasons"]) or "some rounds were not clean"
    if j["verdict"] == verdicts.DISTURBED:
        ratio = verdicts.ratio_text(j.get("ratio_all", j["ratio"]))
        return f"disturbed: {ratio} with every round ({why}); the clean rounds alone cannot decide"
    if j["test"] is None and j["noise"]["judged_on"] == "undisturbed":
        return f"inconclusive: every round of a side was not clean ({why})"
    return verdicts.brief(j)


def mapped_behind(by_n: dict[int, dict]) -> dict:
    """One mapped method against torch.load at all_touched, from each N's verdict (eager as old, mapped as
    new): ``at``, the N at which it is shown slower (changed, up); ``ahead``, shown faster; ``same``, shown
    within the minimum effect (no change); ``undecided``, the rest; ``from``, the least N from which it is
    shown behind at every N measured (None when the last N is not one of them); ``ns``, the N compared;
    ``min_effect``; ``verdicts``: each N's verdict in a few words (:func:`verdict_text`)."""
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
        "min_effect": verdicts.MIN_EFFECT[MEASURE],
        "verdicts": {n: verdict_text(by_n[n]) for n in common},
    }


def behind_all(judged: dict[tuple, dict]) -> dict[str, dict]:
    """:func:`mapped_behind` of each mapped method judged against torch.load."""
    out = {}
    for method in MAPPED:
        by_n = {n: j for (kind, m, _, n), j in judged.items() if kind == "eager" and m == method}
        if by_n:
            out[method] = mapped_behind(by_n)
    return out


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
    band = f"±{100 * v.get('min_effect', verdicts.MIN_EFFECT[MEASURE]):g} %"
    rest = [f"ahead at N = {listed(v['ahead'])}" if v.get("ahead") else "",
            f"no change beyond {band} at N = {listed(v['same'])}" if v.get("same") else "",
            f"undecided at N = {listed(v['undecided'])}" if v.get("undecided") else ""]  # fmt: skip
    rest = [r for r in rest if r]
    return said + (f" ({'; '.join(rest)})" if rest else "")
