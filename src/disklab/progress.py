"""Live per-host progress on the controller: host, current step, and its state.

On a terminal this is a rich table redrawn in place; elsewhere (CI logs, pipes)
each change is one plain line, so logs stay readable.
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

_STYLE = {"running": "cyan", "done": "green", "failed": "bold red", "unreachable": "bold red"}


class Progress:
    """Tracks (task, state) per host; usable as a context manager around a playbook run."""

    def __init__(self, console: Console | None = None, live: bool | None = None):
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal if live is None else live
        self.rows: dict[str, tuple[str, str, float]] = {}
        self._live: Live | None = None
        self._t0 = time.monotonic()

    def table(self) -> Table:
        t = Table(title="disklab", expand=False)
        t.add_column("host")
        t.add_column("step")
        t.add_column("state")
        t.add_column("elapsed", justify="right")
        for host, (task, state, at) in sorted(self.rows.items()):
            t.add_row(host, task or "", f"[{_STYLE.get(state, '')}]{state}[/]", f"{at - self._t0:.0f} s")
        return t

    def update(self, host: str, task: str | None, state: str) -> None:
        previous = self.rows.get(host)
        if previous and previous[1] in ("failed", "unreachable"):
            return  # a failed host stays failed
        self.rows[host] = (task or "", state, time.monotonic())
        if self._live is not None:
            self._live.update(self.table())
        elif previous is None or previous[:2] != (task or "", state):
            print(
                f"[{time.monotonic() - self._t0:6.1f} s] {host}: {state}: {task}", file=sys.stderr, flush=True
            )

    def finish(self, outcomes: dict[str, str]) -> None:
        """Mark each host done, failed or unreachable at the end of the run."""
        for host, status in outcomes.items():
            task = self.rows.get(host, ("", "", 0))[0]
            self.rows[host] = (task, "done" if status == "ok" else status, time.monotonic())
        if self._live is not None:
            self._live.update(self.table())

    def __enter__(self) -> Progress:
        if self.live:
            self._live = Live(self.table(), console=self.console, refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
