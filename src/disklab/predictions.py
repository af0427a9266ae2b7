"""Predictions first, for teaching: a fleet's ``reports/predictions.yml``, read beside the measured figures.

The lesson's Measure section starts with predictions. A teacher (or a student) writes, before the run,
one value per key figure, for every host (``all``) and/or per host (``hosts``, whose entry for a figure
overrides ``all``'s); each host report then shows, beneath its "On this host" answers, each prediction
beside the figure measured in the run its section is from, with the ratio measured/predicted and a plain
verdict. The file (YAML, read within :data:`BOUNDS` by disklab.boundedyaml)::

    who: Ada's class, week 3            # optional
    note: written before the first run  # optional
    all:
      experiments.fsync_bench.modes.fsync.samples_ns: {value: 50, unit: us}
      experiments.big_write.write_rate_samples_mib_s: 1.5 GiB/s    # "VALUE UNIT" works too
    hosts:
      spark-1:
        experiments.fsync_bench.modes.fsync.samples_ns: {value: 2, unit: ms, note: no PLP}

Keys are the key figures' stable keys (disklab.history.key_figure_unit: the keys ``disklab export`` and
``disklab history`` print). Each value is a finite number above 0 with a unit that fits the figure: a
time or latency (``ns``, ``us``/``µs``, ``ms``, ``s``), a rate (``KiB/s``, ``MiB/s``, ``GiB/s``) or a size
(``bytes``/``B``, ``KiB``, ``MiB``, ``GiB``); decimal units (``MB/s``, ``GB``) are refused as ambiguous
here, where every figure is binary. A file that breaks any rule is not used at all: :func:`load` raises
:class:`PredictionsError`, one line naming the file, where in it and what is wrong; the reports still
render, each saying the file was not used and why, and ``disklab report`` prints the line and exits 1.
A file past :data:`BOUNDS` (its size, its nodes with every alias counted at each use, its nesting) is
refused the same way, before it is parsed or while it is composed, never expanded.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import reprlib
from pathlib import Path

import yaml

from disklab import boundedyaml, compare, figures, history, units, verdicts
from disklab.answers import _why_missing, anchor
from disklab.markup import code, md

FILE_NAME = "predictions.yml"
TOP_KEYS = ("who", "note", "all", "hosts")
ENTRY_KEYS = ("value", "unit", "note")
# What a predictions file may hold. A good one nests 5 levels (the file, hosts, a host, a prediction, its
# value) and takes about 8 nodes a prediction: 100,000 nodes are some 12,000 predictions, and 1 MiB is
# some 10,000 of the longest keys with a note each.
BOUNDS = boundedyaml.Bounds(max_bytes=1 << 20, max_nodes=100_000, max_depth=10)
# Measured within this factor of the prediction either way: "within 2×".
WITHIN = 2.0
# Per figure unit: each accepted unit (casefolded) and how many of the figure's unit one of it is.
_TIME_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
_TIME_NS = {"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "sec": 1e9}
_RATE = {"kib/s": 1 / 1024, "mib/s": 1.0, "mib_s": 1.0, "gib/s": 1024.0}
_SIZE = {"b": 1, "bytes": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3}
UNITS = {
    "ns": _TIME_NS,
    "s": dict(_TIME_S),
    "mib_s": _RATE,
    "bytes": _SIZE,
}
# What each figure unit measures, and which way is "more" of it (a higher time is slower).
WHAT = {"ns": "a latency", "s": "a time", "mib_s": "a rate", "bytes": "a size"}
MORE_LESS = {"ns": ("slower", "faster"), "s": ("slower", "faster"), "mib_s": ("faster", "slower")}
MORE_LESS["bytes"] = ("more", "less")
SHOWN = {"ns": "ns, us, ms or s", "s": "s, ms, us or ns", "mib_s": "MiB/s, GiB/s or KiB/s"}
SHOWN["bytes"] = "bytes, KiB, MiB or GiB"
# Decimal (or bit) units a reader could mean either way; every figure here is binary.
_AMBIGUOUS = re.compile(r"^(?:[kmgt]b(?:/s|ps)?|[kmgt]bit/s|b/s)$")
_VALUE_UNIT = re.compile(
    r"^\s*(?P<value>[-+]?\.?(?:nan|inf)|[-+0-9.eE_]+)\s*(?P<unit>\S.*?)?\s*$", re.IGNORECASE
)


class PredictionsError(ValueError):
    """A predictions file that cannot be used; the message is one line: ``FILE: WHERE: WHAT``."""


# How an error line shows a value from the file: a few items and characters of it, never all of it.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxstring, _SHOWN.maxother = 2, 4, 4, 60, 60


def _shown(value: object) -> str:
    return _SHOWN.repr(value)


def path_of(reports: Path) -> Path:
    return Path(reports) / FILE_NAME


def stamp(reports: Path) -> str:
    """What a host report's render stamp (disklab.reportcache.input_stamp) takes from the predictions file: a
    digest of its bytes, ``absent``, or ``unreadable`` with the error."""
    digest = hashlib.sha256()
    try:
        # a regular file only (a FIFO would block here), and no more of it than load would read: a file past
        # its bound is refused there, and its size is in the stamp
        with boundedyaml.open_regular(path_of(reports)) as f:
            digest.update(f.read(BOUNDS.max_bytes + 1))
            size = os.fstat(f.fileno()).st_size
        return f"predictions {size} {digest.hexdigest()}"
    except FileNotFoundError:
        return "predictions absent"
    except (OSError, boundedyaml.BoundError) as exc:
        return f"predictions unreadable: {exc}"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _entry(raw: object, key: str, err) -> dict:
    """One prediction: ``{"key", "unit", "value"}`` (the value in the figure's unit), ``"given"`` (as
    written: ``50 us``) and ``"note"``."""
    unit = history.key_figure_unit(key)
    if unit is None:
        near = history.near_matches(key, history.key_figure_keys())
        err(f"no key figure has this key; nearest keys: {', '.join(near) if near else 'none'}")
    note = None
    if isinstance(raw, dict):
        extra = sorted(str(k) for k in raw if k not in ENTRY_KEYS)
        if extra:
            err(f"unknown field(s) {', '.join(extra)}; a prediction has {', '.join(ENTRY_KEYS)}")
        if "value" not in raw:
            err("no value: write {value: NUMBER, unit: UNIT}")
        value, given_unit, note = raw["value"], raw.get("unit"), raw.get("note")
        if note is not None and not isinstance(note, str):
            err(f"note must be text, got {_shown(note)}")
    elif isinstance(raw, str):
        m = _VALUE_UNIT.match(raw)
        if not m:
            err(f"not a number with its unit (e.g. 50 us): {_shown(raw)}")
        given_unit = m["unit"]
        try:
            value = float(m["value"].replace("_", "").replace(".inf", "inf").replace(".nan", "nan"))
        except ValueError:
            err(f"value must be a number, got {_shown(m['value'])}")
    else:
        value, given_unit = raw, None
    number = _number(value)
    if number is None:
        err(f"value must be a number, got {_shown(value)}")
    if not math.isfinite(number):
        err(f"value must be a finite number, got {number!r}")
    if number <= 0:
        err(f"value must be > 0 (a ratio is taken against it), got {number!r}")
    if given_unit is None:
        err(f"no unit: write the figure's unit with the value, one of {SHOWN[unit]}")
    if not isinstance(given_unit, str):
        err(f"unit must be text, got {_shown(given_unit)}")
    folded = given_unit.strip().casefold()
    if _AMBIGUOUS.match(folded):
        shown = _shown(given_unit)
        err(f"unit {shown} is ambiguous (decimal or binary?): figures here are binary: {SHOWN[unit]}")
    factor = UNITS[unit].get(folded)
    if factor is None:
        err(f"unit {_shown(given_unit)} does not fit this figure, {WHAT[unit]}: write {SHOWN[unit]}")
    return {
        "key": key,
        "unit": unit,
        "value": number * factor,
        "given": f"{number:g} {given_unit.strip()}",
        "note": note,
    }


def _table(raw: object, where: str, fail) -> dict[str, dict]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        fail(where, f"must be a mapping of figure keys to predictions, got {type(raw).__name__}")
    out = {}
    for key, entry in raw.items():
        if not isinstance(key, str):
            fail(where, f"figure key must be text, got {_shown(key)}")
        out[key] = _entry(entry, key, lambda what, key=key: fail(f"{where}: {key}", what))
    return out


def load(reports: Path) -> dict | None:
    """The fleet's predictions, or None when ``reports/predictions.yml`` does not exist::

        {"path": str, "who": str | None, "note": str | None,
         "all": {key: prediction}, "hosts": {host: {key: prediction}}}

    Raises PredictionsError (one line: the file, where, what is wrong) for a file that cannot be read,
    is not YAML, or breaks a rule of the module docstring.
    """
    path = path_of(reports)

    def fail(where: str, what: str):
        raise PredictionsError(f"{path}: {where}: {what}" if where else f"{path}: {what}")

    try:
        text = boundedyaml.read_text(path, BOUNDS)
    except FileNotFoundError:
        return None
    except boundedyaml.BoundError as exc:
        fail("", f"refused before reading: {exc}")
    except (OSError, UnicodeDecodeError) as exc:
        fail("", f"cannot be read: {exc}")
    try:
        raw = boundedyaml.load(text, BOUNDS)
    except boundedyaml.BoundError as exc:
        fail("", f"refused {exc}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        fail("", f"not valid YAML{at}: {getattr(exc, 'problem', None) or exc}")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        fail("", f"must be a mapping with {', '.join(TOP_KEYS)}, got {type(raw).__name__}")
    extra = sorted(str(k) for k in raw if k not in TOP_KEYS)
    if extra:
        fail(extra[0], f"unknown top-level key; the file has {', '.join(TOP_KEYS)}")
    for k in ("who", "note"):
        if raw.get(k) is not None and not isinstance(raw[k], (str, int, float)):
            fail(k, f"must be text, got {type(raw[k]).__name__}")
    hosts_raw = raw.get("hosts") or {}
    if not isinstance(hosts_raw, dict):
        fail("hosts", f"must be a mapping of host names to predictions, got {type(hosts_raw).__name__}")
    hosts = {str(h): _table(t, f"hosts: {h}", fail) for h, t in hosts_raw.items()}
    return {
        "path": str(path),
        "who": None if raw.get("who") is None else str(raw["who"]),
        "note": None if raw.get("note") is None else str(raw["note"]),
        "all": _table(raw.get("all"), "all", fail),
        "hosts": hosts,
    }


def error(reports: Path) -> str | None:
    """The one line saying why the predictions file was not used, or None (no file, or a good one)."""
    try:
        load(reports)
    except PredictionsError as exc:
        return f"predictions not used: {exc}"
    return None


# --- beside the measured figures ----------------------------------------------------------------------


def ratio_text(r: float) -> str:
    """measured/predicted: ``3.1×``, ``0.25×`` (two figures below 0.1)."""
    return units.ratio(r) if r >= 0.1 else f"{r:.2g}×"


def verdict(judged: dict, unit: str) -> str:
    """``within 2×``, how many times slower/faster (more/less for a size) than predicted, or undecided;
    judged on the median's interval (disklab.verdicts.against_value), whose coverage is said when the
    samples are too few for 95 %."""
    r = judged["ratio"]
    more, less = MORE_LESS[unit]
    if judged["verdict"] == "within":
        said = f"within {WITHIN:g}×"
    elif judged["verdict"] == "above":
        said = f"{units.ratio(r)} {more} than predicted"
    elif judged["verdict"] == "below":
        said = f"{units.ratio(1 / r)} {less} than predicted"
    else:
        said = (
            f"undecided: {units.ratio(r)} the prediction, but the median's interval "
            f"({judged['low']:.2g}× to {judged['high']:.2g}×) crosses the {WITHIN:g}× bound"
        )
    if judged["coverage"] < verdicts.LEVEL:
        cover = f"{judged['coverage']:.0%}"
        said += f" (n = {judged['n']}: the median's interval is the samples' range, {cover} coverage)"
    return said


def _alias(key: str) -> str | None:
    """The ceiling's other form: ``cold_mib_s`` (a spread) and ``cold_samples_mib_s`` (raw samples)."""
    for stem, _, _ in figures.CEILING:
        a, b = f"experiments.ceiling.{stem}_mib_s", f"experiments.ceiling.{stem}_samples_mib_s"
        if key in (a, b):
            return b if key == a else a
    return None


def _absent_why(sec: dict, key: str, found: dict[str, figures.Figure]) -> str:
    """Why a section that ran has no figure ``key``, as escaped markdown."""
    run = code(sec["run"]["run_id"])
    m = re.match(r"^experiments\.fsync_bench\.modes\.([a-z_]+)\.", key)
    if m:
        mode = (sec["section"].get("modes") or {}).get(m[1])
        if isinstance(mode, dict) and mode.get("status") != "ok":
            reason = mode.get("reason") or mode.get("error") or "no reason recorded"
            return f"no figure: {m[1]} was {md(mode.get('status'))} in run {run} ({md(reason)})"
    unproven = [key.replace("[cache=cold]", f"[cache={s}]") for s in ("cold_unproven", "cold_unverified")]
    if "[cache=cold]" in key and any(k in found for k in unproven):
        return f"no figure: the cold samples of this cell in run {run} failed their cold proof"
    return f"no figure: run {run}'s {md(sec['name'])} step recorded no such figure"


def host_table(reports: Path, host: str, sections: list[dict]) -> dict | None:
    """The "Your predictions" table of one host report, or None when the fleet has no predictions file::

        {"used": bool, "error": str | None (why the file was not used), "path", "who", "note",
         "rows": [{"key", "figure", "anchor", "predicted", "given", "note", "measured", "cache", "n",
                   "run_id", "ratio", "ratio_text", "verdict", "why"}]}

    ``sections`` are disklab.report.host_context's: each measured figure is the median of the figure in
    the run its section is from. ``why`` (a row without a measured figure) is already escaped markdown
    (disklab.answers); every other string is raw, for the template's filters.
    """
    try:
        preds = load(reports)
    except PredictionsError as exc:
        return {"used": False, "error": str(exc), "path": str(path_of(reports)), "rows": []}
    if preds is None:
        return None
    mine = {**preds["all"], **preds["hosts"].get(host, {})}
    by = {sec["name"]: sec for sec in sections}
    rows = []
    for key, p in mine.items():
        experiment = key.split(".")[1].split("[")[0]
        sec = by.get(experiment)
        row = {
            "key": key,
            "figure": key,
            "anchor": anchor(experiment),
            "predicted": compare.format_value(p["value"], p["unit"]),
            "given": p["given"],
            "note": p["note"],
            "measured": None,
            "cache": None,
            "n": None,
            "run_id": sec["run"]["run_id"] if sec else None,
            "ratio": None,
            "ratio_text": None,
            "verdict": None,
            "why": _why_missing(experiment, sec),
        }
        if row["why"] is None:
            found = figures.by_key(figures.extract(sec["doc"], experiments=(experiment,)))
            f = found.get(key) or found.get(_alias(key) or "")
            if f is None or f.median is None:
                row["why"] = _absent_why(sec, key, found)
            else:
                r = f.median / p["value"]
                row.update(
                    figure=f.name,
                    measured=compare.format_value(f.median, f.unit),
                    cache=f.cache,
                    n=f.summary.get("n"),
                )
                if f.median > 0:
                    judged = verdicts.against_value(f.units or f.samples, p["value"], WITHIN)
                    row.update(ratio=r, ratio_text=ratio_text(r), verdict=verdict(judged, p["unit"]))
                else:
                    row["why"] = "measured 0: no ratio to the prediction"
        rows.append(row)
    return {
        "used": True,
        "error": None,
        "path": preds["path"],
        "who": preds["who"],
        "note": preds["note"],
        "rows": rows,
    }
