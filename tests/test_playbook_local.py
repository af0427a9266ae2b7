"""The real playbook on localhost, driven by the disklab CLI as a user would run it."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import run_disklab, write_local_inventory
from disklab import stored


def _task_results(reports, run_id: str) -> dict[str, list[tuple[str, bool]]]:
    """task -> [(event, changed)] of one kept `disklab run` (reports/.artifacts/<run_id>/site/job_events)."""
    out: dict[str, list[tuple[str, bool]]] = {}
    for path in (reports / ".artifacts" / run_id / "site" / "job_events").glob("*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event", "").startswith("runner_on_") and event["event"] != "runner_on_start":
            out.setdefault(data.get("task"), []).append(
                (event["event"], bool(data.get("res", {}).get("changed")))
            )
    return out


def _pip_freeze(venv):
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.slow
def test_two_local_runs_write_reports_and_leave_the_venv_unchanged(tmp_path, lab_root):
    workbench = tmp_path / "wb"
    workbench.mkdir()
    reports = tmp_path / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", lab_root, workbench)

    first = run_disklab("run", "-i", str(inv), reports=reports)
    assert first.returncode == 0, first.stdout + first.stderr
    report = (reports / "localhost" / "report.md").read_text()
    df_type = subprocess.run(
        ["df", "--output=fstype", str(workbench)], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    assert f"| filesystem type | **{df_type}** |" in report
    assert "fsync p50 is" in report and "µs" in report
    runs = sorted((reports / "localhost" / "runs").glob("*.json"))
    assert len(runs) == 1
    doc = stored.read(runs[0], "results")  # validates against the schema
    assert doc["facts"]["workbench"]["fstype"] == df_type
    # the audit reused the probe provision kept in the venv's record (nothing changed in between)
    assert doc["facts"]["versions_source"]["from"] == "venv_record", doc["facts"]["versions_source"]
    assert doc["facts"]["versions"]["torch"].startswith("2.13.0")
    runs_table = (reports / "index.md").read_text().split("## Filesystem audit")[0]
    assert runs_table.count(f"| localhost | ok | {df_type} |") == 1

    venv = lab_root / "venv"
    before = (_pip_freeze(venv), (venv / "bin" / "python").lstat().st_mtime_ns)
    # The second run is there for what a repeat changes (the venv, the first run's file, the comparison), not
    # for the experiments: one step is enough for all three, and the first run measured every step.
    # -e as ansible-playbook reads it (issue 40, item 4): NAME=VALUE is the string '60', which the role's
    # argument spec makes the int the host gets
    second = run_disklab(
        "run", "-i", str(inv), "-e", '{"lab_run_steps": ["fsync_bench"]}', "-e", "lab_run_fsync_blocks=60",
        reports=reports,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    runs2 = sorted((reports / "localhost" / "runs").glob("*.json"))
    assert len(runs2) == 2 and runs[0] in runs2
    assert stored.read(runs2[1], "results")["experiments"]["fsync_bench"]["blocks"] == 60
    assert json.loads(runs[0].read_text()) == json.loads(runs2[0].read_text())  # first run untouched
    assert (_pip_freeze(venv), (venv / "bin" / "python").lstat().st_mtime_ns) == before
    # idempotence, as Ansible reports it: the second run's provisioning changed nothing
    second_id = runs2[1].stem
    results = _task_results(reports, second_id)
    assert results["Provision the lab venv with the pinned packages"] == [("runner_on_ok", False)]
    # `disklab run` stores once, itself: the playbook's own store task (for plain ansible-playbook) is skipped
    assert results["Store the fetched results and render the reports on the controller"] == [
        ("runner_on_skipped", False)
    ]
    assert "Since the previous run" in (reports / "localhost" / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"lab_run_profile": "bogus"}, "lab_run_profile"),
        ({"lab_run_fsync_blocks": -3}, "lab_run_fsync_blocks must be an integer > 0, got -3"),
        ({"lab_run_big_write_mib": 0}, "lab_run_big_write_mib must be an integer > 0, got 0"),
        ({"lab_run_steps": ["fsync_bench", "teleport"]}, "lab_run_steps"),
        ({"lab_run_stepz": ["fsync_bench"]}, "unknown setting(s) lab_run_stepz"),
    ],
)
def test_bad_inventory_values_are_refused_before_any_work(tmp_path, override, named):
    root = tmp_path / "root"
    workbench = tmp_path / "wb"
    workbench.mkdir()
    reports = tmp_path / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", root, workbench, **override)
    proc = run_disklab("run", "-i", str(inv), reports=reports)
    assert proc.returncode == 1
    assert named in proc.stdout, proc.stdout + proc.stderr
    assert not (root / "venv").exists()  # nothing was provisioned
    assert not list(reports.glob("*/runs/*.json"))
    failure = json.loads(next(reports.glob("localhost/failures/*.json")).read_text())
    assert named in failure["message"]


@pytest.mark.slow
def test_a_missing_workbench_is_refused_with_its_name(tmp_path):
    root = tmp_path / "root"
    reports = tmp_path / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", root, tmp_path / "missing")
    proc = run_disklab("run", "-i", str(inv), reports=reports)
    assert proc.returncode == 1
    assert "lab_run_workbench" in proc.stdout and "does not exist" in proc.stdout
    assert not (root / "venv").exists()


@pytest.mark.heavy
def test_retry_failed_needs_an_earlier_run_of_the_same_inventory_and_no_limit(tmp_path):
    reports = tmp_path / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb")
    proc = run_disklab("run", "-i", str(inv), "--retry-failed", reports=reports)
    assert proc.returncode == 2 and "no earlier `disklab run -i" in proc.stderr
    proc = run_disklab("run", "-i", str(inv), "--retry-failed", "--limit", "localhost", reports=reports)
    assert proc.returncode == 2 and "leave out --limit" in proc.stderr
    assert not (reports / ".incoming").exists()  # refused before a run id was taken


@pytest.mark.slow
def test_a_run_of_only_the_provision_or_audit_phase_is_ok_and_stores_what_it_made(tmp_path, lab_root):
    """Issue 40, item 6: `--tags provision` and `--tags audit` (site.yml's phase tags) fetch no results; they
    were called failed ("no results file was fetched"), stored a failure record and exited 1, and the
    audit's facts were not kept. Now each is ok, the audit is stored as `disklab audit` stores one, no
    failure is recorded, and no run record either (so `--retry-failed` still goes by the last lab run)."""
    workbench = tmp_path / "wb"
    workbench.mkdir()
    reports = tmp_path / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", lab_root, workbench)

    provision = run_disklab("run", "-i", str(inv), "--tags", "provision", reports=reports)
    assert provision.returncode == 0, provision.stdout + provision.stderr
    provision_id = provision.stdout.rsplit("lab run ", 1)[1].split(":")[0]
    assert provision.stdout.splitlines()[:2] == [
        "localhost: ok",
        f"lab run {provision_id}: its tags fetched no results; nothing to store",
    ]
    results = _task_results(reports, provision_id)
    assert results["Provision the lab venv with the pinned packages"] == [("runner_on_ok", False)]  # it ran
    assert not list(reports.glob("*/*/*.json")) and not (reports / ".runs").exists()

    audit = run_disklab("run", "-i", str(inv), "--tags", "audit", reports=reports)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    audit_id = audit.stdout.rsplit("lab run ", 1)[1].split(":")[0]
    assert f"lab run {audit_id}: its tags fetched no results; stored the audit's facts of localhost" in (
        audit.stdout
    )
    doc = stored.read(reports / "localhost" / "audits" / f"{audit_id}.json", "audit")
    assert doc["run_id"] == audit_id and doc["facts"]["workbench"]["requested_path"] == str(workbench)
    assert "Provision the lab venv with the pinned packages" not in _task_results(reports, audit_id)
    assert not (reports / "localhost" / "failures").exists() and not (reports / "localhost" / "runs").exists()
    assert not (reports / ".incoming").exists()
    index = (reports / "index.md").read_text()
    assert "| localhost | ok |" in index and f"| audit `{audit_id}` |" in index
