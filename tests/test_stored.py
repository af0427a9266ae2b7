"""Every stored file kind: one read and one write path, step-wise upgrades, refusal of newer versions."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES
from disklab import anchors, report, schemas, stored
from disklab_host.audit import collect as audit
from disklab_host.common.formats import VERSIONS, stamp

V1 = FIXTURES / "stored" / "v1"  # written by disklab 0.1.0 (commit 343925a), before every kind had a version
FACTS = audit.collect_all("/tmp", None)


def _results(**extra) -> dict:
    doc = {
        "run_id": "20261129T100000Z",
        "host": "h",
        "profile": "quick",
        "sizes": {"fsync_blocks": 10},
        "started_utc": "x",
        "finished_utc": "y",
        "lab_code": {"unavailable": "test"},
        "facts": FACTS,
        "experiments": {"fsync_bench": {"status": "not_run", "reason": "test", "step_wall_s": 0}},
    }
    return stamp("results", {**doc, **extra})


def test_the_host_stamps_what_the_controller_reads():
    assert FACTS["file_kind"] == "facts" and FACTS["schema_version"] == VERSIONS["facts"]
    assert stored.parse(json.dumps(_results()).encode(), "results")["schema_version"] == VERSIONS["results"]


def test_every_kind_has_an_update_for_every_version_after_the_first():
    for kind, version in VERSIONS.items():
        assert sorted(stored.UPDATES[kind]) == list(range(2, version + 1)), kind


@pytest.mark.parametrize("kind", sorted(VERSIONS))
def test_a_newer_version_is_refused_naming_the_file(tmp_path, kind):
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"file_kind": kind, "schema_version": VERSIONS[kind] + 1}))
    with pytest.raises(stored.StoredFileError, match=f"{path}: {kind} file {kind} version .* newer"):
        stored.read(path, kind)


def test_another_kinds_file_is_refused(tmp_path):
    path = stored.write(tmp_path / "r.json", "results", _results())
    with pytest.raises(stored.StoredFileError, match="is a 'results' file, not 'failure'"):
        stored.read(path, "failure")


def test_older_versions_are_upgraded_one_step_at_a_time(monkeypatch):
    seen = []

    def update_to_3(doc):
        seen.append(doc["schema_version"])
        doc["sizes"] = doc.pop("sizes_v2")

    monkeypatch.setitem(VERSIONS, "results", 3)
    monkeypatch.setitem(stored.UPDATES, "results", {**stored.UPDATES["results"], 3: update_to_3})
    old = _results()
    old["schema_version"] = 2
    old["sizes_v2"] = old.pop("sizes")
    doc = stored.upgrade(old, "results")
    assert seen == [2]
    assert doc["schema_version"] == 3 and doc["sizes"] == {"fsync_blocks": 10}


def test_a_schema_violation_is_refused_on_write_and_on_read_with_its_path(tmp_path):
    bad = _results(profile="medium")
    with pytest.raises(stored.StoredFileError, match="at profile"):
        stored.write(tmp_path / "r.json", "results", bad)
    (tmp_path / "r.json").write_text(json.dumps(bad))
    with pytest.raises(
        stored.StoredFileError, match=r"r\.json: results file does not match the schema at profile"
    ):
        stored.read(tmp_path / "r.json", "results")
    doc = _results()
    doc["experiments"]["fsync_bench"] = {"status": "failed", "step_wall_s": 1}
    with pytest.raises(stored.StoredFileError, match="experiments.fsync_bench"):
        stored.write(tmp_path / "r2.json", "results", doc)


def test_write_never_overwrites_a_stored_run(tmp_path):
    path = stored.write(tmp_path / "r.json", "results", _results())
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        stored.write(path, "results", _results(host="other"))
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"[]", "holds a JSON list, not a results object"),
        (b"\xff\xfe", "not UTF-8 text"),
        (b'{"run_id": ', "not JSON"),
    ],
)
def test_damaged_bytes_get_one_line(tmp_path, data, said):
    path = tmp_path / "r.json"
    path.write_bytes(data)
    with pytest.raises(stored.StoredFileError, match=said) as err:
        stored.read(path, "results")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("rel", "kind"),
    [
        ("oldhost/runs/20261130T090000Z.json", "results"),
        ("oldhost/audits/20261130T100000Z.json", "audit"),
        ("deadhost/failures/20261130T090000Z.json", "failure"),
        (".runs/20261130T090000Z.json", "run_record"),
        ("oldhost/.rendered.json", "render_stamp"),
    ],
)
def test_every_kind_written_by_disklab_0_1_is_read_and_upgraded(rel, kind):
    doc = stored.read(V1 / rel, kind)
    assert doc["file_kind"] == kind and doc["schema_version"] == VERSIONS[kind]
    assert "kind" not in doc  # the run's kind is run_kind now, and the file's kind is file_kind
    if kind in ("results", "audit"):
        assert (
            doc["facts"]["schema_version"] == VERSIONS["facts"] and "facts_schema_version" not in doc["facts"]
        )
    if kind == "results":
        assert "unavailable" in doc["lab_code"]
        crash = doc["experiments"]["crash"]  # version 3: how each kill was placed, old ones by watching
        assert "predates exact stops" in crash["progress_stop_unusable"]
        methods = {
            (k["kill_by"], k["kill_method"], k["stopped_at"])
            for m in crash["modes"].values()
            for k in m["kills"]
        }
        assert methods == {("progress", "poll", None), ("time", "timer", None)}


@pytest.mark.heavy
def test_a_reports_tree_from_disklab_0_1_renders(tmp_path):
    reports = tmp_path / "reports"
    shutil.copytree(V1, reports)
    written, errors = report.render_all(reports, force=True)
    assert errors == []
    text = (reports / "oldhost" / "report.md").read_text()
    assert "## fsync: the cost of durability" in text and "## Crash: does a checkpoint survive" in text
    assert "## Since the previous run" in text
    assert "cannot be ruled out" in text  # lab code not recorded in version-1 runs
    assert "Kills by progress watched the file" in text and "predates exact stops" in text
    assert (
        "- [Loading weights](#loading-weights-cold-and-warm-at-each-readiness-stage): no figure: no stored "
        "run of this host holds the load" in text
    )
    index = (reports / "index.md").read_text()
    assert "deadhost" in index
    assert "| 381 µs (fsync) |" in index  # the 0.1 run's fsync p50 (380.636 µs), named as the Linux call
    # the stored files themselves are never rewritten by a render
    for path in V1.rglob("*.json"):
        if path.name != ".rendered.json":
            assert (reports / path.relative_to(V1)).read_bytes() == path.read_bytes()


def _facts_at_version_2(facts: dict, loop: object, cpu_only: object) -> dict:
    """``facts`` in the version-2 shape: {set, why} flags (the given loop_device and GPU values, others
    False) and workbench.path."""
    old = json.loads(json.dumps(facts))
    old["schema_version"] = 2
    wb = old["workbench"]
    wb["path"] = wb["requested_path"]
    for key in ("requested_path", "audited_path", "exists", "created", "note"):
        del wb[key]
    for name, flag in wb["flags"].items():
        wb["flags"][name] = {"set": loop if name == "loop_device" else False, "why": flag["why"]}
    gpu_why = old["gpu"]["cpu_only_torch_on_gpu_host"]["why"]
    old["gpu"]["cpu_only_torch_on_gpu_host"] = {"set": cpu_only, "why": gpu_why}
    old.pop("quiet", None)  # facts version 6 added it
    for key in ("packages", "lock"):  # facts version 7 added them
        old["versions"].pop(key, None)
    return old


def test_version_2_flags_become_three_states_and_the_workbench_its_paths():
    old = _facts_at_version_2(FACTS, loop={"unavailable": "no /sys/class/block entry"}, cpu_only=True)
    old["workbench"]["flags"]["tmpfs"]["set"] = False
    doc = stored.upgrade(old, "facts")
    flags = doc["workbench"]["flags"]
    assert flags["loop_device"] == {
        "state": "unknown",
        "why": FACTS["workbench"]["flags"]["loop_device"]["why"],
        "reason": "no /sys/class/block entry",
    }
    assert flags["tmpfs"] == {"state": "not_set", "why": FACTS["workbench"]["flags"]["tmpfs"]["why"]}
    assert doc["gpu"]["cpu_only_torch_on_gpu_host"]["state"] == "set"
    wb = doc["workbench"]
    assert wb["requested_path"] == wb["audited_path"] == FACTS["workbench"]["requested_path"]
    assert wb["exists"] is True and wb["created"] is False and wb["note"] is None and "path" not in wb
    assert doc["schema_version"] == VERSIONS["facts"] == 7
    assert doc["quiet"] == {"unavailable": "not checked: written before facts version 6"}
    for key in ("packages", "lock"):
        assert doc["versions"][key] == {"unavailable": "not recorded: written before facts version 7"}
    assert schemas.first_error("facts", doc) is None


def test_version_3_facts_get_the_durability_facts_as_not_audited():
    old = _facts_at_version_2(FACTS, loop={"unavailable": "no /sys/class/block entry"}, cpu_only=True)
    if "unavailable" in old["workbench"]["device"]:
        pytest.skip("this host's /tmp has no block device to audit")
    for key in stored.DURABILITY_FACTS:  # what a version-3 audit did not read
        del old["workbench"]["device"][key]
    doc = stored.upgrade(old, "facts")
    device = doc["workbench"]["device"]
    for key in stored.DURABILITY_FACTS:
        assert device[key] == {"unavailable": "not audited: written before facts version 4"}
    assert schemas.first_error("facts", doc) is None


def test_version_4_facts_say_their_versions_source_is_unknown():
    old = json.loads(json.dumps(FACTS))
    old["schema_version"] = 4
    del old["versions_source"]  # what a version-4 audit did not say
    assert schemas.first_error("facts", {**old, "schema_version": 5}) is not None
    doc = stored.upgrade(old, "facts")
    assert doc["versions_source"]["from"] == "unknown"
    assert doc["versions_source"]["why"] == "written before facts version 5"
    assert schemas.first_error("facts", doc) is None


@pytest.mark.heavy
def test_a_stored_run_whose_old_flags_were_unavailable_renders_them_unknown_never_set(tmp_path):
    reports = tmp_path / "reports"
    shutil.copytree(V1, reports)
    path = reports / "oldhost" / "runs" / "20261130T090000Z.json"  # the latest run, still version 1
    doc = json.loads(path.read_text())
    flags = doc["facts"]["workbench"]["flags"]
    flags["loop_device"]["set"] = {"unavailable": "block device: no /sys/class/block entry for '/dev/sda2'"}
    doc["facts"]["gpu"]["cpu_only_torch_on_gpu_host"]["set"] = {"unavailable": "no lab venv on this host yet"}
    path.write_text(json.dumps(doc))
    (reports / "oldhost" / "audits" / "20261130T100000Z.json").unlink()  # so the run's facts are shown
    written, errors = report.render_all(reports, force=True)
    assert errors == []
    text = (reports / "oldhost" / "report.md").read_text()
    assert "Flag: loop device" not in text and "CPU-only torch on a GPU host" not in text
    assert "on a loop device** (not flagged, not cleared): block device: no /sys/class/block entry" in text
    index = (reports / "index.md").read_text()
    assert "**oldhost: loop device.**" not in index
    assert "**oldhost: cpu only torch on gpu host.**" not in index
    reason = "block device: no /sys/class/block entry for '/dev/sda2'"
    assert f"- **oldhost: loop device** unknown: {reason}." in index
    assert "- **oldhost: cpu only torch on gpu host** unknown: no lab venv on this host yet." in index


def test_a_lab_run_records_its_code():
    from disklab_host import codeinfo

    code = codeinfo.lab_code(["fsync_bench", "crash"])
    assert set(code["steps"]) == {"fsync_bench", "crash"}
    assert len(code["host_package_sha256"]) == 64
    assert "disklab_host.checkpoint.saver" in codeinfo.step_modules(codeinfo.registry.step("crash"))
    assert "disklab_host.checkpoint.saver" not in codeinfo.step_modules(codeinfo.registry.step("fsync_bench"))


def test_compare_says_when_the_lab_code_changed():
    from disklab import compare

    a = _results(
        lab_code={"disklab_version": "0.2.0", "host_package_sha256": "a" * 64, "steps": {"x": "1" * 64}}
    )
    b = _results(
        lab_code={"disklab_version": "0.3.0", "host_package_sha256": "b" * 64, "steps": {"x": "2" * 64}}
    )
    lc = compare.compare_runs(a, b)["lab_code_changes"]
    moved = {"old": "0.2.0", "new": "0.3.0"}
    assert lc == {"known": True, "disklab_version": moved, "steps": ["x"], "unrecorded_in": None}
    assert "code of x changed" in compare.render_compare_text(compare.compare_runs(a, b))
    same = compare.compare_runs(a, a)["lab_code_changes"]
    assert same == {"known": True, "disklab_version": None, "steps": [], "unrecorded_in": None}
    unknown = _results(lab_code={"unavailable": "not recorded: written before results version 2"})
    for old, new, which in (
        (unknown, a, "the old run"),
        (a, unknown, "the new run"),
        (unknown, unknown, "either run"),
    ):
        cmp = compare.compare_runs(old, new)
        assert not cmp["lab_code_changes"]["known"] and cmp["lab_code_changes"]["unrecorded_in"] == which
        assert f"Lab code: not recorded in {which}, so" in compare.render_compare_text(cmp)


def test_fixture_is_what_disklab_0_1_wrote():
    """Guard the fixture itself: it must stay in the old shapes, or the upgrade tests prove nothing."""
    results = json.loads((V1 / "oldhost/runs/20261130T090000Z.json").read_text())
    assert results["schema_version"] == 1 and "file_kind" not in results and "lab_code" not in results
    assert results["facts"]["facts_schema_version"] == 1
    assert json.loads((V1 / "deadhost/failures/20261130T090000Z.json").read_text())["kind"] == "runs"
    assert "schema_version" not in json.loads((V1 / "oldhost/.rendered.json").read_text())


def test_a_results_2_load_sample_gets_a_cache_proof_marked_not_recorded():
    sample = {"cache_state_requested": "cold", "cache_state": "cold", "file": "big_pt"}
    unproven = {"cache_state_requested": "cold", "cache_state": "cold_unverified", "file": "big_pt"}
    warm = {"cache_state_requested": "warm", "cache_state": "warm", "file": "big_pt"}
    doc = {
        "experiments": {
            "load": {"status": "ok", "samples": [sample, unproven, warm]},
            "big_write": {"status": "ok"},
            "crash": {"status": "not_run", "reason": "x"},
        }
    }
    stored._results_update_to_3(doc)
    cold, bad, hot = (s["cache_proof"] for s in doc["experiments"]["load"]["samples"])
    assert cold["verdict"] == "cold" and cold["recorded"] is False
    assert (
        cold["unchecked"] == ["device_reads", "major_faults"]
        and cold["parts"]["residency"]["status"] == "pass"
    )
    assert bad["verdict"] == "cold_unproven" and bad["failed"] == ["residency"]
    assert hot["verdict"] == "warm" and hot["parts"]["residency"]["status"] == "not_recorded"
    assert doc["experiments"]["big_write"]["layers"] == {"unavailable": stored.NOT_RECORDED_V2}
    assert "layers" not in doc["experiments"]["crash"]  # only ok sections get the mark


def test_a_results_4_load_section_says_the_first_response_was_not_measured():
    user = {"status": "ok", "setting": "x", "kind": "file"}
    doc = {"experiments": {"load": {"status": "ok", "samples": [], "user_model": user}}}
    not_ran = {"experiments": {"load": {"status": "not_run", "reason": "Windows"}}}
    stored._results_update_to_5(doc)
    stored._results_update_to_5(not_ran)
    load = doc["experiments"]["load"]
    want = {"status": "not_run", "reason": stored.FIRST_RESPONSE_NOT_MEASURED}
    assert load["first_response"] == want and load["user_model"]["first_response"] == want
    assert "not measured in this run" in want["reason"]
    assert not_ran == {"experiments": {"load": {"status": "not_run", "reason": "Windows"}}}


def test_the_schemas_stage_names_are_the_one_stage_list():
    """The stage list lives in disklab_host.common.stages; the JSON Schema's enum is a checked copy."""
    from disklab_host.common.stages import STAGES

    assert schemas.experiment_schema("load")["$defs"]["stage_name"]["enum"] == list(STAGES)


# --- issue 41, item 3: display code reads the current format only --------------------------------------

# One real lab run of each results version, written by that version's own code (README.md there).
KEPT = sorted((p for p in (FIXTURES / "stored").iterdir() if p.is_dir()), key=lambda p: int(p.name[1:]))
DISPLAY = Path(report.__file__).parent
# Words that name a results version or an older run: a section or template that holds them branches on an
# older format, which disklab.stored's update_to_N turn into the current one. The pages' headers print the
# version they render ({{ schema_version }}), which tests nothing.
VERSION_WORDS = re.compile(
    r"schema_version|results (schema )?(version )?\d|older (run|renderer|disklab|format)|predates|"
    r"before (results|version|it was recorded)",
    re.IGNORECASE,
)


def test_a_stored_run_of_every_results_version_is_kept():
    versions = {
        stored.version_of(json.loads(path.read_bytes()), "results")
        for kept in KEPT
        for path in kept.glob("*/runs/*.json")
    }
    assert versions == set(range(1, VERSIONS["results"] + 1))
    assert [k.name for k in KEPT] == [f"v{n}" for n in sorted(versions)]


def test_no_section_or_template_tests_a_results_version():
    files = [*sorted((DISPLAY / "sections").rglob("*.py")), *sorted((DISPLAY / "templates").rglob("*.j2"))]
    assert len(files) > 20
    found = [
        f"{path.relative_to(DISPLAY)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if VERSION_WORDS.search(line.replace("{{ schema_version }}", ""))
    ]
    assert found == []


def _what_an_upgrade_says(raw: dict) -> dict[str, bool]:
    """Each sentence disklab.stored gives a run for what it did not record, and whether this stored
    (not upgraded) run lacks that record, so its host report must say it."""
    exps = raw["experiments"]
    ok = {name for name, s in exps.items() if s.get("status") == "ok"}
    stages = [st for s in exps.get("load", {}).get("samples", []) for st in s["stages"].values()]
    noise = any("noise" in st for st in stages)
    return {
        f"({stored.DURABLE_CALL_UNRECORDED})": "big_write" in ok and "durable_call" not in exps["big_write"],
        f"not a model ({stored.BIG_FILE_NOT_A_MODEL})": "load" in ok and "big_model" not in exps["load"],
        f"({stored.PARALLEL_NOT_IN_RUN})": "ceiling" in ok and "parallel" not in exps["ceiling"],
        f"samples ({stored.NOISE_NOT_RECORDED_RUN})": "load" in ok and not noise,
        f"not recorded ({stored.PROOF_PART_NOT_RECORDED})": "load" in ok
        and not any("cache_proof" in s for s in exps["load"]["samples"]),
    }


@pytest.mark.heavy
@pytest.mark.parametrize("kept", KEPT, ids=lambda p: p.name)
def test_every_kept_results_version_renders_in_full(tmp_path, kept):
    """Host report, index and fleet page, each ok section of the newest run under its heading, and what
    the run did not record said in the words of disklab.stored's upgrade."""
    reports = tmp_path / "reports"
    shutil.copytree(kept, reports)
    written, errors = report.render_all(reports, force=True)
    assert errors == []
    for page in ("index.md", "index.html", "fleet.md", "fleet.html"):
        assert (reports / page).is_file()
    hosts = sorted({p.parent.parent.name for p in reports.glob("*/runs/*.json")})
    assert hosts
    for host in hosts:
        text = (reports / host / "report.md").read_text()
        assert (reports / host / "report.html").is_file()
        newest = max((reports / host / "runs").glob("*.json"))
        raw = json.loads(newest.read_bytes())
        assert f"`{raw['run_id']}`" in text
        for name, section in raw["experiments"].items():
            if section.get("status") == "ok":
                assert f"## {anchors.section_heading(name)}" in text, name
        for said, lacking in _what_an_upgrade_says(raw).items():
            assert (said in text) == lacking, said
        stored_at = raw.get("schema_version", 1)  # disklab 0.1 wrote none
        older = f"(the run was stored at version {stored_at};"
        assert (older in text) == (stored_at < VERSIONS["results"]), stored_at
        assert host in (reports / "fleet.md").read_text()


# --- issue 40, item 11: a stored file lies where its host is -----------------------------------------


def _sums(root) -> dict:
    """The sha256 of every stored run, audit and failure under ``root`` (not what the report renders)."""
    import hashlib

    paths = [p for kind in ("runs", "audits", "failures") for p in root.glob(f"*/{kind}/*.json")]
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.mark.heavy
def test_a_run_moved_into_another_hosts_directory_is_named_by_every_reader_and_never_shown_as_its(tmp_path):
    """A run moved from alpha's runs/ to beta's was shown as beta's (history and export listed it); an
    audit naming another host was taken silently. Every reader now names the file, both hosts, and
    leaves it out; beta's own runs are still shown, and no stored file changes."""
    from conftest import run_disklab
    from disklab import store
    from disklab.runner import HostOutcome

    reports = tmp_path / "reports"
    for host in ("alpha", "beta"):
        for run_id in ("20261201T100000Z", "20261202T100000Z"):
            stored.write(
                reports / host / "runs" / f"{run_id}.json", "results", _results(host=host, run_id=run_id)
            )
    moved = reports / "beta" / "runs" / "20261203T100000Z.json"
    (reports / "alpha" / "runs" / "20261202T100000Z.json").rename(moved)  # by hand
    stored.write(reports / "beta" / "audits" / "20261204T100000Z.json", "audit",
                 {"run_id": "20261204T100000Z", "host": "alpha", "facts": FACTS})  # fmt: skip
    before = _sums(reports)
    named = f"{moved}: results file of host 'alpha', found among the files of host 'beta'"

    hist = run_disklab("history", "beta", "--json", reports=reports)
    assert hist.returncode == 1 and named in hist.stderr, hist.stderr
    assert [r["run_id"] for r in json.loads(hist.stdout)["runs"]] == ["20261201T100000Z", "20261202T100000Z"]
    runs = run_disklab("runs", "--json", reports=reports)
    assert runs.returncode == 1 and named in runs.stderr
    listed = [(r["host"], r["run_id"]) for r in json.loads(runs.stdout)["runs"]]
    assert listed == [
        ("alpha", "20261201T100000Z"),
        ("beta", "20261201T100000Z"),
        ("beta", "20261202T100000Z"),
    ]
    export = run_disklab("export", "--format", "json", reports=reports)
    assert export.returncode == 1 and named in export.stderr
    assert {(r["host"], r["run_id"]) for r in json.loads(export.stdout)["rows"]} <= set(listed)
    cmp = run_disklab("compare", "beta", reports=reports)  # its two newest: one is alpha's
    assert cmp.returncode == 2 and named in cmp.stderr
    rep = run_disklab("report", reports=reports)
    assert rep.returncode == 1 and named in rep.stderr
    audit_named = "audit file of host 'alpha', found among the files of host 'beta'"
    assert audit_named in rep.stderr
    assert _sums(reports) == before  # nothing moved, rewritten or lost

    # a run copied within its own host's runs/ under another name is not a second run
    copy = reports / "alpha" / "runs" / "20261201T090000Z.json"
    copy.write_bytes((reports / "alpha" / "runs" / "20261201T100000Z.json").read_bytes())
    said = f"{copy}: results file of run '20261201T100000Z', stored under the name '20261201T090000Z'"
    hist = run_disklab("history", "alpha", "--json", reports=reports)
    assert hist.returncode == 1 and said in hist.stderr
    assert [r["run_id"] for r in json.loads(hist.stdout)["runs"]] == ["20261201T100000Z"]
    runs = run_disklab("runs", "--json", "alpha", reports=reports)
    assert runs.returncode == 1 and said in runs.stderr
    assert [r["run_id"] for r in json.loads(runs.stdout)["runs"]] == ["20261201T100000Z"]
    copy.unlink()

    # the store refuses a fetched file that names another host, and keeps it as it came
    staging = store.incoming_dir(reports, "20261205T100000Z")
    staging.mkdir(parents=True)
    (staging / "beta.json").write_text(json.dumps(_results(host="alpha", run_id="20261205T100000Z")))
    kept = (staging / "beta.json").read_bytes()
    status = store.store_fetched(reports, "20261205T100000Z", "runs", {"beta": HostOutcome(host="beta")})
    assert status == {"beta": "failed"} and (staging / "beta.json").read_bytes() == kept
    failure = stored.read(reports / "beta" / "failures" / "20261205T100000Z.json", "failure")
    assert "results file of host 'alpha', found among the files of host 'beta'" in failure["message"]
    assert not (reports / "beta" / "runs" / "20261205T100000Z.json").exists()
    # and one that holds another run's results: stored under this run's id, it would be a copy
    staging = store.incoming_dir(reports, "20261206T100000Z")
    staging.mkdir(parents=True)
    (staging / "beta.json").write_text(json.dumps(_results(host="beta", run_id="20261201T100000Z")))
    status = store.store_fetched(reports, "20261206T100000Z", "runs", {"beta": HostOutcome(host="beta")})
    assert status == {"beta": "failed"} and (staging / "beta.json").exists()
    failure = stored.read(reports / "beta" / "failures" / "20261206T100000Z.json", "failure")
    assert "results of run '20261201T100000Z', fetched for run '20261206T100000Z'" in failure["message"]


def test_a_stored_run_and_audit_are_known_valid_so_their_first_render_does_not_check_them(
    tmp_path, monkeypatch
):
    """store_fetched checks each fetched file once and keeps the validity key of the bytes it stored in the
    host's VALID_FILE: the report reads them without another schema check; other bytes are checked."""
    from disklab import store
    from disklab.runner import HostOutcome

    reports, run_id = tmp_path / "reports", "20261205T100000Z"
    staging = store.incoming_dir(reports, run_id)
    staging.mkdir(parents=True)
    (staging / "beta.json").write_text(json.dumps(_results(host="beta", run_id=run_id)))
    checks = []
    real = schemas.first_error
    monkeypatch.setattr(schemas, "first_error", lambda kind, doc: checks.append(kind) or real(kind, doc))
    assert store.store_fetched(reports, run_id, "runs", {"beta": HostOutcome(host="beta")}) == {"beta": "ok"}
    assert checks == ["results"]  # checked once, as it is read: written as read, not checked again
    monkeypatch.setattr(schemas, "first_error", real)
    staging.mkdir(parents=True)
    (staging / "beta.json").write_text(json.dumps(FACTS))  # a facts file is stored as an audit
    assert store.store_fetched(reports, run_id, "audits", {"beta": HostOutcome(host="beta")}) == {
        "beta": "ok"
    }
    host_dir = reports / "beta"
    run, kept = host_dir / "runs" / f"{run_id}.json", host_dir / "audits" / f"{run_id}.json"
    keys = stored.known_valid(host_dir)
    assert keys == {
        stored.validity_key(run.read_bytes(), "results"),
        stored.validity_key(kept.read_bytes(), "audit"),
    }
    checked = []
    real = schemas.first_error
    monkeypatch.setattr(schemas, "first_error", lambda kind, doc: checked.append(kind) or real(kind, doc))
    stored.read(run, "results", known_valid=keys, host="beta")
    stored.read(kept, "audit", known_valid=keys, host="beta")
    assert checked == []
    run.write_bytes(run.read_bytes().replace(b'"profile": "quick"', b'"profile": "full"'))
    stored.read(run, "results", known_valid=keys, host="beta")
    assert checked == ["results"]
    # the keys are a cache: where they cannot be written, the run is stored all the same
    (reports / "gamma").mkdir()
    (reports / "gamma" / stored.VALID_FILE).mkdir()
    staging.mkdir(parents=True)
    (staging / "gamma.json").write_text(json.dumps(_results(host="gamma", run_id=run_id)))
    assert store.store_fetched(reports, run_id, "runs", {"gamma": HostOutcome(host="gamma")}) == {
        "gamma": "ok"
    }
    assert (reports / "gamma" / "runs" / f"{run_id}.json").is_file() and not staging.exists()
