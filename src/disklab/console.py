"""Untrusted strings in the lines disklab prints: each printed line stays one line, showing what it holds.

A host's name, a task's message or a path from an inventory may hold a newline (a host named
``"a\\nlocalhost"`` would print a line ``localhost: ok`` of its own), a carriage return, a terminal
escape (ESC, or C1's CSI) or a direction override (U+202E shows text backwards). :func:`text` writes each
such character as its Python escape (``\\n``, ``\\x1b``, ``\\u202e``) and leaves every other character as
it is. Every console line that carries a string from an inventory, a host or a stored file goes through
it (disklab.cli, disklab.store, disklab.progress), as the reports escape the same strings for markdown
(disklab.markup).
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL, the line and paragraph separators, and the bidirectional marks, embeddings,
# overrides and isolates (Unicode's UAX #9): what can end a line, move the cursor or reorder what follows.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    ch = match.group()
    return _SHORT.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def text(value: object) -> str:
    """``value`` as one line of terminal text: each control character written as its escape."""
    return _UNSAFE.sub(_escape, str(value))


def lines(value: object) -> str:
    """Text of several lines (Ansible's output, a comparison) with each line passed through :func:`text`."""
    return "\n".join(text(line) for line in str(value).split("\n"))
