"""The "On real filesystems" report section from a stored run of the realfs step (a fixture).

tests/fixtures/realfs/section.json is the step's section as the full profile wrote it on the dev VM
(kernel 6.18, root, ext4/xfs/btrfs), its per-image samples trimmed. The step itself is tested on this
host's kernel in test_realfs.py and test_realfs_simulator.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from disklab import report
from disklab.sections import realfs as section_mod

SRC = Path(__file__).resolve().parent.parent / "src" / "disklab"
SCHEMA = json.loads((SRC / "schema" / "experiments" / "realfs.schema.json").read_text())
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "realfs" / "section.json"


@pytest.fixture
def section() -> dict:
    return json.loads(FIXTURE.read_text())


def _render(s: dict, x: dict) -> str:
    text = report.environment().get_template("sections/realfs.md.j2").render(section=s, view=x, results={})
    return report.tidy_markdown(text)


def test_the_stored_section_matches_the_schema_and_a_wrong_field_is_refused(section):
    jsonschema.validate(section, SCHEMA)
    bad = copy.deepcopy(section)
    bad["cells"][0]["judged"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)
    bad = copy.deepcopy(section)
    del bad["fsync_error"][0]["first_fsync"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_build_counts_the_matrix_from_the_cells(section, tmp_path):
    x = section_mod.build(section, {"experiments": {"realfs": section}}, tmp_path)
    for m in x["confusion"]:
        cells = [
            c
            for c in section["cells"]
            if section_mod._label(c) == m["fs"] and c["verdict"] and c["simulator"]
        ]
        assert sum(sum(row["counts"]) for row in m["rows"]) == len(cells)
        for row in m["rows"]:
            for real, n in zip(section_mod.VERDICTS, row["counts"], strict=True):
                want = [c for c in cells if c["simulator"] == row["simulator"] and c["verdict"] == real]
                assert n == len(want)
    assert len(x["rows"]) == len({c["recipe"] for c in section["cells"]})
    assert len(x["confusion"]) == len(x["columns"]) == len(section["filesystems"]) * len(section["loads"])
    assert [r["fs"] for r in x["fsync_table"]] == [r["fs"] for r in section["fsync_error"]]


def test_the_section_renders_the_matrix_disagreements_and_the_fsync_table(section, tmp_path):
    x = section_mod.build(section, {"experiments": {"realfs": section}}, tmp_path)
    text = _render(section, x)
    assert text.startswith("## On real filesystems")
    assert "| simulator \\ real | safe | rolled_back | unsafe |" in text
    for d in section["disagreements"]:
        where = d["fs"] + (", busy" if d["load"] == "busy" else "")
        assert f"- {where}, {d['recipe']}: the simulator says {d['simulator']}" in text
    for r in section["fsync_error"]:
        assert f"| {r['fs']} | {r['first_fsync']} | {r['second_fsync']} |" in text
    assert "A retry loop would have believed" in text
    for line in text.splitlines():  # every table row is its own line
        assert line.count("|---|") <= 1 or line.startswith("|---|")


def test_a_simulator_bug_is_named_in_the_report(section, tmp_path):
    s = copy.deepcopy(section)
    s["disagreements"].append({
        "fs": "xfs", "load": "quiet", "recipe": "atomic", "simulator": "safe", "real": "unsafe",
        "kind": "harsher",
        "mechanism": None, "simulator_bug": True,
    })  # fmt: skip
    text = _render(s, section_mod.build(s, {"experiments": {"realfs": s}}, tmp_path))
    assert "SIMULATOR BUG: atomic on xfs" in text


def test_a_host_where_it_cannot_run_says_why(tmp_path):
    s = {"status": "not_run", "reason": "lab_run_realfs is off (the default)"}
    jsonschema.validate(s, SCHEMA)
    x = section_mod.build(s, {}, tmp_path)
    want = "## On real filesystems\n\nNot run on this host: lab_run_realfs is off (the default)."
    assert _render(s, x).strip() == want
