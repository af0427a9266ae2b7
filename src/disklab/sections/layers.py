"""The page-cache layers of a file, counted after each call, as one picture beside their table.

A layers record (write_buffering, big_write, crash) counts the file's pages with cachestat(2) after
each call: its size (st_size), its dirty pages, those under writeback and those cached. The picture puts
each point's bytes in the layers they sit in: the file's size as the kernel knows it, and the page cache
split into dirty (lost by a power cut), under writeback, and clean (on the device too). Drawn from the
same counts as the table (:func:`disklab.sections.evidence.layer_rows`).
"""

from __future__ import annotations

from pathlib import Path

from disklab import plotting
from disklab.sections import evidence

# The page-cache parts of a point's bar, in order, with their colours.
PARTS = (("dirty", "dirty (a power cut loses it)", "#d7301f"),
         ("writeback", "under writeback", "#fdb863"),
         ("clean", "clean (on the device too)", "#4daf4a"))  # fmt: skip
UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "bytes"))


def _points(record: object) -> list[list] | None:
    """``[[label, st_size, dirty, writeback, clean]]`` in bytes, or None without counted pages."""
    if not isinstance(record, dict) or record.get("cachestat") != "ok" or not record.get("rows"):
        return None
    page = record.get("page_size_bytes") or 4096
    out = []
    for r in record["rows"]:
        p = r["pages"]
        if not isinstance(p, dict) or "dirty_pages" not in p:
            return None
        clean = max(p["cached_pages"] - p["dirty_pages"] - p["writeback_pages"], 0)
        label = evidence.LAYER_LABELS.get(r["point"], r["point"]).replace("`", "")
        out.append(
            [label, r["st_size_bytes"], p["dirty_pages"] * page, p["writeback_pages"] * page, clean * page]
        )
    return out


# This process's figure and axes for each number of points (see _axes), made on first use.
_AXES: dict[int, tuple] = {}


def _axes(points: int):
    """The picture's figure and axes for ``points`` rows, with the x grid and nothing drawn: made once per
    process and row count and emptied (bars, notes, legend) for the next host, so the axes and their tick
    artists are not built again, as fsync_bench's plot does. The PNG is byte for byte a new figure's
    (tests/test_pictures.py draws both, with :data:`disklab.plotting.REUSE` off)."""
    if plotting.REUSE and points in _AXES:
        fig, ax = _AXES[points]
        for artist in [*ax.containers, *ax.texts, *fig.legends]:  # a bar container takes its bars along
            artist.remove()
        return fig, ax
    fig = plotting.figure(8, 0.8 * points + 1.7, shared=False)
    ax = fig.subplots()
    ax.grid(axis="x", alpha=0.3)
    if plotting.REUSE:
        if len(_AXES) >= plotting.REUSE_MAX:
            _AXES.clear()
        _AXES[points] = fig, ax
    return fig, ax


def plot(record: object, plot_dir: Path, name: str) -> str | None:
    """The layers of ``record`` as ``plot_dir/name``: per point, the file's size and its page-cache bytes
    by state; the plot's path, or None where the pages were not counted."""
    points = _points(record)
    if not points:
        return None
    top = max(max(p[1], sum(p[2:])) for p in points) or 1
    scale, unit = next((s, u) for s, u in UNITS if top >= s)

    def draw():
        fig, ax = _axes(len(points))
        rows = range(len(points))
        # one barh per layer, not per point (a call costs milliseconds): no two bars overlap, and each
        # point's parts are still drawn from the left, so the pixels are those of one call per bar
        sizes = [p[1] / scale for p in points]
        ax.barh([y - 0.18 for y in rows], sizes, height=0.3, color="0.6", label="file size (st_size)")
        left = [0.0] * len(points)
        for i, (_, words, color) in enumerate(PARTS):
            widths = [p[2 + i] / scale for p in points]
            ax.barh([y + 0.18 for y in rows], widths, left=left, height=0.3, color=color, label=words)
            left = [a + w for a, w in zip(left, widths, strict=True)]
        for y, (_, size, *parts) in enumerate(points):
            if not size and not any(parts):
                ax.text(0, y, " none in the file or the page cache yet", va="center", fontsize=8)
        labels = [p[0] for p in points]
        ax.set_yticks(range(len(points)), labels)
        ax.set_ylim(len(points) - 0.5, -0.5)
        ax.set_xlim(0, top / scale * 1.05)
        ax.set_xlabel(f"{unit}: the file's size (grey) and its pages in the page cache, by state")
        fig.legend(fontsize=8, loc="lower center", ncol=len(PARTS) + 1)
        left_in = plotting.text_width_in(fig, labels) + 0.25
        plotting.margins(fig, left=left_in, right=0.2, bottom=0.95, top=0.15)
        return fig

    return plotting.section_plot(plot_dir, name, points, draw, __file__)


def block(section: dict, plot_dir: Path, name: str) -> dict:
    """What ``sections/_layers.md.j2`` shows of a section's layers record: the table's rows
    (:func:`disklab.sections.evidence.layer_rows`) and ``plot``, the picture's path or None."""
    record = section.get("layers", {"unavailable": "not recorded in this run"})
    return {**evidence.layer_rows(record), "plot": plot(record, plot_dir, name)}
