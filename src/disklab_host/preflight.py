"""Preflight: refuse bad settings before any work starts on a host.

Usage: python disklab_host.pyz preflight (--config CONFIG.json | --config-json JSON)
       [--check-mode | --apply [--stage-to LAB_ROOT]]

Checks, in order, each refusal naming the setting:
- the profile and every size override, with each size's rules (registry.resolve);
- the steps (registry.check_steps);
- the production loaders and their knobs (loadlab.loaders.check_settings: lab_run_load_loaders,
  lab_run_load_loader_knobs);
- when the load step runs, that lab_run_load_model names a file, a directory or a repo id in the host's
  Hugging Face cache, and no FIFO, socket or device, nor a directory holding one
  (loadlab.usermodel.refuse_special: it reads file types only, so it cannot block);
- the workbench exists (or lab_run_workbench_create allows creating it) and is writable;
- the free space on the workbench's filesystem covers the profile's peak need.

``--check-mode`` (Ansible's --check) runs every check and refuses exactly what the real run would, with
the same message, but creates nothing: a workbench not made yet is checked, and its free space measured,
through its nearest existing parent, the filesystem it would be created on.

With ``--stage-to``, once every check has passed, the zipapp this runs from is
copied to LAB_ROOT/disklab_host.pyz (:mod:`stage`): the lab_run role sends the
package with this one run, and nothing is staged on a refused host.

Prints one result line (common.result: ``disklab-result`` and a JSON object).
Exit status 0 when the host may run, 2 when refused
(the message is in ``error``). Standard library only: it runs before the
lab venv exists, with the host's own Python.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import registry, stage
from .common.result import emit as emit_result
from .common.units import MIB
from .loadlab import loaders, usermodel
from .savers import registry as saverlib


class Refused(Exception):
    """A setting that cannot run; the message names the setting and the numbers."""


def nearest_existing(path: Path) -> Path:
    """``path`` itself when it exists, else its nearest existing parent: where it would be created."""
    found = path
    while not found.exists() and found != found.parent:
        found = found.parent
    return found


def check_workbench(path: str, create: bool, dry_run: bool = False) -> tuple[Path, Path]:
    """Return ``(workbench, measured)``: the workbench as an absolute path, and the directory whose
    filesystem holds it (the workbench, or under ``dry_run`` its nearest existing parent).

    The workbench is created only when allowed. With ``dry_run`` (Ansible's --check) a missing
    workbench that may be created is not created: the same checks run on its nearest existing parent,
    the filesystem it would be created on, so --check refuses exactly what the real run would.

    Raises Refused when it is missing (and may not be created), cannot be created, is not a
    directory, or is not writable by this user.
    """
    wb = Path(path).expanduser()
    if not wb.is_absolute():
        raise Refused(f"lab_run_workbench must be an absolute path, got {path!r}")
    if not wb.exists():
        if not create:
            raise Refused(
                f"lab_run_workbench {str(wb)!r} does not exist; "
                "create it, or set lab_run_workbench_create: true"
            )
        parent = nearest_existing(wb)
        if not parent.is_dir():
            raise Refused(f"cannot create lab_run_workbench {str(wb)!r}: {str(parent)!r} is not a directory")
        try:
            if dry_run:  # what mkdir would meet there, creating nothing that stays
                with tempfile.TemporaryFile(dir=parent):
                    pass
                return wb, parent
            wb.mkdir(parents=True)
        except OSError as exc:
            raise Refused(f"cannot create lab_run_workbench {str(wb)!r}: {exc.strerror}") from exc
    if not wb.is_dir():
        raise Refused(f"lab_run_workbench {str(wb)!r} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=wb):
            pass
    except OSError as exc:
        raise Refused(f"lab_run_workbench {str(wb)!r} is not writable: {exc.strerror}") from exc
    return wb, wb


# The load step's manifest of the weights it made (disklab_host.loadlab.prep.MANIFEST; prep imports torch).
LOAD_MANIFEST = "prep_manifest.json"


def reusable_weights_bytes(load_dir: Path, sizes: dict[str, int]) -> int:
    """Bytes of weight files in ``load_dir`` that the load step will reuse, by its manifest alone.

    A file counts only when the manifest lists it, was made for these sizes
    (``recipe``: big_mib and the small config), exists at its recorded size,
    and is fully allocated (st_blocks): a sparse or truncated leftover, or any
    file the manifest does not name, counts as nothing, so preflight never
    mistakes it for weights already made.
    """
    try:
        manifest = json.loads((load_dir / LOAD_MANIFEST).read_text())
        recipe, files = manifest["recipe"], manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    want = {"big_mib": sizes.get("load_big_mib"),
            "small_config": "small" if sizes.get("load_small_full_size") else "tiny"}  # fmt: skip
    if not isinstance(recipe, dict) or any(recipe.get(k) != v for k, v in want.items()):
        return 0
    total = 0
    for entry in files.values() if isinstance(files, dict) else ():
        path = Path(str(entry.get("path", ""))) if isinstance(entry, dict) else None
        if path is None or not path.is_file() or path.resolve().parent != load_dir.resolve():
            continue  # the user's own model lives elsewhere and is never counted or written
        st = path.stat()
        if st.st_size == entry.get("size_bytes") and st.st_blocks * 512 >= st.st_size:
            total += st.st_size
    return total


def check_space(
    wb: Path,
    needed: dict[str, int],
    profile: str = "quick",
    sizes: dict | None = None,
    measured: Path | None = None,
) -> dict:
    """Refuse when the workbench's free space is below the peak need, giving both in MiB.

    ``measured`` is the directory whose filesystem's free space counts (default ``wb``; under --check,
    the nearest existing parent of a workbench not created yet).

    Steps run one at a time and remove their files, except the load lab's
    weights, which stay for reuse: the peak is the largest other step plus the
    weights, less what reusable weights (:func:`reusable_weights_bytes`) already
    occupy from an earlier run.
    """
    transient = max((v for k, v in needed.items() if k != "load"), default=0)
    present = reusable_weights_bytes(wb / "load", sizes) if sizes and wb.is_dir() else 0
    need_bytes = max(0, transient + needed.get("load", 0) - present)
    free = shutil.disk_usage(measured or wb).free
    if free < need_bytes:
        biggest = max((k for k in needed if k != "load"), key=needed.get, default=None)
        raise Refused(
            f"not enough free disk on the workbench {str(wb)!r} (lab_run_workbench, or disklab_workbench): "
            f"the {profile} profile needs {need_bytes / MIB:,.0f} MiB, {free / MIB:,.0f} MiB free. "
            f"Steps run one at a time, so the need is the largest step ({biggest}) plus the load lab's "
            f"weights, which are kept (per step, MiB: "
            f"{', '.join(f'{k} {v / MIB:,.0f}' for k, v in needed.items())})"
        )
    return {"needed_bytes": need_bytes, "free_bytes": free, "per_step_bytes": needed}


def preflight(cfg: dict, dry_run: bool = False) -> dict:
    """Run every check on a config dict; raise Refused or ValueError naming the setting."""
    sizes = registry.resolve(cfg["profile"], cfg.get("settings") or {}, strict=False)
    try:
        registry.check_steps(cfg["steps"])
        loaders.check_settings(cfg.get("settings") or {})
        saverlib.check_settings(cfg.get("settings") or {})
        model = (cfg.get("settings") or {}).get("load_model")
        if model is not None and "load" in cfg["steps"]:
            usermodel.refuse_special(str(model))
    except ValueError as exc:
        raise Refused(str(exc)) from None
    wb, measured = check_workbench(cfg["workbench"], bool(cfg.get("workbench_create")), dry_run)
    needed = registry.needed_bytes(sizes, cfg["steps"], cfg.get("settings") or {})
    space = check_space(wb, needed, cfg["profile"], sizes, measured)
    verdict = {"ok": True, "workbench": str(wb), "sizes": sizes, **space}
    if measured != wb:
        verdict.update(would_create_workbench=True, measured_path=str(measured))
    return verdict


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", type=Path, help="the run's config.json")
    src.add_argument("--config-json", help="the same config, inline (nothing is written before preflight)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check-mode", action="store_true", help="Ansible --check: create nothing")
    mode.add_argument("--apply", action="store_true", help="the default: create the workbench if allowed")
    ap.add_argument("--stage-to", metavar="LAB_ROOT", help="then copy this zipapp into LAB_ROOT")
    args = ap.parse_args(argv)
    if args.stage_to and args.check_mode:
        ap.error("--stage-to changes the host; --check-mode creates nothing")
    try:
        cfg = json.loads(args.config.read_text() if args.config else args.config_json)
        verdict = preflight(cfg, dry_run=args.check_mode)
        if args.stage_to:
            try:
                verdict["stage"] = stage.stage_to(args.stage_to)
            except (OSError, stage.NotAnArchive) as exc:
                why = f"cannot stage the host package in lab_run_root {args.stage_to!r}: {exc}"
                raise Refused(why) from None
    except (Refused, ValueError) as exc:
        emit_result({"ok": False, "error": str(exc)})
        print(f"disklab preflight refused: {exc}", file=sys.stderr)
        return 2
    emit_result(verdict)
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
