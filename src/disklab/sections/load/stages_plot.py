"""The load section's stage timelines: each method's median time to each readiness stage, cold and warm."""

from __future__ import annotations

from pathlib import Path

from disklab import plotting
from disklab.sections.load.cells import label, median, order
from disklab_host.common.stages import STAGES

PLOT_NAME = "load_stages.png"


def plot(section: dict, plot_dir: Path) -> str | None:
    """Stage timelines per method (medians), cold and warm side by side; returns the plot's path."""
    cells = sorted(section["cells"], key=order)
    labels = list(dict.fromkeys(label(c) for c in cells))  # in the cells' order, each once
    if not labels:
        return None
    # per cache state, per row that has any: (row, [(stage, median time from the load call, s)])
    rows_by_state = {}
    for state in ("cold", "warm"):
        rows_by_state[state] = []
        for y, lab in enumerate(labels):
            cell = next((c for c in cells if label(c) == lab and c["cache_state"] == state), None)
            times = [(s, median(cell, s)) for s in STAGES if median(cell, s) is not None]
            if times:
                rows_by_state[state].append((y, times))

    def draw():
        height = 0.45 * len(labels) + 1.8
        fig = plotting.figure(12, height)
        axes = fig.subplots(1, 2, sharey=True, sharex=True)
        for ax, state in zip(axes, ("cold", "warm"), strict=True):
            rows = rows_by_state[state]
            if rows:
                ax.hlines([y for y, _ in rows], 0, [times[-1][1] for _, times in rows], color="0.75")
            for stage in STAGES:
                pts = [(t, y) for y, times in rows for s, t in times if s == stage]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(
                        xs, ys, plotting.STAGE_MARKERS[stage], color=f"C{STAGES.index(stage)}", label=stage
                    )
            ax.set_title(f"{state} (median time from the load call)")
            ax.set_xlabel("time since the load call (s)")
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks(range(len(labels)), labels)
        axes[0].invert_yaxis()  # top to bottom in table order
        plotting.stage_legend(fig, axes, ncol=len(STAGES))
        left = plotting.text_width_in(fig, labels) + 0.25
        plotting.margins(fig, left=left, right=0.15, bottom=1.05, top=0.35, wspace=0.08)
        return fig

    data = {"labels": labels, "rows": rows_by_state}
    return plotting.section_plot(plot_dir, PLOT_NAME, data, draw, __file__)
