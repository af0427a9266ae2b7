"""Lab step ``powercut``: every shipped save recipe under the process-kill and power-cut models.

Records the seven recipes (disklab_host.powercut.recipes) on a state dict of
``sizes["powercut_state_mib"]`` MiB and classifies every crash state
(disklab_host.powercut.states). It needs Linux and strace; elsewhere it is
not run, with the reason.

The recipes are recorded side by side, one per CPU this process may use (at most
:data:`MAX_WORKERS`): each recording is its own Python, torch and strace, and
nothing in it is a timing the report compares (``save_s`` is only a bound's
measure). A failure or an interrupt stops the recordings still running.
"""

from __future__ import annotations

import concurrent.futures
import os
import platform
import shutil
import threading
import time
from pathlib import Path

from ..common.facts import not_run
from ..powercut import recipes as pc_recipes
from ..powercut import record as pc_record
from ..powercut import simulate
from ..powercut import states as pc_states

MAX_WORKERS = 4  # each worker is a Python with torch (about 300 MiB) under strace


def workers(cpus: int | None = None) -> int:
    """How many recipes are recorded at once: one per usable CPU, 1 to MAX_WORKERS."""
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    return max(1, min(MAX_WORKERS, cpus, len(pc_recipes.RECIPES)))


def _one(recipe: pc_recipes.Recipe, workdir: Path, state_mib: int, stop: threading.Event) -> dict:
    """One recipe's recording, verdicts and comparison with the lesson; its files are removed."""
    try:
        result = simulate.analyse(
            f"recipe:{recipe.name}", recipe.fmt, workdir / recipe.name, state_mib, stop=stop
        )
    finally:
        shutil.rmtree(workdir / recipe.name, ignore_errors=True)
    entry = {"number": recipe.number, "name": recipe.name, "title": recipe.title, **result}
    return {**entry, **simulate.compare_with_lesson(recipe, result)}


def run(cfg: dict, workdir: Path) -> dict:
    """Lab step: every shipped recipe under both models. Returns the ``powercut`` section."""
    if cfg.get("system", platform.system()) != "Linux":
        return not_run("not available (no strace): the recorder needs Linux strace")
    strace = pc_record.find_strace()
    if strace is None:
        return not_run("not available (no strace): strace is not installed on this host")
    state_mib = cfg["sizes"]["powercut_state_mib"]
    start = time.perf_counter()
    n, stop = workers(), threading.Event()
    with concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="powercut") as pool:
        futures = [pool.submit(_one, r, workdir, state_mib, stop) for r in pc_recipes.RECIPES]
        try:
            recipes = [f.result() for f in futures]
        except BaseException:
            stop.set()  # the running recordings kill their processes; the queued ones never start
            for f in futures:
                f.cancel()
            raise
    return {
        "status": "ok",
        "strace": strace,
        "strace_seccomp_bpf": pc_record.takes_seccomp_bpf(strace),
        "workers": n,
        "state_mib": state_mib,
        "old_step": simulate.OLD_STEP,
        "new_step": simulate.NEW_STEP,
        "max_torn_per_point": pc_states.DEFAULT_MAX_TORN,
        "models": {simulate.MODEL_KEYS[m.name]: m.label for m in pc_states.MODELS.values()},
        "recipes": recipes,
        "wall_s": time.perf_counter() - start,
    }
