"""Report section for the load lab: stage table, stage timelines, two-worker memory, explanations.

Every figure names its readiness stage and its cache state, and comparisons
are drawn only between figures at the same stage and cache state. The
explanations are computed from this host's own medians (the lesson's figures
are never quoted as this host's). The stages and their order come from
disklab_host.common.stages.

One module per part of the section: ``cells`` (labels, order, medians, the stage table, the verdicts
between cells), ``sentences`` (what the section says), ``residency`` (mapped, then resident, and the
cache proofs against the ceilings), ``stages_plot``, ``time_split`` (where the time went), ``memory``
(peak RSS), ``process`` (costs outside the load call), ``user_model``, ``netfs`` and ``loaders``.
"""

from __future__ import annotations

from pathlib import Path

from disklab.sections.load import (
    cells,
    loaders,
    memory,
    netfs,
    process,
    residency,
    sentences,
    stages_plot,
    time_split,
    user_model,
)
from disklab_host.common.stages import MEANING, STAGES


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Context for templates/sections/load.md.j2 (see disklab.sections). Never raises on not_run/failed."""
    if section.get("status") != "ok":
        return {"ok": False}
    split = time_split.rows(section, sorted(section["cells"], key=cells.order), cells.label)
    stage_rows = cells.rows(section)
    return {
        "ok": True,
        "proof": residency.proof_rows(section, results),
        "rows": stage_rows,
        "memory_plot": memory.plot(stage_rows, plot_dir),
        "stages": [(st, MEANING[st]) for st in STAGES],
        "big_model": section["big_model"],
        "residency": residency.residency_rows(section),
        "first_response": sentences.first_response_lines(section),
        "explanations": sentences.explanations(section),
        "willneed_hints": sentences.willneed_hints(section),
        "warnings": sentences.warnings(section),
        "workers": process.workers_summary(section),
        "import_s": process.import_spread(section),
        "device_context_init_s": process.import_spread(section, "device_context_init_s"),
        "device": process.device_summary(section),
        "user_model": user_model.user_model_summary(section),
        "plot": stages_plot.plot(section, plot_dir),
        "time_split": split,
        "noise_missing": time_split.noise_missing(section),
        "time_split_plot": time_split.plot(split, plot_dir),
        "time_split_missing": time_split.not_recorded(split),
        "time_split_quotes": time_split.quotes(split),
        "netfs": netfs.network_mmap(section, results),
        "loaders": loaders.loaders_block(section),
    }
