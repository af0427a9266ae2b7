"""Part 6: does the I/O record change what it measures? Load timings with and without it, paired.

The load step's own path (disklab_host.steps.load.measure_one: set the cache
state, a fresh load_one.py process, its stage clock) loads one safetensors file
with ``load_file``, once with the I/O record (the default) and once with
``io_record=False`` (load_one.py ``--no-io-record``), the order alternating in
each pair. The judged quantity is the ``all_touched`` time, warm (the state
with the least noise, where a fixed cost would show most); the cold ratio is
kept beside it. The record reads its counters at the stage marks, inside the
time the stage clock already leaves out as probe time, and once before the
clock starts, so the target is a ratio of 0.97 to 1.03 at the median.
"""

from __future__ import annotations

from pathlib import Path

from common import judged_part, pair_orders, summary

from disklab_host.common.units import MIB
from disklab_host.steps import load

SIDES = ("with_record", "without_record")


def _make_file(path: Path, size_bytes: int) -> None:
    import torch
    from safetensors.torch import save_file

    n = max(1, size_bytes // (4 * MIB))
    gen = torch.Generator().manual_seed(0)
    save_file({f"w{i:03d}": torch.randn(1024, 1024, generator=gen) for i in range(n)}, str(path))


def _all_touched_s(cell: dict, state: str, io_record: bool) -> float:
    cfg = {"system": "Linux", "become_allowed": False}
    rec = load.measure_one(cell, state, cfg=cfg, eviction_methods=["fadvise_dontneed"], io_record=io_record)
    recorded = "unavailable" not in rec["stages"]["all_touched"]["io"]
    if recorded != io_record:
        raise RuntimeError(f"the I/O record was {'on' if recorded else 'off'} when asked {io_record}")
    return rec["stages"]["all_touched"]["time_s"]


def io_record_overhead(workbench: Path, size_bytes: int, repeats: int) -> dict:
    """``repeats`` pairs of load_file all_touched times (s) with and without the I/O record, warm and cold."""
    path = workbench / "bench_iorecord.safetensors"
    _make_file(path, size_bytes)
    cell = {"file": "bench", "path": str(path), "method": "load_file", "model": None, "populate": None}
    pairs = []
    try:
        for order in pair_orders(repeats, SIDES):
            pair = {"order": list(order)}
            for state in ("warm", "cold"):
                for side in order:
                    pair.setdefault(state, {})[side] = _all_touched_s(cell, state, side == "with_record")
            pairs.append(pair)
    finally:
        path.unlink(missing_ok=True)
    part = judged_part(
        title="I/O record overhead",
        quantity=f"load_file all_touched time of a {size_bytes // MIB} MiB safetensors file, warm",
        unit="s",
        sides={side: [p["warm"][side] for p in pairs] for side in SIDES},
        target={"op": "between", "low": 0.97, "high": 1.03},
        notes=["load.measure_one with io_record on and off, in alternating order; fresh process per load"],
    )
    cold = {side: [p["cold"][side] for p in pairs] for side in SIDES}
    part["cold"] = {
        "ratio": summary([a / b for a, b in zip(cold[SIDES[0]], cold[SIDES[1]], strict=True)]),
        "sides": {k: summary(v, "s") for k, v in cold.items()},
    }
    part["size_bytes"] = size_bytes
    part["pairs"] = pairs
    return part
