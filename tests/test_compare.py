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

from disklab import compare, stored, verdicts
from disklab.compare import (
    CHANGED,
    DISTURBED,
    INCONCLUSIVE,
    NO_CHANGE,
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


def test_facts_only_one_runs_format_records_are_listed_apart_not_counted_as_changed():
    """The kept runs of results 2 and 6 (tests/fixtures/stored): the device facts of facts 4, the run's
    own workbench and noise context, and the size settings one lab code lacks are recorded in one run only,
    not changes of the host; the workbench's path, which moved, is a change. The text says both."""
    from disklab import stored

    kept = Path(__file__).resolve().parent / "fixtures" / "stored"
    old, new = (
        stored.read(next((kept / v / "localhost" / "runs").glob("*.json")), "results") for v in ("v2", "v6")
    )
    cmp = compare_runs(old, new)
    assert {c["path"] for c in cmp["fact_changes"]} == {
        "facts.workbench.audited_path", "facts.workbench.requested_path",
        "facts.workbench.df.command", "facts.workbench.findmnt.command",
    }  # fmt: skip
    apart = {c["path"]: (c["old"], c["new"]) for c in cmp["facts_recorded_in_one"]}
    assert apart["facts.workbench.device.write_cache"][0]["unavailable"].startswith(
        "not audited: written before"
    )
    assert {"workbench", "noise_context", "sizes.ceiling_mib", "sizes.load_big_tensors"} <= set(apart)
    text = compare.render_compare_text(cmp)
    assert "Facts that changed: 4\n" in text and "Recorded in one run only, not counted" in text
    # a host's own reason that merely holds the words is no upgrade's: the broken import is a change
    broken = copy.deepcopy(new)
    why = "import numpy failed: RuntimeError: CUDA driver written before the toolkit"
    broken["facts"]["versions"]["numpy"] = {"unavailable": why}
    assert [c["path"] for c in compare_runs(new, broken)["fact_changes"]] == ["facts.versions.numpy"]
    # a package installed since is a change of the host, though the older run has no value for it
    before, after = copy.deepcopy(new), copy.deepcopy(new)
    before["facts"]["versions"]["packages"] = {"torch": "2.13.0"}
    after["facts"]["versions"]["packages"] = {"torch": "2.13.0", "pydantic": "2.12.0"}
    changed = {c["path"]: c["new"] for c in compare_runs(before, after)["fact_changes"]}
    assert changed == {"facts.versions.packages.pydantic": "2.12.0"}


def test_how_the_versions_were_read_is_no_fact(runs):
    """Whether the versions were probed now or read from the venv's record, and when, moves from run to
    run (a rebuilt venv is probed again): never a changed fact."""
    old, new = (copy.deepcopy(r) for r in runs)
    old["facts"]["versions_source"] = {"from": "probed_now", "probed_utc": "2026-12-01T10:00:00Z"}
    new["facts"]["versions_source"] = {
        "from": "venv_record",
        "probed_utc": "2026-12-01T10:00:00Z",
        "why": "kept",
    }
    assert not [c for c in compare_runs(old, new)["fact_changes"] if "versions_source" in c["path"]]


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


def test_identical_but_widely_spread_samples_do_not_prove_no_change(runs):
    """Five identical samples a side spread from 900 ns to 2.5 µs: the interval of the ratio is wider than
    ±10 %, so "no change" is not shown either; the verdict says how many a side would decide."""
    f = _figure(compare_runs(*runs), "experiments.fsync_bench.modes[mode=write].samples_ns")
    assert f["verdict"] == INCONCLUSIVE and f["direction"] is None
    assert f["ratio"] == 1.0 and f["median_ratio"] == 1.0 and f["p"] == pytest.approx(1.0)
    assert f["low"] < 1 / 1.1 and f["high"] > 1.1  # the 95 % interval crosses ±T
    assert "the 90 % interval crosses ±10 %" in f["why"] and f["needed_n"] > 5
    assert f["unit"] == "ns" and f["measure"] == "latency" and (f["n_old"], f["n_new"]) == (5, 5)
    assert (
        f["old"]
        == f["new"]
        == {"n": 5, "median": 1000, "min": 900, "max": 2500, "p90": 1940.0, "p99": 2444.0}
    )


def test_identical_tight_samples_are_no_change_where_the_hosts_runs_are_steady(runs):
    """The same five tight samples in every run: no change beyond ±10 % where three earlier runs show the
    host steady; between two runs alone its drift is assumed (±50 %), which no two runs can rule out."""
    docs = [copy.deepcopy(runs[0]) for _ in range(3)] + [copy.deepcopy(runs[1])]
    for i, doc in enumerate(docs):
        doc["experiments"]["fsync_bench"]["modes"][0]["samples_ns"] = [1000, 1001, 1002, 1003, 1004]
        doc["run_id"] = f"2026102{i}T090000Z" if i < 2 else doc["run_id"]
    write = "experiments.fsync_bench.modes[mode=write].samples_ns"
    f = _figure(compare_runs(docs[2], docs[3], earlier=docs[:2]), write)
    assert f["verdict"] == NO_CHANGE and 1 / 1.1 < f["low"] <= 1 <= f["high"] < 1.1
    assert f["drift"]["source"] == "history" and f["drift"]["runs"] == 3
    alone = _figure(compare_runs(docs[2], docs[3]), write)
    assert alone["verdict"] == INCONCLUSIVE and alone["within_drift"] and alone["low"] < 1 / 1.1
    assert 1 / 1.1 < alone["low_within"] <= alone["high_within"] < 1.1  # the runs themselves agree
    assert "more runs, not more samples" in alone["why"]


def test_three_samples_a_side_are_inconclusive_whatever_they_show(runs):
    f = _figure(compare_runs(*runs), "experiments.big_write.write_samples_mib_s")
    assert f["old"]["median"] != f["new"]["median"] and f["measure"] == "rate"
    assert f["verdict"] == INCONCLUSIVE and f["low"] is None  # no 95 % interval at 3 a side
    assert f["smallest_p"] == pytest.approx(0.1)
    assert "n = 3 a side cannot reach p < 0.05 (its smallest exact p is 0.1)" in f["why"]
    assert "p99" not in f["old"]  # percentiles only for latency units


def test_disjoint_samples_are_changed_with_their_direction_ratio_and_interval(runs):
    f = _figure(compare_runs(*runs), "experiments.fsync_bench.modes[mode=fsync].samples_ns")
    assert f["old"]["max"] < f["new"]["min"]
    assert f["measure"] == "durable_sync" and f["min_effect"] == verdicts.MIN_EFFECT["durable_sync"]
    assert f["test"].startswith("exact Mann–Whitney U") and f["p_within"] == pytest.approx(2 / 252)
    assert f["p_run"] < f["p_within"] == f["p"]  # 2.47× is far past the assumed ±50 % drift
    assert f["q"] <= verdicts.FDR and f["drift"]["source"] == "default"
    assert f["verdict"] == CHANGED and f["direction"] == "up" and f["words"] == "slower"
    assert f["median_ratio"] == pytest.approx(530000 / 215000)
    assert f["low"] < f["ratio"] < f["high"] and f["low_within"] > 1 + f["min_effect"]
    assert f["low"] < f["low_within"] and f["high"] > f["high_within"]  # the drift widens the interval
    swapped = _figure(compare_runs(runs[1], runs[0]), f["path"])
    assert swapped["verdict"] == CHANGED and swapped["direction"] == "down" and swapped["words"] == "faster"


def test_big_writes_rate_is_judged_with_its_write_time_and_the_family_counts_it_once():
    """The rate is the write's size over its time, sample by sample (steps/big_write.py): one piece of
    evidence. It is judged with the time (its q, its verdict) and the family's size leaves it out."""
    old = stored.read(
        FIXTURES.parent / "stored" / "v6" / "localhost" / "runs" / "20261205T132915Z.json", "results"
    )
    new = copy.deepcopy(old)
    big = new["experiments"]["big_write"]
    big["write_samples_s"] = [t * 2 for t in big["write_samples_s"]]
    big["write_rate_samples_mib_s"] = [r / 2 for r in big["write_rate_samples_mib_s"]]
    cmp = compare_runs(old, new)
    rate = _figure(cmp, "experiments.big_write.write_rate_samples_mib_s")
    time = _figure(cmp, "experiments.big_write.write_samples_s")
    assert rate["judged_with"] == time["path"] and time["judged_with"] is None
    assert rate["q"] == time["q"] and rate["verdict"] == time["verdict"]
    assert rate["ratio"] == pytest.approx(1 / time["ratio"])
    others = [f for f in cmp["figures"] if f["judged_with"] is None]
    assert len(others) == cmp["counts"]["judged"] - 1
    assert (
        f"over {len(others)} judged figures (1 more figure, computed sample by sample"
        in (cmp["expected_false_calls"])
    )


def test_single_samples_are_inconclusive_and_one_sided_figures_are_listed(runs):
    cmp = compare_runs(*runs)
    few = _figure(cmp, "experiments.big_write.fsync_samples_s")
    assert (few["verdict"], few["low"], few["q"] > verdicts.FDR) == (INCONCLUSIVE, None, True)
    assert cmp["figures_only_old"] == ["experiments.crash.kill_samples_s"]
    assert cmp["figures_only_new"] == []
    assert cmp["section_changes"] == [{"name": "crash", "old": "ok", "new": "failed"}]
    # summaries and wall times are not sample lists
    assert not [f for f in cmp["figures"] if "summary" in f["path"] or "step_wall" in f["path"]]
    assert cmp["counts"] == {
        "changed": 1, "no_change": 0, "inconclusive": 3, "disturbed": 0, "judged": 4,
        "large_undecided": 0, "cannot_decide": 2, "within_drift": 0, "verdicts_changed": 0,
    }  # fmt: skip


def test_rendered_text_states_the_test_n_interval_and_shows_only_what_matters(runs):
    cmp = compare_runs(*runs)
    text = render_compare_text(cmp)
    assert "Run 20261101T090000Z-a1 -> 20261128T090000Z-b2 on host node1" in text
    assert "facts.kernel.release: 6.1.0-26-amd64 -> 6.12.9-amd64" in text
    assert "facts.vm.dirty_expire_centisecs: 3000 -> 1500" in text
    assert "experiment crash: ok -> failed" in text
    assert "Figures: 4 judged: 1 changed, 0 disturbed, 0 no change" in text
    assert "Hodges–Lehmann ratio (new/old) with its 95 % interval" in text  # the test is stated
    assert "durable sync latency ±25 %" in text and "peak RSS ±2 %" in text  # T per kind
    assert "Benjamini–Hochberg at q = 0.05 over 4 judged figures" in text
    fsync = next(line for line in text.splitlines() if line.startswith("  fsync_bench · fsync · latency"))
    assert "215.0 µs -> 530.0 µs" in fsync and "changed, slower" in fsync and "5/5 samples" in fsync
    assert "2.47× (" in fsync and "exact, p = 0.0079" in fsync
    # no change and small undecided effects are not listed by default; --all lists them
    assert "fsync_bench · write · latency" not in text
    assert "Not shown: 3 figure(s)" in text
    every = render_compare_text(cmp, show_all=True)
    write = next(line for line in every.splitlines() if line.startswith("  fsync_bench · write · latency"))
    assert "inconclusive" in write and "1.000× (" in write and "5/5 samples" in write
    assert (
        "big_write · fsync time" in every and "only in the old run: experiments.crash.kill_samples_s" in every
    )


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


# --- many samples: consecutive rounds, not a thousand independent draws ----------------------------------


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


def test_a_thousand_samples_are_judged_on_ten_rounds_of_consecutive_calls(runs):
    samples = _latencies_ns(1, 1000, 331_700, outliers_ns=(52_800_000,))
    old, new = _runs_with(runs, samples, list(samples))
    f = _figure(compare_runs(old, new, earlier=[copy.deepcopy(old), copy.deepcopy(old)]), FDATASYNC)
    assert (f["units"], f["n_old"], f["n_new"]) == ("batches", 10, 10)
    assert f["verdict"] == NO_CHANGE and f["p"] == pytest.approx(1.0)


def _earlier(runs, medians_ns: list[float]) -> list[dict]:
    """Earlier runs of the host, one per median, each with 1000 fdatasync latencies around it."""
    out = []
    for i, median in enumerate(medians_ns):
        doc = copy.deepcopy(runs[0])
        doc["run_id"] = f"20261020T0{i}0000Z"
        doc["experiments"]["fsync_bench"]["modes"].append(
            {"mode": "fdatasync", "samples_ns": _latencies_ns(100 + i, 1000, median)}
        )
        out.append(doc)
    return out


def test_a_large_shift_over_many_samples_is_changed_past_the_hosts_measured_drift(runs):
    """The user's case: median 331.7 µs -> 228.9 µs over 1000 samples, one 52.8 ms outlier in the old run.
    Three earlier runs of the host within 2 % of the old one measure its drift: the shift is past it."""
    old = _latencies_ns(2, 1000, 331_700, outliers_ns=(52_800_000,))
    new = _latencies_ns(3, 1000, 228_900)
    earlier = _earlier(runs, [326_000, 335_000, 330_000])
    cmp = compare_runs(*_runs_with(runs, old, new), earlier=earlier)
    f = _figure(cmp, FDATASYNC)
    assert f["new"]["min"] < f["old"]["max"] and f["old"]["min"] < f["new"]["max"]  # ranges overlap
    assert f["p_within"] == pytest.approx(2 / math.comb(20, 10))  # every new round below every old one
    assert f["drift"]["source"] == "history" and f["drift"]["runs"] == 4 and f["drift"]["share"] < 0.25
    assert f["verdict"] == CHANGED and f["direction"] == "down" and f["words"] == "faster"
    assert f["label"] == "fsync_bench · fdatasync · latency" and cmp["drift_runs"] == 4


def test_the_same_shift_between_two_runs_alone_is_within_the_assumed_drift(runs):
    """Without earlier runs the host's drift is not known: the default (±50 % for a durable sync, what quiet
    runs of the test VM moved) stands, and 0.69× is inside it: inconclusive, and more samples cannot help."""
    old = _latencies_ns(2, 1000, 331_700)
    new = _latencies_ns(3, 1000, 228_900)
    cmp = compare_runs(*_runs_with(runs, old, new))
    f = _figure(cmp, FDATASYNC)
    assert f["p_within"] < 0.001 and f["ratio"] < 1 / 1.25  # the runs differ, beyond T
    assert f["p_run"] > 0.05 and f["p"] == f["p_run"] and f["q"] > verdicts.FDR  # but not past the drift
    assert f["verdict"] == INCONCLUSIVE and f["within_drift"] and f["needed_n"] is None
    assert f["drift"]["share"] == verdicts.RUN_DRIFT["durable_sync"] and f["drift"]["source"] == "default"
    assert "more runs can" in f["why"] and "assumed" in f["why"]
    assert cmp["counts"]["within_drift"] >= 1
    text = render_compare_text(cmp)
    assert "inconclusive, within drift" in text and "Run-to-run drift D:" in text
    # earlier runs that drift as much as this shift keep it inconclusive: their drift is measured wide
    wide = compare_runs(*_runs_with(runs, old, new), earlier=_earlier(runs, [240_000, 330_000, 260_000]))
    g = _figure(wide, FDATASYNC)
    assert g["drift"]["source"] == "history" and g["verdict"] == INCONCLUSIVE and g["within_drift"]
    # an earlier run of another profile measures nothing about these runs
    other = _earlier(runs, [326_000, 335_000, 330_000])
    for doc in other:
        doc["profile"] = "full"
    assert _figure(compare_runs(*_runs_with(runs, old, new), earlier=other), FDATASYNC)["drift"]["runs"] == 0


def test_a_significant_shift_below_the_minimum_effect_is_no_change(runs):
    """1 % slower over 20,000 samples: significant, but under T, and its interval (with the drift of a
    host whose earlier runs were steady) lies inside ±T."""
    old = _latencies_ns(4, 20_000, 300_000)
    new = _latencies_ns(5, 20_000, 303_000)
    older = _earlier(runs, [300_000, 301_000, 299_500])
    f = _figure(compare_runs(*_runs_with(runs, old, new), earlier=older), FDATASYNC)
    assert f["verdict"] == NO_CHANGE and f["p_within"] < 0.05
    assert 1 / 1.25 < f["low"] <= f["high"] < 1.25


# --- the noise of every sample ------------------------------------------------------------------------


def _rounds(n_rounds: int, per: int, busy: set[int]) -> list[dict]:
    """fsync_bench-style rounds of ``per`` 4 KiB writes in 20 ms; those in ``busy`` ran while the device also
    read 16 MiB for another process."""
    out = []
    for i in range(n_rounds):
        other = 16 * (1 << 20) if i in busy else 0
        out.append(
            {
                "first": i * per,
                "count": per,
                "io_record": {
                    "process": {"read_bytes": 0, "write_bytes": per * 4096},
                    "device": {"read_bytes": other, "written_bytes": 2 * per * 4096},
                    "faults": {"major": 0, "minor": 0},
                },
                "noise": {
                    "interval_s": 0.02,
                    "pressure": {},
                    "cpu": {},
                    "swap": {"in_pages": 0, "out_pages": 0},
                },
                "time_split": {"wall_s": 0.02, "user_s": 0.001, "system_s": 0.002, "waiting_s": 0.0},
            }
        )
    return out


def test_a_run_slowed_by_other_io_is_disturbed_not_changed(runs):
    old = _latencies_ns(6, 1000, 200_000)
    new = _latencies_ns(7, 1000, 2_000_000)  # ten times slower, every round beside another process's reads
    o, n = _runs_with(runs, old, new)
    o["experiments"]["fsync_bench"]["modes"][-1]["rounds"] = _rounds(10, 100, set())
    n["experiments"]["fsync_bench"]["modes"][-1]["rounds"] = _rounds(10, 100, set(range(10)))
    cmp = compare_runs(o, n)
    f = _figure(cmp, FDATASYNC)
    assert f["verdict"] == DISTURBED and f["direction"] == "up" and f["test"] is None
    assert compare.n_changed(cmp) == 1  # the fixture's own fsync figure, not this one
    assert {k: f["noise"][k] for k in ("old", "new", "judged_on")} == {
        "old": "quiet",
        "new": "10 of 10 disturbed",
        "judged_on": "undisturbed",
    }
    # 16 MiB read beside each round's 400 KiB of writes, less the journal's allowance, in 20 ms
    other = (16 * 2**20 + 2 * 400 * 1024 - 400 * 1024 - 4 * 400 * 1024) / 2**20 / 0.02
    assert f["noise"]["reasons"] == [
        f"new run: 10 of 10 rounds ran while the host was busy (at worst, the device served {other:,.0f} "
        "MiB/s of other I/O)"
    ]
    text = render_compare_text(cmp)
    assert "disturbed (slower)" in text and f"{other:,.0f} MiB/s of other I/O" in text


def test_a_change_seen_on_the_quiet_rounds_too_is_changed(runs):
    old = _latencies_ns(8, 1000, 200_000)
    new = _latencies_ns(9, 1000, 2_000_000)
    o, n = _runs_with(runs, old, new)
    o["experiments"]["fsync_bench"]["modes"][-1]["rounds"] = _rounds(10, 100, set())
    n["experiments"]["fsync_bench"]["modes"][-1]["rounds"] = _rounds(10, 100, {0, 1, 2})
    f = _figure(compare_runs(o, n), FDATASYNC)
    assert f["verdict"] == CHANGED and (f["n_old"], f["n_new"]) == (10, 7)
    assert f["noise"]["judged_on"] == "undisturbed" and f["noise"]["new"] == "3 of 10 disturbed"


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


def test_the_report_section_names_the_verdict_the_test_n_and_the_interval(runs):
    from disklab import report

    old = _latencies_ns(2, 1000, 331_700, outliers_ns=(52_800_000,))
    new = _latencies_ns(3, 1000, 228_900)
    cmp = compare_runs(*_runs_with(runs, old, new), earlier=_earlier(runs, [326_000, 335_000, 330_000]))
    shown = [g for g in cmp["figures"] if compare.shown(g)]
    text = (
        report.environment()
        .get_template("since.md.j2")
        .render(since=cmp, since_shown=shown, since_noise=compare.noise_missing(cmp))
    )
    assert "Benjamini–Hochberg at q = 0.05" in text and "Hodges–Lehmann" in text
    row = next(line for line in text.splitlines() if line.startswith("| fsync_bench · fdatasync · latency"))
    assert "changed: 0.69× faster" in row and "n = 10 batches a side" in row and "95 % interval" in row
    assert "docs/statistics.md" in text


def test_the_runs_own_workbench_and_noise_context_are_compared_as_facts(runs):
    """The figures were measured on the run's own workbench (results 4 on): a change of its filesystem is
    a changed fact even where the audit's facts agree; so is the run's governor or delay accounting."""
    old, new = copy.deepcopy(runs[0]), copy.deepcopy(runs[1])
    for doc, fstype in ((old, "ext4"), (new, "xfs")):
        doc["workbench"] = {"fstype": fstype, "mount_options": ["rw"], "collected_utc": doc["run_id"]}
    old["noise_context"] = {"governor": {"governors": ["powersave"]}, "swap": {"free_bytes": 1}}
    new["noise_context"] = {"governor": {"governors": ["performance"]}, "swap": {"free_bytes": 2}}
    changes = {c["path"]: (c["old"], c["new"]) for c in compare_runs(old, new)["fact_changes"]}
    assert changes["workbench.fstype"] == ("ext4", "xfs")
    assert changes["noise_context.governor.governors"] == (["powersave"], ["performance"])
    assert "workbench.collected_utc" not in changes and "noise_context.swap.free_bytes" not in changes


def test_how_a_run_found_the_delay_accounting_switch_is_a_changed_fact_only_with_its_state(runs):
    """Two runs that both recorded blocked I/O differ only in why (one found the switch left on by a
    killed run): no changed fact. A run that could not record it is one, with its why."""
    old, new = copy.deepcopy(runs[0]), copy.deepcopy(runs[1])
    old["noise_context"] = {"delay_accounting": {"state": "turned_on", "why": "was 0; the lab set it to 1"}}
    new["noise_context"] = {
        "delay_accounting": {"state": "turned_on", "why": "was 1, left on by a killed run"}
    }
    paths = {c["path"] for c in compare_runs(old, new)["fact_changes"]}
    assert not {p for p in paths if p.startswith("noise_context")}
    new["noise_context"] = {"delay_accounting": {"state": "off", "why": "not root"}}
    changes = {c["path"]: (c["old"], c["new"]) for c in compare_runs(old, new)["fact_changes"]}
    assert changes["noise_context.delay_accounting.state"] == ("turned_on", "off")
    assert changes["noise_context.delay_accounting.why"][1] == "not root"
