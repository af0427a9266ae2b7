"""Predictions first, for teaching (issue 28, item 9): a fleet's reports/predictions.yml beside the figures.

Stored runs are built as test_report_answers builds them (the real write path measured here, a load section
of known times). Every expected value, ratio and verdict is computed here from the stored document and the
prediction as written, never by calling disklab.predictions; only the number formatting is disklab's.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_disklab, unrendered_copy
from disklab import compare, predictions, report, reportcache
from test_hostile_names import _cells
from test_report import linux_doc  # noqa: F401  (the fixture: a results document measured here)
from test_report_answers import _store, full_doc  # noqa: F401  (the fixture: every step the answers read)

FSYNC = "experiments.fsync_bench.modes.fsync.samples_ns"
RATE = "experiments.big_write.write_rate_samples_mib_s"
LOAD = "experiments.load.samples[file=big_pt]"
COLD = f"{LOAD}[method=torch.load][cache=cold].stages.all_touched.time_s"
RSS = f"{LOAD}[method=torch.load][cache=cold].stages.all_touched.peak_rss_bytes"
WARM_MMAP = f"{LOAD}[method=torch.load-mmap][cache=warm].stages.all_touched.time_s"
HEADING = "### Your predictions"


def _write(reports, data) -> None:
    reports.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    (reports / "predictions.yml").write_text(text, encoding="utf-8")


def _rows(text: str) -> dict[str, list[str]]:
    """The "Your predictions" table's rows by their figure's link text, each as its cells."""
    assert HEADING in text, "no Your predictions table"
    block = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in block.splitlines():
        if line.startswith("| [") and _cells(line) == 7:
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].split("](")[0][1:]] = cells
    return rows


def _stored(reports, host="linuxbox") -> dict:
    (path,) = (reports / host / "runs").glob("*.json")
    return json.loads(path.read_text())


def _load_samples(doc: dict, method: str, file: str, state: str, field: str) -> list[float]:
    return [
        s["stages"]["all_touched"][field]
        for s in doc["experiments"]["load"]["samples"]
        if (s["method"], s["file"], s["cache_proof"]["verdict"]) == (method, file, state)
        and s.get("populate") is None
    ]


def _load_median(doc: dict, method: str, file: str, state: str, field: str) -> float:
    return statistics.median(_load_samples(doc, method, file, state, field))


def _median_interval(units: list[float]) -> tuple[float, float, float]:
    """The median's order-statistic interval of ``units`` (low, high, coverage): the widest k with
    2·P(Bin(n, 1/2) < k) <= 0.05, else the whole range (computed here, not by disklab)."""
    s, n = sorted(units), len(units)
    k = 1
    while k < n // 2 and 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n <= 0.05:
        k += 1
    return s[k - 1], s[n - k], 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n


def _expect_verdict(units: list[float], predicted: float, higher: str, lower: str) -> str:
    """The verdict the table should give: the median against the prediction, judged on the median's
    interval (within 2× when it lies inside 1/2..2 of the prediction, beyond when wholly beyond)."""
    r = statistics.median(units) / predicted
    low, high, coverage = _median_interval(units)
    low, high = low / predicted, high / predicted
    times = r if r > 1 else 1 / r
    shown = f"{times:.1f}×" if times < 100 else f"{times:,.0f}×"
    if low >= 0.5 and high <= 2:
        text = "within 2×"
    elif low > 2 or high < 0.5:
        text = f"{shown} {higher if r > 1 else lower} than predicted"
    else:
        text = f"undecided: {r:.1f}× the prediction, but the median's interval ({low:.2g}× to {high:.2g}×) "
        text += "crosses the 2× bound"
    if coverage < 0.95:
        text += f" (n = {len(units)}: the median's interval is the samples' range, {coverage:.0%} coverage)"
    return text


def _rounds(samples: list[float]) -> list[float]:
    """fsync_bench's ten rounds of consecutive samples, each as its median (the figure's test units)."""
    per = len(samples) // 10
    return [statistics.median(samples[i * per : (i + 1) * per]) for i in range(10)]


def _two_hosts(reports: Path, full_doc: dict) -> Path:  # noqa: F811
    """Two hosts: linuxbox with every step, and bare, whose load step was not run (a reason with markup)."""
    _store(reports, full_doc)
    bare = copy.deepcopy(full_doc)
    bare["host"] = "bare"
    bare["experiments"]["load"] = {"status": "not_run", "reason": "no torch <b>here</b>", "step_wall_s": 0.0}
    _store(reports, bare)
    return reports


@pytest.fixture(scope="module")
def drawn(tmp_path_factory, full_doc):  # noqa: F811
    """The two hosts rendered once for the module, without predictions: their plots, which no prediction
    changes, drawn and their stored runs checked once (every test here checks pages)."""
    reports = _two_hosts(tmp_path_factory.mktemp("drawn") / "reports", full_doc)
    assert report.render_all(reports)[1] == []
    return reports


@pytest.fixture
def fleet(tmp_path, drawn):
    """The two hosts' stored runs in a new reports tree, with what the module's first render drew and
    checked (conftest.unrendered_copy): each render here renders every page, and draws and checks nothing
    again."""
    return unrendered_copy(drawn, tmp_path / "reports")


@pytest.mark.heavy
def test_each_prediction_sits_beside_its_measured_median_with_the_ratio_and_a_verdict(fleet):
    _write(
        fleet,
        {
            "who": "Ada's class",
            "all": {
                FSYNC: {"value": 50, "unit": "us"},
                RATE: "2 GiB/s",
                COLD: {"value": 100, "unit": "ms"},
                RSS: {"value": 1, "unit": "GiB"},
                WARM_MMAP: {"value": 0.1, "unit": "s"},
            },
            "hosts": {"linuxbox": {FSYNC: {"value": 7, "unit": "ms", "note": "a slow disk"}}},
        },
    )
    _, errors = report.render_all(fleet)
    assert errors == []
    text = (fleet / "linuxbox" / "report.md").read_text()
    doc = _stored(fleet)
    rows = _rows(text)
    assert text.index("## On this host") < text.index(HEADING) < text.index("## About this report")
    assert "Predictions by Ada's class." in text

    # the per-host override: 7 ms, not all's 50 µs
    fsync_samples = doc["experiments"]["fsync_bench"]["modes"]["fsync"]["samples_ns"]
    fsync = statistics.median(fsync_samples)
    row = rows["fsync_bench · modes · fsync · latency"]
    assert row[1] == compare.format_value(7e6, "ns") == "7,000 µs"
    assert row[2].startswith(compare.format_value(fsync, "ns") + ", n=")
    assert f"run `{doc['run_id']}`" in row[2]
    r = fsync / 7e6
    assert row[3] == (f"{r:.1f}×" if r >= 0.1 else f"{r:.2g}×")
    assert row[4] == _expect_verdict(_rounds(fsync_samples), 7e6, "slower", "faster")
    assert row[5] == "a slow disk"

    row = rows["big_write · write rate"]
    assert row[1] == "2,048 MiB/s"
    assert row[4] == _expect_verdict(
        doc["experiments"]["big_write"]["write_rate_samples_mib_s"], 2048, "faster", "slower"
    )

    cold = _load_median(doc, "torch.load", "big_pt", "cold", "time_s")
    row = rows["load · torch.load, big_pt · cold · all_touched · time"]
    assert row[1] == compare.format_value(0.1, "s") == "0.100 s"
    assert row[2].startswith(f"{compare.format_value(cold, 's')}, cold, n=3, run ")
    r = cold / 0.1
    assert r > 2 and row[4] == _expect_verdict(
        _load_samples(doc, "torch.load", "big_pt", "cold", "time_s"), 0.1, "slower", "faster"
    )  # 1.0 s measured against 0.1 s
    assert row[4].startswith(f"{r:.1f}× slower than predicted")  # fmt: skip

    warm = _load_median(doc, "torch.load-mmap", "big_pt", "warm", "time_s")
    row = rows["load · torch.load-mmap, big_pt · warm · all_touched · time"]
    assert abs(warm - 0.1) < 1e-9 and row[3] == "1.0×" and row[4].startswith("within 2×")

    rss = _load_median(doc, "torch.load", "big_pt", "cold", "peak_rss_bytes")
    row = rows["load · torch.load, big_pt · cold · all_touched · peak RSS"]
    assert row[1] == compare.format_value(2**30, "bytes") == "1.00 GiB"
    assert rss and row[4] == _expect_verdict(
        _load_samples(doc, "torch.load", "big_pt", "cold", "peak_rss_bytes"), 2**30, "more", "less"
    )

    # the other host keeps all's 50 µs for fsync
    other = _rows((fleet / "bare" / "report.md").read_text())
    assert other["fsync_bench · modes · fsync · latency"][1] == compare.format_value(50e3, "ns")


@pytest.mark.heavy
def test_a_prediction_whose_figure_this_host_lacks_says_why(fleet):
    _write(
        fleet,
        {"all": {COLD: "1 s", "experiments.fsync_bench.modes.f_fullfsync.samples_ns": "5 ms"}},
    )
    assert report.render_all(fleet)[1] == []
    bare = (fleet / "bare" / "report.md").read_text()
    cells = next(c for c in _rows(bare).values() if c[0].startswith("[experiments.load"))
    assert cells[2] == "no figure: load was not run (no torch &lt;b&gt;here&lt;/b&gt;)"
    assert cells[3:5] == ["n/a", "n/a"]
    assert "<b>" not in bare
    # a Linux run has no F_FULLFSYNC figure: the mode's own record says why
    full = _rows((fleet / "linuxbox" / "report.md").read_text())
    cells = next(c for c in full.values() if "f_fullfsync" in c[0])
    mode = _stored(fleet)["experiments"]["fsync_bench"]["modes"]["f_fullfsync"]
    assert mode["status"] != "ok"
    assert cells[2].startswith(f"no figure: f_fullfsync was {mode['status']} in run `"), cells
    assert "F\\_FULLFSYNC" in cells[2] or "F_FULLFSYNC" in cells[2], cells


@pytest.mark.heavy
def test_without_a_predictions_file_there_is_no_table(fleet):
    assert report.render_all(fleet)[1] == []
    assert HEADING not in (fleet / "linuxbox" / "report.md").read_text()


BAD = [
    (
        {"all": {"experiments.fsync_bench.modes.fsyncc.samples_ns": "5 us"}},
        "all: experiments.fsync_bench.modes.fsyncc.samples_ns: no key figure has this key; nearest keys: "
        "experiments.fsync_bench.modes.fsync.samples_ns",
    ),
    ({"all": {FSYNC: "5 MiB/s"}}, f"all: {FSYNC}: unit 'MiB/s' does not fit this figure, a latency"),
    ({"all": {RATE: "5 MB/s"}}, f"all: {RATE}: unit 'MB/s' is ambiguous"),
    ({"all": {FSYNC: {"value": "fast", "unit": "us"}}}, f"all: {FSYNC}: value must be a number, got 'fast'"),
    ({"all": {FSYNC: {"value": float("nan"), "unit": "us"}}}, f"all: {FSYNC}: value must be a finite number"),
    ({"all": {FSYNC: ".inf us"}}, f"all: {FSYNC}: value must be a finite number, got inf"),
    ({"all": {FSYNC: 50}}, f"all: {FSYNC}: no unit"),
    ({"all": {FSYNC: "-3 us"}}, f"all: {FSYNC}: value must be > 0"),
    (
        {"hosts": {"linuxbox": {COLD: {"value": 1, "unit": "s", "who": "x"}}}},
        f"hosts: linuxbox: {COLD}: unknown field(s) who",
    ),
    ({"everyone": {}}, "everyone: unknown top-level key"),
    ("all: [unclosed", "not valid YAML at line 1"),
]


@pytest.mark.parametrize(("data", "expected"), BAD, ids=[str(i) for i in range(len(BAD))])
@pytest.mark.heavy
def test_a_bad_predictions_file_is_refused_in_one_line_and_the_reports_still_render(fleet, data, expected):
    _write(fleet, data)
    path = fleet / "predictions.yml"
    with pytest.raises(predictions.PredictionsError) as caught:
        predictions.load(fleet)
    line = str(caught.value)
    assert line.startswith(f"{path}: ") and "\n" not in line
    assert expected in line, line
    _, errors = report.render_all(fleet)
    assert errors == [f"predictions not used: {line}"]
    text = (fleet / "linuxbox" / "report.md").read_text()
    assert "The predictions file was not used: " in text
    assert "## About this report" in text and "| Figure | Predicted |" not in text


@pytest.mark.heavy
def test_disklab_report_prints_the_refusal_and_exits_1(fleet):
    _write(fleet, {"all": {FSYNC: "5 furlongs"}})
    done = run_disklab("report", reports=fleet, timeout=300)
    assert done.returncode == 1, done.stderr
    line = f"disklab report: predictions not used: {fleet / 'predictions.yml'}: all: {FSYNC}: unit 'furlongs'"
    assert line in done.stderr
    _write(fleet, {"all": {FSYNC: "5 us"}})
    done = run_disklab("report", reports=fleet, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.mark.heavy
def test_editing_the_predictions_file_renders_the_reports_again_without_force(fleet):
    report_md = fleet / "linuxbox" / "report.md"
    stamp = fleet / "linuxbox" / reportcache.STAMP_FILE
    report.render_all(fleet)
    first = json.loads(stamp.read_text())["stamp"]
    written, _ = report.render_all(fleet)
    assert report_md not in written  # unchanged inputs: cached
    _write(fleet, {"all": {FSYNC: "50 us"}})
    written, _ = report.render_all(fleet)
    assert report_md in written and "| 50.0 µs |" in report_md.read_text()
    second = json.loads(stamp.read_text())["stamp"]
    assert second != first
    written, _ = report.render_all(fleet)
    assert report_md not in written
    # the same size and the same mtime, other bytes: still rendered again (the stamp takes the content)
    st = (fleet / "predictions.yml").stat()
    _write(fleet, {"all": {FSYNC: "60 us"}})
    os.utime(fleet / "predictions.yml", ns=(st.st_atime_ns, st.st_mtime_ns))
    written, _ = report.render_all(fleet)
    assert report_md in written and "| 60.0 µs |" in report_md.read_text()
    (fleet / "predictions.yml").unlink()
    written, _ = report.render_all(fleet)
    assert report_md in written and HEADING not in report_md.read_text()
    assert json.loads(stamp.read_text())["stamp"] == first


@pytest.mark.heavy
def test_every_string_from_the_file_is_escaped(fleet):
    hostile = "<script>alert(1)</script> | [x](javascript:y) *b* `c`\nnext"
    entry = {"value": 5, "unit": "us", "note": hostile}
    _write(fleet, {"who": hostile, "note": hostile, "all": {FSYNC: entry}})
    assert report.render_all(fleet)[1] == []
    for host in ("linuxbox", "bare"):
        text = (fleet / host / "report.md").read_text()
        block = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
        assert "<script>" not in block and "](javascript" not in block and "\nnext" not in block
        assert "&lt;script&gt;alert(1)&lt;/script&gt; \\| [x]\\(javascript:y) \\*b\\* \\`c\\` next" in block
        rows = [line for line in block.splitlines() if line.startswith("| [")]
        assert rows and all(_cells(line) == 7 for line in rows), rows
        html = (fleet / host / "report.html").read_text()
        assert "<script>alert" not in html


def _bomb() -> str:
    """A "billion laughs" flow mapping on one line, under 600 bytes: nine levels of nine aliases each, 9**10
    (3.5 billion) nodes once written out."""
    levels = ["x0: &x0 [" + ", ".join(["lol"] * 9) + "]"]
    levels += [f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "{" + ", ".join(levels) + ", bomb: [" + ", ".join(["*x8"] * 9) + "]}"


# Where an alias bomb sits: inside one prediction's value, unit or note (where it took `disklab report` to
# 9.9 GB: the refusal's repr expanded it), and at the top level (refused before as an unknown type).
BOMBS = {
    "value": f"all:\n  {FSYNC}:\n    value: {_bomb()}\n    unit: us\n",
    "unit": f"all:\n  {FSYNC}:\n    value: 5\n    unit: {_bomb()}\n",
    "note": f"hosts:\n  linuxbox:\n    {FSYNC}: {{value: 5, unit: us, note: {_bomb()}}}\n",
    "top": f"who: {_bomb()}\nall: {{}}\n",
}
NODES = (
    "more than 100,000 YAML nodes, each alias counted at every use (an alias bomb?); "
    "the bound is 100,000 nodes"
)
# Address space for `disklab report` with no hosts: it needs about 40 MB resident; the bomb took 9.9 GB.
REPORT_AS_BYTES = 300 << 20


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("where", list(BOMBS))
def test_an_alias_bomb_is_refused_quickly_in_one_line_naming_the_file_and_the_bound(tmp_path, where):
    """`disklab report` in a real process whose address space is capped at 300 MiB: the bomb is refused in
    one line naming the file and the bound, with the exit status `disklab --help` gives for a predictions
    file that was not used, and the file is left as it was."""
    reports = tmp_path / "reports"
    _write(reports, BOMBS[where])
    path = reports / "predictions.yml"
    assert path.stat().st_size < 2000
    before = _sha256(path)

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (REPORT_AS_BYTES, REPORT_AS_BYTES))

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "report"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        preexec_fn=cap,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert done.stderr.startswith(f"disklab report: predictions not used: {path}: refused at line "), (
        done.stderr
    )
    assert done.stderr.rstrip("\n").endswith(NODES), done.stderr
    assert elapsed < 30, elapsed
    assert _sha256(path) == before
    help_text = subprocess.run(
        [sys.executable, "-m", "disklab.cli", "--help"], capture_output=True, text=True, cwd=REPO
    ).stdout
    status_1 = " ".join(help_text.split("\n  1 ", 1)[1].split("\n  2 ", 1)[0].split())
    assert (
        "report: a stored file could not be rendered (named; the others are), or the predictions file "
        "was not used" in status_1
    )


def test_the_bounds_on_size_nesting_and_alias_loops_are_each_named(tmp_path):
    reports = tmp_path / "reports"
    path = reports / "predictions.yml"
    cases = {
        "#" * (predictions.BOUNDS.max_bytes + 1): (
            f"{path}: refused before reading: 1,048,577 bytes; the bound is 1,048,576 bytes (1 MiB)"
        ),
        # 100,000 levels: past Python's recursion limit in PyYAML's composer, were it reached
        "all: " + "[" * 100_000 + "]" * 100_000: (
            f"{path}: refused at line 1: nested more than 10 levels deep; the bound is 10 levels"
        ),
        f"all:\n  {FSYNC}: &a {{value: [*a], unit: us}}\n": (
            f"{path}: refused at line 2: alias *a is inside the node it refers to (a loop); an alias must "
            "refer to a node that ends before it"
        ),
    }
    for text, expected in cases.items():
        _write(reports, text)
        with pytest.raises(predictions.PredictionsError) as caught:
            predictions.load(reports)
        assert str(caught.value) == expected


def test_a_fifo_or_a_device_as_the_predictions_file_is_refused_without_reading_it(tmp_path):
    """A FIFO blocked `disklab report` (and every run, which renders at its end) forever; /dev/zero never
    ended. Each is refused at once, in one line, and the render stamp names it without reading it."""
    reports = tmp_path / "reports"
    reports.mkdir()
    path = reports / "predictions.yml"
    for make, kind in (
        (os.mkfifo, "a FIFO (named pipe)"),
        (lambda p: p.symlink_to("/dev/zero"), "a character device"),
    ):
        make(path)
        assert predictions.stamp(reports) == f"predictions unreadable: not a regular file but {kind}"
        with pytest.raises(predictions.PredictionsError) as caught:
            predictions.load(reports)
        assert str(caught.value) == f"{path}: refused before reading: not a regular file but {kind}"
        path.unlink()


def test_a_value_shown_in_a_refusal_is_cut_short(tmp_path):
    reports = tmp_path / "reports"
    _write(reports, {"all": {FSYNC: {"value": list(range(5000)), "unit": "us"}}})
    with pytest.raises(predictions.PredictionsError) as caught:
        predictions.load(reports)
    assert str(caught.value).endswith(f"all: {FSYNC}: value must be a number, got [0, 1, 2, 3, ...]")


def test_aliases_within_the_bounds_still_work(tmp_path):
    """A teacher may write one host's predictions once and point other hosts at them."""
    reports = tmp_path / "reports"
    _write(
        reports,
        f"all:\n  {FSYNC}: &fsync {{value: 5, unit: us}}\n"
        f"hosts:\n  spark-1: &spark {{{RATE}: 2 GiB/s, {FSYNC}: *fsync}}\n  spark-2: *spark\n"
        f"  spark-3:\n    <<: *spark\n    {RATE}: 1 GiB/s\n",
    )
    loaded = predictions.load(reports)
    assert loaded["hosts"]["spark-2"] == loaded["hosts"]["spark-1"]
    assert loaded["hosts"]["spark-2"][FSYNC]["value"] == 5000
    assert loaded["hosts"]["spark-3"][RATE]["value"] == 1024
    assert loaded["hosts"]["spark-3"][FSYNC]["value"] == 5000


def test_the_documented_example_file_is_a_good_predictions_file(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    example = Path(__file__).resolve().parent.parent / "docs" / "predictions.example.yml"
    (reports / "predictions.yml").write_text(example.read_text(encoding="utf-8"), encoding="utf-8")
    loaded = predictions.load(reports)
    raw = yaml.safe_load(example.read_text(encoding="utf-8"))
    assert set(loaded["all"]) == set(raw["all"]) and len(loaded["all"]) >= 10
    fsync = loaded["hosts"]["spark-1"]["experiments.fsync_bench.modes.fsync.samples_ns"]
    assert fsync["value"] == 40 * 1000 and fsync["unit"] == "ns"  # 40 µs, in the figure's ns
    rate = loaded["all"]["experiments.big_write.write_rate_samples_mib_s"]
    assert rate["value"] == 2 * 1024  # 2 GiB/s in MiB/s
