"""A together run's common start and how simultaneous it was, from each host's clock offset.

Every host is given one start: the controller's start time moved onto the host's own clock by the host's
measured offset (the collection's ``lab_clock`` action; disklab_host.together.clock). Each host waits for it
on its own clock (disklab_host.together.start) and records when it actually started, on that clock. Moved
back onto the controller's clock, host i started at ``c_i = started_i - offset_i``, known within ``u_i``:
the offset's own bound (half its exchange's round trip) plus chronyd's bound where chrony runs on the host
(it slews the clock between the exchange and the start). What that does not cover: a step of a clock (the
host's or the controller's) between a host's exchange and the start, which chronyd's bound, the host
clock's error against true time at one moment, does not bound; each host's offset is measured seconds
before the start, so only a step in those seconds would go unseen.

The spread of the starts is ``max c_i - min c_i``. Its upper bound, ``max over i != j of (c_i + u_i) -
(c_j - u_j)`` (0 for one host: the latest and the earliest start are two hosts' or the spread is 0), is what
the verdict judges: a run is called together only when that bound is within ``bound_ns``;
otherwise its figures are labelled not simultaneous, as a failed cache proof labels a figure.
"""

from __future__ import annotations

from dataclasses import dataclass

# The spread a together run may have, in ns, unless told otherwise; every verdict states the bound it used.
DEFAULT_BOUND_NS = 10_000_000


@dataclass(frozen=True)
class HostClock:
    """One host's clock against the controller's: ``offset_ns`` (host minus controller) within
    ``uncertainty_ns``, which holds the exchange's half round trip and chrony's bound (``chrony_ns``, 0 when
    chrony gave none)."""

    offset_ns: int
    uncertainty_ns: int
    chrony_ns: int = 0

    @classmethod
    def from_action(cls, measured: dict) -> HostClock:
        """From the ``lab_clock`` action's result: chrony's bound is added where chronyd gave one."""
        chrony = measured.get("chrony") or {}
        chrony_ns = int(chrony.get("bound_ns") or 0)
        return cls(int(measured["offset_ns"]), int(measured["uncertainty_ns"]) + chrony_ns, chrony_ns)


def host_start_ns(at_ns: int, clock: HostClock) -> int:
    """The common start ``at_ns`` (controller clock, ns since the epoch) on the host's clock."""
    return at_ns + clock.offset_ns


def spread(starts: dict[str, int], clocks: dict[str, HostClock], late: dict[str, int] | None = None,
           bound_ns: int = DEFAULT_BOUND_NS) -> dict:  # fmt: skip
    """How simultaneous the starts were, on the controller's clock.

    ``starts``: each host's actual start on its own clock (ns since the epoch); ``clocks``: each host's
    HostClock; ``late``: how late each host arrived (its together-start's late_ns; 0 or absent when on
    time). Returns {"spread_ns", "spread_bound_ns" (the upper bound), "uncertainty_ns" (bound minus
    spread), "first_host", "last_host", "late_hosts" (host: ns), "bound_ns", "together": bool, "why"}.
    Raises ValueError when a host has a start but no clock, or there are no starts.
    """
    if not starts:
        raise ValueError("no host started")
    missing = sorted(set(starts) - set(clocks))
    if missing:
        raise ValueError(f"no clock offset for {', '.join(missing)}")
    on_controller = {h: starts[h] - clocks[h].offset_ns for h in starts}
    first = min(on_controller, key=on_controller.get)
    last = max(on_controller, key=on_controller.get)
    measured = on_controller[last] - on_controller[first]
    upper = _bound(
        {h: c + clocks[h].uncertainty_ns for h, c in on_controller.items()},
        {h: c - clocks[h].uncertainty_ns for h, c in on_controller.items()},
    )
    late_hosts = {h: ns for h, ns in sorted((late or {}).items()) if ns > 0}
    together = upper <= bound_ns and not late_hosts
    if late_hosts:
        why = "started late: " + ", ".join(f"{h} by {ns / 1e6:.1f} ms" for h, ns in late_hosts.items())
    elif not together:
        why = (f"the starts' spread is {measured / 1e6:.2f} ms, at most {upper / 1e6:.2f} ms with the "
               f"clocks' uncertainty, more than the {bound_ns / 1e6:g} ms allowed")  # fmt: skip
    else:
        why = ""
    return {
        "spread_ns": measured,
        "spread_bound_ns": upper,
        "uncertainty_ns": upper - measured,
        "first_host": first,
        "last_host": last,
        "late_hosts": late_hosts,
        "bound_ns": bound_ns,
        "together": together,
        "why": why,
    }


def _bound(latest: dict[str, int], earliest: dict[str, int]) -> int:
    """max over two different hosts i, j of ``latest[i] - earliest[j]``, at least 0: the largest the true
    spread can be when host i's true start lies in [earliest[i], latest[i]]."""
    if len(latest) < 2:
        return 0
    top = sorted(latest, key=latest.get, reverse=True)[:2]
    low = sorted(earliest, key=earliest.get)[:2]
    pairs = [(i, j) for i in top for j in low if i != j]
    return max(0, max(latest[i] - earliest[j] for i, j in pairs))
