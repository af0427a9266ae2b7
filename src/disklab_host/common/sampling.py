"""The three records of one timed interval, read together: I/O, noise and time split.

Every timed sample the lab keeps (an fsync round, a write repeat, a ceiling read, a big write; the
load's stages have their own clock, loadlab/load_one.py, which reads the same three) gets:

- ``io_record``: what storage delivered (common/iorecord.py: this process's bytes, the device's);
- ``noise``: what else the host did (common/noise.py: pressure stall, steal, swap);
- ``time_split``: where this process's wall time went (common/timesplit.py: CPU, blocked on I/O,
  waiting to run, the rest).

The probes are read outside the clock: noise, then the process's counters, then I/O before it
starts, and the same in reverse after it stops, so the interval they cover holds the timed one.
``enabled=False`` records nothing and costs nothing. Standard library only.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from . import iorecord, noise, timesplit


class Interval:
    """Begin and end the three records of one timed interval of this process.

    ``path`` is the file whose device the I/O record reads (iorecord.device_of), or None.
    """

    def __init__(self, path: str | os.PathLike | None, *, enabled: bool = True, system: str | None = None,
                 root: Path = Path("/")):  # fmt: skip
        self.io = iorecord.Recorder(path, enabled=enabled, system=system, root=root)
        self.noise = noise.Probe(enabled=enabled, system=system, root=root)
        self.clock = timesplit.ProcessClock(enabled=enabled, system=system, root=root)
        self.enabled = enabled

    def begin(self) -> dict | None:
        """Read every counter now; pass the answer to :meth:`end`. Call right before the clock starts."""
        if not self.enabled:
            return None
        raw = {"noise": self.noise.begin(), "clock": self.clock.read(), "io": self.io.begin()}
        raw["t_ns"] = time.perf_counter_ns()
        return raw

    def end(self, before: dict | None, interval: str, wall_s: float | None = None) -> dict:
        """``{"io_record", "noise", "time_split"}`` of the interval since ``before``; call right after the
        clock stops. ``wall_s`` is the timed interval's own wall time (default: from :meth:`begin`'s read).
        Switched off, each field says it was not recorded."""
        if before is None:
            why = "switched off for this interval"
            return {
                "io_record": iorecord.not_recorded(why),
                "noise": noise.not_recorded(why),
                "time_split": timesplit.not_recorded(why),
            }
        t_ns = time.perf_counter_ns()
        io = self.io.end(before["io"], interval)
        clock = self.clock.read()
        nz = self.noise.end(before["noise"])
        wall = (t_ns - before["t_ns"]) / 1e9 if wall_s is None else wall_s
        return {"io_record": io, "noise": nz, "time_split": self.clock.split(before["clock"], clock, wall)}
