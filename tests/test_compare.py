"""disklab compare: changed facts, and figures judged against their own noise."""

from __future__ import annotations

import copy
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from disklab import compare
from disklab.compare import (
    CHANGED,
    TOO_FEW,
    WITHIN_NOISE,
    compare_runs,
    find_previous_run,
    render_compare_text,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "compare"


@pytest.fixture
def runs() -> tuple[dict, dict]:
    old = json.loads((FIXTURES / "old.json").read_text())
    new = json.loads((FIXTURES / "new.json").read_text())
    return old, new


def _figure(cmp: dict, path: str) -> dict:
    return next(f for f in cmp["figures"] if f["path"] == path)


def test_fact_changes_are_exactly_the_kernel_and_dirty_expire(runs):
    cmp = compare_runs(*runs)
    assert cmp["fact_changes"] == [
        {"path": "facts.kernel.release", "old": "6.1.0-26-amd64", "new": "6.12.9-amd64"},
        {"path": "facts.vm.dirty_expire_centisecs", "old": 3000, "new": 1500},
    ]


def test_unavailable_facts_are_values_and_missing_ones_say_so(runs):
    old, new = runs
    new = copy.deepcopy(new)
    new["facts"]["workbench"]["device"]["read_ahead_kb"] = {"unavailable": "no queue/read_ahead_kb"}
    new["facts"]["workbench"]["device"]["rotational"] = 0
    new["facts"]["workbench"]["mount_options"] = ["rw", "noatime"]
    del new["facts"]["vm"]["dirty_ratio"]
    new["profile"] = "full"
    changes = {c["path"]: (c["old"], c["new"]) for c in compare_runs(old, new)["fact_changes"]}
    assert changes["facts.workbench.device.read_ahead_kb"] == (128, {"unavailable": "no queue/read_ahead_kb"})
    assert changes["facts.workbench.device.rotational"] == ({"unavailable": "no /sys/block entry"}, 0)
    assert changes["facts.workbench.mount_options"] == (["rw", "relatime"], ["rw", "noatime"])
    assert changes["facts.vm.dirty_ratio"] == (20, {"unavailable": "not recorded in this run"})
    assert changes["profile"] == ("quick", "full")


def test_identical_samples_are_within_noise(runs):
    f = _figure(compare_runs(*runs), "experiments.fsync_bench.modes[mode=write].samples_ns")
    assert f["verdict"] == WITHIN_NOISE and f["direction"] is None
    assert f["ratio"] == 1.0 and f["unit"] == "ns"
    assert (
        f["old"]
        == f["new"]
        == {"n": 5, "median": 1000, "min": 900, "max": 2500, "p90": 1940.0, "p99": 2444.0}
    )


def test_overlapping_samples_with_other_medians_are_within_noise(runs):
    f = _figure(compare_runs(*runs), "experiments.big_write.write_samples_mib_s")
    assert f["old"]["median"] != f["new"]["median"]
    assert f["verdict"] == WITHIN_NOISE and f["unit"] == "mib_s"
    assert "p99" not in f["old"]  # percentiles only for latency units


def test_disjoint_samples_are_changed_with_their_direction_and_ratio(runs):
    f = _figure(compare_runs(*runs), "experiments.fsync_bench.modes[mode=fsync].samples_ns")
    assert f["old"]["max"] < f["new"]["min"]
    assert f["test"] == compare.RANGES and f["p_value"] is None  # n=5: the range rule
    assert f["verdict"] == CHANGED and f["direction"] == "up"
    assert f["ratio"] == pytest.approx(530000 / 215000)
    swapped = _figure(compare_runs(runs[1], runs[0]), f["path"])
    assert swapped["verdict"] == CHANGED and swapped["direction"] == "down"


def test_single_samples_get_no_verdict_and_one_sided_figures_are_listed(runs):
    cmp = compare_runs(*runs)
    few = _figure(cmp, "experiments.big_write.fsync_samples_s")
    assert (few["verdict"], few["test"], few["p_value"]) == (TOO_FEW, None, None)
    assert cmp["figures_only_old"] == ["experiments.crash.kill_samples_s"]
    assert cmp["figures_only_new"] == []
    assert cmp["section_changes"] == [{"name": "crash", "old": "ok", "new": "failed"}]
    # summaries and wall times are not sample lists
    assert not [f for f in cmp["figures"] if "summary" in f["path"] or "step_wall" in f["path"]]


def test_rendered_text_shows_facts_verdicts_and_units(runs):
    text = render_compare_text(compare_runs(*runs))
    assert "Run 20261101T090000Z-a1 -> 20261128T090000Z-b2 on host node1" in text
    assert "facts.kernel.release: 6.1.0-26-amd64 -> 6.12.9-amd64" in text
    assert "facts.vm.dirty_expire_centisecs: 3000 -> 1500" in text
    assert "experiment crash: ok -> failed" in text
    assert "do not overlap" in text  # the rule is stated
    fsync = next(line for line in text.splitlines() if "modes[mode=fsync].samples_ns)" in line)
    assert fsync.startswith("  fsync_bench · fsync · latency (experiments.fsync_bench.modes[mode=fsync]")
    assert "median 215.0 µs -> 530.0 µs (2.5×)" in fsync
    assert fsync.endswith("ranges do not overlap: changed, up")
    write = next(line for line in text.splitlines() if "modes[mode=write].samples_ns)" in line)
    assert "range 900 ns..2.5 µs (n=5)" in write and write.endswith("ranges overlap: within noise")
    assert "big_write · write rate (experiments.big_write.write_samples_mib_s)" in text
    assert "1,900 MiB/s -> 1,850 MiB/s" in text
    assert "too few samples to judge: big_write · fsync time" in text
    assert "only in the old run: experiments.crash.kill_samples_s" in text


def test_schema_versions_must_match(runs):
    old, new = runs
    new = dict(new, schema_version=2)
    with pytest.raises(ValueError, match="same schema_version"):
        compare_runs(old, new)
    with pytest.raises(ValueError, match="old must be a results document"):
        compare_runs({"run_id": "x"}, new)


def test_samples_are_found_by_key_and_unit():
    tree = {"a": {"samples": [1, 2], "nsamples": [3], "samples_total": 4, "rss_samples_bytes": [5, 6]}}
    found = compare.find_samples(tree)
    assert found == {"a.samples": [1, 2], "a.rss_samples_bytes": [5, 6]}
    assert compare.unit_of("a.rss_samples_bytes") == "bytes" and compare.unit_of("a.samples") is None
    with pytest.raises(ValueError, match="non-empty"):
        compare.sample_stats([])


def _store_run(runs_dir: Path, run_id: str, started: str) -> Path:
    path = runs_dir / f"{run_id}.json"
    path.write_text(json.dumps({"schema_version": 1, "run_id": run_id, "started_utc": started}))
    return path


def test_find_previous_run_orders_by_start_time(tmp_path):
    runs_dir = tmp_path / "node1" / "runs"
    runs_dir.mkdir(parents=True)
    # names sort the other way round from start times
    first = _store_run(runs_dir, "zz", "2026-11-01T09:00:00.000000Z")
    second = _store_run(runs_dir, "mm", "2026-11-02T09:00:00.000000Z")
    _store_run(runs_dir, "aa", "2026-11-03T09:00:00.000000Z")
    host_dir = tmp_path / "node1"
    assert compare.list_runs(host_dir) == [first, second, runs_dir / "aa.json"]
    assert find_previous_run(host_dir, "aa") == second
    assert find_previous_run(host_dir, "mm") == first
    assert find_previous_run(host_dir, "zz") is None
    with pytest.raises(FileNotFoundError, match="'nope'"):
        find_previous_run(host_dir, "nope")
    assert compare.list_runs(tmp_path / "other") == []


def test_compare_never_imports_torch():
    code = "import sys, disklab.compare; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --- the rank test for figures with many samples -------------------------------------------------


def _latencies_ns(seed: int, n: int, median_ns: float, outliers_ns: tuple[int, ...] = ()) -> list[int]:
    """Log-normal latencies in ns around ``median_ns`` (spread like fdatasync on an SSD), plus outliers."""
    rng = random.Random(seed)
    return [int(median_ns * math.exp(rng.gauss(0, 0.2))) for _ in range(n - len(outliers_ns))] + list(
        outliers_ns
    )


def _runs_with(runs, old_samples: list[int], new_samples: list[int]) -> tuple[dict, dict]:
    old, new = copy.deepcopy(runs[0]), copy.deepcopy(runs[1])
    old["experiments"]["fsync_bench"]["modes"].append({"mode": "fdatasync", "samples_ns": old_samples})
    new["experiments"]["fsync_bench"]["modes"].append({"mode": "fdatasync", "samples_ns": new_samples})
    return old, new


FDATASYNC = "experiments.fsync_bench.modes[mode=fdatasync].samples_ns"


def test_many_identical_samples_are_within_noise(runs):
    samples = _latencies_ns(1, 1000, 331_700, outliers_ns=(52_800_000,))
    f = _figure(compare_runs(*_runs_with(runs, samples, list(samples))), FDATASYNC)
    assert f["test"] == compare.RANK_TEST and f["p_value"] == pytest.approx(1.0)
    assert f["verdict"] == WITHIN_NOISE and f["direction"] is None


def test_a_shifted_distribution_with_one_outlier_is_changed(runs):
    """The user's case: median 331.7 µs -> 228.9 µs over 1000 samples, one 52.8 ms outlier in the old run."""
    old = _latencies_ns(2, 1000, 331_700, outliers_ns=(52_800_000,))
    new = _latencies_ns(3, 1000, 228_900)
    f = _figure(compare_runs(*_runs_with(runs, old, new)), FDATASYNC)
    assert f["new"]["min"] < f["old"]["max"] and f["old"]["min"] < f["new"]["max"]  # ranges overlap
    assert f["test"] == compare.RANK_TEST and f["p_value"] < 1e-10
    assert f["verdict"] == CHANGED and f["direction"] == "down"
    assert f["label"] == "fsync_bench · fdatasync · latency"
    assert f["judged_by"].startswith("Mann-Whitney U p=")


def test_a_tiny_shift_over_many_samples_is_within_noise(runs):
    old = _latencies_ns(4, 20_000, 300_000)
    new = _latencies_ns(5, 20_000, 303_000)  # 1 % slower
    f = _figure(compare_runs(*_runs_with(runs, old, new)), FDATASYNC)
    assert f["p_value"] < compare.ALPHA  # significant, but smaller than the stated minimum effect
    assert abs(f["ratio"] - 1) < compare.MIN_EFFECT
    assert f["verdict"] == WITHIN_NOISE


def test_the_range_rule_still_judges_when_one_side_is_small(runs):
    old = _latencies_ns(6, 1000, 331_700, outliers_ns=(52_800_000,))
    new = _latencies_ns(7, compare.RANK_TEST_MIN_SAMPLES - 1, 228_900)
    f = _figure(compare_runs(*_runs_with(runs, old, new)), FDATASYNC)
    assert f["test"] == compare.RANGES and f["verdict"] == WITHIN_NOISE


def _exact_two_sided_p(n1: int, n2: int, u: float) -> float:
    """Exact P(|U - n1*n2/2| >= |u - n1*n2/2|) without ties, by counting rank arrangements."""
    # counts[i][j][k]: arrangements of i values of a and j of b with U (pairs a > b) = k
    counts = {(0, 0): {0: 1}}
    for i in range(n1 + 1):
        for j in range(n2 + 1):
            if i == j == 0:
                continue
            c: dict[int, int] = {}
            if i:  # the largest value is from a: it beats all j values of b
                for k, v in counts[(i - 1, j)].items():
                    c[k + j] = c.get(k + j, 0) + v
            if j:
                for k, v in counts[(i, j - 1)].items():
                    c[k] = c.get(k, 0) + v
            counts[(i, j)] = c
    dist = counts[(n1, n2)]
    mid = n1 * n2 / 2
    return sum(v for k, v in dist.items() if abs(k - mid) >= abs(u - mid)) / sum(dist.values())


def test_mann_whitney_u_matches_the_exact_distribution_and_handles_ties():
    rng = random.Random(8)
    a = [rng.gauss(0, 1) for _ in range(20)]
    b = [rng.gauss(0.8, 1) for _ in range(20)]
    u, p = compare.mann_whitney_u(a, b)
    assert u == sum(x > y for x in a for y in b)  # U counts the pairs a wins
    assert p == pytest.approx(_exact_two_sided_p(20, 20, u), abs=0.005)
    assert compare.mann_whitney_u(b, a)[1] == pytest.approx(p)  # two-sided: symmetric
    # fully separated, n=20 each: U=0, z=(200-0.5)/sqrt(20*20*41/12)
    assert compare.mann_whitney_u(list(range(20)), list(range(20, 40)))[1] == pytest.approx(
        math.erfc((200 - 0.5) / math.sqrt(400 * 41 / 12) / math.sqrt(2))
    )
    assert compare.mann_whitney_u([7] * 30, [7] * 30) == (450.0, 1.0)  # all tied: no evidence
    # ties shrink the variance: tied data give a smaller p than the same ranks untied would
    tied_a, tied_b = [1] * 10 + [2] * 10, [2] * 10 + [3] * 10
    _, p_tied = compare.mann_whitney_u(tied_a, tied_b)
    assert 0 < p_tied < compare.mann_whitney_u(list(range(20)), list(range(10, 30)))[1]
    with pytest.raises(ValueError, match="both sides"):
        compare.mann_whitney_u([], [1])


# --- readable figures --------------------------------------------------------------------------


def test_labels_are_derived_from_the_path():
    tree = {
        "fsync_bench": {"modes": [{"mode": "fsync", "samples_ns": [1, 2]}], "write_samples_ns": [1, 2]},
        "big_write": {"fsync_samples_s": [0.1], "write_rate_samples_mib_s": [1.0], "rss_samples_bytes": [1]},
        "load": {"cells": [{"samples": [1.0]}], "cold": {"samples_s": [1.0]}, "warm": {"samples_s": [1.0]}},
    }
    assert compare.figure_labels(tree) == {
        "experiments.fsync_bench.modes[mode=fsync].samples_ns": "fsync_bench · fsync · latency",
        "experiments.fsync_bench.write_samples_ns": "fsync_bench · write latency",
        "experiments.big_write.fsync_samples_s": "big_write · fsync time",
        "experiments.big_write.write_rate_samples_mib_s": "big_write · write rate",
        "experiments.big_write.rss_samples_bytes": "big_write · rss size",
        "experiments.load.cells[0].samples": "load · #0 · samples",
        "experiments.load.cold.samples_s": "load · cold · time",
        "experiments.load.warm.samples_s": "load · warm · time",
    }
    # two paths that read the same keep their paths
    clash = {
        "x": {"modes": [{"mode": "a", "samples_s": [1.0]}], "a": {"samples_s": [1.0]}, "b_samples_s": [1]}
    }
    assert compare.figure_labels(clash) == {
        "experiments.x.modes[mode=a].samples_s": "experiments.x.modes[mode=a].samples_s",
        "experiments.x.a.samples_s": "experiments.x.a.samples_s",
        "experiments.x.b_samples_s": "x · b time",
    }


def test_format_value_keeps_nanoseconds_below_a_microsecond():
    assert compare.format_value(71, "ns") == "71 ns"
    assert compare.format_value(69.4, "ns") == "69 ns"
    assert compare.format_value(1500, "ns") == "1.5 µs"
    assert compare.format_value(0.071, "us") == "71 ns"
    assert compare.format_value(0.0002, "s") == "200.0 µs"  # units.secs would say 0.000 s
    assert compare.format_value(0.031, "s") == "0.031 s"
    assert compare.format_value(52_800_000, "ns") == "52.8 ms"


def test_the_report_section_names_labels_tests_and_too_few_figures(runs):
    from disklab import report

    old = _latencies_ns(2, 1000, 331_700, outliers_ns=(52_800_000,))
    new = _latencies_ns(3, 1000, 228_900)
    cmp = compare_runs(*_runs_with(runs, old, new))
    text = report.environment().get_template("since.md.j2").render(since=cmp)
    assert "Rule: with fewer than 20 samples" in text and "Mann-Whitney U" in text
    row = next(line for line in text.splitlines() if line.startswith("| fsync_bench · fdatasync · latency"))
    assert f"(`{FDATASYNC}`)" in row and "| 0.7× |" in row and "Mann-Whitney U p=" in row
    assert "Too few samples to judge (1, fewer than 2 in a run): big_write · fsync time." in text
    assert "fsync_bench · write · latency (ranges overlap)" in text
