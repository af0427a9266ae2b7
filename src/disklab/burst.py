"""A checkpoint burst's figures: every client saved its own shard into one shared directory at once, one
committed, then each read back another's shard, cold (disklab_host.together.burst).

For the save and for the read-back, each a phase at one common start (each host's start moved onto the
controller's clock by its measured offset, as disklab.storm does for a load):

- each host's time and its throughput (its own bytes over its own time);
- ``duration_s``: the longest host's time, MLPerf Storage v2.0's duration ("the maximum time across all
  GPUs", its rules' 2.2.3, one host here being one rank);
- ``throughput_rules``: the least host's throughput, the same rules' throughput ("the minimum across all
  GPUs"): each host's own bytes over its own time, the smallest;
- ``throughput_dlio``: the whole checkpoint's bytes over each host's time, the mean over hosts, as DLIO
  (MLPerf Storage's benchmark code) computes a checkpoint's throughput from every rank's time;
- ``first_done_s``, ``last_done_s`` and ``aggregate_bytes_per_s``: as disklab.storm gives them (elbencho's
  First and Last Done, IOR's aggregate: every byte over the last end minus the first start);
- ``spread``: whether the phase's starts were together (disklab.together.spread).

The read-back also says whether every shard was proven cold in its reader's page cache (residency at most
1 % just before the read) and whether every byte matched what its writer saved. :func:`ram_rule` states
MLPerf's rule on caches: when a client's part of the checkpoint is under 3 times its RAM, caches must be
cleared between the write and the read.
"""

from __future__ import annotations

import statistics

from . import together
from .storm import natural

RAM_FACTOR = (
    3  # MLPerf Storage v2.0: a checkpoint per client under 3x its RAM needs caches cleared before the read
)
PHASES = ("save", "read")


def phase_figures(hosts: dict[str, dict], bound_ns: int = together.DEFAULT_BOUND_NS) -> dict | None:
    """One phase's figures from {host: {"clock": lab_clock's result, "sample": the command's result} or
    {"failed": why}}; None when no host has a sample."""
    ran = {h: r for h, r in hosts.items() if "sample" in r}
    if not ran:
        return None
    samples = {h: ran[h]["sample"] for h in sorted(ran, key=natural)}
    clocks = {h: together.HostClock.from_action(r["clock"]) for h, r in ran.items()}
    starts = {h: s["together"]["started_ns"] for h, s in samples.items()}
    late = {h: s["together"]["late_ns"] for h, s in samples.items()}
    begin = {h: starts[h] - clocks[h].offset_ns for h in samples}
    ends = {h: begin[h] + round(s["time_s"] * 1e9) for h, s in samples.items()}
    first_start = min(begin.values())
    total = sum(s["size_bytes"] for s in samples.values())
    own = {h: s["size_bytes"] / s["time_s"] for h, s in samples.items() if s["time_s"] > 0}
    span_s = (max(ends.values()) - first_start) / 1e9
    return {
        "hosts": list(samples),
        "time_s": {h: s["time_s"] for h, s in samples.items()},
        "throughput_bytes_per_s": own,
        "size_bytes": total,
        "duration_s": max(s["time_s"] for s in samples.values()),
        "throughput_rules": min(own.values()) if own else None,
        "throughput_dlio": statistics.mean(total / s["time_s"] for s in samples.values() if s["time_s"] > 0)
        if own
        else None,
        "first_done_s": (min(ends.values()) - first_start) / 1e9,
        "last_done_s": span_s,
        "aggregate_bytes_per_s": total / span_s if span_s > 0 else None,
        "spread": together.spread(starts, clocks, late, bound_ns),
        "failed": {h: r["failed"] for h, r in hosts.items() if "sample" not in r},
    }


def figures(burst: dict, bound_ns: int = together.DEFAULT_BOUND_NS) -> dict:
    """The burst's figures from its stored record ({"hosts": {host: {"save": ..., "read": ...}}, "commit":
    {"sample", "host"} or {"failed"} or None}): {"save", "read" (phase_figures, or None), "commit",
    "committer" (the host that wrote the marker), "tried": {phase: how many hosts ran it}, "rank_host":
    {rank: host}, "committed": bool, "cold": bool (every read sample proven cold), "matches": bool (every
    byte read was the writer's), "not_cold", "mismatched", "failed": {phase: {host: why}}}."""
    hosts = burst.get("hosts") or {}
    phases = {p: {h: r[p] for h, r in hosts.items() if p in r} for p in PHASES}
    out = {p: phase_figures(phases[p], bound_ns) for p in PHASES}
    tried = {p: len(phases[p]) for p in PHASES}  # hosts that ran the phase, whether it failed or not
    reads = {h: r["sample"] for h, r in phases["read"].items() if "sample" in r}
    saves = {h: r["sample"] for h, r in phases["save"].items() if "sample" in r}
    commit = burst.get("commit")
    return {
        **out,
        "commit": commit,
        "committer": (commit or {}).get("host"),
        "tried": tried,
        "rank_host": {s["rank"]: h for h, s in saves.items()},
        "committed": bool(commit and "sample" in commit),
        "cold": bool(reads) and all(s["cache_state"] == "cold" for s in reads.values()),
        "not_cold": {h: s["cache_state"] for h, s in reads.items() if s["cache_state"] != "cold"},
        "matches": bool(reads) and all(s["matches"] for s in reads.values()),
        "mismatched": sorted((h for h, s in reads.items() if not s["matches"]), key=natural),
        "failed": {p: {h: r["failed"] for h, r in phases[p].items() if "failed" in r} for p in PHASES},
    }


def ram_rule(shard_bytes: int, ram_bytes: dict[str, int | None]) -> dict:
    """MLPerf's rule on caches for this burst: each client's shard against RAM_FACTOR times its RAM.
    {"factor", "under": [hosts whose shard is under 3x RAM], "over": [...], "unknown": [hosts with no RAM
    fact], "ratio": {host: shard / RAM}}."""
    known = {h: r for h, r in ram_bytes.items() if isinstance(r, int) and r > 0}
    ratio = {h: shard_bytes / r for h, r in known.items()}
    return {
        "factor": RAM_FACTOR,
        "ratio": ratio,
        "under": sorted((h for h, x in ratio.items() if x < RAM_FACTOR), key=natural),
        "over": sorted((h for h, x in ratio.items() if x >= RAM_FACTOR), key=natural),
        "unknown": sorted((h for h in ram_bytes if h not in known), key=natural),
    }
