"""Report section for ``fsync_bench``: what each kind of sync costs on this host.

Explanations are computed from this host's percentiles. How to read a fsync
latency (tens of µs: a fast drive or a cache with power-loss protection;
milliseconds: the drive writes to flash on each flush; macOS fsync stopping at
the drive's cache) comes from the lesson, "fsync: the only promise you get" and
Measure. Writes one plot: the latency distribution per mode.
"""

from __future__ import annotations

from pathlib import Path

from disklab.fsio import save_figure
from disklab.sections import status_note
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
            }
        )
    return rows


# p99 at or above this multiple of p50 is called a tail worth planning for.
TAIL_RATIO = 3.0


def _flush_class(mode: str, p50_us: float, vs_none: float | None, fstype: object = None) -> str:
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


def _explanations(section: dict, rows: list[dict], fstype: object = None) -> list[str]:
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
            fb = r["fallback"]
            lines.append(
                f"F_FULLFSYNC was refused with {fb['errno']} after {fb['after_calls']} calls on this volume; "
                f"the f_fullfsync figures are {fb['to']}'s."
            )
    full = by.get("f_fullfsync", {})
    key = "f_fullfsync" if full.get("ok") and not full.get("fallback") else "fsync"
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
    plain = by.get("fsync", {})
    if key == "f_fullfsync" and plain.get("ok") and plain["latency"]["p50_us"] > 0:
        r = full["latency"]["p50_us"] / plain["latency"]["p50_us"]
        lines.append(
            f"F_FULLFSYNC p50 is {ratio(r)} fsync's here: plain fsync on macOS stops at the drive's cache "
            "(Apple's fsync(2) man page), so a save needs F_FULLFSYNC to survive a power cut."
        )
    return lines


def _plot(section: dict, plot_dir: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in section["mode_order"]:
        m = section["modes"][name]
        if m["status"] != "ok":
            continue
        xs = sorted(v / 1e3 for v in m["samples_ns"])
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=name)
    ax.set_xscale("log")
    ax.set_xlabel("write + sync latency (µs, log scale)")
    ax.set_ylabel("fraction of calls")
    ax.set_title(f"{section['blocks']} blocks of {ibytes(section['block_bytes'])} per mode")
    ax.legend()
    save_figure(fig, Path(plot_dir) / PLOT_NAME)
    return f"{Path(plot_dir).name}/{PLOT_NAME}"


def _fstype(results: dict) -> object:
    return results.get("facts", {}).get("workbench", {}).get("fstype")


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Rows and explanations for the fsync_bench section; never raises on failed/not_run.

    Returns ``{"ok", "status_note", "rows": [{"mode", "ok", "reason", "call",
    "latency" (µs), "write_p50_us", "vs_none", "fallback"}], "explanations": [str],
    "plot": str | None}``; ``plot`` is relative to the host's report directory.
    """
    if section.get("status") != "ok":
        return {
            "ok": False,
            "status_note": status_note(section),
            "rows": [],
            "explanations": [],
            "plot": None,
        }
    rows = _rows(section)
    return {
        "ok": True,
        "status_note": "ok",
        "rows": rows,
        "explanations": _explanations(section, rows, _fstype(results)),
        "plot": _plot(section, plot_dir),
    }
