"""Residency and the cache proofs: mapped, then resident, and each cold load against the ceilings."""

from __future__ import annotations

from disklab.sections import evidence
from disklab.sections.load.cells import label, order
from disklab.sections.load.time_split import cell_samples
from disklab.units import ibytes, pct

PROOF_PARTS = ("residency", "device_reads", "major_faults")


PART_NAMES = {"residency": "residency", "device_reads": "device reads", "major_faults": "major faults"}


# A load that touched at least this share of its file's bytes read the whole file (the rest is the format's
# header: the safetensors JSON, the .pt zip's pickle and records).
WHOLE_FILE = 0.95


def _proof_text(section: dict, cell: dict) -> str:
    """A cell's cache proof over its samples: ``residency ✓ 3/3 · device reads ✓ 3/3 ...`` (cold), or the
    warm check (``residency ✓ 3/3, cachestat max 100.0 %``)."""
    proof = [s["cache_proof"] for s in cell_samples(section, cell)]
    if not proof:
        return "no samples"
    return " · ".join(
        part_text(n, [p["parts"][n] for p in proof])
        for n in PROOF_PARTS
        if all(n in p["parts"] for p in proof)
    )


def _mapped(section: dict, cell: dict) -> bool:
    """Whether the cell's method reads through a file mapping, as its cold proof judged it (the major-fault
    part applies only to mapped methods, loadlab/proof.py); False for a cell without a cold proof."""
    parts = [(s["cache_proof"].get("parts") or {}).get("major_faults") for s in cell_samples(section, cell)]
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
    for cell in sorted(section["cells"], key=order):
        lr, fr = cell["stages"].get("loader_return"), cell["stages"].get("first_response")
        if not fr or fr.get("status") != "ok" or not lr or lr.get("status") != "ok":
            continue
        dev = fr.get("device_read_bytes")
        out.append(
            {
                "what": label(cell),
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


def part_text(name: str, parts: list[dict]) -> str:
    """One proof part over a cell's samples, e.g. ``device reads ✓ 3/3``."""
    part = PART_NAMES[name]
    statuses = [p["status"] for p in parts]
    n = len(parts)
    if all(st == "not_applicable" for st in statuses):
        return f"{part} n/a ({parts[0].get('why', '')})"
    if all(st == "not_recorded" for st in statuses):
        return f"{part} not recorded ({parts[0]['why']})"
    if "unavailable" in statuses:
        why = next(p.get("why", "") for p in parts if p["status"] == "unavailable")
        return f"{part} unchecked ({why})"
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
        return f"{part} ✗ failed in {fails} of {n}{detail}"
    return f"{part} ✓ {n}/{n}{detail}"


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
    for cell in sorted(section["cells"], key=order):
        if cell["cache_state"] not in ("cold", "cold_unverified"):
            continue
        st = cell["stages"].get("all_touched")
        if not st or st.get("status") != "ok":
            continue
        samples = cell_samples(section, cell)
        proof = [s["cache_proof"] for s in samples]
        texts = [
            part_text(n, [p["parts"][n] for p in proof])
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
                "what": label(cell),
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
