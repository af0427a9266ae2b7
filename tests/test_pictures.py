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


def _text_figure(canvas_class, shift: float):
    """A figure of text as the reports draw it, and then some: tick labels, a legend, rotated, bold, small
    and large, non-ASCII, multi-line, mathtext and text without antialiasing, placed ``shift`` px off."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3), dpi=plotting.DPI)
    canvas_class(fig)
    ax = fig.subplots()
    ax.plot([0, 1, 2], [3, 1, 2], label="fsync → p50")
    ax.bar([0.5], [1], label="dirty (a power cut loses it)")
    ax.set_xlabel("MiB/s: the file's size (grey) and its pages", fontsize=7)
    ax.set_ylabel("latency µs", rotation=90)
    offset = shift / fig.dpi
    for i, angle in enumerate((0, 30, 90, 200)):
        x, y = 0.2 + 0.4 * i + offset, 1.5 + offset
        ax.text(x, y, f"rolled_back {i}\nsafe ✓", rotation=angle, fontsize=6 + i)
    ax.text(0.1, 2.8, "bold, not antialiased", weight="bold", antialiased=False)
    ax.set_title("$p_{99}$ of fdatasync(2)", fontsize=11)
    fig.legend(loc="lower center", ncol=2, fontsize=8)
    fig.subplots_adjust(bottom=0.3)
    fig.canvas.draw()
    return bytes(fig.canvas.buffer_rgba())


def test_text_drawn_from_remembered_glyphs_has_matplotlibs_own_pixels(monkeypatch):
    """disklab.glyphcache draws every text pixel for pixel as matplotlib's Agg renderer does: at whole and
    fractional pixel offsets, rotated, bold, without antialiasing, from empty caches and from full ones."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from disklab import glyphcache

    monkeypatch.setattr(glyphcache, "_layouts", {})
    monkeypatch.setattr(glyphcache, "_glyphs", {})
    for shift in (0.0, 0.3, 1.0, 2.55):
        assert _text_figure(glyphcache.Canvas, shift) == _text_figure(FigureCanvasAgg, shift), shift
    if glyphcache.SUPPORTED:  # the cached path ran, and a figure drawn again is drawn from the caches alone
        glyphs = len(glyphcache._glyphs)
        assert glyphs and glyphcache._layouts
        assert _text_figure(glyphcache.Canvas, 0.3) == _text_figure(FigureCanvasAgg, 0.3)
        assert len(glyphcache._glyphs) == glyphs
    assert isinstance(plotting.figure(2, 1, shared=False).canvas, glyphcache.Canvas)


def test_a_reused_layers_figure_draws_the_same_png_bytes_as_a_new_one(tmp_path, monkeypatch):
    """layers._axes keeps one figure per row count and empties it for the next host: each picture drawn on
    it, after any other, is byte for byte the one a new figure draws (bars, notes, legend, units, labels)."""

    def record(points: list[str], scale: int, empty: bool = False) -> dict:
        def row(i: int, point: str) -> dict:
            if empty and i == 0:  # nothing in the file or the page cache yet
                return {"point": point, "st_size_bytes": 0,
                        "pages": {"cached_pages": 0, "dirty_pages": 0, "writeback_pages": 0}}  # fmt: skip
            pages = {"cached_pages": (i + 2) * scale // 4096, "dirty_pages": i * scale // 8192,
                     "writeback_pages": scale // 16384}  # fmt: skip
            return {"point": point, "st_size_bytes": (i + 1) * scale, "pages": pages}

        rows = [row(i, p) for i, p in enumerate(points)]
        return {"cachestat": "ok", "page_size_bytes": 4096, "rows": rows}

    records = [
        record(["after_write", "after_flush", "after_fsync"], 1 << 20),
        record(["after_write", "after_flush", "after_fsync"], 3 << 30, empty=True),
        record(["after_flush", "after_fsync"], 1 << 12),
        record(["after_write", "after_flush", "after_fsync"], 5 << 20),
    ]

    def draw_all(reuse: bool, out) -> list[bytes]:
        monkeypatch.setattr(plotting, "REUSE", reuse)
        return [(out / layers.plot(r, out / "plots", f"{n}.png")).read_bytes() for n, r in enumerate(records)]

    assert layers._points(records[1])[0][1:] == [0, 0, 0, 0]  # drawn with its "none ... yet" note
    monkeypatch.setattr(layers, "_AXES", {})
    reused = draw_all(True, tmp_path / "reused")
    assert sorted(layers._AXES) == [2, 3]
    assert reused == draw_all(False, tmp_path / "fresh")
    assert len(set(reused)) == len(records)
