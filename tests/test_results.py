"""The results format: one schema_version on both sides, refusal of newer, step-wise upgrades."""

from __future__ import annotations

import json

import pytest

from disklab import results
from disklab_host.audit import collect as audit
from disklab_host.common.facts import RESULTS_SCHEMA_VERSION

FACTS = audit.collect_all("/tmp", None)


def _minimal(version=results.SCHEMA_VERSION) -> dict:
    return {
        "schema_version": version,
        "run_id": "20261129T100000Z",
        "host": "h",
        "profile": "quick",
        "sizes": {"fsync_blocks": 10},
        "started_utc": "x",
        "finished_utc": "y",
        "facts": FACTS,
        "experiments": {"fsync_bench": {"status": "not_run", "reason": "test", "step_wall_s": 0}},
    }


def test_host_and_controller_agree_on_the_schema_version():
    assert RESULTS_SCHEMA_VERSION == results.SCHEMA_VERSION


def test_a_newer_schema_version_is_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_minimal(results.SCHEMA_VERSION + 1)))
    with pytest.raises(results.ResultsError, match="newer than this disklab reads"):
        results.load(path)


def test_older_versions_are_upgraded_one_step_at_a_time(monkeypatch):
    seen = []

    def from_0(doc):
        seen.append(doc["schema_version"])
        doc["sizes"] = doc.pop("sizes_v0")

    monkeypatch.setitem(results.MIGRATIONS, results.SCHEMA_VERSION - 1, from_0)
    old = _minimal(results.SCHEMA_VERSION - 1)
    old["sizes_v0"] = old.pop("sizes")
    doc = results.upgrade(old)
    assert seen == [results.SCHEMA_VERSION - 1]
    assert doc["schema_version"] == results.SCHEMA_VERSION and doc["sizes"] == {"fsync_blocks": 10}


def test_an_older_version_without_a_migration_is_refused():
    with pytest.raises(results.ResultsError, match="no migration from schema_version 0"):
        results.upgrade(_minimal(0))


def test_validation_names_the_path_of_the_violation():
    doc = _minimal()
    doc["experiments"]["fsync_bench"] = {"status": "failed", "step_wall_s": 1}
    with pytest.raises(results.ResultsError, match="experiments.fsync_bench"):
        results.validate(doc)
    results.validate(_minimal())  # the untouched document is valid
    doc = _minimal()
    doc["profile"] = "medium"
    with pytest.raises(results.ResultsError, match="at profile"):
        results.validate(doc)
