"""The one line a host command's result travels in: ``disklab-result {"key": ...}``.

Real hosts print more than the command does: a login shell's rc file echoes a
banner, the host's Python prints a warning on start, and over SSH the
command's stderr is merged into its stdout (a pty). So every command the roles
read (audit, provision, preflight, lab, lab --detach, stop; the controller's
playbook-begin) prints its result as one line, :data:`MARKER` then compact
JSON, and the reader takes exactly that line, ignoring whatever is around it.

The roles and playbooks read it with :func:`parse` too, through the
collection's filters (plugins/filter/result.py: ``disklab.lab.result``, which
import this file through its link plugins/plugin_utils/result.py); the
controller calls it directly. Standard library only, and no import of another
disklab_host module: the collection loads this file on its own.
"""

from __future__ import annotations

import json
import re
import sys

# A word no banner or warning says, followed by one space and the JSON object.
MARKER = "disklab-result "
# What ssh itself prints on stderr when a session on a multiplexed connection ends. Over SSH a command runs
# on a pty, so its own stderr arrives in stdout, and this line is no line of the command's.
SSH_CLOSED = re.compile(r"^Shared connection to \S+ closed\.$")


def line(obj: dict) -> str:
    """``obj`` as the result line: MARKER, then compact key-sorted JSON, with no newline in it."""
    return MARKER + json.dumps(obj, sort_keys=True, separators=(",", ":"))


def emit(obj: dict, file=None) -> None:
    """Print the result line of ``obj`` on its own line (stdout by default) and flush it."""
    out = sys.stdout if file is None else file
    out.write("\n" + line(obj) + "\n")  # a leading newline ends any banner printed without one
    out.flush()


def parse(text: str | None) -> dict | None:
    """The object of the last result line in ``text`` (a command's stdout), or None when it has none.

    Anything before the marker on its line (a banner without a newline) and every other line is
    ignored.
    """
    for raw in reversed((text or "").splitlines()):
        at = raw.find(MARKER + "{")
        if at < 0:
            continue
        try:
            obj = json.loads(raw[at + len(MARKER) :])
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None
