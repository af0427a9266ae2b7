"""How a fact or a measurement says it is missing, and the checks every step shares."""

from __future__ import annotations

import sys

from .units import KIB


def unavailable(reason: str) -> dict:
    """A fact that could not be read or does not apply, with the reason.

    Facts are never stored as 0 or left out when unknown: the report prints
    the reason instead of a number.
    """
    return {"unavailable": str(reason)}


def is_unavailable(value: object) -> bool:
    """True when ``value`` is a fact stored by :func:`unavailable`."""
    return isinstance(value, dict) and set(value) == {"unavailable"}


def not_run(reason: str) -> dict:
    """A step or measurement that did not run on this host, with the reason."""
    return {"status": "not_run", "reason": str(reason)}


def require_positive(name: str, value: float) -> float:
    """Return ``value`` when it is a number > 0, else raise ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def peak_rss_bytes(ru_maxrss: int, system: str | None = None) -> int:
    """Normalise ``getrusage().ru_maxrss`` to bytes.

    ru_maxrss is in KiB on Linux and in bytes on macOS (getrusage(2) on each).
    ``system`` is ``platform.system()``; it defaults to this host's.
    Raises ValueError for an OS whose unit we do not know.
    """
    system = system or _system()
    if system == "Linux":
        return int(ru_maxrss) * KIB
    if system == "Darwin":
        return int(ru_maxrss)
    raise ValueError(f"ru_maxrss unit unknown on {system}")


def _system() -> str:
    return {"linux": "Linux", "darwin": "Darwin"}.get(sys.platform, sys.platform)
