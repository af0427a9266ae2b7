"""Lab step ``powercut``: every shipped save recipe under the process-kill and power-cut models.

Records the six recipes (disklab_host.powercut.recipes) on a state dict of
``sizes["powercut_state_mib"]`` MiB and classifies every crash state
(disklab_host.powercut.states). It needs Linux and strace; elsewhere it is
not run, with the reason.
"""

from __future__ import annotations

import platform
import shutil
import time
from pathlib import Path

from ..common.facts import not_run
from ..powercut import recipes as pc_recipes
from ..powercut import record as pc_record
from ..powercut import simulate
from ..powercut import states as pc_states


def run(cfg: dict, workdir: Path) -> dict:
    """Lab step: every shipped recipe under both models. Returns the ``powercut`` section."""
    if cfg.get("system", platform.system()) != "Linux":
        return not_run("not available (no strace): the recorder needs Linux strace")
    if pc_record.find_strace() is None:
        return not_run("not available (no strace): strace is not installed on this host")
    state_mib = cfg["sizes"]["powercut_state_mib"]
    start = time.perf_counter()
    recipes = []
    for recipe in pc_recipes.RECIPES:
        result = simulate.analyse(f"recipe:{recipe.name}", recipe.fmt, workdir / recipe.name, state_mib)
        entry = {"number": recipe.number, "name": recipe.name, "title": recipe.title, **result}
        recipes.append({**entry, **simulate.compare_with_lesson(recipe, result)})
        shutil.rmtree(workdir / recipe.name, ignore_errors=True)
    return {
        "status": "ok",
        "strace": pc_record.find_strace(),
        "state_mib": state_mib,
        "old_step": simulate.OLD_STEP,
        "new_step": simulate.NEW_STEP,
        "max_torn_per_point": pc_states.DEFAULT_MAX_TORN,
        "models": {simulate.MODEL_KEYS[m.name]: m.label for m in pc_states.MODELS.values()},
        "recipes": recipes,
        "wall_s": time.perf_counter() - start,
    }
