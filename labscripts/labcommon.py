"""Helpers shared by every lab script: units, samples, facts and atomic writes.

Lab scripts run on the host with the lab venv's Python. This module uses only
the standard library, so the preflight and audit steps can import it before the
venv exists.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path

# The results format written by lab.py and read by the controller's
# disklab.results. It must equal disklab.results.SCHEMA_VERSION (a test checks).
RESULTS_SCHEMA_VERSION = 1

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


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


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory, so that a create or rename inside it is durable (fsync(2))."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no crash leaves a half-written file.

    Temp file in the same directory, flush, fsync, os.replace, then fsync the
    directory: the lesson's four steps. On any error the temp file is removed
    and ``path`` keeps its previous content.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file a normal file's mode
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: str | os.PathLike, obj: object) -> None:
    """Write ``obj`` as indented JSON through :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())
