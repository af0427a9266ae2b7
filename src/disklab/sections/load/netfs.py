"""Whether mapped loading lost to an eager read on a network or FUSE workbench."""

from __future__ import annotations

from disklab import markup, verdicts
from disklab.sections.load.cells import as_ratio, big, judge_cells, median
from disklab.sections.load.sentences import probes_held

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
    eager = big(cells, NETFS_EAGER, "cold")
    base = median(eager, "all_touched")
    lines, pairs = [], []
    for method in NETFS_MAPPED:
        mapped = big(cells, method, "cold")
        t = median(mapped, "all_touched")
        if t is None or not base:
            missing = method if t is None else NETFS_EAGER
            lines.append(f"{method}: no proven cold figure of {missing} at all_touched, so no comparison.")
            continue
        pairs.append((method, mapped, t))
    judged = judge_cells(section, [(m, eager) for _, m, _ in pairs], "all_touched") if pairs else []
    for (method, _, t), j in zip(pairs, judged, strict=True):
        times = f"{t:.3f} s against {base:.3f} s, medians"
        if j["verdict"] == verdicts.CHANGED and j["direction"] == "up":
            verdict = f"lost: it took {as_ratio(t / base)} torch.load's time ({times}; {verdicts.brief(j)})"
        elif j["verdict"] in (verdicts.CHANGED, verdicts.NO_CHANGE):
            verdict = (
                f"did not lose: it took {as_ratio(t / base)} torch.load's time ({times}; {verdicts.brief(j)})"
            )
        else:
            verdict = (
                f"took {as_ratio(t / base)} torch.load's time ({times}), but whether it lost could not be "
                "decided "
                f"({verdicts.brief(j)}; `lab_run_load_repeats` sets the samples)"
            )
        lines.append(f"cold, all_touched: {method} {verdict}.")
    dropped = (section.get("workbench_page_cache") or {}).get("keeps_cache") is False
    if dropped and not probes_held(section):
        lines.append(
            "In this run disklab's own probe opened the file at each stop event, and this workbench empties "
            "a file's page cache at every open(2): the mapped loads read again what they had read before "
            "each probe, so their figures after loader_return overstate the loss. A run of this disklab, "
            "whose probes open nothing while the clock runs, compares them fairly."
        )
    return {"fstype": markup.md(str(wb.get("fstype"))), "lines": lines}
