"""A run is owned until it is stored: a killed controller takes its ansible-playbook with it, a live run is
never taken over, and what a dead run left in reports/.incoming is stored or named with the command that
stores it (disklab.ownership)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_disklab, write_local_inventory
from disklab import ownership, stored
from disklab_host import lab
from disklab_host.audit import collect as audit
from disklab_host.common.lock import holder_of


def _stage(reports: Path, run_id: str, pids: list[int], kind: str = "runs") -> Path:
    incoming = reports / ".incoming" / run_id
    incoming.mkdir(parents=True)
    ownership.write_owner(incoming, run_id, kind, reports / "inv.yml", pids)
    return incoming


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.heavy
def test_a_dead_runs_fetched_results_are_stored_on_the_next_start(tmp_path):
    """An audit killed between its fetch and its store: the next start stores the fetched facts."""
    reports = tmp_path / "reports"
    incoming = _stage(reports, "20261201T000000Z", [_dead_pid()], kind="audits")
    facts = audit.collect_all(str(tmp_path), sys.executable)
    (incoming / "localhost.json").write_text(json.dumps(facts))
    (incoming / "disklab_host.pyz").write_bytes(b"packed")
    inv = write_local_inventory(tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb",
                                lab_run_workbench_create=True)  # fmt: skip
    proc = run_disklab("audit", "-i", str(inv), reports=reports)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "disklab: run 20261201T000000Z (started " in proc.stderr
        and "stopped before it was stored; stored what it had fetched: localhost ok" in proc.stderr
    ), proc.stderr
    assert (reports / "localhost" / "audits" / "20261201T000000Z.json").is_file()
    record = stored.read(reports / ".runs" / "20261201T000000Z.json", "run_record")
    assert record["hosts"] == {"localhost": "ok"}
    assert not (reports / ".incoming").exists()  # nothing left behind, the audit's own staging included


@pytest.mark.heavy
def test_a_dead_run_with_nothing_fetched_names_the_command_that_fetches_it(tmp_path):
    reports = tmp_path / "reports"
    _stage(reports, "20261201T000000Z", [_dead_pid()])
    inv = write_local_inventory(tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb",
                                lab_run_workbench_create=True)  # fmt: skip
    proc = run_disklab("audit", "-i", str(inv), reports=reports)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "with nothing fetched; if its lab finished on the hosts, fetch and store it with: "
        f"disklab run -i {reports / 'inv.yml'} --fetch 20261201T000000Z"
    ) in proc.stderr
    assert not (reports / ".incoming").exists()


@pytest.mark.heavy
def test_a_live_run_is_never_taken_over(tmp_path):
    """The controller's lock is free (its holder died) but the run's ansible-playbook lives on: refused."""
    reports = tmp_path / "reports"
    keeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _stage(reports, "20261201T000000Z", [_dead_pid(), keeper.pid])
        inv = write_local_inventory(tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb")
        proc = run_disklab("audit", "-i", str(inv), reports=reports)
        assert proc.returncode == 2
        assert (
            "refused: run 20261201T000000Z is still running: " in proc.stderr
            and str(keeper.pid) in proc.stderr
        )
        assert (reports / ".incoming" / "20261201T000000Z").is_dir()  # untouched
        # plain ansible-playbook's start is refused the same way
        begin = [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "playbook-begin"]
        proc = subprocess.run(begin, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "is still running" in proc.stderr
    finally:
        keeper.kill()
        keeper.wait()
    assert ownership.live_runs(reports) == []  # the same pid, ended: the run is dead now


@pytest.mark.slow
def test_a_killed_controller_takes_its_ansible_playbook_and_the_finished_lab_is_fetched_later(
    tmp_path, lab_root
):
    workbench = tmp_path / "wb"
    workbench.mkdir()
    reports = tmp_path / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", lab_root, workbench,
                                lab_run_steps=["fsync_bench"], lab_run_fsync_blocks=1500)  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "run", "-i", str(inv)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lock_path = lab_root / lab.LOCK_NAME
    deadline = time.monotonic() + 600
    while (holder_of(lock_path) or {}).get("step") != "fsync_bench":
        assert time.monotonic() < deadline and proc.poll() is None, "the lab never started"
        time.sleep(0.2)
    (owner_file,) = reports.glob(".incoming/*/owner.record")
    run_id = owner_file.parent.name
    owners = json.loads(owner_file.read_text())["pids"]
    playbook = [o["pid"] for o in owners if o["name"] == "ansible-playbook"]
    assert owners[0]["pid"] == proc.pid and len(playbook) == 1, owners
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while ownership.alive({"pids": [o for o in owners if o["name"] == "ansible-playbook"]}):
        assert time.monotonic() < deadline, "ansible-playbook outlived its killed controller"
        time.sleep(0.2)
    while holder_of(lock_path) is not None:  # the host's lab runner (detached) finishes its step
        assert time.monotonic() < deadline + 300, "the lab runner never finished"
        time.sleep(0.5)
    # the next start names the command; that command stores the killed run's finished results
    again = run_disklab("run", "-i", str(inv), "--tags", "never", reports=reports)
    command = f"disklab run -i {inv.resolve()} --fetch {run_id}"
    assert command in again.stderr, again.stdout + again.stderr
    fetched = run_disklab(*command.split()[1:], reports=reports)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    doc = stored.read(reports / "localhost" / "runs" / f"{run_id}.json", "results")
    assert doc["experiments"]["fsync_bench"]["status"] == "ok"
    assert not (reports / ".incoming").exists()
