"""strace's text: its lines, argument lists and -xx hex strings, read exactly or refused."""

from __future__ import annotations

import re

HEX_BYTES_PER_BYTE = 4  # -xx prints each byte as \xNN

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+|\?)(.*)$")
# A quoted string of the trace. With -xx strace writes every byte as \xNN, so no raw quote is inside one and
# a plain scan to the closing quote finds its end; hex_bytes then checks it is \xNN and nothing else. (A
# pattern of \xNN groups took seconds for each MiB of a saved tensor: the written bytes are the bulk of a
# trace.)
QUOTED = re.compile(r'"([^"]*)"(\.\.\.)?')
_IOV = re.compile(r'iov_base="([^"]*)"(\.\.\.)?')
# What split_args looks at: a whole quoted string (skipped; an unclosed one runs to the end), or a bracket or
# a comma.
_ARG_TOKENS = re.compile(r'"[^"]*(?:"|$)|[\[\]{},]')


class RecordError(RuntimeError):
    """The trace cannot be turned into a faithful recording (the message says why)."""


class TruncatedError(RecordError):
    """strace cut a string at its -s limit: one write was longer than the limit."""


def hex_bytes(s: str) -> bytes:
    """The bytes of strace's -xx text of a string (``\\x41\\x42``, no quotes).

    Raises RecordError when ``s`` is anything else. Checked with slices, in C: every fourth character from
    the first is a backslash, from the second an ``x``, and the rest are hex digits, one byte each.
    """
    n = len(s) // HEX_BYTES_PER_BYTE
    try:
        data = bytes.fromhex(s.replace("\\x", ""))
    except ValueError:
        data = None
    if (
        data is None
        or len(data) != n
        or len(s) != HEX_BYTES_PER_BYTE * n
        or s[::4] != "\\" * n
        or s[1::4] != "x" * n
    ):
        raise RecordError(f"expected strace's \\xNN bytes in a string, got {s[:60]!r}")
    return data


def hex_text(data: bytes) -> str:
    """``data`` as strace's -xx writes it."""
    return "".join(f"\\x{b:02x}" for b in data)


def split_args(text: str) -> list[str]:
    """Split a strace argument list at top-level commas (outside quotes, [] and {})."""
    out, depth, start = [], 0, 0
    for m in _ARG_TOKENS.finditer(text):
        token = m.group()
        if token[0] == '"':
            continue
        if token in "[{":
            depth += 1
        elif token in "]}":
            depth -= 1
        elif depth == 0:
            out.append(text[start : m.start()].strip())
            start = m.end()
    if text.strip():
        out.append(text[start:].strip())
    return out


def string_arg(arg: str) -> bytes:
    m = QUOTED.fullmatch(arg)
    if not m:
        raise RecordError(f"expected a hex string argument, got {arg[:60]!r}")
    if m.group(2):
        raise TruncatedError("strace truncated a string at its -s limit")
    return hex_bytes(m.group(1))


def iov_data(arg: str, returned: int) -> bytes:
    parts = []
    for m in _IOV.finditer(arg):
        if m.group(2):
            raise TruncatedError("strace truncated an iovec at its -s limit")
        parts.append(hex_bytes(m.group(1)))
    data = b"".join(parts)
    if len(data) < returned:
        raise RecordError(f"iovec holds {len(data)} bytes but the call wrote {returned}")
    return data[:returned]


def parse_lines(lines) -> list[tuple[int, str, list[str], int, str]]:
    """Join unfinished/resumed lines; return (pid, name, args, ret, rest) per finished call."""
    pending: dict[int, str] = {}
    out = []
    for raw in lines:
        m = _LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        pid, body = int(m.group(1)), m.group(2)
        if body.endswith("<unfinished ...>"):
            pending[pid] = body[: -len("<unfinished ...>")].rstrip()
            continue
        if body.startswith("<..."):
            body = pending.pop(pid, "") + body.split("resumed>", 1)[1]
        c = _CALL.match(body)
        if not c:
            continue  # signals, exits, and calls killed before they returned
        ret = c.group(3)
        value = -1 if ret == "?" else int(ret, 0)
        out.append((pid, c.group(1), split_args(c.group(2)), value, c.group(4)))
    return out


def offset_arg(arg: str) -> int | None:
    """A copy call's offset argument: None for NULL, N for ``[N]`` or ``[N] => [M]``."""
    if arg == "NULL":
        return None
    m = re.match(r"\[(\d+)\]", arg)
    if not m:
        raise RecordError(f"expected an offset argument, got {arg[:60]!r}")
    return int(m.group(1))
