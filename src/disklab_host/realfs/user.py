"""A user's own save function on real filesystems: ``disklab powercut FILE.py:FUNC --real-fs ext4,xfs``.

The simulator (powercut.simulate) has already recorded the save and checked
that it returns within its limits; :func:`check` then runs it on real crash
images of each filesystem named (crashlab.run_save) and :func:`render` prints
the verdicts beside the simulator's.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from . import compare, crashlab
from .mounts import Resources, check_filesystems, missing_tools

SUBSETS = 2
MAX_STATES = 24


def why_not(filesystems: list[str]) -> str | None:
    """Why real filesystems cannot be used here, or None."""
    if platform.system() != "Linux":
        return "--real-fs needs Linux (loop devices, mount(2), FUSE)"
    if os.geteuid() != 0:
        return "--real-fs needs root (it makes loop devices, mounts and a FUSE filesystem)"
    if not os.path.exists("/dev/fuse"):
        return "--real-fs needs /dev/fuse (the FUSE module is not loaded)"
    missing = missing_tools(filesystems)
    if missing:
        return f"--real-fs needs {', '.join(missing)} (apt-get install fuse3 xfsprogs btrfs-progs)"
    return None


def parse(text: str) -> list[str]:
    """``ext4,xfs`` -> ["ext4", "xfs"]; ValueError naming --real-fs and the known filesystems."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    try:
        return check_filesystems(names)
    except ValueError as exc:
        raise ValueError(f"--real-fs: {exc}") from None


def check(
    spec: str, fmt: str, filesystems: list[str], base: Path, state_mib: int, simulator: str
) -> list[dict]:
    """One cell per filesystem: the real images' verdict (or the error) and how it compares."""
    cells = []
    with Resources() as res:
        saver = crashlab.SaveProcess(spec, state_mib, res, base)
        for fs in filesystems:
            cell = {"fs": fs, "simulator": simulator}
            with Resources() as inner:
                try:
                    cell.update(crashlab.run_save(
                        fs, spec, fmt, base / "realfs" / fs, state_mib, inner, saver,
                        subsets=SUBSETS, max_states=MAX_STATES,
                    ))  # fmt: skip
                except (crashlab.SaveError, RuntimeError, OSError) as exc:
                    cell.update(verdict=None, error=f"{type(exc).__name__}: {exc}")
            cell["judged"] = compare.judge(simulator, cell.get("verdict"))
            cell.pop("samples", None)
            cells.append(cell)
    return cells


def render(cells: list[dict]) -> str:
    """The real filesystems' verdicts, one line each, with the first lost image."""
    lines = ["", "on real filesystems (crash images of a block-level recording, each mounted and loaded):"]
    for c in cells:
        if c.get("verdict") is None:
            lines.append(f"  {c['fs']:<6} no verdict: {c.get('error')}")
            continue
        counts = " ".join(f"{k}={v}" for k, v in c["counts"].items())
        lines.append(
            f"  {c['fs']:<6} {c['verdict']:<12} {counts} ({c['states']} images; {c['judged']} vs simulator)"
        )
        if c["first_unsafe"]:
            p = c["first_unsafe"]
            lines.append(
                f"         first lost: {p['state']} -> {p['outcome']}"
                + (f": {p['error']}" if p["error"] else "")
            )
    return "\n".join(lines)
