"""The one statistics module: how two sets of samples of a figure are judged, and how the verdict is said.

Every place that compares figures reads its verdicts here: ``disklab compare``, ``disklab history``,
the report's sentences that compare methods, **On this host**, the fleet page and predictions.
docs/statistics.md says the same for readers. Controller side, standard library only (the test
statistics are :mod:`disklab.ranktests`).

**The test.** A figure is compared on its *test units*: the samples themselves when each is a run
of its own (a load in a fresh process, one big write, one ceiling read), or the medians of its
batches when the samples are consecutive calls (fsync_bench's rounds; :mod:`disklab.figures` says
which). Values are compared on a log scale, so the effect is a ratio, new over old:

* the two-sided Mann–Whitney U test gives p (exact up to 40 pooled units, else the normal
  approximation; :func:`disklab.ranktests.mann_whitney`);
* the Hodges–Lehmann estimate of the log ratio gives the ratio, with its distribution-free 95 %
  interval (:func:`disklab.ranktests.hodges_lehmann`);
* over the figures judged together (one comparison), the Benjamini–Hochberg procedure turns each p
  into q, so that calling every figure with q <= :data:`FDR` keeps the expected share of false calls
  among the calls at or below :data:`FDR`.

**Three verdicts** (and a fourth for a busy host), with T the minimum effect of the figure's kind
(:data:`MIN_EFFECT`):

* :data:`CHANGED` when q <= :data:`FDR` and the ratio is beyond T (below 1/(1+T) or above 1+T), and,
  where the two sides are two runs of one host, beyond its run-to-run drift D (:class:`Drift`);
* :data:`NO_CHANGE` ("no change beyond ±T") when the ratio's 90 % interval lies inside (1/(1+T), 1+T):
  two one-sided tests at 5 % each (Schuirmann's TOST), the equivalence test at the 5 % level, whose
  interval is the 1 - 2 * 0.05 one (:func:`equivalence_level`);
* :data:`INCONCLUSIVE` otherwise, with how many units a side would decide at this spread
  (:func:`needed_n`). At 3 a side no outcome reaches p < 0.05 (the smallest exact p is 0.10) and there
  is no 95 % interval, so 3 a side is never "changed"; its 90 % interval is the range of the nine
  pairwise ratios, so it can be "no change" when all nine lie well inside ±T (a peak RSS, say);
* :data:`DISTURBED` when a side has units the host disturbed (:mod:`disklab.noise` marks them), the
  undisturbed units alone cannot decide, and all of them together would have been called changed:
  the apparent change rests on a busy host. When the undisturbed units decide, their verdict stands
  and says it was judged on them.

Samples of a run whose noise was not recorded (older runs) are neither quiet nor disturbed: the
verdict says the noise was not recorded.

**Run-to-run drift.** The test reads the spread within each run; its units (a run's samples, or its
rounds of consecutive calls) are taken within seconds of each other. An unchanged host moves between
runs by more than that spread suggests (a VM's storage changing pace, another guest on the hypervisor):
two quiet runs of the project's test VM minutes apart gave fsync medians 1.25× apart, each with tight
rounds. So between two runs of one host (:class:`Drift`) a figure's p is the larger of the within-run
test's and a run-level test's: the log ratio against the spread of the log ratio of two single runs of
the unchanged host, measured from the medians of its comparable earlier runs where there are
:data:`HISTORY_MIN_RUNS` or more (Student's t, k - 1 degrees of freedom), else implied by the figure
kind's assumed drift (:data:`RUN_DRIFT`, a 95 % bound: normal). Its interval is widened by the same
spread. Both tests must reject for a change (an intersection-union test: its level is each one's), and
Benjamini–Hochberg runs over those p-values, so the false-discovery rate holds with the drift in it, as
far as the measured or assumed drift is right. Where the run-level test is what keeps a figure
undecided, the verdict says that more runs, not more samples, would decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from disklab import ranktests
from disklab_host.common.stats import median_interval, percentile

CHANGED, NO_CHANGE, INCONCLUSIVE, DISTURBED = "changed", "no change", "inconclusive", "disturbed"
VERDICTS = (CHANGED, NO_CHANGE, INCONCLUSIVE, DISTURBED)
# Each interval's confidence, and the level a single test is read at.
LEVEL = 0.95
# The false-discovery rate every comparison of several figures controls (Benjamini–Hochberg).
FDR = 0.05
# The minimum effect T of each kind of figure: a ratio within 1/(1+T)..1+T is no change worth calling.
# Why each is where it is, with what quiet runs of the same code moved on the project's test machine,
# is in docs/statistics.md.
MIN_EFFECT = {
    "durable_sync": 0.25,  # a 4 KiB write and a durable sync: fsync, fdatasync, O_DSYNC, F_FULLFSYNC
    "latency": 0.10,  # other per-call times: a write alone, a buffered or unbuffered call
    "load_time": 0.10,  # a load's time to a readiness stage
    "time": 0.10,  # other times in seconds: a big write, its sync
    "rate": 0.10,  # MiB/s: a ceiling read, a big write's rate
    "peak_rss": 0.02,  # a load's peak RSS
    "size": 0.02,  # other byte counts
}
# The run-to-run drift D of each kind where the host's own runs are too few to measure it: a 95 % bound on
# the ratio of two single runs of an unchanged host. Set from what three quiet quick runs of the project's
# test VM, minutes apart, moved at most (docs/statistics.md): durable syncs 1.25×, a write alone 1.41×,
# big_write's times and rates 1.22×, the cold parallel ceiling 1.54×, load times 1.65× (3-sample medians),
# peak RSS not at all. Three runs of one VM are not a 95 % bound for every host: measure yours (3 runs).
RUN_DRIFT = {
    "durable_sync": 0.50,
    "latency": 0.50,
    "load_time": 0.70,
    "time": 0.60,
    "rate": 0.60,
    "peak_rss": 0.01,
    "size": 0.01,
}
# A host's drift is measured from its earlier runs only from this many run medians (the old run's among
# them: two runs before it); at most HISTORY_MAX_RUNS, the latest.
HISTORY_MIN_RUNS = 3
HISTORY_MAX_RUNS = 20
# What "up" and "down" mean for each kind (a higher time is slower, a higher rate faster).
WORDS = {
    "durable_sync": ("slower", "faster"),
    "latency": ("slower", "faster"),
    "load_time": ("slower", "faster"),
    "time": ("slower", "faster"),
    "rate": ("faster", "slower"),
    "peak_rss": ("larger", "smaller"),
    "size": ("larger", "smaller"),
}
# needed_n gives the size a side that decides with this probability (the test's power) at the spread seen.
POWER = 0.8
# needed_n says "more than this" rather than a larger number.
NEEDED_CAP = 200
# The Hodges–Lehmann estimate's asymptotic efficiency against the mean for normal data is 3/pi
# (about 0.955), so its interval is about 1/sqrt(0.955) wider than the t interval (needed_n uses it).
_HL_WIDTH = 1 / math.sqrt(3 / math.pi)


def equivalence_level(level: float = LEVEL) -> float:
    """The confidence of the interval that shows no change at ``level``: 1 - 2 (1 - level), 90 % at 95 %
    (two one-sided tests, each at 1 - level)."""
    return 1 - 2 * (1 - level)


@dataclass
class Side:
    """One run's test units of a figure, and the noise of each.

    ``flags`` holds, per unit, None (quiet) or the reason it was disturbed; None as a whole when the
    run recorded no noise (a run from before results version 6).
    """

    values: Sequence[float]
    flags: Sequence[str | None] | None = None
    # the side's noise in one sentence (disklab.noise.summary), shown beside a verdict it affected
    summary: str | None = None

    @property
    def noise_recorded(self) -> bool:
        return self.flags is not None

    def disturbed(self) -> list[str]:
        return [f for f in (self.flags or []) if f]

    def quiet_values(self) -> list[float]:
        if self.flags is None:
            return list(self.values)
        return [v for v, f in zip(self.values, self.flags, strict=True) if not f]


@dataclass
class Drift:
    """How far a figure moves between two single runs of an unchanged host.

    ``spread`` is the standard deviation of the log ratio of two such runs; ``df`` its degrees of freedom
    (Student's t) where it was measured, None where it is implied by an assumed bound (normal). ``share``
    is its 95 % bound as a share: a ratio within 1/(1+share)..1+share. ``source`` is ``history``
    (measured from ``runs`` run medians of this host, :func:`drift_from_runs`) or ``default``
    (:data:`RUN_DRIFT`, :func:`default_drift`).
    """

    share: float
    source: str
    runs: int = 0
    spread: float = 0.0
    df: int | None = None

    def words(self) -> str:
        if self.source == "history":
            return f"run-to-run drift ±{_pct(self.share)}, measured from {self.runs} runs of this host"
        return (
            f"run-to-run drift ±{_pct(self.share)} assumed (not measured: fewer than {HISTORY_MIN_RUNS} "
            "comparable runs of this host hold the figure)"
        )

    def quantile(self, p: float) -> float:
        """The p quantile of the run-level statistic (t with ``df``, else the standard normal)."""
        return ranktests.t_quantile(p, self.df) if self.df else ranktests.normal_quantile(p)

    def p_value(self, shift: float) -> float:
        """Two-sided p of a log ratio ``shift`` against the spread of two runs of the unchanged host."""
        if self.spread <= 0:
            return 1.0 if shift == 0 else 0.0
        z = abs(shift) / self.spread
        upper = 1 - ranktests.t_cdf(z, self.df) if self.df else 0.5 * math.erfc(z / math.sqrt(2))
        return min(1.0, 2 * upper)


def default_drift(measure: str) -> Drift:
    """The assumed drift of :data:`RUN_DRIFT` for ``measure``: its bound read as 1.96 standard deviations
    of the log ratio of two runs."""
    share = RUN_DRIFT[measure]
    return Drift(share, "default", 0, math.log1p(share) / ranktests.normal_quantile(0.975), None)


def drift_from_runs(medians: Sequence[float], level: float = LEVEL) -> Drift | None:
    """The drift of a figure from the medians of several comparable runs of one host (oldest first; the
    latest :data:`HISTORY_MAX_RUNS`), or None below :data:`HISTORY_MIN_RUNS` runs or with a value at or
    below 0.

    On the log scale the run medians have a standard deviation s (k - 1 degrees of freedom); the log ratio
    of two single runs then has a standard deviation s · sqrt(2), and its ``level`` bound is
    t(level, k - 1) · s · sqrt(2) (a prediction bound, unchanged host assumed).
    """
    values = list(medians)[-HISTORY_MAX_RUNS:]
    logs = _logs(values)
    if logs is None or len(logs) < HISTORY_MIN_RUNS:
        return None
    mean = sum(logs) / len(logs)
    s = math.sqrt(sum((v - mean) ** 2 for v in logs) / (len(logs) - 1))
    df = len(logs) - 1
    spread = s * math.sqrt(2)
    bound = ranktests.t_quantile(1 - (1 - level) / 2, df) * spread
    return Drift(math.expm1(bound), "history", len(logs), spread, df)


@dataclass
class Pair:
    """One figure of two runs to judge: ``measure`` is a key of :data:`MIN_EFFECT`; ``units`` says what
    a value is (``samples``, or ``batches`` of consecutive calls, each its batch's median). ``drift``:
    the two sides are two runs of one host, and a change must pass their run-to-run drift too (None:
    two cells of one run, or two hosts, judged on the samples alone)."""

    old: Side
    new: Side
    measure: str
    units: str = "samples"
    # what the two sides are called where a verdict names them (two cells of one run, two hosts)
    names: tuple[str, str] = ("old run", "new run")
    drift: Drift | None = None
    # the index of another pair of the same family whose samples this pair's are computed from, sample by
    # sample (a rate from its times): judged with that pair, its p is left out of Benjamini–Hochberg's
    # family, which would otherwise count one piece of evidence twice, and it takes that pair's q
    judged_with: int | None = None


def min_effect(measure: str, overrides: dict[str, float] | None = None) -> float:
    """T of ``measure`` (``overrides`` first, then :data:`MIN_EFFECT`); ValueError for an unknown kind."""
    if overrides and measure in overrides:
        return overrides[measure]
    if measure not in MIN_EFFECT:
        raise ValueError(f"measure must be one of {sorted(MIN_EFFECT)}, got {measure!r}")
    return MIN_EFFECT[measure]


def parse_min_effects(items: Sequence[str]) -> dict[str, float]:
    """``["durable_sync=0.5", "load_time=5%"]`` as ``{"durable_sync": 0.5, "load_time": 0.05}``.

    Raises ValueError naming the item for an unknown kind or a share that is not within (0, 10].
    """
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in MIN_EFFECT:
            raise ValueError(
                f"--min-effect takes KIND=SHARE with KIND one of {sorted(MIN_EFFECT)}, got {item!r}"
            )
        try:
            share = float(value[:-1]) / 100 if value.endswith("%") else float(value)
        except ValueError:
            raise ValueError(f"--min-effect {item!r}: {value!r} is not a number or a percentage") from None
        if not 0 < share <= 10:
            raise ValueError(f"--min-effect {item!r}: the share must be within (0, 10] (0.1 or 10 % = ±10 %)")
        out[name] = share
    return out


def _logs(values: Sequence[float]) -> list[float] | None:
    """Natural logs of ``values``, or None when one is at or below zero (no ratio then)."""
    if any(v <= 0 for v in values):
        return None
    return [math.log(v) for v in values]


def _mad(values: list[float]) -> float:
    s = sorted(values)
    med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    dev = sorted(abs(v - med) for v in s)
    mid = len(dev) // 2
    return dev[mid] if len(dev) % 2 else (dev[mid - 1] + dev[mid]) / 2


def spread_of_logs(old: list[float], new: list[float]) -> float:
    """A robust standard deviation of the log values, pooled over both sides (1.4826 × MAD, which
    estimates the SD of normal data); 0 when every value of each side is equal."""
    parts = [(len(v), 1.4826 * _mad(v)) for v in (old, new) if len(v) > 1]
    if not parts:
        return 0.0
    return math.sqrt(sum(n * s * s for n, s in parts) / sum(n for n, _ in parts))


def needed_n(
    shift: float, sigma: float, t: float, level: float = LEVEL, family_p: float | None = None
) -> int:
    """About how many units a side would decide, four times in five (:data:`POWER`), a figure whose log
    ratio is ``shift`` at log spread ``sigma``: an interval of half-width (z + z_power)·sigma·sqrt(2/n)·1.023
    (Hodges–Lehmann) that clears the band
    ±log(1+T) (no change), or, beyond the band, a test that reaches ``family_p`` (changed: the p a
    figure needs to be called among its family, FDR / figures judged, at worst); never fewer than the
    exact test needs to hold an interval and reach that p. Capped at :data:`NEEDED_CAP` + 1 ("more
    than")."""
    band = math.log1p(t)
    deciding_change = abs(shift) >= band
    if deciding_change:
        p = family_p if family_p is not None else 1 - level
        floor = max(ranktests.smallest_n_reaching(p), ranktests.smallest_n_with_interval(level))
    else:  # two one-sided tests at 1 - level: the equivalence interval, two-sided at 2 (1 - level)
        p = 2 * (1 - level)
        floor = ranktests.smallest_n_with_interval(equivalence_level(level))
    if sigma <= 0:
        return floor
    z = ranktests.normal_quantile(1 - p / 2) + ranktests.normal_quantile(POWER)
    room = abs(shift) if deciding_change else band - abs(shift)
    if room <= 0:
        return NEEDED_CAP + 1
    n = math.ceil(2 * (z * sigma * _HL_WIDTH / room) ** 2)
    return min(max(n, floor), NEEDED_CAP + 1)


def _stats(old: Sequence[float], new: Sequence[float], level: float) -> dict | None:
    """p, the ratio and its interval of one pair of unit lists, on the log scale; None without ratio."""
    lo, ln = _logs(old), _logs(new)
    if lo is None or ln is None or not lo or not ln:
        return None
    test = ranktests.mann_whitney(lo, ln)
    hl = ranktests.hodges_lehmann(lo, ln, level)
    eq = ranktests.hodges_lehmann(lo, ln, equivalence_level(level))
    return {
        "p": test["p"],
        "method": test["method"],
        "ties": test["ties"],
        "shift": hl["shift"],
        "low": hl["low"],
        "high": hl["high"],
        "eq_low": eq["low"],
        "eq_high": eq["high"],
        "sigma": spread_of_logs(lo, ln),
        "n_old": len(lo),
        "n_new": len(ln),
        "smallest_p": ranktests.smallest_p(len(lo), len(ln)),
    }


def _with_drift(st: dict | None, drift: Drift | None, level: float) -> dict | None:
    """``st`` between two runs of one host: p the larger of the within-run and run-level p, both intervals
    widened by the run-level spread (each side in quadrature, at each interval's level); the within-run
    values kept apart."""
    if st is None:
        return None
    st = {**st, "p_within": st["p"], "low_within": st["low"], "high_within": st["high"], "p_run": None,
          "eq_low_within": st["eq_low"], "eq_high_within": st["eq_high"]}  # fmt: skip
    if drift is None:
        return st
    st["p_run"] = drift.p_value(st["shift"])
    st["p"] = max(st["p"], st["p_run"])
    for lo, hi, at in (("low", "high", level), ("eq_low", "eq_high", equivalence_level(level))):
        if st[lo] is not None:
            r = drift.quantile(1 - (1 - at) / 2) * drift.spread
            st[lo] = st["shift"] - math.hypot(st["shift"] - st[lo], r)
            st[hi] = st["shift"] + math.hypot(st[hi] - st["shift"], r)
    return st


def _classify(st: dict, q: float, t: float, fdr: float) -> str:
    band = math.log1p(t)
    if q <= fdr and abs(st["shift"]) >= band and st["low"] is not None:
        return CHANGED
    if st["eq_low"] is not None and -band < st["eq_low"] and st["eq_high"] < band:
        return NO_CHANGE
    return INCONCLUSIVE


def method_name(method: str) -> str:
    """The test's name as reports and compare say it (``method``: ranktests.mann_whitney's)."""
    if method == "exact":
        return "exact Mann–Whitney U, Hodges–Lehmann interval"
    return "Mann–Whitney U (normal approximation), Hodges–Lehmann interval"


def judge_many(
    pairs: Sequence[Pair],
    *,
    level: float = LEVEL,
    fdr: float = FDR,
    min_effects: dict[str, float] | None = None,
) -> list[dict]:
    """The verdict of each pair, judged as one family (Benjamini–Hochberg over their p-values).

    Returns one dict per pair, in order::

        {"verdict", "direction": "up" | "down" | None, "words": "slower" | ... | None,
         "ratio", "low", "high" (the ratio's interval, None when these sizes hold none), "level",
         "p", "q", "test", "n_old", "n_new", "units", "measure", "min_effect", "smallest_p",
         "needed_n" (None unless inconclusive), "why": str,
         "noise": {"old": "quiet" | "k of n disturbed" | "not recorded", "new": ..., "judged_on":
                   "all" | "undisturbed", "reasons": [str]}}

    ``ratio`` is exp(the Hodges–Lehmann log shift): new over old. A pair whose values include one at
    or below zero, or with no unit on a side, is inconclusive with the reason. A pair ``judged_with``
    another is not one of the family: it takes that pair's q (its own p, ratio and interval stay its own).
    """
    chosen, full = [], []
    for pair in pairs:
        any_disturbed = bool(pair.old.disturbed() or pair.new.disturbed())
        all_st = _with_drift(_stats(pair.old.values, pair.new.values, level), pair.drift, level)
        quiet_st = (
            _with_drift(_stats(pair.old.quiet_values(), pair.new.quiet_values(), level), pair.drift, level)
            if any_disturbed
            else None
        )
        full.append(all_st)
        chosen.append(quiet_st if any_disturbed else all_st)
    judged = [i for i, st in enumerate(chosen) if st is not None and pairs[i].judged_with is None]
    qs = ranktests.benjamini_hochberg([chosen[i]["p"] for i in judged]) if judged else []
    q_of = dict(zip(judged, qs, strict=True))
    for i, pair in enumerate(pairs):
        if pair.judged_with is not None and chosen[i] is not None and pair.judged_with in q_of:
            q_of[i] = q_of[pair.judged_with]
    # the largest p that BH called (every p at or below it is called): a disturbed pair's full p is read
    # against it, to say whether all its units together would have been called changed
    called = [chosen[i]["p"] for i in judged if q_of[i] <= fdr]
    cut = max(called) if called else fdr / max(len(judged), 1)
    family_p = fdr / max(len(judged), 1)
    out = []
    for i, pair in enumerate(pairs):
        out.append(_verdict(pair, chosen[i], full[i], q_of.get(i), cut, level, fdr, min_effects, family_p))
    return out


def judge(old: Side, new: Side, measure: str, units: str = "samples", **kwargs) -> dict:
    """One figure judged alone (a family of one): see :func:`judge_many`."""
    return judge_many([Pair(old, new, measure, units)], **kwargs)[0]


def _noise_words(side: Side) -> str:
    if not side.noise_recorded:
        return "not recorded"
    k = len(side.disturbed())
    return f"{k} of {len(side.values)} disturbed" if k else "quiet"


def _verdict(
    pair: Pair,
    st: dict | None,
    full: dict | None,
    q: float | None,
    cut: float,
    level: float,
    fdr: float,
    min_effects: dict[str, float] | None,
    family_p: float,
) -> dict:
    t = min_effect(pair.measure, min_effects)
    used_quiet = bool(pair.old.disturbed() or pair.new.disturbed())
    noise = {
        "old": _noise_words(pair.old),
        "new": _noise_words(pair.new),
        "judged_on": "undisturbed" if used_quiet else "all",
        "reasons": [
            f"{name}: {side.summary}"
            for name, side in zip(pair.names, (pair.old, pair.new), strict=True)
            if side.disturbed() and side.summary
        ],
    }
    drift = pair.drift
    base = {
        "units": pair.units,
        "measure": pair.measure,
        "min_effect": t,
        "level": level,
        "noise": noise,
        "drift": None if drift is None else asdict(drift),
        "within_drift": False,
    }
    band = math.log1p(t)
    would_change = (
        full is not None and full["p"] <= cut and abs(full["shift"]) >= band and full["low"] is not None
    )
    if st is None:
        if full is None and pair.old.values and pair.new.values:
            why = "a value at or below zero has no ratio"
        elif used_quiet:
            why = (
                "every unit of a side was disturbed, and all units together would be called changed"
                if would_change
                else "every unit of a side was disturbed, so nothing is left to judge"
            )
        else:
            why = "no sample on one side"
        verdict = DISTURBED if used_quiet and would_change else INCONCLUSIVE
        direction = ("up" if full["shift"] > 0 else "down") if verdict == DISTURBED else None
        return {
            **base,
            "verdict": verdict,
            "direction": direction,
            "words": WORDS[pair.measure][0 if direction == "up" else 1] if direction else None,
            "ratio": math.exp(full["shift"]) if full else None,
            "low": None,
            "high": None,
            "eq_low": None,
            "eq_high": None,
            "eq_level": equivalence_level(level),
            "p": None,
            "q": None,
            "test": None,
            "n_old": len(pair.old.quiet_values()),
            "n_new": len(pair.new.quiet_values()),
            "smallest_p": None,
            "needed_n": None,
            "p_within": None,
            "p_run": None,
            "low_within": None,
            "high_within": None,
            "why": why,
        }
    verdict = _classify(st, q, t, fdr)
    if used_quiet and verdict == INCONCLUSIVE and would_change:
        verdict = DISTURBED
    # undecided by the run-level part: beyond T, the run-level p is what is too large; within T, the
    # within-run interval lies inside ±T but the run-to-run spread widens it past
    within_drift = (
        verdict == INCONCLUSIVE
        and drift is not None
        and (
            st["low_within"] is not None and st["smallest_p"] <= 1 - level and st["p_run"] > st["p_within"]
            if abs(st["shift"]) >= band
            else st["eq_low_within"] is not None
            and -band < st["eq_low_within"]
            and st["eq_high_within"] < band
        )
    )
    direction = None
    if verdict == CHANGED or (verdict == DISTURBED and full):
        shift = st["shift"] if verdict == CHANGED else full["shift"]
        direction = "up" if shift > 0 else "down"
    words = WORDS[pair.measure][0 if direction == "up" else 1] if direction else None
    need = None
    if verdict == INCONCLUSIVE and not within_drift:
        # never fewer than these sizes plus one: they did not decide (the normal estimate is kind at small n)
        need = max(needed_n(st["shift"], st["sigma"], t, level, family_p), min(st["n_old"], st["n_new"]) + 1)
    return {
        **base,
        "verdict": verdict,
        "direction": direction,
        "words": words,
        "ratio": math.exp(st["shift"]),
        "low": None if st["low"] is None else math.exp(st["low"]),
        "high": None if st["high"] is None else math.exp(st["high"]),
        "eq_low": None if st["eq_low"] is None else math.exp(st["eq_low"]),
        "eq_high": None if st["eq_high"] is None else math.exp(st["eq_high"]),
        "eq_level": equivalence_level(level),
        "p": st["p"],
        "q": q,
        "test": method_name(st["method"]),
        "n_old": st["n_old"],
        "n_new": st["n_new"],
        "smallest_p": st["smallest_p"],
        "needed_n": need,
        "p_within": st["p_within"],
        "p_run": st["p_run"],
        "low_within": None if st["low_within"] is None else math.exp(st["low_within"]),
        "high_within": None if st["high_within"] is None else math.exp(st["high_within"]),
        "within_drift": within_drift,
        "why": _why(verdict, st, q, t, fdr, level, need, full, drift, within_drift),
    }


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %" if share * 100 >= 1 else f"{share * 100:.1g} %"


def _why(verdict, st, q, t, fdr, level, need, full, drift: Drift | None = None, within_drift=False) -> str:
    """The verdict's reason in a few words (what decided it, or what would)."""
    band = f"±{_pct(t)}"
    if within_drift and abs(st["shift"]) >= math.log1p(t):
        return (
            f"the runs differ (within-run p = {st['p_within']:.2g}) beyond {band}, but by no more than the "
            f"{drift.words()} allows (run-level p = {st['p_run']:.2g}): more samples cannot tell a changed "
            "host from that, more runs can"
        )
    if within_drift:
        return (
            f"the runs agree within {band}, but the {drift.words()} widens the interval past it: more "
            "runs, not more samples, would show no change"
        )
    drifted = f", the {drift.words()} included" if drift is not None else ""
    if verdict == CHANGED:
        return f"q = {q:.2g} <= {fdr:g} and the ratio is beyond {band}{drifted}"
    if verdict == NO_CHANGE:
        return (
            f"the {equivalence_level(level) * 100:g} % interval lies inside {band}{drifted} (two one-sided "
            f"tests at {(1 - level) * 100:g} % each)"
        )
    if verdict == DISTURBED:
        return (
            f"all units together would be called changed ({math.exp(full['shift']):.2f}×), but the "
            "undisturbed ones alone cannot decide"
        )
    n = min(st["n_old"], st["n_new"])
    more = f"more than {NEEDED_CAP}" if need > NEEDED_CAP else f"about {need}"
    eq = f"{equivalence_level(level) * 100:g} %"
    if abs(st["shift"]) < math.log1p(t):
        if st["eq_low"] is None:
            return f"n = {n} a side holds no {eq} interval; {more} a side would decide at this spread"
        small = (
            f"n = {n} a side cannot reach p < {1 - level:g} (its smallest exact p is "
            f"{st['smallest_p']:.2g}), so it can show no change but never a change; "
            if st["smallest_p"] > 1 - level
            else ""
        )
        return f"{small}the {eq} interval crosses {band}{drifted}; {more} a side would decide at this spread"
    if st["low"] is None or st["smallest_p"] > 1 - level:
        return (
            f"n = {n} a side cannot reach p < {1 - level:g} (its smallest exact p is {st['smallest_p']:.2g}) "
            f"and holds no {level * 100:g} % interval; {more} a side would decide at this spread"
        )
    return (
        f"the ratio is beyond {band} but q = {q:.2g} > {fdr:g} (p = {st['p']:.2g}); "
        f"{more} a side would decide at this spread"
    )


def ratio_text(x: float | None) -> str:
    """A ratio: three decimals within 5 % of 1 (``0.999×``), two below 10 (``1.32×``), fewer above;
    ``n/a`` for None."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if x >= 100:
        return f"{x:,.0f}×"
    if x >= 10:
        return f"{x:.1f}×"
    return f"{x:.3f}×" if 0.95 <= x <= 1.05 else f"{x:.2f}×"


def shows_equivalence(j: dict) -> bool:
    """True when a verdict's question is "no change?": no change, or inconclusive with the ratio inside ±T;
    its interval is then the 90 % one of the two one-sided tests (where these sizes hold one)."""
    if j.get("eq_low") is None or j["ratio"] is None:
        return False
    inside = abs(math.log(j["ratio"])) < math.log1p(j["min_effect"])
    return j["verdict"] == NO_CHANGE or (j["verdict"] == INCONCLUSIVE and inside)


def interval_text(j: dict) -> str:
    """``95 % interval 1.21×..1.45×`` (the ratio's), or ``no 95 % interval at n = 3 a side``; where the
    question is no change (:func:`shows_equivalence`), the 90 % interval (``90 % interval 0.99×..1.01×``)."""
    eq = shows_equivalence(j)
    low, high, at = (
        (j["eq_low"], j["eq_high"], j["eq_level"]) if eq else (j.get("low"), j.get("high"), j["level"])
    )
    level = f"{at * 100:g} %"
    if low is None:
        return f"no {level} interval at n = {min(j['n_old'], j['n_new'])} a side"
    drifted = ", run-to-run drift included" if j.get("drift") else ""
    return f"{level} interval {ratio_text(low)}..{ratio_text(high)}{drifted}"


def sentence(j: dict) -> str:
    """The verdict in one line, naming the verdict, the test, n and the interval::

    changed: 1.32× slower (95 % interval 1.21×..1.45×; exact Mann–Whitney U, Hodges–Lehmann
    interval; n = 10 batches a side; q = 0.003; T = ±25 %)
    """
    n = (
        f"n = {j['n_old']} {j['units']} a side"
        if j["n_old"] == j["n_new"]
        else f"n = {j['n_old']} and {j['n_new']} {j['units']}"
    )
    t = f"T = ±{_pct(j['min_effect'])}"
    if j["test"] is None:
        busy = "".join(f"; {r}" for r in j["noise"]["reasons"])
        ratio = f"{ratio_text(j['ratio'])} on all units, " if j["ratio"] is not None else ""
        return f"{j['verdict']}: {ratio}{j['why']} ({n}; {t}{busy})"
    head = {
        CHANGED: f"changed: {ratio_text(j['ratio'])} {j['words']}",
        NO_CHANGE: f"no change beyond ±{_pct(j['min_effect'])}: {ratio_text(j['ratio'])}",
        INCONCLUSIVE: f"inconclusive: {ratio_text(j['ratio'])}",
        DISTURBED: f"disturbed: {ratio_text(j['ratio'])} on the undisturbed units",
    }[j["verdict"]]
    q = f"; q = {j['q']:.2g}" if j["q"] is not None else ""
    tail = "" if j["verdict"] in (CHANGED, NO_CHANGE) else f"; {j['why']}"
    judged = "; judged on the undisturbed units" if j["noise"]["judged_on"] == "undisturbed" else ""
    busy = "".join(f"; {r}" for r in j["noise"]["reasons"])
    drift = f"; {Drift(**j['drift']).words()}" if j.get("drift") and not tail else ""
    return f"{head} ({interval_text(j)}; {j['test']}; {n}{q}; {t}{drift}{judged}{tail}{busy})"


def _short_test(j: dict) -> str:
    return "exact Mann–Whitney" if j["test"].startswith("exact") else "Mann–Whitney, normal approximation"


def brief(j: dict) -> str:
    """The verdict in a few words for a sentence of the report: the verdict, the ratio, its interval,
    n and the test; what would decide an inconclusive one; why a disturbed one is not called."""
    n = f"n = {j['n_old']} a side" if j["n_old"] == j["n_new"] else f"n = {j['n_old']} and {j['n_new']}"
    if j["test"] is None:
        busy = f" ({j['noise']['reasons'][0]})" if j["noise"]["reasons"] else ""
        return f"{j['verdict']}: {j['why']}{busy}"
    interval = interval_text(j)
    if j["verdict"] == CHANGED:
        q = f", q = {j['q']:.2g}" if j["q"] is not None else ""
        return f"changed: {ratio_text(j['ratio'])} {j['words']} ({interval}; {_short_test(j)}, {n}{q})"
    if j["verdict"] == NO_CHANGE:
        return f"no change beyond ±{_pct(j['min_effect'])} ({ratio_text(j['ratio'])}, {interval}; {n})"
    if j["verdict"] == DISTURBED:
        busy = f"; {j['noise']['reasons'][0]}" if j["noise"]["reasons"] else ""
        return f"disturbed: not called changed, the host was busy ({ratio_text(j['ratio'])}{busy})"
    if j.get("within_drift"):
        drift = Drift(**j["drift"]).words()
        if abs(math.log(j["ratio"])) >= math.log1p(j["min_effect"]):
            return f"inconclusive: the runs differ ({ratio_text(j['ratio'])}; {n}), within the {drift}"
        return f"inconclusive: the runs agree within ±{_pct(j['min_effect'])}, but the {drift} is wider"
    need = f"more than {NEEDED_CAP}" if j["needed_n"] > NEEDED_CAP else f"about {j['needed_n']}"
    beyond = abs(math.log(j["ratio"])) >= math.log1p(j["min_effect"])
    if (j["low"] is None or j["smallest_p"] > 1 - j["level"]) if beyond else j.get("eq_low") is None:
        return f"inconclusive: {n} cannot decide ({ratio_text(j['ratio'])}; {need} a side would)"
    return f"inconclusive ({ratio_text(j['ratio'])}, {interval}; {n}; {need} a side would decide)"


def against_value(units: Sequence[float], value: float, factor: float, level: float = LEVEL) -> dict:
    """Whether a figure's median is within ``factor`` of a given value (a prediction), judged on the
    median's distribution-free interval (disklab_host.common.stats.median_interval of its units).

    Returns ``{"verdict": "within" | "above" | "below" | "undecided", "ratio" (median / value), "low",
    "high" (the interval over the value), "coverage", "n"}``: ``within`` when the whole interval lies
    within value/factor..value·factor, ``above``/``below`` when it lies wholly beyond, ``undecided``
    when it straddles a bound. Below 6 units the interval is their whole range, whose coverage is under
    95 % (75 % at 3): the answer says so. Raises ValueError for no units or a value not above 0.
    """
    if not value > 0:
        raise ValueError(f"the value must be above 0, got {value!r}")
    ci = median_interval(list(units), level)
    med = percentile(sorted(units), 50)
    lo, hi = ci["low"] / value, ci["high"] / value
    if 1 / factor <= lo and hi <= factor:
        verdict = "within"
    elif lo > factor:
        verdict = "above"
    elif hi < 1 / factor:
        verdict = "below"
    else:
        verdict = "undecided"
    return {
        "verdict": verdict,
        "ratio": med / value,
        "low": lo,
        "high": hi,
        "coverage": ci["coverage"],
        "n": ci["n"],
    }


def expected_false_calls(n_judged: int, fdr: float = FDR, judged_with: int = 0) -> str:
    """What a comparison of ``n_judged`` figures says of its false calls, in one sentence; ``judged_with``
    of them are judged with another figure whose samples theirs are computed from (Pair.judged_with), so
    the family is ``n_judged - judged_with``."""
    if not n_judged:
        return "no figure had samples to judge"
    n = n_judged - judged_with
    with_other = (
        f" ({judged_with} more figure{'s' if judged_with != 1 else ''}, computed sample by sample from "
        f"another's, {'take' if judged_with != 1 else 'takes'} that figure's verdict and "
        f"{'are' if judged_with != 1 else 'is'} not counted twice)"
        if judged_with
        else ""
    )
    return (
        f"Benjamini–Hochberg at q = {fdr:g} over {n} judged figure{'s' if n != 1 else ''}{with_other}: "
        f"of the figures called changed, at most {fdr * 100:g} % are expected to be false calls, and "
        f"where nothing changed the chance of any call is at most {fdr * 100:g} % (each figure tested "
        f"alone at p < {fdr:g} would expect {n * fdr:.1f} false calls); between two runs of one "
        "host this holds as far as each figure's run-to-run drift, measured or assumed, is right"
    )
