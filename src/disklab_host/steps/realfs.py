"""Lab step ``realfs``: the save recipes on real ext4, xfs and btrfs crash images, and a real fsync error.

For each recipe (the first ``realfs_recipes`` of :data:`RECIPE_ORDER`) on
each filesystem (the first ``realfs_filesystems`` of :data:`FS_ORDER`) it
records the save at the block level, mounts and classifies every crash image
(disklab_host.realfs.crashlab), and holds the verdict against the power-cut
simulator's for the same recipe (realfs.compare). Then, per filesystem, a
real fsync error (realfs.fsync_error). It needs Linux, root, /dev/fuse, loop
devices and the tools named in realfs.mounts, and the host's
``lab_run_realfs: true``; otherwise it is not run, with the reason.
Everything it makes is under its workdir; every loop device, mount and
process it makes is ended by its id on every path.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import registry
from ..common.facts import not_run
from ..realfs import compare, crashlab, fsync_error
from ..realfs.mounts import FILESYSTEMS, JOURNAL_NAME, Resources, missing_tools, sweep

FS_ORDER = ("ext4", "xfs", "btrfs")
# The quick profile runs the first two: the rename pattern filesystems differ on, and the full atomic save.
RECIPE_ORDER = (
    "rename_no_fsync", "atomic", "naive", "fsync_before_flush", "no_dir_fsync", "safetensors",
    "fsync_before_flush_torch",
)  # fmt: skip
SETTING = "lab_run_realfs"
# quiet: nothing else writes during the save; busy: a neighbour writes and fsyncs in a loop beside it
LOADS = ("quiet", "busy")


def why_not(cfg: dict, filesystems: list[str]) -> str | None:
    """The reason the step cannot run on this host, or None."""
    if cfg.get("system", platform.system()) != "Linux":
        return "not available: loop devices, mount(2) and FUSE are Linux's (this host is not Linux)"
    if not registry.BY_NAME["realfs"].enabled(cfg.get("settings") or {}):
        return (
            f"{SETTING} is off (the default): this step makes loop devices, mounts and a FUSE filesystem "
            "as root; set it to true on a host you hand over for that"
        )
    if os.geteuid() != 0:
        return f"{SETTING} is on but the lab does not run as root here (loop devices and mounts need root)"
    if not os.path.exists("/dev/fuse"):
        return "not available: /dev/fuse is missing (the FUSE module is not loaded)"
    if not os.path.exists("/dev/loop-control"):
        return "not available: /dev/loop-control is missing (no loop devices)"
    missing = missing_tools(filesystems)
    if missing:
        return f"not available: missing {', '.join(missing)} (apt-get install fuse3 xfsprogs btrfs-progs)"
    return None


def simulator_verdict(recipe, workdir: Path, state_mib: int) -> dict:
    """The power-cut simulator's verdict for the same recipe and state size (or why there is none)."""
    from ..powercut import record as pc_record
    from ..powercut import simulate
    from ..powercut.trace import RecordError

    if pc_record.find_strace() is None:
        return {"verdict": None, "reason": "strace is not installed: no simulator verdict"}
    base = workdir / "simulator" / recipe.name
    try:
        result = simulate.analyse(f"recipe:{recipe.name}", recipe.fmt, base, state_mib)
    except (simulate.SpecError, RecordError) as exc:
        return {"verdict": None, "reason": f"the simulator gave no verdict: {exc}"}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    pc = result["models"]["power_cut"]
    return {"verdict": pc["verdict"], "states": pc["states"], "counts": pc["counts"]}


def _real_cells(recipe, filesystems: list[str], workdir: Path, sizes: dict, journal: Path) -> list[dict]:
    """One recipe on each filesystem and load: its real crash images' verdict, or what stopped it."""
    cells = []
    state_mib = sizes["realfs_state_mib"]
    loads = LOADS if sizes["realfs_busy"] else LOADS[:1]
    with Resources(journal) as res:
        saver = crashlab.SaveProcess(f"recipe:{recipe.name}", state_mib, res, workdir)
        for fs, load in ((fs, load) for fs in filesystems for load in loads):
            cell = {"fs": fs, "load": load, "recipe": recipe.name, "title": recipe.title}
            with Resources(journal) as inner:
                try:
                    cell.update(crashlab.run_save(
                        fs, f"recipe:{recipe.name}", recipe.fmt, workdir / fs / recipe.name, state_mib, inner,
                        saver, subsets=sizes["realfs_subsets"], max_states=sizes["realfs_max_states"],
                        measure_cost=load == "quiet", neighbour=load == "busy",
                    ))  # fmt: skip
                except (crashlab.SaveError, RuntimeError, OSError, ValueError) as exc:
                    cell.update(verdict=None, error=f"{type(exc).__name__}: {exc}")
            cell["cleanup_errors"] = inner.errors
            cells.append(cell)
            shutil.rmtree(workdir / fs / recipe.name, ignore_errors=True)
    return cells


def _fsync_error(fs: str, workdir: Path, state_mib: int, journal: Path) -> dict:
    """The fsync-error row of ``fs`` (or the error that stopped it), with any cleanup failure."""
    with Resources(journal) as res:
        try:
            row = fsync_error.measure(fs, workdir / "fsync_error" / fs, res, state_mib=state_mib)
        except (RuntimeError, OSError) as exc:
            row = {"fs": fs, "error": f"{type(exc).__name__}: {exc}"}
    row["cleanup_errors"] = res.errors
    shutil.rmtree(workdir / "fsync_error" / fs, ignore_errors=True)
    return row


def _sweep_a_killed_run(journal: Path, workdir: Path) -> dict:
    """End the loop devices, mounts and FUSE processes a killed run of this step left (their journal), then
    remove its files, unless a mount is still under ``workdir``: {"ended": [...], "errors": [...]}."""
    ended, errors = sweep(journal)
    if ended or errors:
        print(f"realfs: a killed run's resources: ended {ended or 'none'}, could not end {errors or 'none'}",
              file=sys.stderr)  # fmt: skip
    still = [m for m in _mount_points() if Path(m).is_relative_to(workdir)]
    if still:
        errors.append(f"still mounted under the workdir, its files kept: {', '.join(still)}")
    elif ended:
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True)
    return {"ended": ended, "errors": errors}


def _mount_points() -> list[str]:
    with open("/proc/self/mounts") as f:
        return [line.split()[1].replace("\\040", " ") for line in f]


def run(cfg: dict, workdir: Path) -> dict:
    """Lab step: real crash images of each recipe per filesystem, and the fsync error table."""
    from ..powercut import recipes as pc_recipes

    sizes = cfg["sizes"]
    filesystems = list(FS_ORDER[: sizes["realfs_filesystems"]])
    reason = why_not(cfg, filesystems)
    if reason:
        return not_run(reason)
    names = RECIPE_ORDER[: sizes["realfs_recipes"]]
    state_mib = sizes["realfs_state_mib"]
    journal = workdir.parent / JOURNAL_NAME
    swept = _sweep_a_killed_run(journal, workdir)
    start = time.perf_counter()
    cells: list[dict] = []
    recipes = [pc_recipes.recipe_named(name) for name in names]
    # The simulator's recordings (strace, their own processes) run beside the real images.
    with ThreadPoolExecutor(max_workers=1) as pool:
        sims = {r.name: pool.submit(simulator_verdict, r, workdir, state_mib) for r in recipes}
        for recipe in recipes:
            cells += _real_cells(recipe, filesystems, workdir, sizes, journal)
        errors = [_fsync_error(fs, workdir, state_mib, journal) for fs in filesystems]
        for cell in cells:
            sim = sims[cell["recipe"]].result()
            cell["simulator"], cell["simulator_detail"] = sim["verdict"], sim
            cell["judged"] = compare.judge(sim["verdict"], cell.get("verdict"))
    failed_parts = [f"{c['recipe']} on {c['fs']} ({c['load']}): {c['error']}" for c in cells if "error" in c]
    failed_parts += [f"the fsync error on {row['fs']}: {row['error']}" for row in errors if row.get("error")]
    return {
        # partial: a part failed (the rest of the section holds what the others measured)
        "status": "partial" if failed_parts else "ok",
        **({"failed_parts": failed_parts} if failed_parts else {}),
        **({"swept": swept} if swept["ended"] or swept["errors"] else {}),
        "filesystems": {
            fs: {"image_mib": FILESYSTEMS[fs].image_bytes >> 20, "mount": FILESYSTEMS[fs].notes}
            for fs in filesystems
        },  # fmt: skip
        "kernel": platform.release(),
        "state_mib": state_mib,
        "subsets": sizes["realfs_subsets"],
        "max_states": sizes["realfs_max_states"],
        "loads": list(LOADS if sizes["realfs_busy"] else LOADS[:1]),
        "cells": cells,
        "confusion": compare.confusion(cells),
        "disagreements": compare.disagreements(cells),
        "fsync_error": errors,
        "wall_s": time.perf_counter() - start,
    }
