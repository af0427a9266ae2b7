"""One host's part in a cold-start storm: the shared model files, and one cold load at the common start.

A together run's storm has N hosts load one copy of the model files, on shared storage, at one moment
(disklab.storm judges what that did to each host's time). Two commands of the host package, both run with the
lab venv's Python:

- ``together-prepare --dir DIR --big-mib MIB [--seed S] [--loader NAME ...]``, on one host only, outside any
  clock: writes the load lab's files (loadlab.prep, the same recipe as the load step) into DIR on the shared
  filesystem, or keeps them when DIR already holds them, with the file each production loader named reads
  (tensorizer's own format) where that loader can run on this host; prints the manifest's summary as its
  result line, with the manifest's sha256 (a storage server's check that it holds the same file:
  together.server).
- ``together-load --dir DIR --method METHOD [--loader-knobs JSON] (--at NS | --start-file PATH)
  [--shared SOURCE] [--become-allowed]``, on each of the N hosts: reads the manifest the writer left in DIR
  (never writing there), makes the method's file cold in this host's own page cache (cache.evict) and runs
  one load measurement (steps.load.measure_one) whose load call starts at the start given, on this host's
  CLOCK_REALTIME (together.start: with ``--start-file``, load_one.py says it is ready once torch is
  imported and the files are open). Prints the sample, with its cold proof and its ``together`` record
  (when it started, how late), as its result line.

The methods (:func:`methods`) are the big file's that reach every readiness stage up to ``all_touched``
through a whole state dict (:data:`METHODS`): a storm times first_response and all_touched; and the production
loaders (loadlab.loaders, ``lab_run_load_loaders``), each with the knobs the inventory set
(``--loader-knobs``) and its record (version, pins, knobs, how it reads) in the result line. A loader that
cannot run in this host's lab venv (not installed, no GPU) or whose file the writer did not make prints
``{"not_run": why, ...}`` and exits 0 before it says it is ready, so the round goes on without it. The file
server's own page cache is not this host's to empty or see; the controller states it. Exit status 2 on bad
input, in one line: a method this offers not, a directory without the writer's manifest, a start more than
an hour away; 1 when the load fails, its line naming the shared filesystem when its server stopped
answering (together.storage).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import stat
import sys
import time
from pathlib import Path

from ..common.mounts import mount_of
from ..common.result import emit as emit_result
from ..loadlab import loaders
from . import storage
from .start import add_start_arguments, check_at
from .storage import named

# The storm's methods, each with the file it loads (the load step's BIG_CELLS, less one-tensor, which
# returns one tensor and so reaches neither first_response nor a whole all_touched).
METHODS = {
    "torch.load": "big_pt",
    "torch.load-mmap": "big_pt",
    "load_file": "big_safetensors",
    "load_file+willneed": "big_safetensors",
}


def methods() -> list[str]:
    """Every method a round may name: :data:`METHODS`, then the production loaders."""
    return [*METHODS, *loaders.NAMES]


def file_of(method: str) -> str:
    """The manifest key of the file ``method`` loads (a loader: the big file in its format)."""
    return METHODS.get(method) or loaders.BIG_FILE[loaders.BY_NAME[method].file_format]


def loader_plan(names: list[str], knobs: dict | None = None) -> dict | None:
    """steps.load.loader_plan for the loaders ``names`` with the inventory's ``knobs`` ({loader: {knob:
    value}}): each one's record, and whether it can run in this lab venv. Raises ValueError naming a bad
    knob (loaders.check_settings)."""
    from ..steps import load

    settings = {"load_loaders": list(names), "load_loader_knobs": knobs or {}}
    return load.loader_plan({"settings": settings})


def read_manifest(directory: Path) -> dict:
    """The writer's manifest in ``directory``; ValueError naming the directory when it has none."""
    from ..loadlab import prep

    first = "together-prepare writes the model files there on one host first"
    try:
        is_dir = stat.S_ISDIR(directory.stat().st_mode)  # another OSError (a dead mount's) is raised as it is
    except FileNotFoundError:
        raise ValueError(f"{directory}: no such directory: {first}") from None
    if not is_dir:
        raise ValueError(f"{directory}: not a directory: {first}")
    manifest = prep._read_manifest(directory / prep.MANIFEST)
    if manifest is None or "big_model" not in manifest:
        raise ValueError(
            f"{directory} holds no model files of a together run (no {prep.MANIFEST}): "
            "together-prepare writes them on one host first"
        )
    return manifest


def prepare(directory: Path, big_mib: int, seed: int, loader_names: list[str] | None = None) -> dict:
    """Write (or keep) the model files in ``directory``, with the file formats of the loaders
    ``loader_names`` that can run here (as the load step does); the manifest's summary for the result
    line."""
    from ..loadlab import prep

    cfg = {"sizes": {"load_big_mib": big_mib, "load_small_full_size": 0}, "prep_seed": seed}
    from ..steps import load

    plan = loader_plan(loader_names) if loader_names else None
    manifest = prep.prepare(cfg, directory, load.loader_formats(plan))
    files = {k: {"path": v["path"], "size_bytes": v["size_bytes"]} for k, v in manifest["files"].items()}
    sha = hashlib.sha256((directory / prep.MANIFEST).read_bytes()).hexdigest()  # a storage server checks it
    mount = mount_of(directory)  # every later command is given its source (together.storage.check)
    mount["server_dir"] = storage.server_dir(directory, mount)  # where a storage server holds DIR
    return {"dir": str(directory), "reused": manifest["reused"], "prep_s": manifest["prep_s"], "files": files,
            "manifest_sha256": sha, "mount": mount}  # fmt: skip


def cold_sample(directory: Path, method: str, args: argparse.Namespace, become_allowed: bool) -> dict:
    """One cold load of ``method``'s file in ``directory``, started as ``args`` say (together.start's
    arguments): ``{"sample"}``, with ``loader`` (its record) for a production loader; or ``{"not_run",
    "loader"}`` for a loader that cannot run here or whose file the writer did not make."""
    from ..steps import load

    if args.at is not None:
        check_at(args.at, time.time_ns())  # refused before the file is evicted, not inside load_one.py
        start = ["--at", str(args.at)]
    else:
        if not (args.ready_timeout > 0 and args.ready_timeout != float("inf")):  # NaN fails the first test
            raise ValueError(f"--ready-timeout must be a number of s above 0, got {args.ready_timeout}")
        start = ["--start-file", str(args.start_file), "--ready-timeout", str(args.ready_timeout)]
    storage.check(directory, args.shared)
    manifest = read_manifest(directory)
    summary, record = None, {}
    if method in loaders.BY_NAME:
        summary = loader_plan([method], {method: args.loader_knobs} if args.loader_knobs else None)
        record = {"loader": summary["loaders"][method]}
        if record["loader"]["status"] != "ok":
            return {"not_run": record["loader"]["reason"], **record}
        wanted = file_of(method)
        if wanted not in manifest["files"]:
            why = f"the writer made no {wanted} in {directory} ({method} could not run on the writer)"
            return {"not_run": why, **record}
    plan, _ = load.cell_plan(manifest, summary)
    (cell,) = [c for c in plan if c["method"] == method and c["file"] == file_of(method)]
    cfg = {"become_allowed": become_allowed, "system": platform.system()}
    return {"sample": load.measure_one(cell, "cold", cfg=cfg, start=start), **record}


def main_prepare(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="disklab_host together-prepare", description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="the directory on the shared filesystem")
    ap.add_argument("--big-mib", type=int, required=True, help="the big model's size in MiB (load_big_mib)")
    ap.add_argument("--seed", type=int, default=0, help="the files' seed (prep_seed)")
    ap.add_argument(
        "--loader", action="append", default=[], choices=loaders.NAMES, help="a production loader, repeatable"
    )
    args = ap.parse_args(argv)
    try:
        summary = prepare(args.dir, args.big_mib, args.seed, args.loader)
    except ValueError as exc:
        print(f"together-prepare: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the directory cannot be made or written: a file in its place, no room, no right
        print(f"together-prepare: {args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    emit_result(summary)
    return 0


def main_load(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="disklab_host together-load", description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="the directory the writer prepared")
    ap.add_argument("--method", choices=methods(), required=True)
    ap.add_argument(
        "--loader-knobs",
        type=_knobs,
        default=None,
        help="a production loader's knobs the inventory set (JSON)",
    )
    add_start_arguments(ap)
    storage.add_argument(ap)
    ap.add_argument("--become-allowed", action="store_true", help="eviction may use sudo -n (drop_caches)")
    args = ap.parse_args(argv)
    try:
        result = cold_sample(args.dir, args.method, args, args.become_allowed)
    except ValueError as exc:
        print(named(f"together-load: {exc}", args.dir, args.shared), file=sys.stderr)
        return 2
    except RuntimeError as exc:  # load_one.py failed: its stderr's last line says why
        lines = str(exc).strip().splitlines()
        said = f"together-load: {args.method} failed: {lines[-1] if lines else exc}"
        print(named(said, args.dir, args.shared), file=sys.stderr)
        return 1
    except OSError as exc:  # the directory or its files cannot be reached (a file server gone)
        where = f"{exc.filename}: " if exc.filename else ""
        print(named(f"together-load: {where}{exc.strerror or exc}", args.dir, args.shared), file=sys.stderr)
        return 1
    emit_result(result)
    return 0


def _knobs(text: str) -> dict:
    """``--loader-knobs``: a JSON object (argparse's type: a ValueError is its usage error)."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object: {text}")
    return value
