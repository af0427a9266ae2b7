"""Values from a host checked for sense: a stored run with NaN, an infinity, a negative or absurd time, a
huge string or a huge file is refused in one line that names it, and the other hosts still render.

The good run is real (test_fleet_figures' ``lab_doc``: write_buffering, fsync_bench and big_write measured
here, a load and a power-cut section); each bad run is that run with one value changed, written as the
bytes a careless or broken host would send (Python's json writes NaN and Infinity literals).
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, unrendered_copy
from disklab import fleet, report, stored, values
from test_fleet_figures import ceiling_section, lab_doc  # noqa: F401  (lab_doc: a real run with load, power-cut)
from test_report import linux_doc  # noqa: F401  (lab_doc's own fixture)

BAD_HOST, GOOD_HOST = "badbox", "goodbox"
FIFTY_MB = 50_000_000


def _set(doc: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    node[int(last) if isinstance(node, list) else last] = value


def _with(doc: dict, path: str, value: object) -> dict:
    new = copy.deepcopy(doc)
    _set(new, path, value)
    return new


def _run_path(reports: Path, host: str, doc: dict) -> Path:
    return reports / host / "runs" / f"{doc['run_id']}.json"


def _write_raw(reports: Path, host: str, doc: dict, padding: int = 0) -> Path:
    """The document's bytes as a host would send them, stored without the write path's checks."""
    path = _run_path(reports, host, doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**doc, "host": host}, f)  # allow_nan: NaN, Infinity and -Infinity as literals
        f.write(" " * padding)  # whitespace: still valid JSON
    return path


# (case, the bad run's change as (path, value) or a padding in bytes, what the refusal says)
CASES = [
    ("nan", ("experiments.fsync_bench.modes.fsync.latency.p50_us", math.nan), "holds NaN at"),
    (
        "infinity",
        ("experiments.load.cells.0.stages.all_touched.time_s.median", math.inf),
        "holds Infinity at experiments.load.cells.0.stages.all_touched.time_s.median: not a finite number",
    ),
    (
        "negative_latency",
        ("experiments.write_buffering.modes.buffered.per_call_ns.median", -1),
        "holds -1 at experiments.write_buffering.modes.buffered.per_call_ns.median: a time cannot be",
    ),
    (
        "absurd_time",
        ("experiments.load.samples.0.stages.all_touched.time_s", 1e308),
        "holds 1e+308 at experiments.load.samples.0.stages.all_touched.time_s:",
    ),
    (
        "fifty_mb_string",
        ("experiments.big_write", {"status": "failed", "error": "E" * FIFTY_MB, "step_wall_s": 0.1}),
        f"holds a string of {FIFTY_MB:,} characters at experiments.big_write.error",
    ),
    ("oversized_file", values.MAX_FILE_BYTES, "MiB, past the 64 MiB a stored file may hold"),
]


def _bad_run(reports: Path, doc: dict, change) -> Path:
    if isinstance(change, int):
        return _write_raw(reports, BAD_HOST, doc, padding=change)
    return _write_raw(reports, BAD_HOST, _with(doc, *change))


# The CLI in a fresh process, printing its own peak RSS last: on Linux the VmHWM of its own address space
# (getrusage's ru_maxrss would also hold the RSS of the pytest process it was forked from, which exec keeps);
# on macOS getrusage, in bytes.
PEAK = (
    "import resource, sys\n"
    "from disklab import cli\n"
    "rc = cli.main(sys.argv[1:])\n"
    "if sys.platform == 'darwin':\n"
    "    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "else:\n"
    "    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0]\n"
    "    peak = int(hwm.split()[1]) * 1024\n"
    "print(f'peak_rss_bytes {peak}', file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def _report_force(reports: Path) -> tuple[subprocess.CompletedProcess, int, list[str]]:
    """``disklab report --force``: (the process, its peak RSS in bytes, its stderr lines but that one)."""
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, "--reports", str(reports), "report", "--force"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    lines = proc.stderr.splitlines()
    peak = [int(x.split()[1]) for x in lines if x.startswith("peak_rss_bytes ")]
    return proc, peak[0] if peak else 0, [x for x in lines if not x.startswith("peak_rss_bytes ")]


@pytest.fixture(scope="module")
def good_host(lab_doc, tmp_path_factory) -> Path:  # noqa: F811
    """The good run stored by the write path as GOOD_HOST's and rendered once, alone: its plots drawn and
    its bytes checked once for every case below (the fleet's plots, which the bad host's row changes, are
    drawn in each case: conftest.unrendered_copy keeps only the host's)."""
    reports = tmp_path_factory.mktemp("good") / "reports"
    stored.write(_run_path(reports, GOOD_HOST, lab_doc), "results", {**lab_doc, "host": GOOD_HOST})
    assert report.render_all(reports)[1] == []
    shutil.rmtree(reports / fleet.PLOT_DIR)
    return reports


@pytest.mark.parametrize("case,change,says", CASES, ids=[c[0] for c in CASES])
@pytest.mark.heavy
def test_a_run_with_a_senseless_value_is_refused_in_one_line_and_the_other_host_renders(
    tmp_path,
    lab_doc,  # noqa: F811
    good_host,
    case,
    change,
    says,
):
    reports = unrendered_copy(good_host, tmp_path / "reports")
    bad = _bad_run(reports, lab_doc, change)
    with pytest.raises(stored.StoredFileError) as exc:
        stored.read(bad, "results")
    message = str(exc.value)
    assert message.startswith(f"{bad}: results file ") and says in message, message
    assert "\n" not in message and len(message) < 1000  # one line, never the string itself

    proc, peak, errors = _report_force(reports)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert errors == [f"disklab report: {BAD_HOST}: {message}"]
    good = (reports / GOOD_HOST / "report.md").read_text()
    assert "fsync p50 is" in good and "nan" not in good.lower()
    # the refused run is named on the host's page and its row (issue 26, finding 9), and none of its figures
    bad_page = (reports / BAD_HOST / "report.md").read_text()
    assert "cannot be read" in bad_page and "fsync p50 is" not in bad_page
    index = (reports / "index.md").read_text()
    assert f"| {GOOD_HOST} |" in index and f"| {BAD_HOST} | **unreadable**: " in index
    assert (reports / fleet.PLOT_DIR / fleet.SYNC_PLOT).read_bytes().startswith(b"\x89PNG")
    print(f"{case}: peak RSS of disklab report --force {peak / (1 << 20):.0f} MiB")
    if case == "fifty_mb_string":  # refused before it is held more than the three times reading takes
        assert peak < 320 << 20, f"peak RSS {peak / (1 << 20):.0f} MiB"


def test_a_file_past_the_bound_is_refused_before_it_is_read_whole(tmp_path, lab_doc, monkeypatch):  # noqa: F811
    path = _write_raw(tmp_path, BAD_HOST, lab_doc, padding=values.MAX_FILE_BYTES)
    read_sizes = []
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            read_sizes.append(n)
            return self.f.read(n)

        def fileno(self):
            return self.f.fileno()

    monkeypatch.setattr("builtins.open", lambda p, *a, **k: Counting(real_open(p, *a, **k)))
    with pytest.raises(stored.StoredFileError, match="past the 64 MiB a stored file may hold"):
        stored.read(path, "results")
    assert read_sizes == []  # refused by its size, before a byte of it is read


@pytest.mark.parametrize(
    "text,says",
    [
        ('{"a": NaN}', "holds NaN at a: not a finite number"),
        ('{"a": [1, -Infinity]}', "holds -Infinity at a.1: not a finite number"),
        ('{"big_s": 1e400}', "holds inf at big_s: not a finite number"),
        ('{"n": 1e19}', "holds 1e+19 at n: past ±2**63"),
        ('{"n": ' + "9" * 30 + "}", "holds an integer of 100 bits at n: past ±2**63"),
        ('{"size_bytes": -4096}', "holds -4096 at size_bytes: a figure in bytes cannot be negative"),
        ('{"rate_mib_s": {"median": -1.5}}', "holds -1.5 at rate_mib_s.median: a figure in mib_s cannot"),
        ('{"samples_ns": [5, -3]}', "holds -3 at samples_ns.1: a time cannot be negative"),
        ('{"wait_ms": 2e10}', "holds 2e+10 at wait_ms: past 1e+07 s"),
        ('{"x": "' + "y" * (values.MAX_STRING_CHARS + 1) + '"}', "holds a string of 65,537 characters at x"),
        ("[" * 5000 + "]" * 5000, "nested past 64 levels"),
        ('{"a": ' * 70 + "1" + "}" * 70, "is nested more than 64 levels deep"),
        ('{"n": ' + "9" * 5000 + "}", "not JSON disklab reads"),
    ],
)
def test_each_rule_names_the_value_and_where_it_is(text, says):
    with pytest.raises(stored.StoredFileError) as exc:
        stored.parse(text.encode(), "results")
    assert says in str(exc.value)


@pytest.mark.parametrize(
    "doc",
    [
        {"mtime_ns": 1_800_000_000_000_000_000},  # a point in time, in ns since 1970
        {"spawn_to_main_s": -0.002},  # two readings of the wall clock
        {"delta": -5, "count": 0, "fraction": 0.0, "time_s": 0, "p50_us": 9.99e12},
        {"error": "E" * values.MAX_STRING_CHARS},
    ],
)
def test_values_that_make_sense_pass(doc):
    assert values.first_error(doc) is None


def test_the_write_path_refuses_what_the_read_path_would(tmp_path, lab_doc):  # noqa: F811
    bad = _with(lab_doc, "experiments.fsync_bench.modes.fsync.latency.p50_us", math.nan)
    with pytest.raises(stored.StoredFileError, match="holds nan at .*p50_us: not a finite number"):
        stored.write(tmp_path / "r.json", "results", bad)
    assert not (tmp_path / "r.json").exists()


def _zero_times(node: object, timed: bool = False) -> object:
    """Every number under a key with a time unit (``_s``, ``_ms``, ``_us``, ``_ns``) set to 0, but counts."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            unit = k.rsplit("_", 1)[-1] in ("s", "ms", "us", "ns") and not k.endswith("mib_s")
            out[k] = v if k == "n" else _zero_times(v, timed or unit)
        return out
    if isinstance(node, list):
        return [_zero_times(v, timed) for v in node]
    if timed and isinstance(node, (int, float)) and not isinstance(node, bool):
        return 0 if isinstance(node, int) else 0.0
    return node


@pytest.mark.heavy
def test_a_run_with_all_zero_latencies_renders_its_plots_without_raising(tmp_path, lab_doc):  # noqa: F811
    """Zero is a valid time (a clock too coarse for the call), but not a point on a log axis."""
    reports = tmp_path / "reports"
    experiments = {**lab_doc["experiments"], "ceiling": ceiling_section(tmp_path)}
    zero = _zero_times({**lab_doc, "experiments": experiments})
    for spread in ("cold_mib_s", "warm_mib_s"):  # a rate, not a time: a read too fast for the clock
        zero["experiments"]["ceiling"][spread].update(median=0.0, min=0.0, max=0.0)
    zero["experiments"]["fsync_bench"]["step_wall_s"] = 0.1
    for host in ("zero1", "zero2"):
        stored.write(_run_path(reports, host, zero), "results", {**zero, "host": host})
    written, errors = report.render_all(reports, force=True)
    assert errors == []
    text = (reports / "zero1" / "report.md").read_text()
    assert "nan" not in text.lower() and "fsync p50 is 0.0 µs" in text
    assert "The latency plot is on a log axis: 30 of 30 samples of mode none are 0 or less" in text
    page = (reports / "fleet.md").read_text()
    assert "nan" not in page.lower()
    assert "The plot is on a log axis: 2 of 2 hosts' durable sync p50 are 0 or less" in page


def test_the_fleet_plots_leave_out_what_a_log_axis_cannot_place_and_say_so(tmp_path):
    """Figures that reach the fleet plots from a cached index row, not only from a stored run."""

    def row(host: str, p50_us: float, median_s: float) -> dict:
        cell = {
            "file": "big_pt",
            "method": "torch.load",
            "populate": None,
            "cache": "cold",
            "stage": "all_touched",
        }
        load = [{**cell, "time": {"median": median_s, "min": median_s, "max": median_s, "n": 1}}]
        fleet_column = {"load": load, "load_unproven": [], "powercut": []}  # host_column's keys plots() reads
        return {"host": host, "fleet": fleet_column, "durable_sync": {"p50_us": p50_us, "call": "fsync"}}

    plots = fleet.plots(tmp_path, [row("a", math.inf, 0.0), row("b", 0.0, math.nan)])
    note = "2 of 2 hosts' durable sync p50 are 0 or less, or not finite, and not shown"
    assert plots["sync"] == {"path": None, "note": note, "alt": "Durable sync p50, one point per host"}
    assert plots["powercut"]["path"] is None  # these rows hold no power-cut verdict: no grid
    assert plots["load_cold"]["path"] is None and plots["load_cold"]["note"].startswith("2 of 2 ")
    plots = fleet.plots(tmp_path, [row("a", math.inf, 0.0), row("b", 40.0, 1.5)])
    assert plots["sync"]["path"] == f"{fleet.PLOT_DIR}/{fleet.SYNC_PLOT}"
    assert plots["sync"]["note"].startswith("1 of 2 ")
    assert (tmp_path / fleet.PLOT_DIR / fleet.LOAD_PLOT).read_bytes().startswith(b"\x89PNG")


def test_a_step_that_fails_with_a_huge_message_stores_it_cut_to_a_readable_length(tmp_path, monkeypatch):
    """The host keeps a failed step's error within what the controller reads, so the run is not lost."""
    from disklab_host import lab

    class Step:
        @staticmethod
        def run(cfg, workdir):
            raise RuntimeError("start " + "x" * FIFTY_MB + " end")

    monkeypatch.setattr(lab.importlib, "import_module", lambda name: Step)
    section = lab.run_step("fsync_bench", {"workbench": str(tmp_path)})
    error = section["error"]
    assert section["status"] == "failed" and lab.ERROR_CHARS - 40 < len(error) <= lab.ERROR_CHARS
    assert error.startswith("RuntimeError: start x") and error.endswith("x end")
    head, cut, tail = re.fullmatch(r"(.*) … \[([0-9,]+) characters cut\] … (.*)", error).groups()
    assert len(head) + int(cut.replace(",", "")) + len(tail) == len("RuntimeError: start  end") + FIFTY_MB
    assert len(section["traceback"]) <= lab.ERROR_CHARS
    assert values.first_error(section) is None
