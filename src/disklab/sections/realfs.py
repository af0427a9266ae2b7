"""Report section "On real filesystems": real crash images against the simulator, and a real fsync error.

Everything is computed from the stored section: the per-recipe table, the
confusion matrix per filesystem, each disagreement with its mechanism, the
recording layer's cost, and the fsync-error table with what a retry would
have believed.
"""

from __future__ import annotations

import statistics
from pathlib import Path

VERDICTS = ("safe", "rolled_back", "unsafe")


def _short(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cell_text(c: dict) -> str:
    if c.get("verdict") is None:
        return f"no verdict: {c.get('error', 'unknown')}"
    lost = c["counts"]["corrupt"] + c["counts"]["missing"]
    return f"**{c['verdict']}** ({lost} lost, {c['counts']['rolled_back']} rolled back / {c['states']})"


def _label(c: dict) -> str:
    """The column of a cell: its filesystem, with ", busy" for a save recorded beside a neighbour."""
    return c["fs"] if c.get("load", "quiet") == "quiet" else f"{c['fs']}, {c['load']}"


def _recipe_rows(cells: list[dict], columns: list[str]) -> list[dict]:
    rows: dict[str, dict] = {}
    for c in cells:
        row = rows.setdefault(c["recipe"], {"recipe": c["title"], "simulator": c.get("simulator"), "fs": {}})
        row["fs"][_label(c)] = _cell_text(c)
    return [{**r, "cols": [r["fs"].get(col, "not run") for col in columns]} for r in rows.values()]


def _cost(cells: list[dict], filesystems: list[str]) -> list[dict]:
    out = []
    for fs in filesystems:
        pairs = [
            (c["recording"]["save_wall_s"], c["recording"]["plain_save_wall_s"])
            for c in cells
            if c["fs"] == fs and "plain_save_wall_s" in c.get("recording", {})
        ]
        if not pairs:
            continue
        ratios = [a / b for a, b in pairs if b > 0]
        out.append({
            "fs": fs, "saves": len(pairs),
            "logged_s": sum(a for a, _ in pairs), "plain_s": sum(b for _, b in pairs),
            "median_ratio": statistics.median(ratios) if ratios else None,
        })  # fmt: skip
    return out


def _pages(p: dict | None) -> str:
    if not p:
        return "unavailable (no cachestat)"
    return f"{p['dirty_pages']} dirty, {p['writeback_pages']} writeback, {p['cached_pages']} cached"


def _held(counts: dict) -> str:
    parts = [f"{n} {k}" for k, n in counts.items() if n]
    return ", ".join(parts) or "nothing"


def _fsync_rows(rows: list[dict]) -> tuple[list[dict], list[str]]:
    table, lines = [], []
    for r in rows:
        if "error" in r:
            lines.append(f"{r['fs']}: the fsync-error measurement did not finish: {r['error']}")
            continue
        saves = r["saves"]
        table.append({
            "fs": r["fs"], "first": r["first_fsync"], "second": r["second_fsync"],
            "third": r["third_fsync_device_healthy"], "before": _pages(r["pages_before"]),
            "after": _pages(r["pages_after_first"]), "cache": _held(r["read_through_cache"]),
            "device": _held(r["on_device_after_remount"]),
            "atomic": f"raised {saves['atomic_save']['raised']}" if saves["atomic_save"]["raised"]
            else "returned", "atomic_after": saves["atomic_save"]["after_remount"],
            "ignoring_after": saves["error_ignoring_save"]["after_remount"],
        })  # fmt: skip
        pages = r["victim_bytes"] // 4096
        after = r["pages_after_first"]
        dropped = after is not None and after["dirty_pages"] == 0
        if r["first_fsync"] != "ok" and r["second_fsync"] == "ok":
            device = r["on_device_after_remount"]
            lines.append(
                f"{r['fs']}: the first fsync returned {r['first_fsync']}; the second, on the same "
                "descriptor, "
                f"returned 0. A retry loop would have believed the {pages} pages durable. "
                + (f"cachestat shows the failed pages were marked clean ({after['dirty_pages']} dirty of "
                   f"{after['cached_pages']} cached), so nothing will write them again; " if dropped else "")
                + f"the page cache served {_held(r['read_through_cache'])} pages to readers, while after an "
                f"unmount and a fresh mount the device held {_held(device)} pages."
            )  # fmt: skip
        atomic = saves["atomic_save"]
        if atomic["raised"] and atomic["after_remount"] == "old" and not atomic["temp_left"]:
            lines.append(
                f"{r['fs']}: the lab's atomic save raised {atomic['raised']} at its fsync, never renamed, "
                "removed its temp file, and the old checkpoint loaded after the remount."
            )
        elif not atomic["raised"]:
            lines.append(f"{r['fs']}: the lab's atomic save did NOT raise on the failing device.")
        ign = saves["error_ignoring_save"]
        lines.append(
            f"{r['fs']}: the save that swallows the fsync error and renames anyway left "
            f"{ign['after_remount']} at the checkpoint path after the remount"
            + (f" ({_short(ign['after_remount_error'])})" if ign.get("after_remount_error") else "")
            + f" (in the page cache before the remount it read as {ign['in_cache']})."
        )
    return table, lines


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Context for the "On real filesystems" section; {"ok": False} unless the section is ok or partial
    (a part failed: its ``failed_parts`` are listed, the rest is shown)."""
    if section.get("status") not in ("ok", "partial"):
        return {"ok": False}
    cells = section["cells"]
    filesystems = list(section["filesystems"])
    columns = list(dict.fromkeys(_label(c) for c in cells))
    confusion = [
        {"fs": fs, "rows": [{"simulator": s, "counts": [m[s][r] for r in VERDICTS]} for s in VERDICTS]}
        for fs, m in section["confusion"].items()
    ]
    agree = sum(1 for c in cells if c.get("judged") == "agree")
    judged = sum(1 for c in cells if c.get("judged") in ("agree", "kinder", "harsher"))
    summary = [
        f"{agree} of {judged} recipe-and-filesystem pairs got the simulator's power-cut verdict from their "
        "real "
        "crash images."
    ]
    for c in cells:
        if c.get("first_unsafe"):
            p = c["first_unsafe"]
            lost = c["counts"]["corrupt"] + c["counts"]["missing"]
            summary.append(
                f"{_label(c)}, {c['title']}: {lost} of {c['states']} real crash images lost the checkpoint; "
                f"first: {p['state']} -> {p['outcome']}"
                + (f" ({_short(p['error'])})" if p.get("error") else "")
            )
    fsync_table, fsync_lines = _fsync_rows(section["fsync_error"])
    return {
        "ok": True,
        "filesystems": filesystems,
        "columns": columns,
        "rows": _recipe_rows(cells, columns),
        "confusion": confusion,
        "verdicts": VERDICTS,
        "disagreements": section["disagreements"],
        "bugs": [d for d in section["disagreements"] if d["simulator_bug"]],
        "summary": summary,
        "cost": _cost(cells, filesystems),
        "fsync_table": fsync_table,
        "fsync_lines": fsync_lines,
    }
