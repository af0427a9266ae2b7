"""Binary units (1 GiB = 1,073,741,824 bytes) and the one byte formatter of both sides."""

from __future__ import annotations

import math

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

_BINARY = [("GiB", GIB), ("MiB", MIB), ("KiB", KIB)]


def ibytes(n: float | None) -> str:
    """Bytes in the largest binary unit that keeps the value >= 1, e.g. ``1.50 GiB``; None, NaN or an
    infinity is ``n/a``."""
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "n/a"
    for unit, size in _BINARY:
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
