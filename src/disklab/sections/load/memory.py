"""Peak memory by load method and readiness stage: the load table's peak RSS column as a picture.

Drawn from the rows of the load section's stage table (:func:`disklab.sections.load.cells.rows`), so the
picture and the table show the same medians: one row per load, one marker per readiness stage, cold and
warm side by side, on a linear MiB axis that starts at 0 (a load's peak RSS includes the interpreter and
its imports, so the gap between methods is read against the whole).
"""

from __future__ import annotations

from pathlib import Path

from disklab import plotting
from disklab_host.common.stages import STAGES

PLOT_NAME = "load_peak_rss.png"
STATES = ("cold", "warm")


def plot(rows: list[dict], plot_dir: Path) -> str | None:
    """Peak RSS (median, MiB) per load and stage, cold and warm; the plot's path, or None without rows."""
    labels = list(dict.fromkeys(r["what"] for r in rows if r["cache_state"] in STATES))
    if not labels:
        return None
    points = {
        state: [
            [r["stage"], labels.index(r["what"]), r["peak_rss_bytes"] / (1 << 20)]
            for r in rows
            if r["cache_state"] == state and r["peak_rss_bytes"] is not None
        ]
        for state in STATES
    }

    def draw():
        fig = plotting.figure(12, 0.45 * len(labels) + 1.8)
        axes = fig.subplots(1, 2, sharey=True, sharex=True)
        for ax, state in zip(axes, STATES, strict=True):
            for stage in STAGES:
                pts = [(mib, y) for s, y, mib in points[state] if s == stage]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(
                        xs,
                        ys,
                        plotting.STAGE_MARKERS[stage],
                        color=f"C{STAGES.index(stage)}",
                        label=stage,
                        alpha=0.8,
                    )
            ax.set_title(state)
            ax.set_xlabel("median peak RSS since the process started (MiB)")
            ax.set_xlim(left=0)
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks(range(len(labels)), labels)
        axes[0].set_ylim(len(labels) - 0.5, -0.5)  # top to bottom in table order
        plotting.stage_legend(fig, axes)
        left = plotting.text_width_in(fig, labels) + 0.25
        plotting.margins(fig, left=left, right=0.15, bottom=1.05, top=0.35, wspace=0.08)
        return fig

    data = {"labels": labels, "points": points}
    return plotting.section_plot(plot_dir, PLOT_NAME, data, draw, __file__)
