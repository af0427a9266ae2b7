"""The save recipes the power-cut step records, and what the lesson expects of each.

Each recipe is ``save(state_dict, path) -> None``. Recipes 1, 3, 5, 6 and 7 are
saver.py's; 2 and 4 are the two half-fixes the lesson warns about ("Saving a
file so no crash can break it": step 2 and step 4 skipped); 7 is Break It 1's
ordering written around ``torch.save(obj, f)``, which flushes ``f`` itself, so
the recording shows whether the installed torch masks the bug. ``expects`` is the
lesson's verdict per model ("safe", "unsafe", "rolled_back"); None where the
lesson makes no claim (safetensors: whatever its recorded calls give).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint import saver


def rename_no_fsync_save(obj: dict, path: str | os.PathLike) -> None:
    """Temp file and os.replace, with no fsync at all (the 2009 ext4 pattern)."""
    tmp = saver.temp_path(path)
    saver.naive_save(obj, tmp)
    os.replace(tmp, path)


def no_dir_fsync_save(obj: dict, path: str | os.PathLike) -> None:
    """Temp file, flush, fsync, os.replace, but no fsync of the directory (step 4 skipped)."""
    tmp = saver.temp_path(path)
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, Path(path))


@dataclass(frozen=True)
class Recipe:
    """A shipped recipe: number, name, title, file format and the lesson's expectation per model."""

    number: int
    name: str
    title: str
    save: Callable[[dict, str], None]
    fmt: str
    expects: dict[str, str | None]


RECIPES: list[Recipe] = [
    Recipe(1, "naive", "naive torch.save", saver.naive_save, "torch",
           {"process-kill": "unsafe", "power-cut": "unsafe"}),
    Recipe(2, "rename_no_fsync", "rename without any fsync", rename_no_fsync_save, "torch",
           {"process-kill": "safe", "power-cut": "unsafe"}),
    Recipe(3, "fsync_before_flush", "atomic, fsync before flush (Break It 1)", saver.fsync_before_flush_save,
           "torch", {"process-kill": "safe", "power-cut": "unsafe"}),
    Recipe(4, "no_dir_fsync", "atomic without directory fsync", no_dir_fsync_save, "torch",
           {"process-kill": "safe", "power-cut": "rolled_back"}),
    Recipe(5, "atomic", "full atomic (the lesson's four steps)", saver.atomic_save, "torch",
           {"process-kill": "safe", "power-cut": "safe"}),
    Recipe(6, "safetensors", "safetensors save_file", saver.safetensors_save, "safetensors",
           {"process-kill": None, "power-cut": None}),
    Recipe(7, "fsync_before_flush_torch", "fsync before flush around torch.save(f), which flushes f itself",
           saver.fsync_before_flush_torch_save, "torch", {"process-kill": None, "power-cut": None}),
]  # fmt: skip
BY_NAME = {r.name: r for r in RECIPES}


def recipe_named(name: str) -> Recipe:
    """The recipe called ``name``; raises ValueError listing the known names."""
    if name not in BY_NAME:
        raise ValueError(f"recipe must be one of {sorted(BY_NAME)}, got {name!r}")
    return BY_NAME[name]
