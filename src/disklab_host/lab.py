"""The lab runner: run each enabled experiment on this host, write one results JSON.

Usage: python disklab_host.pyz lab --config CONFIG.json --facts HOST.json --out RESULTS.json

CONFIG (written by the lab_run role) holds run_id, host, profile, workbench,
steps and settings (every lab_run_* set in the inventory, sizes among them). Each step is registered in disklab_host.registry and
is a module of disklab_host.steps with
``run(cfg: dict, workdir: pathlib.Path) -> dict``; it gets its own directory
under the workbench. A step that raises is recorded as failed with its error
and the next step still runs, so one broken experiment never costs the others
their results. The results file is written atomically, once, at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

from . import codeinfo, registry
from .common.formats import stamp
from .common.fsio import atomic_write_json


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def load_config(path: Path) -> dict:
    """Read CONFIG and resolve its sizes. Raises ValueError naming a bad setting."""
    cfg = json.loads(path.read_text())
    for key in ("workbench", "lab_root"):  # the role leaves ~ for the host to expand
        if key in cfg:
            cfg[key] = os.path.expanduser(cfg[key])
    cfg["sizes"] = registry.resolve(cfg["profile"], cfg.get("settings") or {}, strict=False)
    cfg.setdefault("system", platform.system())
    registry.check_steps(cfg["steps"])
    return cfg


def run_step(name: str, cfg: dict) -> dict:
    """Run one step; never raises. Adds its wall time in seconds."""
    workdir = Path(cfg["workbench"]) / name
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        module = importlib.import_module(registry.step(name).module)
        section = module.run(cfg, workdir)
    except Exception as exc:  # recorded, so the other steps keep their results
        section = {
            "status": "failed",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=8),
        }
    section["step_wall_s"] = time.perf_counter() - start
    return section


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--facts", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*", help="run only these steps (for development)")
    args = ap.parse_args(argv)

    cfg = load_config(args.config)
    steps = [s for s in cfg["steps"] if not args.only or s in args.only]
    results = stamp(
        "results",
        {
            "run_id": cfg["run_id"],
            "host": cfg["host"],
            "profile": cfg["profile"],
            "sizes": cfg["sizes"],
            "started_utc": utc_now(),
            "lab_python": sys.version.split()[0],
            "lab_platform": platform.platform(),
            "lab_code": codeinfo.lab_code(steps),
            "facts": json.loads(args.facts.read_text()),
            "experiments": {},
        },
    )
    for name in steps:
        print(f"disklab-step {name}", flush=True)
        results["experiments"][name] = run_step(name, cfg)
    results["finished_utc"] = utc_now()
    atomic_write_json(args.out, results)
    failed = [n for n, s in results["experiments"].items() if s.get("status") == "failed"]
    print(json.dumps({"out": str(args.out), "failed_steps": failed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
