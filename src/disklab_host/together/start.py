"""Start at one absolute time on this host's own clock: ``python disklab_host.pyz together-start --at NS``.

The controller gives every host the same start, in ns since the epoch on the controller's clock, moved onto
each host's clock by that host's measured offset (disklab.together). Each host waits until then on its own
CLOCK_REALTIME, so the launch's own skew (Ansible's forks, each host's SSH set-up) is out of the start: it
only has to arrive before the start.

The wait is sleeps of at most SLEEP_SLICE_S until SPIN_S before the start (each reads the clock again, so a
step or slew of the clock in the meantime is followed), then a spin on the clock, so the start does not wait
on a wake-up. A kernel's absolute sleep (clock_nanosleep with TIMER_ABSTIME, no spin) was tried on the test
fleet, whose four hosts share two cores: the hosts woken at once waited for a core while the first ones ran,
and the spread of the starts was 3.4 ms (median of 9 runs) against 1.5 and 1.7 ms in two sets of 9 with the
spin. A host that arrives
after the start does not wait: it starts at once and records how late it was.

Prints one result line (common.result): {"at_ns", "started_ns", "late_ns", "clock"}; ``late_ns`` is 0 when
the host was on time. Exit status 2 on bad input: argparse's usage and error for a malformed ``--at``, one
line for a start more than LONGEST_WAIT_S away, ahead or past (a start given in s, not ns, say).
"""

from __future__ import annotations

import argparse
import sys
import time

from ..common.result import emit as emit_result

CLOCK = "CLOCK_REALTIME"
SPIN_S = 0.002  # the last 2 ms are a spin on the clock, not a sleep
SLEEP_SLICE_S = 0.5  # read the clock again at least this often while sleeping
LONGEST_WAIT_S = 3600  # a start further away than this, ahead or past, is a mistake, not a plan


def wait_until(at_ns: int, clock=time.time_ns, sleep=time.sleep) -> tuple[int, int]:
    """Wait until ``clock()`` (ns since the epoch) reaches ``at_ns``; (started_ns, late_ns).

    ``started_ns`` is the clock when the wait ended, never before ``at_ns``; ``late_ns`` is how far past
    ``at_ns`` the clock was already when this was called (0 when it was called in time). Raises ValueError
    when ``at_ns`` is more than LONGEST_WAIT_S away, ahead or past.
    """
    now = clock()
    if abs(at_ns - now) > LONGEST_WAIT_S * 1_000_000_000:  # whole ns: an --at of any size is an int
        away_s = (abs(at_ns - now) + 500_000_000) // 1_000_000_000  # to the nearest s
        where = f"{away_s} s away" if at_ns > now else f"{away_s} s past"
        raise ValueError(f"--at is {where}, more than the {LONGEST_WAIT_S} s allowed")
    if now >= at_ns:
        return now, now - at_ns
    while (remaining_s := (at_ns - clock()) / 1e9) > SPIN_S:
        sleep(min(remaining_s - SPIN_S, SLEEP_SLICE_S))
    while (now := clock()) < at_ns:
        pass
    return now, 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="disklab_host together-start", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--at", type=int, required=True, help="the start, ns since the epoch on this host's clock"
    )
    args = ap.parse_args(argv)
    try:
        started_ns, late_ns = wait_until(args.at)
    except ValueError as exc:
        print(f"together-start: {exc}", file=sys.stderr)
        return 2
    emit_result({"at_ns": args.at, "started_ns": started_ns, "late_ns": late_ns, "clock": CLOCK})
    return 0
