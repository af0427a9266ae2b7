"""Figures compared stage by stage, the fleet side by side, and every figure exported.

The results documents are real where this host can make them (write_buffering,
fsync_bench and big_write measured here, the audit of this host: test_report's
``linux_doc``), with a load section of synthetic samples of known times passed
through the host-side summariser (test_load_section) and a power-cut section
written by hand, so every verdict and median below can be checked exactly.
"""

from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path

import pytest

from conftest import FLEET_TABLES
from disklab import cli, compare, export, figures, fleet, report, schemas, stored
from disklab_host.steps import ceiling, load
from test_load_section import EIGHT, make_section, make_v5_section
from test_report import linux_doc  # noqa: F401  (the fixture: a results document measured here)

COLD_TL = "experiments.load.samples[file=big_pt][method=torch.load][cache=cold].stages.{stage}.time_s"


def _model(verdict: str, states: int) -> dict:
    counts = {"new_ok": states, "old_ok": 0, "rolled_back": 0, "corrupt": 0, "missing": 0}
    if verdict == "unsafe":
        counts.update(new_ok=states - 1, corrupt=1)
    return {
        "verdict": verdict,
        "states": states,
        "distinct_files": 2,
        "counts": counts,
        "first_unsafe": None,
        "first_rolled_back": None,
        "samples": [[0, False, "after", "new_ok"]],
    }


def powercut_section(atomic_cut: str = "safe") -> dict:
    """Two recipes, as the power-cut step records them (verdicts and counts only matter here)."""
    recipes = []
    for number, name, title, kill, cut in (
        (1, "naive", "torch.save in place", "unsafe", "unsafe"),
        (5, "atomic", "temp + fsync + rename + dir fsync", "safe", atomic_cut),
    ):
        recipes.append(
            {
                "number": number,
                "name": name,
                "title": title,
                "spec": name,
                "format": "torch",
                "recording": {
                    "calls": 4,
                    "syscall_counts": {"write": 2},
                    "written_bytes": 4096,
                    "returned": True,
                    "replay_matches_real": True,
                    "record_wall_s": 0.1,
                    "trace_bytes": 100,
                    "call_texts": ["write"],
                    "writes_after_last_fsync": 0,
                    "unplaced_calls": [],
                    "judged_on": "every recorded call",
                    "outside_files": [],
                    "replay_differs": [],
                },
                "models": {"process_kill": _model(kill, 12), "power_cut": _model(cut, 40)},
                "check_wall_s": 0.2,
                "lesson_expects": {"process_kill": kill, "power_cut": cut},
                "agrees_with_lesson": True,
                "differences": [],
            }
        )
    return {
        "status": "ok",
        "strace": "strace 6.1",
        "state_mib": 4,
        "old_step": 1,
        "new_step": 2,
        "max_torn_per_point": 2,
        "models": {"process_kill": "SIGKILL", "power_cut": "power cut"},
        "recipes": recipes,
        "wall_s": 1.0,
        "step_wall_s": 1.2,
    }


@pytest.fixture(scope="module")
def lab_doc(linux_doc) -> dict:  # noqa: F811
    doc = copy.deepcopy(linux_doc)
    doc["experiments"]["load"] = make_section()
    doc["experiments"]["powercut"] = powercut_section()
    assert schemas.first_error("results", doc) is None
    return doc


@pytest.fixture(scope="module")
def lab_doc8(lab_doc) -> dict:
    """``lab_doc`` with eight load samples a cell: enough for one changed figure among a compare's ~60 to
    clear Benjamini–Hochberg (the quick profile's three cannot decide)."""
    doc = copy.deepcopy(lab_doc)
    doc["experiments"]["load"] = make_section(scales=EIGHT)
    assert schemas.first_error("results", doc) is None
    return doc


def _scaled(doc: dict, factor: float, *, method: str, cache: str, stage: str, run_id: str) -> dict:
    """A later run of ``doc``: torch and the kernel upgraded, one cell's stage times scaled by ``factor``."""
    new = copy.deepcopy(doc)
    new["run_id"] = run_id
    new["started_utc"] = "2026-11-30T10:00:00Z"
    new["facts"]["versions"]["torch"] = "2.14.0"
    new["facts"]["host"]["kernel"] = "6.19.0-test"
    for s in new["experiments"]["load"]["samples"]:
        if s["method"] == method and s["cache_state"] == cache and s["file"] == "big_pt":
            s["stages"][stage]["time_s"] *= factor
    return new


def ceiling_section(workdir: Path) -> dict:
    """The ceiling step run here on a 4 MiB file, its medians set to round numbers the tables show."""
    section = ceiling.run({"sizes": {"ceiling_mib": 4}, "become_allowed": False}, workdir)
    assert section["status"] == "ok", section
    section["step_wall_s"] = 1.0  # the runner adds it
    # the figures are the runs' rates (disklab.figures): set both, as the step would have written them
    for runs, key, rates in (("cold_runs", "proven", (1500.0, 1536.0, 1600.0)),
                             ("warm_runs", "verified", (8800.0, 9000.0, 9100.0))):  # fmt: skip
        for run, rate in zip(section[runs], rates, strict=True):
            run.update({"mib_s": rate, key: True})
    section["cold_mib_s"] = {"n": 3, "median": 1536.0, "min": 1500.0, "max": 1600.0}
    section["warm_mib_s"] = {"n": 3, "median": 9000.0, "min": 8800.0, "max": 9100.0}
    return section


def _store(reports: Path, doc: dict, host: str | None = None) -> Path:
    host = host or doc["host"]
    path = reports / host / "runs" / f"{doc['run_id']}.json"
    stored.write(path, "results", {**doc, "host": host})
    return path


def _compare_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- compare, loads included ---------------------------------------------------------------------


@pytest.mark.heavy
def test_compare_json_has_load_cells_and_fails_on_a_moved_load(tmp_path, capsys, lab_doc8):
    """Two earlier runs of the host, the moved cell within 1 % of the old run's, measure its run-to-run
    drift: a 2× slower cold load is past it, and called."""
    lab_doc = lab_doc8
    reports = tmp_path / "reports"
    for day, factor in ((20, 1.01), (21, 0.99)):
        steady = copy.deepcopy(lab_doc)
        steady["run_id"], steady["started_utc"] = f"202611{day}T100000Z", f"2026-11-{day}T10:00:00Z"
        for sample in steady["experiments"]["load"]["samples"]:
            if (
                sample["method"] == "torch.load"
                and sample["cache_state"] == "cold"
                and sample["file"] == "big_pt"
            ):
                for stage in sample["stages"].values():
                    if "time_s" in stage:  # a stage that did not run has none
                        stage["time_s"] *= factor
        _store(reports, steady)
    _store(reports, lab_doc)
    moved = _scaled(
        lab_doc, 2.0, method="torch.load", cache="cold", stage="all_touched", run_id="20261130T100000Z"
    )
    _store(reports, moved)
    rc, out, err = _compare_cli(
        capsys, "--reports", str(reports), "compare", "--json", "--fail-on-change", "linuxbox"
    )
    assert rc == 1 and "called changed (--fail-on-change" in err
    cmp = json.loads(out)
    assert (cmp["kind"], cmp["schema_version"]) == ("compare", 2)
    assert schemas.first_error("compare", cmp) is None
    assert cmp["results_schema_version"] == stored.VERSIONS["results"]
    torch_was = lab_doc["facts"]["versions"]["torch"]
    assert {"path": "facts.versions.torch", "old": torch_was, "new": "2.14.0"} in cmp["fact_changes"]
    assert any(c["path"] == "facts.host.kernel" and c["new"] == "6.19.0-test" for c in cmp["fact_changes"])
    by_path = {f["path"]: f for f in cmp["figures"]}
    cold = by_path[COLD_TL.format(stage="all_touched")]
    assert (cold["stage"], cold["cache"], cold["method"], cold["unit"]) == (
        "all_touched",
        "cold",
        "torch.load",
        "s",
    )
    assert cold["verdict"] == compare.CHANGED and cold["direction"] == "up" and cold["words"] == "slower"
    assert cold["test"].startswith("exact Mann–Whitney U") and cold["q"] <= 0.05
    assert cold["old"]["n"] == cold["new"]["n"] == cold["n_old"] == 8
    assert cold["old"]["median"] == pytest.approx(1.0) and cold["ratio"] == pytest.approx(2.0)
    assert cold["low"] > 1.1 and cold["measure"] == "load_time" and cmp["drift_runs"] == 3
    assert cold["drift"]["source"] == "history" and cold["drift"]["runs"] == 3
    # the same cell at another stage, and warm at the same stage, did not move: stage by stage, cache by cache
    assert by_path[COLD_TL.format(stage="loader_return")]["verdict"] == compare.NO_CHANGE
    warm = by_path[COLD_TL.format(stage="all_touched").replace("cache=cold", "cache=warm")]
    assert warm["verdict"] == compare.NO_CHANGE and warm["ratio"] == pytest.approx(1.0)
    load = [f for f in cmp["figures"] if f["experiment"] == "load"]
    assert len(load) >= 20 and all(f"stages.{f['stage']}." in f["path"] for f in load)
    assert cmp["counts"]["changed"] == 1  # peak RSS and every other load figure did not change
    assert [f["path"] for f in cmp["figures"] if f["verdict"] == compare.CHANGED] == [cold["path"]]
    assert {"host", "kernel", "fstype", "torch", "disklab_version"} <= set(cmp["context"]["new"])
    # without the option the same comparison exits 0; as text it names the load cell
    rc, text, _ = _compare_cli(capsys, "--reports", str(reports), "compare", "linuxbox")
    assert rc == 0
    line = next(x for x in text.splitlines() if "load · torch.load, big_pt · cold · all_touched · time" in x)
    assert "1.000 s -> 2.000 s" in line and "2.00× (" in line and "changed, slower" in line


@pytest.mark.heavy
def test_an_upgrade_that_moved_no_load_exits_zero(tmp_path, capsys, lab_doc):
    old = tmp_path / "a.json"
    new = tmp_path / "b.json"
    stored.write(old, "results", lab_doc)
    stored.write(
        new,
        "results",
        _scaled(
            lab_doc, 1.0, method="torch.load", cache="cold", stage="all_touched", run_id="20261130T100000Z"
        ),
    )
    rc, out, _ = _compare_cli(capsys, "compare", "--json", "--fail-on-change", str(old), str(new))
    cmp = json.loads(out)
    assert schemas.first_error("compare", cmp) is None
    assert rc == 0 and cmp["counts"]["changed"] == 0 and cmp["counts"]["verdicts_changed"] == 0
    assert any(f["path"] == COLD_TL.format(stage="all_touched") for f in cmp["figures"])
    assert {v["name"]: v["changed"] for v in cmp["verdicts"]}[
        "powercut · 5 temp + fsync + rename + dir fsync · power-cut"
    ] is False
    rc, _, err = _compare_cli(capsys, "compare", "--json", str(old), str(tmp_path / "missing.json"))
    assert rc == 2 and "missing.json does not exist" in err


def test_a_changed_power_cut_verdict_fails_the_gate(tmp_path, capsys, lab_doc):
    new = copy.deepcopy(lab_doc)
    new["experiments"]["powercut"] = powercut_section(atomic_cut="unsafe")
    cmp = compare.compare_runs(lab_doc, new)
    changed = [v for v in cmp["verdicts"] if v["changed"]]
    assert [(v["old"], v["new"]) for v in changed] == [("safe", "unsafe")]
    assert compare.n_changed(cmp) == 1 and cmp["counts"]["changed"] == 0


def _residency_only(doc: dict, cache_state: str | None = None) -> dict:
    """``doc`` as a run from before results 3: its samples' cache proof upgraded, not recorded (with
    ``cache_state``, the first sample's as that run judged it)."""
    old = copy.deepcopy(doc)
    for s in old["experiments"]["load"]["samples"]:
        s.pop("cache_proof", None)
    if cache_state:
        old["experiments"]["load"]["samples"][0]["cache_state"] = cache_state
    stored._results_3_io_record(old)
    return old


def test_a_sample_that_failed_its_cache_proof_is_never_compared_as_cold(lab_doc):
    old = _residency_only(lab_doc)
    new = copy.deepcopy(lab_doc)
    cold = [
        s
        for s in new["experiments"]["load"]["samples"]
        if s["method"] == "torch.load" and s["cache_state"] == "cold"
    ]
    cold[0]["cache_proof"] = {"verdict": "cold_unproven", "failed": "device reads"}  # the three-part proof
    cold[1]["stages"]["all_touched"]["time_s"] = 0.001  # a warm-fast time, in a sample whose proof held
    cold[1]["cache_proof"] = {"verdict": "cold"}
    cmp = compare.compare_runs(old, new)
    f = next(f for f in cmp["figures"] if f["path"] == COLD_TL.format(stage="all_touched"))
    assert f["new"]["n"] == 2 and f["new"]["min"] == 0.001  # only the two that count as cold
    unproven = [u for u in cmp["figures_unproven"] if u["cache"] == "cold_unproven"]
    assert unproven and all(u["n_old"] == 0 and u["n_new"] == 1 for u in unproven)
    text = compare.render_compare_text(cmp)
    assert "not compared, their cache proof failed" in text
    assert cmp["cache_proof"] == {"old": "residency", "new": "three_part"}
    assert "rest on residency alone in the old run and on the three-part cache proof in the new one" in text
    # without a proof record the sample's own flag decides, as the upgraded proof's verdict
    keys = {f.key for f in figures.extract(_residency_only(lab_doc, "cold_unverified"))}
    assert any("[cache=cold_unproven]" in k for k in keys)


# --- the fleet side by side ----------------------------------------------------------------------


def _two_host_fleet(tmp_path: Path, lab_doc: dict) -> Path:
    reports = tmp_path / "reports"
    _store(reports, lab_doc, "dgx1")
    mac = copy.deepcopy(lab_doc)
    mac["run_id"] = "20261129T110000Z"
    for s in mac["experiments"]["load"]["samples"]:
        for st in s["stages"].values():
            if st["status"] == "ok":
                st["time_s"] *= 3
    mac["experiments"]["fsync_bench"]["modes"]["fsync"]["latency"]["p50_us"] = 4321.0
    mac["experiments"]["ceiling"] = ceiling_section(tmp_path / "ceiling")
    _store(reports, mac, "spark")
    return reports


@pytest.mark.heavy
def test_a_two_host_fleet_renders_the_side_by_side_tables(tmp_path, lab_doc):
    reports = _two_host_fleet(tmp_path, lab_doc)
    written, errors = report.render_all(reports)
    assert not errors
    index = (reports / "index.md").read_text()
    assert "[fleet.md](fleet.md)" in index
    page = (reports / "fleet.md").read_text()
    for title in FLEET_TABLES:
        assert f"## {title}" in page
    lines = page.splitlines()
    assert lines.count("| figure | dgx1 | spark |") == 10  # the runs table and nine questions
    sync = next(x for x in lines if x.startswith("| 4 KiB write + durable sync, p50 |"))
    ours = lab_doc["experiments"]["fsync_bench"]["modes"]["fsync"]["latency"]["p50_us"]
    from disklab import units

    assert sync == f"| 4 KiB write + durable sync, p50 | {units.us_short(ours)} (fsync) | 4.3 ms (fsync) |"
    cold_at = lines.index("## Cold load at all_touched")
    row = next(x for x in lines[cold_at:] if x.startswith("| torch.load, big_pt |"))
    assert (
        row == "| torch.load, big_pt | 1.000 s [0.900 s, 1.200 s] (n=3) | 3.000 s [2.700 s, 3.600 s] (n=3) |"
    )
    ceiling = next(x for x in lines if x.startswith("| cold sequential read |"))
    assert ceiling == "| cold sequential read | ceiling not measured in this run | 1,536 MiB/s |"
    rss = next(x for x in lines if x.startswith("| torch.load, big_pt · cold |"))
    assert rss == "| torch.load, big_pt · cold | 460.00 MiB | 460.00 MiB |"
    assert (
        "| 5 temp + fsync + rename + dir fsync · power-cut | safe (40 states) | safe (40 states) |" in lines
    )
    assert (
        "| 1 torch.save in place · process-kill | **unsafe** (12 states) | **unsafe** (12 states) |" in lines
    )
    for plot in (fleet.LOAD_PLOT, fleet.SYNC_PLOT):
        assert (reports / fleet.PLOT_DIR / plot).read_bytes().startswith(b"\x89PNG")
        assert f"]({fleet.PLOT_DIR}/{plot})" in page
    # a second render reads the fleet columns from the hosts' render stamps, says the same, draws nothing
    drawn = {p: (reports / fleet.PLOT_DIR / p).stat().st_mtime_ns for p in (fleet.LOAD_PLOT, fleet.SYNC_PLOT)}
    report.render_all(reports)
    assert (reports / "fleet.md").read_text() == page
    assert drawn == {p: (reports / fleet.PLOT_DIR / p).stat().st_mtime_ns for p in drawn}


def test_first_response_side_by_side_and_an_older_run_not_measured(linux_doc):  # noqa: F811
    """A results-5 host beside a host whose run predates the first response: the first_response tables
    carry the big model's methods, cold and warm, and say the older host did not measure them."""
    new = copy.deepcopy(linux_doc)
    new["experiments"]["load"] = make_v5_section()
    old = copy.deepcopy(linux_doc)
    old["experiments"]["load"] = make_section()
    rows = [
        {"host": h, "fleet": fleet.host_column(d), "durable_sync": report.durable_sync(d)}
        for h, d in (("new", new), ("old", old))
    ]
    _, tables = fleet.tables(rows)
    by_name = {t["name"]: t for t in tables}
    assert [t["title"] for t in tables if "first_response" in t["title"]] == [
        "Cold load at first_response", "Warm load at first_response", "Peak RSS at first_response",
    ]  # fmt: skip
    cold = dict(by_name["load_cold_first_response"]["rows"])
    assert cold["torch.load-mmap → module (assign), big_pt"] == [
        "1.500 s [1.350 s, 1.800 s] (n=3)",
        fleet.NOT_MEASURED,
    ]
    assert list(cold)[:3] == [
        "torch.load → module (assign), big_pt",
        "torch.load-mmap → module (assign), big_pt",
        "load_file → module (assign), big_safetensors",
    ]
    warm = dict(by_name["load_warm_first_response"]["rows"])
    assert warm["load_file → module (assign), big_safetensors"][0] == "0.300 s [0.270 s, 0.360 s] (n=3)"
    rss = dict(by_name["rss_first_response"]["rows"])
    assert rss["torch.load → module (assign), big_pt · cold"] == ["300.00 MiB", fleet.NOT_MEASURED]
    # all_touched keeps both hosts' cells: the old host's unpopulated big cells, the new host's populated ones
    at = dict(by_name["load_cold"]["rows"])
    assert at["torch.load, big_pt"] == [fleet.NOT_MEASURED, "1.000 s [0.900 s, 1.200 s] (n=3)"]
    assert at["torch.load → module (assign), big_pt"][0] == "1.000 s [0.900 s, 1.200 s] (n=3)"


def test_a_method_measured_with_no_sample_proven_says_so_not_not_measured(linux_doc):  # noqa: F811
    """Every warm load_file sample failed its warm check (an O_DIRECT loader has no provable warm state, a
    network filesystem drops the cache at open): its warm cells say it was measured and why none counts."""
    doc = copy.deepcopy(linux_doc)
    section = make_v5_section()
    for s in section["samples"]:
        if (s["method"], s["file"], s["cache_state"]) == ("load_file", "big_safetensors", "warm"):
            s["cache_state"] = s["cache_proof"]["verdict"] = "warm_unverified"
    section["cells"] = load.summarise(section["samples"])
    doc["experiments"]["load"] = section
    rows = [{"host": "h", "fleet": fleet.host_column(doc), "durable_sync": report.durable_sync(doc)}]
    _, tables = fleet.tables(rows)
    by_name = {t["name"]: t for t in tables}
    for name in ("load_warm", "load_warm_first_response"):
        cells = dict(by_name[name]["rows"])
        assert cells["load_file → module (assign), big_safetensors"] == [
            "measured, no sample proven warm (3 warm_unverified)"
        ], name
    cold = dict(by_name["load_cold_first_response"]["rows"])  # its cold samples were proven: a figure
    assert cold["load_file → module (assign), big_safetensors"][0].endswith("(n=3)")


def test_a_fleet_without_load_figures_says_why_in_each_load_table(linux_doc):  # noqa: F811
    """Runs without the load step (the fleet lab test's steps): the load and RSS tables name why per host."""
    other = copy.deepcopy(linux_doc)
    other["experiments"]["load"] = {"status": "not_run", "reason": "no torch on this host"}
    rows = [
        {"host": h, "fleet": fleet.host_column(d), "durable_sync": report.durable_sync(d)}
        for h, d in (("a", linux_doc), ("b", other))
    ]
    assert "load" not in linux_doc["experiments"]
    _, tables = fleet.tables(rows)
    by_name = {t["name"]: t for t in tables}
    for name, stage in (
        ("load_cold", "all_touched"),
        ("load_warm", "all_touched"),
        ("rss", "all_touched"),
        ("load_cold_first_response", "first_response"),
        ("rss_first_response", "first_response"),
    ):
        assert by_name[name]["rows"] == [
            (
                f"load cells at {stage}",
                ["load not measured in this run", "load not run: no torch on this host"],
            )
        ], name


def test_a_big_fleet_turns_the_tables_round(lab_doc):
    rows = [
        {
            "host": f"h{i:02d}",
            "fleet": fleet.host_column(lab_doc),
            "durable_sync": report.durable_sync(lab_doc),
        }
        for i in range(fleet.MAX_COLUMNS + 1)
    ]
    hosts, tables = fleet.tables(rows)
    text = (
        report.environment()
        .get_template(fleet.TEMPLATE)
        .render(
            disklab_version="x",
            schema_version=2,
            tables=tables,
            plots={},
            columns=False,
            max_columns=fleet.MAX_COLUMNS,
            together=None,
        )
    )
    assert "hosts are rows here" in text
    assert sum(1 for x in text.splitlines() if x.startswith("| h16 |")) == len(tables)


# --- export ---------------------------------------------------------------------------------------


@pytest.mark.heavy
def test_export_csv_and_json_round_trip_every_figure(tmp_path, capsys, lab_doc):
    reports = _two_host_fleet(tmp_path, lab_doc)
    out = tmp_path / "figures.csv"
    rc, _, err = _compare_cli(
        capsys, "--reports", str(reports), "export", "--format", "csv", "--out", str(out)
    )
    assert rc == 0 and "exported" in err
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    docs = {h: stored.read(next((reports / h / "runs").glob("*.json")), "results") for h in ("dgx1", "spark")}
    expected = [(h, f) for h, d in docs.items() for f in figures.extract(d)]
    assert len(rows) == len(expected)
    for row, (host, f) in zip(rows, expected, strict=True):
        assert (row["host"], row["key"], row["unit"], row["stage"], row["cache"]) == (
            host,
            f.key,
            f.unit or "",
            f.stage or "",
            f.cache or "",
        )
        if f.kind == figures.SAMPLES:
            assert float(row["median"]) == f.summary["median"] and int(row["n"]) == len(f.samples)
    cold = next(r for r in rows if r["host"] == "spark" and r["key"] == COLD_TL.format(stage="all_touched"))
    assert (cold["method"], cold["file"], cold["n"], float(cold["median"])) == (
        "torch.load",
        "big_pt",
        "3",
        3.0,
    )
    assert next(r for r in rows if r["key"] == "experiments.ceiling.cold_mib_s")["median"] == "1536.0"
    rc, text, _ = _compare_cli(
        capsys, "--reports", str(reports), "export", "--format", "json", "--host", "dgx1"
    )
    data = json.loads(text)
    assert rc == 0 and data["columns"] == list(export.COLUMNS)
    assert (data["kind"], data["schema_version"]) == ("export", 2)
    assert schemas.first_error("export", data) is None
    assert [(r["key"], r["samples"]) for r in data["rows"]] == [
        (f.key, list(f.samples)) for f in figures.extract(docs["dgx1"])
    ]
    verdict = next(r for r in data["rows"] if r["unit"] == "verdict" and r["method"] == "naive")
    assert verdict["value"] == "unsafe" and verdict["n"] == 12
    rc, _, err = _compare_cli(capsys, "--reports", str(reports), "export", "--host", "nope")
    assert rc == 2 and "--host nope" in err
    # JSON Lines: the json document's rows, one per line, each with its own kind and schema version
    rc, text, _ = _compare_cli(
        capsys, "--reports", str(reports), "export", "--format", "jsonl", "--host", "dgx1"
    )
    lines = [json.loads(x) for x in text.splitlines()]
    assert rc == 0 and len(lines) == len(data["rows"]) and text.endswith("\n")
    for line, row in zip(lines, data["rows"], strict=True):
        assert (line.pop("kind"), line.pop("schema_version")) == ("export_row", 2) and line == row
    assert all(schemas.first_error("export_row", json.loads(x)) is None for x in text.splitlines())


def test_the_output_schemas_refuse_what_a_consumer_could_not_read(lab_doc):
    # each shipped output schema can fail: a row without its unit, a document of another kind or version
    (row,) = export.rows_of(lab_doc, "h")[:1]
    assert schemas.first_error("export_row", row) is None
    assert "unit" in schemas.first_error("export_row", {k: v for k, v in row.items() if k != "unit"})
    doc = json.loads(export.to_json([row]))
    assert "kind" in schemas.first_error("export", {**doc, "kind": "compare"})
    assert "schema_version" in schemas.first_error("export", {**doc, "schema_version": 3})
    cmp = json.loads(compare.to_json(compare.compare_runs(lab_doc, lab_doc)))
    assert schemas.first_error("compare", cmp) is None
    assert "counts" in schemas.first_error("compare", {k: v for k, v in cmp.items() if k != "counts"})
