"""Report section for ``ceiling``: this host's own cold reads (one stream, and parallel direct) and warm
read, and the device facts beside them.

The two cold ceilings are what the load section's cold figures are scored against (evidence.ceiling);
the device facts come from the run's audit (evidence.device_facts).
"""

from __future__ import annotations

from pathlib import Path

from disklab import plotting
from disklab.sections import evidence, status_note
from disklab_host.common.stats import percentile

PLOT_NAME = "ceiling_runs.png"
# The run kinds in the picture, top to bottom, with their words.
KINDS = (("cold", "cold, one stream"), ("parallel", "cold, parallel"), ("warm", "warm"))


def _plot(runs: list[dict], plot_dir: Path) -> str | None:
    """Every read of the run table as a point on a log MiB/s axis, one row per kind: filled when it
    counted toward the ceiling, hollow when its proof failed; a bar at each kind's median of the counted."""
    pts = [[r["kind"], r["mib_s"], r["good"]] for r in runs if plotting.on_log_axis(r["mib_s"])]
    kinds = [(k, words) for k, words in KINDS if any(p[0] == k for p in pts)]
    if not kinds:
        return None

    def draw():
        fig = plotting.figure(7, 0.5 * len(kinds) + 1.3)
        ax = fig.subplots()
        for y, (kind, _) in enumerate(kinds):
            for counted in (True, False):
                xs = [mib for k, mib, good in pts if k == kind and good is counted]
                if xs:
                    face = f"C{y}" if counted else "none"
                    label = ("counted" if counted else "proof failed") if y == 0 else None
                    ax.plot(xs, [y] * len(xs), "o", mfc=face, mec=f"C{y}", alpha=0.8, label=label)
            good = sorted(mib for k, mib, ok in pts if k == kind and ok)
            if good:
                median = percentile(good, 50)
                ax.plot([median, median], [y - 0.3, y + 0.3], color="0.3", lw=2)
        ax.set_yticks(range(len(kinds)), [words for _, words in kinds])
        ax.set_ylim(len(kinds) - 0.5, -0.5)
        plotting.log_x(ax)
        ax.set_xlabel("read rate (MiB/s, log scale; the bar: the median of the runs counted)")
        ax.grid(axis="x", alpha=0.3)
        left = plotting.text_width_in(fig, [words for _, words in kinds]) + 0.25
        plotting.margins(fig, left=left, right=0.2, bottom=0.6, top=0.15)
        return fig

    return plotting.section_plot(plot_dir, PLOT_NAME, pts, draw, __file__)


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """``{"ok", "status_note", "cold", "warm", "cold_why", "warm_why", "ratio", "parallel", "runs",
    "device"}``; never raises. ``parallel``: ``{"status" (ok, not_run, failed; absent where unavailable),
    "ceiling", "why", "label", "settings", "streams_used", "over_single"}``; ``runs`` the parallel runs
    too (kind ``parallel``, with ``after``, the residency just after the read); ``plot`` the runs as a
    picture."""
    if section.get("status") != "ok":
        return {"ok": False, "status_note": status_note(section)}
    runs = []
    par = section["parallel"]
    for kind, key, where in (("cold", "cold_runs", section), ("parallel", "cold_runs", par),
                             ("warm", "warm_runs", section)):  # fmt: skip
        for r in where.get(key) or []:
            good = r["verified"] if kind == "warm" else r["proven"]
            why = ("" if good else "residency < 99 %") if kind == "warm" else ", ".join(r.get("failed", []))
            runs.append(
                {
                    "kind": kind,
                    "mib_s": r["mib_s"],
                    "time_s": r["time_s"],
                    "fraction": r["before"]["fraction"],
                    "method": r["before"]["method"],
                    "io": evidence.io_line(r["io"]),
                    "good": good,
                    "why": why,
                    "after": r["after"]["fraction"] if "after" in r else None,
                }
            )
    ceil = evidence.ceiling(results)
    cold, warm = section["cold_mib_s"], section["warm_mib_s"]
    return {
        "ok": True,
        "status_note": "ok",
        "cold": ceil["cold"],
        "warm": ceil["warm"],
        "cold_why": cold.get("unavailable") if isinstance(cold, dict) else None,
        "warm_why": warm.get("unavailable") if isinstance(warm, dict) else None,
        "ratio": ceil["warm"]["median"] / ceil["cold"]["median"]
        if ceil["cold"] and ceil["warm"] and ceil["cold"]["median"] > 0  # a stored 0 MiB/s has no ratio
        else None,
        "parallel": {
            "status": par.get("status", "absent"),
            "ceiling": ceil["parallel"],
            "why": ceil["parallel_why"],
            "label": ceil["parallel_label"],
            "settings": ceil["parallel_settings"],
            # fewer when the file holds fewer blocks than streams (a tiny file): the report says so
            "streams_used": min((r["streams_used"] for r in par.get("cold_runs") or []), default=None),
            "over_single": ceil["parallel"]["median"] / ceil["cold"]["median"]
            if ceil["parallel"] and ceil["cold"] and ceil["cold"]["median"] > 0
            else None,
        },
        "runs": runs,
        "plot": _plot(runs, plot_dir),
        "device": evidence.device_facts(results),
    }
