"""Report section for the load lab: stage table, stage timelines, two-worker memory, explanations.

Every figure names its readiness stage and its cache state, and comparisons
are drawn only between figures at the same stage and cache state. The
explanations are computed from this host's own medians (the lesson's figures
are never quoted as this host's). The stages and their order come from
disklab_host.common.stages; "mapped, then resident" (:func:`residency_rows`) is
each populating load's residency at loader_return against first_response, the
measured counterpart of the reference's ML-216.
"""

from __future__ import annotations

import json
from pathlib import Path

from disklab import markup, noise, plotting, verdicts
from disklab.sections import evidence, load_memory, load_time
from disklab.sections.load_time import cell_samples as _cell_samples
from disklab.units import ibytes, pct
from disklab_host.cache.pagecache import WILLNEED_HINTS
from disklab_host.common.stages import MEANING, STAGES

STATES = ("cold", "warm", "cold_unverified", "warm_unverified")
PROOF_PARTS = ("residency", "device_reads", "major_faults")
PART_NAMES = {"residency": "residency", "device_reads": "device reads", "major_faults": "major faults"}
BIG_METHODS = ("torch.load", "torch.load-mmap", "load_file", "one-tensor", "load_file+willneed")
PLOT_NAME = "load_stages.png"
# At or above this share of the file resident, the report calls the whole file resident (a page or two of
# header or readahead edge may be missing from a fully read file).
FULL_FRACTION = 0.99
# A load that touched at least this share of its file's bytes read the whole file (the rest is the format's
# header: the safetensors JSON, the .pt zip's pickle and records).
WHOLE_FILE = 0.95


def _label(cell: dict) -> str:
    if cell.get("populate"):
        return f"{cell['method']} → module ({cell['populate']}), {cell['file']}"
    return f"{cell['method']}, {cell['file']}"


def _median(cell: dict | None, stage: str, field: str = "time_s", which: str = "median") -> float | None:
    if not cell:
        return None
    st = cell["stages"].get(stage)
    if not st or st.get("status") != "ok":
        return None
    return st[field][which]


def side(section: dict, cell: dict | None, stage: str, field: str = "time_s") -> verdicts.Side:
    """A cell's samples at ``stage`` (their ``field``) and the noise of each, as disklab.verdicts judges."""
    recs = [
        st
        for s in (_cell_samples(section, cell) if cell else [])
        if (st := s["stages"].get(stage)) and st.get("status") == "ok"
    ]
    found = [noise.disturbances(st.get("io"), st.get("noise"), st.get("time_split")) for st in recs]
    flags, summary = noise.flags_of(found, "samples")
    return verdicts.Side([st[field] for st in recs], flags, summary)


def judge_cells(section: dict, pairs: list[tuple], stage: str | None = None) -> list[dict]:
    """Verdicts of cell a against cell b (the reference: ratio a/b), judged as one family: ``pairs`` of
    ``(a, b)`` at ``stage``, or ``(a, b, stage)`` each at its own."""
    triples = [(p[0], p[1], p[2] if len(p) > 2 else stage) for p in pairs]
    return verdicts.judge_many(
        [
            verdicts.Pair(
                side(section, b, st), side(section, a, st), "load_time", names=(_label(b), _label(a))
            )
            for a, b, st in triples
        ]
    )


def _find(cells: list[dict], method: str, state: str, populate=None, file=None) -> dict | None:
    for c in cells:
        same = c["method"] == method and c["cache_state"] == state and c.get("populate") == populate
        if same and (file is None or c["file"] == file):
            return c
    return None


def _big(cells: list[dict], method: str, state: str) -> dict | None:
    """The big file's cell of ``method`` and ``state``, populating or not, either file."""
    return next(
        (
            c
            for c in cells
            if c["file"].startswith("big") and c["method"] == method and c["cache_state"] == state
        ),
        None,
    )


def _group(file: str) -> int:
    return 0 if file.startswith("big") else 1 if file.startswith("small") else 2


def _order(cell: dict) -> tuple:
    method = BIG_METHODS.index(cell["method"]) if cell["method"] in BIG_METHODS else 99
    return (
        _group(cell["file"]),
        cell["file"],
        method,
        cell.get("populate") or "",
        cell["cache_state"],
    )


def _bypassing(section: dict) -> set[str]:
    """The methods whose samples read around the page cache (a production loader's O_DIRECT reads)."""
    return {
        s["method"] for s in section["samples"] if (s.get("read_path") or {}).get("page_cache") == "bypassed"
    }


def rows(section: dict) -> list[dict]:
    """One row per cell × stage that ran: medians and spreads, in a stable order. ``bypassed`` marks a
    production loader whose reads bypassed the page cache: its residency at the stop event counts
    nothing it read."""
    out = []
    bypassing = _bypassing(section)
    for cell in sorted(section["cells"], key=_order):
        for stage in STAGES:
            st = cell["stages"].get(stage)
            if not st or st.get("status") != "ok":
                continue
            out.append(
                {
                    "what": _label(cell),
                    "cache_state": cell["cache_state"],
                    "stage": stage,
                    "n": cell["n"],
                    "time_s": st["time_s"],
                    "resident_fraction": st["resident_fraction"]["median"],
                    "resident_bytes": st["resident_bytes"]["median"],
                    "peak_rss_bytes": st["peak_rss_bytes"]["median"],
                    "flag": cell["cache_state"] in ("cold_unverified", "warm_unverified"),
                    "bypassed": cell["method"] in bypassing,
                    "busy": load_time.busy_words(_cell_samples(section, cell), stage),
                }
            )
    return out


def _ratio_lines(section: dict, wanted: list[tuple[str, str, str, str]]) -> list[str]:
    """One sentence per (state, stage, method, base) of the big file that both cells reached: the ratio of
    medians, and the verdict of the method against the base (disklab.verdicts, these lines one family)."""
    cells, found = section["cells"], []
    for state, stage, method, base in wanted:
        a_cell, b_cell = _big(cells, method, state), _big(cells, base, state)
        a, b = _median(a_cell, stage), _median(b_cell, stage)
        if a is not None and b:
            found.append((state, stage, method, base, a, b, a_cell, b_cell))
    judged = judge_cells(section, [(f[6], f[7], f[1]) for f in found])
    return [
        f"{state}, {stage}: {method} took {_x(a / b)} {base} here ({a:.3f} s against {b:.3f} s, medians; "
        f"{verdicts.brief(j)})."
        for (state, stage, method, base, a, b, _, _), j in zip(found, judged, strict=True)
    ]


def explanations(section: dict) -> list[str]:
    """Sentences computed from this host's medians; each names its stage and cache state."""
    cells = section["cells"]
    stages = ("loader_return", "first_response", "all_touched")
    lines = _ratio_lines(
        section,
        [(state, stage, m, "torch.load") for stage in stages for state in ("cold", "warm")
         for m in ("torch.load-mmap", "load_file")],
    )  # fmt: skip
    lines += _mapped_lines(section)
    lines += _willneed_lines(section)
    lines += _ratio_lines(
        section,
        [(state, stage, name, base) for name in (section.get("loaders") or {}).get("requested", [])
         for state in ("cold", "warm") for stage in stages for base in ("load_file", "torch.load")],
    )  # fmt: skip
    one = _big(cells, "one-tensor", "cold")
    frac = _median(one, "all_touched", "resident_fraction")
    if frac is not None:
        share = _one_tensor_share(section)
        share_txt = f" (the tensor itself is {100 * share:.1f} % of the file)" if share else ""
        lines.append(
            f"cold, all_touched: one-tensor left {100 * frac:.1f} % of the file resident{share_txt}; "
            "the rest never came in, apart from readahead."
        )
    for file in ("small_pt", "small_safetensors"):
        for state in ("cold", "warm"):
            c = _find(cells, _small_method(cells, file), state, "copy", file)
            a = _find(cells, _small_method(cells, file), state, "assign", file)
            tc, ta = _median(c, "module_populated"), _median(a, "module_populated")
            pc, pa = (
                _median(c, "module_populated", "peak_rss_bytes"),
                _median(a, "module_populated", "peak_rss_bytes"),
            )
            if None in (tc, ta, pc, pa) or not tc:
                continue
            lines.append(
                f"{state}, module_populated, {file}: meta + assign took {_x(ta / tc)} normal construction + "
                f"copy ({ta:.3f} s against {tc:.3f} s); peak RSS {_mib(pa)} against {_mib(pc)}."
            )
    return lines


def _willneed_lines(section: dict) -> list[str]:
    """Did the WILLNEED hint close the cold mmap gap: load_file against torch.load, load_file+willneed
    against both, cold at all_touched, each judged by disklab.verdicts (one family of three)."""
    cells = section["cells"]
    will_c, plain_c, tl_c = (
        _big(cells, m, "cold") for m in ("load_file+willneed", "load_file", "torch.load")
    )
    will, plain, tl = (_median(c, "all_touched") for c in (will_c, plain_c, tl_c))
    if None in (will, plain, tl) or not plain or not tl:
        return []
    gap, hint, narrowed = judge_cells(
        section, [(plain_c, tl_c), (will_c, tl_c), (will_c, plain_c)], "all_touched"
    )
    closed = hint["verdict"] == verdicts.NO_CHANGE or (
        hint["verdict"] == verdicts.CHANGED and hint["direction"] == "down"
    )
    narrower = narrowed["verdict"] == verdicts.CHANGED and narrowed["direction"] == "down"
    if gap["verdict"] != verdicts.CHANGED or gap["direction"] != "up":
        said = {
            verdicts.NO_CHANGE: "there was no cold mmap gap to close here: load_file was within "
            f"±{gap['min_effect'] * 100:g} % of torch.load",
            verdicts.CHANGED: "no cold mmap gap to close here: load_file was faster than torch.load",
            verdicts.INCONCLUSIVE: "whether there was a cold mmap gap here could not be decided",
            verdicts.DISTURBED: "whether there was a cold mmap gap here could not be decided on a busy host",
        }[gap["verdict"]]
        verdict = f"{said} ({verdicts.brief(gap)})"
    elif closed:
        verdict = f"the hint closed the cold mmap gap here (against torch.load: {verdicts.brief(hint)})"
    elif hint["verdict"] == verdicts.CHANGED and narrower:
        verdict = (
            "the hint narrowed the cold mmap gap here but did not close it (against load_file: "
            f"{verdicts.brief(narrowed)})"
        )
    elif hint["verdict"] == verdicts.CHANGED:
        verdict = (
            "the hint made no difference that these samples can show (against load_file: "
            f"{verdicts.brief(narrowed)})"
        )
    else:
        verdict = (
            "whether the hint closed the gap could not be decided (against torch.load: "
            f"{verdicts.brief(hint)})"
        )
    return [
        f"cold, all_touched: load_file+willneed took {_x(will / plain)} load_file and "
        f"{_x(will / tl)} torch.load (medians); {verdict}."
    ]


def _mapped_lines(section: dict) -> list[str]:
    """Mapped, then resident, in words: for each cold populating load of a mapped method on the big file,
    the file's residency when the call returned against at the first response, and what the device
    delivered up to it (this host's medians)."""
    lines = []
    for r in residency_rows(section):
        if r["cache_state"] != "cold" or not r["mapped"] or not r["file"].startswith("big"):
            continue
        delivered = (
            f"; the device delivered {ibytes(r['device_read_bytes'])} up to it"
            if r["device_read_bytes"] is not None
            else ""
        )
        came = max(r["first_bytes"] - r["return_bytes"], 0)
        said = (
            f"cold, {r['what']}: {pct(r['return_fraction'])} of the file ({ibytes(r['return_bytes'])}) was "
            f"resident when the call returned"
        )
        if r["return_fraction"] >= FULL_FRACTION:
            rest = "this loader read the whole file inside the call: no read was left to the first response"
            lines.append(f"{said} (median): {rest}.")
            continue
        if r["first_fraction"] >= FULL_FRACTION:
            verdict = (
                "the forward pass needed the whole file: the mapping moved these reads into it, not away"
            )
        else:
            verdict = f"{pct(1 - r['first_fraction'])} of the file was still not resident when it answered"
        lines.append(
            f"{said}, {pct(r['first_fraction'])} ({ibytes(r['first_bytes'])}) at first_response, "
            f"{ibytes(came)} more{delivered} (medians); {verdict}."
        )
    return lines


def _proof_text(section: dict, cell: dict) -> str:
    """A cell's cache proof over its samples: ``residency ✓ 3/3 · device reads ✓ 3/3 ...`` (cold), or the
    warm check (``residency ✓ 3/3, cachestat max 100.0 %``)."""
    proof = [s["cache_proof"] for s in _cell_samples(section, cell)]
    if not proof:
        return "no samples"
    return " · ".join(
        _part_text(n, [p["parts"][n] for p in proof])
        for n in PROOF_PARTS
        if all(n in p["parts"] for p in proof)
    )


def _mapped(section: dict, cell: dict) -> bool:
    """Whether the cell's method reads through a file mapping, as its cold proof judged it (the major-fault
    part applies only to mapped methods, loadlab/proof.py); False for a cell without a cold proof."""
    parts = [(s["cache_proof"].get("parts") or {}).get("major_faults") for s in _cell_samples(section, cell)]
    return any(p and p.get("status") != "not_applicable" for p in parts)


def residency_rows(section: dict) -> list[dict]:
    """Mapped, then resident: every cell that reached first_response, with the file's residency at
    loader_return and at first_response (medians, fraction and bytes), the first response's time, peak RSS
    and the device's reads up to it, its next-token ids and its cache proof.

    Each row: ``{"what", "file", "method", "mapped", "cache_state", "flag", "n", "return_fraction",
    "return_bytes", "first_fraction", "first_bytes", "first_time_s", "peak_rss_bytes",
    "device_read_bytes" (None when not recorded), "tokens", "proof"}``, in the table's order. Empty
    where no cell reached first_response.
    """
    out = []
    for cell in sorted(section["cells"], key=_order):
        lr, fr = cell["stages"].get("loader_return"), cell["stages"].get("first_response")
        if not fr or fr.get("status") != "ok" or not lr or lr.get("status") != "ok":
            continue
        dev = fr.get("device_read_bytes")
        out.append(
            {
                "what": _label(cell),
                "file": cell["file"],
                "method": cell["method"],
                "mapped": _mapped(section, cell),
                "cache_state": cell["cache_state"],
                "flag": cell["cache_state"] in ("cold_unverified", "warm_unverified"),
                "n": cell["n"],
                "return_fraction": lr["resident_fraction"]["median"],
                "return_bytes": lr["resident_bytes"]["median"],
                "first_fraction": fr["resident_fraction"]["median"],
                "first_bytes": fr["resident_bytes"]["median"],
                "first_time_s": fr["time_s"],
                "peak_rss_bytes": fr["peak_rss_bytes"]["median"],
                "device_read_bytes": dev["median"] if dev else None,
                "tokens": ", ".join(str(t) for t in cell.get("next_token_ids", [])),
                "proof": _proof_text(section, cell),
            }
        )
    return out


def first_response_lines(section: dict) -> dict:
    """What the section says of the first responses: ``{"agree": bool | None, "lines": [str]}``, one line
    per model, with the next-token ids its loads gave and how close the closest call was; ``agree`` None
    when the stage was not measured (``lines`` then empty)."""
    fr = section.get("first_response") or {}
    if fr.get("status") != "ok":
        return {"agree": None, "lines": []}
    lines = []
    for m in fr["models"]:
        name = markup.md(m["model"])
        if m["agree"]:
            lines.append(
                f"`{name}`: all {m['n']} loads that reached first_response gave next token "
                f"{m['votes'][0]['next_token_id']} (every method and file of these weights, cold and warm; "
                f"smallest gap between the top two logits {m['margin_min']:.3g})."
            )
            continue
        votes = "; ".join(
            f"token {v['next_token_id']} from {v['n']} ({', '.join(markup.md(c) for c in v['cells'])})"
            for v in m["votes"]
        )
        lines.append(
            f"`{name}`: the same weights gave different next tokens: {votes}; smallest gap between the top "
            f"two logits {m['margin_min']:.3g}."
        )
    return {"agree": fr["agree"], "lines": lines}


def _small_method(cells: list[dict], file: str) -> str:
    for c in cells:
        if c["file"] == file:
            return c["method"]
    return ""


def _one_tensor_share(section: dict) -> float | None:
    for s in section["samples"]:
        if s["method"] == "one-tensor" and s["file_size_bytes"]:
            return s["touched_bytes"] / s["file_size_bytes"]
    return None


def _import_spread(section: dict, key: str = "import_s") -> dict | None:
    """Median, min and max over all samples of a per-process setup time in s (imports by default)."""
    vals = sorted(v for s in section["samples"] if (v := s["process"].get(key)) is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    median = vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
    return {"median": median, "min": vals[0], "max": vals[-1], "n": len(vals)}


def _x(r: float) -> str:
    """A ratio with two significant figures below 0.1, so a 0.004× figure never prints as 0.0×."""
    if r >= 10:
        return f"{r:.0f}×"
    return f"{r:.1f}×" if r >= 0.1 else f"{r:.2g}×"


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def willneed_hints(section: dict) -> list[str]:
    """How load_file+willneed gave its hint in this run's samples, one sentence per way
    (pagecache.WILLNEED_HINTS); empty when no sample gave one."""
    ways = sorted({s["hint"] for s in section["samples"] if s.get("hint")})
    return [f"`{way}`: {WILLNEED_HINTS.get(way, 'a hint this disklab does not know')}" for way in ways]


def _probes_held(section: dict) -> bool:
    """Whether every sample's residency probes read on a descriptor held from before the load call
    (``residency_probe: held``), so none opened the file while the clock ran."""
    return all(s.get("residency_probe") == "held" for s in section["samples"])


def warnings(section: dict) -> list[str]:
    """Things the reader must know before trusting a figure."""
    out = []
    page_cache = section.get("workbench_page_cache") or {}
    if page_cache.get("keeps_cache") is False:
        why = markup.md(page_cache["why"][:1].upper() + page_cache["why"][1:])
        if _probes_held(section):
            means = (
                "each load starts from its own open(2), so from an empty cache; disklab's probes at the stop "
                "events read residency on a descriptor opened before the load call, so they open nothing "
                "while the clock runs and empty nothing a loader read."
            )
        else:  # probes that opened the file at each stop event (residency_probe: opened)
            means = (
                "residency at each stop event reads what survived disklab's own probe, which opened the "
                "file (0 % where it drops the cache), and a mapped load reads again, after its "
                "loader_return probe, the pages it had read before it: this run's mapped figures after "
                "loader_return include those second reads."
            )
        out.append(f"{why}. Here that means: {means}")
    if section["n_cold_unverified"]:
        cells = sorted({_label(c) for c in section["cells"] if c["cache_state"] == "cold_unverified"})
        out.append(
            f"{section['n_cold_unverified']} cold run(s) found the file more than 1 % resident before the "
            f"load call, so they are reported as cold_unverified, never as cold: {', '.join(cells)}."
        )
    bypassed = [
        s
        for s in section["samples"]
        if s["cache_state"] == "warm_unverified"
        and (s["cache_proof"].get("page_cache") or {}).get("bypassed")
    ]
    if bypassed:
        names = sorted({s["method"] for s in bypassed})
        why = []
        if any("device_reads" in s["cache_proof"]["failed"] for s in bypassed):
            why.append("the device delivered the file's bytes during the load")
        if any("device_reads" in s["cache_proof"]["unchecked"] for s in bypassed):
            why.append("no device counter on this host could show where the bytes came from")
        because = " and ".join(why) or "their device check failed"
        out.append(
            f"{len(bypassed)} warm run(s) of {', '.join(names)} are warm_unverified, never warm: these "
            "loaders read with O_DIRECT, which bypasses the page cache, so residency cannot prove a warm "
            f"read, and {because}; on this workbench they have no provable warm state (see Production "
            "loaders below)."
        )
    not_bypassed = [
        s
        for s in section["samples"]
        if s["cache_state"] == "warm_unverified"
        and not (s["cache_proof"].get("page_cache") or {}).get("bypassed")
    ]
    if not_bypassed:
        keys = {(s["file"], s["method"], s.get("populate")) for s in not_bypassed}
        cells = sorted(
            {
                _label(c)
                for c in section["cells"]
                if c["cache_state"] == "warm_unverified"
                and (c["file"], c["method"], c.get("populate")) in keys
            }
        )
        why = (
            "the workbench dropped it, as the warning above says"
            if page_cache.get("keeps_cache") is False
            else "something dropped it after the warm-up read"
        )
        out.append(
            f"{len(not_bypassed)} warm run(s) found less than 99 % of the file resident just "
            f"before the load call ({why}), so they are reported as "
            f"warm_unverified, never as warm: {', '.join(cells)}."
        )
    fr = first_response_lines(section)
    if fr["agree"] is False:
        out.append(
            "The first responses disagree: loads of the same weights gave different next tokens (see "
            '"First responses" below). A near tie between the top two logits can flip with the order of a '
            "sum; a wide gap means a load returned other weights."
        )
    for trust in section["residency_trust"]:
        if trust != "ok":
            out.append(f"Residency: {trust}.")
    if section["drop_caches_used"]:
        out.append(
            "drop_caches was used: it empties the page cache of the whole machine, not just the lab's files, "
            "so anything else running on this host lost its cache too."
        )
    return out


def workers_summary(section: dict) -> dict | None:
    """PSS sums of the two-worker runs, and how much torch.load cost beyond mmap."""
    tw = section["two_workers"]
    if tw.get("status") != "ok":
        return None
    runs = {r["method"]: r for r in tw["runs"]}
    copy, mapped = runs.get("torch.load"), runs.get("torch.load-mmap")
    if not copy or not mapped:
        return None
    extra = copy["pss_sum_bytes"] - mapped["pss_sum_bytes"]
    return {
        "extra_pss_bytes": extra,
        "extra_per_file": extra / tw["file_size_bytes"] if tw["file_size_bytes"] else None,
    }


def plot(section: dict, plot_dir: Path) -> str | None:
    """Stage timelines per method (medians), cold and warm side by side; returns the plot's path."""
    cells = sorted(section["cells"], key=_order)
    labels = list(dict.fromkeys(_label(c) for c in cells))  # in the cells' order, each once
    if not labels:
        return None
    # per cache state, per row that has any: (row, [(stage, median time from the load call, s)])
    rows_by_state = {}
    for state in ("cold", "warm"):
        rows_by_state[state] = []
        for y, lab in enumerate(labels):
            cell = next((c for c in cells if _label(c) == lab and c["cache_state"] == state), None)
            times = [(s, _median(cell, s)) for s in STAGES if _median(cell, s) is not None]
            if times:
                rows_by_state[state].append((y, times))

    def draw():
        height = 0.45 * len(labels) + 1.8
        fig = plotting.figure(12, height)
        axes = fig.subplots(1, 2, sharey=True, sharex=True)
        for ax, state in zip(axes, ("cold", "warm"), strict=True):
            rows = rows_by_state[state]
            if rows:
                ax.hlines([y for y, _ in rows], 0, [times[-1][1] for _, times in rows], color="0.75")
            for stage in STAGES:
                pts = [(t, y) for y, times in rows for s, t in times if s == stage]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(
                        xs, ys, plotting.STAGE_MARKERS[stage], color=f"C{STAGES.index(stage)}", label=stage
                    )
            ax.set_title(f"{state} (median time from the load call)")
            ax.set_xlabel("time since the load call (s)")
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks(range(len(labels)), labels)
        axes[0].invert_yaxis()  # top to bottom in table order
        handles = {h.get_label(): h for ax in axes for h in ax.get_lines()}
        fig.legend(
            [handles[s] for s in STAGES if s in handles],
            [s for s in STAGES if s in handles],
            loc="lower center",
            ncol=len(STAGES),
        )
        left = plotting.text_width_in(fig, labels) + 0.25
        plotting.margins(fig, left=left, right=0.15, bottom=1.05, top=0.35, wspace=0.08)
        return fig

    data = {"labels": labels, "rows": rows_by_state}
    plotting.draw_once(Path(plot_dir) / PLOT_NAME, data, draw, __file__)
    return f"{Path(plot_dir).name}/{PLOT_NAME}"


def device_summary(section: dict) -> dict | None:
    """The backend device_placed used, its memory, and its one-time start-up time (outside the clock)."""
    dev = section.get("device")
    if not dev:
        return None
    out = {"status": dev["status"], "reason": dev.get("reason"), "checked": dev.get("checked", [])}
    if dev["status"] != "ok":
        return out

    def fact(v):
        return v["unavailable"] if isinstance(v, dict) else v

    shares, total = dev["shares_memory_with_cpu"], dev["total_memory_bytes"]
    out.update(
        backend=dev["backend"],
        name=markup.md(fact(dev["name"])),  # the host's GPU name, escaped for the report
        name_known=not isinstance(dev["name"], dict),
        total_memory_bytes=None if isinstance(total, dict) else total,
        total_memory_reason=fact(total) if isinstance(total, dict) else None,
        shares=None if isinstance(shares, dict) else shares,
        shares_reason=fact(shares) if isinstance(shares, dict) else dev.get("shares_memory_source"),
        init_s=_import_spread(section, "device_init_s"),
    )
    return out


def _part_text(name: str, parts: list[dict]) -> str:
    """One proof part over a cell's samples, e.g. ``device reads ✓ 3/3``."""
    label = PART_NAMES[name]
    statuses = [p["status"] for p in parts]
    n = len(parts)
    if all(st == "not_applicable" for st in statuses):
        return f"{label} n/a ({parts[0].get('why', '')})"
    if all(st == "not_recorded" for st in statuses):
        return f"{label} not recorded ({parts[0]['why']})"
    if "unavailable" in statuses:
        why = next(p.get("why", "") for p in parts if p["status"] == "unavailable")
        return f"{label} unchecked ({why})"
    fails = statuses.count("fail")
    detail = ""
    if name == "residency":
        top = max((p["fraction"] for p in parts if "fraction" in p), default=None)
        methods = sorted({p.get("method") for p in parts if p.get("method")})
        if top is not None:
            detail = f", {'/'.join(methods)} max {pct(top)}"
    elif name == "device_reads":
        got = [p["device_read_bytes"] for p in parts if "device_read_bytes" in p]
        need = max((p["touched_bytes"] for p in parts if "touched_bytes" in p), default=None)
        if got and need is not None:
            detail = f", min {ibytes(min(got))} for {ibytes(need)} touched"
    elif name == "major_faults":
        got = [p["major_faults"] for p in parts if "major_faults" in p]
        if got:
            detail = f", min {min(got)}"
    if fails:
        return f"{label} ✗ failed in {fails} of {n}{detail}"
    return f"{label} ✓ {n}/{n}{detail}"


def proof_rows(section: dict, results: dict) -> dict:
    """Every cold-requested cell at all_touched with its three-part proof and its share of both ceilings.

    Returns ``{"ceiling": evidence.ceiling, "rows": [{"what", "cache_state", "n", "time_s",
    "file_size_bytes", "device_read_bytes", "device_mib_s", "file_mib_s", "share", "share_parallel",
    "share_by_file", "reading", "proof", "below"}], "below_any": bool, "unused": [{"what", "reading"}],
    "share_by_file": bool}``.
    ``device_mib_s`` is the bytes the device delivered over the stage's time (per sample, median);
    ``share`` that rate as a share of the single-stream cold ceiling, ``share_parallel`` of the
    parallel direct one (where no device counter exists, a network filesystem's, a proven cold load
    that touched the whole file is read against the ceilings by its file rate, ``share_by_file``,
    marked ‡); ``reading`` where the rate sits between them (evidence.ceiling_reading),
    and ``unused`` the rows that beat the single stream but not the parallel read. ``below`` True
    when even the slowest sample's device rate beat the fastest proven run of every ceiling measured
    (a parallel loader may beat one stream honestly).
    """
    ceil = evidence.ceiling(results)
    out = []
    for cell in sorted(section["cells"], key=_order):
        if cell["cache_state"] not in ("cold", "cold_unverified"):
            continue
        st = cell["stages"].get("all_touched")
        if not st or st.get("status") != "ok":
            continue
        samples = _cell_samples(section, cell)
        proof = [s["cache_proof"] for s in samples]
        texts = [
            _part_text(n, [p["parts"][n] for p in proof])
            for n in PROOF_PARTS
            if all(n in p["parts"] for p in proof)
        ]
        failed = sorted({f for p in proof for f in p["failed"]})
        dev = st.get("device_read_mib_s")
        rate = dev["median"] if dev else None
        file_rate = (
            cell["file_size_bytes"] / (1 << 20) / st["time_s"]["median"] if st["time_s"]["median"] else None
        )
        # no device counter (a network filesystem): a proven cold load that touched the whole file had to
        # fetch every byte of it, so its file rate is what it got; the share says it is from that rate
        whole = all(s.get("touched_bytes", 0) >= WHOLE_FILE * s["file_size_bytes"] for s in samples)
        by_file = rate is None and file_rate is not None and cell["cache_state"] == "cold" and whole
        share_rate = file_rate if by_file else rate
        cold, par = ceil["cold"], ceil["parallel"]
        fastest = max((c["max"] for c in (cold, par) if c), default=None)
        below = bool(dev and fastest is not None and dev["min"] > fastest and cell["cache_state"] == "cold")
        out.append(
            {
                "what": _label(cell),
                "cache_state": cell["cache_state"],
                "n": cell["n"],
                "time_s": st["time_s"],
                "file_size_bytes": cell["file_size_bytes"],
                "device_read_bytes": st["device_read_bytes"]["median"]
                if st.get("device_read_bytes")
                else None,
                "device_why": st.get("device_reads_unavailable"),
                "device_mib_s": rate,
                "file_mib_s": file_rate,
                "share": evidence.share_of(share_rate, cold) + (" ‡" if by_file and cold else ""),
                "share_parallel": evidence.share_of(share_rate, par) + (" ‡" if by_file and par else ""),
                "share_by_file": by_file,
                "reading": evidence.ceiling_reading(rate, ceil) if cell["cache_state"] == "cold" else None,
                "proof": " · ".join(texts),
                "failed": [PART_NAMES[f] for f in failed],
                "below": below,
            }
        )
    unused = [
        {"what": r["what"], "reading": r["reading"]}
        for r in out
        if r["reading"] and r["device_mib_s"] > ceil["cold"]["median"]
        and r["device_mib_s"] < ceil["parallel"]["median"]
    ]  # fmt: skip
    return {
        "ceiling": ceil,
        "rows": out,
        "below_any": any(r["below"] for r in out),
        "unused": unused,
        "share_by_file": any(r["share_by_file"] for r in out),
    }


# The user's model's format, as usermodel.sniff names it, in the report's words.
USER_FORMATS = {
    "safetensors": "safetensors",
    "zip": "torch.save's zip format (torch 1.6 and later)",
    "legacy": "torch.save's legacy pickle format (before torch 1.6)",
}
# The rows of the user's own files, by their format, and of the file made from them.
USER_OWN_FILE = {"safetensors": "user_safetensors", "zip": "user_pt", "legacy": "user_pt"}


def user_model_summary(section: dict) -> dict | None:
    """What the "Your model" block says: the section's user_model, with the format found in words
    (``format_text``: sharded .bin included), the rows of the user's own files (``own_file``) and of
    the one made from them (``made``: ok with its path and size, or not_run with the reason)."""
    user = section.get("user_model")
    if not user or user.get("status") != "ok":
        return user
    fmt = user["format"]
    text = USER_FORMATS[fmt]
    if len(user["shards"]) > 1:
        ext = ".safetensors" if fmt == "safetensors" else ".bin"
        text = f"sharded {ext}, {len(user['shards'])} files, in {text}"
    return {
        **user,
        "format_text": text,
        "own_file": USER_OWN_FILE[fmt],
        "made_what": "a .pt (torch.save)"
        if fmt == "safetensors"
        else "a .safetensors of its state dict alone",
        "weights_note": user.get("weights_note"),
        "cells_not_run": user.get("cells_not_run") or [],
    }


# The mapped loaders network_mmap compares with the eager read on a network filesystem, and the eager one.
NETFS_MAPPED = ("torch.load-mmap", "load_file")
NETFS_EAGER = "torch.load"


def network_mmap(section: dict, results: dict) -> dict | None:
    """Whether mmap-based loading lost to an eager read on this run's network or FUSE workbench, by how much.

    Only where the run's audit flags the workbench ``network_or_fuse``
    (None otherwise). Cold, at ``all_touched``, the stage where a mapped load
    has paid for its page accesses: each mapped method (torch.load-mmap on the
    same .pt, load_file on the .safetensors) against torch.load, which reads
    the file with read(2), judged by disklab.verdicts (the two as one family):
    "lost" only when it is called changed, slower. Returns ``{"fstype", "lines"}``:
    one sentence per mapped method, from this run's samples, or saying why no
    proven cold pair exists.
    """
    wb = (results.get("facts") or {}).get("workbench") or {}
    if ((wb.get("flags") or {}).get("network_or_fuse") or {}).get("state") != "set":
        return None
    cells = section["cells"]
    eager = _big(cells, NETFS_EAGER, "cold")
    base = _median(eager, "all_touched")
    lines, pairs = [], []
    for method in NETFS_MAPPED:
        mapped = _big(cells, method, "cold")
        t = _median(mapped, "all_touched")
        if t is None or not base:
            missing = method if t is None else NETFS_EAGER
            lines.append(f"{method}: no proven cold figure of {missing} at all_touched, so no comparison.")
            continue
        pairs.append((method, mapped, t))
    judged = judge_cells(section, [(m, eager) for _, m, _ in pairs], "all_touched") if pairs else []
    for (method, _, t), j in zip(pairs, judged, strict=True):
        times = f"{t:.3f} s against {base:.3f} s, medians"
        if j["verdict"] == verdicts.CHANGED and j["direction"] == "up":
            verdict = f"lost: it took {_x(t / base)} torch.load's time ({times}; {verdicts.brief(j)})"
        elif j["verdict"] in (verdicts.CHANGED, verdicts.NO_CHANGE):
            verdict = f"did not lose: it took {_x(t / base)} torch.load's time ({times}; {verdicts.brief(j)})"
        else:
            verdict = (
                f"took {_x(t / base)} torch.load's time ({times}), but whether it lost could not be decided "
                f"({verdicts.brief(j)}; `lab_run_load_repeats` sets the samples)"
            )
        lines.append(f"cold, all_touched: {method} {verdict}.")
    dropped = (section.get("workbench_page_cache") or {}).get("keeps_cache") is False
    if dropped and not _probes_held(section):
        lines.append(
            "In this run disklab's own probe opened the file at each stop event, and this workbench empties "
            "a file's page cache at every open(2): the mapped loads read again what they had read before "
            "each probe, so their figures after loader_return overstate the loss. A run of this disklab, "
            "whose probes open nothing while the clock runs, compares them fairly."
        )
    return {"fstype": markup.md(str(wb.get("fstype"))), "lines": lines}


def _knob_value(knob: dict) -> str:
    """A knob's value as the report shows it: the loader's own choice where its default is decided at
    run time, inventory values escaped (markup.md)."""
    if knob["value"] is None:
        return markup.md(knob.get("default_text") or "the loader's choice")
    return markup.md(json.dumps(knob["value"]) if isinstance(knob["value"], bool) else knob["value"])


def _loader_proof(name: str, rec: dict, samples: list[dict]) -> list[str]:
    """What this loader's cold proof could and could not check, from its own samples' proofs."""
    mine = [s for s in samples if s["method"] == name]
    cold = [s for s in mine if s["cache_state_requested"] == "cold"]
    warm = [s for s in mine if s["cache_state_requested"] == "warm"]
    bypass = [s for s in mine if (s.get("read_path") or {}).get("page_cache") == "bypassed"]
    out = []
    if not mine:
        return out
    if rec["reads_through_mapping"]:
        out.append("major faults: checked (it reads through a file mapping)")
    else:
        out.append(
            "major faults: not applicable (no file mapping to fault on: it reads into its own buffers)"
        )
    if cold:
        parts = [p for s in cold for p in [s["cache_proof"]["parts"]["device_reads"]]]
        passed = sum(p["status"] == "pass" for p in parts)
        unchecked = [p.get("why", "") for p in parts if p["status"] == "unavailable"]
        dev = (
            f"device reads: unchecked ({markup.md(unchecked[0])})"
            if unchecked
            else f"device reads: passed in {passed}/{len(parts)} cold samples"
        )
        out.append(f"residency just before the call: checked (the eviction); {dev}")
    if bypass:
        after = [
            s["stages"]["all_touched"]["resident_fraction"]
            for s in bypass
            if s["cache_state_requested"] == "cold"
        ]
        how = markup.md(bypass[0]["read_path"]["how"])
        note = (
            f" (after a cold load, {pct(max(after))} of the file was resident at all_touched)"
            if after
            else ""
        )
        out.append(
            f"residency after the call: meaningless here, its reads bypassed the page cache ({how}){note}"
        )
        failed = sum(s["cache_state"] == "warm_unverified" for s in warm)
        if warm:
            out.append(
                "warm: cannot be proven by residency, so the device had to deliver less than the file: it "
                f"did not in {failed}/{len(warm)} warm samples, reported warm_unverified"
            )
    else:
        out.append("residency after the call: meaningful (its reads go through the page cache)")
    return out


def _gpu_note(rec: dict) -> str | None:
    """Whether a GPU-only loader's GPU path ran here (None for a loader that needs no GPU)."""
    if not rec["needs_gpu"]:
        return None
    if rec["gpu_path_run"]:
        return "its GPU path ran on this host"
    return "it needs a GPU, and its GPU path was not run on real hardware here"


def loaders_block(section: dict) -> dict | None:
    """The "Production loaders" block: for each loader asked for (the section's ``loaders``), its title,
    status (installed version, or not_run with the reason, escaped), pins and why, how it read the file
    (its samples' ``read_path``, else its docs), its knobs with values and sources, and what its cold
    proof could and could not check (:func:`_loader_proof`); with tensorizer's file sizes (the
    section's ``files``). None when no loader was asked for."""
    lo = section.get("loaders")
    if not lo:
        return None
    out = []
    for name in lo["requested"]:
        rec = lo["loaders"][name]
        observed = rec.get("observed") or []
        out.append(
            {
                "name": name,
                "title": rec["title"],
                "ok": rec["status"] == "ok",
                "version": markup.md(rec.get("version", "")),
                "reason": markup.md(rec.get("reason", "")),
                "status_text": f"installed {markup.md(rec['version'])}."
                if rec["status"] == "ok"
                else f"not run: {markup.md(rec['reason'].rstrip('.'))}.",
                "pins": ", ".join(f"`{p}`" for p in rec["pins"]),
                "pin_why": rec["pin_why"],
                "read_path": [
                    f"{markup.md(o['how'])} (from {markup.md(o['source'])}; {o['n']} sample(s))"
                    for o in observed
                ]
                or [rec["read_path"] + " (its docs and code; no sample ran)"],
                "knobs": [
                    {
                        "name": k,
                        "value": _knob_value(v),
                        "source": v["source"],
                        "env": v["env"],
                        "default_source": v["default_source"],
                    }
                    for k, v in rec["knobs"].items()
                ],
                "proof": _loader_proof(name, rec, section["samples"]),
                "gpu": _gpu_note(rec),
            }
        )
    files = section["files"]
    tz = [
        {"file": key, "path": markup.md(files[key]["path"]), "size_bytes": files[key]["size_bytes"]}
        for key in ("big_tensors",)
        if key in files
    ]
    return {"loaders": out, "tensorizer_files": tz}


def _split_quotes(split: list[dict]) -> list[str]:
    """Cold against warm, in where the time went: the mapped loads' and torch.load's split at all_touched
    (load_time.quote), for each method of the big file that has both."""
    out = []
    for what in dict.fromkeys(r["what"] for r in split):
        cold, warm = (load_time.quote(split, what, c) for c in ("cold", "warm"))
        if cold and warm:
            out.append(f"{cold}; {warm}.")
    return out


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Context for templates/sections/load.md.j2 (see disklab.sections). Never raises on not_run/failed."""
    if section.get("status") != "ok":
        return {"ok": False}
    split = load_time.rows(section, sorted(section["cells"], key=_order), _label)
    stage_rows = rows(section)
    return {
        "ok": True,
        "proof": proof_rows(section, results),
        "rows": stage_rows,
        "memory_plot": load_memory.plot(stage_rows, plot_dir),
        "stages": [(st, MEANING[st]) for st in STAGES],
        "big_model": section["big_model"],
        "residency": residency_rows(section),
        "first_response": first_response_lines(section),
        "explanations": explanations(section),
        "willneed_hints": willneed_hints(section),
        "warnings": warnings(section),
        "workers": workers_summary(section),
        "import_s": _import_spread(section),
        "device_context_init_s": _import_spread(section, "device_context_init_s"),
        "device": device_summary(section),
        "user_model": user_model_summary(section),
        "plot": plot(section, plot_dir),
        "time_split": split,
        "noise_missing": load_time.noise_missing(section),
        "time_split_plot": load_time.plot(split, plot_dir),
        "time_split_missing": load_time.not_recorded(split),
        "time_split_quotes": _split_quotes(split),
        "netfs": network_mmap(section, results),
        "loaders": loaders_block(section),
    }
