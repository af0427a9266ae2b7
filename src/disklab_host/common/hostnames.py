"""The one rule that turns a host's name into a file or directory name, and back.

Host names come from inventories (a dynamic inventory builds them from cloud tags), so they are untrusted:
``../../victim``, ``a/b``, ``evil|<script>``, a newline. :func:`encode` maps every name to a name that is
safe as one path component, and :func:`decode` inverts it exactly. Percent-style: each byte of the name's
UTF-8 outside :data:`SAFE` is written ``%XX`` (upper-case hex), and so is ``%`` itself, a leading ``.``
(no hidden, ``.`` or ``..`` name) and the first character of a name the reports directory keeps for itself
(:data:`RESERVED`, compared without case, for case-insensitive filesystems). ``web-01`` stays ``web-01``.

Names that differ only in case get different names on every filesystem, case-insensitive ones too (macOS
keeps a reports directory on one by default): a name with an upper-case letter ends in ``%u`` and the
case of its letters, as hex (:data:`CASE_MARK`): each letter left as it is is one bit, from the first
letter down, 1 for upper case. ``Web1`` is ``Web1%u4`` (``W e b``: 100), ``WEB1`` is ``WEB1%u7`` and
``web1`` stays ``web1``. ``%u`` follows no escape (those are ``%`` and two hex digits), so no two names
of different hosts are the same in any case. A name without an upper-case letter is as it was before the
case suffix (disklab 0.2.0 and older); :func:`legacy_encode` is that older rule, for finding the
directories it made (disklab.store moves them to their names now).

The controller's store (reports/<encoded>/...), the playbooks' fetch destinations
(``.incoming/<run_id>/<encoded>.json``, through the ``disklab.lab.host_file`` filter) and every reader of
the reports directory use this module; nothing else turns a host name into a path.
"""

from __future__ import annotations

import string

# Characters kept as they are: a conservative set that means nothing to a shell, a filesystem or markdown.
SAFE = frozenset(string.ascii_letters + string.digits + "-_.")
# Names at the top of the reports directory that are not hosts (disklab.report, disklab.fleet,
# disklab.togetherpage).
RESERVED = (
    "index.md", "fleet.md", "fleet-plots", "index.html", "fleet.html", "statistics.md", "statistics.html",
    "together.md", "together.html", "together.png",
)  # fmt: skip
# The longest encoded name: a file name is at most 255 bytes, and ``<encoded>.json`` and temp names add some.
MAX_ENCODED_BYTES = 200
# What starts the case suffix: ``%`` and a letter no escape has, so the suffix is never part of a name.
CASE_MARK = "%u"

_HEX = "0123456789ABCDEF"


def _escape(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def _parts(host: str) -> list[str]:
    """Each character of ``host`` as the rule writes it: itself (in :data:`SAFE`) or escaped."""
    if not isinstance(host, str) or not host:
        raise ValueError(f"a host name must be a non-empty string, got {host!r}")
    out = [ch if ch in SAFE else _escape(ch) for ch in host]
    if host[0] == "." or host.lower() in RESERVED:
        out[0] = _escape(host[0])
    return out


def _checked(host: str, name: str) -> str:
    if len(name) > MAX_ENCODED_BYTES:
        raise ValueError(
            f"host name {host[:60]!r}... encodes to {len(name)} bytes, over the {MAX_ENCODED_BYTES} allowed"
        )
    return name


def case_suffix(host: str) -> str:
    """``%u`` and the case of ``host``'s letters left as they are, in hex; "" without an upper-case one."""
    letters = [p for p in _parts(host) if p.isalpha()]  # an escape is never alpha: it has "%"
    if not any(p.isupper() for p in letters):
        return ""
    return CASE_MARK + format(int("".join("1" if p.isupper() else "0" for p in letters), 2), "x")


def encode(host: str) -> str:
    """The directory (and file stem) name of ``host``: safe as one path component, unique on every
    filesystem (case-insensitive ones too), reversible.

    Raises ValueError for a name that is not a non-empty string, or whose encoding is longer than
    MAX_ENCODED_BYTES bytes.
    """
    return _checked(host, "".join(_parts(host)) + case_suffix(host))


def legacy_encode(host: str) -> str:
    """The name the rule gave ``host`` before the case suffix (disklab 0.2.0 and older): the same as
    :func:`encode` for a name without an upper-case letter. For finding older directories only."""
    return _checked(host, "".join(_parts(host)))


def _unescape(name: str, what: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "%":
            pair = name[i + 1 : i + 3]
            if len(pair) != 2 or any(c not in _HEX for c in pair):
                raise ValueError(f"{what} is not an encoded host name: '%' must be followed by 2 hex digits")
            raw.append(int(pair, 16))
            i += 3
            continue
        if ch not in SAFE:
            raise ValueError(f"{what} is not an encoded host name: {ch!r} is never left unencoded")
        raw.extend(ch.encode())
        i += 1
    try:
        host = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not an encoded host name: its bytes are not UTF-8") from None
    if not host:
        raise ValueError(f"{what} is not an encoded host name: it names no host")
    return host


def decode(name: str) -> str:
    """The host name whose :func:`encode` is ``name``. Raises ValueError for a name encode never makes
    (among them an older directory's name for a host with an upper-case letter: :func:`legacy_decode`)."""
    stem = name.partition(CASE_MARK)[0]
    host = _unescape(stem, repr(name))
    if encode(host) != name:
        why = (
            "it is not canonical" if "".join(_parts(host)) != stem else "its case suffix is missing or wrong"
        )
        raise ValueError(
            f"{name!r} is not an encoded host name: disklab would write {host!r} as {encode(host)!r} ({why})"
        )
    return host


def legacy_decode(name: str) -> str:
    """The host whose :func:`legacy_encode` is ``name``; ValueError for a name that rule never made."""
    host = _unescape(name, repr(name))
    if legacy_encode(host) != name:
        raise ValueError(f"{name!r} is not an encoded host name: disklab would write {host!r} differently")
    return host
