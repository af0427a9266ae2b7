"""A host's figures over every stored run: ``disklab history``, ``disklab runs`` and the report's History.

Runs are the host's ``reports/<host-dir>/runs/*.json`` (the directory through
:func:`disklab.hostnames.host_dir`), oldest first, each read through
:func:`disklab.stored.read` (older schema versions upgraded); a run that cannot
be read is named in one line and left out. Figures come from
:func:`disklab.figures.extract`, whose keys are the same in every run and on
every host, so one key is one figure's history.

**Key figures** (:func:`is_key`, in this order), the figures an upgrade is most
often judged by:

* ``write_buffering``: ns per call of an unbuffered ``os.write`` and of a buffered ``f.write``;
* the durable sync per call (a 4 KiB write plus the call, its median is the p50): ``fsync_bench``'s
  ``fsync`` on Linux, ``f_fullfsync`` (F_FULLFSYNC) on macOS, where plain fsync stops at the drive's
  cache and is never shown in its place (the host's OS is its latest run's ``facts.host.system``);
* ``big_write``: the write rate and the durable sync's time;
* the host's ceilings: cold and warm read rate, and the cold parallel direct read's (MiB/s);
* load at ``all_touched`` and at ``first_response`` (:data:`LOAD_STAGES`) for each method of the big
  file (populated by meta + assign since results version 5) and each cell without a populate mode (not
  the small model's copy against assign), cold and warm, and the cold load's peak RSS at those stages.

For each run a history records the run id, its start (UTC), profile, kernel
(``facts.host.kernel``), torch (``facts.versions.torch``) and lab code
(disklab's version and the host package's sha256), and what changed since the
run before (:func:`changes`: ``kernel``, ``torch``, ``lab``). For each figure
and run: the median with its unit, n, min and max, the cache state and, for a
load figure, how the run's load samples were proven cold or warm
(:func:`disklab.compare.cache_proofs`) and how many samples of the same cell
failed that proof and were left out.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import replace
from pathlib import Path

from disklab import compare, console, figures, hostnames, plotting, store, stored, verdicts
from disklab_host.common.formats import output

# What can change between two runs, in the order it is said.
CHANGES = ("kernel", "torch", "lab")
# The report's History shows this many of the latest runs (the command shows every one).
REPORT_RUNS = 8
PLOT_NAME = "history.png"
# The load stages whose figures are key figures: every byte read once, and the first response.
LOAD_STAGES = ("all_touched", "first_response")
# The key figures that are not load figures, in their order (a stored ceiling has either form).
_KEY_ORDER = (
    "experiments.write_buffering.modes.unbuffered.per_call_samples_ns",
    "experiments.write_buffering.modes.buffered.per_call_samples_ns",
    "experiments.fsync_bench.modes.fsync.samples_ns",
    "experiments.fsync_bench.modes.f_fullfsync.samples_ns",
    "experiments.big_write.write_rate_samples_mib_s",
    "experiments.big_write.fsync_samples_s",
    "experiments.ceiling.cold_mib_s",
    "experiments.ceiling.cold_samples_mib_s",
    "experiments.ceiling.warm_mib_s",
    "experiments.ceiling.warm_samples_mib_s",
    "experiments.ceiling.parallel.cold_mib_s",
)
# The durable sync's key per OS; the other OS's is not a key figure there.
_DURABLE = {
    "Linux": "experiments.fsync_bench.modes.fsync.samples_ns",
    "Darwin": "experiments.fsync_bench.modes.f_fullfsync.samples_ns",
}
# Drawn in the report's plot: the durable sync, the big write's rate, both cold ceilings, cold loads.
_PLOTTED = (
    *_DURABLE.values(),
    "experiments.big_write.write_rate_samples_mib_s",
    "experiments.ceiling.cold",
    "experiments.ceiling.parallel.cold",
)
# A cell's samples whose cache proof failed, by the state they were meant to prove.
_UNPROVEN = {"cold": ("cold_unproven", "cold_unverified"), "warm": ("warm_unverified",)}
_LOAD_METHODS = ("torch.load", "torch.load-mmap", "load_file", "one-tensor", "load_file+willneed")
PROOF_WORDS = {"three_part": "three-part", "residency": "residency only", "none": None}


class UnknownFigure(ValueError):
    """A FIGURE that names no figure of the host's runs; the message lists near matches."""


# --- reading the runs ------------------------------------------------------------------------------


def read_runs(host_dir: Path, known_valid: set[str] | None = None) -> tuple[list[dict], list[str]]:
    """(every readable run of the host, oldest first; one line for each run that cannot be read, or that
    names another host: disklab.stored.read's ``host``)."""
    docs, unreadable = [], []
    host = hostnames.host_of(host_dir)
    for path in store.files(host_dir, "runs"):
        try:
            docs.append(stored.read(path, "results", known_valid=known_valid, host=host))
        except stored.StoredFileError as exc:
            unreadable.append(str(exc))
    return docs, unreadable


def _version(doc: dict, name: str) -> object:
    facts = doc.get("facts") or {}
    return ((facts.get("host") or {}) if name == "kernel" else (facts.get("versions") or {})).get(name)


def lab_code(doc: dict) -> dict:
    """``{"disklab_version", "host_package_sha256", "steps"}`` of a run, or ``{"unavailable": why}``."""
    lc = doc.get("lab_code")
    if isinstance(lc, dict) and "steps" in lc:
        return {k: lc.get(k) for k in ("disklab_version", "host_package_sha256", "steps")}
    return {"unavailable": (lc or {}).get("unavailable", "not recorded in this run")}


def changes(before: dict | None, doc: dict) -> dict:
    """What changed from run ``before`` to ``doc``: ``{"kernel": {"old", "new"} | None, "torch": ...,
    "lab": {"disklab_version": {"old", "new"} | None, "steps": [name], "host_package": bool,
    "recorded": bool} | None}``; all None for the first run. ``lab`` is set when disklab's version, a
    step's code digest or the host package's digest differs, or when only one run records its lab code
    (``recorded`` False: then a change cannot be ruled out)."""
    out: dict = {name: None for name in CHANGES}
    if before is None:
        return out
    for name in ("kernel", "torch"):
        old, new = _version(before, name), _version(doc, name)
        if old != new:
            out[name] = {"old": old, "new": new}
    lo, ln = lab_code(before), lab_code(doc)
    if "unavailable" in lo or "unavailable" in ln:
        if ("unavailable" in lo) != ("unavailable" in ln):
            out["lab"] = {"disklab_version": None, "steps": [], "host_package": False, "recorded": False}
        return out
    lc = compare.lab_code_changes(before, doc)
    package = lo["host_package_sha256"] != ln["host_package_sha256"]
    if lc["disklab_version"] or lc["steps"] or package:
        out["lab"] = {
            "disklab_version": lc["disklab_version"],
            "steps": lc["steps"],
            "host_package": package,
            "recorded": True,
        }
    return out


def run_row(doc: dict, before: dict | None = None) -> dict:
    """One run as a history lists it (see :func:`build`)."""
    found = changes(before, doc)
    return {
        "run_id": doc.get("run_id"),
        "started_utc": doc.get("started_utc"),
        "profile": doc.get("profile"),
        "kernel": _version(doc, "kernel"),
        "torch": _version(doc, "torch"),
        "lab_code": lab_code(doc),
        "cache_proof": compare.cache_proofs(doc),
        "changed": [name for name in CHANGES if found[name]],
        "changes": found,
    }


# --- which figures ---------------------------------------------------------------------------------


def is_key(f: figures.Figure, system: str | None = None) -> bool:
    """Whether ``f`` is a key figure (the module docstring's list) on a host of OS ``system``."""
    if f.key in _DURABLE.values():
        return f.key == _DURABLE.get(system or "Linux", _DURABLE["Linux"])
    if f.key in _KEY_ORDER:
        return True
    big = (f.file or "").startswith("big")
    if (
        f.experiment != "load"
        or f.stage not in LOAD_STAGES
        or (f.populate is not None and not big)
        or f.cache not in ("cold", "warm")
    ):
        return False
    return f.unit == "s" or (f.unit == "bytes" and f.cache == "cold")


# A load figure's key (figures.load_key): file, method, populate mode, cache state, stage and field.
_LOAD_KEY = re.compile(
    r"^experiments\.load\.samples\[file=(?P<file>[^\]]+)\]\[method=(?P<method>[^\]]+)\]"
    r"(?:\[populate=(?P<populate>[^\]]+)\])?\[cache=(?P<cache>[^\]]+)\]"
    r"\.stages\.(?P<stage>[a-z_]+)\.(?P<field>time_s|peak_rss_bytes)$"
)


def key_figure_unit(key: str) -> str | None:
    """The unit of the key figure whose stable key is ``key`` (``ns``, ``s``, ``mib_s``, ``bytes``), on a
    host of either OS, or None when ``key`` names no key figure (the module docstring's list), whatever
    the stored runs hold: the predictions file (disklab.predictions) is checked against it."""
    if key in _KEY_ORDER:
        return figures.unit_of(key) or ("mib_s" if key.endswith("_mib_s") else None)
    m = _LOAD_KEY.match(key)
    if not m:
        return None
    unit = "s" if m["field"] == "time_s" else "bytes"
    f = figures.Figure(
        key=key,
        experiment="load",
        name=key,
        unit=unit,
        stage=m["stage"],
        cache=m["cache"],
        method=m["method"],
        file=m["file"],
        populate=m["populate"],
    )
    return unit if is_key(f) else None


def key_figure_keys() -> list[str]:
    """Every key figure's key a run of the registry's load cells can have, in the key figures' order: the
    candidates :func:`near_matches` names for a key that is none."""
    from disklab_host.common.stages import PARTIAL_METHODS
    from disklab_host.steps import load  # the host step's cells (its module imports no torch)

    keys = list(_KEY_ORDER)
    cells = [(f, m, None if m in PARTIAL_METHODS else load.BIG_POPULATE) for f, m in load.BIG_CELLS]
    cells += [(f, m, None) for f, m in load.USER_CELLS]
    for stage in LOAD_STAGES:
        for fld in ("time_s", "peak_rss_bytes"):
            for file, method, populate in cells:
                if stage == "first_response" and populate is None:
                    continue  # no module, no response
                for cache in ("cold", "warm") if fld == "time_s" else ("cold",):
                    keys.append(figures.load_key(file, method, populate, cache, stage, fld))
    return keys


def _order(f: figures.Figure) -> tuple:
    if f.key in _KEY_ORDER:
        return (0, _KEY_ORDER.index(f.key))
    method = _LOAD_METHODS.index(f.method) if f.method in _LOAD_METHODS else len(_LOAD_METHODS)
    stage = LOAD_STAGES.index(f.stage) if f.stage in LOAD_STAGES else len(LOAD_STAGES)
    return (1 if f.unit == "s" else 2, stage, method, f.method or "", f.file or "", f.cache != "cold")


def _all_figures(docs: list[dict]) -> tuple[list[list[figures.Figure]], dict[str, figures.Figure]]:
    """(each run's figures, every key seen in any run with its newest figure, in first-seen order)."""
    per_run = [figures.extract(doc) for doc in docs]
    seen: dict[str, figures.Figure] = {}
    for found in per_run:
        for f in found:
            seen[f.key] = f
    order = {}
    for found in per_run:
        for f in found:
            order.setdefault(f.key, len(order))
    return per_run, dict(sorted(seen.items(), key=lambda kv: order[kv[0]]))


def key_figures(seen: dict[str, figures.Figure], system: str | None) -> list[figures.Figure]:
    return sorted((f for f in seen.values() if is_key(f, system)), key=_order)


def select(seen: dict[str, figures.Figure], system: str | None, figure: str | None) -> list[figures.Figure]:
    """The figures a history shows: the key figures without ``figure``; else the figure whose key it is
    (any figure, key or not), else the key figures whose key or name holds it (case-insensitive), else
    any figure's. Raises UnknownFigure, naming near matches, when none does."""
    keys = key_figures(seen, system)
    if figure is None:
        return keys
    if figure in seen:
        return [seen[figure]]
    want = figure.casefold()
    for pool in (keys, list(seen.values())):
        hits = [f for f in pool if want in f.key.casefold() or want in f.name.casefold()]
        if hits:
            return hits
    near = near_matches(figure, [f.key for f in keys] + [k for k in seen if k not in {f.key for f in keys}])
    listed = ", ".join(near) if near else "none (without FIGURE, every key figure is shown)"
    raise UnknownFigure(f"no figure of the host's runs matches {figure!r}; near matches: {listed}")


def near_matches(word: str, keys: list[str], n: int = 4) -> list[str]:
    """Up to ``n`` of ``keys`` nearest ``word``: by how well it matches a word of the key (``fsyncc`` finds
    ``...modes.fsync.samples_ns``) or the whole key, at least 0.6 (difflib's ratio), best first."""
    want = word.casefold()

    def score(key: str) -> float:
        parts = [p for p in re.split(r"[^0-9a-z_+-]+", key.casefold()) if p]
        ratios = [difflib.SequenceMatcher(None, want, p).ratio() for p in [key.casefold(), *parts]]
        return max(ratios)

    scored = sorted(((score(k), i, k) for i, k in enumerate(keys)), key=lambda t: (-t[0], t[1]))
    return [k for s, _, k in scored[:n] if s >= 0.6]


def _point(doc: dict, by_key: dict[str, figures.Figure], f: figures.Figure) -> dict:
    found = by_key.get(f.key)
    point = {"run_id": doc.get("run_id"), "median": None, "n": None, "min": None, "max": None}
    if found is None:
        return {**point, "cache": f.cache, "proof": None, "unproven_left_out": 0, "why": "not in this run"}
    s = found.summary
    left_out = 0
    if found.experiment == "load" and found.cache in _UNPROVEN:
        for state in _UNPROVEN[found.cache]:
            other = by_key.get(found.key.replace(f"[cache={found.cache}]", f"[cache={state}]"))
            left_out += (other.summary.get("n") or 0) if other else 0
    proof = PROOF_WORDS[compare.cache_proofs(doc)] if found.experiment == "load" else None
    value = s.get("median") if found.kind != figures.VERDICT else found.value
    return {
        **point,
        "median": value,
        "n": s.get("n"),
        "min": s.get("min"),
        "max": s.get("max"),
        "cache": found.cache,
        "proof": proof,
        "unproven_left_out": left_out,
        "why": None,
    }


def _since_previous(
    chosen: list[figures.Figure], by_run: list[dict], docs: list[dict] | None = None
) -> dict[tuple[int, str], dict]:
    """Each samples figure of each run against the latest earlier run that has it, by (run index, key):
    the verdict of disklab.verdicts (the figures of one run judged as one family; the host's run-to-run
    drift measured from the comparable runs up to the earlier one, :func:`disklab.compare.drift_of`), as
    ``{"verdict", "direction", "words", "ratio", "low", "high", "against_run", "brief"}``."""
    out = {}
    last: dict[str, int] = {}
    comparable_before: dict[int, list[dict]] = {}  # the comparable runs before run j, found once per j

    def earlier_than(j: int) -> list[dict]:
        if j not in comparable_before:
            comparable_before[j] = [
                by_run[k] for k in range(j) if docs is None or compare.comparable(docs[k], docs[j])
            ]
        return comparable_before[j]

    for i, found in enumerate(by_run):
        pairs, keys = [], []
        for f in chosen:
            b = found.get(f.key)
            if b is None:
                continue
            before = last.get(f.key)
            a = by_run[before].get(f.key) if before is not None else None
            if a is not None and a.kind == b.kind == figures.SAMPLES and a.proven and b.proven:
                drift = compare.drift_of(f.key, a, earlier_than(before))
                pairs.append(verdicts.Pair(a.side(), b.side(), b.measure, b.unit_kind, drift=drift))
                keys.append((f.key, before))
            last[f.key] = i
        at = {key_before: n for n, key_before in enumerate(keys)}  # a figure judged with another (compare)
        pairs = [
            replace(p, judged_with=at.get((figures.SAME_SAMPLES.get(key), before)))
            for p, (key, before) in zip(pairs, keys, strict=True)
        ]
        for (key, before), j in zip(keys, verdicts.judge_many(pairs), strict=True):
            out[(i, key)] = {k: j[k] for k in ("verdict", "direction", "words", "ratio", "low", "high")}
            out[(i, key)]["against_run"] = before
            out[(i, key)]["brief"] = verdicts.brief(j)
    return out


def build(host: str, host_dir: Path, figure: str | None = None, known_valid: set[str] | None = None) -> dict:
    """The history of ``host`` (its directory ``host_dir``), as ``disklab history --json`` prints it::

        {"kind": "history", "schema_version": 1, "host", "figure": FIGURE | None,
         "key_figures": bool (FIGURE not given),
         "runs": [{"run_id", "started_utc", "profile", "kernel", "torch", "lab_code", "cache_proof",
                   "changed": ["kernel" | "torch" | "lab"], "changes": {...}}],      # oldest first
         "figures": [{"key", "name", "experiment", "unit", "stage", "cache", "method", "file",
                      "populate", "points": [{"run_id", "median", "n", "min", "max", "cache",
                                              "proof", "unproven_left_out", "why",
                                              "since_previous": {...} | None}]}],  # one per run
         "unreadable": [line]}

    ``changes`` is :func:`changes` against the run before; a point of a run without the figure has
    ``median`` None and ``why`` "not in this run"; ``since_previous`` is the figure's verdict against the
    run before (:func:`_since_previous`), None for the first run or a run pair without the figure.
    Raises UnknownFigure for a FIGURE that matches none.
    """
    docs, unreadable = read_runs(host_dir, known_valid)
    per_run, seen = _all_figures(docs)
    system = ((docs[-1].get("facts") or {}).get("host") or {}).get("system") if docs else None
    chosen = select(seen, system, figure) if docs else []
    by_run = [figures.by_key(found) for found in per_run]
    runs = [run_row(doc, docs[i - 1] if i else None) for i, doc in enumerate(docs)]
    since = _since_previous(chosen, by_run, docs)
    return output(
        "history",
        {
            "host": host,
            "figure": figure,
            "key_figures": figure is None,
            "runs": runs,
            "figures": [
                {
                    "key": f.key,
                    "name": f.name,
                    "experiment": f.experiment,
                    "unit": f.unit,
                    "stage": f.stage,
                    "cache": f.cache,
                    "method": f.method,
                    "file": f.file,
                    "populate": f.populate,
                    "points": [
                        {**_point(doc, by_key, f), "since_previous": since.get((i, f.key))}
                        for i, (doc, by_key) in enumerate(zip(docs, by_run, strict=True))
                    ],
                }
                for f in chosen
            ],
            "unreadable": unreadable,
        },
    )


def to_json(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# --- text ------------------------------------------------------------------------------------------


def _text(value: object) -> str:
    """A fact as one line of terminal text (a host's string: control characters escaped, disklab.console)."""
    if isinstance(value, dict) and "unavailable" in value:
        value = f"unavailable ({value['unavailable']})"
    return console.text(value)


def lab_code_text(lc: dict) -> str:
    if "unavailable" in lc:
        return "not recorded"
    return f"{lc['disklab_version']} {str(lc['host_package_sha256'])[:12]}"


def change_text(run: dict) -> str:
    """``torch 2.5.1 -> 2.6.0; lab (steps load)`` or ``-``."""
    parts = []
    for name in run["changed"]:
        c = run["changes"][name]
        if name == "lab":
            what = []
            if c["disklab_version"]:
                what.append(f"disklab {c['disklab_version']['old']} -> {c['disklab_version']['new']}")
            if c["steps"]:
                what.append("steps " + ", ".join(c["steps"]))
            if c["host_package"] and not c["steps"]:
                what.append("host package")
            if not c["recorded"]:
                what.append("recorded in one run only")
            parts.append("lab code (" + "; ".join(what) + ")")
        else:
            parts.append(f"{name} {_text(c['old'])} -> {_text(c['new'])}")
    return "; ".join(parts) or "-"


def started_text(started: object) -> str:
    text = _text(started)
    return text[:16].replace("T", " ") if len(text) >= 16 and text[10:11] == "T" else text


def value_text(point: dict, unit: str | None) -> str:
    if point["median"] is None:
        return point["why"] or "-"
    if isinstance(point["median"], str):  # a verdict
        return _text(point["median"])
    return compare.format_value(point["median"], unit)


def _since_text(since: dict | None) -> str:
    """A point's verdict against the run before, in a word or three (``changed, 1.32× slower``)."""
    if not since:
        return "-"
    if since["verdict"] == verdicts.CHANGED:
        return f"changed, {verdicts.ratio_text(since['ratio'])} {since['words']}"
    return since["verdict"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]
    ]


def render_text(hist: dict) -> str:
    """Plain text of :func:`build`: a line on the runs, then one table per figure, runs oldest first.

    A ``*`` after a kernel, torch or lab code marks a run where it changed since the run before.
    """
    runs = hist["runs"]
    what = "key figures" if hist["key_figures"] else f"figures matching {hist['figure']!r}"
    lines = [
        f"History of host {_text(hist['host'])}: {len(hist['figures'])} {what} over {len(runs)} stored "
        f"run{'' if len(runs) == 1 else 's'}, oldest first (* marks a kernel, torch or lab code that changed "
        "since the run before)"
    ]
    changed_runs = [r for r in runs if r["changed"]]
    for r in changed_runs:
        lines.append(f"  run {r['run_id']}: {change_text(r)}")
    if runs and not changed_runs:
        lines.append("  kernel, torch and lab code are the same in every run")
    for fig in hist["figures"]:
        where = f" ({fig['key']})"
        lines += ["", f"{_text(fig['name'])}{where}"]
        rows = []
        for run, p in zip(runs, fig["points"], strict=True):
            mark = {name: "*" if name in run["changed"] else "" for name in CHANGES}
            left = f", {p['unproven_left_out']} unproven left out" if p["unproven_left_out"] else ""
            rows.append(
                [
                    str(run["run_id"]),
                    started_text(run["started_utc"]),
                    _text(run["kernel"]) + mark["kernel"],
                    _text(run["torch"]) + mark["torch"],
                    lab_code_text(run["lab_code"]) + mark["lab"],
                    value_text(p, fig["unit"]),
                    "-" if p["n"] is None else str(p["n"]),
                    p["cache"] or "-",
                    (p["proof"] or "-") + left,
                    _since_text(p.get("since_previous")),
                ]
            )
        header = [
            "run", "started (UTC)", "kernel", "torch", "lab code", "median", "n", "cache", "proof",
            "against the run before",
        ]  # fmt: skip
        lines += _table(header, rows)
    return "\n".join(lines) + "\n"


# --- disklab runs ----------------------------------------------------------------------------------


def list_runs(reports: Path, host: str | None = None) -> dict:
    """Every stored run (of ``host``, or of every host), as ``disklab runs --json`` prints it::

        {"kind": "runs", "schema_version": 1,
         "runs": [{"host", "run_id", "started_utc", "finished_utc", "profile", "steps": [name],
                   "kernel", "torch", "status": "ok" | "partial", "failed_steps": [name]}],
         "unreadable": [line]}

    Hosts by name, each host's runs oldest first. ``status`` is ``partial`` when a step failed or
    part of one did (as ``disklab run`` says it). Raises ValueError for a host name that makes no
    directory (disklab.hostnames).
    """
    out: list[dict] = []
    unreadable: list[str] = []
    for name in [host] if host is not None else store.hosts(reports):
        docs, bad = read_runs(hostnames.host_dir(reports, name))
        unreadable += bad
        for doc in docs:
            exps = doc.get("experiments") or {}
            failed = [n for n, s in exps.items() if (s or {}).get("status") in ("failed", "partial")]
            out.append(
                {
                    "host": name,
                    "run_id": doc.get("run_id"),
                    "started_utc": doc.get("started_utc"),
                    "finished_utc": doc.get("finished_utc"),
                    "profile": doc.get("profile"),
                    "steps": list(exps),
                    "kernel": _version(doc, "kernel"),
                    "torch": _version(doc, "torch"),
                    "status": "partial" if failed else "ok",
                    "failed_steps": failed,
                }
            )
    return output("runs", {"runs": out, "unreadable": unreadable})


def render_runs_text(listed: dict) -> str:
    """One line a run: host, run id, started, profile, steps, kernel, torch, status."""
    rows = [
        [
            _text(r["host"]),
            str(r["run_id"]),
            started_text(r["started_utc"]),
            _text(r["profile"]),
            ",".join(r["steps"]) or "-",
            _text(r["kernel"]),
            _text(r["torch"]),
            r["status"] + (f" (failed: {', '.join(r['failed_steps'])})" if r["failed_steps"] else ""),
        ]
        for r in listed["runs"]
    ]
    header = ["host", "run", "started (UTC)", "profile", "steps", "kernel", "torch", "status"]
    return "\n".join(line[2:] for line in _table(header, rows)) + "\n"


# --- the report's History section ------------------------------------------------------------------


def section(host_dir: Path, known_valid: set[str] | None = None) -> dict | None:
    """The host report's History (templates/sections/_history.md.j2), or None under 2 readable runs.

    Returns ``{"n_runs", "runs": [the latest REPORT_RUNS runs of build()], "figures": [key figures
    of build(), their points cut to those runs], "plot": path relative to the report | None,
    "unreadable": [line]}``.
    """
    hist = build(hostnames.host_of(host_dir), host_dir, known_valid=known_valid)
    if len(hist["runs"]) < 2:
        return None
    shown = hist["runs"][-REPORT_RUNS:]
    figs = [{**f, "points": f["points"][-REPORT_RUNS:]} for f in hist["figures"]]
    return {
        "n_runs": len(hist["runs"]),
        "max_runs": REPORT_RUNS,
        "runs": shown,
        "figures": figs,
        "plot": plot(shown, figs, host_dir / "plots"),
        "unreadable": hist["unreadable"],
    }


def _plotted(fig: dict) -> bool:
    cold_load = fig["experiment"] == "load" and fig["unit"] == "s" and fig["cache"] == "cold"
    return cold_load or any(fig["key"].startswith(k) for k in _PLOTTED)


def plot(runs: list[dict], figs: list[dict], plot_dir: Path) -> str | None:
    """Each plotted key figure's median over the runs, relative to its first median shown (log axis), a
    dashed line at each run where the kernel, torch or lab code changed. Returns the plot's path relative
    to the report, or None when no figure has two values to draw."""
    series = []
    for fig in filter(_plotted, figs):
        values = [p["median"] for p in fig["points"]]
        first = next((v for v in values if plotting.on_log_axis(v)), None)
        points = [(i, v / first) for i, v in enumerate(values) if first and plotting.on_log_axis(v)]
        if len(points) >= 2:
            series.append((fig["name"], points))
    if not series:
        return None
    labels = [str(r["run_id"]) for r in runs]
    marks = [(i, ", ".join(r["changed"])) for i, r in enumerate(runs) if r["changed"]]
    data = {"series": series, "labels": labels, "marks": marks}

    def draw():
        from matplotlib.ticker import FuncFormatter, LogLocator

        legend_in = 0.17 * len(series) + 0.1
        fig = plotting.figure(8, 3.2 + legend_in)
        ax = fig.subplots()
        for name, points in series:
            ax.plot(*zip(*points, strict=True), marker="o", label=name)
        for i, words in marks:
            ax.axvline(i, color="0.4", linestyle="--", linewidth=1)
            ax.annotate(words, (i, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                        textcoords="offset points", fontsize=8, color="0.25")  # fmt: skip
        ax.set_yscale("log")
        ax.yaxis.set_minor_locator(LogLocator(subs=(2, 5)))  # minor ticks at 2 and 5 of each decade
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis(FuncFormatter(plotting.plain_number))  # 0.5, 1, 2, not mathtext's 2x10^0
        ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=7)
        ax.set_xlim(-0.3, len(labels) - 0.7)
        ax.set_ylabel("median ÷ first median shown")
        ax.set_title("Key figures over runs (dashed: kernel, torch or lab code changed)", fontsize=10)
        fig.legend(loc="lower center", bbox_to_anchor=(0.5, 0.02), fontsize=7, frameon=False)
        plotting.margins(fig, left=0.9, right=0.2, bottom=0.75 + legend_in, top=0.35)
        return fig

    return plotting.section_plot(plot_dir, PLOT_NAME, data, draw, __file__)
