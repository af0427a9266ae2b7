"""Compare two runs of the lab: what changed on the host, and which figures moved beyond noise.

Controller side: standard library plus :mod:`disklab.units`, no torch. Both
inputs are results documents as ``labscripts/lab.py`` writes them (and as
``disklab.results`` loads and migrates them)::

    {"schema_version", "run_id", "host", "profile", "sizes", "lab_python",
     "lab_platform", "facts": {...}, "experiments": {NAME: section}}

Noise rule: a figure is ``"changed"`` only when the min..max ranges of the
two runs' raw samples do not overlap; any overlap is ``"within noise"``. A
figure with fewer than :data:`MIN_SAMPLES` samples on either side has no range
to judge and gets ``"too few samples"``. Medians and their ratio are shown
either way, never a mean.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from disklab import units

NOISE_RULE = (
    'a figure is "changed" only when the min..max ranges of the two runs\' samples do not overlap; '
    'otherwise it is "within noise"'
)
CHANGED, WITHIN_NOISE, TOO_FEW = "changed", "within noise", "too few samples"
# Fewer samples than this on either side: no range, so no verdict.
MIN_SAMPLES = 2
# Run-level settings compared alongside the host facts (a profile change makes figures incomparable).
RUN_KEYS = ("host", "profile", "sizes", "lab_python", "lab_platform")
# Keys that name an element of a list of dicts, so list items match by name, not position.
LABEL_KEYS = ("name", "mode", "method", "stage", "kind", "label", "id")
# A samples key: "samples", "samples_ns", "fsync_samples_us", "read_samples_mib_s", ...
_SAMPLES_KEY = re.compile(r"(?:^|_)samples(?:_(?P<unit>[a-z_]+))?$")
LATENCY_UNITS = {"ns", "us", "ms", "s"}
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


def _is_samples(key: str, value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and bool(_SAMPLES_KEY.search(key))
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    )


def _label(item: object, index: int) -> str:
    if isinstance(item, dict):
        for key in LABEL_KEYS:
            if isinstance(item.get(key), (str, int)) and not isinstance(item.get(key), bool):
                return f"[{key}={item[key]}]"
    return f"[{index}]"


def find_samples(obj: object, path: str = "") -> dict[str, list[float]]:
    """Every list of raw samples in a results tree, by path, in document order.

    A samples list is a non-empty list of finite numbers under a key that is
    ``samples`` or contains ``samples`` as a whole ``_``-separated word, e.g.
    ``samples_ns``, ``fsync_samples_us``, ``read_samples_mib_s``. Dict keys add
    ``.key``; items of a list of dicts add ``[mode=fsync]`` when the item has a
    label key (:data:`LABEL_KEYS`), else ``[i]``, so both runs' paths match.
    """
    found: dict[str, list[float]] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = f"{path}.{key}" if path else str(key)
            if _is_samples(str(key), value):
                found[sub] = value
            else:
                found.update(find_samples(value, sub))
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            if isinstance(item, (dict, list)):
                found.update(find_samples(item, f"{path}{_label(item, i)}"))
    return found


def unit_of(path: str) -> str | None:
    """The unit a samples key names (``fsync_samples_us`` -> ``us``), or None when it names none."""
    m = _SAMPLES_KEY.search(path.rsplit(".", 1)[-1])
    return m.group("unit") if m else None


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile, numpy's default method (as labcommon.percentile)."""
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def sample_stats(samples: list[float], unit: str | None = None) -> dict:
    """n, median, min and max of raw samples; latency units also get p90 and p99.

    Units are the samples' own (no conversion). Raises ValueError on an empty list.
    """
    if not samples:
        raise ValueError("samples must be a non-empty list of numbers, got []")
    s = sorted(samples)
    stats = {"n": len(s), "median": _percentile(s, 50), "min": s[0], "max": s[-1]}
    if unit in LATENCY_UNITS:
        stats["p90"] = _percentile(s, 90)
        stats["p99"] = _percentile(s, 99)
    return stats


def verdict(old: dict, new: dict) -> str:
    """The noise rule (:data:`NOISE_RULE`) on two :func:`sample_stats` results."""
    if old["n"] < MIN_SAMPLES or new["n"] < MIN_SAMPLES:
        return TOO_FEW
    disjoint = new["max"] < old["min"] or new["min"] > old["max"]
    return CHANGED if disjoint else WITHIN_NOISE


def compare_figures(old: dict, new: dict) -> tuple[list[dict], list[str], list[str]]:
    """Figures found in both runs' experiments, and the paths found in only one.

    Returns ``(figures, only_old, only_new)``; each figure is ``{"path", "unit",
    "old": stats, "new": stats, "ratio": new median / old median (None when the
    old median is 0), "direction": "up" | "down" | None, "verdict"}``.
    """
    a = find_samples(old.get("experiments") or {}, "experiments")
    b = find_samples(new.get("experiments") or {}, "experiments")
    figures = []
    for path, new_samples in b.items():
        if path not in a:
            continue
        unit = unit_of(path)
        so, sn = sample_stats(a[path], unit), sample_stats(new_samples, unit)
        v = verdict(so, sn)
        direction = None
        if v == CHANGED:
            direction = "up" if sn["median"] > so["median"] else "down"
        ratio = sn["median"] / so["median"] if so["median"] else None
        figures.append(
            {
                "path": path,
                "unit": unit,
                "old": so,
                "new": sn,
                "ratio": ratio,
                "direction": direction,
                "verdict": v,
            }
        )
    return figures, [p for p in a if p not in b], [p for p in b if p not in a]


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


def compare_runs(old: dict, new: dict) -> dict:
    """Compare two results documents of the same schema version (old first).

    Returns::

        {"old_run_id", "new_run_id", "old_host", "new_host", "schema_version",
         "rule": NOISE_RULE, "min_samples": MIN_SAMPLES,
         "fact_changes": [{"path", "old", "new"}],
         "section_changes": [{"name", "old", "new"}],
         "figures": [{"path", "unit", "old": {"n", "median", "min", "max"[, "p90", "p99"]},
                      "new": {...}, "ratio", "direction", "verdict"}],
         "figures_only_old": [path], "figures_only_new": [path]}

    Raises ValueError when either is not a results document or their
    schema_version differ (load both with disklab.results first, which migrates).
    """
    for name, doc in (("old", old), ("new", new)):
        if not isinstance(doc, dict) or "schema_version" not in doc or "experiments" not in doc:
            raise ValueError(f"{name} must be a results document with schema_version and experiments")
    if old["schema_version"] != new["schema_version"]:
        raise ValueError(
            f"old and new must have the same schema_version (migrate both with disklab.results), "
            f"got {old['schema_version']} and {new['schema_version']}"
        )
    figures, only_old, only_new = compare_figures(old, new)
    return {
        "old_run_id": old.get("run_id"),
        "new_run_id": new.get("run_id"),
        "old_host": old.get("host"),
        "new_host": new.get("host"),
        "schema_version": new["schema_version"],
        "rule": NOISE_RULE,
        "min_samples": MIN_SAMPLES,
        "fact_changes": fact_changes(old, new),
        "section_changes": section_changes(old, new),
        "figures": figures,
        "figures_only_old": only_old,
        "figures_only_new": only_new,
    }


def format_value(x: float, unit: str | None) -> str:
    """One sample value with its unit, in binary units for bytes (``us`` shown as µs)."""
    if unit == "ns":
        return units.us(x / 1e3)
    if unit == "us":
        return units.us(x)
    if unit == "ms":
        return units.us(x * 1e3)
    if unit == "s":
        return units.secs(x)
    if unit == "bytes":
        return units.ibytes(x)
    if unit == "mib_s":
        return units.mib_s(x)
    return f"{x:.4g}" if unit is None else f"{x:.4g} {unit}"


def _fact_text(value: object) -> str:
    if isinstance(value, (list, dict)) and not (isinstance(value, dict) and set(value) == {"unavailable"}):
        return json.dumps(value, sort_keys=True)
    return units.fact(value)


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
    if cmp["section_changes"]:
        lines += ["", "Experiments whose status changed:"]
    for s in cmp["section_changes"]:
        lines.append(f"  experiment {s['name']}: {s['old']} -> {s['new']}")
    lines += ["", f"Figures ({cmp['rule']}):"]
    if not cmp["figures"]:
        lines.append("  none found in both runs")
    for f in cmp["figures"]:
        o, n, u = f["old"], f["new"], f["unit"]
        ratio = "" if f["ratio"] is None else f" ({units.ratio(f['ratio'])})"
        arrow = {"up": ", up", "down": ", down", None: ""}[f["direction"]]
        lines.append(
            f"  {f['path']}: median {format_value(o['median'], u)} -> {format_value(n['median'], u)}{ratio}; "
            f"range {format_value(o['min'], u)}..{format_value(o['max'], u)} (n={o['n']}) vs "
            f"{format_value(n['min'], u)}..{format_value(n['max'], u)} (n={n['n']}): {f['verdict']}{arrow}"
        )
        if "p99" in o:
            lines.append(
                f"      p50/p90/p99 {'/'.join(format_value(o[k], u) for k in ('median', 'p90', 'p99'))} -> "
                f"{'/'.join(format_value(n[k], u) for k in ('median', 'p90', 'p99'))}"
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
