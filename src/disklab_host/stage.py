"""Stage the running host package zipapp in the lab root, where the audit and the lab run it.

Ansible's ``script`` module sends the zipapp to a temporary path and runs it
there: ``preflight --stage-to ROOT`` then copies that archive to
``ROOT/disklab_host.pyz`` once the checks have passed (one transfer and one
run per host, where a copy task and a preflight task were two module runs).
Standard library only; the controller imports ARTIFACT_NAME from here.
"""

from __future__ import annotations

import os
from pathlib import Path

from .common.fsio import atomic_write_bytes

ARTIFACT_NAME = "disklab_host.pyz"  # its name in a run's staging directory and in the lab root on each host


class NotAnArchive(RuntimeError):
    """This code runs from a source tree, not from the zipapp: there is no archive to stage."""


def own_archive() -> Path:
    """The zipapp this package runs from (``.../x.pyz`` of ``.../x.pyz/disklab_host/stage.py``)."""
    for parent in Path(os.path.abspath(__file__)).parents:
        if parent.is_file():
            return parent
    raise NotAnArchive(f"disklab_host runs from {Path(__file__).parent}, not from a zipapp: nothing to stage")


def stage_to(root: str | os.PathLike) -> dict:
    """Copy the running zipapp to ``root/ARTIFACT_NAME``, creating ``root`` (0755) when missing.

    An identical copy already there is kept untouched. The write is atomic with
    a directory fsync, so an interrupted stage leaves the previous copy.
    Returns ``{"path", "staged"}``: ``staged`` is False when nothing changed.
    """
    dest = Path(root).expanduser() / ARTIFACT_NAME
    data = own_archive().read_bytes()
    try:
        if dest.read_bytes() == data:
            return {"path": str(dest), "staged": False}
    except FileNotFoundError:
        pass
    dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    atomic_write_bytes(dest, data)
    return {"path": str(dest), "staged": True}
