"""Report section for ``fsync_bench``: what each kind of sync costs on this host.

Explanations are computed from this host's percentiles. What plain fsync means
and which call is the durable one follow the section's own ``system`` field
(:data:`OS_MEANING`). How to read a fsync
latency (tens of µs: a fast drive or a cache with power-loss protection;
milliseconds: the drive writes to flash on each flush; macOS fsync stopping at
the drive's cache) comes from the lesson, "fsync: the only promise you get" and
Measure. Writes one plot: the latency distribution per mode.
"""

from __future__ import annotations

from pathlib import Path

from disklab import plotting
from disklab.markup import md
from disklab.sections import evidence, status_note
from disklab.units import ibytes, ratio, secs, us

GIB = 1 << 30
PLOT_NAME = "fsync_bench_latency.png"


def _rows(section: dict) -> list[dict]:
    """One row per mode in run order, with its p50 as a multiple of the plain write's."""
    modes = section["modes"]
    none = modes.get("none", {})
    base = none["latency"]["p50_us"] if none.get("status") == "ok" else None
    rows = []
    for name in section["mode_order"]:
        m = modes[name]
        ok = m["status"] == "ok"
        p50 = m["latency"]["p50_us"] if ok else None
        rows.append(
            {
                "mode": name,
                "ok": ok,
                "reason": None if ok else m["reason"],
                "call": m.get("call", ""),
                "latency": m.get("latency"),
                "write_p50_us": m["write_latency"]["p50_us"] if ok and "write_latency" in m else None,
                "vs_none": p50 / base if ok and base else None,
                "fallback": m.get("fallback"),
                "validation": m.get("validation"),
            }
        )
    return rows


# p99 at or above this multiple of p50 is called a tail worth planning for.
TAIL_RATIO = 3.0


def _flush_class(mode: str, p50_us: float, vs_none: float | None, fstype: object = None) -> str:
    if p50_us <= 0:
        return "below what the clock resolved: this figure says nothing about the drive"
    if vs_none is not None and vs_none < 2 and fstype == "tmpfs":
        return (
            f"{mode} barely costs more than the write itself, because the workbench is tmpfs: the data "
            "lives only in RAM and no sync can make it survive a power cut"
        )
    if vs_none is not None and vs_none < 2:
        return (
            f"{mode} barely costs more than the write itself: the data may never reach stable storage "
            "(tmpfs, or a drive or VM that ignores cache flushes); check the workbench filesystem in the "
            "host facts"
        )
    if p50_us < 100:
        return (
            "under 100 µs: consistent with a very fast drive, or one that acknowledges from a cache with "
            "power-loss protection"
        )
    if p50_us < 1000:
        return "between 100 µs and 1 ms: consistent with a drive that does real work on every flush"
    return (
        "a millisecond or more: consistent with a drive that writes to flash on every flush, as F_FULLFSYNC "
        "does on a Mac"
    )


# What plain fsync promises on each OS, and which call is the durable one (the lesson, "fsync: the only
# promise you get"; Apple's fsync(2) and fcntl(2) man pages for F_FULLFSYNC and F_BARRIERFSYNC).
OS_MEANING = {
    "Linux": {
        "plain_fsync": (
            "fsync writes the file's dirty pages to the drive and, on normal filesystem setups, sends the "
            "drive a cache flush, so it returns only once the data is on stable storage"
        ),
        "durable_mode": "fsync",
        "ordering": None,
    },
    "Darwin": {
        "plain_fsync": (
            "fsync sends the data to the drive but stops at the drive's cache (Apple's fsync(2) man page); "
            "only F_FULLFSYNC asks the drive to flush it to flash, and F_BARRIERFSYNC orders the writes "
            "before it ahead of the writes after it without a full flush"
        ),
        "durable_mode": "f_fullfsync",
        "ordering": "f_barrierfsync",
    },
}
# The errnos with which an fcntl sync says "this volume cannot do it" (common.durable.REFUSAL_ERRNOS).
REFUSALS = ("ENOTTY", "ENOTSUP", "EOPNOTSUPP")
# The sync call each mode stands for, as the report names it.
CALL_NAMES = {
    "fsync": "fsync",
    "fdatasync": "fdatasync",
    "f_fullfsync": "F_FULLFSYNC",
    "f_barrierfsync": "F_BARRIERFSYNC",
    "o_dsync": "O_DSYNC",
}


def os_meaning(section: dict, rows: list[dict]) -> dict:
    """What plain fsync means on the section's ``system`` and which measured mode is the durable one.

    Returns ``{"system", "known", "plain_fsync", "durable_mode", "durable_call", "durable_measured",
    "figures_mode", "ordering_mode", "ordering_call", "ordering_measured"}``: ``durable_measured``
    is False when the durable call was unsupported or fell back; ``figures_mode`` is the mode whose
    numbers stand for a durable save here (the durable mode, or fsync when it could not be measured).
    """
    system = section["system"]
    meaning = OS_MEANING.get(system)
    by = {r["mode"]: r for r in rows}
    if meaning is None:
        return {
            "system": system,
            "known": False,
            "plain_fsync": f"disklab does not know what fsync promises on {system}",
            "durable_mode": "fsync",
            "durable_call": "fsync",
            "durable_measured": bool(by.get("fsync", {}).get("ok")),
            "figures_mode": "fsync",
            "ordering_mode": None,
            "ordering_call": None,
            "ordering_measured": False,
        }
    durable = meaning["durable_mode"]
    row = by.get(durable, {})
    measured = bool(row.get("ok")) and not row.get("fallback")
    return {
        "system": system,
        "known": True,
        "plain_fsync": meaning["plain_fsync"],
        "durable_mode": durable,
        "durable_call": CALL_NAMES[durable],
        "durable_measured": measured,
        "figures_mode": durable if measured else "fsync",
        "ordering_mode": meaning["ordering"],
        "ordering_call": CALL_NAMES.get(meaning["ordering"]),
        "ordering_measured": bool(by.get(meaning["ordering"], {}).get("ok")),
    }


def _fallback_line(mode: str, fb: dict) -> str:
    name = CALL_NAMES.get(mode, mode)
    if fb.get("kind", "refusal") == "refusal":
        return (
            f"{name} was refused with {md(fb['errno'])} after {fb['after_calls']} calls on this volume; "
            f"the {mode} figures are {fb['to']}'s."
        )
    line = (
        f"{name} failed with {md(fb['errno'])} ({md(fb['error'])}) after {fb['after_calls']} calls, "
        f"not one of the errnos that say the volume cannot do it ({', '.join(REFUSALS)}); "
        f"the {mode} figures are {fb['to']}'s"
    )
    if fb["errno"] == "EIO":
        line += (
            ". EIO is an I/O error: the workbench's device may be failing, and data written after a failed "
            "sync cannot be trusted (the lesson, Break It 3)"
        )
    return line + "."


def _p50(by: dict, mode: str) -> float | None:
    r = by.get(mode)
    if not r or not r["ok"] or r["fallback"]:
        return None
    return r["latency"]["p50_us"]


def _explanations(section: dict, rows: list[dict], meaning: dict, fstype: object = None) -> list[str]:
    by = {r["mode"]: r for r in rows}
    none = by.get("none")
    lines = []
    for r in rows:
        if r["mode"] != "none" and r["ok"] and r["vs_none"] is not None:
            lines.append(
                f"{r['mode']} p50 is {ratio(r['vs_none'])} a plain write here "
                f"({us(r['latency']['p50_us'])} against {us(none['latency']['p50_us'])})."
            )
        if r["fallback"]:
            lines.append(_fallback_line(r["mode"], r["fallback"]))
    if meaning["known"] and not meaning["durable_measured"] and meaning["durable_mode"] != "fsync":
        lines.append(
            f"{meaning['durable_call']} could not be measured on this volume, so the figures below are plain "
            f"fsync's, which on {meaning['system']} do not reach flash: no sync measured here is durable."
        )
    key = meaning["figures_mode"]
    sync = by.get(key)
    if sync and sync["ok"]:
        lat = sync["latency"]
        lines.append(
            f"{key} p50 is {us(lat['p50_us'])}, {_flush_class(key, lat['p50_us'], sync['vs_none'], fstype)}."
        )
        tail = lat["p99_us"] / lat["p50_us"] if lat["p50_us"] > 0 else None
        if tail is not None and tail >= TAIL_RATIO:
            lines.append(
                f"{key} p99 is {ratio(tail)} its p50 ({us(lat['p99_us'])}): "
                "a single save's sync can land in that tail."
            )
        elif tail is not None:
            lines.append(
                f"{key} p99 is only {ratio(tail)} its p50 ({us(lat['p99_us'])}): "
                "the sync latency here is steady."
            )
        per_gib = GIB / section["block_bytes"] * lat["p50_us"] / 1e6
        lines.append(
            f"For checkpoint safety: a sync after every {ibytes(section['block_bytes'])} block would make a "
            f"1 GiB checkpoint take about {secs(per_gib)} here at {key}'s p50; the atomic save pays one "
            "fsync for the whole file and one for its directory."
        )
    plain, full, barrier = _p50(by, "fsync"), _p50(by, "f_fullfsync"), _p50(by, "f_barrierfsync")
    if meaning["system"] == "Darwin" and full is not None and plain:
        lines.append(
            f"F_FULLFSYNC p50 is {ratio(full / plain)} fsync's here: plain fsync on macOS stops at the "
            "drive's cache (Apple's fsync(2) man page), so a save needs F_FULLFSYNC to survive a power cut."
        )
    if meaning["system"] == "Darwin" and barrier is not None and plain:
        line = f"F_BARRIERFSYNC p50 is {ratio(barrier / plain)} fsync's here"
        if full is not None and barrier > 0:
            line += f", and F_FULLFSYNC's is {ratio(full / barrier)} F_BARRIERFSYNC's"
        lines.append(
            line + ": a barrier keeps the writes before it ahead of the writes after it (what a "
            "write-then-rename save needs between the data and the rename) without waiting for flash, "
            "so it orders a save but does not make it durable."
        )
    if meaning["system"] == "Linux" and _p50(by, "fdatasync") is not None and plain:
        lines.append(
            f"fdatasync p50 is {ratio(_p50(by, 'fdatasync') / plain)} fsync's here: it skips metadata "
            "not needed to read the data back."
        )
    return lines


# This process's figure of the plot (see _axes), made on first use.
_FIGURE: list = []


def _axes():
    """The plot's figure and axes with its fixed parts (log x axis, its ticks, the axis labels, the
    margins) and nothing plotted: made once per process and emptied (lines, legend, the colour cycle)
    for each host, so the axes and their tick artists are not built again every time. The picture is
    the same, byte for byte, as a new figure's (tests/test_report.py compares them, with
    :data:`disklab.plotting.REUSE` off)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    if _FIGURE and plotting.REUSE:
        fig, ax = _FIGURE
        for line in list(ax.lines):
            line.remove()
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        ax.set_prop_cycle(None)  # the next lines take the first colours again
        return fig, ax
    fig = plotting.figure(6, 3.5, shared=False)
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.xaxis.set_minor_locator(LogLocator(subs=(2, 5)))  # minor ticks at 2 and 5 of each decade
    ax.xaxis.set_major_formatter(FuncFormatter(plotting.plain_number))  # 10, 100, 1,000 µs
    ax.set_xlabel("write + sync latency (µs, log scale)")
    ax.set_ylabel("fraction of calls")
    plotting.margins(fig, left=0.75, right=0.15, bottom=0.6, top=0.35)
    if plotting.REUSE:
        _FIGURE[:] = [fig, ax]
    return fig, ax


def _plot(section: dict, plot_dir: Path) -> tuple[str | None, list[str]]:
    """The latency distribution (ECDF) of write + sync per mode that ran, µs on a log scale.

    Returns (the plot's path relative to the host's report directory, or None when no sample can be
    placed on a log axis; one line per mode with samples at 0 or below, which the plot leaves out).
    """
    curves, notes = [], []
    for name in section["mode_order"]:
        m = section["modes"][name]
        if m["status"] != "ok":
            continue
        xs = sorted(v / 1e3 for v in m["samples_ns"])
        # each point keeps its place in the whole distribution: the left-out samples are the lowest
        points = [(x, (i + 1) / len(xs)) for i, x in enumerate(xs) if plotting.on_log_axis(x)]
        note = plotting.left_out(len(xs) - len(points), len(xs), f"samples of mode {name}")
        if note:
            notes.append(note)
        if points:
            curves.append((name, points))
    if not curves:
        return None, notes
    title = f"{section['blocks']} blocks of {ibytes(section['block_bytes'])} per mode"

    def draw():
        fig, ax = _axes()
        for name, points in curves:
            ax.plot(*zip(*points, strict=True), label=name)
        ax.relim()
        ax.autoscale_view()
        # placed where matplotlib's automatic placement puts it over an axes with nothing on top (no
        # top ticks, no offset text on the 0..1 y axis), without the tick boxes it measures each draw
        ax.set_title(title, y=1.0)
        ax.legend()
        return fig

    data = {"curves": curves, "title": title}
    return plotting.section_plot(plot_dir, PLOT_NAME, data, draw, __file__), notes


def _fstype(results: dict) -> object:
    return results.get("facts", {}).get("workbench", {}).get("fstype")


DURABLE_MODES = ("fsync", "fdatasync", "o_dsync", "f_fullfsync")


def durability(section: dict, results: dict) -> dict:
    """Each durable mode's p50 read against the device's write-cache mode, and each mode's I/O record.

    Returns ``{"device": evidence.device_facts, "readings": [str], "io": [{"mode", "line",
    "written_per_block"}]}``; ``written_per_block`` is the device's written bytes over the mode's
    measured blocks divided by their count (device-wide), or None.
    """
    facts = evidence.device_facts(results)
    readings, io = [], []
    for mode, rec in section["modes"].items():
        if rec.get("status") != "ok":
            continue
        if mode in DURABLE_MODES:
            line = evidence.fsync_reading(rec["latency"]["p50_us"], facts)
            if line:
                readings.append(f"{mode} (p50 {rec['latency']['p50_us']:,.0f} µs): {line}")
        record = rec.get("io_record")
        b = evidence.io_bytes(record)
        per = b["device_written"] / section["blocks"] if b["device_written"] is not None else None
        io.append({"mode": mode, "line": evidence.io_line(record), "written_per_block": per})
    return {"device": facts, "readings": readings, "io": io}


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Rows and explanations for the fsync_bench section; never raises on failed/not_run.

    Returns ``{"ok", "status_note", "rows": [{"mode", "ok", "reason", "call",
    "latency" (µs), "write_p50_us", "vs_none", "fallback", "validation"}], "os": os_meaning(),
    "validation": [str], "explanations": [str], "plot": str | None, "plot_notes": [str]}``; ``plot`` is
    relative to the host's report directory; ``validation`` lists each mode that ran on a path not yet
    validated on real hardware; ``plot_notes`` says, per mode, how many samples the log-scale plot left
    out (0 or less), and ``plot`` is None when it could place none.
    """
    if section.get("status") != "ok":
        return {
            "ok": False,
            "status_note": status_note(section),
            "rows": [],
            "os": None,
            "validation": [],
            "explanations": [],
            "plot": None,
            "plot_notes": [],
            "durability": None,
        }
    rows = _rows(section)
    meaning = os_meaning(section, rows)
    plot, plot_notes = _plot(section, plot_dir)
    return {
        "ok": True,
        "status_note": "ok",
        "rows": rows,
        "os": meaning,
        "validation": [f"{r['mode']}: {r['validation']}" for r in rows if r["ok"] and r["validation"]],
        "explanations": _explanations(section, rows, meaning, _fstype(results)),
        "plot": plot,
        "plot_notes": plot_notes,
        "durability": durability(section, results),
    }
