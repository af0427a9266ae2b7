"""What the load section says, from this host's medians: ratios and verdicts, warnings, first responses."""

from __future__ import annotations

from disklab import markup, verdicts
from disklab.sections.load.cells import as_ratio, big, find, judge_cells, label, median, mib
from disklab.sections.load.residency import residency_rows
from disklab.units import ibytes, pct
from disklab_host.cache.pagecache import WILLNEED_HINTS

# At or above this share of the file resident, the report calls the whole file resident (a page or two of
# header or readahead edge may be missing from a fully read file).
FULL_FRACTION = 0.99


def _ratio_lines(section: dict, wanted: list[tuple[str, str, str, str]]) -> list[str]:
    """One sentence per (state, stage, method, base) of the big file that both cells reached: the ratio of
    medians, and the verdict of the method against the base (disklab.verdicts, these lines one family)."""
    cells, found = section["cells"], []
    for state, stage, method, base in wanted:
        a_cell, b_cell = big(cells, method, state), big(cells, base, state)
        a, b = median(a_cell, stage), median(b_cell, stage)
        if a is not None and b:
            found.append((state, stage, method, base, a, b, a_cell, b_cell))
    judged = judge_cells(section, [(f[6], f[7], f[1]) for f in found])
    return [
        f"{state}, {stage}: {method} took {as_ratio(a / b)} {base} here "
        f"({a:.3f} s against {b:.3f} s, medians; "
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
    one = big(cells, "one-tensor", "cold")
    frac = median(one, "all_touched", "resident_fraction")
    if frac is not None:
        share = _one_tensor_share(section)
        share_txt = f" (the tensor itself is {100 * share:.1f} % of the file)" if share else ""
        lines.append(
            f"cold, all_touched: one-tensor left {100 * frac:.1f} % of the file resident{share_txt}; "
            "the rest never came in, apart from readahead."
        )
    for file in ("small_pt", "small_safetensors"):
        for state in ("cold", "warm"):
            c = find(cells, _small_method(cells, file), state, "copy", file)
            a = find(cells, _small_method(cells, file), state, "assign", file)
            tc, ta = median(c, "module_populated"), median(a, "module_populated")
            pc, pa = (
                median(c, "module_populated", "peak_rss_bytes"),
                median(a, "module_populated", "peak_rss_bytes"),
            )
            if None in (tc, ta, pc, pa) or not tc:
                continue
            lines.append(
                f"{state}, module_populated, {file}: meta + assign took {as_ratio(ta / tc)} "
                "normal construction + "
                f"copy ({ta:.3f} s against {tc:.3f} s); peak RSS {mib(pa)} against {mib(pc)}."
            )
    return lines


def _willneed_lines(section: dict) -> list[str]:
    """Did the WILLNEED hint close the cold mmap gap: load_file against torch.load, load_file+willneed
    against both, cold at all_touched, each judged by disklab.verdicts (one family of three)."""
    cells = section["cells"]
    will_c, plain_c, tl_c = (big(cells, m, "cold") for m in ("load_file+willneed", "load_file", "torch.load"))
    will, plain, tl = (median(c, "all_touched") for c in (will_c, plain_c, tl_c))
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
        f"cold, all_touched: load_file+willneed took {as_ratio(will / plain)} load_file and "
        f"{as_ratio(will / tl)} torch.load (medians); {verdict}."
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


def willneed_hints(section: dict) -> list[str]:
    """How load_file+willneed gave its hint in this run's samples, one sentence per way
    (pagecache.WILLNEED_HINTS); empty when no sample gave one."""
    ways = sorted({s["hint"] for s in section["samples"] if s.get("hint")})
    return [f"`{way}`: {WILLNEED_HINTS.get(way, 'a hint this disklab does not know')}" for way in ways]


def probes_held(section: dict) -> bool:
    """Whether every sample that probed residency read on a descriptor held from before the load call
    (``residency_probe: held``), so none opened the file while the clock ran (a sample that failed before
    its probes has no ``residency_probe``)."""
    probes = [s["residency_probe"] for s in section["samples"] if "residency_probe" in s]
    return bool(probes) and all(p == "held" for p in probes)


def warnings(section: dict) -> list[str]:
    """Things the reader must know before trusting a figure."""
    out = []
    page_cache = section.get("workbench_page_cache") or {}
    if page_cache.get("keeps_cache") is False:
        why = markup.md(page_cache["why"][:1].upper() + page_cache["why"][1:])
        if probes_held(section):
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
        cells = sorted({label(c) for c in section["cells"] if c["cache_state"] == "cold_unverified"})
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
                label(c)
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
