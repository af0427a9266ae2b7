"""Percentiles and summaries of repeated samples: the one implementation of both sides."""

from __future__ import annotations

import math


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of sorted values.

    Raises ValueError on an empty list or a q outside [0, 100].
    """
    if not sorted_values:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within [0, 100], got {q}")
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency_summary_us(samples_ns: list[int]) -> dict:
    """min, p50, p90, p99 and max in µs of latency samples given in ns."""
    s = sorted(samples_ns)
    return {
        "n": len(s),
        "min_us": s[0] / 1e3,
        "p50_us": percentile(s, 50) / 1e3,
        "p90_us": percentile(s, 90) / 1e3,
        "p99_us": percentile(s, 99) / 1e3,
        "max_us": s[-1] / 1e3,
    }


def spread(samples: list[float]) -> dict:
    """Median, min and max of repeated samples (any unit; the caller names it)."""
    s = sorted(samples)
    return {"n": len(s), "median": percentile(s, 50), "min": s[0], "max": s[-1]}
