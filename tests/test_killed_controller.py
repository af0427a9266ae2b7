"""A run is owned until it is stored: a killed controller takes its ansible-playbook with it, a live run is
never taken over, and what a dead run left in reports/.incoming is stored or named with the command that
stores it (disklab.ownership)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_disklab, write_local_inventory
from disklab import orchestrate, ownership, processes, stored
from disklab.usage import UsageError
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
    tmp = tmp_path / "tmp"  # the controller's temp directory, to see what it leaves there
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "run", "-i", str(inv)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
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
    # ansible-runner's private directory (the extra vars) is left in the run's staging directory, not in /tmp
    assert not list(tmp.glob("disklab-runner-*")) and len(list(owner_file.parent.glob(".runner-*"))) == 1
    # the next start names the command; that command stores the killed run's finished results
    again = run_disklab("run", "-i", str(inv), "--tags", "never", reports=reports)
    command = f"disklab run -i {inv.resolve()} --fetch {run_id}"
    assert command in again.stderr, again.stdout + again.stderr
    fetched = run_disklab(*command.split()[1:], reports=reports)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    doc = stored.read(reports / "localhost" / "runs" / f"{run_id}.json", "results")
    assert doc["experiments"]["fsync_bench"]["status"] == "ok"
    assert not (reports / ".incoming").exists()


# A stand-in for ansible-playbook's processes, under its name: the main process starts a worker (as Ansible
# forks one per task), the worker starts the task's command, which prints its pid and waits.
FAKE_PLAYBOOK = """\
import subprocess, sys
if sys.argv[1:] == ["main"]:
    subprocess.run([sys.executable, __file__, "worker"])
else:
    subprocess.run([sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(120)"])
"""


def _hide_proc(monkeypatch) -> None:
    """No /proc for disklab's own reads, as on macOS (psutil, the platform's calls, still answers)."""
    for name in ("read_bytes", "read_text"):
        real = getattr(Path, name)

        def read(self, *a, _real=real, **k):
            if str(self).startswith("/proc/"):
                raise FileNotFoundError(2, "No such file or directory (no /proc, as on macOS)", str(self))
            return _real(self, *a, **k)

        monkeypatch.setattr(Path, name, read)


@pytest.mark.heavy
def test_with_no_proc_a_plain_playbook_owns_its_run_and_a_second_start_is_refused(tmp_path, monkeypatch):
    """Before: without /proc, a plain ansible-playbook run recorded no owner, so the next start took the live
    run for dead and stored and removed its staging directory."""
    _hide_proc(monkeypatch)
    script = tmp_path / "bin" / "ansible-playbook"
    script.parent.mkdir()
    script.write_text(FAKE_PLAYBOOK)
    main = subprocess.Popen([sys.executable, str(script), "main"], stdout=subprocess.PIPE, text=True)
    task = worker = None
    try:
        task = int(main.stdout.readline())  # the task's command, as `disklab playbook-begin` runs
        worker = processes.FACTS.parent(task)
        assert ownership.ancestor_playbook(start=worker) == main.pid
        reports = tmp_path / "reports"
        incoming = _stage(reports, "20261201T000000Z", [ownership.ancestor_playbook(start=worker)])
        with pytest.raises(
            UsageError,
            match=rf"run 20261201T000000Z is still running: ansible-playbook \(pid {main.pid}\)",
        ):
            orchestrate._refuse_a_live_run(reports)
        assert ownership.leftovers(reports) == [] and incoming.is_dir()
    finally:
        for pid in (task, worker):
            if pid:
                os.kill(pid, signal.SIGKILL)
        main.kill()
        main.wait()
    assert ownership.live_runs(reports) == []  # ended: the next start stores what it fetched
    assert [left.run_id for left in ownership.leftovers(reports)] == ["20261201T000000Z"]


class MacFacts(processes.Facts):
    """What psutil says on macOS, from a table: a Python script's process is named by its interpreter
    (``Python``), so the program is read from its arguments; another user's process cannot be read
    (AccessDenied: no program, no parent), though it exists. Only for the platform we cannot run here."""

    def __init__(self, table: dict[int, dict]):
        self.table = table

    def program(self, pid):
        entry = self.table.get(pid)
        return processes.program_of(entry["argv"]) if entry and entry.get("argv") else None

    def parent(self, pid):
        return (self.table.get(pid) or {}).get("ppid")

    def started(self, pid):
        return (self.table.get(pid) or {}).get("started")

    def running(self, pid, started=None):
        entry = self.table.get(pid)
        if entry is None or entry.get("zombie"):
            return False
        return started is None or entry.get("started") is None or abs(entry["started"] - started) < 0.05


def test_on_macos_a_killed_controllers_ansible_playbook_keeps_the_run_and_the_next_start_names_it(
    tmp_path, monkeypatch
):
    """macOS has no parent-death signal: the killed controller's ansible-playbook runs on, with its worker.
    Its pid is in owner.record, so the next start is refused naming it; when it ends, the run is found."""
    playbook = [
        "/opt/homebrew/bin/python3.12",
        "/Users/u/venv/bin/ansible-playbook",
        "-i",
        "inv.yml",
        "site.yml",
    ]
    table = {
        100: {"argv": ["/Users/u/venv/bin/python3.12", "/Users/u/venv/bin/disklab", "run"], "ppid": 90,
              "started": 1000.0},
        200: {"argv": playbook, "ppid": 100, "started": 1001.0},
        201: {"argv": playbook, "ppid": 200, "started": 1002.0},  # its worker
        202: {"argv": ["/bin/sh", "-c", "disklab playbook-begin"], "ppid": 201, "started": 1003.0},
        300: {"ppid": None, "started": None},  # another user's process
    }  # fmt: skip
    monkeypatch.setattr(processes, "FACTS", MacFacts(table))
    assert ownership.ancestor_playbook(start=202) == 200  # a plain run's owner, found as on Linux
    reports = tmp_path / "reports"
    incoming = _stage(reports, "20261201T000000Z", [100, 200])
    owners = json.loads((incoming / ownership.OWNER).read_text())["pids"]
    assert owners == [{"pid": 100, "name": "disklab", "started": 1000.0},
                      {"pid": 200, "name": "ansible-playbook", "started": 1001.0}]  # fmt: skip
    del table[100]  # the controller is killed; ansible-playbook runs on
    table[200]["ppid"] = 1
    with pytest.raises(UsageError, match=r"still running: ansible-playbook \(pid 200\); wait for it"):
        orchestrate._refuse_a_live_run(reports)
    assert ownership.leftovers(reports) == []
    table[200]["started"] = 2000.0  # pid 200 given to a later process: not the owner
    assert ownership.live_runs(reports) == []
    table[200]["started"] = 1001.0
    table[200]["zombie"] = True  # it ended
    assert [left.run_id for left in ownership.leftovers(reports)] == ["20261201T000000Z"]
    # another user's process under a recorded pid cannot be read: taken as the owner, never as dead
    assert ownership.alive({"pids": [{"pid": 300, "name": "ansible-playbook", "started": 5.0}]})


def test_a_recorded_pid_that_started_at_another_time_is_not_its_owner():
    me = processes.FACTS.started(os.getpid())
    entry = {"pid": os.getpid(), "name": processes.FACTS.program(os.getpid())}
    assert ownership.alive({"pids": [{**entry, "started": me}]})
    assert ownership.alive({"pids": [{**entry, "started": me - 60}]}) == []  # the pid's earlier process
    assert ownership.alive({"pids": [entry]})  # a record from before start times: pid and program only
