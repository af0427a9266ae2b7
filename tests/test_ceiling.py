"""The ceiling step on a real file: cold after eviction (proven by residency and the device's reads), warm."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from disklab.sections import ceiling as section_mod
from disklab_host.steps import ceiling

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "src/disklab/schema/experiments/ceiling.schema.json").read_text())


def test_ceiling_reads_cold_and_warm_and_leaves_nothing(workbench):
    cfg = {"sizes": {"ceiling_mib": 8}, "system": "Linux", "become_allowed": False}
    section = ceiling.run(cfg, workbench / "ceiling")
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(json.dumps(section)))
    assert section["file_bytes"] == 8 << 20 and len(section["cold_runs"]) == ceiling.REPEATS
    for run in section["cold_runs"]:
        assert run["eviction_method"] == "fadvise_dontneed" and run["before"]["fraction"] <= 0.01
        assert run["bytes"] == 8 << 20
        if run["device_read_bytes"] is not None:  # a workbench with a block device
            assert run["device_read_bytes"] >= run["bytes"] and run["proven"]
    for run in section["warm_runs"]:
        assert run["verified"] and run["before"]["fraction"] >= 0.99
        assert run["io"]["process"]["read_bytes"] == 0  # served by the page cache
    assert section["cold_mib_s"]["n"] == ceiling.REPEATS and section["warm_mib_s"]["n"] == ceiling.REPEATS
    assert [p.name for p in (workbench / "ceiling").iterdir()] == ["cold_copies"]
    x = section_mod.build(section, {"experiments": {"ceiling": section}, "facts": {}}, workbench)
    assert x["ok"] and x["cold"]["median"] == section["cold_mib_s"]["median"] and len(x["runs"]) == 6


def test_a_bad_size_is_refused_naming_the_setting(workbench):
    with pytest.raises(ValueError, match="lab_run_ceiling_mib"):
        ceiling.run({"sizes": {"ceiling_mib": 0}, "system": "Linux"}, workbench)


def test_no_proven_cold_run_leaves_the_cold_ceiling_unavailable():
    runs = [{"mib_s": 900.0, "proven": False}]
    assert "no cold run of 1" in ceiling._ceiling(runs, "proven", "cold")["unavailable"]
