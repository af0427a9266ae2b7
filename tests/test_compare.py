"""disklab compare: changed facts, and figures judged against their own noise."""

from __future__ import annotations

import copy
import json
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
    assert f["verdict"] == CHANGED and f["direction"] == "up"
    assert f["ratio"] == pytest.approx(530000 / 215000)
    swapped = _figure(compare_runs(runs[1], runs[0]), f["path"])
    assert swapped["verdict"] == CHANGED and swapped["direction"] == "down"


def test_single_samples_get_no_verdict_and_one_sided_figures_are_listed(runs):
    cmp = compare_runs(*runs)
    assert _figure(cmp, "experiments.big_write.fsync_samples_s")["verdict"] == TOO_FEW
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
    fsync = next(line for line in text.splitlines() if "modes[mode=fsync].samples_ns:" in line)
    assert "median 215.0 µs -> 530.0 µs (2.5×)" in fsync and fsync.endswith("changed, up")
    write = next(line for line in text.splitlines() if "modes[mode=write].samples_ns:" in line)
    assert write.endswith("within noise")
    assert "1,900 MiB/s -> 1,850 MiB/s" in text
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
