"""Report section for ``ceiling``: this host's own cold and warm read, and the device facts beside it.

The cold ceiling is what the load section's cold figures are scored against (evidence.ceiling); the
device facts come from the run's audit (evidence.device_facts).
"""

from __future__ import annotations

from pathlib import Path

from disklab.sections import evidence, status_note


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """``{"ok", "status_note", "cold", "warm", "cold_why", "warm_why", "runs", "device"}``; never raises."""
    if section.get("status") != "ok":
        return {"ok": False, "status_note": status_note(section)}
    runs = []
    for kind, key in (("cold", "cold_runs"), ("warm", "warm_runs")):
        for r in section[key]:
            good = r["proven"] if kind == "cold" else r["verified"]
            why = ", ".join(r.get("failed", [])) if kind == "cold" else ("" if good else "residency < 99 %")
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
        "runs": runs,
        "device": evidence.device_facts(results),
    }
