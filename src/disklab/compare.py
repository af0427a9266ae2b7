"""Compare two runs of the lab: what changed on the host, and which figures changed, with a stated test.

Controller side: standard library plus :mod:`disklab.units`, no torch. Both
inputs are results documents as the lab runner writes them (and as
:mod:`disklab.stored` reads and upgrades them)::

    {"schema_version", "run_id", "host", "profile", "sizes", "lab_python",
     "lab_platform", "facts": {...}, "workbench": {...}, "experiments": {NAME: section}}

Figures come from :func:`disklab.figures.extract`, the one extraction shared
with the fleet page and ``disklab export``: every raw sample list, the ceiling
reads, and the load step's samples grouped by file, method, populate mode,
cache state and readiness stage (a figure's key names all of them, so only
figures at the same stage and cache state are ever paired). A cold figure holds
only samples whose cache proof says cold; samples that failed their proof are
listed as not compared.

Every pair of samples figures is judged by :mod:`disklab.verdicts`, all of a
comparison's figures as one family: the exact (or, above 40 pooled units,
normal) Mann–Whitney test, the Hodges–Lehmann ratio with its 95 % interval,
Benjamini–Hochberg over the family at q = 0.05, and each kind's minimum effect
T. A figure is ``changed``, ``no change`` beyond ±T, ``inconclusive`` (with the
samples a side that would decide), or ``disturbed`` (the apparent change rests
on samples taken while the host was busy: :mod:`disklab.noise`).
:func:`to_json` is what ``disklab compare --json`` prints; :func:`n_changed`
counts what ``--fail-on-change`` fails on (figures called changed and changed
power-cut verdicts; changed facts, disturbed and inconclusive figures do not
count). The workbench facts compared are each run's own (``workbench``, the
filesystem the steps wrote to), and the audit's beside them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from disklab import figures as figs
from disklab import stored, units, verdicts
from disklab.figures import (  # noqa: F401  (re-exported: compare's figures are figures.py's)
    LATENCY_UNITS,
    figure_labels,
    find_samples,
    sample_stats,
    unit_of,
)
from disklab_host.common.formats import output
from disklab_host.common.stats import percentile

__all__ = [  # compare's own, and the figures it re-exports (compare's figures are figures.py's)
    "LATENCY_UNITS", "figure_labels", "find_samples", "sample_stats", "unit_of",
    "compare_runs", "n_changed", "render_compare_text", "to_json",
]  # fmt: skip

CHANGED, NO_CHANGE, INCONCLUSIVE, DISTURBED = (
    verdicts.CHANGED,
    verdicts.NO_CHANGE,
    verdicts.INCONCLUSIVE,
    verdicts.DISTURBED,
)
# The text shows p90/p99 only from this many samples in both runs (below it they are the max, nearly).
PERCENTILE_MIN_SAMPLES = 5
RULE = (
    "each figure's test units (its samples, or each round's median) compared on a log scale: the "
    "two-sided Mann–Whitney U test (exact up to 40 pooled units, else the normal approximation), the "
    "Hodges–Lehmann ratio (new/old) with its 95 % interval, Benjamini–Hochberg over the figures at "
    f"q = {verdicts.FDR:g}; changed when q <= {verdicts.FDR:g} and the ratio is beyond ±T and the "
    "host's run-to-run drift ±D, no change when the ratio's 90 % interval lies inside ±T (two one-sided "
    "tests at 5 % each), inconclusive otherwise; disturbed when the change rests on samples taken while "
    "the host was busy (docs/statistics.md)"
)
# Run-level settings and facts compared alongside the audit's facts: a profile change makes figures
# incomparable; ``workbench`` is the run's own workbench (the filesystem the steps wrote to, results 4
# on), ``noise_context`` the run's governor, turbo, swap and delay accounting (results 6 on).
RUN_KEYS = ("host", "profile", "sizes", "lab_python", "lab_platform", "workbench", "noise_context")
_NOT_RECORDED = {"unavailable": "not recorded in this run"}
# Why a fact recorded in one run only is no change of the host (the compare text and the since-block).
ONE_RUN_ONLY = "only one run's format or lab code records them"
# Leaves that record when or how a probe ran, or what moves on every run, not a property of the host:
# never a "changed fact".
NOT_FACTS = {
    "facts.versions_source",  # whether the versions were probed now or read from the venv's record, and when
    "facts.collected_utc",
    "facts.versions.python_executable",
    "workbench.collected_utc",
    "noise_context.swap.free_bytes",
    "noise_context.delay_accounting.restored",
}
# Leaves that only explain another leaf: shown when the leaf they explain changed (how a run found the
# delay-accounting switch is said in ``why``; whether it recorded blocked I/O is ``state``).
EXPLAINS = {"noise_context.delay_accounting.why": "noise_context.delay_accounting.state"}


# The audit's quiet-host checks (load average, busy processes, pressure ...) describe the moment of the
# audit, not the host: compared apart, as conditions (condition_changes).
CONDITIONS = "facts.quiet"


def condition_changes(old: dict, new: dict) -> list[dict]:
    """The audit's quiet-host checks whose finding differs between the runs, by check name:
    ``[{"check", "old", "new", "advice"}]`` (``advice``: the new run's, or None)."""

    def checks(doc: dict) -> dict:
        quiet = (doc.get("facts") or {}).get("quiet") or {}
        found = quiet.get("checks") if isinstance(quiet, dict) else None
        return {c.get("check"): c for c in found or [] if isinstance(c, dict)}

    a, b = checks(old), checks(new)
    out = []
    for name in [n for n in b if n in a] + [n for n in a if n not in b]:
        co, cn = a.get(name) or {}, b.get(name) or {}
        if (co.get("state"), co.get("found")) != (cn.get("state"), cn.get("found")):
            out.append(
                {"check": name, "old": co.get("found"), "new": cn.get("found"), "advice": cn.get("advice")}
            )
    return out


def _flatten_facts(obj: object, path: str, out: dict[str, object]) -> None:
    """Leaves of a facts tree by dotted path; ``{"unavailable": reason}`` and lists are leaves."""
    if isinstance(obj, dict) and obj and set(obj) != {"unavailable"}:
        for key in obj:
            _flatten_facts(obj[key], f"{path}.{key}" if path else str(key), out)
    else:
        out[path] = obj


def _one_line_where_unrecorded(flat: dict[str, object], other: dict[str, object]) -> None:
    """Where ``other`` says a fact was not recorded (``{"unavailable": why}``) and ``flat`` holds values
    under it, those values become one leaf, so a fact first recorded in one run (the venv's packages,
    facts 7) is one line, not one per value."""
    for path, value in other.items():
        if path in flat or not (isinstance(value, dict) and set(value) == {"unavailable"}):
            continue
        under = [p for p in flat if p.startswith(path + ".")]
        if under:
            for p in under:
                del flat[p]
            flat[path] = f"recorded ({len(under)} values)"


def _not_a_fact(path: str) -> bool:
    """True for a leaf of :data:`NOT_FACTS` or a leaf under one of its paths."""
    return any(path == p or path.startswith(p + ".") for p in NOT_FACTS)


def _unrecorded(path: str, value: object) -> bool:
    """True where a run has no value for ``path`` because its format or lab code does not record it: what
    disklab.stored's upgrade of an older file wrote in its place, or a size setting the run's lab code
    did not have (a size exists only where the registry defines it). Elsewhere a leaf only one run has
    is a change of the host (a package installed since), and stays one."""
    reason = value.get("unavailable") if isinstance(value, dict) and set(value) == {"unavailable"} else None
    predates = isinstance(reason, str) and stored.PREDATES.match(reason) is not None
    return predates or (value == _NOT_RECORDED and path.startswith("sizes."))


def recorded_in_one(changes: list[dict]) -> tuple[list[dict], list[dict]]:
    """``changes`` (:func:`fact_changes`) split into the facts that changed and those only one run's format
    or lab code records (:func:`_unrecorded` on either side): no change of the host, listed apart and
    not counted."""
    changed, one = [], []
    for c in changes:
        (one if _unrecorded(c["path"], c["old"]) or _unrecorded(c["path"], c["new"]) else changed).append(c)
    return changed, one


def fact_changes(old: dict, new: dict) -> list[dict]:
    """Every fact leaf whose value differs between the runs, sorted by path.

    Walks ``facts`` and the run settings in :data:`RUN_KEYS` generically, so
    kernel, OS, versions, fs type, mount options, scheduler, read_ahead_kb and
    every ``vm.dirty_*`` value are all covered without naming them. A leaf
    present in only one run is paired with ``{"unavailable": "not recorded in
    this run"}``. Returns ``[{"path": str, "old": value, "new": value}]``.
    """
    flat_old: dict[str, object] = {}
    flat_new: dict[str, object] = {}
    for doc, flat in ((old, flat_old), (new, flat_new)):
        _flatten_facts(doc.get("facts") or {}, "facts", flat)
        for key in RUN_KEYS:
            if key in doc:
                _flatten_facts(doc[key], key, flat)
    _one_line_where_unrecorded(flat_new, flat_old)
    _one_line_where_unrecorded(flat_old, flat_new)
    changes = []
    paths = {
        p for p in set(flat_old) | set(flat_new) if p != CONDITIONS and not p.startswith(CONDITIONS + ".")
    }
    for path in sorted(p for p in paths if not _not_a_fact(p)):
        a = flat_old.get(path, _NOT_RECORDED)
        b = flat_new.get(path, _NOT_RECORDED)
        explained = EXPLAINS.get(path)
        if explained and flat_old.get(explained) == flat_new.get(explained):
            continue
        if a != b:
            changes.append({"path": path, "old": a, "new": b})
    return changes


def _figure_entry(fo: figs.Figure, fn: figs.Figure, judged: dict) -> dict:
    """One judged figure: both runs' stats, the ratio of their medians, and the verdict."""
    so, sn = fo.summary, fn.summary
    return {
        "path": fn.key,
        "label": fn.name,
        "name": fn.name,
        "experiment": fn.experiment,
        "unit": fn.unit,
        "stage": fn.stage,
        "cache": fn.cache,
        "method": fn.method,
        "file": fn.file,
        "populate": fn.populate,
        "old": so,
        "new": sn,
        "median_ratio": sn["median"] / so["median"] if so["median"] else None,
        **judged,
    }


# What must match for an earlier run to measure the host's run-to-run drift: a run after a kernel, torch,
# disklab, workbench or size change would add that change to the drift and hide the next one.
COMPARABLE = ("host", "profile", "sizes", "kernel", "fstype", "device", "torch", "disklab_version")


def comparable(doc: dict, old: dict) -> bool:
    """Whether an earlier run measured its figures as ``old`` did, on the same host as it was then (the
    runs whose medians give the host's run-to-run drift): :data:`COMPARABLE` all equal."""
    a, b = {**run_context(doc), "sizes": doc.get("sizes")}, {**run_context(old), "sizes": old.get("sizes")}
    return all(a.get(k) == b.get(k) for k in COMPARABLE)


def _quiet_median(f: figs.Figure | None) -> float | None:
    """The median of a figure's units that ran on a quiet host (all of them where no noise was recorded)."""
    if f is None or f.kind != figs.SAMPLES or not f.proven or not f.units:
        return None
    quiet = [u for u, flag in zip(f.units, f.flags or [None] * len(f.units), strict=True) if not flag]
    return percentile(sorted(quiet), 50) if quiet else None


def drift_of(key: str, old_fig: figs.Figure, earlier: list[dict] | None) -> verdicts.Drift:
    """The run-to-run drift of figure ``key`` on this host: from the medians of its quiet units in the
    ``earlier`` comparable runs (by_key dicts, oldest first) and in the old run, where enough runs have it
    (:func:`disklab.verdicts.drift_from_runs`); else the assumed drift of its kind."""
    medians = [m for found in earlier or [] if (m := _quiet_median(found.get(key))) is not None]
    if (m := _quiet_median(old_fig)) is not None:
        medians.append(m)
    return verdicts.drift_from_runs(medians) or verdicts.default_drift(old_fig.measure)


def compare_figures(
    old: dict, new: dict, min_effects: dict[str, float] | None = None, earlier: list[dict] | None = None
) -> dict:
    """Every figure of :func:`disklab.figures.extract` that both runs have, paired by key and judged.

    A key names the experiment, and for a load figure its file, method, populate
    mode, cache state and readiness stage, so only figures at the same stage and
    the same cache state are ever put side by side. Returns::

        {"figures": [judged figure], "only_old": [key], "only_new": [key],
         "unproven": [{"path", "name", "cache", "n_old", "n_new"}],
         "values": [{"path", "name", "unit", "cache", "old", "new", "ratio"}],
         "verdicts": [{"path", "name", "old", "new", "changed"}]}

    ``figures`` holds the samples figures whose cache state is proven (or has
    none), judged together by :func:`disklab.verdicts.judge_many` (``min_effects``
    overrides T per kind), each against the host's run-to-run drift: measured from
    ``earlier`` (the host's runs before ``old``, oldest first; those whose profile
    or sizes differ from ``old``'s are left out) where enough of them have the
    figure, else assumed (:func:`drift_of`); ``unproven`` the load figures of samples that failed
    their cache proof (cold_unverified, cold_unproven, warm_unverified), left out
    of the judgement; ``values`` single stored numbers (no samples, so nothing to
    judge by); ``verdicts`` categorical figures (the power-cut verdicts),
    ``changed`` when they differ.
    """
    a = figs.by_key(figs.extract(old))
    b = figs.by_key(figs.extract(new))
    before = [figs.by_key(figs.extract(d)) for d in earlier or [] if comparable(d, old)]
    before = before[-(verdicts.HISTORY_MAX_RUNS - 1) :]
    out: dict[str, list] = {
        k: [] for k in ("figures", "only_old", "only_new", "unproven", "values", "verdicts")
    }
    pairs: list[tuple[figs.Figure, figs.Figure]] = []
    for key, fn in b.items():
        fo = a.get(key)
        if not fn.proven or (fo is not None and not fo.proven):
            out["unproven"].append(
                {
                    "path": key,
                    "name": fn.name,
                    "cache": fn.cache,
                    "n_old": fo.summary.get("n") if fo else 0,
                    "n_new": fn.summary.get("n"),
                }
            )
        elif fo is None or fo.kind != fn.kind:
            out["only_new"].append(key)
        elif fn.kind == figs.SAMPLES:
            pairs.append((fo, fn))
        elif fn.kind == figs.VALUE:
            ratio = fn.value / fo.value if isinstance(fo.value, (int, float)) and fo.value else None
            out["values"].append(
                {
                    "path": key,
                    "name": fn.name,
                    "unit": fn.unit,
                    "cache": fn.cache,
                    "old": fo.value,
                    "new": fn.value,
                    "ratio": ratio,
                }
            )
        else:
            out["verdicts"].append(
                {
                    "path": key,
                    "name": fn.name,
                    "old": fo.value,
                    "new": fn.value,
                    "changed": fo.value != fn.value,
                }
            )
    index = {fn.key: i for i, (_, fn) in enumerate(pairs)}
    with_key = [other if (other := figs.SAME_SAMPLES.get(fn.key)) in index else None for _, fn in pairs]
    judged = verdicts.judge_many(
        [
            verdicts.Pair(
                fo.side(), fn.side(), fn.measure, fn.unit_kind, drift=drift_of(fn.key, fo, before),
                judged_with=index[other] if other else None,
            )
            for (fo, fn), other in zip(pairs, with_key, strict=True)
        ],
        min_effects=min_effects,
    )  # fmt: skip
    out["figures"] = [
        {**_figure_entry(fo, fn, j), "judged_with": other}
        for (fo, fn), j, other in zip(pairs, judged, with_key, strict=True)
    ]
    for key, fo in a.items():
        if key in b:
            continue
        if not fo.proven:
            out["unproven"].append(
                {"path": key, "name": fo.name, "cache": fo.cache, "n_old": fo.summary.get("n"), "n_new": 0}
            )
        else:
            out["only_old"].append(key)
    return out


def cache_proofs(doc: dict) -> str:
    """How a run's load samples were proven cold or warm: ``three_part``, ``residency`` or ``none``.

    ``three_part`` when they carry a recorded ``cache_proof``; ``residency`` when theirs was upgraded
    from their cache_state (``recorded: false``, disklab.stored); ``none`` without load samples.
    """
    load = (doc.get("experiments") or {}).get("load")
    samples = (load.get("samples") or []) if isinstance(load, dict) else []
    if not samples:
        return "none"
    proven = any(s["cache_proof"].get("recorded", True) for s in samples)
    return "three_part" if proven else "residency"


def n_changed(cmp: dict) -> int:
    """How many figures of a comparison were called changed, power-cut verdict changes included
    (``--fail-on-change``): disturbed and inconclusive figures do not count."""
    return sum(f["verdict"] == CHANGED for f in cmp["figures"]) + sum(v["changed"] for v in cmp["verdicts"])


def section_changes(old: dict, new: dict) -> list[dict]:
    """Experiments whose status differs (e.g. ok -> failed), or that ran in only one run."""
    eo, en = old.get("experiments") or {}, new.get("experiments") or {}
    out = []
    for name in sorted(set(eo) | set(en)):
        so = (eo.get(name) or {}).get("status", "absent") if name in eo else "absent"
        sn = (en.get(name) or {}).get("status", "absent") if name in en else "absent"
        if so != sn:
            out.append({"name": name, "old": so, "new": sn})
    return out


def lab_code_changes(old: dict, new: dict) -> dict:
    """Whether the lab itself changed between two runs: disklab's version and each step's code digest.

    Returns ``{"known": bool, "disklab_version": {"old", "new"} | None, "steps": [name, ...],
    "unrecorded_in": "the old run" | "the new run" | "either run" | None}``; ``steps`` lists the steps
    present in both runs whose code digest differs. ``known`` is False when a run's lab_code is
    unavailable (upgraded from before it was recorded: ``unrecorded_in`` says which), and then nothing
    can be said.
    """
    lo, ln = old.get("lab_code"), new.get("lab_code")
    has_old, has_new = (isinstance(lc, dict) and "steps" in lc for lc in (lo, ln))
    if not (has_old and has_new):
        which = "either run" if not (has_old or has_new) else "the new run" if has_old else "the old run"
        return {"known": False, "disklab_version": None, "steps": [], "unrecorded_in": which}
    version = None
    if lo["disklab_version"] != ln["disklab_version"]:
        version = {"old": lo["disklab_version"], "new": ln["disklab_version"]}
    steps = sorted(n for n in set(lo["steps"]) & set(ln["steps"]) if lo["steps"][n] != ln["steps"][n])
    return {"known": True, "disklab_version": version, "steps": steps, "unrecorded_in": None}


def run_context(doc: dict) -> dict:
    """What a figure's row needs to stand alone: host, run, kernel, the run's own workbench filesystem
    and device (else the audit's), profile, torch and disklab version (None where not recorded)."""
    facts = doc.get("facts") or {}
    own = doc.get("workbench") if isinstance(doc.get("workbench"), dict) else {}
    audit = facts.get("workbench") or {}
    wb = own if "fstype" in own else audit
    device = wb.get("device") if isinstance(wb.get("device"), dict) else {}
    lab = doc.get("lab_code") if isinstance(doc.get("lab_code"), dict) else {}

    def plain(x: object) -> object:
        return None if isinstance(x, dict) else x

    return {
        "host": doc.get("host"),
        "run_id": doc.get("run_id"),
        "started_utc": doc.get("started_utc"),
        "kernel": plain((facts.get("host") or {}).get("kernel")),
        "fstype": plain(wb.get("fstype")),
        "device": plain(device.get("name")),
        "profile": doc.get("profile"),
        "torch": plain((facts.get("versions") or {}).get("torch")),
        "disklab_version": lab.get("disklab_version"),
    }


def counts(figures: list[dict], verdict_changes: int = 0) -> dict:
    """How many figures got each verdict; ``large_undecided``: inconclusive ones whose ratio is beyond
    their T (shown by default); ``cannot_decide``: inconclusive at sizes whose smallest p cannot reach
    the level (3 a side)."""
    out = {v.replace(" ", "_"): sum(f["verdict"] == v for f in figures) for v in verdicts.VERDICTS}
    out["judged"] = len(figures)
    out["large_undecided"] = sum(large_undecided(f) for f in figures)
    out["cannot_decide"] = sum(
        f["verdict"] == INCONCLUSIVE and f["smallest_p"] is not None and f["smallest_p"] > 1 - verdicts.LEVEL
        for f in figures
    )
    out["within_drift"] = sum(bool(f.get("within_drift")) for f in figures)
    out["verdicts_changed"] = verdict_changes
    return out


def large_undecided(f: dict) -> bool:
    """An inconclusive figure whose ratio is beyond its T: a large effect the samples could not decide."""
    r = f.get("ratio")
    return f["verdict"] == INCONCLUSIVE and r is not None and abs(math.log(r)) >= math.log1p(f["min_effect"])


def compare_runs(
    old: dict, new: dict, min_effects: dict[str, float] | None = None, earlier: list[dict] | None = None
) -> dict:
    """Compare two results documents of the same schema version (old first); ``earlier``: the host's runs
    before ``old`` (oldest first), whose medians give its run-to-run drift (:func:`compare_figures`).

    Returns::

        {"old_run_id", "new_run_id", "old_host", "new_host", "results_schema_version",
         "rule": RULE, "level": 0.95, "fdr": 0.05, "min_effects": {kind: T},
         "expected_false_calls": str, "context": {"old": run_context, "new": run_context},
         "fact_changes": [{"path", "old", "new"}], "facts_recorded_in_one": [{"path", "old", "new"}],
         "section_changes": [{"name", "old", "new"}],
         "lab_code_changes": {"known", "disklab_version", "steps"},
         "figures": [{"path", "label", "name", "experiment", "unit", "stage", "cache", "method", "file",
                      "populate", "old": {"n", "median", "min", "max"[, "p90", "p99"]}, "new": {...},
                      "median_ratio", **disklab.verdicts.judge_many's verdict}],
         "figures_only_old": [path], "figures_only_new": [path],
         "figures_unproven": [{"path", "name", "cache", "n_old", "n_new"}],
         "cache_proof": {"old", "new"}: "three_part" | "residency" | "none" (see cache_proofs),
         "values": [{"path", "name", "unit", "cache", "old", "new", "ratio"}],
         "verdicts": [{"path", "name", "old", "new", "changed"}],
         "counts": counts()}

    ``path`` is the figure's key (:class:`disklab.figures.Figure`), the same in
    every run and on every host; ``label`` and ``name`` are its readable name;
    ``old`` and ``new`` hold each run's median and number of samples ``n``;
    ``stage`` and ``cache`` are None for a figure without a readiness stage or
    cache state. ``min_effects`` overrides T per kind (``--min-effect``). See
    :func:`compare_figures` for the other lists.

    Raises ValueError when either is not a results document or their
    schema_version differ (read both with disklab.stored first, which upgrades them).
    """
    for name, doc in (("old", old), ("new", new)):
        if not isinstance(doc, dict) or "schema_version" not in doc or "experiments" not in doc:
            raise ValueError(f"{name} must be a results document with schema_version and experiments")
    if old["schema_version"] != new["schema_version"]:
        raise ValueError(
            f"old and new must have the same schema_version (read both with disklab.stored), "
            f"got {old['schema_version']} and {new['schema_version']}"
        )
    found = compare_figures(old, new, min_effects, earlier)
    figures = found["figures"]
    changed_facts, facts_in_one = recorded_in_one(fact_changes(old, new))
    return {
        "old_run_id": old.get("run_id"),
        "new_run_id": new.get("run_id"),
        "old_host": old.get("host"),
        "new_host": new.get("host"),
        "results_schema_version": new["schema_version"],
        "rule": RULE,
        "level": verdicts.LEVEL,
        "fdr": verdicts.FDR,
        "min_effects": {k: verdicts.min_effect(k, min_effects) for k in verdicts.MIN_EFFECT},
        "expected_false_calls": verdicts.expected_false_calls(
            len(figures), judged_with=sum(f["judged_with"] is not None for f in figures)
        ),
        "context": {"old": run_context(old), "new": run_context(new)},
        "drift_runs": min(verdicts.HISTORY_MAX_RUNS, 1 + sum(comparable(d, old) for d in earlier or [])),
        "fact_changes": changed_facts,
        "facts_recorded_in_one": facts_in_one,
        "condition_changes": condition_changes(old, new),
        "section_changes": section_changes(old, new),
        "lab_code_changes": lab_code_changes(old, new),
        "figures": figures,
        "figures_only_old": found["only_old"],
        "figures_only_new": found["only_new"],
        "figures_unproven": found["unproven"],
        "cache_proof": {"old": cache_proofs(old), "new": cache_proofs(new)},
        "values": found["values"],
        "verdicts": found["verdicts"],
        "counts": counts(figures, sum(v["changed"] for v in found["verdicts"])),
    }


def to_json(cmp: dict) -> str:
    """:func:`compare_runs`'s result as JSON text (``disklab compare --json``), with its noise rule: kind
    "compare" and its schema_version first (disklab/schema/compare.schema.json)."""
    return json.dumps(output("compare", cmp), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _latency_us(x: float) -> str:
    """A latency given in µs: in ns below 1 µs (units.ns), else units.us (µs, or ms from 10 ms)."""
    return units.ns(x * 1e3) if abs(x) < 1 else units.us(x)


def format_value(x: float, unit: str | None) -> str:
    """One sample value with its unit, in binary units for bytes.

    Latencies (``ns``, ``us``, ``ms``) below 1 µs stay in ns (``71 ns``), else µs
    or ms; seconds below 10 ms are shown the same way, since ``units.secs`` keeps
    only ms resolution.
    """
    if unit == "ns":
        return _latency_us(x / 1e3)
    if unit == "us":
        return _latency_us(x)
    if unit == "ms":
        return _latency_us(x * 1e3)
    if unit == "s":
        return units.secs(x) if abs(x) >= 0.01 else _latency_us(x * 1e6)
    if unit == "bytes":
        return units.ibytes(x)
    if unit == "mib_s":
        return units.mib_s(x)
    return f"{x:.4g}" if unit is None else f"{x:.4g} {unit}"


def _fact_text(value: object) -> str:
    if isinstance(value, (list, dict)) and not (isinstance(value, dict) and set(value) == {"unavailable"}):
        return json.dumps(value, sort_keys=True)
    return units.fact(value)


def _lab_code_text(lc: dict) -> str:
    """One line: did the lab's own code change between the runs (so a moved figure may be the lab's)?"""
    if not lc["known"]:
        where = lc["unrecorded_in"]
        return f"Lab code: not recorded in {where}, so a change of the lab itself cannot be ruled out"
    parts = []
    if lc["disklab_version"]:
        parts.append(f"disklab {lc['disklab_version']['old']} -> {lc['disklab_version']['new']}")
    if lc["steps"]:
        parts.append(f"code of {', '.join(lc['steps'])} changed")
    return "Lab code: " + ("; ".join(parts) if parts else "unchanged (same disklab version and step code)")


# What each kind of figure is called in the text (the keys of verdicts.MIN_EFFECT).
MEASURE_WORDS = {
    "durable_sync": "durable sync latency",
    "latency": "other latency",
    "load_time": "load time",
    "time": "other time",
    "rate": "rate",
    "peak_rss": "peak RSS",
    "size": "other size",
}


def shown(f: dict) -> bool:
    """Whether the default text lists a figure: changed, disturbed, or a large effect left undecided."""
    return f["verdict"] in (CHANGED, DISTURBED) or large_undecided(f)


def _verdict_cell(f: dict) -> str:
    if f["verdict"] == CHANGED:
        return f"changed, {f['words']}"
    if f["verdict"] == NO_CHANGE:
        return f"no change (±{f['min_effect'] * 100:g} %)"
    if f["verdict"] == DISTURBED:
        return f"disturbed ({f['words']})" if f["words"] else "disturbed"
    if f.get("within_drift"):
        return "inconclusive, within drift"
    return "inconclusive"


def _ratio_cell(f: dict) -> str:
    if f["ratio"] is None:
        return "n/a"
    if verdicts.shows_equivalence(f):
        low, high = verdicts.ratio_text(f["eq_low"]), verdicts.ratio_text(f["eq_high"])
        return f"{verdicts.ratio_text(f['ratio'])} ({low}..{high}, {f['eq_level'] * 100:g} %)"
    if f["low"] is None:
        return f"{verdicts.ratio_text(f['ratio'])} (no interval)"
    low, high = verdicts.ratio_text(f["low"]), verdicts.ratio_text(f["high"])
    return f"{verdicts.ratio_text(f['ratio'])} ({low}..{high})"


def _test_cell(f: dict) -> str:
    if f["test"] is None:
        return "not tested"
    kind = "exact" if f["test"].startswith("exact") else "normal"
    return f"{kind}, p = {f['p']:.2g}, q = {f['q']:.2g}"


def _row(f: dict) -> list[str]:
    o, n, u = f["old"], f["new"], f["unit"]
    size = f"{f['n_old']}/{f['n_new']} {f['units']}"
    medians = f"{format_value(o['median'], u)} -> {format_value(n['median'], u)}"
    return [f["label"], medians, _ratio_cell(f), _verdict_cell(f), size, _test_cell(f)]


def noise_missing(cmp: dict) -> dict:
    """Why each run recorded no noise of its samples: ``{"old": why | None, "new": why | None}``, None
    for a run that recorded some; :data:`disklab.stored.NOISE_NOT_RECORDED_RUN` for one whose figures carry
    none (a run upgraded from before noise records) or that has no figures."""
    out = {}
    for side in ("old", "new"):
        states = [f["noise"][side] for f in cmp["figures"]]
        recorded = bool(states) and any(s != "not recorded" for s in states)
        out[side] = None if recorded else stored.NOISE_NOT_RECORDED_RUN
    return out


def _table(rows: list[list[str]], head: list[str]) -> list[str]:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*head).rstrip(), fmt.format(*("-" * w for w in widths)).rstrip()] + [
        fmt.format(*r).rstrip() for r in rows
    ]


def _detail(f: dict, missing: dict) -> list[str]:
    """Lines under a figure's row: its noise, and what would decide it."""
    out = [f"      {r}" for r in f["noise"]["reasons"]]
    if f["verdict"] == INCONCLUSIVE or f["verdict"] == DISTURBED:
        out.append(f"      {f['why']}")
    elif f["noise"]["judged_on"] == "undisturbed":
        out.append("      judged on the undisturbed units only")
    for side in ("old", "new"):
        if not missing[side] and f["noise"][side] == "not recorded":
            out.append(f"      the {side} run recorded no noise for this figure: not judged quiet")
    return out


def _inconclusive_parts(c: dict) -> str:
    parts = []
    if c["cannot_decide"]:
        parts.append(f"{c['cannot_decide']} at sizes that cannot reach p < 0.05, such as 3 a side")
    if c.get("within_drift"):
        parts.append(f"{c['within_drift']} that differ, but within the host's run-to-run drift")
    return f" ({'; '.join(parts)})" if parts else ""


def _drift_text(cmp: dict) -> str:
    """Where each figure's run-to-run drift came from, in a sentence."""
    figures = cmp["figures"]
    measured = [f for f in figures if (f.get("drift") or {}).get("source") == "history"]
    assumed = ", ".join(f"{MEASURE_WORDS[k]} ±{v * 100:g} %" for k, v in verdicts.RUN_DRIFT.items())
    head = (
        "between two runs of one host each figure's p and interval include how far its runs move when "
        "nothing changed"
    )
    runs = cmp.get("drift_runs", 1)
    where = f"this host's {runs} comparable run(s) up to the old one" if runs > 1 else "the old run alone"
    if measured:
        return (
            f"{head}: measured for {len(measured)} of {len(figures)} figures from {where}; assumed for the "
            f"rest ({assumed}; docs/statistics.md)."
        )
    return (
        f"{head}: assumed for every figure ({assumed}; docs/statistics.md), as {where} hold fewer than "
        f"{verdicts.HISTORY_MIN_RUNS} runs of it; `disklab compare HOST` reads the host's earlier runs."
    )


def render_compare_text(cmp: dict, show_all: bool = False) -> str:
    """Plain-text rendering of :func:`compare_runs` for the terminal.

    By default the figure table lists what changed, what was disturbed, and the large effects the
    samples could not decide (:func:`shown`); ``show_all`` lists every judged figure.
    """
    head = f"Run {cmp['old_run_id']} -> {cmp['new_run_id']}"
    if cmp["old_host"] == cmp["new_host"]:
        head += f" on host {cmp['new_host']}"
    else:
        head += f" (hosts {cmp['old_host']} -> {cmp['new_host']})"
    lines = [head, ""]
    lines.append(f"Facts that changed: {len(cmp['fact_changes'])}")
    for c in cmp["fact_changes"]:
        lines.append(f"  {c['path']}: {_fact_text(c['old'])} -> {_fact_text(c['new'])}")
    if cmp.get("facts_recorded_in_one"):
        lines.append(f"Recorded in one run only, not counted ({ONE_RUN_ONLY}):")
    for c in cmp.get("facts_recorded_in_one") or []:
        lines.append(f"  {c['path']}: {_fact_text(c['old'])} -> {_fact_text(c['new'])}")
    if cmp.get("condition_changes"):
        lines.append("Conditions at each run's audit (how quiet the host was then, not a fact of the host):")
    for c in cmp.get("condition_changes") or []:
        advice = f" ({c['advice']})" if c["advice"] else ""
        lines.append(f"  {c['check']}: {c['old']} -> {c['new']}{advice}")
    lines += ["", _lab_code_text(cmp["lab_code_changes"])]
    if cmp["section_changes"]:
        lines += ["", "Experiments whose status changed:"]
    for s in cmp["section_changes"]:
        lines.append(f"  experiment {s['name']}: {s['old']} -> {s['new']}")
    c = cmp["counts"]
    lines += [
        "",
        f"Figures: {c['judged']} judged: {c['changed']} changed, {c['disturbed']} disturbed, "
        f"{c['no_change']} no change beyond their minimum effect, {c['inconclusive']} inconclusive"
        + _inconclusive_parts(c),
        f"  Test: {cmp['rule']}.",
        "  Minimum effect T: "
        + ", ".join(f"{MEASURE_WORDS[k]} ±{v * 100:g} %" for k, v in cmp["min_effects"].items())
        + " (--min-effect KIND=SHARE sets one).",
        f"  Run-to-run drift D: {_drift_text(cmp)}",
        f"  {cmp['expected_false_calls']}.",
    ]
    missing = noise_missing(cmp)
    for side in ("old", "new"):
        if cmp["figures"] and missing[side]:
            lines.append(
                f"  Noise: the {side} run recorded none ({missing[side]}): its samples "
                "are neither quiet nor disturbed, so a busy host cannot be told from a changed one there."
            )
    figures = cmp["figures"] if show_all else [f for f in cmp["figures"] if shown(f)]
    if not cmp["figures"]:
        lines.append("  none found in both runs")
    elif figures:
        lines.append("")
        head_row = [
            "figure",
            "median old -> new",
            "ratio (95 % interval; 90 % within ±T)",
            "verdict",
            "n a side",
            "test",
        ]
        rows = _table([_row(f) for f in figures], head_row)
        lines += rows[:2]
        for f, row in zip(figures, rows[2:], strict=True):
            lines.append(row)
            lines += _detail(f, missing)
            if "p99" in f["old"] and show_all and min(f["old"]["n"], f["new"]["n"]) >= PERCENTILE_MIN_SAMPLES:
                old, new = ("/".join(format_value(f[side][k], f["unit"]) for k in ("median", "p90", "p99"))
                            for side in ("old", "new"))  # fmt: skip
                lines.append(f"      p50/p90/p99 {old} -> {new}")
    if not show_all and cmp["figures"]:
        hidden = len(cmp["figures"]) - len(figures)
        if hidden:
            lines.append(
                f"  Not shown: {hidden} figure(s) with no change beyond T or an undecided effect within it "
                "(--all lists every figure)."
            )
        elif not figures:
            lines.append("  No figure changed, none was disturbed, and no large effect was left undecided.")
    for v in cmp["values"]:
        ratio = "" if v["ratio"] is None else f" ({units.ratio(v['ratio'])})"
        lines.append(
            f"  {v['name']}: {format_value(v['old'], v['unit'])} -> {format_value(v['new'], v['unit'])}"
            f"{ratio}; one stored value per run, no samples: not judged"
        )
    moved = [v for v in cmp["verdicts"] if v["changed"]]
    if cmp["verdicts"]:
        lines += ["", f"Power-cut verdicts: {len(moved)} of {len(cmp['verdicts'])} changed"]
    for v in cmp["verdicts"] if show_all else moved:
        what = "changed" if v["changed"] else "unchanged"
        lines.append(f"  {v['name']}: {v['old']} -> {v['new']}: {what}")
    cp = cmp["cache_proof"]
    if "none" not in cp.values() and cp["old"] != cp["new"]:
        words = {"three_part": "the three-part cache proof", "residency": "residency alone"}
        lines.append(
            f"  cold and warm load samples rest on {words[cp['old']]} in the old run and on "
            f"{words[cp['new']]} in the new one"
        )
    if cmp["figures_unproven"]:
        lines.append(
            "  not compared, their cache proof failed (never reported as cold or warm): "
            + ", ".join(f"{u['name']} (n={u['n_old']} -> {u['n_new']})" for u in cmp["figures_unproven"])
        )
    for label, paths in (
        ("only in the old run", cmp["figures_only_old"]),
        ("only in the new run", cmp["figures_only_new"]),
    ):
        if paths:
            lines.append(f"  {label}: {', '.join(paths)}")
    return "\n".join(lines) + "\n"


def _run_order_key(path: Path) -> tuple[str, str]:
    """(started_utc, run_id) of a stored run; an unreadable file sorts by its name alone."""
    try:
        doc = json.loads(path.read_text())
        return (str(doc.get("started_utc", "")), str(doc.get("run_id", path.stem)))
    except (OSError, ValueError):
        return ("", path.stem)


def list_runs(host_dir: Path) -> list[Path]:
    """The host's stored runs ``<host_dir>/runs/*.json``, oldest first.

    Ordered by each run's ``started_utc`` (ISO 8601 UTC, so text order is time
    order), then run_id. Returns [] when the host has no runs directory.
    """
    runs_dir = Path(host_dir) / "runs"
    if not runs_dir.is_dir():
        return []
    return sorted((p for p in runs_dir.glob("*.json") if not p.name.startswith(".")), key=_run_order_key)


def find_previous_run(host_dir: Path, run_id: str) -> Path | None:
    """The run stored just before ``run_id`` under ``<host_dir>/runs/``, or None if it is the first.

    Raises FileNotFoundError naming the run when ``<host_dir>/runs/<run_id>.json``
    is not stored there.
    """
    runs = list_runs(host_dir)
    target = Path(host_dir) / "runs" / f"{run_id}.json"
    if target not in runs:
        raise FileNotFoundError(f"run_id {run_id!r} is not stored under {Path(host_dir) / 'runs'}")
    i = runs.index(target)
    return runs[i - 1] if i else None
