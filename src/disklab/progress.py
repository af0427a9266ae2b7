"""Live per-host progress on the controller: host, task or lab step, its place, elapsed time, state.

Fed by disklab.runner from ansible-runner's events: each task start, and,
while the lab runs, each poll of the host's status file (disklab_host.lab
keeps it; the lab_run role reads it), which names the step running, its place
in the list (3/7) and when it started on the host. The elapsed time counts on
the controller's clock between polls, so it keeps going while a step runs.

On a terminal this is a rich table redrawn in place (twice a second); elsewhere
(CI logs, pipes) each change is one plain line, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from disklab import console

_STYLE = {"running": "cyan", "done": "green", "failed": "bold red", "unreachable": "bold red"}
_ENDED = ("done", "failed", "unreachable", "partial", "interrupted")


@dataclass
class Step:
    """The lab step a host reported at its last poll."""

    name: str
    index: int
    steps: int
    elapsed_s: float  # on the host's clock, when it was polled
    polled_at: float  # controller's monotonic clock at that poll
    done: list = field(default_factory=list)  # [name, status, wall_s] of the finished steps


@dataclass
class Row:
    task: str
    state: str
    since: float  # controller's monotonic clock when this task (or state) began
    step: Step | None = None
    ended_at: float | None = None
    lab_done: bool = False  # the host's lab said it finished (said once)


class Progress:
    """Tracks each host's task, lab step and state; usable as a context manager around a playbook run."""

    def __init__(self, console: Console | None = None, live: bool | None = None):
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal if live is None else live
        self.rows: dict[str, Row] = {}
        self._live: Live | None = None
        self._t0 = time.monotonic()

    # What each column shows
    @staticmethod
    def what(row: Row) -> str:
        if row.step is None:
            return row.task
        return f"{row.step.name} ({row.step.index}/{row.step.steps})"

    @staticmethod
    def elapsed_s(row: Row, now: float | None = None) -> float:
        """Seconds in the current step (from the host's report, counted on since) or task."""
        now = row.ended_at if row.ended_at is not None else (time.monotonic() if now is None else now)
        if row.step is not None:
            return row.step.elapsed_s + max(0.0, now - row.step.polled_at)
        return max(0.0, now - row.since)

    def table(self) -> Table:
        t = Table(title=f"disklab ({time.monotonic() - self._t0:.0f} s)", expand=False)
        t.add_column("host")
        t.add_column("task or lab step")
        t.add_column("elapsed", justify="right")
        t.add_column("state")
        for host, row in sorted(self.rows.items()):
            style = _STYLE.get(row.state, "")
            cells = (Text(console.text(host)), Text(console.text(self.what(row))))  # text, never rich markup
            t.add_row(*cells, f"{self.elapsed_s(row):.0f} s", f"[{style}]{row.state}[/]")
        return t

    def _line(self, host: str, text: str) -> None:
        if self._live is None:
            line = console.text(f"{host}: {text}")  # a host's name or task is one line, as it is
            print(f"[{time.monotonic() - self._t0:6.1f} s] {line}", file=sys.stderr, flush=True)

    def update(self, host: str, task: str | None, state: str) -> None:
        """A task started (running), or a host failed or became unreachable."""
        previous = self.rows.get(host)
        if previous and previous.state in ("failed", "unreachable"):
            return  # a failed host stays failed
        task = task or ""
        if previous is None or (previous.task, previous.state) != (task, state):
            self.rows[host] = Row(task=task, state=state, since=time.monotonic())
            if state in _ENDED:
                self.rows[host].ended_at = self.rows[host].since
            self._line(host, f"{state}: {task}")

    def step(self, host: str, status: dict, host_now: float | None) -> None:
        """A poll of the lab's status file on ``host`` (disklab_host.lab.write_status's fields)."""
        row = self.rows.get(host)
        if row is None or row.state != "running":
            return
        if status.get("state") == "finished" and not row.lab_done:
            row.lab_done = True
            done = ", ".join(f"{d[0]} {d[1]} {d[2]:.1f} s" for d in status.get("done") or [] if len(d) == 3)
            self._line(host, f"lab finished: {done}")
            return
        if status.get("state") != "running":
            return
        name, index, steps = status.get("step"), status.get("step_index"), status.get("steps")
        if not isinstance(name, str) or not isinstance(index, int) or not isinstance(steps, int):
            return
        started = status.get("step_started_unix")
        clock = host_now if host_now is not None else status.get("updated_unix")
        elapsed = max(0.0, clock - started) if isinstance(started, (int, float)) and clock else 0.0
        changed = row.step is None or (row.step.name, row.step.index) != (name, index)
        row.step = Step(name, index, steps, elapsed, time.monotonic(), list(status.get("done") or []))
        if changed:
            last = (
                f"; {row.step.done[-1][0]} {row.step.done[-1][1]} in {row.step.done[-1][2]:.1f} s"
                if (row.step.done and len(row.step.done[-1]) == 3)
                else ""
            )
            self._line(host, f"running: {row.task}: step {name} ({index}/{steps}), {elapsed:.0f} s in{last}")

    def finish(self, outcomes: dict[str, str]) -> None:
        """Mark each host done, failed or unreachable at the end of the run."""
        now = time.monotonic()
        for host, status in outcomes.items():
            row = self.rows.get(host) or Row(task="", state="", since=now)
            row.state, row.ended_at = ("done" if status == "ok" else status), now
            self.rows[host] = row
        if self._live is not None:
            self._live.refresh()

    def __enter__(self) -> Progress:
        if self.live:
            self._live = Live(get_renderable=self.table, console=self.console, refresh_per_second=2)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
