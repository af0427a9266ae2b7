"""Report section for ``ceiling``: this host's own cold reads (one stream, and parallel direct) and warm
read, and the device facts beside them.

The two cold ceilings are what the load section's cold figures are scored against (evidence.ceiling);
the device facts come from the run's audit (evidence.device_facts).
"""

from __future__ import annotations

from pathlib import Path

from disklab.sections import evidence, status_note


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """``{"ok", "status_note", "cold", "warm", "cold_why", "warm_why", "ratio", "parallel", "runs",
    "device"}``; never raises. ``parallel``: ``{"status" (ok, not_run, failed, absent), "ceiling",
    "why", "label", "settings", "streams_used", "over_single"}``; ``runs`` the parallel runs too (kind
    ``parallel``, with ``after``, the residency just after the read)."""
    if section.get("status") != "ok":
        return {"ok": False, "status_note": status_note(section)}
    runs = []
    par = section.get("parallel") if isinstance(section.get("parallel"), dict) else {}
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
        "device": evidence.device_facts(results),
    }
