"""The report answers first (issue 28): "On this host" at the top of each host report, each step's latest
result from whichever stored run holds it, and the fleet's answers at the top of the index.

The results documents are real where this host can make them: write_buffering, fsync_bench and big_write
(test_report's ``linux_doc``), crash and pickle_safety measured here at tiny sizes; the load section is made
of synthetic samples of known times passed through the host-side summariser (test_load_section), the
power-cut section is written by hand (test_fleet_figures). Every expected number is computed here from the
stored document itself, never by calling the code that wrote the answer.
"""

from __future__ import annotations

import copy
import json
import re
import statistics
from pathlib import Path

import pytest

import shared
from conftest import copy_render_caches, unrendered_copy, viewer_heading_ids
from disklab import report, schemas, stored, units
from disklab_host.loadlab import proof
from disklab_host.steps import crash, pickle_safety
from disklab_host.steps import load as load_step
from test_fleet_figures import powercut_section
from test_load_section import BIG_TOKEN, make_section, make_v5_section
from test_report import linux_doc  # noqa: F401  (the fixture: a results document measured here)

FULL = "20261129T100000Z"
ONE_STEP = "20261130T090000Z"
DEVICE = {
    "name": "vda",
    "disk": "vda",
    "partition": False,
    "rotational": False,
    "scheduler": {"active": "none", "available": ["none", "mq-deadline"]},
    "read_ahead_kb": 128,
    "model": {"unavailable": "device/model: not found (/sys/block/vda/device/model)"},
    "vendor": "0x1af4",
    "write_cache": "write back",
    "fua": False,
    "pcie_link": {"unavailable": "vda is not an NVMe device: no PCIe link in /sys for it"},
    "dm": {"unavailable": "vda is not a device-mapper device"},
    "loop_backing_file": {"unavailable": "vda is not a loop device"},
    "loop_direct_io": {"unavailable": "vda is not a loop device"},
}


@pytest.fixture(scope="module")
def full_doc(linux_doc, tmp_path_factory) -> dict:  # noqa: F811
    """Every step the answers read: the real write path, a real crash and pickle_safety run, load and
    power-cut sections of known figures; the run's own workbench facts (results 4) on a known device.
    Measured once per run and read by every module that imports this fixture (tests/shared.py)."""
    doc = shared.once_per_run(tmp_path_factory, "full_doc", lambda wb: _measure_full_doc(linux_doc, wb))
    assert schemas.first_error("results", doc) is None
    return doc


def _measure_full_doc(base: dict, wb: Path) -> dict:
    (wb / "c").mkdir()
    (wb / "p").mkdir()
    doc = copy.deepcopy(base)
    exps = doc["experiments"]
    exps["crash"] = {
        **crash.run({"sizes": {"crash_state_mib": 4, "crash_time_points": 1, "crash_repeats": 1}}, wb / "c"),
        "step_wall_s": 1.0,
    }
    exps["powercut"] = powercut_section(atomic_cut="safe")
    exps["load"] = make_section(unverified=True)
    exps["pickle_safety"] = {**pickle_safety.run({}, wb / "p"), "step_wall_s": 1.0}
    doc["workbench"] = {**copy.deepcopy(doc["facts"]["workbench"]), "device": {**DEVICE, "name": "vdfull"}}
    doc["facts"]["host"]["kernel"] = "6.1.0-full"
    doc["facts"]["versions"]["torch"] = "2.13.0"
    return doc


@pytest.fixture(scope="module")
def drawn(full_doc, tmp_path_factory) -> Path:
    """full_doc stored and rendered once for the module: its plots drawn and its stored run checked, for
    the tests that render it (conftest.unrendered_copy), or a run that shares most of its plots
    (conftest.copy_render_caches: a plot whose data differ is drawn again), and check the pages."""
    reports = tmp_path_factory.mktemp("drawn") / "reports"
    _store(reports, full_doc)
    _render(reports)
    return reports


def _store(reports: Path, doc: dict) -> Path:
    path = reports / doc["host"] / "runs" / f"{doc['run_id']}.json"
    stored.write(path, "results", doc)
    return path


def _render(reports: Path, host: str = "linuxbox") -> str:
    _, errors = report.render_all(reports)
    assert errors == []
    return (reports / host / "report.md").read_text()


def answers_block(text: str) -> list[str]:
    """The non-empty lines of the "On this host" block: from its heading to the next heading."""
    head, _, rest = text.partition("\n## On this host\n")
    assert rest, "no On this host block"
    assert head.startswith("# disklab report:") and head.count("\n## ") == 0, "the answers come first"
    block = rest.split("\n## ", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def answer(lines: list[str], label: str) -> str:
    found = [line for line in lines if line.startswith(f"- [{label}](")]
    assert len(found) == 1, (label, lines)
    return found[0]


def section(text: str, step: str) -> str:
    """A step's section: from the heading that its links (report.anchor) reach, by the id a markdown viewer
    gives it (conftest.viewer_heading_ids), to the next ``## `` heading."""
    anchor = report.anchor(step)
    headings = dict(viewer_heading_ids(text))
    assert anchor in headings, (step, anchor, headings)
    start = text.index(f"\n## {headings[anchor]}\n") + 1
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else len(text)]


def _stored(path: Path) -> dict:
    return json.loads(path.read_text())  # the stored document, as the test reads it: no disklab code


def _median(values: list[float]) -> float:
    return statistics.median(values)


# --- "On this host" -----------------------------------------------------------------------------------


@pytest.mark.heavy
def test_the_report_opens_with_at_most_15_answers_each_linking_to_an_anchor_in_the_page(
    tmp_path, full_doc, drawn
):
    reports = unrendered_copy(drawn, tmp_path / "reports")
    text = _render(reports)
    lines = answers_block(text)
    assert 7 <= len(lines) <= 15, lines
    ids = dict(viewer_heading_ids(text))
    for line in lines:
        links = re.findall(r"\]\(#([^)]+)\)", line)
        assert links, line
        assert set(links) <= set(ids), (line, ids)
    for step in ("write_buffering", "fsync_bench", "big_write", "crash", "powercut", "load", "pickle_safety"):
        assert any(f"(#{report.anchor(step)})" in line for line in lines), step
    assert text.index("## On this host") < text.index("## Host") < text.index("## Write buffering: one byte")


def _buffer_answer(unbuf: float, buf: float) -> str:
    """The answer's words for these medians: a machine busy enough to turn a real run's around gets the
    second wording (both are checked on set figures in test_write_path_sections)."""
    if unbuf > buf:
        figures = f"({units.ns(unbuf)} against {units.ns(buf)} per call, medians)"
        return f"cost {units.ratio(unbuf / buf)} a buffered `f.write` {figures}"
    figures = f"({units.ns(buf)} against {units.ns(unbuf)} per call, medians)"
    return f"was not cheaper than an unbuffered 1-byte `os.write` here {figures}"


@pytest.mark.heavy
def test_the_answers_numbers_are_the_figures_in_the_sections(tmp_path, full_doc, drawn):
    reports = unrendered_copy(drawn, tmp_path / "reports")
    doc = _stored(reports / "linuxbox" / "runs" / f"{FULL}.json")
    text = _render(reports)
    lines = answers_block(text)
    e = doc["experiments"]

    wb = e["write_buffering"]["modes"]
    unbuf, buf = wb["unbuffered"]["per_call_ns"]["median"], wb["buffered"]["per_call_ns"]["median"]
    line = answer(lines, "A syscall against the buffer")
    assert _buffer_answer(unbuf, buf) in line
    assert f"Unbuffered over buffered (medians): {units.ratio(unbuf / buf)}." in section(
        text, "write_buffering"
    )

    lat = e["fsync_bench"]["modes"]["fsync"]["latency"]
    line = answer(lines, "A durable sync")
    assert f"plus `fsync` took {units.us(lat['p50_us'])} at p50 ({units.us(lat['p99_us'])} at p99)" in line
    assert "vdfull reports a volatile write cache (`write back`)" in line  # the run's own device
    row = next(r for r in section(text, "fsync_bench").splitlines() if r.startswith("| fsync | "))
    assert f"| {units.us(lat['p50_us'])} |" in row and f"| {units.us(lat['p99_us'])} |" in row

    bw = e["big_write"]
    after = next(r for r in bw["layers"]["rows"] if r["point"] == "after_write")["pages"]
    line = answer(lines, "A big write")
    assert f"{after['dirty_pages']:,} dirty and {after['writeback_pages']:,} writeback pages" in line
    pending = after["dirty_pages"] + after["writeback_pages"]
    assert ("still in the page cache" if pending else "already written back") in line
    layers_row = next(r for r in section(text, "big_write").splitlines() if r.startswith("| after `write()`"))
    assert f"| {after['dirty_pages']:,} | {after['writeback_pages']:,} |" in layers_row
    assert "plain_fsync_samples_s" not in bw  # Linux: fsync alone is the sync
    shares = [f / (w + f) for w, f in zip(bw["write_samples_s"], bw["fsync_samples_s"], strict=True)]
    assert f"took {units.pct(_median(shares))} of write + sync" in line
    assert f"fsync's share {units.pct(_median(shares))}" in section(text, "big_write")

    line = answer(lines, "A kill during a save")
    for mode in ("naive", "atomic"):
        kills = e["crash"]["modes"][mode]["kills"]
        loads = sum(k["outcome"] in ("old_ok", "new_ok") for k in kills)
        assert f"{mode}: {loads} of {len(kills)} SIGKILLs left a checkpoint that loads" in line

    line = answer(lines, "A power cut")
    recipes = e["powercut"]["recipes"]
    unsafe = [r for r in recipes if r["models"]["power_cut"]["verdict"] == "unsafe"]
    assert f"{len(unsafe)} of {len(recipes)} save recipes are unsafe under a simulated power cut" in line
    for r in unsafe:
        assert f"{r['number']} {r['title']}" in line
        assert f"| {r['number']} {r['title']} | power-cut | **unsafe** |" in section(text, "powercut")

    samples = e["load"]["samples"]

    def times(method, file, state, stage="all_touched"):
        return [
            s["stages"][stage]["time_s"]
            for s in samples
            if (s["method"], s["file"], s["cache_proof"]["verdict"]) == (method, file, state)
        ]

    cold, warm = (
        _median(times("torch.load", "big_pt", "cold")),
        _median(times("torch.load", "big_pt", "warm")),
    )
    line = answer(lines, "Cold against warm")
    assert "torch.load, big_pt (256.00 MiB) reached readiness stage `all_touched`" in line
    assert f"in {units.secs(cold)} cold against {units.secs(warm)} warm" in line
    assert f"{units.ratio(cold / warm)} its warm time" in line
    assert "proven cold by residency and device reads in 3 of 3 samples" in line
    assert "warm by residency: at least 99 % resident just before the call in 3 of 3 samples" in line
    load_text = section(text, "load")
    assert f"| torch.load, big_pt | cold | all_touched | {units.secs(cold)} [" in load_text
    # the fastest method to loader_return on the biggest file (both big files are 256 MiB: big_safetensors
    # sorts last), cold: the three methods on it, proven cold
    big = "big_safetensors"
    best = min(
        (
            (m, _median(times(m, big, "cold", "loader_return")))
            for m in ("load_file", "one-tensor", "load_file+willneed")
        ),
        key=lambda mt: mt[1],
    )
    line = answer(lines, "Fastest to `loader_return`")
    assert f"on big_safetensors (256.00 MiB): cold: {best[0]} in {units.secs(best[1])} (median)" in line
    assert "`module_populated`" in answer(lines, "Fastest to `module_populated`")
    assert "peak RSS" in answer(lines, "Fastest to `all_touched`")
    line = answer(lines, "Fastest to `device_placed`")
    assert "no figure: `device_placed` was not measured: torch.cuda.is_available() is False" in line
    bad = [
        s
        for s in samples
        if s["cache_proof"]["verdict"] != "cold" and s["cache_proof"]["requested"] == "cold"
    ]
    line = answer(lines, "Cold proof failed")
    assert (
        f"{len(bad)} cold sample(s) failed their proof (residency)" in line
        and "load_file, big_safetensors" in line
    )

    ps = e["pickle_safety"]
    line = answer(lines, "A malicious pickle")
    assert ps["refused"] and not ps["marker_created"]  # this torch refuses (test_pickle_safety)
    assert f"torch {ps['torch_version']} refused the crafted .pt ({ps['error_type']})" in line
    assert "the payload did not run" in line


@pytest.mark.heavy
def test_the_big_models_stages_and_first_response_are_answered(tmp_path, full_doc, drawn):
    """Results 5: the big file reaches module_populated and first_response; the answers name the fastest
    method to each, cold and warm, with its proof and peak RSS, and a disagreement gets its own line."""
    doc = copy.deepcopy(full_doc)
    doc["experiments"]["load"] = make_v5_section()
    assert schemas.first_error("results", doc) is None
    reports = tmp_path / "reports"
    _store(reports, doc)
    copy_render_caches(drawn, reports)  # the load plot differs: drawn again
    lines = answers_block(_render(reports))
    assert len(lines) <= 15
    line = answer(lines, "Fastest to `first_response`")
    # cold: torch.load 0.9 s, load_file 0.7 s, torch.load-mmap 1.5 s (medians; warm 0.3, 0.3, 0.2): the
    # same `big` weights in big_pt and big_safetensors, so every method on either file competes, and the
    # winner names its file
    held = (
        "on the `big` weights, in every file that held them (big_pt 256.00 MiB, big_safetensors 256.00 MiB)"
    )
    assert line.count(held) == 1
    assert (
        "cold: load_file → module (assign) from big_safetensors in 0.700 s (median), peak RSS 300.00 MiB, "
        "proven cold by" in line
    )
    assert (
        "warm: torch.load-mmap → module (assign) from big_pt in 0.200 s (median), peak RSS 300.00 MiB, "
        "warm by residency" in line  # warm, mmap (0.2 s) beats load_file (0.3 s), across the two files
    )
    # module_populated: torch.load-mmap on big_pt (0.010 s cold) beats load_file on big_safetensors (0.410 s):
    # a file-by-file answer would have named load_file
    line = answer(lines, "Fastest to `module_populated`")
    assert "cold: torch.load-mmap → module (assign) from big_pt in 0.010 s (median)" in line
    assert "warm: torch.load-mmap → module (assign) from big_pt in 0.010 s (median)" in line
    assert "no figure: `device_placed` was not measured" in answer(lines, "Fastest to `device_placed`")
    assert not [ln for ln in lines if "First responses disagree" in ln]
    odd = copy.deepcopy(full_doc)
    odd["experiments"]["load"] = make_v5_section(odd_token=7)
    first, reports = reports, tmp_path / "odd"
    _store(reports, odd)
    copy_render_caches(first, reports)  # the same times: only the pages differ
    line = answer(answers_block(_render(reports)), "First responses disagree")
    assert f"big: token {BIG_TOKEN} ×17, token 7 ×1" in line


@pytest.mark.heavy
def test_an_old_run_says_first_response_was_not_measured(tmp_path, full_doc, drawn):
    doc = copy.deepcopy(full_doc)
    doc["schema_version"] = 4  # read through update_to_5, as a stored run from before the stage
    reports = tmp_path / "reports"
    path = reports / doc["host"] / "runs" / f"{doc['run_id']}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    copy_render_caches(drawn, reports)  # the same figures; these other bytes are read and checked anew
    text = _render(reports)
    lines = answers_block(text)
    assert "no figure: `first_response` was not measured: not measured in this run" in answer(
        lines, "Fastest to `first_response`"
    )
    load = section(text, "load")
    assert "`first_response` not run: not measured in this run: written before results version 5" in load
    assert "No load reached `first_response` in this run." in load
    assert "In this run the big file was not a model" in load
    assert "| torch.load, big_pt | cold | all_touched |" in load  # its own figures render as they were


@pytest.mark.heavy
def test_a_missing_step_says_why_in_its_line(tmp_path, full_doc, drawn):
    doc = copy.deepcopy(full_doc)
    e = doc["experiments"]
    e["crash"] = {
        "status": "failed",
        "error": "RuntimeError: strace: ptrace: Operation not permitted",
        "step_wall_s": 0.1,
    }
    e["pickle_safety"] = {
        "status": "not_run",
        "reason": "torch is not installed in the lab venv",
        "step_wall_s": 0.0,
    }
    del e["powercut"]
    e["fsync_bench"] = {"status": "not_run", "reason": "not in lab_run_steps", "step_wall_s": 0.0}
    load = e["load"]
    for s in load["samples"]:  # the device delivered nothing to any cold load: no cold figure is proven
        if s["cache_state_requested"] == "cold":
            s["stages"]["all_touched"]["io"]["device"]["read_bytes"] = 0
            s["cache_proof"] = proof.cache_proof(s, "cold")
            s["cache_state"] = proof.CACHE_STATE[s["cache_proof"]["verdict"]]
    load["cells"] = load_step.summarise(load["samples"])
    load["n_cold_unverified"] = sum(s["cache_state"] == "cold_unverified" for s in load["samples"])
    assert schemas.first_error("results", doc) is None
    reports = tmp_path / "reports"
    _store(reports, doc)
    copy_render_caches(drawn, reports)
    text = _render(reports)
    lines = answers_block(text)
    assert "no figure: crash failed: `RuntimeError: strace: ptrace: Operation not permitted`" in answer(
        lines, "A kill during a save"
    )
    assert "no figure: pickle_safety was not run (torch is not installed in the lab venv)" in answer(
        lines, "A malicious pickle"
    )
    line = answer(lines, "A power cut")
    assert "no figure: no stored run of this host holds the powercut step" in line
    powercut = section(text, "powercut")
    assert (
        powercut.startswith("## Power-cut simulator\n") and "**In no stored run of this host:**" in powercut
    )
    assert "no figure: fsync_bench was not run (not in lab_run_steps)" in answer(lines, "A durable sync")
    assert "no figure: no cold figure at `all_touched` passed its proof" in answer(lines, "Cold against warm")
    assert "cold: no proven cold figure" in answer(lines, "Fastest to `loader_return`")
    n = sum(s["cache_proof"]["requested"] == "cold" for s in load["samples"])
    assert f"{n} cold sample(s) failed their proof (device reads, residency)" in answer(
        lines, "Cold proof failed"
    )


def test_a_summary_without_a_run_says_so(tmp_path, linux_doc):  # noqa: F811
    reports = tmp_path / "reports"
    stored.write(
        reports / "auditonly" / "audits" / f"{FULL}.json",
        "audit",
        {"run_id": FULL, "host": "auditonly", "facts": copy.deepcopy(linux_doc["facts"])},
    )
    lines = answers_block(_render(reports, "auditonly"))
    assert lines == [
        "No lab run stored for this host yet, so there is nothing to answer with: `disklab run` measures it."
    ]


# --- each step's latest result, from whichever run holds it -------------------------------------------


def _without_run_line(body: str) -> str:
    return "\n".join(ln for ln in body.splitlines() if not ln.startswith("From run "))


def _one_step_run(full: dict) -> dict:
    """A later run of write_buffering alone (``disklab run --tags write_buffering``), after an upgrade:
    another kernel, torch and device, and its own (doubled) unbuffered figure."""
    doc = copy.deepcopy(full)
    doc["run_id"] = ONE_STEP
    doc["started_utc"], doc["finished_utc"] = "2026-11-30T09:00:00Z", "2026-11-30T09:00:10Z"
    doc["facts"]["host"]["kernel"] = "6.19.0-new"
    doc["facts"]["versions"]["torch"] = "2.14.0"
    doc["workbench"]["device"] = {**DEVICE, "name": "vdnew", "write_cache": "write through"}
    wb = doc["experiments"]["write_buffering"]
    doc["experiments"] = {"write_buffering": wb}
    m = wb["modes"]["unbuffered"]
    m["per_call_samples_ns"] = [v * 2 for v in m["per_call_samples_ns"]]
    m["per_call_ns"] = {k: v * 2 if k != "n" else v for k, v in m["per_call_ns"].items()}
    doc["lab_code"]["steps"] = {"write_buffering": doc["lab_code"]["steps"]["write_buffering"]}
    assert schemas.first_error("results", doc) is None
    return doc


@pytest.mark.heavy
def test_a_one_step_run_after_a_full_run_keeps_every_section_each_naming_its_run(tmp_path, full_doc, drawn):
    reports = unrendered_copy(drawn, tmp_path / "reports")
    full_path = reports / "linuxbox" / "runs" / f"{FULL}.json"
    before = _render(reports)
    one = _stored(_store(reports, _one_step_run(full_doc)))
    text = _render(reports)
    steps = ("write_buffering", "fsync_bench", "big_write", "crash", "powercut", "load", "pickle_safety")
    for step in steps:
        body = section(text, step)
        assert body.startswith("## ") and body.count("\n## ") == 0, step  # the section, from its heading
        first = [ln for ln in body.splitlines() if ln.strip()][1]  # the heading, then its run
        if step == "write_buffering":
            assert (
                first == f"From run `{ONE_STEP}`, started 2026-11-30T09:00:00Z (UTC), kernel 6.19.0-new, "
                "torch 2.14.0."
            )
        else:
            assert first == (
                f"From run `{FULL}`, started 2026-11-29T10:00:00Z (UTC), kernel 6.1.0-full, torch 2.13.0: "
                "an earlier run than the latest, the newest stored run that holds this step."
            ), (step, first)
        if step != "write_buffering":  # the older run's sections are as they were before the one-step run
            assert _without_run_line(section(before, step)) == _without_run_line(body), step
    # read against the facts of the run each section is from: the full run's device for fsync
    assert "The workbench device is vdfull" in section(text, "fsync_bench")
    assert "vdnew" not in section(text, "fsync_bench")
    lines = answers_block(text)
    modes = one["experiments"]["write_buffering"]["modes"]
    unbuf, buf = modes["unbuffered"]["per_call_ns"]["median"], modes["buffered"]["per_call_ns"]["median"]
    assert _buffer_answer(unbuf, buf) in answer(lines, "A syscall against the buffer")
    assert "vdfull" in answer(lines, "A durable sync")
    note = lines[-1]
    assert note.startswith("- These answers come from 2 runs, each section naming its own:")
    assert f"`{ONE_STEP}` (latest) for [write_buffering](#write-buffering-one-byte-per-call);" in note
    assert f"`{FULL}` for [fsync_bench](#fsync-the-cost-of-durability)" in note
    assert len(lines) <= 15
    assert "Sections from 2 runs." in text
    listed = [ln for ln in text.splitlines() if ln.startswith("> - `")]  # one line per run, not run together
    assert (
        len(listed) == 2
        and listed[0].startswith(f"> - `{ONE_STEP}` (latest): ")
        and "> - " not in listed[0][4:]
    )
    assert "Latest run `20261130T090000Z`" in text
    # the index's durable sync is the full run's, and says which run it is from
    row = next(ln for ln in (reports / "index.md").read_text().splitlines() if ln.startswith("| linuxbox |"))
    p50 = full_doc["experiments"]["fsync_bench"]["modes"]["fsync"]["latency"]["p50_us"]
    assert f"| {units.us_short(p50)} (fsync; run `{FULL}`) |" in row
    # the render stamp covers every run that feeds a section: without the full run, its sections go
    full_path.unlink()
    text = _render(reports)
    assert "Sections from" not in text and "These answers come from" not in text
    assert "no figure: no stored run of this host holds the crash step" in answer(
        answers_block(text), "A kill during a save"
    )


# --- the fleet's answers, at the top of the index -----------------------------------------------------


def _index_answers(reports: Path) -> list[str]:
    index = (reports / "index.md").read_text()
    head, _, rest = index.partition("\n## The fleet's answers\n")
    assert rest and head.startswith("# disklab fleet index") and "\n## " not in head, index[:800]
    return [ln for ln in rest.split("\n## ", 1)[0].splitlines() if ln.strip()]


def _scaled_sync(doc: dict, host: str, factor: float) -> dict:
    doc = copy.deepcopy(doc)
    doc["host"] = host
    lat = doc["experiments"]["fsync_bench"]["modes"]["fsync"]["latency"]
    for k in ("min_us", "p50_us", "p90_us", "p99_us", "max_us"):
        lat[k] *= factor
    return doc


@pytest.mark.heavy
def test_the_index_opens_with_the_fleets_answers_naming_the_standout_hosts(tmp_path, full_doc):
    reports = tmp_path / "reports"
    fast = _scaled_sync(full_doc, "fastbox", 1.0)
    slow = _scaled_sync(full_doc, "slowbox", 40.0)
    fast["experiments"]["load"] = make_section(unverified=False)  # every cold sample proven
    _store(reports, fast)
    _store(reports, slow)
    flagged = _scaled_sync(full_doc, "tmpbox", 2.0)
    flagged["workbench"]["flags"]["tmpfs"] = {"state": "set", "why": "the workbench is on tmpfs"}
    flagged["facts"]["workbench"]["flags"]["tmpfs"] = {"state": "set", "why": "the workbench is on tmpfs"}
    _store(reports, flagged)
    stored.write(
        reports / "gonebox" / "failures" / f"{FULL}.json",
        "failure",
        {"run_id": FULL, "run_kind": "runs", "status": "unreachable", "task": "Gathering Facts", "role": None,
         "message": "ssh: connect to host: Connection refused", "failed_steps": {}},
    )  # fmt: skip
    report.render_all(reports)
    lines = _index_answers(reports)
    p50 = slow["experiments"]["fsync_bench"]["modes"]["fsync"]["latency"]["p50_us"]
    assert lines[0].startswith(
        "- Slowest durable sync p50: [slowbox](slowbox/report.md#fsync-the-cost-of-durability), "
        f"{units.us_short(p50)} (fsync)"
    ), lines
    assert (
        "of 3 hosts with a figure" in lines[0]
        and "fastest: [fastbox](fastbox/report.md#fsync-the-cost-of-durability)" in lines[0]
    )
    cold = next(ln for ln in lines if ln.startswith("- Cold load figures that failed their proof:"))
    assert (
        "[slowbox](slowbox/report.md#loading-weights-cold-and-warm-at-each-readiness-stage)" in cold
        and "fastbox" not in cold
    )
    flags = next(ln for ln in lines if ln.startswith("- Flags set:"))
    assert "[tmpbox](tmpbox/report.md): tmpfs" in flags and "slowbox" not in flags
    bad = next(ln for ln in lines if ln.startswith("- Not ok:"))
    assert "[gonebox](gonebox/report.md): **unreachable**" in bad and "fastbox" not in bad


@pytest.mark.heavy
def test_a_fleet_of_one_host_says_so_rather_than_naming_an_outlier(tmp_path, full_doc, drawn):
    reports = unrendered_copy(drawn, tmp_path / "reports")
    report.render_all(reports)
    lines = _index_answers(reports)
    p50 = full_doc["experiments"]["fsync_bench"]["modes"]["fsync"]["latency"]["p50_us"]
    assert lines[0] == (
        "- This fleet has one host, [linuxbox](linuxbox/report.md): nothing to compare it with. "
        f"Its durable sync p50 is {units.us_short(p50)} (fsync)."
    )
    assert not any("Slowest" in ln or "outlier" in ln for ln in lines)
    assert "- Every host is ok." in lines and "- Flags set: none." in lines
