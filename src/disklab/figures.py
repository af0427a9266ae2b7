"""Every figure of a results document as a flat list of :class:`Figure` records: the one extraction.

``disklab compare``, the fleet page (:mod:`disklab.fleet`) and ``disklab export``
all read figures through :func:`extract`, so a figure has one name, one unit,
one readiness stage and one cache state wherever it is shown.

Three sources, in document order:

* **Raw sample lists** anywhere in ``experiments`` (a non-empty list of finite
  numbers under a key that is ``samples`` or has ``samples`` as a whole
  ``_``-separated word: ``samples_ns``, ``fsync_samples_s``,
  ``read_samples_mib_s``), found generically (:func:`find_samples`). They carry
  no readiness stage; their cache state is ``cold`` or ``warm`` only when a word
  of their path says so (``cold`` or ``warm``), else None.
* **Load samples** (``experiments.load.samples``, one per fresh process), grouped
  by file, method, populate mode and cache state, and split by readiness stage:
  one figure of the stage's ``time_s`` per (cell, cache state, stage) that ran
  (:data:`LOAD_STAGES`, first_response among them since results version 5),
  and one of ``peak_rss_bytes`` at each stage of :data:`RSS_STAGES`. A
  sample's cache state is its ``cache_proof.verdict`` when it has one (``cold``,
  ``warm``, ``cold_unproven``, ``warm_unverified``), else its ``cache_state``
  (``cold``, ``cold_unverified``, ``warm``). Only ``cold`` and ``warm`` are
  *proven* (:data:`PROVEN`); a sample that failed its proof is its own figure
  under its own state and never joins a cold or warm one.
* **The host's ceilings** (``experiments.ceiling``): the rate of each proven cold read and each
  verified warm read (``cold_runs``, ``warm_runs``; ``parallel.cold_runs``, the parallel direct
  read's, when it ran), one sample per read, under the keys ``...ceiling.cold_mib_s``,
  ``warm_mib_s`` and ``parallel.cold_mib_s``.
* **The power-cut verdicts** of each recipe under each crash model (unit ``verdict``; n is its
  crash states).

Warm-up samples (keys starting ``warmup_``) are kept apart by the host and are no figure.

Each samples figure also carries what :mod:`disklab.verdicts` needs to judge it against another
run: its ``measure`` (the kind of figure, which sets its minimum effect), its *test units* and the
noise of each (:mod:`disklab.noise`). The units are the samples themselves when each is a run of its
own (a load, a big write, a ceiling read, a write repeat: rounds of one), or the median of each round
when the host recorded its samples in rounds of consecutive calls (fsync_bench: ``rounds`` beside the
samples, ``{first, count, io_record, noise, time_split}``); a list of more than
:data:`BATCH_OVER` samples with no rounds is split into consecutive rounds
(disklab_host.common.stats.round_sizes), its noise not recorded.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from disklab import noise, verdicts
from disklab_host.common.stages import STAGES as LOAD_STAGES
from disklab_host.common.stats import percentile, round_sizes

# ru_maxrss is a peak since the process started, so it only grows along the stages (LOAD_STAGES, from
# disklab_host.common.stages, in the order a load reaches them): at first_response it covers the load,
# the module and the forward pass; at all_touched (last since results version 5) the whole process.
# device_placed is kept for runs from before version 5, where it came after all_touched.
RSS_STAGES = ("first_response", "all_touched", "device_placed")
# Cache states whose proof holds; every other state is kept apart and never compared as cold or warm.
PROVEN = ("cold", "warm")
# The verdicts of a sample's three-part cache proof (cache_proof.verdict), when the run has one.
PROOF_VERDICTS = ("cold", "warm", "cold_unproven", "warm_unverified")
# experiments.ceiling (steps/ceiling.py): (field stem, cache state, readable name); the stem's _mib_s
# is the figure, its _samples_mib_s the raw samples when stored; a dotted stem is a field of a part of
# the section (parallel: the parallel direct read, a figure only when that part is ok).
CEILING = (
    ("cold", "cold", "cold sequential read"),
    ("warm", "warm", "warm read"),
    ("parallel.cold", "cold", "cold parallel direct read"),
)
POWERCUT_MODELS = (("process_kill", "process-kill"), ("power_cut", "power-cut"))
SAMPLES, VALUE, VERDICT = "samples", "value", "verdict"
# A figure computed sample by sample from another figure's samples, keyed by its key: the other's. A compare
# judges it with that figure (disklab.verdicts.Pair.judged_with), as one piece of evidence, not two.
# big_write's rate is its size over its write time, sample by sample (steps/big_write.py).
SAME_SAMPLES = {"experiments.big_write.write_rate_samples_mib_s": "experiments.big_write.write_samples_s"}

# Keys that name an element of a list of dicts, so list items match by name, not position.
LABEL_KEYS = ("name", "mode", "method", "stage", "kind", "label", "id")
# A samples key: "samples", "samples_ns", "fsync_samples_us", "read_samples_mib_s", ...
_SAMPLES_KEY = re.compile(r"(?:^|_)samples(?:_(?P<unit>[a-z_]+))?$")
LATENCY_UNITS = {"ns", "us", "ms", "s"}
# What a samples list measures, by its unit; the label's last word when the key names nothing else.
_KIND = {"ns": "latency", "us": "latency", "ms": "latency", "s": "time", "mib_s": "rate", "bytes": "size"}
# Experiments whose figures are read by their own rules below, not by the generic walk.
_OWN_RULES = ("load", "ceiling")
# A samples list longer than this, with no rounds recorded beside it, is judged on consecutive rounds.
BATCH_OVER = 30
# fsync_bench's modes that make each write durable (steps/fsync_bench.py MODE_ORDER less "none"): their
# samples are durable-sync latencies; any other mode's are plain latencies.
_SYNCED = ("fsync", "fdatasync", "f_fullfsync", "f_barrierfsync", "o_dsync")


@dataclass(frozen=True)
class Figure:
    """One figure of one run.

    ``key`` is stable across runs and hosts (the same figure has the same key);
    ``name`` is its readable label. ``kind`` is :data:`SAMPLES` (``samples``
    holds the raw samples, ``summary`` their n, median, min, max and, for
    latency units, p90 and p99), :data:`VALUE` (one stored number, no samples:
    ``summary`` is ``{"n": None, "median": value}`` plus what the spread stored)
    or :data:`VERDICT` (``value`` is the verdict, ``summary`` ``{"n": states}``).
    ``stage`` is the readiness stage (load figures only), ``cache`` the cache
    state, ``proven`` False for a cache state whose proof failed.
    """

    key: str
    experiment: str
    name: str
    unit: str | None
    kind: str = SAMPLES
    stage: str | None = None
    cache: str | None = None
    method: str | None = None
    file: str | None = None
    populate: str | None = None
    samples: tuple[float, ...] = ()
    summary: dict = field(default_factory=dict)
    value: object = None
    # What verdicts needs (SAMPLES only): the kind of figure (a key of verdicts.MIN_EFFECT), the test
    # units (the samples, or each round's median), and per unit None (quiet) or why it was disturbed;
    # ``flags`` None: the run recorded no noise. ``noise_summary``: the units' noise in one sentence.
    measure: str | None = None
    unit_kind: str = "samples"
    units: tuple[float, ...] = ()
    flags: tuple[str | None, ...] | None = None
    noise_summary: str | None = None

    @property
    def proven(self) -> bool:
        return self.cache is None or self.cache in PROVEN

    @property
    def median(self) -> float | None:
        return self.summary.get("median")

    def side(self) -> verdicts.Side:
        """This figure's test units and their noise, as :mod:`disklab.verdicts` judges them."""
        return verdicts.Side(self.units, self.flags, self.noise_summary)

    @property
    def n_disturbed(self) -> int:
        return sum(1 for f in self.flags or () if f)

    def as_dict(self, with_samples: bool = True) -> dict:
        out = asdict(self)
        out["samples"] = list(self.samples)
        out["units"] = list(self.units)
        out["flags"] = None if self.flags is None else list(self.flags)
        if not with_samples:
            del out["samples"]
        out["proven"] = self.proven
        return out


def _median(values: list[float]) -> float:
    return percentile(sorted(values), 50)


def units_of(samples: list[float], container: object) -> tuple[str, tuple, tuple | None, str | None]:
    """(unit kind, units, flags, noise summary) of a samples list found in ``container`` (its dict).

    ``rounds`` in the container that cover the list exactly give one unit per round (a round of one is
    the sample itself); else a list over :data:`BATCH_OVER` samples is split into consecutive rounds,
    and any other list is judged sample by sample; both then with no noise recorded.
    """
    rounds = container.get("rounds") if isinstance(container, dict) else None
    covered = (
        isinstance(rounds, list)
        and rounds
        and all(isinstance(r, dict) and isinstance(r.get("count"), int) for r in rounds)
        and [r.get("first") for r in rounds]
        == [sum(x["count"] for x in rounds[:i]) for i in range(len(rounds))]
        and sum(r["count"] for r in rounds) == len(samples)
    )
    if covered:
        kind = "samples" if all(r["count"] == 1 for r in rounds) else "batches"
        units = tuple(_median(samples[r["first"] : r["first"] + r["count"]]) for r in rounds)
        found = [noise.disturbances(r.get("io_record"), r.get("noise"), r.get("time_split")) for r in rounds]
        flags, summary = noise.flags_of(found, "rounds" if kind == "batches" else "samples")
        return kind, units, flags, summary
    if len(samples) > BATCH_OVER:
        sizes = round_sizes(len(samples))
        firsts = [sum(sizes[:i]) for i in range(len(sizes))]
        units = tuple(_median(samples[a : a + c]) for a, c in zip(firsts, sizes, strict=True))
        return "batches", units, None, noise.summary([None] * len(units), "rounds")
    return "samples", tuple(samples), None, noise.summary([None] * len(samples), "samples")


def measure_of(path: str, unit: str | None) -> str:
    """The kind of figure a generic samples list is (a key of disklab.verdicts.MIN_EFFECT)."""
    m = re.search(r"\.fsync_bench\.modes(?:\.|\[mode=)([a-z_]+)\]?\.samples_ns$", path)
    if m:
        return "durable_sync" if m[1] in _SYNCED else "latency"
    if unit in LATENCY_UNITS - {"s"}:
        return "latency"
    return {"s": "time", "mib_s": "rate", "bytes": "size"}.get(unit, "time")


# --- raw sample lists, found generically ------------------------------------------------------------


def _is_samples(key: str, value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and bool(_SAMPLES_KEY.search(key))
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    )


def _item_label(item: object, index: int) -> tuple[str, str]:
    """(path segment, readable part) of a list item: ``("[mode=fsync]", "fsync")`` or ``("[3]", "#3")``."""
    if isinstance(item, dict):
        for key in LABEL_KEYS:
            if isinstance(item.get(key), (str, int)) and not isinstance(item.get(key), bool):
                return f"[{key}={item[key]}]", str(item[key])
    return f"[{index}]", f"#{index}"


def _walk(obj: object, path: str, words: tuple[str, ...]):
    """Yield ``(path, words, samples, container)`` for every samples list but warm-ups; ``words`` are
    the label parts so far, ``container`` the dict that holds the list (its ``rounds``, if any).

    A dict key adds a word unless the next step is into a list (``modes`` in
    ``modes[mode=fsync]`` says less than the item's own label).
    """
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = f"{path}.{key}" if path else str(key)
            if _is_samples(str(key), value):
                if not str(key).startswith("warmup_"):
                    yield sub, words + (str(key),), value, obj
            else:
                yield from _walk(value, sub, words if isinstance(value, list) else words + (str(key),))
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            if isinstance(item, (dict, list)):
                segment, word = _item_label(item, i)
                yield from _walk(item, f"{path}{segment}", words + (word,))


def find_samples(obj: object, path: str = "") -> dict[str, list[float]]:
    """Every list of raw samples in a results tree, by path, in document order.

    A samples list is a non-empty list of finite numbers under a key that is
    ``samples`` or contains ``samples`` as a whole ``_``-separated word, e.g.
    ``samples_ns``, ``fsync_samples_us``, ``read_samples_mib_s``. Dict keys add
    ``.key``; items of a list of dicts add ``[mode=fsync]`` when the item has a
    label key (:data:`LABEL_KEYS`), else ``[i]``, so both runs' paths match.
    """
    return {sub: samples for sub, _, samples, _ in _walk(obj, path, ())}


def _key_words(key: str) -> str:
    """``fsync_samples_s`` -> ``fsync time``, ``samples_ns`` -> ``latency``, ``write_rate_samples_mib_s`` ->
    ``write rate``: the key without ``samples`` and its unit, plus what the unit measures."""
    m = _SAMPLES_KEY.search(key)
    prefix = key[: m.start()].replace("_", " ").strip() if m else key
    kind = _KIND.get(m.group("unit") if m else None, "samples")
    if not prefix:
        return kind
    return prefix if prefix.split()[-1] == kind else f"{prefix} {kind}"


def figure_labels(obj: object) -> dict[str, str]:
    """A readable label for each samples list of an ``experiments`` tree, by its :func:`find_samples` path.

    The label joins the experiment, inner keys, list items' labels and the
    samples key read as words, with `` · ``: ``experiments.fsync_bench.modes[mode=fsync].samples_ns``
    -> ``fsync_bench · fsync · latency``; ``experiments.big_write.fsync_samples_s`` ->
    ``big_write · fsync time``. Labels that would repeat fall back to the path.
    """
    labels = {}
    for sub, words, _, _ in _walk(obj, "experiments", ()):
        labels[sub] = " · ".join(words[:-1] + (_key_words(words[-1]),))
    counts: dict[str, int] = {}
    for label in labels.values():
        counts[label] = counts.get(label, 0) + 1
    return {sub: label if counts[label] == 1 else sub for sub, label in labels.items()}


def unit_of(path: str) -> str | None:
    """The unit a samples key names (``fsync_samples_us`` -> ``us``), or None when it names none."""
    m = _SAMPLES_KEY.search(path.rsplit(".", 1)[-1])
    return m.group("unit") if m else None


def sample_stats(samples: list[float], unit: str | None = None) -> dict:
    """n, median, min and max of raw samples; latency units also get p90 and p99.

    Units are the samples' own (no conversion). Raises ValueError on an empty list.
    """
    if not samples:
        raise ValueError("samples must be a non-empty list of numbers, got []")
    s = sorted(samples)
    stats = {"n": len(s), "median": percentile(s, 50), "min": s[0], "max": s[-1]}
    if unit in LATENCY_UNITS:
        stats["p90"] = percentile(s, 90)
        stats["p99"] = percentile(s, 99)
    return stats


def _cache_word(path: str) -> str | None:
    """``cold`` or ``warm`` when a word of a generic figure's path names it, else None."""
    words = set(re.split(r"[._\[\]=]+", path))
    found = [w for w in PROVEN if w in words]
    return found[0] if len(found) == 1 else None


def _generic(experiments: dict) -> list[Figure]:
    tree = {k: v for k, v in experiments.items() if k not in _OWN_RULES}
    labels = figure_labels(tree)
    out = []
    for path, _, samples, container in _walk(tree, "experiments", ()):
        unit = unit_of(path)
        kind, units, flags, summary = units_of(samples, container)
        out.append(
            Figure(
                key=path,
                experiment=path.split(".")[1].split("[")[0],
                name=labels[path],
                unit=unit,
                cache=_cache_word(path),
                samples=tuple(samples),
                summary=sample_stats(samples, unit),
                measure=measure_of(path, unit),
                unit_kind=kind,
                units=units,
                flags=flags,
                noise_summary=summary,
            )
        )
    return out


# --- the load step ---------------------------------------------------------------------------------


def cache_of(sample: dict) -> str:
    """A load sample's cache state: its three-part proof's verdict (an upgraded run's proof carries the
    cache_state it was judged by then: disklab.stored)."""
    return sample["cache_proof"]["verdict"]


def cell_name(method: str, file: str, populate: str | None) -> str:
    """``torch.load, big_pt`` or ``load_file → module (assign), small_safetensors`` (as the host report)."""
    return f"{method} → module ({populate}), {file}" if populate else f"{method}, {file}"


def load_key(file: str, method: str, populate: str | None, cache: str, stage: str, field: str) -> str:
    pop = f"[populate={populate}]" if populate else ""
    return (
        f"experiments.load.samples[file={file}][method={method}]{pop}[cache={cache}].stages.{stage}.{field}"
    )


def _load(section: dict) -> list[Figure]:
    if not isinstance(section, dict) or section.get("status") != "ok":
        return []
    groups: dict[tuple, list[dict]] = {}
    for s in section.get("samples") or []:
        groups.setdefault((s["file"], s["method"], s.get("populate"), cache_of(s)), []).append(s)
    out = []
    for (file, method, populate, cache), group in groups.items():
        for stage in LOAD_STAGES:
            ok = [st for g in group if (st := g["stages"].get(stage)) and st.get("status") == "ok"]
            if not ok:
                continue
            what = (("time_s", "time", "s", "load_time"),)
            if stage in RSS_STAGES:
                what += (("peak_rss_bytes", "peak RSS", "bytes", "peak_rss"),)
            found = [noise.disturbances(st.get("io"), st.get("noise"), st.get("time_split")) for st in ok]
            flags, summary = noise.flags_of(found, "samples")
            for fld, word, unit, measure in what:
                values = [st[fld] for st in ok]
                out.append(
                    Figure(
                        key=load_key(file, method, populate, cache, stage, fld),
                        experiment="load",
                        name=f"load · {cell_name(method, file, populate)} · {cache} · {stage} · {word}",
                        unit=unit,
                        stage=stage,
                        cache=cache,
                        method=method,
                        file=file,
                        populate=populate,
                        samples=tuple(values),
                        summary=sample_stats(values, unit),
                        measure=measure,
                        units=tuple(values),
                        flags=flags,
                        noise_summary=summary,
                    )
                )
    return out


# --- the ceiling: one sample per proven read -----------------------------------------------------------

# experiments.ceiling's runs: (field stem, runs list, the check a run must pass to count).
_CEILING_RUNS = {"cold": ("cold_runs", "proven"), "warm": ("warm_runs", "verified"),
                 "parallel.cold": ("cold_runs", "proven")}  # fmt: skip


def _ceiling(section: object) -> list[Figure]:
    """One samples figure per ceiling read kind: the rate of each read that passed its cache check."""
    if not isinstance(section, dict) or section.get("status") != "ok":
        return []
    out = []
    for stem, cache, name in CEILING:
        *parts, _ = stem.split(".")
        where = section
        for part in parts:
            where = where.get(part) if isinstance(where, dict) else None
        if not isinstance(where, dict) or (parts and where.get("status") != "ok"):
            continue
        runs_key, check = _CEILING_RUNS[stem]
        runs = [r for r in where.get(runs_key) or [] if isinstance(r, dict) and r.get(check)]
        if not runs:
            continue
        values = [r["mib_s"] for r in runs]
        found = [noise.disturbances(r.get("io"), r.get("noise"), r.get("time_split")) for r in runs]
        flags, summary = noise.flags_of(found, "reads")
        out.append(
            Figure(
                key=f"experiments.ceiling.{stem}_mib_s",
                experiment="ceiling",
                name=f"ceiling · {name} · rate",
                unit="mib_s",
                cache=cache,
                samples=tuple(values),
                summary=sample_stats(values, "mib_s"),
                measure="rate",
                units=tuple(values),
                flags=flags,
                noise_summary=summary,
            )
        )
    return out


# --- the power-cut verdicts ----------------------------------------------------------------------------


def _powercut(section: object) -> list[Figure]:
    if not isinstance(section, dict) or section.get("status") != "ok":
        return []
    out = []
    for r in section.get("recipes") or []:
        for model, label in POWERCUT_MODELS:
            m = (r.get("models") or {}).get(model)
            if not m:
                continue
            out.append(
                Figure(
                    key=f"experiments.powercut.recipes[name={r['name']}].models.{model}.verdict",
                    experiment="powercut",
                    name=f"powercut · {r['number']} {r['title']} · {label}",
                    unit="verdict",
                    kind=VERDICT,
                    method=r["name"],
                    summary={"n": m.get("states")},
                    value=m["verdict"],
                )
            )
    return out


def extract(doc: dict, experiments: tuple[str, ...] | None = None) -> list[Figure]:
    """Every figure of a results document (see the module docstring), generic ones first.

    ``experiments`` keeps only those experiments' figures (the fleet page needs a few, and reads
    hundreds of hosts).
    """
    exps = doc.get("experiments") or {}
    if experiments is not None:
        exps = {k: v for k, v in exps.items() if k in experiments}
    return (
        _generic(exps)
        + _load(exps.get("load"))
        + _ceiling(exps.get("ceiling"))
        + _powercut(exps.get("powercut"))
    )


def by_key(figures: list[Figure]) -> dict[str, Figure]:
    return {f.key: f for f in figures}


def noise_of(doc: dict, experiment: str) -> dict:
    """What one step's figures say of the host's noise in a run: ``{"recorded": bool, "busy": [{"name",
    "summary"}]}``, ``busy`` listing the samples figures with units run while the host was busy (their
    disklab.noise summary; figures of the same units in one entry, their names joined); ``recorded``
    False when no figure of the step recorded any noise."""
    found = [f for f in extract(doc, experiments=(experiment,)) if f.kind == SAMPLES]
    busy: dict[str, list[str]] = {}
    for f in found:
        if f.n_disturbed:
            busy.setdefault(f.noise_summary, []).append(f.name)
    return {
        "recorded": any(f.flags is not None for f in found),
        "busy": [{"name": "; ".join(names), "summary": summary} for summary, names in busy.items()],
    }
