"""The savers step for real, at the tests' size: torch.distributed.checkpoint with two gloo ranks of torch's
own launcher and transformers' save_pretrained, each killed at exact calls and over every crash state, into
a fresh directory and over its earlier checkpoint; the section's schema and page; disklab powercut --saver.

One run of the step is shared by the module (about three minutes on two cores).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest

from disklab import powercut_cli, report
from disklab.sections import crash as crash_section
from disklab.sections import powercut as powercut_section
from disklab.sections import savers as savers_section
from disklab_host.powercut import record as pc_record
from disklab_host.savers import registry
from disklab_host.steps import savers as savers_step

REPO = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.skipif(pc_record.find_strace() is None, reason="strace is not installed"),
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
    ),
]


@pytest.fixture(scope="module")
def section(tmp_path_factory) -> dict:
    cfg = {
        "settings": {"savers": ["dcp:2", "transformers"]},
        "sizes": {"savers_state_mib": 1},
        "system": "Linux",
    }
    return savers_step.run(cfg, tmp_path_factory.mktemp("savers"))


def _saver(section: dict, label: str) -> dict:
    return next(s for s in section["savers"] if s["saver"] == label)


def test_dcp_over_its_own_directory_can_leave_a_checkpoint_that_loads_mixed(section):
    """DCP rewrites each rank's shard in place while the old .metadata stays: a power cut can leave one
    rank's new rows beside the other's old ones, and dcp.load takes them as one checkpoint."""
    dcp = _saver(section, "dcp:2")
    assert dcp["status"] == "ok" and dcp["ranks"] == 2 and dcp["versions"]["torch"]
    reuse = dcp["cases"]["reuse"]
    cut = reuse["powercut"]["models"]["power_cut"]
    assert cut["verdict"] == "unsafe" and cut["counts"]["mixed"] > 0
    assert "part new, part earlier" in cut["first_mixed"]["found"]
    kinds = {m["kind"] for m in reuse["powercut"]["mechanisms"]}
    assert {"in_place_rewrite", "remove_before_rename", "no_dir_fsync"} <= kinds
    # every rank's calls are in the one recording: both shards were written
    assert {"ckpt/__0_0.distcp", "ckpt/__1_0.distcp", "ckpt/.metadata"} <= set(
        reuse["powercut"]["recording"]["files"]
    )
    # a real SIGKILL between the removal of .metadata and the rename leaves no checkpoint at all
    kills = reuse["kill"]["kills"]
    unlink = next(k for k in kills if k["call"].startswith("unlink(ckpt/.metadata)"))
    assert unlink["stopped"] and unlink["exact"] and unlink["outcome"] == "missing"
    assert reuse["kill"]["verdict"] == "unsafe" and dcp["verdicts"]["kill"] == "unsafe"
    assert "without removing it first" in dcp["suggestion"]
    assert "pickle.load" in dcp["unpickles"]


def test_dcp_into_a_fresh_directory_keeps_the_earlier_checkpoint(section):
    fresh = _saver(section, "dcp:2")["cases"]["fresh"]
    for model in fresh["powercut"]["models"].values():
        assert model["earlier_lost"] == 0 and model["counts"]["mixed"] == 0
    assert fresh["powercut"]["models"]["process_kill"]["verdict"] == "safe"
    assert fresh["kill"]["earlier_lost"] == 0 and fresh["kill"]["verdict"] == "safe"
    assert any(
        k["outcome"] == "old_ok" for k in fresh["kill"]["kills"]
    )  # killed before the new one was whole


def test_transformers_save_pretrained_fsyncs_nothing(section):
    hf = _saver(section, "transformers")
    assert hf["status"] == "ok" and hf["versions"]["transformers"] == "5.25.0"
    fresh, reuse = hf["cases"]["fresh"], hf["cases"]["reuse"]
    texts = [m["text"] for m in fresh["powercut"]["mechanisms"]]
    assert "new/model.safetensors is never fsynced: a power cut can lose its data" in texts
    assert fresh["powercut"]["models"]["process_kill"]["verdict"] == "safe"
    assert fresh["powercut"]["models"]["power_cut"]["verdict"] in ("unsafe", "rolled_back")
    # over its own directory, config.json is cut to nothing before it is written again: a kill there breaks it
    pk = reuse["powercut"]["models"]["process_kill"]
    assert pk["verdict"] == "unsafe" and pk["first_unsafe"]["call"].startswith(
        "openat(AT_FDCWD, 'ckpt/config.json'"
    )
    # the kills at the safetensors temp file leave the earlier checkpoint; the one at the rename, the new one
    outcomes = [k["outcome"] for k in reuse["kill"]["kills"]]
    assert outcomes[-1] == "new_ok" and "old_ok" in outcomes


def test_the_section_matches_its_schema_and_renders(section, tmp_path):
    schema = json.loads((REPO / "src/disklab/schema/experiments/savers.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(section)
    results = {"experiments": {"savers": section}}
    x = savers_section.build(section, results, tmp_path)
    text = (
        report.environment()
        .get_template("sections/savers.md.j2")
        .render(section=section, view=x, results=results)
    )
    assert "## The savers you run: kill and power cut" in text
    assert "| dcp:2 | over the earlier checkpoint |" in text and "mixed" in text
    assert "`dcp.save(state_dict, checkpoint_id=DIR)`" in text
    assert "ckpt/.metadata is removed before ckpt/.metadata.tmp is renamed over it" in text
    assert "simulated, not real" in text
    summary = savers_section.summary(section)
    assert summary.startswith(
        "dcp:2 can lose or mix the checkpoint on a kill and can lose or mix the checkpoint on"
    )
    # the power-cut section of the same run gives each saver a row beside the recipes
    rows = powercut_section.saver_rows(results)
    assert [r["saver"] for r in rows] == ["dcp:2", "transformers"] and rows[0]["power_cut"] == "unsafe"
    soonest = rows[0]["mechanism"]  # the mechanism that breaks it soonest
    assert soonest.startswith("ckpt/.metadata is removed before")
    # and the crash section, its real kills
    kills = crash_section.saver_kills(results)
    assert [(r["saver"], r["case"]) for r in kills][:2] == [
        ("dcp:2", "fresh directory"), ("dcp:2", "over the earlier checkpoint")]  # fmt: skip
    assert "left a checkpoint that loads right" in kills[1]["kill"]


def test_a_saver_this_python_cannot_import_is_not_run_with_the_reason():
    ghost = registry.Spec(
        registry.Saver("ghost", "a saver", ("ghost==1.0",), ("disklab_no_such_module",), "ghost.save(DIR)"),
        None,
    )
    why = savers_step.unavailable(ghost, {})
    assert "disklab_no_such_module is not installed in the lab venv" in why and "ghost==1.0" in why
    assert savers_step.unavailable(
        ghost, {"ghost": {"reason": "pip could not install ghost==1.0: no wheel"}}
    ) == ("pip could not install ghost==1.0: no wheel")
    off = savers_step.run({"settings": {}, "sizes": {"savers_state_mib": 1}}, Path("/nonexistent"))
    assert off["status"] == "not_run" and "lab_run_savers is empty" in off["reason"]


def test_disklab_powercut_takes_a_framework_saver_by_name(tmp_path, capfd):
    out = tmp_path / "dcp.json"
    rc = powercut_cli.main(["--saver", "dcp:2", "--state-mib", "1", "--json", str(out)])
    said = capfd.readouterr()
    assert rc == 1, said.err
    assert "dcp:2 saving into the directory of the earlier checkpoint, over it" in said.out
    assert "first mixed state (power-cut)" in said.out
    assert "verdict under power-cut: unsafe" in said.out
    assert "to fix:" in said.out
    saved = json.loads(out.read_text())
    assert saved["cases"]["reuse"]["models"]["power_cut"]["counts"]["mixed"] > 0
