"""The one rule that turns a host's name into a file or directory name, and back.

Host names come from inventories (a dynamic inventory builds them from cloud tags), so they are untrusted:
``../../victim``, ``a/b``, ``evil|<script>``, a newline. :func:`encode` maps every name to a name that is
safe as one path component, and :func:`decode` inverts it exactly. Percent-style: each byte of the name's
UTF-8 outside :data:`SAFE` is written ``%XX`` (upper-case hex), and so is ``%`` itself, a leading ``.``
(no hidden, ``.`` or ``..`` name) and the first character of a name the reports directory keeps for itself
(:data:`RESERVED`, compared without case, for case-insensitive filesystems). ``web-01`` stays ``web-01``.

The controller's store (reports/<encoded>/...), the playbooks' fetch destinations
(``.incoming/<run_id>/<encoded>.json``, through the ``disklab.lab.host_file`` filter) and every reader of
the reports directory use this module; nothing else turns a host name into a path.
"""

from __future__ import annotations

import string

# Characters kept as they are: a conservative set that means nothing to a shell, a filesystem or markdown.
SAFE = frozenset(string.ascii_letters + string.digits + "-_.")
# Names at the top of the reports directory that are not hosts (disklab.report, disklab.fleet).
RESERVED = ("index.md", "fleet.md", "fleet-plots", "index.html", "fleet.html")
# The longest encoded name: a file name is at most 255 bytes, and ``<encoded>.json`` and temp names add some.
MAX_ENCODED_BYTES = 200

_HEX = "0123456789ABCDEF"


def _escape(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def encode(host: str) -> str:
    """The directory (and file stem) name of ``host``: safe as one path component, unique, reversible.

    Raises ValueError for a name that is not a non-empty string, or whose encoding is longer than
    MAX_ENCODED_BYTES bytes.
    """
    if not isinstance(host, str) or not host:
        raise ValueError(f"a host name must be a non-empty string, got {host!r}")
    out = [ch if ch in SAFE else _escape(ch) for ch in host]
    if host[0] == "." or host.lower() in RESERVED:
        out[0] = _escape(host[0])
    name = "".join(out)
    if len(name) > MAX_ENCODED_BYTES:
        raise ValueError(
            f"host name {host[:60]!r}... encodes to {len(name)} bytes, over the {MAX_ENCODED_BYTES} allowed"
        )
    return name


def decode(name: str) -> str:
    """The host name whose :func:`encode` is ``name``. Raises ValueError for a name encode never makes."""
    raw = bytearray()
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "%":
            pair = name[i + 1 : i + 3]
            if len(pair) != 2 or any(c not in _HEX for c in pair):
                raise ValueError(
                    f"{name!r} is not an encoded host name: '%' must be followed by 2 hex digits"
                )
            raw.append(int(pair, 16))
            i += 3
            continue
        if ch not in SAFE:
            raise ValueError(f"{name!r} is not an encoded host name: {ch!r} is never left unencoded")
        raw.extend(ch.encode())
        i += 1
    try:
        host = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise ValueError(f"{name!r} is not an encoded host name: its bytes are not UTF-8") from None
    if not host or encode(host) != name:
        raise ValueError(f"{name!r} is not an encoded host name: disklab would write {host!r} differently")
    return host
