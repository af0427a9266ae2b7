"""A host clock's offset to the controller's, from NTP-style exchanges, and chrony's own bound on it.

One exchange is three timestamps: the controller's clock when it asked the host (``sent_ns``), the host's
clock as the host read it (``host_ns``), and the controller's clock when the answer came back
(``received_ns``). NTP's four timestamps (RFC 5905, section 8) with the host's receive and send taken at one
instant: the host read its clock somewhere inside the round trip, so

    offset = host_ns - (sent_ns + received_ns) / 2,   |error| <= (received_ns - sent_ns) / 2

whatever the round trip's two halves were. Of several exchanges the one with the smallest round trip is
kept (NTP's clock filter does the same): its bound is the tightest. The controller's action
``disklab.lab.lab_clock`` makes the exchanges over the host's own Ansible connection and calls
:func:`best_exchange`; disklab.together moves the common start onto each host's clock with it.

chrony, where it runs, bounds the host clock's own error: chronyc's documentation gives
``|system time| + root dispersion + root delay / 2``. That covers what the exchange cannot: chronyd slewing
the clock between the exchange and the start. :func:`chrony_bound` reads ``chronyc -c tracking``.

Standard library only, and no import of another disklab module: the collection's action loads this file on
its own (plugins/plugin_utils/clock.py is a link to it).
"""

from __future__ import annotations

import csv

# The host command of one exchange: the host's CLOCK_REALTIME in ns (GNU date). BSD and macOS date print
# a literal N for %N; the action then asks the host's Python instead (PYTHON_CLOCK).
DATE_CLOCK = "date +%s%N"
PYTHON_CLOCK = "-c 'import time; print(time.time_ns())'"
# Many exchanges in one session (the host's Python, given as ``python -c PYTHON_LOOP``): it says READY once
# started, then answers each line it reads with its clock in ns, until its stdin ends. A command per
# exchange pays the login shell's start before the host reads its clock (tens to hundreds of ms over SSH,
# more than the offset it bounds); in one session an exchange is one round trip of the connection.
# The loop ends itself after LOOP_LIMIT_S (an alarm), so a controller that stopped waiting for it leaves
# nothing running on the host.
READY = "disklab-clock-ready"
LOOP_LIMIT_S = 60
PYTHON_LOOP = (
    "import signal, sys, time\n"
    f"signal.alarm({LOOP_LIMIT_S})\n"
    f"sys.stdout.write('{READY}\\n'); sys.stdout.flush()\n"
    "while sys.stdin.readline():\n"
    "    sys.stdout.write(str(time.time_ns()) + '\\n'); sys.stdout.flush()\n"
)
CHRONY_TRACKING = "chronyc -n -c tracking"

# chronyc -c tracking's fields, in its order (chronyc's tracking report; its -c output is the same fields,
# comma-separated, numbers in seconds or ppm).
_TRACKING_FIELDS = (
    "reference_id", "reference", "stratum", "reference_time", "system_time_s", "last_offset_s",
    "rms_offset_s", "frequency_ppm", "residual_frequency_ppm", "skew_ppm", "root_delay_s",
    "root_dispersion_s", "update_interval_s", "leap_status",
)  # fmt: skip


def host_ns(text: str) -> int | None:
    """The host clock a clock command printed (its last non-empty line, digits only), or None."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return int(lines[-1]) if lines and lines[-1].isascii() and lines[-1].isdigit() else None


def best_exchange(exchanges: list[tuple[int, int, int]]) -> dict:
    """The offset of the host's clock to the controller's from the exchange with the smallest round trip.

    ``exchanges``: (sent_ns, host_ns, received_ns) tuples. Returns {"offset_ns": host minus controller,
    "round_trip_ns", "uncertainty_ns": half that round trip, rounded up, "exchanges": how many,
    "round_trips_ns": each one's, in order}. Raises ValueError for no exchange or one that came back
    before it was sent.
    """
    if not exchanges:
        raise ValueError("no clock exchange to take an offset from")
    for sent, _, received in exchanges:
        if received < sent:
            raise ValueError(f"a clock exchange came back before it was sent ({sent} > {received} ns)")
    sent, host, received = min(exchanges, key=lambda e: e[2] - e[0])
    round_trip = received - sent
    return {
        "offset_ns": host - (sent + received) // 2,
        "round_trip_ns": round_trip,
        "uncertainty_ns": (round_trip + 1) // 2,
        "exchanges": len(exchanges),
        "round_trips_ns": [r - s for s, _, r in exchanges],
    }


def chrony_bound(text: str) -> dict:
    """chronyd's state and its bound on the host clock's error, from ``chronyc -n -c tracking``'s output.

    Returns {"synchronised": bool, "bound_ns": int or None, "reference", "stratum", "system_time_s",
    "root_delay_s", "root_dispersion_s", "leap_status", "why"}: ``bound_ns`` is |system time| + root
    dispersion + root delay / 2 when chronyd is synchronised, else None with ``why``. Raises ValueError for
    output that is not one tracking line.
    """
    rows = [r for r in csv.reader((text or "").strip().splitlines()) if r]
    if len(rows) != 1 or len(rows[0]) != len(_TRACKING_FIELDS):
        raise ValueError(
            f"chronyc -c tracking printed {len(rows)} line(s), not one of {len(_TRACKING_FIELDS)} fields"
        )
    got = dict(zip(_TRACKING_FIELDS, rows[0], strict=True))
    try:
        system, delay, dispersion = (
            float(got[k]) for k in ("system_time_s", "root_delay_s", "root_dispersion_s")
        )
        stratum = int(got["stratum"])
    except ValueError as exc:
        raise ValueError(f"chronyc -c tracking: a field is not a number ({exc})") from None
    out = {
        "reference": got["reference"], "stratum": stratum, "system_time_s": system, "root_delay_s": delay,
        "root_dispersion_s": dispersion, "leap_status": got["leap_status"],
    }  # fmt: skip
    if got["leap_status"].lower().startswith("not sync") or stratum == 0:
        return {
            **out,
            "synchronised": False,
            "bound_ns": None,
            "why": f"chronyd is {got['leap_status'].lower()}",
        }
    bound_s = abs(system) + dispersion + delay / 2
    return {**out, "synchronised": True, "bound_ns": round(bound_s * 1e9), "why": ""}
