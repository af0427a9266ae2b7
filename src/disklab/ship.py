"""Build the one artifact every host receives: a zipapp of the disklab_host package.

``python -m disklab.ship OUT.pyz`` writes it. It needs nothing on the host but
Python (no tar, no rsync, no pip): ``python OUT.pyz lab|preflight|audit|powercut``.
The archive is deterministic (sorted entries, fixed timestamps), so the same
code always gives the same bytes and the same digest.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import zipfile
from pathlib import Path

import disklab_host
from disklab_host.common.fsio import atomic_write_bytes

HOST_PACKAGE = Path(disklab_host.__file__).resolve().parent
_EPOCH = (1980, 1, 1, 0, 0, 0)
_MAIN = b"from disklab_host.__main__ import main\nraise SystemExit(main())\n"


def host_sources() -> list[Path]:
    """Every .py file of disklab_host and its hash locks (locks/*.txt and the extras' locks/GROUP/NAME/
    *.txt, disklab_host.lock), sorted by their path inside the package."""
    files = [*HOST_PACKAGE.rglob("*.py"), *HOST_PACKAGE.glob("locks/**/*.txt")]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def artifact_bytes() -> bytes:
    """The zipapp's bytes: ``#!/usr/bin/env python3``, then the package and a root ``__main__.py``."""
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        entries = [("__main__.py", _MAIN)]
        entries += [
            (f"disklab_host/{p.relative_to(HOST_PACKAGE).as_posix()}", p.read_bytes()) for p in host_sources()
        ]
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()


def build(out: str | Path) -> Path:
    """Write the artifact to ``out`` atomically; returns ``out``."""
    return atomic_write_bytes(out, artifact_bytes())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    data = artifact_bytes()
    atomic_write_bytes(args.out, data)
    print(hashlib.sha256(data).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
