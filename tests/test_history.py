"""A host's figures over its stored runs: disklab history and runs, compare --baseline, the History section.

Three stored runs of one host, from a results document measured on this host (test_report's
``linux_doc``: write_buffering, fsync_bench and big_write run here, this host's audit) with a load section
of known times (test_load_section) and this host's ceiling (test_fleet_figures): the second run's cold
torch.load is slower, the third has torch upgraded in its facts and nothing else changed.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest

from disklab import compare, figures, history, hostnames, report, schemas, stored
from test_fleet_figures import _compare_cli, ceiling_section
from test_load_section import make_section
from test_report import linux_doc  # noqa: F401  (the fixture: a results document measured here)

HOST = "linuxbox"
RUN_IDS = ("20261201T090000Z", "20261202T090000Z", "20261203T090000Z")
UPGRADED_TORCH = "2.99.0+cpu"
FSYNC = "experiments.fsync_bench.modes.fsync.samples_ns"
COLD_TL = "experiments.load.samples[file=big_pt][method=torch.load][cache=cold].stages.all_touched.time_s"
MMAP = "method=torch.load-mmap"


@pytest.fixture(scope="module")
def three_runs(linux_doc, tmp_path_factory) -> list[dict]:  # noqa: F811
    base = copy.deepcopy(linux_doc)
    base["experiments"]["load"] = make_section()
    base["experiments"]["ceiling"] = ceiling_section(tmp_path_factory.mktemp("ceiling"))
    assert base["facts"]["versions"]["torch"] != UPGRADED_TORCH
    docs = []
    for i, run_id in enumerate(RUN_IDS):
        doc = copy.deepcopy(base)
        doc["run_id"] = run_id
        doc["started_utc"] = f"2026-12-0{i + 1}T09:00:00Z"
        doc["finished_utc"] = f"2026-12-0{i + 1}T09:01:00Z"
        if i == 1:  # a slower cold torch.load: the table must show each run's own median
            for s in doc["experiments"]["load"]["samples"]:
                if s["method"] == "torch.load" and s["cache_state"] == "cold":
                    s["stages"]["all_touched"]["time_s"] *= 1.5
        if i == 2:
            doc["facts"]["versions"]["torch"] = UPGRADED_TORCH
        docs.append(doc)
    return docs


@pytest.fixture(scope="module")
def stored_runs(three_runs, tmp_path_factory) -> Path:
    """The three runs written once for the module by the write path, in a reports tree of their own."""
    reports = tmp_path_factory.mktemp("three") / "reports"
    for doc in three_runs:
        stored.write(reports / HOST / "runs" / f"{doc['run_id']}.json", "results", doc)
    return reports


def _store(reports: Path, stored_runs: Path, n: int = len(RUN_IDS)) -> None:
    """The first ``n`` of the three runs in ``reports``: the bytes the write path wrote (stored_runs)."""
    runs = reports / HOST / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for run_id in RUN_IDS[:n]:
        if not (runs / f"{run_id}.json").exists():
            shutil.copy2(stored_runs / HOST / "runs" / f"{run_id}.json", runs)


def _cli(capsys, reports: Path, *argv: str) -> tuple[int, str, str]:
    return _compare_cli(capsys, "--reports", str(reports), *argv)


@pytest.mark.heavy
def test_history_marks_exactly_the_torch_upgrade_and_shows_each_runs_medians(
    tmp_path, capsys, three_runs, stored_runs
):
    reports = tmp_path / "reports"
    _store(reports, stored_runs)
    rc, out, err = _cli(capsys, reports, "history", "--json", HOST)
    assert rc == 0, err
    hist = json.loads(out)
    assert (hist["kind"], hist["schema_version"], hist["host"]) == ("history", 2, HOST)
    assert schemas.first_error("history", hist) is None
    assert [r["run_id"] for r in hist["runs"]] == list(RUN_IDS)  # oldest first
    assert [r["changed"] for r in hist["runs"]] == [[], [], ["torch"]]
    was = three_runs[0]["facts"]["versions"]["torch"]
    assert hist["runs"][2]["changes"]["torch"] == {"old": was, "new": UPGRADED_TORCH}
    keys = [f["key"] for f in hist["figures"]]
    assert FSYNC in keys and COLD_TL in keys and "experiments.ceiling.cold_mib_s" in keys
    assert COLD_TL.replace("time_s", "peak_rss_bytes") in keys
    # not key figures: another stage, another sync call, a warm-up
    assert not [k for k in keys if "loader_return" in k or "fdatasync" in k or "warmup" in k]
    for fig in hist["figures"]:
        for doc, point in zip(three_runs, fig["points"], strict=True):
            want = figures.by_key(figures.extract(doc))[fig["key"]]
            assert point["median"] == pytest.approx(want.median) and point["n"] == want.summary["n"]
    cold = next(f for f in hist["figures"] if f["key"] == COLD_TL)
    assert [p["median"] for p in cold["points"]] == pytest.approx([1.0, 1.5, 1.0])
    assert {(p["cache"], p["proof"]) for p in cold["points"]} == {("cold", "three-part")}

    rc, text, _ = _cli(capsys, reports, "history", HOST)
    assert rc == 0
    block = text.split(f"({COLD_TL})\n", 1)[1].split("\n\n", 1)[0].splitlines()
    header = ("run", "started (UTC)", "kernel", "torch", "lab code", "median", "n", "cache", "proof",
              "against the run before")  # fmt: skip
    assert re.split(r"\s{2,}", block[0].strip()) == list(header)
    # each run against the one before it, by the statistics module: three samples a side cannot decide
    assert [p["since_previous"] and p["since_previous"]["verdict"] for p in cold["points"]] == [
        None, "inconclusive", "inconclusive"
    ]  # fmt: skip
    assert "n = 3 a side cannot decide" in cold["points"][1]["since_previous"]["brief"]
    rows = {line.split()[0]: line for line in block[1:]}
    assert list(rows) == list(RUN_IDS)
    assert f" {UPGRADED_TORCH}* " in rows[RUN_IDS[2]] and "*" not in rows[RUN_IDS[0]] + rows[RUN_IDS[1]]
    for doc, run_id in zip(three_runs, RUN_IDS, strict=True):
        median = figures.by_key(figures.extract(doc))[COLD_TL].median
        assert f" {compare.format_value(median, 's')}  3  cold   three-part" in rows[run_id]
    assert f"run {RUN_IDS[2]}: torch {was} -> {UPGRADED_TORCH}" in text


@pytest.mark.heavy
def test_a_figure_is_chosen_by_key_or_part_and_an_unknown_one_is_refused_with_near_matches(
    tmp_path, capsys, stored_runs
):
    reports = tmp_path / "reports"
    _store(reports, stored_runs)
    fdatasync = "experiments.fsync_bench.modes.fdatasync.samples_ns"  # any figure's key, key figure or not
    rc, out, _ = _cli(capsys, reports, "history", "--json", HOST, fdatasync)
    assert rc == 0 and [f["key"] for f in json.loads(out)["figures"]] == [fdatasync]
    rc, out, _ = _cli(capsys, reports, "history", "--json", HOST, "mmap")  # the key figures holding it
    found = json.loads(out)["figures"]
    assert rc == 0 and len(found) == 3 and all(MMAP in f["key"] and "all_touched" in f["key"] for f in found)
    rc, out, err = _cli(capsys, reports, "history", HOST, "fsyncc")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert "no figure of the host's runs matches 'fsyncc'" in err and FSYNC in err
    rc, _, err = _cli(capsys, reports, "history", HOST, "xyzzy")
    assert rc == 2 and "near matches: none" in err
    rc, _, err = _cli(capsys, reports, "history", "nohost")
    assert rc == 2 and "history nohost: no stored runs under" in err


@pytest.mark.heavy
def test_runs_lists_every_stored_run_one_line_each(tmp_path, capsys, stored_runs):
    reports = tmp_path / "reports"
    _store(reports, stored_runs)
    rc, out, _ = _cli(capsys, reports, "runs")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 4 and lines[0].split()[:3] == ["host", "run", "started"]
    assert [line.split()[1] for line in lines[1:]] == list(RUN_IDS)
    assert all(line.startswith(HOST) and line.endswith(" ok") for line in lines[1:])
    assert UPGRADED_TORCH in lines[3] and UPGRADED_TORCH not in lines[1] + lines[2]
    assert "2026-12-01 09:00" in lines[1] and "big_write,ceiling,fsync_bench,load,write_buffering" in lines[1]
    rc, out, _ = _cli(capsys, reports, "runs", "--json", HOST)
    listed = json.loads(out)
    assert (listed["kind"], listed["schema_version"]) == ("runs", 1)
    assert schemas.first_error("runs", listed) is None
    assert [(r["run_id"], r["status"], r["profile"]) for r in listed["runs"]] == [
        (run_id, "ok", "quick") for run_id in RUN_IDS
    ]


@pytest.mark.heavy
def test_compare_baseline_compares_the_latest_run_against_the_pinned_one(tmp_path, capsys, stored_runs):
    reports = tmp_path / "reports"
    _store(reports, stored_runs)
    rc, out, err = _cli(capsys, reports, "compare", "--json", "--baseline", RUN_IDS[0], HOST)
    assert rc == 0, err
    cmp = json.loads(out)
    assert (cmp["old_run_id"], cmp["new_run_id"]) == (RUN_IDS[0], RUN_IDS[2])
    cold = next(f for f in cmp["figures"] if f["path"] == COLD_TL)
    assert cold["old"]["median"] == pytest.approx(1.0) and cold["new"]["median"] == pytest.approx(1.0)
    rc, out, _ = _cli(capsys, reports, "compare", "--json", HOST)  # without it: the last two runs
    cmp = json.loads(out)
    assert (cmp["old_run_id"], cmp["new_run_id"]) == (RUN_IDS[1], RUN_IDS[2])
    assert next(f for f in cmp["figures"] if f["path"] == COLD_TL)["old"]["median"] == pytest.approx(1.5)
    rc, _, err = _cli(capsys, reports, "compare", "--baseline", "20991231T000000Z", HOST)
    assert rc == 2 and f"no such run of {HOST}; its runs: {', '.join(RUN_IDS)}" in err
    rc, _, err = _cli(capsys, reports, "compare", "--baseline", RUN_IDS[2], HOST)
    assert rc == 2 and "latest run" in err


def _history_section(text: str) -> str | None:
    return text.split("\n## History\n", 1)[1] if "\n## History\n" in text else None


@pytest.mark.heavy
def test_the_report_has_a_history_and_its_plot_only_from_two_runs(tmp_path, three_runs, stored_runs):
    reports = tmp_path / "reports"
    host_dir = reports / HOST
    plot = host_dir / "plots" / history.PLOT_NAME
    _store(reports, stored_runs, 1)
    report.render_all(reports)
    assert _history_section((host_dir / "report.md").read_text()) is None and not plot.exists()
    _store(reports, stored_runs, 3)
    written, errors = report.render_all(reports)  # a new run makes the report stale (its input stamp)
    assert not errors and host_dir / "report.md" in written
    section = _history_section((host_dir / "report.md").read_text())
    assert section is not None and plot.is_file() and "![key figures over runs](plots/history.png)" in section
    rows = [line for line in section.splitlines() if line.startswith("| `2026")]
    assert [row.split("`")[1] for row in rows] == list(RUN_IDS)
    assert f"| **{UPGRADED_TORCH}** |" in rows[2] and "**" not in rows[0] + rows[1]
    assert rows[2].endswith(f"| torch {three_runs[0]['facts']['versions']['torch']} → {UPGRADED_TORCH} |")
    header = next(line for line in section.splitlines() if line.startswith("| figure |"))
    assert header.endswith(f"| `{RUN_IDS[2]}` **torch** |")
    lines = section.splitlines()
    cold = next(line for line in lines if line.startswith("| load · torch.load, big_pt · cold"))
    assert cold.endswith("| 1.000 s (3) | 1.500 s (3) | 1.000 s (3) |")


@pytest.mark.heavy
def test_an_unreadable_run_is_named_and_left_out(tmp_path, capsys, stored_runs):
    reports = tmp_path / "reports"
    _store(reports, stored_runs)
    bad = reports / HOST / "runs" / "20261130T090000Z.json"
    bad.write_text("{not json")
    rc, out, err = _cli(capsys, reports, "history", "--json", HOST)
    assert rc == 1 and len(err.splitlines()) == 1 and str(bad) in err and "not JSON" in err
    assert [r["run_id"] for r in json.loads(out)["runs"]] == list(RUN_IDS)
    rc, out, err = _cli(capsys, reports, "runs")
    assert rc == 1 and str(bad) in err and len(out.splitlines()) == 4


@pytest.mark.heavy
def test_host_strings_in_the_history_are_escaped(tmp_path, three_runs):
    reports = tmp_path / "reports"
    host = "web|1"
    for doc in three_runs[:2]:
        doc = copy.deepcopy(doc)
        doc["host"] = host
        doc["facts"]["versions"]["torch"] = "2.9|<b>x</b>"
        stored.write(hostnames.host_dir(reports, host) / "runs" / f"{doc['run_id']}.json", "results", doc)
    report.render_all(reports)
    section = _history_section((hostnames.host_dir(reports, host) / "report.md").read_text())
    assert section is not None and "disklab history web\\|1 prints every run" in section
    assert "| 2.9\\|&lt;b&gt;x&lt;/b&gt; |" in section and "<b>" not in section


def test_the_big_models_first_response_is_a_key_figure_and_compare_carries_it(linux_doc):  # noqa: F811
    """Results 5: the big file's populated cells are key figures at all_touched and first_response (the small
    model's copy against assign is not); compare and export carry the new stage, an older run has none."""
    from disklab import export
    from test_load_section import make_v5_section

    new = copy.deepcopy(linux_doc)
    new["experiments"]["load"] = make_v5_section()
    old = copy.deepcopy(linux_doc)
    old["experiments"]["load"] = make_section()
    found = figures.extract(new)
    keys = {f.key for f in found if history.is_key(f, "Linux")}
    fr = (
        "experiments.load.samples[file=big_pt][method=torch.load-mmap][populate=assign]"
        + "[cache={}].stages.{}.{}"
    )
    assert fr.format("cold", "first_response", "time_s") in keys
    assert fr.format("warm", "first_response", "time_s") in keys
    assert fr.format("cold", "first_response", "peak_rss_bytes") in keys
    assert fr.format("cold", "all_touched", "time_s") in keys
    assert not any("small_" in k for k in keys)  # the small model's cells are not key figures
    assert fr.format("cold", "first_response", "time_s") in history.key_figure_keys()
    assert history.key_figure_unit(fr.format("cold", "first_response", "time_s")) == "s"
    cmp = compare.compare_runs(old, new)
    assert fr.format("cold", "first_response", "time_s") in cmp["figures_only_new"]
    assert not any(f["stage"] == "first_response" for f in cmp["figures"])  # the older run never measured it
    same = compare.compare_runs(new, copy.deepcopy(new))
    judged = next(f for f in same["figures"] if f["path"] == fr.format("cold", "first_response", "time_s"))
    assert judged["stage"] == "first_response" and judged["populate"] == "assign" and judged["old"]["n"] == 3
    rows = export.rows_of(new, "newhost")
    row = next(r for r in rows if r["key"] == fr.format("cold", "first_response", "time_s"))
    assert row["stage"] == "first_response" and row["cache"] == "cold" and row["n"] == 3
