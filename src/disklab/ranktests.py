"""Distribution-free two-sample statistics: the Mann–Whitney test, the Hodges–Lehmann shift and its interval.

Standard library only; :mod:`disklab.verdicts` turns these numbers into verdicts. Every function
takes plain sequences of floats, already on the scale to compare (verdicts passes log values, so a
shift is a log ratio).

* :func:`mann_whitney` gives the two-sided p-value of the rank-sum test (Mann and Whitney 1947). It is
  **exact** when the pooled samples hold at most :data:`EXACT_MAX_TOTAL` values: from the null
  distribution of U (no ties: the coefficients of the Gaussian binomial coefficient, cached per pair
  of sizes; ties: every subset of the pooled mid-ranks, counted by their sum, and p is twice the
  smaller tail, as scipy's permutation version computes it). Above that it uses the
  normal approximation with the tie correction of the variance and a 0.5 continuity correction (as
  scipy.stats.mannwhitneyu with method="asymptotic"). Two-sided p is the null probability of a U at
  least as far from its mean, m·n/2, as the one observed.
* :func:`smallest_p` is the smallest two-sided p any outcome can give at sizes m and n: 2 / C(m+n, m)
  (exact, no ties). At 3 a side it is 0.10, so no outcome reaches p < 0.05.
* :func:`hodges_lehmann` gives the shift estimate, the median of the m·n differences ``new_j -
  old_i``, and its confidence interval from the same null distribution: ``[D_(k), D_(mn+1-k)]`` of the
  sorted differences, with k the largest integer for which P(U < k) <= (1 - level) / 2 (Hollander and
  Wolfe, Nonparametric Statistical Methods, 3rd ed., section 4.3; exact for small samples, the normal
  approximation's critical value above :data:`EXACT_MAX_TOTAL`). When no k >= 1 exists (3 a side at 95 %)
  there is no interval at that level, and it says so (None).
* :func:`benjamini_hochberg` adjusts a family of p-values so that calling every figure with an
  adjusted value at or below q controls the false-discovery rate at q (Benjamini and Hochberg 1995),
  for independent or positively dependent tests.
* :func:`t_quantile` (and :func:`t_cdf`): Student's t, for the spread of a figure over a host's runs
  (:func:`disklab.verdicts.drift_from_runs`), from the regularized incomplete beta function.

Raises ValueError for an empty sample or a level outside (0, 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

# Pooled sizes up to this are tested exactly (the cached no-ties distribution has m*n + 1 terms; with
# ties the subset count is about N * m * (sum of ranks) steps, a few hundred thousand at 40).
EXACT_MAX_TOTAL = 40
# The normal quantile of 1 - alpha / 2 is found by bisection of erfc to this precision.
_Z_TOL = 1e-12


def _check(old: Sequence[float], new: Sequence[float]) -> tuple[int, int]:
    m, n = len(old), len(new)
    if not m or not n:
        raise ValueError(f"a two-sample test needs samples on both sides, got n={m} and n={n}")
    return m, n


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be within (0, 1), got {level!r}")


def normal_quantile(p: float) -> float:
    """The z with P(Z <= z) = p for a standard normal Z (bisection of math.erfc); p within (0, 1)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be within (0, 1), got {p!r}")
    lo, hi = -40.0, 40.0
    while hi - lo > _Z_TOL:
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@lru_cache(maxsize=256)
def u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings of m old and n new values (no ties) give each U = 0..m·n.

    The coefficients of the Gaussian binomial coefficient [m+n choose m]_q, built one factor
    (1 - q^(n+i)) / (1 - q^i) at a time, each step an exact polynomial.
    """
    coeffs = [1]
    for i in range(1, m + 1):
        grown = coeffs + [0] * (n + i)
        for k in range(len(grown) - 1, n + i - 1, -1):
            grown[k] -= grown[k - (n + i)]
        out = [0] * (i * n + 1)
        for k in range(len(out)):
            out[k] = grown[k] + (out[k - i] if k >= i else 0)
        coeffs = out
    return tuple(coeffs)


def smallest_p(m: int, n: int) -> float:
    """The smallest two-sided p of the exact test at sizes m and n (no ties): 2 / C(m+n, m), at most 1."""
    return min(1.0, 2 / math.comb(m + n, m))


def _midranks(values: list[float]) -> tuple[list[float], bool]:
    """Mid-ranks (1-based, tied values share their mean rank) and whether any values tie."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    tied = False
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        tied = tied or j > i
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks, tied


def _exact_tied_p(ranks: list[float], m: int, observed_sum: float) -> float:
    """Two-sided p of a rank sum among every m-subset of ``ranks`` (mid-ranks doubled to integers): twice
    the smaller tail, at most 1 (with ties the null distribution need not be symmetric)."""
    doubled = [round(2 * r) for r in ranks]
    # ways[k][s]: how many k-subsets of the ranks seen so far have doubled sum s
    ways: list[dict[int, int]] = [{0: 1}] + [{} for _ in range(m)]
    for r in doubled:
        for k in range(m, 0, -1):
            below, here = ways[k - 1], ways[k]
            for s, c in below.items():
                here[s + r] = here.get(s + r, 0) + c
    total = math.comb(len(ranks), m)
    seen = round(2 * observed_sum)
    below = sum(c for s, c in ways[m].items() if s <= seen)
    above = sum(c for s, c in ways[m].items() if s >= seen)
    return min(1.0, 2 * min(below, above) / total)


def mann_whitney(old: Sequence[float], new: Sequence[float]) -> dict:
    """The two-sided rank-sum test of ``old`` against ``new``.

    Returns ``{"u": U of new, "p": float, "method": "exact" | "normal", "ties": bool}``; U counts the
    pairs where the new value is above the old (ties count 1/2). p is 1.0 when every value is equal.
    """
    m, n = _check(old, new)
    pooled = [float(x) for x in old] + [float(x) for x in new]
    ranks, tied = _midranks(pooled)
    rank_sum_new = sum(ranks[m:])
    u = rank_sum_new - n * (n + 1) / 2
    if m + n <= EXACT_MAX_TOTAL:
        if not tied:
            counts = u_counts(m, n)
            far = abs(u - m * n / 2)
            hits = sum(c for k, c in enumerate(counts) if abs(k - m * n / 2) >= far - 1e-9)
            p = min(1.0, hits / math.comb(m + n, m))
        else:
            # the rank sum of the old side: its null distribution is that of any m-subset
            p = _exact_tied_p(ranks, m, sum(ranks[:m]))
        return {"u": u, "p": p, "method": "exact", "ties": tied}
    total = m + n
    counts: dict[float, int] = {}
    for x in pooled:
        counts[x] = counts.get(x, 0) + 1
    tie_term = sum(t**3 - t for t in counts.values())
    var = m * n / 12 * ((total + 1) - tie_term / (total * (total - 1)))
    if var <= 0:
        return {"u": u, "p": 1.0, "method": "normal", "ties": tied}
    z = max(abs(u - m * n / 2) - 0.5, 0.0) / math.sqrt(var)
    return {"u": u, "p": math.erfc(z / math.sqrt(2)), "method": "normal", "ties": tied}


def _critical_k(m: int, n: int, level: float) -> int:
    """The largest k with P(U < k) <= (1 - level) / 2 under the null (0 when none: no interval)."""
    tail = (1 - level) / 2
    if m + n <= EXACT_MAX_TOTAL:
        counts, total = u_counts(m, n), math.comb(m + n, m)
        k, below = 0, 0
        # the tolerance keeps a tail that is exactly the level's (1/20 at 3 a side and 90 %) from being
        # lost to floating point: 1 - 0.9 is 0.09999999999999998
        while k < len(counts) and (below + counts[k]) / total <= tail * (1 + 1e-9):
            below += counts[k]
            k += 1
        return k
    z = normal_quantile(1 - tail)
    return max(0, math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12)))


def hodges_lehmann(old: Sequence[float], new: Sequence[float], level: float = 0.95) -> dict:
    """The shift of ``new`` against ``old`` and its distribution-free confidence interval.

    Returns ``{"shift": median of new_j - old_i, "low", "high", "level", "k", "differences": m*n}``;
    ``low`` and ``high`` are None when these sizes hold no interval at ``level`` (``k`` is then 0).
    The interval's coverage is at least ``level`` for continuous data (exact sizes), or about it
    (normal approximation, above :data:`EXACT_MAX_TOTAL` pooled values).
    """
    m, n = _check(old, new)
    _check_level(level)
    diffs = sorted(float(b) - float(a) for a in old for b in new)
    mid = len(diffs) // 2
    shift = diffs[mid] if len(diffs) % 2 else (diffs[mid - 1] + diffs[mid]) / 2
    k = _critical_k(m, n, level)
    if k < 1:
        return {"shift": shift, "low": None, "high": None, "level": level, "k": 0, "differences": len(diffs)}
    return {
        "shift": shift,
        "low": diffs[k - 1],
        "high": diffs[len(diffs) - k],
        "level": level,
        "k": k,
        "differences": len(diffs),
    }


def smallest_n_with_interval(level: float = 0.95) -> int:
    """The fewest samples a side (equal sizes) whose exact test holds an interval at ``level``."""
    _check_level(level)
    n = 1
    while _critical_k(n, n, level) < 1:
        n += 1
    return n


def smallest_n_reaching(p: float) -> int:
    """The fewest samples a side (equal sizes) whose exact test can give a two-sided p at or below ``p``."""
    _check_level(p)
    n = 1
    while smallest_p(n, n) > p:
        n += 1
    return n


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Adjusted p-values (q-values), in the input's order: q_(i) = min over j >= i of m·p_(j)/j, at most 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, m * p_values[i] / rank)
        adjusted[i] = min(1.0, running)
    return adjusted


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified Lentz;
    Numerical Recipes, 3rd ed., section 6.4), on the side of x where it converges fast."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(1.0 - x, b, a)
    log_front = a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(log_front) * h / a


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (df > 0)."""
    if df <= 0:
        raise ValueError(f"df must be above 0, got {df!r}")
    tail = 0.5 * _incomplete_beta(df / (df + t * t), df / 2, 0.5)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p for Student's t with ``df`` degrees of freedom (bisects :func:`t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be within (0, 1), got {p!r}")
    lo, hi = -1e6, 1e6
    while hi - lo > _Z_TOL * max(1.0, abs(lo)):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
