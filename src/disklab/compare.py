"""Compare two runs of the lab: what changed on the host, and which figures moved beyond noise.

Controller side: standard library plus :mod:`disklab.units`, no torch. Both
inputs are results documents as ``labscripts/lab.py`` writes them (and as
``disklab.results`` loads and migrates them)::

    {"schema_version", "run_id", "host", "profile", "sizes", "lab_python",
     "lab_platform", "facts": {...}, "experiments": {NAME: section}}

Noise rule (:data:`NOISE_RULE`): with fewer than :data:`RANK_TEST_MIN_SAMPLES`
samples on either side, a figure is ``"changed"`` only when the min..max ranges
of the two runs' raw samples do not overlap. With at least that many on both
sides one outlier would widen a range over everything, so a two-sided
Mann-Whitney U test (normal approximation, tie-corrected, continuity-corrected)
judges instead: ``"changed"`` when p < :data:`ALPHA` and the medians differ by
more than :data:`MIN_EFFECT` of the previous median (so a huge n cannot flag a
trivial shift). Anything else is ``"within noise"``; fewer than
:data:`MIN_SAMPLES` on either side is ``"too few samples"``. Medians and their
ratio are shown either way, never a mean.

Figures come from :func:`disklab.figures.extract`, the one extraction shared
with the fleet page and ``disklab export``: every raw sample list, and the load
step's samples grouped by file, method, populate mode, cache state and
readiness stage (a figure's key names all of them, so only figures at the same
stage and cache state are ever paired). A cold figure holds only samples whose
cache proof says cold (``cache_proof.verdict``, else the sample's
``cache_state``); samples that failed their proof are listed as not compared.
:func:`to_json` is what ``disklab compare --json`` prints; :func:`n_changed`
counts what ``--fail-on-change`` fails on (figures changed beyond noise and
changed power-cut verdicts; changed facts alone do not count).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from disklab import figures as figs
from disklab import units
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

CHANGED, WITHIN_NOISE, TOO_FEW = "changed", "within noise", "too few samples"
# Fewer samples than this on either side: no range, so no verdict.
MIN_SAMPLES = 2
# Both sides at least this many samples: the rank test replaces the range rule.
RANK_TEST_MIN_SAMPLES = 20
# Rank test: two-sided p below ALPHA and |median change| above MIN_EFFECT of the previous median.
ALPHA = 0.01
MIN_EFFECT = 0.05
RANGES, RANK_TEST = "ranges", "mann_whitney_u"
# The text shows p90/p99 only from this many samples in both runs (below it they are the max, nearly).
PERCENTILE_MIN_SAMPLES = 5
NOISE_RULE = (
    f'with fewer than {RANK_TEST_MIN_SAMPLES} samples in either run, a figure is "{CHANGED}" only when '
    "the min..max ranges of the two runs' samples do not overlap; with "
    f"{RANK_TEST_MIN_SAMPLES} or more in both, only when a two-sided Mann-Whitney U test "
    f"(normal approximation, tie-corrected) gives p < {ALPHA:g} and the medians differ by more than "
    f'{MIN_EFFECT * 100:g} % of the previous median; otherwise it is "{WITHIN_NOISE}" '
    f'(under {MIN_SAMPLES} samples in either run: "{TOO_FEW}")'
)
# Run-level settings compared alongside the host facts (a profile change makes figures incomparable).
RUN_KEYS = ("host", "profile", "sizes", "lab_python", "lab_platform")
_NOT_RECORDED = {"unavailable": "not recorded in this run"}
# Leaves that record when or how the audit ran, not a property of the host: never a "changed fact".
NOT_FACTS = {"facts.collected_utc", "facts.versions.python_executable"}


def _flatten_facts(obj: object, path: str, out: dict[str, object]) -> None:
    """Leaves of a facts tree by dotted path; ``{"unavailable": reason}`` and lists are leaves."""
    if isinstance(obj, dict) and obj and set(obj) != {"unavailable"}:
        for key in obj:
            _flatten_facts(obj[key], f"{path}.{key}" if path else str(key), out)
    else:
        out[path] = obj


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
    changes = []
    for path in sorted((set(flat_old) | set(flat_new)) - NOT_FACTS):
        a = flat_old.get(path, _NOT_RECORDED)
        b = flat_new.get(path, _NOT_RECORDED)
        if a != b:
            changes.append({"path": path, "old": a, "new": b})
    return changes


def _ranks(values: list[float]) -> tuple[list[float], float]:
    """Average ranks (1-based, ties share their mean rank) and the tie term sum(t**3 - t)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = 0.0
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    return ranks, ties


def mann_whitney_u(a: list[float], b: list[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test of samples ``a`` against ``b``: ``(U of a, p)``.

    Normal approximation with the tie correction of the variance and a 0.5
    continuity correction (as scipy.stats.mannwhitneyu with method="asymptotic",
    use_continuity=True; Mann and Whitney 1947). O(n log n) for the sort.
    p is 1.0 when every value is equal. Raises ValueError when either is empty.
    """
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        raise ValueError(f"mann_whitney_u needs samples on both sides, got n={n1} and n={n2}")
    ranks, ties = _ranks(list(a) + list(b))
    n = n1 + n2
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return u1, 1.0
    z = max(abs(u1 - n1 * n2 / 2) - 0.5, 0.0) / math.sqrt(var)
    return u1, math.erfc(z / math.sqrt(2))


def judge(old_samples: list[float], new_samples: list[float]) -> dict:
    """The noise rule (:data:`NOISE_RULE`) on two runs' raw samples.

    Returns ``{"verdict", "test": "ranges" | "mann_whitney_u" | None, "p_value": float | None,
    "judged_by": str}``; ``test`` and ``p_value`` are None for too few samples, ``p_value`` None
    for the range rule; ``judged_by`` says it in words (``ranges overlap``, ``Mann-Whitney U p=3.1e-07``).
    """
    so, sn = sorted(old_samples), sorted(new_samples)
    if len(so) < MIN_SAMPLES or len(sn) < MIN_SAMPLES:
        return {"verdict": TOO_FEW, "test": None, "p_value": None, "judged_by": f"n < {MIN_SAMPLES}"}
    if len(so) < RANK_TEST_MIN_SAMPLES or len(sn) < RANK_TEST_MIN_SAMPLES:
        disjoint = sn[-1] < so[0] or sn[0] > so[-1]
        return {
            "verdict": CHANGED if disjoint else WITHIN_NOISE,
            "test": RANGES,
            "p_value": None,
            "judged_by": "ranges do not overlap" if disjoint else "ranges overlap",
        }
    _, p = mann_whitney_u(so, sn)
    mo, mn = percentile(so, 50), percentile(sn, 50)
    big_enough = abs(mn - mo) > MIN_EFFECT * abs(mo) if mo else mn != mo
    v = CHANGED if p < ALPHA and big_enough else WITHIN_NOISE
    return {
        "verdict": v,
        "test": RANK_TEST,
        "p_value": p,
        "judged_by": f"Mann-Whitney U p={p:.2g}" if p else "Mann-Whitney U p<1e-300",
    }


def _figure_entry(fo: figs.Figure, fn: figs.Figure) -> dict:
    """One judged figure: both runs' stats, the ratio of medians, the noise rule's verdict."""
    so, sn = fo.summary, fn.summary
    judged = judge(list(fo.samples), list(fn.samples))
    direction = None
    if judged["verdict"] == CHANGED:
        direction = "up" if sn["median"] > so["median"] else "down"
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
        "ratio": sn["median"] / so["median"] if so["median"] else None,
        "direction": direction,
        **judged,
    }


def compare_figures(old: dict, new: dict) -> dict:
    """Every figure of :func:`disklab.figures.extract` that both runs have, paired by key.

    A key names the experiment, and for a load figure its file, method, populate
    mode, cache state and readiness stage, so only figures at the same stage and
    the same cache state are ever put side by side. Returns::

        {"figures": [judged figure], "only_old": [key], "only_new": [key],
         "unproven": [{"path", "name", "cache", "n_old", "n_new"}],
         "values": [{"path", "name", "unit", "cache", "old", "new", "ratio"}],
         "verdicts": [{"path", "name", "old", "new", "changed"}]}

    ``figures`` holds the raw-sample figures whose cache state is proven (or has
    none), judged by :data:`NOISE_RULE`; ``unproven`` the load figures of samples
    that failed their cache proof (cold_unverified, cold_unproven,
    warm_unverified), left out of the judgement; ``values`` single stored numbers
    (no samples, so no noise to judge by); ``verdicts`` categorical figures (the
    power-cut verdicts), ``changed`` when they differ.
    """
    a = figs.by_key(figs.extract(old))
    b = figs.by_key(figs.extract(new))
    out: dict[str, list] = {
        k: [] for k in ("figures", "only_old", "only_new", "unproven", "values", "verdicts")
    }
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
            out["figures"].append(_figure_entry(fo, fn))
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

    ``three_part`` when they carry a recorded ``cache_proof``; ``residency`` when not (a run from before
    results 3 carries one upgraded from its cache_state, marked ``recorded: false``); ``none`` without
    load samples.
    """
    load = (doc.get("experiments") or {}).get("load")
    samples = (load.get("samples") or []) if isinstance(load, dict) else []
    if not samples:
        return "none"
    proven = any(
        isinstance(s.get("cache_proof"), dict) and s["cache_proof"].get("recorded", True) for s in samples
    )
    return "three_part" if proven else "residency"


def n_changed(cmp: dict) -> int:
    """How many figures of a comparison changed beyond noise, verdict changes included."""
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

    Returns ``{"known": bool, "disklab_version": {"old", "new"} | None, "steps": [name, ...]}``;
    ``steps`` lists the steps present in both runs whose code digest differs. ``known`` is False
    when either run predates the record (results version 1), and then nothing can be said.
    """
    lo, ln = old.get("lab_code"), new.get("lab_code")
    if not (isinstance(lo, dict) and isinstance(ln, dict) and "steps" in lo and "steps" in ln):
        return {"known": False, "disklab_version": None, "steps": []}
    version = None
    if lo["disklab_version"] != ln["disklab_version"]:
        version = {"old": lo["disklab_version"], "new": ln["disklab_version"]}
    steps = sorted(n for n in set(lo["steps"]) & set(ln["steps"]) if lo["steps"][n] != ln["steps"][n])
    return {"known": True, "disklab_version": version, "steps": steps}


def compare_runs(old: dict, new: dict) -> dict:
    """Compare two results documents of the same schema version (old first).

    Returns::

        {"old_run_id", "new_run_id", "old_host", "new_host", "results_schema_version",
         "rule": NOISE_RULE, "min_samples": MIN_SAMPLES,
         "rank_test_min_samples": RANK_TEST_MIN_SAMPLES, "alpha": ALPHA, "min_effect": MIN_EFFECT,
         "fact_changes": [{"path", "old", "new"}],
         "section_changes": [{"name", "old", "new"}],
         "lab_code_changes": {"known", "disklab_version", "steps"},
         "figures": [{"path", "label", "name", "experiment", "unit", "stage", "cache", "method", "file",
                      "populate", "old": {"n", "median", "min", "max"[, "p90", "p99"]}, "new": {...},
                      "ratio", "direction", "verdict", "test", "p_value", "judged_by"}],
         "figures_only_old": [path], "figures_only_new": [path],
         "figures_unproven": [{"path", "name", "cache", "n_old", "n_new"}],
         "cache_proof": {"old", "new"}: "three_part" | "residency" | "none" (see cache_proofs),
         "values": [{"path", "name", "unit", "cache", "old", "new", "ratio"}],
         "verdicts": [{"path", "name", "old", "new", "changed"}],
         "counts": {"changed", "within_noise", "too_few", "verdicts_changed"}}

    ``path`` is the figure's key (:class:`disklab.figures.Figure`), the same in
    every run and on every host; ``label`` and ``name`` are its readable name;
    ``old`` and ``new`` hold each run's median and number of samples ``n``;
    ``stage`` and ``cache`` are None for a figure without a readiness stage or
    cache state. See :func:`compare_figures` for the other lists.

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
    found = compare_figures(old, new)
    figures = found["figures"]
    return {
        "old_run_id": old.get("run_id"),
        "new_run_id": new.get("run_id"),
        "old_host": old.get("host"),
        "new_host": new.get("host"),
        "results_schema_version": new["schema_version"],
        "rule": NOISE_RULE,
        "min_samples": MIN_SAMPLES,
        "rank_test_min_samples": RANK_TEST_MIN_SAMPLES,
        "alpha": ALPHA,
        "min_effect": MIN_EFFECT,
        "fact_changes": fact_changes(old, new),
        "section_changes": section_changes(old, new),
        "lab_code_changes": lab_code_changes(old, new),
        "figures": figures,
        "figures_only_old": found["only_old"],
        "figures_only_new": found["only_new"],
        "figures_unproven": found["unproven"],
        "cache_proof": {"old": cache_proofs(old), "new": cache_proofs(new)},
        "values": found["values"],
        "verdicts": found["verdicts"],
        "counts": {
            "changed": sum(f["verdict"] == CHANGED for f in figures),
            "within_noise": sum(f["verdict"] == WITHIN_NOISE for f in figures),
            "too_few": sum(f["verdict"] == TOO_FEW for f in figures),
            "verdicts_changed": sum(v["changed"] for v in found["verdicts"]),
        },
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
        return "Lab code: not recorded in both runs, so a change of the lab itself cannot be ruled out"
    parts = []
    if lc["disklab_version"]:
        parts.append(f"disklab {lc['disklab_version']['old']} -> {lc['disklab_version']['new']}")
    if lc["steps"]:
        parts.append(f"code of {', '.join(lc['steps'])} changed")
    return "Lab code: " + ("; ".join(parts) if parts else "unchanged (same disklab version and step code)")


def render_compare_text(cmp: dict) -> str:
    """Plain-text rendering of :func:`compare_runs` for the terminal (one figure per line)."""
    head = f"Run {cmp['old_run_id']} -> {cmp['new_run_id']}"
    if cmp["old_host"] == cmp["new_host"]:
        head += f" on host {cmp['new_host']}"
    else:
        head += f" (hosts {cmp['old_host']} -> {cmp['new_host']})"
    lines = [head, ""]
    lines.append(f"Facts that changed: {len(cmp['fact_changes'])}")
    for c in cmp["fact_changes"]:
        lines.append(f"  {c['path']}: {_fact_text(c['old'])} -> {_fact_text(c['new'])}")
    lines += ["", _lab_code_text(cmp["lab_code_changes"])]
    if cmp["section_changes"]:
        lines += ["", "Experiments whose status changed:"]
    for s in cmp["section_changes"]:
        lines.append(f"  experiment {s['name']}: {s['old']} -> {s['new']}")
    lines += ["", f"Figures ({cmp['rule']}):"]
    if not cmp["figures"]:
        lines.append("  none found in both runs")
    c = cmp["counts"]
    lines.append(
        f"  {c['changed']} changed beyond noise, {c['within_noise']} within noise, {c['too_few']} with too "
        f"few samples; {c['verdicts_changed']} verdict(s) changed"
    )
    for f in cmp["figures"]:
        o, n, u = f["old"], f["new"], f["unit"]
        ratio = "" if f["ratio"] is None else f" ({units.ratio(f['ratio'])})"
        arrow = {"up": ", up", "down": ", down", None: ""}[f["direction"]]
        # a load figure's name already says its file, method, cache state and stage
        where = "" if f["stage"] else f" ({f['path']})"
        lines.append(
            f"  {f['label']}{where}: median {format_value(o['median'], u)} -> "
            f"{format_value(n['median'], u)}{ratio}; "
            f"range {format_value(o['min'], u)}..{format_value(o['max'], u)} (n={o['n']}) vs "
            f"{format_value(n['min'], u)}..{format_value(n['max'], u)} (n={n['n']}); "
            f"{f['judged_by']}: {f['verdict']}{arrow}"
        )
        if "p99" in o and min(o["n"], n["n"]) >= PERCENTILE_MIN_SAMPLES:
            lines.append(
                f"      p50/p90/p99 {'/'.join(format_value(o[k], u) for k in ('median', 'p90', 'p99'))} -> "
                f"{'/'.join(format_value(n[k], u) for k in ('median', 'p90', 'p99'))}"
            )
    few = [f["label"] for f in cmp["figures"] if f["verdict"] == TOO_FEW]
    if few:
        lines.append(f"  too few samples to judge: {', '.join(few)}")
    for v in cmp["values"]:
        ratio = "" if v["ratio"] is None else f" ({units.ratio(v['ratio'])})"
        lines.append(
            f"  {v['name']}: {format_value(v['old'], v['unit'])} -> {format_value(v['new'], v['unit'])}"
            f"{ratio}; one stored value per run, no samples: not judged"
        )
    for v in cmp["verdicts"]:
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
