"""The crash section from a real (tiny) run of the step: schema, computed explanations, plot and template."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jinja2
import jsonschema
import pytest

from disklab import markup, units
from disklab.sections import crash as section_mod
from disklab_host.steps import crash

SRC = Path(__file__).resolve().parent.parent / "src" / "disklab"
SCHEMA = json.loads((SRC / "schema" / "experiments" / "crash.schema.json").read_text())


@pytest.fixture(scope="module")
def section(tmp_path_factory):
    wb = tmp_path_factory.mktemp("crash-workbench")
    cfg = {"sizes": {"crash_state_mib": 8, "crash_time_points": 2, "crash_repeats": 1}}
    return crash.run(cfg, wb)


def _render(s: dict, x: dict, results: dict) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(SRC / "templates")), undefined=jinja2.StrictUndefined
    )
    env.filters.update(units.FILTERS)
    env.filters.update(markup.FILTERS)  # the report's escaping (disklab.report.environment)
    return env.get_template("sections/crash.md.j2").render(section=s, view=x, results=results)


@pytest.mark.heavy
def test_real_section_matches_the_schema(section):
    jsonschema.validate(section, SCHEMA)
    assert set(section["modes"]) == set(crash.KILL_MODES)
    for mode, m in section["modes"].items():
        n_time = 2 if mode in crash.TIME_MODES else 0
        assert len(m["kills"]) == len(crash.PROGRESS_POINTS) + n_time


def test_schema_refuses_a_field_without_its_unit(section):
    bad = copy.deepcopy(section)
    bad["modes"]["naive"]["full"] = bad["modes"]["naive"].pop("full_bytes")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


@pytest.mark.heavy
def test_build_explains_from_this_runs_numbers(section, tmp_path):
    results = {"experiments": {"crash": section}}
    x = section_mod.build(section, results, tmp_path / "plots")
    naive = section["modes"]["naive"]
    n_corrupt = sum(k["outcome"] == "corrupt" for k in naive["kills"])
    assert x["explanations"][0].startswith(f"naive: {n_corrupt} of {len(naive['kills'])} kills")
    atomic = section["modes"]["atomic"]
    assert any(
        f"all {len(atomic['kills'])} kills left a checkpoint that loads" in e for e in x["explanations"]
    )
    assert x["plot"] == "plots/crash_bytes.png"
    assert (tmp_path / "plots" / "crash_bytes.png").read_bytes()[:4] == b"\x89PNG"
    assert len(x["rows"]) == sum(len(m["kills"]) for m in section["modes"].values())
    # no powercut step in these results: the report says so instead of pointing at it
    assert "powercut step did not run" in x["break_it"]["fsync_before_flush"]
    with_pc = section_mod.build(section, {"experiments": {"crash": section, "powercut": {}}}, tmp_path / "p2")
    assert "see the powercut section" in with_pc["break_it"]["fsync_before_flush"]


def test_rendered_report_shows_the_facts(section, tmp_path):
    results = {"experiments": {"crash": section}}
    x = section_mod.build(section, results, tmp_path / "plots")
    md = _render(section, x, results)
    assert units.ibytes(section["state_bytes"]) in md
    assert units.ibytes(section["modes"]["atomic"]["full_bytes"]) in md
    assert section["torch_version"] in md and section["safetensors_version"] in md
    assert "![Bytes of the new checkpoint" in md
    fe = section["break_it"]["fsync_error"]
    assert f"step {fe['atomic']['step']}" in md and "test double" in md
    xd = section["break_it"]["cross_device"]
    assert (xd["replace_error"] if xd["status"] == "reproduced" else "not reproducible on this host") in md
    for k in section["modes"]["naive"]["kills"]:
        if k["error"]:
            assert section_mod._short(k["error"]) in md
            assert f"{units.ibytes(k['new_written_bytes'])} (" in md


def test_cross_device_not_reproducible_is_said_plainly(section, tmp_path):
    s = copy.deepcopy(section)
    s["break_it"]["cross_device"] = {
        "status": "not_reproducible",
        "reason": "no writable directory on another filesystem",
        "tried": [{"dir": "/dev/shm", "skipped": "does not exist"}],
        "workbench_dev": 1,
    }
    jsonschema.validate(s, SCHEMA)
    x = section_mod.build(s, {"experiments": {"crash": s}}, tmp_path)
    assert "not reproducible on this host (no writable directory on another filesystem)" in _render(s, x, {})


@pytest.mark.parametrize(
    "s",
    [
        {"status": "not_run", "reason": "no torch in the lab venv"},
        {"status": "failed", "error": "RuntimeError: saver.py died", "traceback": "..."},
    ],
)
def test_failed_and_not_run_sections_render(s, tmp_path):
    jsonschema.validate(s, SCHEMA)
    x = section_mod.build(s, {}, tmp_path)
    assert x["plot"] is None and not list(tmp_path.iterdir())
    md = _render(s, x, {})
    assert (s.get("reason") or s.get("error")) in md


@pytest.mark.heavy
def test_the_report_says_how_the_progress_kills_were_placed(section, tmp_path):
    # strace is installed here (CI installs it): every progress kill is a stop at a named write
    assert section["progress_stop_unusable"] is None
    progress = [k for m in section["modes"].values() for k in m["kills"] if k["kill_by"] == "progress"]
    assert progress and all(k["kill_method"] == "strace_stop" for k in progress)
    x = section_mod.build(section, {"experiments": {"crash": section}}, tmp_path / "plots")
    md = _render(section, x, {})
    assert "Kills by progress are exact" in md
    at = progress[0]["stopped_at"]
    assert f"stopped after {at['syscall']} #{at['ordinal']}" in md
    # where strace could not stop the saver, the report says why and what it means
    s = copy.deepcopy(section)
    s["progress_stop_unusable"] = "strace is not installed"
    for m in s["modes"].values():
        for k in m["kills"]:
            if k["kill_by"] == "progress":
                k["kill_method"], k["stopped_at"] = "poll", None
    jsonschema.validate(s, SCHEMA)
    md = _render(s, section_mod.build(s, {"experiments": {"crash": s}}, tmp_path / "p2"), {})
    assert "watched the file and sent SIGKILL once it had grown that far (strace is not installed)" in md
    assert "by watching the file" in md
