"""Real crash images against the power-cut simulator, on ext4, xfs and btrfs (a small version).

Holds the rule of issue 15: a recipe the simulator calls safe under power-cut must not lose the
checkpoint on any real crash image. A recipe that breaks it is a bug in the simulator's model; none
was found on kernel 6.18 (see docs/realfs.md for the matrix measured there).
"""

from __future__ import annotations

import os

import pytest

from disklab_host.powercut import recipes as pc_recipes
from disklab_host.realfs import crashlab
from disklab_host.realfs.mounts import Resources, missing_tools

FILESYSTEMS = ["ext4", "xfs", "btrfs"]


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (loop devices, mounts, FUSE)"
    if not os.path.exists("/dev/fuse") or not os.path.exists("/dev/loop-control"):
        return "needs /dev/fuse and loop devices"
    missing = missing_tools(FILESYSTEMS)
    return f"missing {missing} (apt-get install fuse3 xfsprogs btrfs-progs)" if missing else None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


@pytest.fixture(scope="module")
def atomic_cells(tmp_path_factory) -> dict:
    """The full atomic save (the simulator's verdict: safe) recorded and crashed on each filesystem."""
    work = tmp_path_factory.mktemp("realfs-sim")
    recipe = pc_recipes.recipe_named("atomic")
    assert recipe.expects["power-cut"] == "safe"
    cells = {}
    with Resources() as res:
        saver = crashlab.SaveProcess("recipe:atomic", 4, res, work)
        for fs in FILESYSTEMS:
            cells[fs] = crashlab.run_save(
                fs, "recipe:atomic", "torch", work / fs, 4, res, saver, subsets=1, max_states=10
            )
        # and beside a neighbour that fsyncs in a loop (commits in the middle of the save)
        cells["ext4, busy"] = crashlab.run_save(
            "ext4", "recipe:atomic", "torch", work / "busy", 4, res, saver, subsets=1, max_states=10,
            neighbour=True,
        )  # fmt: skip
    assert res.errors == []
    return cells


@pytest.mark.parametrize("fs", [*FILESYSTEMS, "ext4, busy"])
@pytest.mark.heavy
def test_a_save_the_simulator_calls_safe_never_loses_the_checkpoint_on_a_real_image(atomic_cells, fs):
    cell = atomic_cells[fs]
    assert cell["recording"]["loop_direct_io"]
    assert cell["flushes"] > 0 and cell["writes"] > 0
    assert cell["final_state_outcome"] == "new_ok"  # the save works when nothing crashes
    assert cell["counts"]["corrupt"] == cell["counts"]["missing"] == 0, cell["first_unsafe"]
    assert cell["verdict"] == "safe"
    # it was a real test: some image held the old checkpoint, some the new one
    assert cell["counts"]["old_ok"] > 0 and cell["counts"]["new_ok"] > 0
    if fs.endswith("busy"):
        assert cell["recording"]["neighbour_error"] is None
        assert cell["recording"]["neighbour_fsyncs"] >= 1
