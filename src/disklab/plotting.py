"""Drawing the reports' plots: cheap figures, drawn only when what they show has changed.

A report's plots are most of the cost of rendering it, so:

* :func:`figure` makes a matplotlib ``Figure`` on the Agg canvas without pyplot
  (no figure manager, no pyplot import, nothing to close), and hands the same one back, cleared, for the
  next figure of that size in this process: its canvas keeps its renderer, so matplotlib's cache of text
  layouts (tick labels, axis labels: the same strings host after host) is not thrown away each time;
  the canvas draws text from remembered glyphs (:mod:`disklab.glyphcache`), the same pixels;
* :func:`save` encodes the PNG at zlib level :data:`PNG_COMPRESS_LEVEL`: the same pixels as the default
  level 6 in about half the encoding time, for files about a tenth larger;
* :func:`save` writes one PNG at :data:`DPI` through the atomic write, in one
  draw: the margins are set in inches by the caller (:func:`margins`, with
  :func:`text_width_in` for labels whose length varies) instead of
  ``bbox_inches="tight"``, which lays the whole figure out twice;
* :func:`on_log_axis` keeps only the values a log axis can show (finite and above 0) and
  :func:`left_out` says how many it dropped, so a stored zero never raises from matplotlib's log
  locator and never vanishes unsaid;
* :func:`draw_once` skips the drawing when the PNG exists and its
  ``.NAME.sha256`` beside it holds the digest of the same plotted data and the
  same drawing code: ``disklab report --force`` after a template change, or a
  host whose run did not change, costs no matplotlib time.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Callable
from pathlib import Path

from disklab.fsio import atomic_write_bytes, atomic_write_text
from disklab_host.common.stages import STAGES

DPI = 110
# zlib level of the PNGs: 1 encodes a report's plot in about half the time of Pillow's default 6 (about
# 12 ms against 22 ms for the fsync plot), the file about 10 % larger; the decoded pixels are the same.
PNG_COMPRESS_LEVEL = 1
# Figures kept for reuse, one per size (in inches), at most this many per process.
REUSE_MAX = 8
# False: a new Figure every time (the reuse's tests compare both ways).
REUSE = True
_figures: dict[tuple[float, float], object] = {}


def figure(width_in: float, height_in: float, *, shared: bool = True):
    """A ``matplotlib.figure.Figure`` of that size on an Agg canvas, at :data:`DPI`, with nothing on it.

    The figure of a size is made once per process and cleared (axes, legends, texts, and the subplot
    parameters back to the defaults) for the next caller who asks for that size: a figure is the
    caller's only until the next ``figure()`` of the same size, so draw and :func:`save` it first.
    ``shared=False``: a new figure, never handed out again (for a caller that keeps its own).
    """
    from matplotlib.figure import Figure, SubplotParams

    from disklab.glyphcache import Canvas

    key = (float(width_in), float(height_in))
    fig = _figures.get(key) if REUSE and shared else None
    if fig is not None:
        fig.clear()
        fig.subplotpars = SubplotParams()  # clear() keeps them: margins() of the last plot
        return fig
    fig = Figure(figsize=key, dpi=DPI)
    Canvas(fig)
    if REUSE and shared:
        if len(_figures) >= REUSE_MAX:
            _figures.clear()
        _figures[key] = fig
    return fig


def warm_up() -> None:
    """Import the Agg canvas and draw one small figure with text, so the font is loaded and the next
    figure draws at once (:func:`disklab.report.warm_up`)."""
    fig = figure(1, 1)
    fig.subplots().set_title("0")
    fig.canvas.draw()


def margins(fig, *, left: float, right: float, bottom: float, top: float, wspace: float | None = None):
    """Place the axes with margins given in inches (the space tick labels, axis labels and titles take)."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h, wspace=wspace)


def text_width_in(fig, texts: list[str], fontsize: float | str | None = None) -> float:
    """The width in inches of the widest of ``texts`` in the default font at ``fontsize`` (tick labels')."""
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()
    prop = FontProperties(size=fontsize or rcParams["ytick.labelsize"])
    widths = [renderer.get_text_width_height_descent(t, prop, ismath=False)[0] for t in texts]
    return max(widths, default=0.0) / fig.dpi


def on_log_axis(value: object) -> bool:
    """True for a number a log axis can place: finite and above 0 (a zero time from a coarse clock is not)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def left_out(dropped: int, total: int, what: str) -> str | None:
    """One clause for the values :func:`on_log_axis` dropped, e.g. ``3 of 50 fsync samples are 0 or not
    finite and are not shown``; None when none were."""
    if not dropped:
        return None
    verb = "is" if dropped == 1 else "are"
    return f"{dropped:,} of {total:,} {what} {verb} 0 or less, or not finite, and not shown"


def plain_number(value: float, _pos: object = None) -> str:
    """A log axis' tick label as a plain number (``0.1``, ``10``, ``1,000``), not mathtext's 10^n."""
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


# Each readiness stage's marker, wherever a plot draws stages.
STAGE_MARKERS = {"loader_return": "o", "module_populated": "s", "device_placed": "^", "first_response": "*",
                 "all_touched": "D"}  # fmt: skip
# A power-cut verdict's colour in the verdict grids; anything else (not measured, a reason) is grey.
VERDICT_COLORS = {"safe": "#4daf4a", "rolled_back": "#fdb863", "unsafe": "#d7301f"}
NO_VERDICT_COLOR = "#e0e0e0"


def verdict_grid(rows: list[str], columns: list[str], cells: list[list[tuple[str, str]]], title: str):
    """A grid of verdicts, one coloured cell per (row, column) with its words in it: ``cells[i][j]`` is
    ``(verdict, text)`` for row i and column j, the colour from :data:`VERDICT_COLORS`. Drawn from the
    same numbers as the table beside it; the words say what the colour says, for a reader who cannot
    tell the colours apart."""
    from matplotlib.colors import to_rgb

    probe = figure(1, 1, shared=False)
    left = text_width_in(probe, rows) + 0.3
    head = text_width_in(probe, columns)
    col_w = max(1.6, min(head + 0.3, 3.0))
    fig = figure(left + col_w * len(columns) + 0.2, 0.42 * len(rows) + 1.0)
    ax = fig.subplots()
    image = [[to_rgb(VERDICT_COLORS.get(v, NO_VERDICT_COLOR)) for v, _ in row] for row in cells]
    ax.imshow(image, aspect="auto", interpolation="nearest")
    for i, row in enumerate(cells):
        for j, (_, text) in enumerate(row):
            ax.text(j, i, text, ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(columns)), columns)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xticks([x - 0.5 for x in range(1, len(columns))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(rows))], minor=True)
    ax.grid(which="minor", color="white", lw=2)
    ax.tick_params(which="minor", length=0)
    fig.suptitle(title, x=0.02, y=0.99, ha="left", va="top", fontsize=10)
    margins(fig, left=left, right=0.2, bottom=0.15, top=0.8)
    return fig


def log_x(ax) -> None:
    """A log x axis labelled in plain numbers at 1, 2 and 5 of each decade (0.1, 0.2, 0.5, 1), not 10^n."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log")
    ax.xaxis.set_minor_locator(LogLocator(subs=(2, 5)))
    ax.xaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.xaxis.set_minor_formatter(FuncFormatter(plain_number))


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` as PNG at :data:`DPI` through :func:`disklab.fsio.atomic_write_bytes` (one draw), at
    zlib level :data:`PNG_COMPRESS_LEVEL`."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})
    return atomic_write_bytes(path, buf.getvalue())


def digest(data: object, *code: str | Path) -> str:
    """What a plot shows and the code drawing it (this module and ``code``): equal digests, same picture."""
    h = hashlib.sha256()
    for path in (Path(__file__), *map(Path, code)):
        h.update(path.read_bytes() + b"\0")
    h.update(json.dumps(data, sort_keys=True, default=str).encode())
    return h.hexdigest()


def _mark(path: Path) -> Path:
    return path.with_name(f".{path.name}.sha256")


def is_current(path: str | Path, data: object, *code: str | Path) -> bool:
    """True when ``path`` exists and was drawn from ``data`` by the same code (its digest beside it)."""
    path = Path(path)
    try:
        return path.is_file() and _mark(path).read_text().strip() == digest(data, *code)
    except OSError:
        return False


def remember(path: str | Path, data: object, *code: str | Path) -> None:
    """Write the digest of ``data`` and the code beside ``path`` (after the PNG itself is written and made
    durable: the digest is a cache, written without fsync)."""
    atomic_write_text(_mark(Path(path)), digest(data, *code) + "\n", durable=False)


def draw_once(path: str | Path, data: object, draw: Callable[[], object], *code: str | Path) -> Path:
    """Save ``draw()``'s figure at ``path`` unless it is current for ``data`` and ``code``; returns ``path``.

    ``data`` must hold everything the figure shows (JSON-able), ``code`` the files of the drawing code.
    """
    path = Path(path)
    if not is_current(path, data, *code):
        save(draw(), path)
        remember(path, data, *code)
    return path


def section_plot(
    plot_dir: str | Path, name: str, data: object, draw: Callable[[], object], *code: str | Path
) -> str:
    """:func:`draw_once` at ``plot_dir/name``; the path a report links it by, ``<plot_dir's name>/<name>``
    (relative to the host's report directory)."""
    draw_once(Path(plot_dir) / name, data, draw, *code)
    return f"{Path(plot_dir).name}/{name}"


def stage_legend(fig, axes, ncol: int | None = None) -> None:
    """One legend below ``axes`` of the readiness stages their lines are labelled with, in stage order
    (disklab_host.common.stages), ``ncol`` columns (default: one per stage shown)."""
    handles = {h.get_label(): h for ax in axes for h in ax.get_lines()}
    shown = [s for s in STAGES if s in handles]
    fig.legend([handles[s] for s in shown], shown, loc="lower center", ncol=ncol or len(shown))
