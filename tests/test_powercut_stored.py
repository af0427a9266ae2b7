"""Results version 3: power-cut recordings from version 2 get the fields for copies and unplaced calls."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from disklab import stored
from disklab_host.common.formats import VERSIONS

SCHEMA = Path(__file__).resolve().parent.parent / "src/disklab/schema/experiments/powercut.schema.json"


def _v2_recording() -> dict:
    return {
        "calls": 2, "syscall_counts": {"openat": 1, "writev": 1}, "written_bytes": 3, "returned": True,
        "replay_matches_real": True, "record_wall_s": 1.0, "trace_bytes": 10, "writes_after_last_fsync": 0,
        "call_texts": ["openat(AT_FDCWD, 'ckpt.pt', O_WRONLY|O_CREAT|O_TRUNC) = 3", "writev(3, ...) = 3"],
    }  # fmt: skip


def test_a_version_2_powercut_recording_is_upgraded_to_the_current_version():
    doc = {
        "file_kind": "results",
        "schema_version": 2,
        "experiments": {"powercut": {"status": "ok", "recipes": [{"recording": _v2_recording()}]}},
    }
    stored.upgrade(doc, "results")
    rec = doc["experiments"]["powercut"]["recipes"][0]["recording"]
    assert doc["schema_version"] == VERSIONS["results"]
    assert (rec["unplaced_calls"], rec["judged_on"], rec["outside_files"], rec["replay_differs"]) == (
        [], "every recorded call", [], [],
    )  # fmt: skip
    subschema = json.loads(SCHEMA.read_text())["$defs"]["recipe"]["properties"]["recording"]
    jsonschema.validate(rec, subschema)
    del rec["judged_on"]
    with pytest.raises(jsonschema.ValidationError, match="judged_on"):
        jsonschema.validate(rec, subschema)


def test_results_without_a_powercut_section_are_upgraded_unchanged():
    doc = {"file_kind": "results", "schema_version": 2, "experiments": {"fsync_bench": {"status": "not_run"}}}
    stored.upgrade(doc, "results")
    assert doc["experiments"] == {"fsync_bench": {"status": "not_run"}}
    assert doc["schema_version"] == VERSIONS["results"]
