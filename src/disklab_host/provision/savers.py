"""The framework savers of ``--saver NAME`` (``lab_venv_savers``): each one's exact pins, installed after the
venv's own, with the venv's pins (and its lock's packages, where it came from one) as pip constraints, so a
saver can never move torch, safetensors, numpy or what they were installed with.

A saver whose pins conflict with the venv's is ``not_run`` with pip's words (its resolver's line); one that
pip cannot install (no wheel, no index) or that fails to import likewise. The outcomes are written beside
the venv (``disklab-savers.json``, read by the savers step for its reasons) and returned. ``dcp`` needs
nothing beyond torch. A saver already importable at its pins is not installed again.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from ..common.fsio import atomic_write_json
from ..savers import registry
from . import install
from .errors import Failed, Refused

IMPORT_TIMEOUT_S = 300
# Imports each module named, then prints each distribution's version, on one line.
_CHECK = (
    "import importlib, importlib.metadata, sys; "
    "[importlib.import_module(m) for m in sys.argv[1].split(',')]; "
    "print(' '.join(importlib.metadata.version(d) for d in sys.argv[2].split(',')))"
)


def check_savers(names: list[str]) -> list[str]:
    """The saver names of ``names`` (``dcp:4`` is ``dcp``), each known; Refused naming the setting."""
    try:
        specs = registry.parse_all(list(names), "lab_venv_savers")
    except ValueError as exc:
        raise Refused(str(exc)) from None
    return list(dict.fromkeys(s.saver.name for s in specs))


def _import(python: Path, saver: registry.Saver) -> dict:
    """Import the saver's modules in the venv: ``{"status": "ok", "versions": {dist: version}}`` (torch's
    where it pins nothing), or not_run with the error's last line."""
    dists = [p.partition("==")[0] for p in saver.pins] or ["torch"]
    try:
        cp = subprocess.run(
            [str(python), "-c", _CHECK, ",".join(saver.imports), ",".join(dists)], capture_output=True,
            text=True, timeout=IMPORT_TIMEOUT_S, check=False, env=install.clean_env(),
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {
            "status": "not_run",
            "reason": f"importing {', '.join(saver.imports)} could not be run: {exc}",
        }
    if cp.returncode != 0:
        last = (cp.stderr.strip().splitlines() or [f"exit {cp.returncode}"])[-1]
        return {
            "status": "not_run",
            "reason": f"import {', '.join(saver.imports)} failed in the lab venv: {last}",
        }
    words = (cp.stdout.strip().splitlines() or [""])[-1].split()  # the last line: an import may print others
    if len(words) != len(dists):
        return {
            "status": "not_run",
            "reason": f"the versions of {', '.join(dists)} could not be read: {words}",
        }
    return {"status": "ok", "versions": dict(zip(dists, words, strict=True))}


def install_savers(venv: Path, names: list[str], venv_pins: list[str], pip_args: list[str]) -> dict:
    """Install and import each saver of ``names`` into ``venv``; each one's outcome, also kept beside it."""
    python = install.venv_python(venv)
    out = {}
    with tempfile.TemporaryDirectory(prefix="disklab-savers-") as tmp:
        constraints = Path(tmp) / "venv-pins.txt"
        constraints.write_text("".join(f"{p}\n" for p in venv_pins))
        for name in names:
            saver = registry.BY_NAME[name]
            entry = {"pins": list(saver.pins)}
            found = _import(python, saver)
            wanted = dict(p.split("==") for p in saver.pins)
            if saver.pins and found.get("versions") != wanted:
                pip = [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "-c",
                    str(constraints),
                ]
                try:
                    install.run([*pip, *saver.pins, *pip_args], f"installing the saver {name}")
                except Failed as exc:
                    why = (
                        f"pip could not install {' '.join(saver.pins)} beside the venv's pins "
                        f"({', '.join(venv_pins)}): {exc.last}"
                    )
                    out[name] = {**entry, "status": "not_run", "reason": why}
                    continue
                after = _import(python, saver)
                found = {**after, "installed_now": after.get("versions") != found.get("versions")}
            out[name] = {**entry, **found}
    atomic_write_json(venv / registry.INSTALL_RECORD, out)
    return out
