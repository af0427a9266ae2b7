"""Report section for the crash lab: outcome table, bytes-at-kill plot, explanations from this host's numbers.

Source of the expectations quoted as "the lesson": the lesson, Measure ("The
crash") and Break It. Every number written here comes from ``section``.
"""

from __future__ import annotations

from pathlib import Path

from disklab import anchors, plotting
from disklab.sections import layers
from disklab.sections import savers as savers_section
from disklab.units import ibytes, pct

PLOT_NAME = "crash_bytes.png"
OUTCOME_LABELS = {
    "new_ok": "new ok",
    "old_ok": "old ok",
    "corrupt": "corrupt",
    "missing": "missing",
    "unexpected_step": "unexpected step",
}
PLOT_MODES = ("naive", "atomic", "safetensors")


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1000:.1f} ms"


def _point(kill: dict) -> str:
    if kill["kill_by"] == "progress":
        at = kill["stopped_at"]
        stop = f", stopped after {at['syscall']} #{at['ordinal']}" if at else ", by watching the file"
        return f"at {pct(kill['kill_point'])} written{stop}"
    return f"after {_ms(kill['kill_point'])}"


def _progress_method(section: dict) -> str:
    """How the progress kills were placed on this host, and what that means for reading them."""
    why = section["progress_stop_unusable"]
    if why is None:
        return (
            "Kills by progress are exact: strace stopped the saver (SIGSTOP injected at the exit of the "
            "first write call after which the file held that share) and only then was it sent SIGKILL, so "
            "each kill lands at its point whatever the host's load. The precision is one system call: a "
            "tensor written in one call is on disk whole or not at all, so the share written at the kill "
            "is at or past the point. Kills by time land inside calls."
        )
    return (
        f"Kills by progress watched the file and sent SIGKILL once it had grown that far ({why}), so on a "
        "loaded host a kill can land later than its point; the table gives the share actually written."
    )


def _short(error: str, limit: int = 100) -> str:
    """The error's first sentence when the message is long (the JSON keeps all of it)."""
    if len(error) <= limit or ". " not in error:
        return error
    return error.split(". ", 1)[0] + ". (…)"


def _files(kill: dict) -> str:
    if not kill["files"]:
        return "no files"
    parts = []
    for f in kill["files"]:
        held = f"{ibytes(f['size_bytes'])}"
        if f["allocated_bytes"] < f["size_bytes"]:
            held += f" (only {ibytes(f['allocated_bytes'])} allocated)"
        parts.append(f"`{f['name']}` {held}")
    return "; ".join(parts)


def _rows(section: dict) -> list[dict]:
    rows = []
    for mode, m in section["modes"].items():
        full = m["full_bytes"]
        for k in m["kills"]:
            rows.append(
                {
                    "mode": mode,
                    "kill_by": k["kill_by"],
                    "point": _point(k),
                    "killed_at": _ms(k["kill_after_s"]),
                    "progress_seen": pct(k["progress_at_kill_fraction"]),
                    "new_bytes": f"{ibytes(k['new_written_bytes'])} ({pct(k['new_written_bytes'] / full)})",
                    "outcome": OUTCOME_LABELS[k["outcome"]],
                    "step": "n/a" if k["step"] is None else str(k["step"]),
                    "error": _short(k["error"] or ""),
                    "files": _files(k),
                    "stray": ", ".join(f"`{n}`" for n in k["stray_temp_files"]) or "none",
                    "note": "" if k["killed"] else "save ended before the kill",
                }
            )
    return rows


def _counts(kills: list[dict]) -> dict:
    out = {o: 0 for o in OUTCOME_LABELS}
    for k in kills:
        out[k["outcome"]] += 1
    return out


def _explain_naive(section: dict) -> list[str]:
    m = section["modes"].get("naive")
    if not m:
        return []
    c = _counts(m["kills"])
    lines = [
        f"naive: {c['corrupt']} of {len(m['kills'])} kills left a checkpoint that does not load; "
        f"{c['old_ok']} landed before torch.save opened the file (old step kept) and {c['new_ok']} after it "
        f"finished (new step)."
    ]
    bad = [k for k in m["kills"] if k["outcome"] == "corrupt" and k["kill_after_s"] is not None]
    if bad:  # the corrupt kill that held the most bytes: the most data lost to a late kill
        k = max(bad, key=lambda k: (k["new_written_bytes"], -k["kill_after_s"]))
        lines.append(
            f"The naive file held {ibytes(k['new_written_bytes'])} of {ibytes(m['full_bytes'])} "
            f"when killed at {_ms(k['kill_after_s'])}; torch.load failed: {k['error']}"
        )
    kinds: dict[str, int] = {}
    for k in m["kills"]:
        if k["error"]:
            kinds[k["error"].split(":")[0]] = kinds.get(k["error"].split(":")[0], 0) + 1
    if kinds:
        lines.append(
            "Load errors by type: " + ", ".join(f"{n} × {t}" for t, n in sorted(kinds.items())) + "."
        )
    return lines


def _explain_safe(section: dict, mode: str, label: str) -> list[str]:
    m = section["modes"].get(mode)
    if not m:
        return []
    c = _counts(m["kills"])
    n = len(m["kills"])
    strays = sum(bool(k["stray_temp_files"]) for k in m["kills"])
    removed = sum(len(k["recovered"]) for k in m["kills"])
    if c["old_ok"] + c["new_ok"] == n:
        head = f"{label}: all {n} kills left a checkpoint that loads ({c['old_ok']} old, {c['new_ok']} new)"
    else:
        head = (
            f"{label}: only {c['old_ok'] + c['new_ok']} of {n} kills left a checkpoint that loads "
            f"({c['corrupt']} corrupt, {c['missing']} missing)"
        )
    lines = [f"{head}; {strays} kills left a stray temp file, and recover removed {removed} files."]
    sparse = [
        f for k in m["kills"] for f in k["files"] if f["temp"] and f["allocated_bytes"] < f["size_bytes"]
    ]
    if sparse:
        f = min(sparse, key=lambda f: f["allocated_bytes"])
        lines.append(
            f"{label}'s temp file `{f['name']}` already showed its full size "
            f"{ibytes(f['size_bytes'])} while only {ibytes(f['allocated_bytes'])} were allocated: "
            "safetensors sets the size first, so a file's size does not prove it is complete."
        )
    return lines


def _explain_break_it(section: dict, results: dict) -> dict:
    b = section["break_it"]
    fbf = b["fsync_before_flush"]
    has_powercut = b["fsync_before_flush"]["powercut_section"] in results.get("experiments", {})
    fbf_text = (
        f"fsync before flush passed {fbf['passed']} of {fbf['kills']} kill tests: a kill leaves the "
        "page cache intact, so a kill test cannot see this bug. Only a power cut can, "
        + (
            "see the powercut section of this report."
            if has_powercut
            else "and the powercut step did not run in this results file, "
            "so this report cannot show it failing."
        )
    )
    x = b["cross_device"]
    if x["status"] == "reproduced":
        sizes = x["move_partial_sizes_bytes"]
        seen = (
            f"the watcher saw the final name at {len(sizes)} sizes below its full {ibytes(x['full_bytes'])} "
            f"(smallest {ibytes(min(sizes))})"
            if sizes
            else f"the watcher saw no partial size in {x['move_polls']} polls; the copy is still not atomic"
        )
        xdev_text = (
            f"Temp file on another filesystem ({x['other_dir']}): os.replace failed with "
            f"{x['replace_error']}. shutil.move then copied it "
            f"({'same' if x['same_inode_after_move'] else 'new'} inode at the target): {seen}, "
            "so a kill during the move leaves a partial checkpoint under the final name."
        )
    else:
        xdev_text = f"Temp file on another filesystem: not reproducible on this host ({x['reason']})."
    e = b["fsync_error"]
    a, ig = e["atomic"], e["ignoring"]
    err_text = (
        f"Ignored fsync error (os.fsync replaced by a test double that raises EIO; the disk did not fail): "
        f"atomic_save {'raised' if a['raised'] else 'did NOT raise'} after {a['fsync_calls']} "
        f"fsync call(s) and the checkpoint holds step {a['step']} ({OUTCOME_LABELS[a['outcome']]}); "
        f"the version that ignores the error {'raised' if ig['raised'] else 'went on'} and the "
        f"checkpoint holds step {ig['step']} ({OUTCOME_LABELS[ig['outcome']]}), "
        "data whose durability is unknown."
    )
    return {"fsync_before_flush": fbf_text, "cross_device": xdev_text, "fsync_error": err_text}


def _plot(section: dict, plot_dir: Path) -> str | None:
    """Bytes of the new checkpoint on disk against the time of the SIGKILL, one marker per outcome."""
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (mode, outcome): points, first seen first
    for mode in PLOT_MODES:
        for k in section["modes"].get(mode, {}).get("kills", []):
            if k["kill_after_s"] is not None:
                point = (k["kill_after_s"] * 1000, k["new_written_bytes"] / (1 << 20))
                groups.setdefault((mode, k["outcome"]), []).append(point)
    if not groups:
        return None
    full = {m: section["modes"][m]["full_bytes"] / (1 << 20) for m in PLOT_MODES if m in section["modes"]}

    def draw():
        fig = plotting.figure(7, 4)
        ax = fig.subplots()
        markers = {"new_ok": "o", "old_ok": "s", "corrupt": "x", "missing": "v", "unexpected_step": "d"}
        colors = {"naive": "tab:red", "atomic": "tab:blue", "safetensors": "tab:green"}
        for (mode, outcome), pts in groups.items():
            xs, ys = zip(*pts, strict=True)
            label = f"{mode}: {OUTCOME_LABELS[outcome]}"
            ax.scatter(xs, ys, marker=markers[outcome], color=colors[mode], label=label)
        for mode, mib in full.items():
            ax.axhline(mib, color=colors[mode], ls=":", lw=1)
        ax.set_xlabel("time from the start of the save call to the SIGKILL (ms)")
        ax.set_ylabel("bytes of the new checkpoint on disk (MiB)")
        ax.set_title("bytes of each save on disk at the SIGKILL (dotted: full size)")
        ax.legend(fontsize=8)
        plotting.margins(fig, left=0.8, right=0.15, bottom=0.55, top=0.35)
        return fig

    data = {"points": [[mode, outcome, pts] for (mode, outcome), pts in groups.items()], "full_mib": full}
    return plotting.section_plot(plot_dir, PLOT_NAME, data, draw, __file__)


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Context for crash.md.j2: ``progress_method`` (how kills were placed), ``rows`` (table),
    ``explanations`` (list of str), ``break_it`` (str by case), ``plot`` (relative path or None).
    Never raises for a ``failed`` or ``not_run`` section.
    """
    if section.get("status") != "ok":
        return {
            "rows": [],
            "explanations": [],
            "break_it": {},
            "plot": None,
            "progress_method": "",
            "layers": None,
        }
    explanations = _explain_naive(section)
    explanations += _explain_safe(section, "atomic", "atomic")
    explanations += _explain_safe(section, "safetensors", "safetensors")
    return {
        "progress_method": _progress_method(section),
        "rows": _rows(section),
        "explanations": explanations,
        "break_it": _explain_break_it(section, results),
        "plot": _plot(section, plot_dir),
        "layers": layers.block(section, plot_dir, "crash_layers.png"),
        "layers_save": section["layers"]
        if isinstance(section.get("layers"), dict) and "rows" in section["layers"]
        else None,
        "saver_kills": saver_kills(results),
        "savers_anchor": anchors.section("savers"),
    }


def saver_kills(results: dict) -> list[dict]:
    """The real kills of each framework saver of the same run's savers step, one row per saver and case
    (disklab.sections.savers.rows); [] where that step did not run."""
    sec = (results.get("experiments") or {}).get("savers") or {}
    if sec.get("status") != "ok":
        return []
    return [r for r in savers_section.rows(sec) if r["status"] == "ok"]
