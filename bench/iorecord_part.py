"""Part 3: does the I/O record change what it measures? Load timings with and without it, paired.

Both sides are the load lab's own measurement, ``load_one.measure`` (the
loader, the stage clock, the cache probes around it), loading one safetensors
file with ``load_file``, once with the I/O record (the default) and once
without (``--no-io-record``), each after the cache state is set the load
step's way (``cache.evict`` with fadvise_dontneed for cold, ``cache.warm`` for
warm) and proven the report's way (loadlab.proof). The quantity is the
``all_touched`` time, warm and cold, and the target (0.97 to 1.03 at the
median of the pair ratios) is judged on both: the issue names load timings,
and cold is the state the record is for.

How the pairs are taken, and why:

- In this process, not a fresh ``load_one.py`` per load as the lab runs it.
  The record's reads fall outside the stage time by design (the clock reads
  the record before it starts and after it marks), so whatever it changes, it
  changes through the load itself; a process's start adds nothing to a stage
  time either, but it adds its own spread: fresh processes were tried first,
  and with a 1 GiB file the two orders' warm median ratios came out at 1.045
  and 0.818, an effect of a load's place in its pair far larger than anything
  the record could do. In one process a pair takes tens of milliseconds warm, so
  hundreds of pairs fit in a few minutes, and the interval narrows below the
  band. One load of each side, first, is a warm-up and is not kept.
- Warm pairs first, then cold pairs, each state in its own run of pairs, the
  order within a pair alternating (with, without; without, with; ...), and the
  number of pairs of each state even, so each order comes up equally often.
  ``by_order`` keeps the median ratio of each order, so an effect of a load's
  place in its pair shows, and ``order_balanced_ratio`` (the geometric mean of
  the two) cancels it: the ratio judged is that one (the crossover design's
  estimate: a load's place in its pair multiplies one order's ratios by some p
  and the other's by 1/p). The pooled median is kept as ``pooled_median``.
- Cold pairs are twice as many as warm ones (a cold read's spread on a shared
  VM disk is several times a warm one's).
- Every sample's cache proof is checked (loadlab.proof, the report's rule): a
  cold sample that is not proven cold, or a warm one not proven warm, is taken
  again (at most :data:`RETAKES` times); the counts are kept in ``retaken``.
- The judged ratio comes with a distribution-free interval of at least 95 %:
  each order's median gets its own sign-test interval at 97.5 %
  (:func:`common.median_interval`), and the geometric means of their ends bound
  the balanced ratio whenever both hold (0.975² > 0.95). When that interval is
  wider than the target band, ``resolution`` says so: the ratio is then as much
  the machine's noise as the record's effect.
- ``record_cost`` times the record's own reads (one begin and one end, as the
  stage clock makes around a stage) in this process, and checks that they read
  nothing of the file: its residency is the same before and after many of them.
  The clock leaves these reads out of the stage time anyway (load_one.StageClock).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from common import judged_part, median_interval, pair_orders, summary, target_met

from disklab_host.cache import pagecache as cache
from disklab_host.common import iorecord
from disklab_host.common.units import MIB
from disklab_host.loadlab import load_one
from disklab_host.loadlab.proof import cache_proof

SIDES = ("with_record", "without_record")
TARGET = {"op": "between", "low": 0.97, "high": 1.03}
RETAKES = 3  # tries per sample whose cache proof failed, before the part fails
COST_CALLS = 2000  # begin/end pairs timed for record_cost
PAIRS_PER_REPEAT = 20  # warm pairs per --repeats (9: 180 warm, 360 cold pairs)
EVICTION = ["fadvise_dontneed"]  # the load step's cold method on Linux without root's drop_caches


def _make_file(path: Path, size_bytes: int) -> None:
    import torch
    from safetensors.torch import save_file

    n = max(1, size_bytes // (4 * MIB))
    gen = torch.Generator().manual_seed(0)
    save_file({f"w{i:03d}": torch.randn(1024, 1024, generator=gen) for i in range(n)}, str(path))


def _load(path: Path, state: str, io_record: bool) -> tuple[dict, dict]:
    """Set ``state`` the load step's way, then one ``load_one.measure`` here; its record and cache proof."""
    if state == "cold":
        cache.evict(path, EVICTION, become_allowed=False, system="Linux")
    else:
        cache.warm(path)
    argv = ["load_file", str(path)] + ([] if io_record else ["--no-io-record"])
    rec = load_one.measure(load_one.parse_args(argv))
    load_one.release()
    return rec, cache_proof(rec, state)


def _sample(path: Path, state: str, io_record: bool, retaken: dict) -> dict:
    """One proven sample: ``{"time_s", "cache_state", "device_read_bytes"}``; retakes a failed proof."""
    for _ in range(RETAKES + 1):
        rec, proof = _load(path, state, io_record)
        stage = rec["stages"]["all_touched"]
        recorded = "unavailable" not in stage["io"]
        if recorded != io_record:
            raise RuntimeError(f"the I/O record was {'on' if recorded else 'off'} when asked {io_record}")
        if proof["verdict"] == state:
            device = stage["io"].get("device", {}) if recorded else {}
            return {
                "time_s": stage["time_s"],
                "cache_state": proof["verdict"],
                "device_read_bytes": device.get("read_bytes"),
            }
        retaken[state] += 1
    raise RuntimeError(f"{RETAKES + 1} {state} samples in a row failed their cache proof: {proof}"[:2000])


def _pairs(path: Path, state: str, n: int, retaken: dict) -> list[dict]:
    for side in SIDES:  # the warm-up: one load of each side, not kept
        _sample(path, state, side == SIDES[0], retaken)
    pairs = []
    for order in pair_orders(n, SIDES):
        pair = {"order": list(order)}
        for side in order:
            pair[side] = _sample(path, state, side == "with_record", retaken)
        pair["ratio"] = pair[SIDES[0]]["time_s"] / pair[SIDES[1]]["time_s"]
        pairs.append(pair)
    return pairs


def _judged(pairs: list[dict]) -> dict:
    """The order-balanced ratio, its interval (at least 95 %), the median per order, and the verdict."""
    ratios = [p["ratio"] for p in pairs]
    by_order, intervals = {}, []
    for order in sorted({tuple(p["order"]) for p in pairs}):
        mine = [p["ratio"] for p in pairs if tuple(p["order"]) == order]
        interval = median_interval(mine, level=0.975)
        by_order[" then ".join(order)] = {"n": len(mine), "median": summary(mine)["median"],
                                          "median_interval_97_5": interval}  # fmt: skip
        intervals.append(interval)
    balanced, interval = None, None
    if len(by_order) == 2:
        m1, m2 = (v["median"] for v in by_order.values())
        balanced = math.sqrt(m1 * m2)
        if all(intervals):
            (a, b) = intervals
            interval = {"low": math.sqrt(a["low"] * b["low"]), "high": math.sqrt(a["high"] * b["high"]),
                        "coverage": a["coverage"] * b["coverage"]}  # fmt: skip
    band = TARGET["high"] - TARGET["low"]
    if interval is None:
        reading, resolution = None, "too few pairs of each order for an interval of the balanced ratio"
    elif interval["low"] > TARGET["high"] or interval["high"] < TARGET["low"]:
        reading = "outside"
        resolution = (
            f"the whole interval of the balanced ratio ({interval['low']:.3f} to {interval['high']:.3f}) "
            f"lies outside the target band ({TARGET['low']} to {TARGET['high']}): a real difference"
        )
    elif interval["high"] - interval["low"] > band:
        reading = "noise_limited"
        resolution = (
            f"the interval of the balanced ratio ({interval['low']:.3f} to {interval['high']:.3f}) is wider "
            f"than the target band ({TARGET['low']} to {TARGET['high']}): the machine's noise, not the "
            "record, sets where the ratio falls; more pairs or a quieter machine narrow it"
        )
    else:
        reading, resolution = "narrow", "the interval of the balanced ratio is narrower than the target band"
    return {
        "order_balanced_ratio": balanced,
        "interval": interval,
        "resolved": reading in ("narrow", "outside"),
        "interval_reading": reading,  # narrow, outside (the band), noise_limited, or None (too few pairs)
        "by_order": by_order,
        "pooled_median": summary(ratios)["median"],
        "ratio": summary(ratios),
        "met": balanced is not None and target_met(balanced, TARGET),
        "resolution": resolution,
    }


def record_cost(path: Path, calls: int = COST_CALLS) -> dict:
    """The record's own reads around one interval, timed here; and whether they read the file.

    The file is made cold first; after ``calls`` begin/end pairs its residency
    (mincore) must still be what it was: the counters are read from /proc and
    /sys, never from the file.
    """
    cache.evict(path, EVICTION, become_allowed=False, system="Linux")
    before = cache.residency(path)["resident_bytes"]
    rec = iorecord.Recorder(str(path))
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        rec.end(rec.begin(), "bench")
        times.append((time.perf_counter_ns() - t0) / 1e3)
    after = cache.residency(path)["resident_bytes"]
    return {
        "begin_plus_end_us": {k: v for k, v in summary(times, "us").items() if k != "samples_us"},
        "calls": calls,
        "device": rec.device.get("name", rec.device.get("unavailable")),
        "file_resident_bytes_before": before,
        "file_resident_bytes_after": after,
        "reads_the_file": after != before,
    }


def io_record_overhead(workbench: Path, size_bytes: int, repeats: int, tiny: bool = False) -> dict:
    """all_touched times (s) of load_file with and without the I/O record, warm and cold, judged on both.

    ``repeats`` sets the warm pairs (:data:`PAIRS_PER_REPEAT` each) and twice
    as many cold pairs; ``tiny`` takes one pair of each (the smoke test: shape,
    not a verdict).
    """
    warm_n = 1 if tiny else PAIRS_PER_REPEAT * repeats
    cold_n = 1 if tiny else 2 * warm_n
    path = workbench / "bench_iorecord.safetensors"
    _make_file(path, size_bytes)
    retaken = {"warm": 0, "cold": 0}
    try:
        cost = record_cost(path, 200 if tiny else COST_CALLS)
        pairs = {"warm": _pairs(path, "warm", warm_n, retaken), "cold": _pairs(path, "cold", cold_n, retaken)}
    finally:
        path.unlink(missing_ok=True)
    states = {state: _judged(p) for state, p in pairs.items()}
    part = judged_part(
        title="I/O record overhead",
        quantity=f"load_file all_touched time of a {size_bytes // MIB} MiB safetensors file, warm "
        "(cold beside it; both judged)",
        unit="s",
        sides={side: [p[side]["time_s"] for p in pairs["warm"]] for side in SIDES},
        target=TARGET,
        notes=[
            "load_one.measure with the I/O record on and off, in the bench's process, after the load step's "
            "eviction or warm read; warm pairs, then cold pairs, order alternating, an even number of each; "
            "one warm-up load of each side not kept; a sample whose cache proof failed is retaken",
            "met: both the warm and the cold order-balanced ratio (the geometric mean of the two orders' "
            "median ratios) within the target",
        ],
    )
    warm = states["warm"]
    if warm["order_balanced_ratio"] is not None and warm["interval"] is not None:
        # the table's row: the judged (balanced) warm ratio, with its interval in place of min to max
        part["ratio"] = {"median": warm["order_balanced_ratio"], "min": warm["interval"]["low"],
                         "max": warm["interval"]["high"], "n": warm["ratio"]["n"]}  # fmt: skip
        part["ratio_of"] = "with_record / without_record, warm, order-balanced (its interval of ≥ 95 %)"
    part["warm"] = warm
    cold = {side: [p[side]["time_s"] for p in pairs["cold"]] for side in SIDES}
    part["cold"] = {**states["cold"], "sides": {k: summary(v, "s") for k, v in cold.items()}}
    part["met"] = states["warm"]["met"] and states["cold"]["met"]
    part["judged_on"] = "warm and cold order-balanced ratios, each within the target"
    part["record_cost"] = cost
    part["retaken"] = retaken
    part["size_bytes"] = size_bytes
    part["pairs"] = pairs
    return part
