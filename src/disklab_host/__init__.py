"""disklab's host side: everything that runs on a lab host, shipped there as one zipapp.

Subpackages, one per subsystem (imports run downwards, never in a circle)::

    steps/       the lab's experiments, one module per step, each with run(cfg, workdir) -> dict
    loadlab/     the load step's helpers: weights made here (prep, model), one load per process
                 (load_one), two-worker memory (workers)
    checkpoint/  checkpoint savers, the Break It saves, and the one verdict (classify)
    powercut/    the power-cut simulator: record under strace, crash states, check, recipes
    cache/       page-cache control: residency (mincore), eviction, the macOS cold copy
    audit/       the host audit: collectors and the parsers of their tools' output
    common/      standard-library helpers shared with the controller (atomic writes,
                 percentiles, units, how a missing fact is stored, child processes)

Top level: ``registry`` (every step and size, the profiles), ``lab`` (the runner) and
``preflight``; ``__main__`` is the
entry point of the shipped zipapp (``python disklab_host.pyz lab|preflight|audit|powercut``).
Only ``steps``, ``loadlab``, ``checkpoint`` and ``powercut`` import torch, and only in
the modules that need it (ruff's banned-api rule keeps it out of the rest).
"""

__version__ = "0.3.0"
