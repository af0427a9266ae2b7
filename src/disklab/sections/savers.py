"""Report section for the savers users run: each one's kills and power-cut states, by case, with the
mechanisms its recording shows and the fix they call for. Everything is computed from the stored section.
"""

from __future__ import annotations

from pathlib import Path

CASES = (("fresh", "fresh directory"), ("reuse", "over the earlier checkpoint"))
MODELS = (("process_kill", "process-kill"), ("power_cut", "power-cut"))
UNSAFE = ("mixed", "corrupt", "missing")
WORDS = {"safe": "survives", "unsafe": "can lose or mix the checkpoint on", "rolled_back": "can roll back on"}


def _kill_cell(kill: dict) -> str:
    """How the real kills ended: ``3 of 5 left a right checkpoint; 1 mixed, 1 missing``."""
    if kill.get("status") != "ok":
        return f"not run: {kill.get('reason', '')}"
    n = len(kill["kills"]) - kill["not_stopped"]
    if n == 0:
        return f"no kill landed: {kill['not_stopped']} save(s) ended before their point"
    bad = ", ".join(f"{kill['counts'][o]} {o}" for o in UNSAFE if kill["counts"][o])
    text = f"{kill['loads']} of {n} left a checkpoint that loads right" + (f"; {bad}" if bad else "")
    if kill.get("earlier_lost"):
        text += f"; the earlier checkpoint lost in {kill['earlier_lost']}"
    if kill["not_stopped"]:
        text += f"; {kill['not_stopped']} save(s) ended before their point and were not killed"
    return text


def _model_cell(m: dict) -> str:
    c = m["counts"]
    bad = ", ".join(f"{c[o]} {o}" for o in UNSAFE if c[o])
    rb = f", {c['rolled_back']} rolled back" if c["rolled_back"] else ""
    return f"**{m['verdict']}**: {m['states']} states" + (f"; {bad}" if bad else "") + rb


def rows(section: dict) -> list[dict]:
    """One row per saver and case: the real kills, and each model's verdict over every crash state."""
    out = []
    for s in section.get("savers") or []:
        if s["status"] != "ok":
            out.append({"saver": s["saver"], "case": "", "status": s["status"],
                        "note": s.get("reason") or s.get("error", "")})  # fmt: skip
            continue
        for case, words in CASES:
            c = s["cases"][case]
            out.append({
                "saver": s["saver"], "case": words, "status": "ok", "kill": _kill_cell(c["kill"]),
                **{label: _model_cell(c["powercut"]["models"][key]) for key, label in MODELS},
            })  # fmt: skip
    return out


def points(section: dict) -> list[dict]:
    """The first mixed state of each saver and case (the most serious), else its first unsafe one."""
    out = []
    for s in section.get("savers") or []:
        for case, words in CASES:
            if s["status"] != "ok":
                continue
            for key, label in MODELS:
                m = s["cases"][case]["powercut"]["models"][key]
                p = m.get("first_mixed") or m.get("first_unsafe")
                if p:
                    out.append({"saver": s["saver"], "case": words, "model": label, **p})
    return out


def summary(section: dict) -> str | None:
    """The sentence On this host and the fleet page give: which savers survive a kill and a power cut."""
    ok = [s for s in section.get("savers") or [] if s["status"] == "ok"]
    if not ok:
        return None
    parts = []
    for s in ok:
        v = s["verdicts"]
        parts.append(f"{s['saver']} {WORDS[v['kill']]} a kill and {WORDS[v['power_cut']]} a power cut")
    return "; ".join(parts)


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """{"ok", "rows", "points", "savers", "summary"}; {"ok": False} for a section that did not run."""
    if section.get("status") != "ok":
        return {"ok": False}
    return {"ok": True, "rows": rows(section), "points": points(section), "savers": section["savers"],
            "summary": summary(section)}  # fmt: skip
