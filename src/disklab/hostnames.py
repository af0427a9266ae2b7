"""Host names as paths under the reports directory: the only way a host's name becomes a path.

The rule itself is disklab_host.common.hostnames (the playbooks' fetch destinations use it too); this adds
the directory of a host under a reports directory, checked to be a direct child of it.
"""

from __future__ import annotations

from pathlib import Path

from disklab_host.common.hostnames import RESERVED, decode, encode, legacy_decode, legacy_encode

__all__ = ["RESERVED", "decode", "encode", "host_dir", "host_of", "legacy_decode", "legacy_encode"]


def host_dir(reports: Path, host: str) -> Path:
    """``reports/<encode(host)>``: the directory of ``host``'s stored files. Raises ValueError for a name
    :func:`encode` refuses; the result is always a direct child of ``reports``."""
    path = Path(reports) / encode(host)
    if path.parent != Path(reports) or path.name in ("", ".", ".."):  # encode's own promise, checked
        raise ValueError(f"host name {host!r} does not make a directory inside {reports}")
    return path


def host_of(path: Path) -> str:
    """The host whose directory ``path`` is (``host_dir``'s inverse). Raises ValueError for another name."""
    return decode(Path(path).name)
