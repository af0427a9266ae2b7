"""The load section's cells: labels, order and medians, the stage table, the verdicts between cells."""

from __future__ import annotations

from disklab import noise, verdicts
from disklab.sections.load.time_split import busy_words, cell_samples
from disklab_host.common.stages import STAGES

STATES = ("cold", "warm", "cold_unverified", "warm_unverified")


BIG_METHODS = ("torch.load", "torch.load-mmap", "load_file", "one-tensor", "load_file+willneed")


def label(cell: dict) -> str:
    if cell.get("populate"):
        return f"{cell['method']} → module ({cell['populate']}), {cell['file']}"
    return f"{cell['method']}, {cell['file']}"


def median(cell: dict | None, stage: str, field: str = "time_s", which: str = "median") -> float | None:
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
        for s in (cell_samples(section, cell) if cell else [])
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
            verdicts.Pair(side(section, b, st), side(section, a, st), "load_time", names=(label(b), label(a)))
            for a, b, st in triples
        ]
    )


def find(cells: list[dict], method: str, state: str, populate=None, file=None) -> dict | None:
    for c in cells:
        same = c["method"] == method and c["cache_state"] == state and c.get("populate") == populate
        if same and (file is None or c["file"] == file):
            return c
    return None


def big(cells: list[dict], method: str, state: str) -> dict | None:
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


def order(cell: dict) -> tuple:
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
    for cell in sorted(section["cells"], key=order):
        for stage in STAGES:
            st = cell["stages"].get(stage)
            if not st or st.get("status") != "ok":
                continue
            out.append(
                {
                    "what": label(cell),
                    "cache_state": cell["cache_state"],
                    "stage": stage,
                    "n": cell["n"],
                    "time_s": st["time_s"],
                    "resident_fraction": st["resident_fraction"]["median"],
                    "resident_bytes": st["resident_bytes"]["median"],
                    "peak_rss_bytes": st["peak_rss_bytes"]["median"],
                    "flag": cell["cache_state"] in ("cold_unverified", "warm_unverified"),
                    "bypassed": cell["method"] in bypassing,
                    "busy": busy_words(cell_samples(section, cell), stage),
                }
            )
    return out


def as_ratio(r: float) -> str:
    """A ratio with two significant figures below 0.1, so a 0.004× figure never prints as 0.0×."""
    if r >= 10:
        return f"{r:.0f}×"
    return f"{r:.1f}×" if r >= 0.1 else f"{r:.2g}×"


def mib(n: float) -> str:
    return f"{n / (1 << 20):.0f} MiB"
