"""Rendering reports from stored runs: a real Linux run, and a macOS run from recorded fixtures."""

from __future__ import annotations

import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import pytest

import shared
from conftest import FIXTURES, REPO
from disklab import htmlpage, report, reportpool, schemas, store, stored, units
from disklab.fsio import atomic_write_json
from disklab_host.audit import collect as audit
from disklab_host.steps import big_write, fsync_bench, write_buffering
from test_audit import darwin_probe

SIZES = {"write_buffering_calls": 3000, "fsync_blocks": 30, "fsync_block_bytes": 4096, "big_write_mib": 2}


def _doc(host: str, run_id: str, facts: dict, experiments: dict) -> dict:
    from disklab_host import codeinfo
    from disklab_host.common.formats import stamp

    return stamp(
        "results",
        {
            "run_id": run_id,
            "host": host,
            "profile": "quick",
            "sizes": SIZES,
            "started_utc": "2026-11-29T10:00:00Z",
            "finished_utc": "2026-11-29T10:01:00Z",
            "lab_python": "3.11.7",
            "lab_platform": "test",
            "lab_code": codeinfo.lab_code(list(experiments)),
            "facts": facts,
            "experiments": experiments,
        },
    )


def measure_linux_doc(wb) -> dict:
    """A results document measured for real on this host, at tiny sizes, on the workbench ``wb``."""
    cfg = {"sizes": SIZES, "system": "Linux"}
    exps = {}
    for mod in (write_buffering, fsync_bench, big_write):
        exps[mod.__name__.rsplit(".", 1)[-1]] = {**mod.run(cfg, wb), "step_wall_s": 0.1}
    facts = audit.collect_all(str(wb), sys.executable)
    return _doc("linuxbox", "20261129T100000Z", facts, exps)


@pytest.fixture(scope="module")
def linux_doc(tmp_path_factory) -> dict:
    """A results document measured for real on this host, at tiny sizes: measured once per run and read
    by every module that imports this fixture (tests/shared.py), each module with its own copy."""
    doc = shared.once_per_run(tmp_path_factory, "linux_doc", measure_linux_doc)
    assert schemas.first_error("results", doc) is None
    return doc


@pytest.fixture
def darwin_doc(linux_doc, tmp_path) -> dict:
    """A macOS-shaped document: facts from recorded macOS command output, a Darwin fsync section."""
    facts = audit.collect_all("/Users/lab/workbench/disk", None, probe=darwin_probe(tmp_path))
    exps = copy.deepcopy(linux_doc["experiments"])
    fs = exps["fsync_bench"]
    fs["system"] = "Darwin"
    fs["modes"]["fdatasync"] = {"status": "unsupported", "reason": "os has no fdatasync on Darwin"}
    full = copy.deepcopy(fs["modes"]["fsync"])
    full["call"] = "fcntl F_FULLFSYNC"
    full["fallback"] = None
    fs["modes"]["f_fullfsync"] = full
    doc = _doc("mac-mini", "20261129T100000Z", facts, exps)
    assert schemas.first_error("results", doc) is None
    return doc


def _store(reports, doc):
    stored.write(reports / doc["host"] / "runs" / f"{doc['run_id']}.json", "results", doc)


@pytest.mark.heavy
def test_linux_report_shows_this_hosts_facts_and_numbers(tmp_path, linux_doc):
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    report.render_all(reports)
    text = (reports / "linuxbox" / "report.md").read_text()
    f = linux_doc["facts"]
    assert f"| filesystem type | **{f['workbench']['fstype']}** |" in text
    assert f"| kernel | {f['host']['kernel']} |" in text
    wb = f["writeback"]["dirty_expire_centisecs"]
    assert f"| vm.dirty_expire_centisecs | {wb} | a dirty page older than {wb / 100:.1f} s" in text
    p50 = linux_doc["experiments"]["fsync_bench"]["modes"]["fsync"]["latency"]["p50_us"]
    assert "fsync p50 is" in text and units.us(p50) in text
    assert "Not measured on real hardware" not in text  # a real run has no caveats
    index = (reports / "index.md").read_text()
    row = next(line for line in index.splitlines() if line.startswith("| linuxbox |"))
    assert f["workbench"]["fstype"] in row and f["host"]["kernel"] in row
    assert f"| {units.us_short(p50)} (fsync) |" in row  # Linux: fsync reaches stable storage
    assert "| durable sync p50 (call) |" in index


def test_macos_report_states_not_applicable_and_not_run_on_real_hardware(tmp_path, darwin_doc):
    reports = tmp_path / "reports"
    _store(reports, darwin_doc)
    report.render_all(reports)
    text = (reports / "mac-mini" / "report.md").read_text()
    assert "| filesystem type | **apfs** |" in text
    assert "| page size | 16.00 KiB |" in text
    assert "not applicable on macOS" in text
    assert "Not measured on real hardware" in text and "not yet on a real Mac" in text
    assert "| I/O scheduler | n/a (not exposed on macOS) |" in text
    assert "f_fullfsync" in text and "n/a (os has no fdatasync on Darwin)" in text


def _index_row(reports, host: str) -> str:
    lines = (reports / "index.md").read_text().splitlines()
    return next(line for line in lines if line.startswith(f"| {host} |"))


def test_macos_durability_column_shows_f_fullfsync_not_plain_fsync(tmp_path, darwin_doc):
    modes = darwin_doc["experiments"]["fsync_bench"]["modes"]
    fsync_p50 = modes["fsync"]["latency"]["p50_us"]
    modes["f_fullfsync"]["latency"]["p50_us"] = 4100.0  # F_FULLFSYNC waits for the drive: slower
    reports = tmp_path / "reports"
    _store(reports, darwin_doc)
    report.render_all(reports)
    row = _index_row(reports, "mac-mini")
    assert "| 4.1 ms (F_FULLFSYNC) |" in row
    assert units.us_short(fsync_p50) not in row and "(fsync)" not in row


def test_a_mac_without_an_f_fullfsync_figure_shows_na_with_why_never_plain_fsync(tmp_path, darwin_doc):
    modes = darwin_doc["experiments"]["fsync_bench"]["modes"]
    modes["f_fullfsync"] = {"status": "unsupported", "reason": "fcntl has no F_FULLFSYNC on Darwin: test"}
    reports = tmp_path / "reports"
    _store(reports, darwin_doc)
    report.render_all(reports)
    row = _index_row(reports, "mac-mini")
    assert "| n/a (F_FULLFSYNC unsupported: fcntl has no F_FULLFSYNC on Darwin: test; plain fsync is" in row
    assert "on macOS it stops at the drive's cache) |" in row
    assert units.us_short(modes["fsync"]["latency"]["p50_us"]) not in row


def test_durable_sync_names_why_there_is_no_figure(linux_doc):
    assert report.durable_sync(None) == {"call": None, "p50_us": None, "why": "no lab run stored"}
    doc = copy.deepcopy(linux_doc)
    doc["experiments"]["fsync_bench"] = {"status": "not_run", "reason": "not in lab_run_steps"}
    assert report.durable_sync(doc) == {
        "call": "fsync",
        "p50_us": None,
        "why": "fsync_bench not run: not in lab_run_steps",
    }
    doc["facts"]["host"]["system"] = "FreeBSD"
    assert report.durable_sync(doc)["why"] == "no sync call known to reach stable storage on FreeBSD"
    doc = copy.deepcopy(linux_doc)
    mode = doc["experiments"]["fsync_bench"]["modes"]["fsync"]
    got = report.durable_sync(doc)
    assert {k: got[k] for k in ("call", "p50_us", "why")} == {
        "call": "fsync",
        "p50_us": mode["latency"]["p50_us"],
        "why": None,
    }
    # its rounds' medians, for the fleet's verdicts, with each round's noise
    per = len(mode["samples_ns"]) // len(mode["rounds"])
    assert got["unit_kind"] == "batches" and len(got["units_ns"]) == len(mode["rounds"]) == 10
    assert got["units_ns"][0] == statistics.median(mode["samples_ns"][:per])
    assert got["flags"] is not None and len(got["flags"]) == 10


def test_us_short_keeps_two_or_three_figures():
    assert [units.us_short(x) for x in (8.46, 99.96, 312.4, 999.6, 4100, 9960, 38_400, None)] == [
        "8.5 µs",
        "100 µs",
        "312 µs",
        "1.0 ms",
        "4.1 ms",
        "10 ms",
        "38 ms",
        "n/a",
    ]


def test_a_failed_step_renders_its_error_and_the_rest_stays(tmp_path, linux_doc):
    doc = copy.deepcopy(linux_doc)
    doc["experiments"]["big_write"] = {
        "status": "failed",
        "error": "OSError: [Errno 28] No space left on device",
        "traceback": "...",
        "step_wall_s": 0.2,
    }
    reports = tmp_path / "reports"
    _store(reports, doc)
    report.render_all(reports)
    text = (reports / "linuxbox" / "report.md").read_text()
    assert "**Failed on this host** after 0.200 s: `OSError: [Errno 28] No space left on device`" in text
    assert "fsync p50 is" in text


@pytest.mark.heavy
def test_report_command_rerenders_from_stored_runs_only(tmp_path, linux_doc):
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    second = copy.deepcopy(linux_doc)
    second["run_id"] = "20261129T110000Z"
    second["facts"]["writeback"]["dirty_expire_centisecs"] = 1500
    _store(reports, second)
    proc = subprocess.run(
        [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "report"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    text = (reports / "linuxbox" / "report.md").read_text()
    assert "Run `20261129T110000Z`" in text
    assert "## Since the previous run" in text
    assert "| facts.writeback.dirty_expire_centisecs |" in text and "| 1500 |" in text
    # identical samples in both runs: nothing changed, nothing was disturbed, no large effect undecided
    assert "No figure changed, none was disturbed, and no large effect was left undecided." in text


def test_a_failed_invocation_is_shown_above_the_last_good_run(tmp_path, linux_doc):
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    atomic_write_json(  # a failure file as disklab 0.1 wrote it (no version): read through its upgrade
        reports / "linuxbox" / "failures" / "20261129T120000Z.json",
        {
            "run_id": "20261129T120000Z",
            "kind": "runs",
            "status": "unreachable",
            "task": "Gathering Facts",
            "role": None,
            "message": "ssh: connect to host: refused",
        },
    )
    report.render_all(reports)
    text = (reports / "linuxbox" / "report.md").read_text()
    assert "The latest invocation failed on this host" in text and "Gathering Facts" in text
    index = (reports / "index.md").read_text()
    assert '**unreachable** at "Gathering Facts": ssh: connect to host: refused' in index


def test_stored_runs_are_never_overwritten(tmp_path, linux_doc):
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    with pytest.raises(FileExistsError):
        _store(reports, linux_doc)
    assert json.loads(next(reports.glob("linuxbox/runs/*.json")).read_text()) == linux_doc
    assert (
        store.new_run_id(reports, __import__("datetime").datetime(2026, 11, 29, 10, 0, 0))
        == "20261129T100000Z-1"
    )


@pytest.mark.heavy
def test_report_renders_only_hosts_whose_stored_files_changed(tmp_path, linux_doc):
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    other = copy.deepcopy(linux_doc)
    other["host"] = "otherbox"
    _store(reports, other)
    first, errors = report.render_all(reports)
    assert {p.parent.name for p in first[:-1]} == {"linuxbox", "otherbox"} and errors == []
    assert report.render_all(reports)[0] == [reports / "index.md"]  # nothing changed: only the index
    second = copy.deepcopy(linux_doc)
    second["run_id"] = "20261129T110000Z"
    _store(reports, second)
    assert [p.parent.name for p in report.render_all(reports)[0][:-1]] == ["linuxbox"]
    assert "Run `20261129T110000Z`" in (reports / "linuxbox" / "report.md").read_text()
    assert len(report.render_all(reports, force=True)[0]) == 3


@pytest.mark.heavy
def test_an_unreadable_stored_run_is_named_and_the_other_hosts_still_render(tmp_path, linux_doc):
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    broken = reports / "brokenbox" / "runs" / "20261129T100000Z.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"schema_version": 1, "run_id": "2026')
    proc = subprocess.run(
        [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "report"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 1
    assert f"brokenbox: {broken}: results file not JSON" in proc.stderr and "Traceback" not in proc.stderr
    assert (reports / "linuxbox" / "report.md").is_file()
    index = (reports / "index.md").read_text()
    assert "| linuxbox |" in index
    assert "| brokenbox | **unreadable**: " in index  # the host keeps its row, saying why (issue 26)


def test_tidy_markdown_separates_tables_and_headings_but_not_code():
    text = "## A\nline\n| a |\n|---|\n| 1 |\nafter\n```\n# not a heading\n|x\n```\n"
    assert report.tidy_markdown(text) == (
        "## A\n\nline\n\n| a |\n|---|\n| 1 |\n\nafter\n```\n# not a heading\n|x\n```\n"
    )


def test_tidy_markdown_ends_a_list_before_the_paragraph_after_it():
    """CommonMark reads text right after a list item as the item's own (a lazy continuation line): the
    paragraph would sit inside the bullet. markdown-it (disklab.htmlpage) says where each block lands."""
    text = (
        "- one\n- two\nAfter the list.\n"
        "1. first\n   still the first item\nAfter the numbered list.\n"
        "> - quoted\n> Still quoted, after the list.\n\n"
        "- last\n| a |\n|---|\n| 1 |\n"
    )
    tidy = report.tidy_markdown(text)
    html = htmlpage.body(tidy)[0]
    for para in ("After the list.", "After the numbered list.", "Still quoted, after the list."):
        assert f"<p>{para}</p>" in html, html
    assert "<li>first\nstill the first item</li>" in html  # indented: the item's own line, kept there
    assert "<blockquote>\n<ul>\n<li>quoted</li>\n</ul>\n<p>Still quoted" in html
    assert "</ul>\n<table>" in html
    assert report.tidy_markdown(tidy) == tidy
    before = htmlpage.body(text)[0]  # untidied, each paragraph is inside the item above it
    assert "<p>After the list.</p>" not in before and "<li>two\nAfter the list.</li>" in before


@pytest.mark.heavy
def test_a_render_pool_writes_what_the_serial_render_writes(tmp_path, monkeypatch):
    """DISKLAB_RENDER_WORKERS=2 renders out-of-date hosts in processes; the files equal a serial render's."""
    v1 = FIXTURES / "stored" / "v1"
    trees = {}
    for workers in ("1", "2"):
        reports = tmp_path / f"reports-{workers}"
        shutil.copytree(v1, reports)
        for n in range(2, 5):  # four hosts with runs: past PARALLEL_MIN_HOSTS, each naming itself
            shutil.copytree(reports / "oldhost", reports / f"oldhost{n}")
            for path in [
                *reports.glob(f"oldhost{n}/runs/*.json"),
                *reports.glob(f"oldhost{n}/audits/*.json"),
            ]:
                path.write_text(json.dumps({**json.loads(path.read_text()), "host": f"oldhost{n}"}))
        monkeypatch.setenv("DISKLAB_RENDER_WORKERS", workers)
        assert reportpool.workers(4) == int(workers)
        written, errors = report.render_all(reports, force=True)
        assert errors == [] and len(written) >= 4
        trees[workers] = {p.relative_to(reports): p.read_bytes() for p in reports.rglob("*.md")}
    assert trees["1"] == trees["2"]


@pytest.mark.heavy
def test_a_sigkilled_render_leaves_no_pool_worker(tmp_path):
    """Before: two workers of a SIGKILLed `disklab report` were still there 68 s later, waiting for work."""
    import psutil

    reports = tmp_path / "reports"
    shutil.copytree(FIXTURES / "stored" / "v1", reports)
    for n in range(2, 9):  # eight hosts with runs: a pool of two, with work left when the render is killed
        shutil.copytree(reports / "oldhost", reports / f"oldhost{n}")
    env = {**os.environ, "DISKLAB_RENDER_WORKERS": "2"}
    argv = [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "report", "--force"]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    render = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while len(workers := render.children()) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    gone, alive = psutil.wait_procs(workers, timeout=5)
    for worker in alive:  # ended by pid, so a failure here leaves nothing behind
        worker.kill()
    assert not alive, [p.pid for p in alive]


@pytest.mark.heavy
def test_force_redraws_a_plot_only_when_what_it_shows_changed(tmp_path, linux_doc):
    """--force re-renders every report; a plot whose data and code are unchanged is kept as it was."""
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    report.render_all(reports)
    png = reports / "linuxbox" / "plots" / "fsync_bench_latency.png"
    first = (png.read_bytes(), png.stat().st_mtime_ns)
    assert png.with_name(f".{png.name}.sha256").is_file()
    report.render_all(reports, force=True)
    assert (png.read_bytes(), png.stat().st_mtime_ns) == first  # not drawn again
    png.unlink()  # a missing plot is drawn again even with its digest in place
    report.render_all(reports, force=True)
    assert png.is_file()
    second = copy.deepcopy(linux_doc)
    second["run_id"] = "20261129T110000Z"
    second["experiments"]["fsync_bench"]["modes"]["fsync"]["samples_ns"][0] *= 7  # other data: redrawn
    _store(reports, second)
    before = png.with_name(f".{png.name}.sha256").read_text()
    report.render_all(reports)
    assert png.with_name(f".{png.name}.sha256").read_text() != before


def test_a_file_found_valid_is_not_checked_again_but_changed_bytes_are(tmp_path, linux_doc, monkeypatch):
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    report.render_all(reports)
    valid = reports / "linuxbox" / stored.VALID_FILE
    keys = valid.read_text().split()
    run = reports / "linuxbox" / "runs" / "20261129T100000Z.json"
    assert keys == [stored.validity_key(run.read_bytes(), "results")]
    checked = []
    real = schemas.first_error
    monkeypatch.setattr(schemas, "first_error", lambda kind, doc: checked.append(kind) or real(kind, doc))
    report.render_all(reports, force=True)
    assert "results" not in checked  # the same bytes passed before
    # the same name with other bytes is checked again, and an invalid one is refused
    doc = json.loads(run.read_text())
    doc["experiments"]["fsync_bench"]["blocks"] = "many"
    run.write_text(json.dumps(doc))
    report.render_all(reports, force=True)
    assert "results" in checked
    _, errors = report.render_all(reports, force=True)
    assert errors and "experiments.fsync_bench.blocks" in errors[0]


def test_out_of_date_hosts_render_in_one_process_per_cpu_by_default(monkeypatch):
    monkeypatch.delenv("DISKLAB_RENDER_WORKERS", raising=False)
    monkeypatch.setattr(reportpool, "_cpus", lambda: 2)
    fork = reportpool.mp_context().get_start_method() == "fork"
    least = reportpool.PARALLEL_MIN_HOSTS if fork else reportpool.SPAWN_MIN_HOSTS
    assert reportpool.workers(least) == 2 and reportpool.workers(least - 1) == 1
    monkeypatch.setattr(reportpool, "_cpus", lambda: 1)
    assert reportpool.workers(500) == 1
    monkeypatch.setenv("DISKLAB_RENDER_WORKERS", "3")
    assert reportpool.workers(reportpool.PARALLEL_MIN_HOSTS) == 3


def test_compiled_templates_are_cached_and_a_cache_that_cannot_be_used_costs_only_time(tmp_path, monkeypatch):
    """Jinja's bytecode cache: a second environment reads the compiled template; no usable cache: no cache."""
    import jinja2

    monkeypatch.setattr(jinja2.FileSystemBytecodeCache, "_get_default_cache_dir", lambda self: str(tmp_path))
    first = report.environment()
    first.get_template("host_report.md.j2")
    assert list(tmp_path.glob("__jinja2_*.cache"))  # the compiled template, kept
    loaded, load = [], jinja2.bccache.Bucket.load_bytecode

    def counted(self, f):
        load(self, f)
        loaded.append(self.code is not None)

    monkeypatch.setattr(jinja2.bccache.Bucket, "load_bytecode", counted)
    report.environment().get_template("host_report.md.j2")
    assert loaded == [True]  # read back from the cache, not compiled again

    def refuse(self):
        raise RuntimeError("The cache directory is not owned by the current user")

    monkeypatch.setattr(jinja2.FileSystemBytecodeCache, "_get_default_cache_dir", refuse)
    env = report.environment()
    assert env.bytecode_cache is None and env.get_template("host_report.md.j2")


WARM_UP_PROBE = """
import json, sys
from disklab import report
before = set(sys.modules)
if sys.argv[1] == "broken":
    sys.modules["matplotlib"] = None  # import matplotlib now raises ImportError
report.warm_up()
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.mark.parametrize("case", ["ok", "broken"])
@pytest.mark.heavy
def test_the_render_warm_up_loads_matplotlib_sections_and_templates_and_never_raises(tmp_path, case):
    """disklab run's warm-up thread: in a fresh process it loads what a render loads first; an error
    (here matplotlib that cannot be imported) is left to the render itself, so the thread never fails."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # Jinja's bytecode cache goes under it
    proc = subprocess.run([sys.executable, "-c", WARM_UP_PROBE, case], capture_output=True, text=True,
                          env=env, check=False, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    loaded = json.loads(proc.stdout)
    assert "disklab.sections.fsync_bench" in loaded
    cached = [p for d in tmp_path.glob("_jinja2-cache-*") for p in d.iterdir()]
    if case == "ok":
        assert "matplotlib.backends.backend_agg" in loaded and "matplotlib.font_manager" in loaded
        assert len(cached) >= len(report.environment().list_templates(extensions=["j2"]))
    else:
        assert not any(m.startswith("matplotlib.") for m in loaded)
        assert cached == []  # matplotlib failed first: the rest of the warm-up was skipped, quietly


def _fs_table(text: str) -> str:
    return text.split("## Filesystem of the workbench")[1].split("## Writeback")[0]


def test_figures_are_read_against_the_runs_own_workbench_and_a_split_is_named(tmp_path, linux_doc):
    """Issue 26, finding 3: the run's lab runner measured an ext4 on an NVMe disk (recorded: the DGX Spark
    fixture) while the audit's facts describe this host's real workbench. The report shows the run's
    facts and says in one line, above the host's facts, that the two name different filesystems."""
    from test_audit import spark_probe

    run_wb = audit.collect_workbench(spark_probe(tmp_path), "/home/lab/workbench")
    audit_wb = linux_doc["facts"]["workbench"]
    if all(audit_wb[k] == run_wb[k] for k in ("mount_point", "fstype", "source")):
        pytest.skip("this host's workbench is the fixture's filesystem")
    doc = copy.deepcopy(linux_doc)
    doc["workbench"] = run_wb
    reports = tmp_path / "reports"
    _store(reports, doc)
    report.render_all(reports)
    text = (reports / "linuxbox" / "report.md").read_text()
    split = [line for line in text.splitlines() if "name different filesystems" in line]
    assert len(split) == 1 and text.index(split[0]) < text.index("## Host")
    assert "the run measured `/home/lab/workbench` (ext4 from /dev/nvme0n1p2 on /)" in split[0]
    assert f"the audit describes `{audit_wb['requested_path']}` ({audit_wb['fstype']} from" in split[0]
    fs = _fs_table(text)
    assert "| filesystem type | **ext4** |" in fs and "| source | /dev/nvme0n1p2 |" in fs
    assert "nvme0n1p2 (disk nvme0n1)" in fs and "recorded by the lab runner itself" in fs
    assert "The workbench device is nvme0n1p2" in text  # fsync_bench reads the p50 against the run's device
    index = (reports / "index.md").read_text().splitlines()
    row = next(line for line in index if line.startswith("| linuxbox"))
    assert "| ext4 |" in row and "rw,relatime,errors=remount-ro" in row
    kept = stored.read(reports / "linuxbox" / "runs" / f"{doc['run_id']}.json", "results")
    assert kept["facts"] == linux_doc["facts"]  # the audit's facts stay in the stored run as they were
    # a newer audit of the host's own workbench: the index's facts come from it, but its filesystem
    # columns still show the run's workbench, and the row says so (it read "facts from audit" alone)
    audit_id = "20991231T000000Z"
    audit_doc = {"run_id": audit_id, "host": "linuxbox", "facts": copy.deepcopy(linux_doc["facts"])}
    stored.write(reports / "linuxbox" / "audits" / f"{audit_id}.json", "audit", audit_doc)
    report.render_all(reports, force=True)
    index = (reports / "index.md").read_text()
    row = next(
        line for line in index.split("## Filesystem audit")[1].splitlines() if line.startswith("| linuxbox")
    )
    assert (
        f"| audit `{audit_id}`; workbench (fs type to read-ahead) from run `{doc['run_id']}`, which " in row
    )
    assert f"another filesystem than the audit's {audit_wb['fstype']} on {audit_wb['source']} | ext4 |" in row


@pytest.mark.heavy
def test_the_same_filesystem_and_an_older_run_say_nothing_of_a_split(tmp_path, linux_doc):
    """A run whose own facts name the audit's filesystem, and a results-3 run (no facts of its own, read
    against the audit's as before), render without the line."""
    same = copy.deepcopy(linux_doc)
    same["host"] = "samebox"
    same["workbench"] = copy.deepcopy(linux_doc["facts"]["workbench"])
    old = copy.deepcopy(linux_doc)
    old.update(host="oldbox", schema_version=3)
    reports = tmp_path / "reports"
    _store(reports, same)
    atomic_write_json(reports / "oldbox" / "runs" / f"{old['run_id']}.json", old)
    _, errors = report.render_all(reports)
    assert errors == []
    for host in ("samebox", "oldbox"):
        text = (reports / host / "report.md").read_text()
        assert "name different filesystems" not in text
        assert f"| filesystem type | **{linux_doc['facts']['workbench']['fstype']}** |" in _fs_table(text)
    assert "recorded by the lab runner itself" in (reports / "samebox" / "report.md").read_text()
    assert "recorded by the lab runner itself" not in (reports / "oldbox" / "report.md").read_text()
    upgraded = stored.read(reports / "oldbox" / "runs" / f"{old['run_id']}.json", "results")
    assert upgraded["workbench"] == {"unavailable": stored.NO_RUN_WORKBENCH}


def test_a_workbench_with_no_block_device_renders_its_ceiling_and_says_why(tmp_path, linux_doc):
    """Issue 27: a workbench on sshfs (FUSE, no block device behind it) ended `disklab run` in a template
    error ('dict object' has no attribute 'vendor') and no report was written."""
    from test_fleet_figures import ceiling_section

    doc = copy.deepcopy(linux_doc)
    doc["experiments"]["ceiling"] = ceiling_section(tmp_path / "ceiling")
    why = "no block device: the workbench is on fuse.sshfs <remote>"
    for wb in (doc["facts"]["workbench"], doc.get("workbench")):
        if isinstance(wb, dict):
            wb["device"] = {"unavailable": why}
    reports = tmp_path / "reports"
    _store(reports, doc)
    _, errors = report.render_all(reports)
    assert errors == []
    text = (reports / "linuxbox" / "report.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("Device facts that bound durability"))
    assert (
        "device n/a (no block device: the workbench is on fuse.sshfs &lt;remote&gt;); write cache unknown"
        in line
    )


def _fsync_variants(linux_doc) -> list[dict]:
    """fsync_bench sections whose plots differ: other samples, a mode that failed, a wider range."""
    base = linux_doc["experiments"]["fsync_bench"]
    variants = [copy.deepcopy(base) for _ in range(4)]
    variants[1]["modes"]["fsync"]["samples_ns"] = [v * 40 for v in base["modes"]["fsync"]["samples_ns"]]
    variants[2]["modes"]["fdatasync"] = {"status": "unsupported", "reason": "not on this test host"}
    variants[3]["modes"]["none"]["samples_ns"] = [v // 100 + 1 for v in base["modes"]["none"]["samples_ns"]]
    return [variants[0], variants[1], variants[2], variants[3], variants[0]]


@pytest.mark.heavy
def test_a_reused_figure_draws_the_same_png_bytes_as_a_new_one(tmp_path, linux_doc, monkeypatch):
    """The fsync plot's figure (disklab.sections.fsync_bench._axes) and plotting.figure's are reused per
    process; every plot drawn on them is byte for byte the one a new figure draws, whatever came before."""
    from disklab import plotting
    from disklab.sections import fsync_bench as section

    def draw_all(reuse: bool, out) -> list[bytes]:
        monkeypatch.setattr(plotting, "REUSE", reuse)
        pngs = []
        for n, sec in enumerate(_fsync_variants(linux_doc)):
            path, _notes = section._plot(sec, out / str(n))
            pngs.append((out / path).read_bytes())
        return pngs

    monkeypatch.setattr(section, "_FIGURE", [])
    reused = draw_all(True, tmp_path / "reused" / "plots")
    assert section._FIGURE, "the figure was kept for the next host"
    fresh = draw_all(False, tmp_path / "fresh" / "plots")
    assert reused == fresh
    assert reused[0] == reused[4] and len(set(reused)) == 4  # the same data draws the same bytes
    monkeypatch.setattr(plotting, "REUSE", True)
    first = plotting.figure(3, 2)
    first.subplots().plot([1, 2], [3, 4])
    plotting.margins(first, left=0.5, right=0.1, bottom=0.4, top=0.2)
    again = plotting.figure(3, 2)
    assert (
        again is first and not again.axes and again.subplotpars.left == plotting.figure(3, 2).subplotpars.left
    )
    assert plotting.figure(3, 2, shared=False) is not first


@pytest.mark.heavy
def test_pages_rendered_with_reused_figures_equal_those_without(tmp_path, linux_doc, monkeypatch):
    """A whole render with the figures reused writes the same pages and plots as one without."""
    from disklab import plotting
    from disklab.sections import fsync_bench as section

    trees = {}
    for reuse in (True, False):
        monkeypatch.setattr(plotting, "REUSE", reuse)
        monkeypatch.setattr(section, "_FIGURE", [])
        reports = tmp_path / f"reports-{reuse}"
        for n, sec in enumerate(_fsync_variants(linux_doc)[:4]):
            doc = copy.deepcopy(linux_doc)
            doc["host"] = f"host{n}"
            doc["experiments"]["fsync_bench"] = sec
            _store(reports, doc)
        monkeypatch.setenv("DISKLAB_RENDER_WORKERS", "1")
        assert report.render_all(reports)[1] == []
        trees[reuse] = {
            p.relative_to(reports): p.read_bytes()
            for p in reports.rglob("*")
            if p.is_file() and p.suffix in (".md", ".html", ".png")
        }
    assert trees[True] == trees[False] and len(trees[True]) >= 4 * 3


@pytest.mark.heavy
def test_an_up_to_date_host_is_not_rendered_again_and_its_stamp_is_read_once(
    tmp_path, linux_doc, monkeypatch
):
    """render_all takes an up-to-date host's index row from the stamp it read to find it current (no
    second read, no pool job); a missing report.html is still written; a changed input renders again."""
    reports = tmp_path / "reports"
    for host in ("linuxbox", "otherbox"):
        _store(reports, {**copy.deepcopy(linux_doc), "host": host})
    report.render_all(reports)
    index = (reports / "index.md").read_text()
    html = (reports / "otherbox" / "report.html").read_bytes()
    (reports / "otherbox" / "report.html").unlink()
    reads = []
    real_read = stored.read
    monkeypatch.setattr(
        stored, "read", lambda path, kind, **kw: (reads.append((path, kind)), real_read(path, kind, **kw))[1]
    )
    rendered = []
    real_render = report.render_host
    monkeypatch.setattr(
        report, "render_host", lambda h, *a, **kw: (rendered.append(h.name), real_render(h, *a, **kw))[1]
    )
    written, errors = report.render_all(reports)
    assert errors == [] and written == [reports / "index.md"] and rendered == []
    assert sorted(p.parent.name for p, kind in reads if kind == "render_stamp") == ["linuxbox", "otherbox"]
    assert (reports / "otherbox" / "report.html").read_bytes() == html
    assert (reports / "index.md").read_text() == index
    second = copy.deepcopy(linux_doc)
    second["run_id"] = "20261129T110000Z"
    _store(reports, second)
    written, errors = report.render_all(reports)
    assert errors == [] and rendered == ["linuxbox"] and written[0] == reports / "linuxbox" / "report.md"
    assert "Run `20261129T110000Z`" in (reports / "linuxbox" / "report.md").read_text()


def test_pool_chunks_stay_small():
    assert reportpool._chunksize(500, 2) == reportpool.CHUNK_MAX
    assert reportpool._chunksize(5, 2) == 1


@pytest.mark.heavy
def test_the_index_pages_are_rendered_again_only_when_their_inputs_change(tmp_path, linux_doc):
    """index.md, fleet.md and their HTML are left alone when the renderer, the rows and the fleet plots are
    those they were rendered from (.index.sha256); a missing page, or a changed host, renders them again,
    and what is written equals what a render from scratch writes."""
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    report.render_all(reports)
    pages = [reports / name for name in report.INDEX_PAGES]
    first = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in pages}
    assert report.render_all(reports)[0] == [reports / "index.md"]
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in pages} == first  # not written again
    (reports / "fleet.html").unlink()
    report.render_all(reports)
    assert {p: p.read_bytes() for p in pages} == {p: b for p, (b, _) in first.items()}
    other = {**copy.deepcopy(linux_doc), "host": "otherbox"}
    _store(reports, other)
    report.render_all(reports)
    assert (
        "otherbox" in (reports / "index.md").read_text()
        and "otherbox" in (reports / "fleet.html").read_text()
    )
    scratch = tmp_path / "scratch"
    shutil.copytree(
        reports, scratch, ignore=shutil.ignore_patterns("*.md", "*.html", ".*.sha256", ".rendered.json")
    )
    report.render_all(scratch)
    assert {p.name: p.read_bytes() for p in pages} == {
        n: (scratch / n).read_bytes() for n in report.INDEX_PAGES
    }


def test_a_run_file_of_another_name_shape_is_sorted_not_raised(tmp_path, linux_doc):
    """A copy a user made beside a stored run (``<id>-a1.json``) made store.run_key raise ValueError inside a
    render worker, which ended the whole `disklab report`."""
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    path = reports / "linuxbox" / "runs" / f"{linux_doc['run_id']}.json"
    shutil.copyfile(path, path.with_name(f"{path.stem}-a1.json"))
    names = [p.name for p in store.files(path.parent.parent, "runs")]
    assert names == [path.name, f"{path.stem}-a1.json"]
    _, errors = report.render_all(reports)
    assert (reports / "linuxbox" / "report.md").is_file() and all("Traceback" not in e for e in errors)


def test_a_render_fsyncs_its_pages_and_plots_and_not_its_caches(tmp_path, linux_doc, monkeypatch):
    """A plot's digest and the stored files found valid are caches, written without fsync (they only save
    work, and each is written after what it vouches for); the pages and the PNGs are fsynced."""
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    report.render_all(reports)
    plots = sorted(p.name for p in (reports / "linuxbox" / "plots").glob("*.png"))
    assert plots and all((reports / "linuxbox" / "plots" / f".{p}.sha256").is_file() for p in plots)
    for name in ("report.md", "report.html", *plots):
        assert any(s.startswith(f".{name}.") and s.endswith(".tmp") for s in synced), name
    assert (reports / "linuxbox" / stored.VALID_FILE).is_file()
    assert not [s for s in synced if ".sha256." in s]  # the digests' and the valid files' temp files
