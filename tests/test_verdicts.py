"""The statistics module: each verdict's rule at tiny sizes, with samples built to sit on each side of it.

The rank statistics are checked against brute force here (every arrangement counted, every shift tried),
never against disklab's own numbers; the verdicts against their stated thresholds.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from disklab import noise, ranktests, verdicts
from disklab.verdicts import CHANGED, DISTURBED, INCONCLUSIVE, NO_CHANGE, Side

# --- the rank statistics, against brute force -------------------------------------------------------


def _brute_p(old: list[float], new: list[float]) -> float:
    """Two-sided exact p of the rank-sum test by trying every split of the pooled values: twice the
    smaller tail of the old side's rank sum (mid-ranks for ties), at most 1."""
    pooled = old + new
    order = sorted(pooled)
    rank = {v: (order.index(v) + 1 + len(order) - order[::-1].index(v)) / 2 for v in pooled}
    seen = sum(rank[v] for v in old)
    sums = [sum(rank[pooled[i]] for i in c) for c in itertools.combinations(range(len(pooled)), len(old))]
    low = sum(s <= seen + 1e-9 for s in sums)
    high = sum(s >= seen - 1e-9 for s in sums)
    return min(1.0, 2 * min(low, high) / len(sums))


@pytest.mark.parametrize("seed", range(6))
def test_the_exact_p_is_the_count_of_every_arrangement(seed):
    rng = random.Random(seed)
    m, n = rng.randint(2, 7), rng.randint(2, 7)
    tied = seed % 2 == 1  # odd seeds round to one decimal: ties
    old = [round(rng.gauss(0, 1), 1 if tied else 9) for _ in range(m)]
    new = [round(rng.gauss(0.7, 1), 1 if tied else 9) for _ in range(n)]
    got = ranktests.mann_whitney(old, new)
    assert got["method"] == "exact"
    assert got["p"] == pytest.approx(_brute_p(old, new))


def test_three_a_side_cannot_reach_five_percent_and_hold_no_interval():
    assert ranktests.smallest_p(3, 3) == pytest.approx(2 / math.comb(6, 3)) == pytest.approx(0.1)
    assert ranktests.mann_whitney([1, 2, 3], [10, 11, 12])["p"] == pytest.approx(0.1)  # fully apart
    hl = ranktests.hodges_lehmann([1, 2, 3], [10, 11, 12])
    assert (hl["low"], hl["high"], hl["k"]) == (None, None, 0)
    assert ranktests.smallest_n_with_interval() == 4 and ranktests.smallest_n_reaching(0.05) == 4
    assert ranktests.smallest_n_reaching(0.05 / 60) == 7  # one change among 60 figures


def test_the_interval_holds_exactly_the_shifts_the_test_does_not_reject():
    """Test inversion: a shift inside the Hodges–Lehmann 95 % interval leaves p above 0.05 when taken off
    the new side; one just outside it does not (no ties, exact sizes)."""
    rng = random.Random(3)
    old = [rng.gauss(0, 1) for _ in range(8)]
    new = [rng.gauss(1.0, 1) for _ in range(9)]
    hl = ranktests.hodges_lehmann(old, new)
    eps = 1e-9
    for shift in (hl["low"] + eps, hl["shift"], hl["high"] - eps):
        assert ranktests.mann_whitney(old, [x - shift for x in new])["p"] > 0.05
    for shift in (hl["low"] - 1e-6, hl["high"] + 1e-6):
        assert ranktests.mann_whitney(old, [x - shift for x in new])["p"] <= 0.05
    assert hl["shift"] == pytest.approx(statistics.median(b - a for a in old for b in new))


def test_benjamini_hochberg_matches_its_definition():
    p = [0.01, 0.04, 0.03, 0.20]
    # sorted: 0.01 (4*0.01/1=0.04), 0.03 (4*0.03/2=0.06), 0.04 (4*0.04/3=0.0533), 0.20 (0.20): step-up minima
    assert ranktests.benjamini_hochberg(p) == pytest.approx([0.04, 0.05333, 0.05333, 0.20], rel=1e-3)
    assert ranktests.benjamini_hochberg([]) == []


def test_the_normal_approximation_takes_over_above_forty_pooled_units():
    rng = random.Random(4)
    got = ranktests.mann_whitney([rng.random() for _ in range(21)], [rng.random() + 0.3 for _ in range(20)])
    assert got["method"] == "normal" and 0 < got["p"] < 0.01


# --- the verdicts, on each side of each threshold ---------------------------------------------------


def _around(center: float, n: int, spread: float = 0.01) -> list[float]:
    """``n`` values spread evenly ±``spread`` (a share) around ``center``: a tight, known sample."""
    return [center * (1 + spread * (2 * i / max(n - 1, 1) - 1)) for i in range(n)]


def test_three_a_side_is_inconclusive_however_far_apart():
    j = verdicts.judge(Side([1.0, 1.01, 0.99]), Side([10.0, 10.1, 9.9]), "load_time")
    assert j["verdict"] == INCONCLUSIVE and j["low"] is None
    assert "n = 3 a side cannot reach p < 0.05" in j["why"] and j["needed_n"] >= 4
    assert "inconclusive: n = 3 a side cannot decide" in verdicts.brief(j)


def test_three_a_side_show_no_change_when_all_nine_ratios_lie_well_inside_the_band():
    """Two one-sided tests at 5 % each: at 3 a side the 90 % interval is the range of the nine pairwise
    ratios (coverage 1 - 2/20), so a peak RSS that moved 0.13 % is no change beyond ±2 %, even with the
    assumed run-to-run drift (±1 %) in it; nine ratios that reach past the band are inconclusive."""
    hl = ranktests.hodges_lehmann([1.0, 2.0, 3.0], [1.5, 2.5, 3.5], level=0.90)
    assert (hl["low"], hl["high"]) == (-1.5, 2.5)  # the smallest and largest of the nine differences
    old, new = Side(_around(619.14, 3, 0.0005)), Side(_around(618.33, 3, 0.0005))
    drift = verdicts.default_drift("peak_rss")
    j = verdicts.judge_many([verdicts.Pair(old, new, "peak_rss", drift=drift)])[0]
    assert j["verdict"] == NO_CHANGE and j["low"] is None and j["eq_level"] == pytest.approx(0.90)
    assert 1 / 1.02 < j["eq_low"] < 618.33 / 619.14 < j["eq_high"] < 1.02
    assert "90 % interval" in verdicts.sentence(j) and "two one-sided tests" in j["why"]
    wide = verdicts.judge(Side([100.0, 101.0, 99.0]), Side([99.5, 103.0, 100.2]), "peak_rss")
    assert wide["verdict"] == INCONCLUSIVE and wide["eq_high"] > 1.02
    assert "n = 3 a side cannot reach p < 0.05" in wide["why"] and "90 % interval crosses ±2 %" in wide["why"]
    assert "90 % interval" in verdicts.brief(wide)  # the interval the question "no change?" is read on
    far = verdicts.judge(Side([1.0, 1.01, 0.99]), Side([10.0, 10.1, 9.9]), "load_time")
    assert "no 95 % interval at n = 3 a side" in verdicts.sentence(far)  # beyond ±T: the question is change


@pytest.mark.parametrize(
    ("ratio", "verdict"),
    [(1.5, CHANGED), (1.15, CHANGED), (1.05, NO_CHANGE), (1.0, NO_CHANGE), (0.85, CHANGED)],
)
def test_a_load_time_is_changed_beyond_ten_percent_and_no_change_well_inside_it(ratio, verdict):
    """Eight tight samples a side (±1 %): 1.15× is beyond ±10 % and called; 1.05× is a real shift (p < 0.01),
    but its whole interval lies inside ±10 %: no change worth calling."""
    j = verdicts.judge(Side(_around(1.0, 8)), Side(_around(ratio, 8)), "load_time")
    assert j["verdict"] == verdict, j
    if verdict == CHANGED:
        assert j["words"] == ("slower" if ratio > 1 else "faster") and j["q"] <= 0.05
        assert j["low"] <= ratio <= j["high"]
    else:
        assert 1 / 1.1 < j["eq_low"] <= j["eq_high"] < 1.1


def test_an_interval_that_crosses_the_band_is_inconclusive_with_what_would_decide():
    """Eight samples spread ±15 % a side, 8 % apart: the interval reaches past 1.10×."""
    j = verdicts.judge(Side(_around(1.0, 8, 0.15)), Side(_around(1.08, 8, 0.15)), "load_time")
    assert j["verdict"] == INCONCLUSIVE and j["low"] < 1.1 < j["high"]
    assert j["needed_n"] > 8 and "the 90 % interval crosses ±10 %" in j["why"]


def test_a_peak_rss_move_of_a_tenth_of_a_percent_is_never_changed():
    """The user's case: 619.14 MiB -> 618.33 MiB (0.13 %), significant at eight a side, under T = 2 %."""
    old = _around(619.14 * 2**20, 8, 0.0002)
    new = _around(618.33 * 2**20, 8, 0.0002)
    j = verdicts.judge(Side(old), Side(new), "peak_rss")
    assert j["p"] < 0.001 and j["verdict"] == NO_CHANGE and j["min_effect"] == 0.02


def test_the_minimum_effect_can_be_set_per_kind():
    old, new = Side(_around(200.0, 10)), Side(_around(260.0, 10))  # +30 %
    assert verdicts.judge(old, new, "durable_sync", "batches")["verdict"] == CHANGED  # T = ±25 %
    wide = verdicts.judge(old, new, "durable_sync", "batches", min_effects={"durable_sync": 0.5})
    assert wide["verdict"] == NO_CHANGE and wide["min_effect"] == 0.5
    assert verdicts.parse_min_effects(["durable_sync=0.5", "load_time=5%"]) == {
        "durable_sync": 0.5,
        "load_time": pytest.approx(0.05),
    }
    for bad, said in (
        ("fsync=0.5", "KIND=SHARE"),
        ("load_time=x", "not a number"),
        ("load_time=0", "(0, 10]"),
    ):
        with pytest.raises(
            ValueError, match=said.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")
        ):
            verdicts.parse_min_effects([bad])


def test_many_figures_share_one_false_discovery_budget():
    """Alone, a p of 0.0007 (eight a side, one value crossing) is called; among 60 figures where nothing else
    moved it is not: q = 60 * p > 0.05."""
    old, new = _around(1.0, 8), _around(1.3, 8)
    alone = verdicts.judge(Side(old), Side(new), "load_time")
    nulls = [verdicts.Pair(Side(_around(1.0, 8)), Side(_around(1.0, 8)), "load_time") for _ in range(59)]
    crowd = verdicts.judge_many([verdicts.Pair(Side(old), Side(new), "load_time"), *nulls])[0]
    assert alone["verdict"] == CHANGED and alone["p"] == crowd["p"] == pytest.approx(2 / math.comb(16, 8))
    assert crowd["q"] == pytest.approx(min(1.0, 60 * crowd["p"]))
    assert crowd["verdict"] == CHANGED  # 60 * 0.000155 = 0.0093 <= 0.05: still called
    few = verdicts.judge_many(
        [verdicts.Pair(Side(_around(1.0, 5)), Side(_around(1.3, 5)), "load_time"), *nulls]
    )[0]
    assert (
        few["p"] == pytest.approx(2 / math.comb(10, 5)) and few["q"] > 0.05 and few["verdict"] == INCONCLUSIVE
    )
    assert "q = " in few["why"] and "> 0.05" in few["why"]


def test_a_figure_computed_from_anothers_samples_is_judged_with_it_and_not_counted_twice():
    """big_write's rate is its size over its write time, sample by sample: as a family member of its own,
    one piece of evidence would count twice and widen every other figure's q. Judged with the time, it
    takes the time's q and verdict (the other way round), and the family is as if it were not there."""

    def with_rate(old_t: list[float], new_t: list[float], **kw) -> list[verdicts.Pair]:
        rate = (Side([64 / t for t in old_t]), Side([64 / t for t in new_t]))  # 64 MiB over each time
        return [verdicts.Pair(Side(old_t), Side(new_t), "time"), verdicts.Pair(*rate, "rate", **kw)]

    other = verdicts.Pair(Side(_around(1.0, 8)), Side(_around(1.3, 8)), "load_time")  # p = 2 / C(16, 8)
    unmoved = (_around(1.0, 8), _around(1.0, 8))
    without = verdicts.judge_many([other, with_rate(*unmoved)[0]])[0]
    together = verdicts.judge_many([other, *with_rate(*unmoved, judged_with=1)])
    twice = verdicts.judge_many([other, *with_rate(*unmoved)])[0]
    assert without["q"] == pytest.approx(2 * without["p"]) and together[0]["q"] == without["q"]
    assert twice["q"] == pytest.approx(3 * without["p"])  # counted twice, it would widen the other's q
    assert together[2]["q"] == together[1]["q"] and together[2]["verdict"] == together[1]["verdict"]
    t, r = verdicts.judge_many(with_rate(_around(1.0, 8), _around(1.3, 8), judged_with=0))
    assert r["q"] == t["q"] and r["p"] == pytest.approx(t["p"])  # the same ranks, reversed
    assert (t["verdict"], t["direction"], t["words"]) == (CHANGED, "up", "slower")
    assert (r["verdict"], r["direction"], r["words"]) == (CHANGED, "down", "slower")
    assert r["ratio"] == pytest.approx(1 / t["ratio"])
    assert "over 2 judged figures (1 more figure, computed sample by sample from another's, takes" in (
        verdicts.expected_false_calls(3, judged_with=1)
    )


# --- run-to-run drift: two runs of one host ----------------------------------------------------------


def test_students_t_quantile_matches_its_table():
    """Against the printed table (two-sided 95 %: the 0.975 quantile) and the normal limit."""
    for df, table in ((1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042)):
        assert ranktests.t_quantile(0.975, df) == pytest.approx(table, abs=5e-4)
    assert ranktests.t_quantile(0.975, 10_000) == pytest.approx(ranktests.normal_quantile(0.975), abs=1e-3)
    assert ranktests.t_cdf(0.0, 4) == pytest.approx(0.5) and ranktests.t_quantile(0.05, 3) < 0


def test_the_drift_of_a_hosts_runs_is_a_prediction_bound_for_two_single_runs():
    medians = [100.0, 110.0, 95.0, 105.0]
    logs = [math.log(m) for m in medians]
    spread = statistics.stdev(logs) * math.sqrt(2)
    d = verdicts.drift_from_runs(medians)
    assert d.source == "history" and d.runs == 4 and d.df == 3 and d.spread == pytest.approx(spread)
    assert d.share == pytest.approx(math.expm1(ranktests.t_quantile(0.975, 3) * spread))
    assert d.p_value(ranktests.t_quantile(0.975, 3) * spread) == pytest.approx(0.05)  # at the bound: p = 0.05
    assert verdicts.drift_from_runs(medians[:2]) is None  # two runs cannot measure it
    assert verdicts.drift_from_runs([1.0, 0.0, 2.0]) is None  # no ratio of a value at or below 0
    assert verdicts.drift_from_runs([1.0] * 50).runs == 20  # the latest 20
    flat = verdicts.drift_from_runs([1.0] * 5)  # no spread at all: only no shift is no change
    assert flat.p_value(0.0) == 1.0 and flat.p_value(1e-9) == 0.0
    assumed = verdicts.default_drift("durable_sync")  # ±50 % read as 1.96 standard deviations, normal
    assert assumed.df is None and assumed.spread == pytest.approx(math.log(1.5) / 1.959964, rel=1e-5)
    assert assumed.p_value(math.log(1.5)) == pytest.approx(0.05, rel=1e-4)


def _pair(ratio: float, drift: verdicts.Drift | None, n: int = 10, spread: float = 0.01) -> verdicts.Pair:
    """Ten tight rounds a side (±1 %), ``ratio`` apart: within a run, any shift past 1 % is plain."""
    return verdicts.Pair(
        Side(_around(200.0, n, spread)), Side(_around(200.0 * ratio, n, spread)), "durable_sync", "batches",
        drift=drift,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("drift", "verdict", "within"),
    [
        (None, CHANGED, False),  # within one run (or between hosts): the rounds alone decide
        ("steady history", CHANGED, False),  # five runs of the host within ±1 %: 1.3× is far past them
        ("assumed", INCONCLUSIVE, True),  # ±50 % assumed: run-level p = 0.2
        ("drifting history", INCONCLUSIVE, True),  # runs of the host 150..260: 1.3× is what they do
    ],
)
def test_two_runs_of_one_host_are_changed_only_beyond_its_drift(drift, verdict, within):
    """Ten tight rounds a side, 1.3× apart (within-run p = 1e-5), past T = ±25 %. Between two runs of a host
    whose runs drift that much it is no change to call, and more rounds would not make it one."""
    d = {
        None: None,
        "steady history": verdicts.drift_from_runs([200, 202, 198, 201, 199]),
        "assumed": verdicts.default_drift("durable_sync"),
        "drifting history": verdicts.drift_from_runs([150, 260, 200]),
    }[drift]
    (j,) = verdicts.judge_many([_pair(1.3, d)])
    assert j["p_within"] < 0.001 and j["verdict"] == verdict and j["within_drift"] is within
    assert j["p"] == max(j["p_within"], j["p_run"] if j["p_run"] is not None else 0)
    if d is not None:  # the interval carries the run-to-run spread
        assert j["low"] <= j["low_within"] and j["high"] >= j["high_within"]
    if within:
        assert j["needed_n"] is None and "more runs can" in j["why"] and j["p_run"] > 0.05
        assert verdicts.brief(j).startswith("inconclusive: the runs differ (1.30×")
        assert verdicts.sentence(j).startswith(
            "inconclusive: 1.30×"
        ) and "more runs can" in verdicts.sentence(j)
    if verdict == CHANGED and d is not None:
        assert "measured from 5 runs of this host" in verdicts.sentence(j)
        assert "run-to-run drift included" in verdicts.sentence(j)


def test_runs_that_agree_are_no_change_only_where_the_hosts_drift_allows_it():
    """Identical tight rounds: no change beyond ±25 % where the host's runs are steady; where its drift is
    only assumed (±50 %), the two runs cannot show it: inconclusive, and more runs, not samples, decide."""
    steady = verdicts.judge_many([_pair(1.0, verdicts.drift_from_runs([200, 202, 198, 201, 199]))])[0]
    assert steady["verdict"] == NO_CHANGE and 1 / 1.25 < steady["low"] <= steady["high"] < 1.25
    assumed = verdicts.judge_many([_pair(1.0, verdicts.default_drift("durable_sync"))])[0]
    assert assumed["verdict"] == INCONCLUSIVE and assumed["within_drift"] and assumed["needed_n"] is None
    assert "more runs, not more samples" in assumed["why"] and "agree within ±25 %" in verdicts.brief(assumed)


def test_many_figures_of_two_runs_share_the_budget_with_their_drift_in_it():
    """Sixty figures of a host whose runs drift (assumed ±50 %), each 1.3× apart within tight rounds: every
    within-run p is tiny, but none is called. A 3× move among them is."""
    pairs = [_pair(1.3, verdicts.default_drift("durable_sync")) for _ in range(59)]
    judged = verdicts.judge_many([_pair(3.0, verdicts.default_drift("durable_sync")), *pairs])
    assert judged[0]["verdict"] == CHANGED and judged[0]["direction"] == "up"
    assert all(j["verdict"] == INCONCLUSIVE and j["p_within"] < 0.001 for j in judged[1:])


def _busy(n: int, k: int) -> list[str | None]:
    return ["the device served 900 MiB/s of other I/O"] * k + [None] * (n - k)


def test_a_change_that_rests_on_disturbed_samples_is_disturbed_not_changed():
    old = Side(_around(1.0, 8), [None] * 8)
    new = Side(_around(3.0, 8), _busy(8, 8), "8 of 8 samples ran while the host was busy (...)")
    j = verdicts.judge(old, new, "load_time")
    assert j["verdict"] == DISTURBED and j["direction"] == "up" and j["test"] is None
    assert j["noise"]["new"] == "8 of 8 disturbed" and j["noise"]["judged_on"] == "undisturbed"
    assert j["noise"]["reasons"] == ["new run: 8 of 8 samples ran while the host was busy (...)"]
    # one quiet sample left cannot decide (its smallest p, 2/9), and all eight together would be called
    partly = verdicts.judge(old, Side(_around(3.0, 8), _busy(8, 7)), "load_time")
    assert partly["verdict"] == DISTURBED and (partly["n_old"], partly["n_new"]) == (8, 1)
    # two can (2/45 < 0.05): the quiet samples decide, and say so
    two = verdicts.judge(old, Side(_around(3.0, 8), _busy(8, 6)), "load_time")
    assert two["verdict"] == CHANGED and two["noise"]["judged_on"] == "undisturbed"


def test_the_quiet_samples_decide_when_they_can_and_say_so():
    old = Side(_around(1.0, 8), [None] * 8)
    new = Side(_around(2.0, 10), _busy(10, 2))
    j = verdicts.judge(old, new, "load_time")
    assert j["verdict"] == CHANGED and (j["n_old"], j["n_new"]) == (8, 8)
    assert "judged on the undisturbed units" in verdicts.sentence(j)
    # no change seen on the quiet samples stands too, busy ones left out
    same = verdicts.judge(old, Side(_around(1.0, 10), _busy(10, 2)), "load_time")
    assert same["verdict"] == NO_CHANGE and same["noise"]["new"] == "2 of 10 disturbed"


def test_a_run_without_noise_is_neither_quiet_nor_disturbed():
    j = verdicts.judge(Side(_around(1.0, 8)), Side(_around(1.0, 8), [None] * 8), "load_time")
    assert j["noise"]["old"] == "not recorded" and j["noise"]["new"] == "quiet" and j["verdict"] == NO_CHANGE


def test_values_at_or_below_zero_have_no_ratio():
    j = verdicts.judge(Side([0.0, 1.0, 2.0, 3.0]), Side([1.0, 2.0, 3.0, 4.0]), "rate")
    assert j["verdict"] == INCONCLUSIVE and j["why"] == "a value at or below zero has no ratio"


def test_the_sentence_names_the_verdict_the_test_n_and_the_interval():
    j = verdicts.judge(Side(_around(100.0, 10)), Side(_around(150.0, 10)), "durable_sync", "batches")
    said = verdicts.sentence(j)
    assert said.startswith("changed: 1.50× slower (95 % interval ")
    assert "exact Mann–Whitney U, Hodges–Lehmann interval; n = 10 batches a side; q = " in said
    assert said.endswith("T = ±25 %)")
    assert verdicts.brief(j).startswith("changed: 1.50× slower (95 % interval")


def test_a_prediction_is_judged_on_the_medians_interval():
    assert verdicts.against_value(_around(1.0, 8), 1.0, 2.0)["verdict"] == "within"
    assert verdicts.against_value(_around(5.0, 8), 1.0, 2.0)["verdict"] == "above"
    assert verdicts.against_value(_around(0.1, 8), 1.0, 2.0)["verdict"] == "below"
    straddle = verdicts.against_value([1.5, 1.8, 2.2, 2.6, 2.9, 3.0, 3.1, 3.2], 1.0, 2.0)
    assert straddle["verdict"] == "undecided" and straddle["low"] < 2 < straddle["high"]
    three = verdicts.against_value([1.0, 1.1, 1.2], 1.0, 2.0)
    assert three["coverage"] == pytest.approx(0.75) and three["verdict"] == "within"


# --- the noise bounds ---------------------------------------------------------------------------------


def _records(
    *, other: int = 0, own_write: int = 0, waiting: float = 0.0, steal: float = 0.0, memory: float = 0.0,
    swapped: int = 0, interval: float = 0.1,
) -> tuple[dict, dict, dict]:  # fmt: skip
    io = {
        "process": {"read_bytes": 0, "write_bytes": own_write},
        "device": {"read_bytes": other, "written_bytes": 2 * own_write},
        "faults": {"major": 0, "minor": 0},
    }
    nz = {
        "interval_s": interval,
        "pressure": {"cpu_some_s": 0.0, "memory_some_s": memory * interval},
        "cpu": {"cpu_time_s": 0.4, "busy_s": 0.1, "steal_s": steal * 0.4, "iowait_s": 0.0},
        "runnable": {"begin": 1, "end": 1},
        "swap": {"in_pages": swapped, "out_pages": 0},
    }
    split = {
        "wall_s": interval,
        "user_s": 0.01,
        "system_s": 0.01,
        "waiting_s": waiting * interval,
        "rest_s": 0.0,
    }
    return io, nz, split


MIB = 1 << 20


@pytest.mark.parametrize(
    ("kwargs", "kind"),
    [
        ({"other": 3 * MIB}, "other_io"),  # 30 MiB/s of another process's reads
        ({"waiting": 0.3}, "cpu_wait"),
        ({"steal": 0.2}, "steal"),
        ({"memory": 0.1}, "memory"),
        ({"swapped": 4}, "swap"),
    ],
)
def test_each_bound_marks_a_sample_disturbed_beyond_it(kwargs, kind):
    found = noise.disturbances(*_records(**kwargs))
    assert [d.kind for d in found] == [kind]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"other": MIB // 2},  # under 1 MiB
        {"own_write": 400 * 1024},  # the journal's writes for its own syncs: 2x its data, under 4x
        {"waiting": 0.05},
        {"steal": 0.05},
        {"memory": 0.01},
    ],
)
def test_a_sample_within_every_bound_is_quiet(kwargs):
    assert noise.disturbances(*_records(**kwargs)) == []


def test_waiting_for_a_cpu_is_other_work_only_where_other_tasks_used_the_cpu():
    io, nz, split = _records(waiting=0.3)  # waited 30 ms of 0.1 s
    nz["cpu"]["busy_s"] = 0.02 + 0.029  # other tasks: 29 ms of CPU, under the 30 ms waited
    assert noise.disturbances(io, nz, split) == []  # its own threads queued behind each other
    nz["cpu"]["busy_s"] = 0.02 + 0.03
    (found,) = noise.disturbances(io, nz, split)
    assert found.kind == "cpu_wait" and "other tasks used 30 ms of CPU" in found.words


def test_a_sample_without_its_noise_is_not_recorded_and_the_summary_says_which():
    assert noise.disturbances({"unavailable": "x"}, {"unavailable": "old run"}, {"unavailable": "x"}) is None
    busy = noise.disturbances(*_records(other=20 * MIB))
    quiet = noise.disturbances(*_records())
    said = noise.summary([busy, quiet, busy], "samples")
    assert said.startswith(
        "2 of 3 samples ran while the host was busy (at worst, the device served 200 MiB/s"
    )
    assert noise.summary([quiet, quiet]) is None
    assert "not recorded" in noise.summary([None, None])
    flags, summary = noise.flags_of([None, None])
    assert flags is None and "not recorded" in summary
