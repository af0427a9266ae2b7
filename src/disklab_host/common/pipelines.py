"""Lines read from a child's pipe, each within a timeout, so a stuck child cannot hang its reader.

Used by the crash step (the saver child's progress lines) and by the collection's ``lab_clock`` action (the
clock loop's answers): standard library only, and no import of another disklab module, as the collection
loads this file on its own (plugins/plugin_utils/pipelines.py is a link to it).
"""

from __future__ import annotations

import os
import select
import time


class Lines:
    """Lines read from a pipe's file descriptor ``fd`` (select(2) for each timeout), decoded as UTF-8 with
    ``errors`` (str.decode's)."""

    def __init__(self, fd: int, errors: str = "strict"):
        self.fd, self.errors, self.buffer = fd, errors, b""

    def next(self, timeout_s: float) -> str | None:
        """The next line without its newline, or None at the end of the output or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode("utf-8", self.errors)
