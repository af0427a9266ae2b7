"""Report section for the power-cut simulator: verdict table, first unsafe points, lesson check.

Everything here is computed from the stored section; nothing is hard-coded
from the lesson except its expectations, which are stored in the section too.
"""

from __future__ import annotations

from pathlib import Path

from disklab import anchors, plotting
from disklab_host.savers import judge

PLOT_NAME = "powercut_verdicts.png"
OUTCOMES = ("new_ok", "old_ok", "rolled_back", "corrupt", "missing")
MODELS = (("process_kill", "process-kill"), ("power_cut", "power-cut"))
# A saver's mechanisms, the one that breaks it soonest first (disklab_host.savers.mechanism's kinds).
SEVERITY = ("remove_before_rename", "in_place_rewrite", "data_after_fsync", "never_fsynced", "no_dir_fsync")


def _row(recipe: dict, key: str, label: str) -> dict:
    m = recipe["models"][key]
    unsafe = m["counts"]["corrupt"] + m["counts"]["missing"]
    return {
        "recipe": f"{recipe['number']} {recipe['title']}",
        "model": label,
        "verdict": m["verdict"],
        "expected": recipe["lesson_expects"].get(key),
        "counts": [m["counts"][o] for o in OUTCOMES],
        "states": m["states"],
        "unsafe": unsafe,
        "unsafe_fraction": unsafe / m["states"] if m["states"] else None,
    }


def _unsafe_points(recipe: dict) -> list[dict]:
    out = []
    for key, label in MODELS:
        p = recipe["models"][key]["first_unsafe"]
        if p:
            out.append({"recipe": recipe["title"], "model": label, **p})
    return out


def _cell(row: dict) -> tuple[str, str]:
    """A grid cell: the verdict, and its words with how many of the states were unsafe."""
    return row["verdict"], f"{row['verdict'].replace('_', ' ')}\n{row['unsafe']} of {row['states']} unsafe"


def _plot(rows: list[dict], plot_dir: Path) -> str | None:
    """The verdict table as a grid: a recipe per row, process-kill and power-cut side by side."""
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    if not recipes:
        return None
    by = {(r["recipe"], r["model"]): _cell(r) for r in rows}
    labels = [label for _, label in MODELS]
    cells = [[by.get((rec, m), ("", "not run")) for m in labels] for rec in recipes]
    title = "Each save recipe over every crash state: safe, rolled back, unsafe"
    data = {"recipes": recipes, "models": labels, "cells": cells}

    def draw():
        return plotting.verdict_grid(recipes, labels, cells, title)

    return plotting.section_plot(plot_dir, PLOT_NAME, data, draw, __file__)


def saver_rows(results: dict) -> list[dict]:
    """One row per framework saver of the same run's savers step (its version, both verdicts over its two
    cases, and the mechanism its recordings show that breaks it soonest), for the recipes' table; [] where
    it did not run."""
    sec = (results.get("experiments") or {}).get("savers") or {}
    out = []
    for s in sec.get("savers") or [] if sec.get("status") == "ok" else []:
        if s["status"] != "ok":
            continue
        version = ", ".join(f"{k} {v}" for k, v in s["versions"].items())
        worst = {key: judge.worst([s["cases"][c]["powercut"]["models"][key]["verdict"] for c in s["cases"]])
                 for key, _ in MODELS}  # fmt: skip
        ranked = sorted(
            s["mechanisms"], key=lambda m: SEVERITY.index(m["kind"]) if m["kind"] in SEVERITY else 99
        )
        first = ranked[0]["text"] if ranked else "none found"
        out.append({"saver": s["saver"], "version": version, **worst, "mechanism": first})
    return out


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Rows of the verdict table, its grid picture, first unsafe points and the comparison with the lesson.

    Returns {"ok", "rows", "plot", "unsafe_points", "rolled_back_points", "unplaced", "outside_files",
    "summary"}; with a section whose status is not "ok" it returns {"ok": False}.
    """
    if section.get("status") != "ok":
        return {"ok": False}
    recipes = section["recipes"]
    rows = [_row(r, key, label) for r in recipes for key, label in MODELS]
    points = [p for r in recipes for p in _unsafe_points(r)]
    rolled = [
        {"recipe": r["title"], **r["models"]["power_cut"]["first_rolled_back"]}
        for r in recipes
        if r["models"]["power_cut"]["first_rolled_back"]
    ]
    judged = [r for r in recipes if r["agrees_with_lesson"] is not None]
    agree = sum(1 for r in judged if r["agrees_with_lesson"])
    kill_safe_cut_unsafe = [
        r["title"]
        for r in recipes
        if r["models"]["process_kill"]["verdict"] != "unsafe"
        and r["models"]["power_cut"]["verdict"] == "unsafe"
    ]
    total = sum(r["models"]["power_cut"]["states"] for r in recipes)
    summary = [
        f"{agree} of {len(judged)} recipes with an expectation in the lesson got the lesson's verdicts "
        f"from this host's recordings.",
        f"{len(kill_safe_cut_unsafe)} recipe(s) survive every SIGKILL crash point but not a power cut: "
        + ("; ".join(kill_safe_cut_unsafe) or "none")
        + ". A kill test would pass them.",
        f"{total} power-cut crash states were built and loaded in all, "
        f"at most {section['max_torn_per_point']} torn-write states per crash point.",
    ]
    unplaced = [{"recipe": r["title"], **u} for r in recipes for u in r["recording"]["unplaced_calls"]]
    outside = [{"recipe": r["title"], **f} for r in recipes for f in r["recording"]["outside_files"]]
    if unplaced:
        partial = sorted({u["recipe"] for u in unplaced})
        summary.append(
            f"{len(unplaced)} recorded call(s) could not be placed in the model (listed below): "
            + "; ".join(partial)
            + " judged on the placed calls only."
        )
    else:
        summary.append("Every recorded call of every recipe was placed in the model.")
    for r in recipes:
        summary += [f"{r['title']}: {d}" for d in r["differences"]]
    return {
        "ok": True,
        "rows": rows,
        "saver_rows": saver_rows(results),
        "savers_anchor": anchors.section("savers"),
        "plot": _plot(rows, plot_dir),
        "unsafe_points": points,
        "rolled_back_points": rolled,
        "unplaced": unplaced,
        "outside_files": outside,
        "summary": summary,
    }
