"""The answers a host report opens with ("On this host"), and the per-host facts the index's own answers
read (disklab.fleet.answers).

Each answer is one line computed from the figures of the run its section is from: the section builders'
values (``x``, disklab.sections) and the stored section itself, read through :mod:`disklab.figures` for
the load and power-cut figures, and :func:`disklab.report.durable_sync` for the sync (the index's column).
No number and no claim of the lesson is written here: a line without its figure says why (the step is in
no stored run, it was not run, it failed, its cold proof failed). Every string from a host goes through
disklab.markup (``md``, ``code``); the lines are markdown, each linking to its section's anchor
(disklab.anchors.section).
"""

from __future__ import annotations

from disklab import anchors, figures, verdicts
from disklab.markup import code, md
from disklab.sections import evidence
from disklab.sections import savers as saversection
from disklab.sections.load import time_split
from disklab.units import ibytes, ns, pct, ratio, secs, us

# At most this many lines: the answers have to fit the top of the page.
MAX_LINES = 15
OPT_IN = ("savers",)  # steps asked for by a setting (lab_run_savers): a line only where they ran
# An error quoted in an answer is cut here (the section below quotes all of it).
ERROR_CHARS = 160
WARM_MIN = "at least 99 % resident just before the call"
PART_NAMES = {"residency": "residency", "device_reads": "device reads", "major_faults": "major faults"}
# Cold samples whose proof failed (their cache proof's verdict, figures.cache_of).
UNPROVEN = ("cold_unproven", "cold_unverified")


def anchor(name: str) -> str:
    """The id of step ``name``'s section in the host report, from its heading (disklab.anchors.section:
    ``fsync-the-cost-of-durability``), the same in report.md and report.html."""
    return anchors.section(name)


def _short(text: object) -> str:
    text = str(text)
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def _why_missing(name: str, sec: dict | None) -> str | None:
    """Why a step has no figure to answer with, escaped; None when its section ran."""
    if sec is None:
        return f"no figure: no stored run of this host holds the {name} step"
    s = sec["section"]
    if s.get("status") == "not_run":
        return f"no figure: {name} was not run ({md(_short(s.get('reason', 'no reason recorded')))})"
    if s.get("status") == "failed":
        return f"no figure: {name} failed: {code(_short(s.get('error', 'no error recorded')))}"
    return None


def _line(label: str, anchor: str, text: str) -> dict:
    return {"label": label, "anchor": anchor, "text": text}


# --- one answer per question -----------------------------------------------------------------------


def _write_buffering(sec: dict) -> str:
    s, x = sec["section"], sec["view"]
    unbuf = s["modes"]["unbuffered"]["per_call_ns"]["median"]
    buf = s["modes"]["buffered"]["per_call_ns"]["median"]
    size = s["buffer"]["observed_buffer_bytes"]
    if x.get("ratio") is None:
        return f"not comparable: the buffered `f.write` median was {ns(buf)} per call"
    if x["ratio"] <= 1:
        return (
            f"the buffered `f.write` was not cheaper than an unbuffered 1-byte `os.write` here ({ns(buf)} "
            f"against {ns(unbuf)} per call, medians): unexpected; see the step's raw samples for a "
            "disturbed run"
        )
    return (
        f"an unbuffered 1-byte `os.write` cost {ratio(x['ratio'])} a buffered `f.write` "
        f"({ns(unbuf)} against {ns(buf)} per call, medians); Python's buffer here held {ibytes(size)}"
    )


def _write_cache(device: dict, p50_us: float) -> str:
    """The device's write-cache mode, read against a durable-sync p50 (evidence.fsync_reading, short)."""
    dev = md(device["name"]) if device.get("name") else "the workbench device"
    wc = device.get("write_cache")
    if wc is None:
        why = device.get("write_cache_why") or "not in the facts"
        return f"the write-cache mode of {dev} is unknown ({md(why)})"
    if wc == "write through":
        return f"{dev} reports `write through`: no cache flush is sent, the sync waits for the write alone"
    if wc == "write back" and p50_us < evidence.PLAUSIBLE_FLUSH_US:
        return (
            f"{dev} reports a volatile write cache (`write back`), yet the p50 is under "
            f"{evidence.PLAUSIBLE_FLUSH_US:.0f} µs: possibly answered below this OS, or power-loss protection"
        )
    if wc == "write back":
        return f"{dev} reports a volatile write cache (`write back`): each sync includes a cache flush"
    return f"{dev} reports write_cache {code(wc)}"


def _fsync(sec: dict, sync: dict) -> str:
    if sync["p50_us"] is None:
        return f"no durable figure: {md(sync['why'])}"
    s, x = sec["section"], sec["view"]
    mode = x["os"]["figures_mode"]
    p99 = s["modes"][mode]["latency"]["p99_us"]
    device = (x.get("durability") or {}).get("device") or {}
    return (
        f"a 4 KiB `os.write` plus `{sync['call']}` took {us(sync['p50_us'])} at p50 ({us(p99)} at p99) per "
        f"call on the workbench; {_write_cache(device, sync['p50_us'])}"
    )


def _big_write(sec: dict) -> str:
    s, x = sec["section"], sec["view"]
    call = x["durable"]["call"] if x.get("durable") else "fsync"
    share = (
        f"; the {call} after it took {pct(x['fsync_share'])} of write + sync (median)"
        if x.get("fsync_share") is not None
        else ""
    )
    layers = s.get("layers")
    row = None
    if isinstance(layers, dict) and layers.get("cachestat") == "ok":
        row = next((r for r in layers.get("rows", []) if r["point"] == "after_write"), None)
    if row is None or "unavailable" in row["pages"]:
        why = layers.get("unavailable") if isinstance(layers, dict) else None
        why = why or (layers or {}).get("cachestat") or "not recorded in this run"
        return f"pages not counted ({md(why)}){share}"
    p = row["pages"]
    pending = p["dirty_pages"] + p["writeback_pages"]
    verdict = "still in the page cache, not yet on the device," if pending else "already written back"
    return (
        f"when `write()` of {ibytes(layers['size_bytes'] if 'size_bytes' in layers else s['size_bytes'])} "
        f"returned, the data was {verdict} by cachestat: {p['dirty_pages']:,} dirty and "
        f"{p['writeback_pages']:,} writeback pages of {p['cached_pages']:,} cached{share}"
    )


def _crash(sec: dict) -> str:
    modes = sec["section"]["modes"]
    parts = []
    for mode in ("naive", "atomic"):
        kills = modes.get(mode, {}).get("kills")
        if not kills:
            parts.append(f"{mode}: not measured")
            continue
        n = len(kills)
        loads = sum(k["outcome"] in ("old_ok", "new_ok") for k in kills)
        bad = sum(k["outcome"] in ("corrupt", "missing") for k in kills)
        parts.append(f"{mode}: {loads} of {n} SIGKILLs left a checkpoint that loads ({bad} did not)")
    return "; ".join(parts) + " (a kill keeps the page cache: this is not a power cut)"


def _powercut(sec: dict) -> str:
    found = [
        f
        for f in figures.extract(sec["doc"], experiments=("powercut",))
        if f.kind == figures.VERDICT and f.key.endswith(".power_cut.verdict")
    ]
    if not found:
        return "no figure: the step recorded no recipe"
    by: dict[str, list[str]] = {}
    for f in found:
        by.setdefault(str(f.value), []).append(md(f.name.removeprefix("powercut · ").rsplit(" · ", 1)[0]))
    unsafe = by.pop("unsafe", [])
    head = (
        f"{len(unsafe)} of {len(found)} save recipes are unsafe under a simulated power cut "
        f"(crash states built from this host's recording): {'; '.join(unsafe)}"
        if unsafe
        else f"none of {len(found)} save recipes is unsafe under a simulated power cut"
    )
    rest = [f"{len(names)} {md(v)}" for v, names in sorted(by.items())]
    return head + (f"; the others: {', '.join(rest)}" if rest else "")


def _pickle(sec: dict) -> str:
    s, x = sec["section"], sec["view"]
    torch = md(s["torch_version"])
    if x.get("safe"):
        return (
            f"torch {torch} refused the crafted .pt ({md(s['error_type'])}) and the marker file was not "
            "created: the payload did not run"
        )
    if s["refused"]:
        return f"torch {torch} raised {md(s['error_type'])}, but the marker file was created: the payload ran"
    if s["marker_created"]:
        return (
            f"**no:** torch {torch} loaded the crafted .pt and the payload ran (the marker file was created)"
        )
    return f"torch {torch} loaded the crafted .pt without an error, and the marker file was not created"


# --- the load step ----------------------------------------------------------------------------------


def _samples_of(section: dict, f: figures.Figure) -> list[dict]:
    return [
        s
        for s in section.get("samples") or []
        if (s["file"], s["method"], s.get("populate"), figures.cache_of(s))
        == (f.file, f.method, f.populate, f.cache)
    ]


def proof_words(section: dict, f: figures.Figure) -> str:
    """How a load figure's cache state was proven, over its samples: ``proven cold by residency, device
    reads and major faults in 3 of 3 samples`` (parts unchecked on this host named with why), or ``warm
    by residency: at least 99 % resident just before the call in 3 of 3 samples``."""
    samples = _samples_of(section, f)
    proofs = [s["cache_proof"] for s in samples]
    n = len(samples)
    if f.cache == "warm":
        return f"warm by residency: {WARM_MIN} in {len(proofs)} of {n} samples"
    passed, unchecked = [], []
    for part, label in PART_NAMES.items():
        statuses = [p["parts"].get(part, {}).get("status") for p in proofs]
        if all(st == "pass" for st in statuses):
            passed.append(label)
        elif "unavailable" in statuses:
            why = next(
                p["parts"][part].get("why", "") for p in proofs if p["parts"][part]["status"] == "unavailable"
            )
            unchecked.append(f"{label} ({md(why)})")
    said = ", ".join(passed[:-1]) + (" and " if len(passed) > 1 else "") + passed[-1] if passed else "no part"
    out = f"proven cold by {said} in {len(proofs)} of {n} samples"
    return out + (f"; unchecked here: {', '.join(unchecked)}" if unchecked else "")


def _file_sizes(section: dict) -> dict[str, int]:
    return {s["file"]: s["file_size_bytes"] for s in section.get("samples") or []}


def _times(found: list[figures.Figure], stage: str) -> list[figures.Figure]:
    return [f for f in found if f.stage == stage and f.unit == "s" and f.cache in figures.PROVEN]


def _weights_of(section: dict) -> dict[tuple, str]:
    """Each load cell's weights: ``(file, method, populate)`` → the model its samples loaded (``big``,
    ``tiny``, the user's), so the same weights held in different formats (big_pt, big_safetensors,
    big_tensors) are compared with one another; a cell with no model (one-tensor) keeps its file."""
    return {
        (s["file"], s["method"], s.get("populate")): s["model"]
        for s in section.get("samples") or []
        if s.get("model")
    }


def _biggest_weights(
    found: list[figures.Figure], sizes: dict[str, int], weights: dict[tuple, str]
) -> tuple[str, list[figures.Figure]]:
    """The weights the answer is about, and the figures that loaded them: the biggest (by its largest
    file), a model's weights before a bare file of the same size."""
    groups: dict[str, list[figures.Figure]] = {}
    for f in found:
        groups.setdefault(weights.get((f.file, f.method, f.populate)) or f"file {f.file}", []).append(f)
    name = max(
        groups,
        key=lambda g: (max(sizes.get(f.file, 0) for f in groups[g]), not g.startswith("file "), g),
    )
    return name, groups[name]


def _cell(f: figures.Figure) -> str:
    return md(_plain_cell(f))


def _plain_cell(f: figures.Figure) -> str:
    return figures.cell_name(f.method, f.file, f.populate)


def _split_quote(sec: dict, cold: figures.Figure) -> str | None:
    """Where a cold load's time went, from the load section's time split (its median sample at
    all_touched): the mapped torch.load-mmap against the eager torch.load on the big file where both ran
    (the lesson's "mmap is not faster disk", measured), else this answer's own cell, cold and warm:
    ``cold torch.load-mmap ... spent 0.61 s of 0.98 s blocked on I/O, in 64,000 major faults``; None
    when this run recorded no split."""
    rows = (sec.get("view") or {}).get("time_split") or []
    whats = list(dict.fromkeys(r["what"] for r in rows if r["cache_state"] == "cold"))
    mapped = [w for w in whats if w.startswith("torch.load-mmap") and "big" in w]
    eager = [w for w in whats if w.startswith("torch.load ") and "big" in w]
    if mapped and eager:
        said = [q for w in (mapped[0], eager[0]) if (q := time_split.quote(rows, w, "cold"))]
    else:
        said = [q for c in ("cold", "warm") if (q := time_split.quote(rows, _plain_cell(cold), c))]
    return "; ".join(said) if said else None


def _rss(found: list[figures.Figure], f: figures.Figure, section: dict) -> str:
    """``, peak RSS 1.2 GiB`` at the figure's stage: its peak-RSS figure (figures.RSS_STAGES), else the
    median over the same samples' stage records; empty when neither holds one."""
    rss = next(
        (
            g
            for g in found
            if g.unit == "bytes"
            and (g.file, g.method, g.populate, g.cache, g.stage)
            == (f.file, f.method, f.populate, f.cache, f.stage)
        ),
        None,
    )
    if rss:
        return f", peak RSS {ibytes(rss.median)}"
    peaks = [
        st["peak_rss_bytes"]
        for s in _samples_of(section, f)
        if (st := s["stages"].get(f.stage)) and st.get("status") == "ok" and "peak_rss_bytes" in st
    ]
    return f", peak RSS {ibytes(figures.sample_stats(peaks)['median'])}" if peaks else ""


def _load_lines(sec: dict, anchor: str) -> list[dict]:
    s = sec["section"]
    found = figures.extract(sec["doc"], experiments=("load",))
    sizes = _file_sizes(s)
    weights = _weights_of(s)
    lines = []
    # cold against warm at all_touched: torch.load (the method the others are read against) where it ran
    at = _times(found, "all_touched")
    pairs = []
    for f in at:
        if f.cache == "cold":
            key = (f.file, f.method, f.populate)
            warm = next((g for g in at if g.cache == "warm" and (g.file, g.method, g.populate) == key), None)
            if warm is not None:
                pairs.append((f, warm))
    pairs.sort(
        key=lambda p: (p[0].method != "torch.load", p[0].populate is not None, -sizes.get(p[0].file, 0))
    )
    # every comparison these lines make is judged in one family (disklab.verdicts): cold against warm
    # first, then each fastest method against the next fastest at its stage and cache state
    wanted: list[verdicts.Pair] = []
    if pairs:
        cold, warm = pairs[0]
        wanted.append(verdicts.Pair(warm.side(), cold.side(), "load_time", names=("warm", "cold")))
    fastest = []
    for stage in figures.LOAD_STAGES:
        here = _times(found, stage)
        if not here:
            fastest.append((stage, None, [], []))
            continue
        name, group = _biggest_weights(here, sizes, weights)
        per_cache = []
        for cache in figures.PROVEN:
            cands = sorted((f for f in group if f.cache == cache), key=lambda f: f.median)
            per_cache.append((cache, cands))
            if len(cands) > 1:
                names = (_plain_cell(cands[1]), _plain_cell(cands[0]))
                wanted.append(verdicts.Pair(cands[1].side(), cands[0].side(), "load_time", names=names))
        fastest.append((stage, name, group, per_cache))
    judged = iter(verdicts.judge_many(wanted))
    if pairs:
        cold, warm = pairs[0]
        j = next(judged)
        times = (
            f"{ratio(cold.median / warm.median)} its warm time" if warm.median else "warm time not above 0 s"
        )
        split = _split_quote(sec, cold)
        lines.append(
            _line(
                "Cold against warm",
                anchor,
                f"{_cell(cold)} ({ibytes(sizes.get(cold.file, 0))}) reached readiness stage `all_touched` in "
                f"{secs(cold.median)} cold against {secs(warm.median)} warm (medians of "
                f"{cold.summary['n']} and {warm.summary['n']} samples), {times} ({md(verdicts.brief(j))})"
                f"{f'; {md(split)}' if split else ''}; {proof_words(s, cold)}; {proof_words(s, warm)}",
            )
        )
    else:
        lines.append(_line("Cold against warm", anchor, f"no figure: {_no_pair_why(found, s)}"))
    # the fastest method to each readiness stage, cold and warm, over every file of the biggest weights
    for stage, name, group, per_cache in fastest:
        if name is None:
            why = _stage_why(s, stage)
            if why:
                lines.append(_line(f"Fastest to `{stage}`", anchor, f"no figure: {why}"))
            continue
        files = sorted({f.file for f in group})
        parts = []
        for cache, cands in per_cache:
            if not cands:
                parts.append(f"{cache}: no proven {cache} figure")
                continue
            best = cands[0]
            ahead = ""
            if len(cands) > 1:
                j = next(judged)
                ahead = f", against the next, {_cell(cands[1])}: {md(verdicts.brief(j))}"
            parts.append(
                f"{cache}: {md(best.method)}{f' → module ({md(best.populate)})' if best.populate else ''}"
                f"{f' from {md(best.file)}' if len(files) > 1 else ''} "
                f"in {secs(best.median)} (median){_rss(found, best, s)}, {proof_words(s, best)}{ahead}"
            )
        held = ", ".join(f"{md(f)} {ibytes(sizes.get(f, 0))}" for f in files)
        said = (
            f"on {md(files[0])} ({ibytes(sizes.get(files[0], 0))})"
            if name.startswith("file ")
            else f"on the `{md(name)}` weights, in every file that held them ({held})"
        )
        lines.append(_line(f"Fastest to `{stage}`", anchor, f"{said}: " + "; ".join(parts)))
    fr = s.get("first_response") or {}
    if fr.get("status") == "ok" and fr.get("agree") is False:
        split = [m for m in fr["models"] if not m["agree"]]
        said = "; ".join(
            f"{md(m['model'])}: " + ", ".join(f"token {v['next_token_id']} ×{v['n']}" for v in m["votes"])
            for m in split
        )
        lines.append(
            _line(
                "First responses disagree",
                anchor,
                f"loads of the same weights gave different next tokens ({said}): see the load section",
            )
        )
    unproven = cold_unproven_of(s)
    if unproven["samples"]:
        cells = "; ".join(md(c) for c in unproven["cells"])
        failed = ", ".join(unproven["failed"]) or "the residency before the call"
        lines.append(
            _line(
                "Cold proof failed",
                anchor,
                f"{unproven['samples']} cold sample(s) failed their proof ({failed}) and are kept out of "
                f"every cold figure above: {cells}",
            )
        )
    return lines


def _no_pair_why(found: list[figures.Figure], section: dict) -> str:
    if any(f.cache in UNPROVEN for f in found):
        return "no cold figure at `all_touched` passed its proof on a file that also has a warm one"
    return "no file has both a proven cold and a warm figure at `all_touched` in this run"


def _stage_why(section: dict, stage: str) -> str | None:
    """Why no figure reached ``stage``: the step's own record of it (module_populated, device_placed)."""
    rec = section.get(stage)
    if isinstance(rec, dict) and rec.get("status") != "ok":
        return f"`{stage}` was not measured: {md(_short(rec.get('reason', rec.get('status'))))}"
    return None


def cold_unproven_of(section: dict) -> dict:
    """Cold load samples whose cache proof failed: ``{"samples": n, "cells": [name], "failed": [part]}``."""
    bad = [s for s in section.get("samples") or [] if figures.cache_of(s) in UNPROVEN]
    cells = sorted({figures.cell_name(s["method"], s["file"], s.get("populate")) for s in bad})
    failed = sorted({PART_NAMES.get(p, p) for s in bad for p in s["cache_proof"]["failed"]})
    return {"samples": len(bad), "cells": cells, "failed": failed}


def cold_unproven(sections: list[dict]) -> dict | None:
    """For the index: the load section's failed cold proofs (:func:`cold_unproven_of`) with its run id,
    or None when no run of the host has a load section that ran."""
    sec = next((s for s in sections if s["name"] == "load"), None)
    if sec is None or sec["section"].get("status") != "ok":
        return None
    return {**cold_unproven_of(sec["section"]), "run_id": sec["run"]["run_id"], "anchor": sec["anchor"]}


# --- the whole answer ---------------------------------------------------------------------------------


def _savers(sec: dict) -> str:
    text = saversection.summary(sec["section"])
    return (
        md(text) + " (on this workbench)" if text else "no figure: no saver of lab_run_savers could run here"
    )


QUESTIONS = (
    ("write_buffering", "A syscall against the buffer", _write_buffering),
    ("fsync_bench", "A durable sync", None),
    ("big_write", "A big write", _big_write),
    ("crash", "A kill during a save", _crash),
    ("powercut", "A power cut", _powercut),
    ("savers", "The savers you run", _savers),
    ("load", "Loading weights", None),
    ("pickle_safety", "A malicious pickle", _pickle),
)


def host_answers(sections: list[dict], sync: dict, runs: list[dict]) -> dict:
    """The "On this host" answers: ``{"lines": [{"label", "anchor", "text"}], "runs": runs, "mixed": bool}``.

    ``sections`` are disklab.report.host_context's (each with its stored ``section``, its built ``view``, the
    ``doc`` it was read from and its ``run``); ``sync`` is :func:`disklab.report.durable_sync` of the run
    the fsync_bench section is from; ``runs`` is disklab.report.mixed_runs. ``text`` is markdown with every
    host string escaped. At most :data:`MAX_LINES` lines, the mixed-runs note included.
    """
    by = {sec["name"]: sec for sec in sections}
    lines: list[dict] = []
    for name, label, answer in QUESTIONS:
        sec = by.get(name)
        aid = anchor(name)
        missing = _why_missing(name, sec)
        if name in OPT_IN and (sec is None or sec["section"].get("status") == "not_run"):
            continue  # a step the inventory did not ask for has no question to answer
        if name == "load" and not missing:
            lines += _load_lines(sec, aid)
            continue
        if missing:
            lines.append(_line(label, aid, missing))
        elif name == "fsync_bench":
            lines.append(_line(label, aid, _fsync(sec, sync)))
        else:
            lines.append(_line(label, aid, answer(sec)))
    room = MAX_LINES - (1 if len(runs) > 1 else 0)
    return {"lines": lines[:room], "runs": runs, "mixed": len(runs) > 1}
