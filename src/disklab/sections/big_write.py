"""Report section for ``big_write``: how one large save splits between write and fsync.

Explanations are computed from this host's samples. Why the split matters
(write() returns once the page cache has dirty pages; fsync waits for the
writeback still to do) comes from the lesson, "Layer 2: the page cache" and
Measure, "The big write".
"""

from __future__ import annotations

from pathlib import Path

from disklab.sections import evidence, status_note
from disklab.units import ibytes, mib_s, pct, secs

MIB = 1 << 20


def _median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _meaning(share: float) -> str:
    if share < 0.25:
        return (
            "writeback had already pushed most of it out while write() ran (or write() was held back by "
            "the dirty-page limit and did the waiting itself)"
        )
    if share > 0.5:
        return (
            "most of it was still dirty in the page cache when write() returned, and fsync paid for the "
            "writeback"
        )
    return "write() and the fsync after it shared the work of getting the data to the drive"


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Per-repeat totals and fsync shares, and explanations; never raises on failed/not_run.

    Returns ``{"ok", "status_note", "repeats": [{"write_s", "fsync_s", "total_s",
    "fsync_share", "durable_mib_s"}], "fsync_share" (median fraction of total),
    "explanations": [str]}``. Writes no plot.
    """
    if section.get("status") != "ok":
        return {
            "ok": False,
            "status_note": status_note(section),
            "repeats": [],
            "fsync_share": None,
            "explanations": [],
            "layers": None,
            "io": [],
        }
    mib = section["size_bytes"] / MIB
    reps = []
    for w, f in zip(section["write_samples_s"], section["fsync_samples_s"], strict=True):
        total = w + f
        reps.append(
            {
                "write_s": w,
                "fsync_s": f,
                "total_s": total,
                "fsync_share": f / total if total > 0 else None,
                "durable_mib_s": mib / total if total > 0 else None,
            }
        )
    shares = [r["fsync_share"] for r in reps if r["fsync_share"] is not None]
    share = _median(shares) if shares else None
    w_med, f_med = section["write_s"]["median"], section["fsync_s"]["median"]
    durable = _median([r["durable_mib_s"] for r in reps if r["durable_mib_s"] is not None] or [0.0])
    size = ibytes(section["size_bytes"])
    lines = []
    if share is not None:
        lines.append(
            f"The fsync after the {size} write took {secs(f_med)} of {secs(w_med + f_med)} in total "
            f"(medians; fsync's share {pct(share)}): {_meaning(share)}."
        )
    lines.append(
        f"write() ran at {mib_s(section['write_rate_mib_s']['median'])} (median): the speed of copying into "
        f"the page cache, not of the drive. Counting the fsync, the data became durable at {mib_s(durable)}."
    )
    lines.append(
        f"For checkpoint safety: when write() returned, up to {secs(f_med)} of writeback was still to come; "
        "a save that skips fsync can lose that part to a power cut even though every write() succeeded."
    )
    layers = evidence.layer_rows(section.get("layers", {"unavailable": "not recorded in this run"}))
    io = [
        {"write": evidence.io_line(w), "fsync": evidence.io_line(f)}
        for w, f in zip(
            section.get("write_io_records", []), section.get("fsync_io_records", []), strict=False
        )
    ]
    return {
        "ok": True,
        "status_note": "ok",
        "repeats": reps,
        "fsync_share": share,
        "explanations": lines,
        "layers": layers,
        "io": io,
    }
