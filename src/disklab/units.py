"""Formatting of numbers for reports, in binary units (1 GiB = 1,073,741,824 bytes).

These are registered as Jinja filters by disklab.report under the same names. Each prints ``n/a`` for
None and for a number that is not finite: stored files never hold one (disklab.values refuses NaN
and infinities), but a figure computed from them might, and a report never says "nan µs".
"""

from __future__ import annotations

import math

from disklab_host.common.units import MIB, ibytes


def _missing(x: float | None) -> bool:
    """No figure to print: None, or NaN or an infinity."""
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def us(x: float | None) -> str:
    """Microseconds, e.g. ``12.3 µs``; above 10 ms shown in ms."""
    if _missing(x):
        return "n/a"
    if x >= 10_000:
        return f"{x / 1000:.1f} ms"
    return f"{x:.1f} µs" if x < 1000 else f"{x:,.0f} µs"


def us_short(x: float | None) -> str:
    """Microseconds in two or three figures, for a table cell: ``8.5 µs``, ``312 µs``, ``4.1 ms``, ``38 ms``.

    The thresholds sit where rounding would carry a digit over (99.96 µs is ``100 µs``, not ``100.0 µs``).
    """
    if _missing(x):
        return "n/a"
    if x < 99.95:
        return f"{x:.1f} µs"
    if x < 999.5:
        return f"{x:.0f} µs"
    if x < 9_950:
        return f"{x / 1000:.1f} ms"
    return f"{x / 1000:,.0f} ms"


def ns(x: float | None) -> str:
    """Nanoseconds, e.g. ``41 ns``."""
    return "n/a" if _missing(x) else f"{x:,.0f} ns"


def secs(x: float | None) -> str:
    """Seconds, with ms resolution below 10 s, e.g. ``0.153 s``."""
    if _missing(x):
        return "n/a"
    return f"{x:.3f} s" if x < 10 else f"{x:.1f} s"


def mib_s(x: float | None) -> str:
    """Throughput in MiB/s."""
    return "n/a" if _missing(x) else f"{x:,.0f} MiB/s"


def bytes_mib_s(x: float | None) -> str:
    """A throughput given in bytes/s, in MiB/s."""
    return "n/a" if _missing(x) else mib_s(x / MIB)


def pct(fraction: float | None) -> str:
    """A fraction in [0, 1] as a percentage, e.g. ``12.3 %``."""
    return "n/a" if _missing(fraction) else f"{100 * fraction:.1f} %"


def ratio(x: float | None) -> str:
    """A ratio, e.g. ``210×``; small ratios keep one decimal."""
    if _missing(x):
        return "n/a"
    return f"{x:,.0f}×" if x >= 100 else f"{x:.1f}×"


def fact(value: object) -> str:
    """A host fact, or ``n/a (reason)`` for one stored as ``{"unavailable": reason}``."""
    if isinstance(value, dict) and set(value) == {"unavailable"}:
        return f"n/a ({value['unavailable']})"
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


FILTERS = {f.__name__: f for f in (ibytes, us, us_short, ns, secs, mib_s, bytes_mib_s, pct, ratio, fact)}
