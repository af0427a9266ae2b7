"""The values in a stored file, checked for sense before anything reads them (disklab.stored).

A file can match its kind's JSON Schema and still hold what no host measured: NaN, an infinity, a
negative latency, 1e308 seconds, a 50 MB string. Each of these reached the report and broke it (a
traceback from a log axis, "fsync p50 is nan µs", 720 MB of memory). :func:`first_error` names the
first such value in one line; :func:`disklab.stored.parse` refuses the file with it, as it refuses a
schema violation.

The rules, one place for every kind of stored file, whatever its schema says or leaves open:

* a file holds at most :data:`MAX_FILE_BYTES` (checked before it is parsed), is nested at most
  :data:`MAX_DEPTH` deep, and each of its strings (keys too) is at most :data:`MAX_STRING_CHARS` long;
* every number is finite (Python's json reads ``NaN``, ``Infinity`` and ``1e400`` as floats: they are
  refused) and within ±:data:`MAX_NUMBER`, the range of a 64-bit counter;
* a number's unit is the suffix of its key (house style: a field name carries its unit), or, for a
  key without one (a spread's ``n``, ``median``, ``min``, ``max``, a list's items), the suffix of the
  nearest key above it that has one. A time (:data:`TIME_UNITS`: ``_s``, ``_ms``, ``_us``, ``_ns``)
  is never negative and at most :data:`MAX_SECONDS`; a size, a rate or a count of units
  (:data:`NONNEGATIVE_UNITS`: ``_bytes``, ``_mib``, ``_mib_s``, ``_kb``, …) is never negative.
  :data:`POINTS_IN_TIME` and :data:`SIGNED` name the few keys with a time unit that are not durations.
"""

from __future__ import annotations

import functools
import math

# Stored runs at the tests' tiny sizes are about 0.25 MB; the full profile's raw samples (1,000 fsync
# blocks per mode, 5 load repeats, every power-cut call) are a few MB. 64 MiB is ten times that and more.
MAX_FILE_BYTES = 64 << 20
# The longest strings the lab writes are a failed step's traceback (traceback.format_exc(limit=8), a
# few KiB), child stderr tails (2,000 characters) and the detached runner's tails (4 KiB); 64 Ki
# characters leaves a wide margin.
MAX_STRING_CHARS = 64 << 10
# Stored documents are a dozen levels deep; past this a file is not one disklab wrote.
MAX_DEPTH = 64
# The largest magnitude of any number: the range of a signed 64-bit counter (ns since 1970 fit).
MAX_NUMBER = 2**63
# The longest duration any step measures, in seconds (about 116 days).
MAX_SECONDS = 1e7
# Time units, as key suffixes, and the seconds in one.
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
# Key suffixes of sizes, rates and counts of units: never negative.
NONNEGATIVE_UNITS = ("bytes", "kib", "mib", "gib", "kb", "mb", "mib_s", "pages")
# Keys with a time unit that hold a point in time, not a duration (a file's st_mtime_ns, say).
POINTS_IN_TIME = frozenset({"mtime_ns", "ctime_ns", "atime_ns", "at_ns", "started_ns"})
# Durations taken between two readings of the wall clock, which can step back: any sign.
SIGNED = frozenset({"spawn_to_main_s", "spawn_wall_ns"})
# Differences between two clocks (a host's clock offset to the controller's, chronyd's system time): any sign.
SIGNED |= {"offset_ns", "system_time_s"}


class NotANumber:
    """What ``NaN``, ``Infinity`` or ``-Infinity`` in a stored file is parsed to (json's
    ``parse_constant``), so :func:`first_error` can name where it was."""

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal


# A file's keys repeat (every sample list, every mode, every host's stamp): the answer is kept per key.
@functools.lru_cache(maxsize=4096)
def _unit(key: str) -> tuple[str, str] | None:
    """``("time", suffix)`` or ``("nonnegative", suffix)`` for a key that names a unit, ``("any", "")`` for
    one of :data:`POINTS_IN_TIME` or :data:`SIGNED`, else None (the unit of the key above holds)."""
    if key in POINTS_IN_TIME or key in SIGNED:
        return ("any", "")
    for suffix in NONNEGATIVE_UNITS:
        if key == suffix or key.endswith("_" + suffix):
            return ("nonnegative", suffix)
    words = key.rsplit("_", 1)
    if len(words) == 2 and words[1] in TIME_UNITS:
        return ("time", words[1])
    return None


def _where(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "<root>"


def _show(value: float) -> str:
    """A number as the message shows it: as written for an int, ``%g`` for a float."""
    if isinstance(value, int):
        return str(value) if abs(value) <= MAX_NUMBER else f"an integer of {value.bit_length()} bits"
    return f"{value:g}"


def _number_error(value: float, unit: tuple[str, str] | None) -> str | None:
    """Why ``value`` (under a key of ``unit``, see :func:`_unit`) makes no sense, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number"
    if abs(value) > MAX_NUMBER:
        return "past ±2**63, more than any counter, size or time disklab records"
    if unit is None or unit[0] == "any":
        return None
    if value < 0:
        what = "a time" if unit[0] == "time" else f"a figure in {unit[1]}"
        return f"{what} cannot be negative"
    if unit[0] == "time" and value * TIME_UNITS[unit[1]] > MAX_SECONDS:
        return f"past {MAX_SECONDS:g} s, longer than any step runs"
    return None


def first_error(doc: object) -> str | None:
    """None when every value of ``doc`` (parsed JSON) makes sense by the rules above, else one line.

    The line says where, in the schema errors' dotted form:
    ``holds -1 at experiments.fsync_bench.modes.fsync.latency.p50_us: a time cannot be negative``.
    A string's content is never quoted (it may be 50 MB); its length is.
    """
    stack: list[tuple[object, tuple, tuple[str, str] | None]] = [(doc, (), None)]
    while stack:
        value, path, unit = stack.pop()
        if len(path) > MAX_DEPTH:
            return f"is nested more than {MAX_DEPTH} levels deep at {_where(path[:8])}…"
        if isinstance(value, dict):
            for key, item in value.items():
                if len(key) > MAX_STRING_CHARS:
                    return (
                        f"holds a key of {len(key):,} characters at {_where(path)}, past the "
                        f"{MAX_STRING_CHARS:,} a stored string may hold"
                    )
                stack.append((item, (*path, key), _unit(key) or unit))
        elif isinstance(value, list):
            stack.extend((item, (*path, i), unit) for i, item in enumerate(value))
        elif isinstance(value, str):
            if len(value) > MAX_STRING_CHARS:
                return (
                    f"holds a string of {len(value):,} characters at {_where(path)}, past the "
                    f"{MAX_STRING_CHARS:,} a stored string may hold"
                )
        elif isinstance(value, NotANumber):
            return f"holds {value.literal} at {_where(path)}: not a finite number"
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            error = _number_error(value, unit)
            if error:
                return f"holds {_show(value)} at {_where(path)}: {error}"
    return None
