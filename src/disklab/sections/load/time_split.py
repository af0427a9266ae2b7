"""Where each load's time went, and which samples ran on a busy host: the load section's time split.

For each cell of the big file (method, cache state) and each readiness stage, the split of the
*median sample* (the sample whose stage time is the median, so its parts add up to a real sample's
wall time): user and system CPU time of its threads, time blocked on block I/O (delay accounting),
time waiting to run, and the rest, with the major faults its I/O record counted (common/timesplit.py,
common/iorecord.py on the host). The picture is one stacked bar per method and stage, cold and warm
side by side, on a linear axis. Every cell's samples are also read against the noise bounds
(:mod:`disklab.noise`): a row says when some of them ran while the host was busy.
"""

from __future__ import annotations

from pathlib import Path

from disklab import noise, plotting, stored
from disklab_host.common.facts import is_unavailable

PLOT_NAME = "load_time_split.png"
# The parts of a split, in the bar's order, with their words.
PARTS = (
    ("user_s", "user CPU"),
    ("system_s", "system CPU"),
    ("blocked_io_s", "blocked on I/O"),
    ("waiting_s", "waiting for a CPU"),
    ("rest_s", "the rest"),
)
# The stages drawn (the first and the last a load reaches; first_response between them when it ran).
DRAWN_STAGES = ("loader_return", "first_response", "all_touched")


def cell_samples(section: dict, cell: dict) -> list[dict]:
    """The samples of one cell (file, method, populate mode, cache state), in the order they ran."""
    return [
        s
        for s in section.get("samples") or []
        if (s["file"], s["method"], s.get("populate"), s["cache_state"])
        == (cell["file"], cell["method"], cell.get("populate"), cell["cache_state"])
    ]


def _ok_stage(sample: dict, stage: str) -> dict | None:
    st = (sample.get("stages") or {}).get(stage)
    return st if isinstance(st, dict) and st.get("status") == "ok" else None


def median_sample(samples: list[dict], stage: str) -> dict | None:
    """The sample whose time at ``stage`` is the median (the lower middle of an even count), or None."""
    ran = sorted((s for s in samples if _ok_stage(s, stage)), key=lambda s: s["stages"][stage]["time_s"])
    return ran[(len(ran) - 1) // 2] if ran else None


def split_of(stage_rec: dict) -> dict | None:
    """One stage record's split as shown: ``{"wall_s", part: s | None, "major_faults", "minor_faults",
    "not_recorded": {part: why}}``, or None when the sample's split is unavailable."""
    ts = stage_rec.get("time_split")
    if not isinstance(ts, dict) or is_unavailable(ts):
        return None
    out: dict = {"wall_s": stage_rec["time_s"], "not_recorded": {}}
    for key, _ in PARTS:
        v = ts.get(key)
        if is_unavailable(v) or v is None:
            out[key] = None
            out["not_recorded"][key] = v["unavailable"] if is_unavailable(v) else "not recorded"
        else:
            out[key] = v
    out["overlap_s"] = ts.get("overlap_s", 0.0)
    faults = (stage_rec.get("io") or {}).get("faults") if isinstance(stage_rec.get("io"), dict) else None
    out["major_faults"] = faults.get("major") if isinstance(faults, dict) else None
    out["minor_faults"] = faults.get("minor") if isinstance(faults, dict) else None
    return out


def busy_words(samples: list[dict], stage: str) -> str | None:
    """``2 of 3 samples ran while the host was busy (...)``, for the samples that reached ``stage``; None
    when all were quiet or none recorded its noise (:func:`noise_missing` says which)."""
    ran = [st for s in samples if (st := _ok_stage(s, stage))]
    found = [noise.disturbances(st.get("io"), st.get("noise"), st.get("time_split")) for st in ran]
    if not found or all(f is None for f in found):
        return None
    return noise.summary(found, "samples")


def noise_missing(section: dict) -> str | None:
    """Why no load sample of the section recorded its noise (:data:`disklab.stored.NOISE_NOT_RECORDED_RUN`:
    only a run upgraded from before noise records has none), or None when one did."""
    recorded = any(
        isinstance(st, dict) and isinstance(st.get("noise"), dict) and not is_unavailable(st["noise"])
        for s in section.get("samples") or []
        for st in (s.get("stages") or {}).values()
    )
    return None if recorded else stored.NOISE_NOT_RECORDED_RUN


def rows(section: dict, cells: list[dict], label) -> list[dict]:
    """One row per big-file cell and drawn stage that has a split: ``{"what", "cache_state", "stage",
    "split", "n", "busy"}`` (``split``: :func:`split_of` of the median sample)."""
    out = []
    for cell in cells:
        if not cell["file"].startswith("big") or cell["cache_state"] not in ("cold", "warm"):
            continue
        samples = cell_samples(section, cell)
        for stage in DRAWN_STAGES:
            med = median_sample(samples, stage)
            split = split_of(med["stages"][stage]) if med else None
            if split is None:
                continue
            out.append(
                {
                    "what": label(cell),
                    "cache_state": cell["cache_state"],
                    "stage": stage,
                    "split": split,
                    "n": sum(1 for s in samples if _ok_stage(s, stage)),
                    "busy": busy_words(samples, stage),
                }
            )
    return out


def not_recorded(split_rows: list[dict]) -> dict[str, str]:
    """The parts no row recorded, with the first reason given (delay accounting off, macOS, ...)."""
    out: dict[str, str] = {}
    for r in split_rows:
        for key, why in r["split"]["not_recorded"].items():
            out.setdefault(key, why)
    return {k: v for k, v in out.items() if all(r["split"][k] is None for r in split_rows)}


def quote(split_rows: list[dict], what: str, cache: str, stage: str = "all_touched") -> str | None:
    """``cold torch.load-mmap spent 0.61 s of 0.98 s blocked on I/O, in 64,000 major faults`` from the
    row of ``what`` at ``cache`` and ``stage``; the largest part named when blocked I/O is not recorded."""
    row = next(
        (r for r in split_rows if (r["what"], r["cache_state"], r["stage"]) == (what, cache, stage)), None
    )
    if row is None:
        return None
    sp = row["split"]
    faults = f", in {sp['major_faults']:,} major faults" if sp.get("major_faults") is not None else ""
    wall = f"{sp['wall_s']:.3f} s"
    if sp["blocked_io_s"] is not None:
        return f"{cache} {what} spent {sp['blocked_io_s']:.3f} s of {wall} blocked on I/O{faults}"
    parts = [(sp[k], words) for k, words in PARTS if sp[k] is not None and k != "rest_s"]
    big, words = max(parts) if parts else (sp["rest_s"], "the rest")
    return (
        f"{cache} {what} spent {big:.3f} s of {wall} in {words}{faults} (time blocked on I/O was not "
        "recorded on this host)"
    )


def plot(split_rows: list[dict], plot_dir: Path) -> str | None:
    """Stacked bars of the median sample's split per method and stage, cold and warm side by side (linear
    axis, seconds); returns the plot's path relative to the report, or None without rows."""
    if not split_rows:
        return None
    labels = list(dict.fromkeys(f"{r['what']} · {r['stage']}" for r in split_rows))
    by_state = {
        state: {f"{r['what']} · {r['stage']}": r["split"] for r in split_rows if r["cache_state"] == state}
        for state in ("cold", "warm")
    }

    def draw():
        fig = plotting.figure(12, 0.32 * len(labels) + 2.0)
        axes = fig.subplots(1, 2, sharey=True)
        for ax, state in zip(axes, ("cold", "warm"), strict=True):
            left = [0.0] * len(labels)
            for i, (key, words) in enumerate(PARTS):
                widths = [(by_state[state].get(lab) or {}).get(key) or 0.0 for lab in labels]
                ax.barh(range(len(labels)), widths, left=left, color=f"C{i}", label=words)
                left = [a + b for a, b in zip(left, widths, strict=True)]
            walls = [(by_state[state].get(lab) or {}).get("wall_s") for lab in labels]
            ys = [y for y, w in enumerate(walls) if w is not None]
            ax.plot([walls[y] for y in ys], ys, "|", color="black", markersize=12, label="wall time")
            ax.set_xlim(0, max([*left, *(w for w in walls if w is not None), 1e-3]) * 1.05)
            ax.set_title(state)
            ax.set_xlabel("thread-seconds since the load call (linear)")
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks(range(len(labels)), labels)
        axes[0].invert_yaxis()
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="lower center", ncol=len(names))
        fig.suptitle("Where the median sample's time went", fontsize=11)
        left = plotting.text_width_in(fig, labels) + 0.25
        plotting.margins(fig, left=left, right=0.15, bottom=0.95, top=0.6, wspace=0.08)
        return fig

    data = {"labels": labels, "by_state": by_state}
    return plotting.section_plot(plot_dir, PLOT_NAME, data, draw, __file__)


def quotes(split: list[dict]) -> list[str]:
    """Cold against warm, in where the time went: the mapped loads' and torch.load's split at all_touched
    (:func:`quote`), for each method of the big file that has both."""
    out = []
    for what in dict.fromkeys(r["what"] for r in split):
        cold, warm = (quote(split, what, c) for c in ("cold", "warm"))
        if cold and warm:
            out.append(f"{cold}; {warm}.")
    return out
