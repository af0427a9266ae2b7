"""The two ways provisioning stops: a refusal (exit 2) and a failed command (exit 1)."""

from __future__ import annotations


class Refused(Exception):
    """A host or a setting that cannot be provisioned; the message names the setting to change."""


class Failed(Exception):
    """A venv or pip command that failed; the message gives the command and its last words (``last``)."""

    def __init__(self, message: str, last: str = "", output: str = ""):
        super().__init__(message)
        self.last = last or message
        self.output = output
