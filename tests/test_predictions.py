"""Predictions first, for teaching (issue 28, item 9): a fleet's reports/predictions.yml beside the figures.

Stored runs are built as test_report_answers builds them (the real write path measured here, a load section
of known times). Every expected value, ratio and verdict is computed here from the stored document and the
prediction as written, never by calling disklab.predictions; only the number formatting is disklab's.
"""

from __future__ import annotations

import copy
import json
import math
import os
import statistics
from pathlib import Path

import pytest
import yaml

from conftest import run_disklab, unrendered_copy
from disklab import compare, predictions, report
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
    stamp = fleet / "linuxbox" / report.STAMP_FILE
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
