"""The report's pictures show the same numbers as the tables beside them: power-cut grids, page-cache
layers, peak memory (the ceilings' picture is checked in test_ceiling.py, on its real reads)."""

from __future__ import annotations

import copy

from disklab import fleet, plotting
from disklab.sections import layers, load, powercut
from test_report import linux_doc  # noqa: F401  (full_doc's base: the write steps measured here)
from test_report_answers import full_doc  # noqa: F401  (the fixture: every step the answers read)


def _grids(monkeypatch) -> list[tuple]:
    """Every verdict_grid call's (rows, columns, cells), the figure still drawn."""
    calls, real = [], plotting.verdict_grid

    def spy(rows, columns, cells, title):
        calls.append((rows, columns, cells))
        return real(rows, columns, cells, title)

    monkeypatch.setattr(plotting, "verdict_grid", spy)
    return calls


def test_the_power_cut_grid_holds_each_rows_verdict_and_unsafe_count(full_doc, tmp_path, monkeypatch):  # noqa: F811
    calls = _grids(monkeypatch)
    x = powercut.build(full_doc["experiments"]["powercut"], full_doc, tmp_path / "plots")
    assert (
        x["plot"] == "plots/powercut_verdicts.png" and (tmp_path / x["plot"]).read_bytes()[:4] == b"\x89PNG"
    )
    ((rows, columns, cells),) = calls
    assert columns == ["process-kill", "power-cut"] and len(rows) * 2 == len(x["rows"])
    for r in x["rows"]:
        verdict, text = cells[rows.index(r["recipe"])][columns.index(r["model"])]
        unsafe = (
            r["counts"][powercut.OUTCOMES.index("corrupt")] + r["counts"][powercut.OUTCOMES.index("missing")]
        )
        assert verdict == r["verdict"] and text.endswith(f"{unsafe} of {r['states']} unsafe")


def test_the_fleet_grid_says_not_measured_for_a_host_without_the_verdict_and_stops_past_max_bars():
    def col(host, verdicts):
        return (host, {"powercut": [{"recipe": "1 naive", "model": m, "verdict": v, "states": 5}
                                    for m, v in verdicts]}, {})  # fmt: skip

    rows, hosts, cells = fleet._powercut_grid([col("a", [("power-cut", "unsafe")]), col("b", [])])
    assert rows == ["1 naive · power-cut"] and hosts == ["a", "b"]
    assert cells == [[["unsafe", "unsafe\n5 states"], ["", "not measured"]]]
    many = [col(f"h{i}", [("power-cut", "safe")]) for i in range(fleet.MAX_BARS + 1)]
    assert fleet._powercut_grid(many) is None and fleet._powercut_grid([col("a", [])]) is None


def test_the_layers_picture_splits_the_cached_pages_into_dirty_writeback_and_clean(tmp_path):
    record = {"cachestat": "ok", "page_size_bytes": 4096, "rows": [
        {"point": "after_flush", "st_size_bytes": 10_000,
         "pages": {"cached_pages": 5, "dirty_pages": 3, "writeback_pages": 1}}]}  # fmt: skip
    assert layers._points(record) == [["after flush()", 10_000, 3 * 4096, 4096, 4096]]
    assert layers.plot(record, tmp_path / "plots", "x.png") == "plots/x.png"
    missing = {**record, "cachestat": "missing: no cachestat(2) before Linux 6.5"}
    assert (
        layers.plot(missing, tmp_path / "plots", "y.png") is None
        and not (tmp_path / "plots" / "y.png").exists()
    )


def test_the_peak_memory_picture_draws_the_stage_tables_medians(full_doc, tmp_path, monkeypatch):  # noqa: F811
    drawn = []
    monkeypatch.setattr(plotting, "draw_once", lambda path, data, draw, *code: drawn.append(data))
    x = load.build(copy.deepcopy(full_doc["experiments"]["load"]), full_doc, tmp_path / "plots")
    assert x["memory_plot"] == "plots/load_peak_rss.png"
    data = next(d for d in drawn if isinstance(d, dict) and "points" in d)
    want = sorted((r["cache_state"], r["stage"], r["what"], r["peak_rss_bytes"] / (1 << 20))
                  for r in x["rows"] if r["cache_state"] in ("cold", "warm"))  # fmt: skip
    got = sorted((state, stage, data["labels"][y], mib) for state, pts in data["points"].items()
                 for stage, y, mib in pts)  # fmt: skip
    assert got == want and want
