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


# How many rounds a list of consecutive calls is split into (fsync_bench's rounds): each round's median is
# one test unit when two runs are compared (disklab.verdicts), so ten a side can reach p ~ 1e-5.
ROUNDS = 10


def round_sizes(n: int, rounds: int = ROUNDS) -> list[int]:
    """``n`` consecutive samples split into at most ``rounds`` rounds, the first ones one longer where it
    does not divide (1000 -> ten of 100; 25 -> five of 3 and five of 2). Raises ValueError for n < 1."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"round_sizes needs n >= 1 samples, got {n!r}")
    k = min(rounds, n)
    base, extra = divmod(n, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def median_interval(values: list[float], level: float = 0.95) -> dict:
    """A distribution-free interval for the median of ``values``, from their order statistics.

    ``[x_(k), x_(n+1-k)]`` of the sorted values, with k the largest for which the binomial chance that
    the interval misses the median, 2·P(Bin(n, 1/2) < k), is at most ``1 - level``; its coverage is
    that chance's complement, at least ``level``. Below 6 values no such k exists at 95 %: the interval is
    then the whole range, with its own (lower) coverage, 1 - 2·0.5^n. Returns ``{"low", "high",
    "coverage", "n"}``; ValueError on no values or a level outside (0, 1).
    """
    if not values:
        raise ValueError("median_interval of no values")
    if not 0 < level < 1:
        raise ValueError(f"level must be within (0, 1), got {level!r}")
    s = sorted(values)
    n = len(s)
    total = 2**n
    below = 0  # n-choose-i summed for i < k
    k = 0
    while k < n // 2:
        nxt = below + math.comb(n, k)
        if 2 * nxt / total > 1 - level:
            break
        below, k = nxt, k + 1
    k = max(k, 1)
    miss = 2 * sum(math.comb(n, i) for i in range(k)) / total
    return {"low": s[k - 1], "high": s[n - k], "coverage": 1 - miss, "n": n}
