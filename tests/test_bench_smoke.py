"""`make bench` at a tiny size: the results document and the table have the promised shape.

This is the only piece of the benchmark that runs in `make test`. It checks the
output format and the physical sense of what was measured, never a speed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import common  # noqa: E402  (bench/ is put on sys.path just above)
import table  # noqa: E402


def test_summary_keeps_raw_samples_and_names_the_unit():
    s = common.summary([3.0, 1.0, 2.0, 10.0], "us")
    assert s == {"n": 4, "samples_us": [3.0, 1.0, 2.0, 10.0], "median_us": 2.5, "min_us": 1.0, "max_us": 10.0}
    with pytest.raises(ValueError, match="no samples"):
        common.summary([])


def test_targets_are_judged_with_their_bounds():
    between = {"op": "between", "low": 0.9, "high": 1.1}
    assert common.target_met(0.9, between) and common.target_met(1.1, between)
    assert not common.target_met(1.11, between)
    assert common.target_met(1.5, {"op": "<=", "value": 1.5})
    assert not common.target_met(2.0, {"op": "<", "value": 2.0})
    assert common.target_text({"op": ">=", "value": 0.9}) == "≥ 0.9"
    with pytest.raises(ValueError, match="target op"):
        common.target_met(1.0, {"op": "==", "value": 1.0})


def test_the_fleet_part_loads_the_test_fleet_from_its_file():
    import harness_parts

    fleet = harness_parts._fleet_module()
    assert Path(fleet.__file__) == REPO / "tests" / "fleet" / "fleet.py"
    assert callable(fleet.Fleet.up) and issubclass(fleet.FleetError, Exception)


def test_ratio_is_taken_within_each_pair_and_orders_alternate():
    assert common.pair_orders(3, ("a", "b")) == [("a", "b"), ("b", "a"), ("a", "b")]
    # A drift that doubles both sides in the second pair leaves the pair ratios alike.
    part = common.judged_part(
        title="t", quantity="q", unit="s", sides={"disklab": [1.0, 2.0, 1.1], "ref": [1.0, 2.0, 1.0]},
        target={"op": "<=", "value": 1.05}, notes=[],
    )  # fmt: skip
    assert part["ratio"]["samples"] == [1.0, 1.0, 1.1]
    assert part["ratio"]["median"] == 1.0 and part["met"] is True
    assert part["sides"]["ref"]["median_s"] == 1.0
    with pytest.raises(ValueError, match="same number of pairs"):
        common.judged_part(
            title="t", quantity="q", unit="s", sides={"a": [1.0], "b": []}, target={}, notes=[]
        )


def test_a_missed_first_render_is_missed_in_the_table_and_the_summary():
    # what a 500-host bench once printed: repeats met (0.9 s < 2 s), first render 119 s against <= 60 s
    part = {"status": "ok", "title": "report rendering", "unit": "s", "value": common.summary([0.9], "s")}
    part |= {"target": {"op": "<", "value": 2.0}, "repeat_render_met": True, "first_render_s": 119.0}
    part |= {"first_render_target": {"op": "<=", "value": 60.0}, "first_render_met": False, "met": False}
    doc = {"run_id": "r", "host": "h", "part_order": ["report_rendering"]}
    doc["parts"] = {"report_rendering": part}
    assert table.summary_line(doc) == "bench r on h: 0/1 targets met (report_rendering MISSED)"
    row = table._row("report_rendering", part)
    assert "| yes |" in row and "119 s (target ≤ 60.0 s, MISSED)" in row, row  # yes: the repeats' column


def test_median_interval_is_the_sign_tests_order_statistics():
    # n=9 at 95 %: P(B <= 1) = 10/512 <= 0.025 < P(B <= 2), so the 2nd smallest and 2nd largest
    iv = common.median_interval([9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0])
    assert (iv["low"], iv["high"], iv["k"]) == (2.0, 8.0, 2) and iv["coverage"] == 1 - 2 * 10 / 512
    assert common.median_interval([float(i) for i in range(20)])["k"] == 6  # P(B <= 5) = 0.0207 at n=20
    assert common.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # 2 / 32 > 0.05: no 95 % interval


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One `bench/run.py --tiny` in a fresh process; (results document, stdout)."""
    tmp = tmp_path_factory.mktemp("bench")
    out_dir, reports = tmp / "results", tmp / "reports"
    reports.mkdir()  # empty: the report part makes its base document with a tiny lab.py run
    cmd = [sys.executable, str(REPO / "bench" / "run.py"), "--tiny", "--out-dir", str(out_dir)]
    cmd += ["--workbench", str(tmp / "workbench"), "--reports", str(reports)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    files = list(out_dir.glob("*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert files[0].name == f"{doc['host']}-{doc['run_id']}.json"
    return doc, proc.stdout


@pytest.mark.heavy
def test_tiny_run_has_every_part_and_skips_the_slow_ones_with_a_reason(tiny_run):
    doc, _ = tiny_run
    assert doc["bench_schema_version"] == 1 and doc["tiny"] is True
    assert doc["part_order"] == common.PART_ORDER and sorted(doc["parts"]) == sorted(common.PART_ORDER)
    for name in ("harness_overhead", "fleet_scaling", "together_start"):
        assert doc["parts"][name]["status"] == "not_run"
        assert "cannot be tiny" in doc["parts"][name]["reason"]


def test_tiny_report_rendering_renders_every_synthetic_host(tiny_run):
    doc, _ = tiny_run
    part = doc["parts"]["report_rendering"]
    assert part["status"] == "ok", part
    assert part["hosts"] == 5 and part["host_reports_rendered"] == 5
    assert part["store_s"] > 0  # stored by disklab.store.store_fetched, as disklab run stores them
    assert part["base_document"] == "fresh lab.py run at tiny sizes"
    assert all(s > 0 for s in part["value"]["samples_s"])
    assert part["repeat_render_met"] == (part["value"]["median_s"] < 2.0)
    assert part["first_render_met"] == (part["first_render_s"] <= part["first_render_target"]["value"])
    # the part's verdict is both of its targets: a missed first render is never "met"
    assert part["met"] == (part["repeat_render_met"] and part["first_render_met"])


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (make bench installs it)")
def test_tiny_fio_parts_compare_like_with_like(tiny_run):
    doc, _ = tiny_run
    fs = doc["parts"]["fsync_fidelity"]
    assert fs["status"] == "ok", fs
    n = doc["settings"]["io_repeats"]
    assert fs["ratio"]["n"] == n and len(fs["pairs"]) == n
    for pair in fs["pairs"]:
        assert pair["fio"]["blocks"] == doc["settings"]["fsync_blocks"]
        for side in ("disklab", "fio"):
            # both sides time the fsync call apart from the write, and on ext4 it costs more
            assert pair[side]["fsync_p50_us"] > pair[side]["write_p50_us"] > 0
    assert fs["met"] == (0.9 <= fs["ratio"]["median"] <= 1.1)
    cr = doc["parts"]["cold_read_fidelity"]
    assert cr["status"] == "ok", cr
    for pair in cr["pairs"]:
        d = pair["disklab"]
        assert d["eviction_method"] == "fadvise_dontneed"
        assert d["resident_fraction_before_cold"] <= 0.01 and d["resident_fraction_before_warm"] >= 0.99
        assert pair["fio"]["cold_mib_s"] > 0 and pair["fio"]["warm_mib_s"] > 0
    assert not list(Path(doc["workbench"]).iterdir()), "the bench leaves no file on the workbench"


def test_tiny_io_record_part_checks_each_samples_cache_proof_and_times_the_record(tiny_run):
    doc, stdout = tiny_run
    part = doc["parts"]["io_record_overhead"]
    assert part["status"] == "ok", part
    for state in ("warm", "cold"):
        (pair,) = part["pairs"][state]  # --tiny: one pair of each
        assert pair["order"] == ["with_record", "without_record"]
        assert pair["with_record"]["cache_state"] == pair["without_record"]["cache_state"] == state
        assert pair["ratio"] == pair["with_record"]["time_s"] / pair["without_record"]["time_s"]
        assert pair["without_record"]["device_read_bytes"] is None  # the record was off
        assert part[state]["ratio"]["n"] == 1 and part[state]["interval"] is None
        assert "too few pairs" in part[state]["resolution"] and part[state]["resolved"] is False
        assert part[state]["order_balanced_ratio"] is None and part[state]["met"] is False  # one order only
    assert part["met"] == (part["warm"]["met"] and part["cold"]["met"])
    cost = part["record_cost"]
    assert cost["reads_the_file"] is False  # its residency is the same after 200 begin/end pairs
    assert cost["begin_plus_end_us"]["median_us"] > 0
    assert "- I/O record, cold: order-balanced ratio with/without none (one order only)" in stdout


def test_tiny_run_prints_the_table_and_ends_with_a_summary(tiny_run):
    doc, stdout = tiny_run
    lines = stdout.strip().splitlines()
    assert any(line.startswith("| part | ratio median") for line in lines)
    for name in common.PART_ORDER:
        title = doc["parts"][name]["title"]
        assert any(line.startswith(f"| {title} |") for line in lines), title
    assert lines[-1] == table.summary_line(doc)
    judged = [p for p in doc["parts"].values() if p["status"] == "ok"]
    assert f"{sum(p['met'] for p in judged)}/{len(judged)} targets met" in lines[-1]
    for part in doc["parts"].values():  # how contended the machine was while each part ran (/proc/stat)
        share = part["machine_cpu"]
        assert all(0 <= share[k] <= 1 for k in ("steal", "busy", "idle"))  # all 0 for a part under a tick
        assert share["busy"] + share["idle"] + share["steal"] <= 1.0001
    assert any(line.startswith("- machine CPU while each part ran") for line in lines)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (make bench installs it)")
def test_the_parallel_ceiling_part_matches_fio_job_for_job(tmp_path):
    """4 MiB: four 1 MiB slices, one call each per side; enough to check both read the same ranges."""
    import ceiling_part

    part = ceiling_part.parallel_ceiling_fidelity(tmp_path, 4 << 20, 1)
    assert part["status"] == "ok" and (part["streams"], part["block_bytes"]) == (4, 1 << 20)
    (pair,) = part["pairs"]
    assert pair["disklab"]["streams_used"] == 4 and pair["disklab"]["direct_io"] == "O_DIRECT"
    assert pair["disklab"]["resident_fraction_before"] <= 0.01
    assert pair["fio"]["total_ios"] == 4  # one 1 MiB call per job, as disklab's four streams make
    args = part["fio_args"]
    for want in ("--ioengine=psync", "--direct=1", "--bs=1048576", "--numjobs=4", "--thread",
                 "--size=1048576", "--offset_increment=1048576"):  # fmt: skip
        assert want in args
    assert part["ratio"]["n"] == 1 and part["met"] == (part["ratio"]["median"] >= 0.95)
    assert list(tmp_path.iterdir()) == []  # the file is deleted
