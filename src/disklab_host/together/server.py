"""The file server's part in a together run: check that it exports the clients' workbench, and empty its own
page cache of the files a round reads.

A together run's clients read one copy of the files from one file server. Each client empties its own page
cache before each load; the server's page cache is another machine's, and a file a client read a moment ago
may be served from the server's memory without touching its disk. When the inventory names the server (the
``disklab_storage_servers`` group), the together role runs these commands there, with the server's own
Python (standard library only):

- ``together-server-check --dir DIR --manifest-sha256 HEX [--name NAME]``: DIR is the directory on the
  server that holds the storm's files, as the clients' mount names it (``server:/export`` plus the path
  inside the mount). Refuses in one line naming NAME (the host's inventory name), exit 2, when DIR holds no
  ``prep_manifest.json`` or one whose bytes are not the ones the writing client wrote: then this host does
  not export the clients' workbench.
- ``together-server-evict --dir DIR (--method METHOD | --prefix PREFIX)``: makes the files of a storm
  method (the file the clients' load reads, from the manifest) or every file whose name starts with PREFIX
  (a burst's shards) cold in this host's page cache (cache.evict) and measures each one's residency
  (mincore) before and after: the result line's ``cold`` is true when every file is at most 1 % resident;
  ``absent`` names a method's file the writer never made (a loader that could not run there): nothing to
  empty, since no client loads it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
from pathlib import Path

from ..cache import pagecache
from . import storage
from .load import file_of, methods

MANIFEST = "prep_manifest.json"  # loadlab.prep.MANIFEST; not imported: that module needs numpy


def check(directory: Path, sha256: str, name: str) -> dict:
    """ValueError naming this host ``name`` (its inventory name) and ``directory`` when the directory does not
    hold the manifest whose bytes hash to ``sha256``."""
    path = directory / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{name} has no {path}: it does not export the clients' workbench") from None
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror}") from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise ValueError(
            f"{path} on {name} is not the file the clients wrote (sha256 {got[:12]}, theirs "
            f"{sha256[:12]}): it does not export the clients' workbench"
        )
    return {"dir": str(directory), "manifest_sha256": got}


def files_of(directory: Path, method: str | None, prefix: str | None) -> list[Path] | None:
    """The files to empty: the method's file named in the manifest, or every file starting with prefix; None
    when the manifest names no file of the method (a loader's format the writer could not make)."""
    if method is not None:
        entry = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))["files"].get(file_of(method))
        return [directory / os.path.basename(entry["path"])] if entry else None
    return sorted(p for p in directory.iterdir() if p.name.startswith(prefix or "\0") and p.is_file())


def evict(directory: Path, method: str | None, prefix: str | None, become_allowed: bool) -> dict:
    """Empty this host's page cache of the files; each one's residency before, eviction method and residency
    after. ``absent``: the method's file was never made, so no client loads it and there is nothing to
    empty."""
    files = files_of(directory, method, prefix)
    if files is None:
        return {"dir": str(directory), "files": [], "cold": False, "absent": file_of(method)}
    out = []
    for path in files:
        before = pagecache.residency(path)["fraction"]
        ev = pagecache.evict(path, become_allowed=become_allowed, system=platform.system())
        res = pagecache.residency(path)
        out.append({"file": path.name, "eviction": ev["method"], "fraction_before": before,
                    "fraction_after": res["fraction"], "trust": res["trust"]})  # fmt: skip
    cold = bool(out) and all(
        f["trust"] == "ok" and f["fraction_after"] <= pagecache.COLD_MAX_FRACTION for f in out
    )
    return {"dir": str(directory), "files": out, "cold": cold}


def main_check(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="disklab_host together-server-check", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--dir", type=Path, required=True, help="the storm's directory, on this server")
    ap.add_argument(
        "--manifest-sha256", required=True, help="the sha256 of the manifest the writing client wrote"
    )
    ap.add_argument(
        "--name", default=platform.node(), help="this host's name in the inventory, for the refusal"
    )
    args = ap.parse_args(argv)
    return storage.run(
        "together-server-check", lambda: check(args.dir, args.manifest_sha256, args.name), args.dir
    )


def main_evict(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="disklab_host together-server-evict", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--dir", type=Path, required=True, help="the directory of the files, on this server")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--method", choices=methods(), help="the storm method whose file to empty")
    which.add_argument("--prefix", help="empty every file whose name starts with this")
    ap.add_argument("--become-allowed", action="store_true", help="eviction may use sudo -n (drop_caches)")
    args = ap.parse_args(argv)
    work = lambda: evict(args.dir, args.method, args.prefix, args.become_allowed)  # noqa: E731
    return storage.run("together-server-evict", work, args.dir)
