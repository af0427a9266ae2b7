"""Flags in three states, end to end: an unknown flag is listed as unknown with its reason, never as set.

The DGX Spark facts come from recorded command output (tests/fixtures/audit/spark), as does the
Linux host whose block device cannot be resolved (no /sys under the probe's root); neither path has
been run on real hardware here. The tmpfs host and the missing workbench are audited for real.
"""

from __future__ import annotations

import os
import tempfile

from disklab import report, stored
from disklab_host.audit import collect as audit
from test_audit import Recorded, fix, spark_probe
from test_report import _doc

RUN_ID = "20261129T100000Z"
NOT_RUN = {"fsync_bench": {"status": "not_run", "reason": "test: no experiment", "step_wall_s": 0}}


def _store_audit(reports, host: str, facts: dict) -> None:
    doc = {"run_id": RUN_ID, "host": host, "facts": facts}
    stored.write(reports / host / "audits" / f"{RUN_ID}.json", "audit", doc)


def _store_run(reports, host: str, facts: dict) -> None:
    stored.write(reports / host / "runs" / f"{RUN_ID}.json", "results", _doc(host, RUN_ID, facts, NOT_RUN))


def _tmpfs_facts() -> dict:
    wb = tempfile.mkdtemp(dir="/dev/shm", prefix="disklab-flags-")
    try:
        return audit.collect_all(wb, None)
    finally:
        os.rmdir(wb)


def _section(text: str, heading: str) -> str:
    """The lines of one ``## heading`` section of a rendered markdown file ("" when absent)."""
    if f"\n## {heading}\n" not in text:
        return ""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_spark_audited_before_its_venv_is_not_flagged_cpu_only(tmp_path):
    spark = audit.collect_all("/home/lab/workbench", None, probe=spark_probe(tmp_path))
    assert spark["gpu"]["cpu_only_torch_on_gpu_host"]["state"] == "unknown"
    reports = tmp_path / "reports"
    _store_audit(reports, "spark", spark)
    _store_audit(reports, "ramhost", _tmpfs_facts())  # a host with a flag that is set, for contrast
    written, errors = report.render_all(reports)
    assert errors == []
    index = (reports / "index.md").read_text()
    flags, unknown = _section(index, "Flags"), _section(index, "Flags not known")
    assert "- **ramhost: tmpfs.** tmpfs lives in RAM" in flags  # set flags still render
    assert "spark" not in flags
    assert (
        "- **spark: cpu only torch on gpu host** unknown: GPU present but torch.cuda.is_available() "
        "unknown: no lab venv on this host yet." in unknown
    )
    text = (reports / "spark" / "report.md").read_text()
    assert "CPU-only torch on a GPU host" not in text and "Flag:" not in text
    assert (
        "> **Not known whether torch is CPU-only on a GPU host** (not flagged, not cleared): GPU present "
        "but torch.cuda.is_available() unknown: no lab venv on this host yet." in text
    )
    assert "Flag: tmpfs." in (reports / "ramhost" / "report.md").read_text()


def test_a_host_whose_device_cannot_be_resolved_is_not_flagged_loop(tmp_path):
    run = Recorded({"df": fix("linux", "df_T.txt"), "findmnt": fix("linux", "findmnt.json")})
    probe = audit.Probe(system="Linux", root=tmp_path / "no-sys", run=run, sysconf=lambda name: 4096)
    facts = audit.collect_all("/home/lab/workbench", None, probe=probe)
    reason = "block device: ValueError: no /sys/class/block entry for mount source '/dev/nvme0n1p2'"
    assert facts["workbench"]["device"] == {"unavailable": reason}
    assert facts["workbench"]["flags"]["loop_device"]["state"] == "unknown"
    reports = tmp_path / "reports"
    _store_run(reports, "lostdev", facts)
    report.render_all(reports)
    index = (reports / "index.md").read_text()
    assert _section(index, "Flags") == ""  # nothing is set on this host
    assert f"- **lostdev: loop device** unknown: {reason}." in _section(index, "Flags not known")
    text = (reports / "lostdev" / "report.md").read_text()
    assert "Flag: loop device" not in text and "Flag:" not in text
    assert (
        f"> **Not known whether the workbench is on a loop device** (not flagged, not cleared): {reason}."
        in text
    )


def test_a_missing_workbench_shows_its_parents_filesystem_and_says_so(tmp_path):
    wb = tmp_path / "not" / "yet"
    facts = audit.collect_all(str(wb), None)
    reports = tmp_path / "reports"
    _store_audit(reports, "freshhost", facts)
    report.render_all(reports)
    fstype = facts["workbench"]["fstype"]
    index = (reports / "index.md").read_text()
    rows = [line for line in index.splitlines() if line.startswith("| freshhost |")]
    assert len(rows) == 2  # the runs table and the filesystem audit table
    for row in rows:
        assert f"| {fstype} (of the parent `{tmp_path}`: the workbench does not exist yet) |" in row
    assert f"- **freshhost:** the workbench {wb} does not exist yet, so the filesystem" in index
    text = (reports / "freshhost" / "report.md").read_text()
    assert f"The workbench is `{wb}`" in text
    assert (
        "> **The filesystem shown is its parent's: the workbench does not exist yet.** "
        f"The workbench {wb} does not exist yet, so the filesystem, mount and device shown are those of its "
        f"nearest existing parent directory, {tmp_path}, where it would be created." in text
    )
    assert f"| filesystem type | **{fstype}** (of the parent `{tmp_path}`) |" in text
    assert f"| audited directory | `{tmp_path}` (the nearest existing parent" in text


def test_an_existing_workbench_gets_no_parent_note(tmp_path):
    facts = audit.collect_all(str(tmp_path), None)
    reports = tmp_path / "reports"
    _store_audit(reports, "h", facts)
    report.render_all(reports)
    assert "does not exist yet" not in (reports / "index.md").read_text()
    assert "does not exist yet" not in (reports / "h" / "report.md").read_text()
