"""Start at one absolute time on this host's own clock: ``python disklab_host.pyz together-start --at NS``,
or ``--start-file PATH``.

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

With ``--start-file PATH`` the start is not known at launch: the command first does whatever it must before
the start (together-load: evict, import torch, open the files), then says it is ready by making
``PATH.ready``, and reads the start from PATH, which the controller writes (by rename, so it is never read
half-written) once every host is ready, a short margin ahead. So the margin covers only that one write to
each host, not each host's preparation, whose length the controller cannot know. A start file that never
comes is given up after ``--ready-timeout`` s (exit status 3).

Prints one result line (common.result): {"at_ns", "started_ns", "late_ns", "clock"}; ``late_ns`` is 0 when
the host was on time. Exit status 2 on bad input: argparse's usage and error for a malformed ``--at``, one
line for a start more than LONGEST_WAIT_S away, ahead or past (a start given in s, not ns, say).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..common.result import emit as emit_result

CLOCK = "CLOCK_REALTIME"
SPIN_S = 0.002  # the last 2 ms are a spin on the clock, not a sleep
SLEEP_SLICE_S = 0.5  # read the clock again at least this often while sleeping
LONGEST_WAIT_S = 3600  # a start further away than this, ahead or past, is a mistake, not a plan
READY_SUFFIX = ".ready"  # PATH.ready: made when the command is ready for its start
POLL_S = 0.005  # how often a ready command looks for its start file


def check_at(at_ns: int, now: int) -> None:
    """Raise ValueError when ``at_ns`` is more than LONGEST_WAIT_S from ``now``, ahead or past."""
    if abs(at_ns - now) > LONGEST_WAIT_S * 1_000_000_000:  # whole ns: an --at of any size is an int
        away_s = (abs(at_ns - now) + 500_000_000) // 1_000_000_000  # to the nearest s
        where = f"{away_s} s away" if at_ns > now else f"{away_s} s past"
        raise ValueError(f"the start is {where}, more than the {LONGEST_WAIT_S} s allowed")


def wait_until(at_ns: int, clock=time.time_ns, sleep=time.sleep) -> tuple[int, int]:
    """Wait until ``clock()`` (ns since the epoch) reaches ``at_ns``; (started_ns, late_ns).

    ``started_ns`` is the clock when the wait ended, never before ``at_ns``; ``late_ns`` is how far past
    ``at_ns`` the clock was already when this was called (0 when it was called in time). Raises ValueError
    when ``at_ns`` is more than LONGEST_WAIT_S away, ahead or past.
    """
    now = clock()
    check_at(at_ns, now)
    if now >= at_ns:
        return now, now - at_ns
    while (remaining_s := (at_ns - clock()) / 1e9) > SPIN_S:
        sleep(min(remaining_s - SPIN_S, SLEEP_SLICE_S))
    while (now := clock()) < at_ns:
        pass
    return now, 0


def await_start_file(path: str | Path, timeout_s: float, now=time.monotonic, sleep=time.sleep) -> int:
    """Make ``path``.ready, then wait for ``path`` to hold the start (ns since the epoch, one line); return
    it. Raises TimeoutError when it has not come in ``timeout_s`` s, ValueError when it is not a whole
    number of ns."""
    path = Path(path)
    if not (timeout_s > 0 and timeout_s != float("inf")):  # NaN fails the first test
        raise ValueError(f"--ready-timeout must be a number of s above 0, got {timeout_s}")
    ready = path.with_name(path.name + READY_SUFFIX)
    try:
        ready.touch()
    except OSError as exc:
        raise ValueError(f"cannot say ready in {ready}: {exc.strerror}") from None
    deadline = now() + timeout_s
    while True:
        try:
            text = path.read_bytes().decode("ascii", errors="replace").strip()
        except FileNotFoundError:
            text = ""
        except OSError as exc:
            raise ValueError(f"cannot read the start file {path}: {exc.strerror}") from None
        if text:
            if not text.isdigit():
                raise ValueError(f"the start file {path} holds {text[:40]!r}, not a start in ns")
            return int(text)
        if now() > deadline:
            raise TimeoutError(f"no start was written to {path} within {timeout_s:g} s of being ready")
        sleep(POLL_S)


def add_start_arguments(ap: argparse.ArgumentParser, required: bool = True) -> None:
    """``--at NS`` or ``--start-file PATH`` (with ``--ready-timeout S``): how a command is given its start."""
    group = ap.add_mutually_exclusive_group(required=required)
    group.add_argument("--at", type=int, help="the start, ns since the epoch on this host's clock")
    group.add_argument("--start-file", type=Path, help="make PATH.ready, then read the start in PATH")
    ap.add_argument("--ready-timeout", type=float, default=600.0, help="s to wait for the start file")


def start_now(args: argparse.Namespace) -> dict:
    """Wait for the start ``args`` give (add_start_arguments); {"at_ns", "started_ns", "late_ns", "clock"}.
    Raises ValueError (a start too far away, a bad start file) or TimeoutError (no start file)."""
    at_ns = args.at if args.at is not None else await_start_file(args.start_file, args.ready_timeout)
    started_ns, late_ns = wait_until(at_ns)
    return {"at_ns": at_ns, "started_ns": started_ns, "late_ns": late_ns, "clock": CLOCK}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="disklab_host together-start", description=__doc__.splitlines()[0])
    add_start_arguments(ap)
    args = ap.parse_args(argv)
    try:
        started = start_now(args)
    except ValueError as exc:
        print(f"together-start: {exc}", file=sys.stderr)
        return 2
    except TimeoutError as exc:
        print(f"together-start: {exc}", file=sys.stderr)
        return 3
    emit_result(started)
    return 0
