"""Report section for ``big_write``: how one large save splits between write and fsync.

Explanations are computed from this host's samples. Why the split matters
(write() returns once the page cache has dirty pages; fsync waits for the
writeback still to do) comes from the lesson, "Layer 2: the page cache" and
Measure, "The big write". Which call made the durable figure follows the
section's ``durable_call`` (:func:`durable_call`): fsync on Linux; on macOS
F_FULLFSYNC, timed after a plain fsync whose figure is shown as not durable,
since plain fsync there stops at the drive's cache (Apple's fsync(2) man
page). An upgraded run that did not name its call (``durable_call_unrecorded``,
disklab.stored) timed plain fsync only: durable on Linux, not on a Mac.
"""

from __future__ import annotations

from pathlib import Path

from disklab.sections import evidence, layers, status_note
from disklab.units import ibytes, mib_s, pct, ratio, secs

MIB = 1 << 20


def _median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


FULLFSYNC = "fcntl F_FULLFSYNC"
# The report's name for each durable call a run records (disklab_host.common.durable.DURABLE_CALLS).
CALL_NAMES = {"fsync": "fsync", FULLFSYNC: "F_FULLFSYNC"}
MAC_PLAIN_FSYNC = "plain fsync on macOS stops at the drive's cache (Apple's fsync(2) man page)"


def _meaning(share: float, sync: str = "fsync") -> str:
    if share < 0.25:
        return (
            "writeback had already pushed most of it out while write() ran (or write() was held back by "
            "the dirty-page limit and did the waiting itself)"
        )
    if share > 0.5:
        return (
            f"most of it was still dirty in the page cache when write() returned, and {sync} paid for the "
            "writeback"
        )
    return f"write() and {sync} after it shared the work of getting the data to the drive"


def _fallback_line(fb: dict) -> str:
    if fb.get("kind", "refusal") == "refusal":
        how = f"was refused with {fb['errno']} after {fb['after_calls']} calls on this volume"
    else:
        how = f"failed with {fb['errno']} ({fb['error']}) after {fb['after_calls']} calls"
    return (
        f"none measured: F_FULLFSYNC {how} (warm-up included), and from then on the F_FULLFSYNC column "
        f"holds {fb['to']}'s time; {MAC_PLAIN_FSYNC}, so this report gives no durable rate"
    )


def durable_call(section: dict, results: dict) -> dict:
    """Which call made the section's durable figure, and whether that figure is durable.

    Returns ``{"system", "call" (the report's name: "fsync" | "F_FULLFSYNC"),
    "recorded" (the run named its call), "durable" (bool), "plain" (plain
    fsync's samples were kept apart), "note"}``; an upgraded run's ``durable_call_unrecorded`` is said
    beside the note. On a Mac the figure is durable only when F_FULLFSYNC ran without a fallback.
    """
    system = section.get("system")  # absent only where an upgraded run's facts could not name the OS
    recorded = section["durable_call"]
    call = CALL_NAMES.get(recorded, recorded)
    plain = "plain_fsync_samples_s" in section
    unrecorded = section.get("durable_call_unrecorded")
    before = f" ({unrecorded})" if unrecorded else ""
    durable = True
    if recorded == FULLFSYNC and section.get("fallback"):
        note, durable = _fallback_line(section["fallback"]), False
    elif recorded == FULLFSYNC:
        note = (
            "`F_FULLFSYNC` (`fcntl(fd, F_FULLFSYNC)`), run after a plain fsync: "
            f"{MAC_PLAIN_FSYNC}, so plain fsync's figure below is not durable; F_FULLFSYNC asks the "
            "drive to flush that cache, and the data is durable only once it returns"
        )
    elif system == "Darwin":
        note = (
            f"none: this run timed only plain fsync{before}; {MAC_PLAIN_FSYNC}, so no figure here is durable"
        )
        durable = False
    elif system == "Linux":
        note = (
            "`fsync`: fsync(2) writes the file's dirty pages and, on normal filesystem setups, "
            f"sends the drive a cache flush{before}"
        )
    else:
        known = f"; disklab knows no other durable call on {system}" if system else ""
        note = f"`fsync`{before}{known}"
    return {
        "system": system,
        "call": call,
        "recorded": not unrecorded,
        "durable": durable,
        "plain": plain,
        "note": note,
    }


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Per-repeat totals and sync shares, the durable call, and explanations; never raises on failed/not_run.

    Returns ``{"ok", "status_note", "repeats": [{"write_s", "plain_fsync_s" (None off macOS),
    "fsync_s" (the durable call's), "sync_s", "total_s", "fsync_share", "durable_mib_s" (None when
    no figure is durable)}], "fsync_share" (median fraction of total spent syncing), "durable":
    durable_call(), "validation" (str or None), "explanations": [str], "layers", "io"}``. Writes no
    plot.
    """
    if section.get("status") != "ok":
        return {
            "ok": False,
            "status_note": status_note(section),
            "repeats": [],
            "fsync_share": None,
            "durable": None,
            "validation": None,
            "explanations": [],
            "layers": None,
            "io": [],
        }
    mib = section["size_bytes"] / MIB
    dur = durable_call(section, results)
    plains = section.get("plain_fsync_samples_s") or [None] * len(section["fsync_samples_s"])
    reps = []
    for w, p, f in zip(section["write_samples_s"], plains, section["fsync_samples_s"], strict=True):
        sync = f + (p or 0.0)
        total = w + sync
        reps.append(
            {
                "write_s": w,
                "plain_fsync_s": p,
                "fsync_s": f,
                "sync_s": sync,
                "total_s": total,
                "fsync_share": sync / total if total > 0 else None,
                "durable_mib_s": mib / total if total > 0 and dur["durable"] else None,
            }
        )
    shares = [r["fsync_share"] for r in reps if r["fsync_share"] is not None]
    share = _median(shares) if shares else None
    w_med, f_med = section["write_s"]["median"], section["fsync_s"]["median"]
    totals = [r["total_s"] for r in reps if r["total_s"] > 0]
    rate = mib / _median(totals) if totals else None
    durable = _median([r["durable_mib_s"] for r in reps if r["durable_mib_s"] is not None] or [0.0])
    size = ibytes(section["size_bytes"])
    lines = []
    if dur["plain"]:
        p_med = section["plain_fsync_s"]["median"]
        sync_med = _median([r["sync_s"] for r in reps])
        if share is not None:
            lines.append(
                f"Plain fsync after the {size} write took {secs(p_med)}, and F_FULLFSYNC after it "
                f"{secs(f_med)}, of {secs(w_med + p_med + f_med)} in total (medians; the syncs' share "
                f"{pct(share)}): {_meaning(share, 'the syncs')}."
            )
        if dur["durable"] and p_med > 0:
            lines.append(
                f"F_FULLFSYNC, after plain fsync, took {ratio(f_med / p_med)} plain fsync's time here: "
                f"plain fsync's {secs(p_med)} is not a durable figure, because {MAC_PLAIN_FSYNC}; a save "
                "needs F_FULLFSYNC to survive a power cut."
            )
    else:
        sync_med = f_med
        if share is not None:
            lines.append(
                f"The fsync after the {size} write took {secs(f_med)} of {secs(w_med + f_med)} in total "
                f"(medians; fsync's share {pct(share)}): {_meaning(share)}."
            )
    head = (
        f"write() ran at {mib_s(section['write_rate_mib_s']['median'])} (median): the speed of copying into "
        "the page cache, not of the drive."
    )
    counting = "Counting both syncs" if dur["plain"] else "Counting the fsync"
    if dur["durable"]:
        lines.append(f"{head} {counting}, the data became durable at {mib_s(durable)}.")
    else:
        lines.append(
            f"{head} {counting}, it reached the drive at {mib_s(rate)}, but that is no durable rate: "
            f"{MAC_PLAIN_FSYNC}."
        )
    safety = (
        f"For checkpoint safety: when write() returned, up to {secs(sync_med)} of writeback was still to "
        "come; a save that skips fsync can lose that part to a power cut even though every write() succeeded"
    )
    if dur["system"] == "Darwin":
        safety += (
            ", and on macOS a save that calls fsync but not F_FULLFSYNC can lose what the drive's cache holds"
        )
    lines.append(safety + ".")
    layer_block = layers.block(section, plot_dir, "big_write_layers.png")
    plain_io = section.get("plain_fsync_io_records") or [None] * len(section.get("fsync_io_records", []))
    io = [
        {
            "write": evidence.io_line(w),
            "plain": evidence.io_line(p) if p is not None else None,
            "fsync": evidence.io_line(f),
        }
        for w, p, f in zip(
            section.get("write_io_records", []), plain_io, section.get("fsync_io_records", []), strict=False
        )
    ]
    return {
        "ok": True,
        "status_note": "ok",
        "repeats": reps,
        "fsync_share": share,
        "durable": dur,
        "validation": section.get("validation"),
        "explanations": lines,
        "layers": layer_block,
        "io": io,
    }
