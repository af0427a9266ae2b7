"""A full or read-only reports directory (issue 40, item 12): one line naming the directory, its free space
and what was kept, exit status 1, and nothing lost (every stored file has the same checksum before and
after). Real small filesystems (a tmpfs, remounted read-only), real `disklab` processes, a real lab run.

Before, each of these places raised a raw OSError ([Errno 28] at the run's start, at the fetch and the
store, and in `disklab report --force`; [Errno 30] on a read-only mount).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, run_disklab, write_local_inventory
from disklab import ownership, room, stored
from disklab.orchestrate import store_and_render
from disklab.runner import HostOutcome
from disklab_host import lab
from disklab_host.common.lock import holder_of

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs")
OLD_RUN = FIXTURES / "stored" / "v1" / "oldhost" / "runs" / "20261130T090000Z.json"


@contextlib.contextmanager
def tmpfs(path: Path, size_mib: int):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def fill(mnt: Path, leave_kib: int = 0) -> Path:
    """Fill ``mnt``'s filesystem with one file, leaving about ``leave_kib`` KiB free; returns the file."""
    gap = mnt / "gap"
    gap.write_bytes(b"\0" * (leave_kib * 1024))
    filler = mnt / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (65536, 4096):  # then the last pages, one at a time
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * chunk)
    gap.unlink()
    return filler


def checksums(reports: Path) -> dict[str, str]:
    """sha256 of every stored file (runs, audits, failures, run records) under ``reports``."""
    stored_files = [p for p in reports.glob("*/*/*.json") if p.parent.name in ("runs", "audits", "failures")]
    stored_files += list(reports.glob(".runs/*.json"))
    return {str(p.relative_to(reports)): hashlib.sha256(p.read_bytes()).hexdigest() for p in stored_files}


def _one_line(proc: subprocess.CompletedProcess, command: str, reports: Path, why: str) -> str:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if not ln.startswith("[")]  # less the progress lines
    assert line.startswith(f"disklab {command}: the reports directory {reports} {why} ("), line
    return line


@ROOT
@pytest.mark.root
@pytest.mark.slow
def test_a_full_or_read_only_reports_directory_is_one_line_at_each_place_and_nothing_is_lost(tmp_path):
    inv = write_local_inventory(
        tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb", lab_run_workbench_create=True
    )
    with tmpfs(tmp_path / "small", 8) as mnt:
        reports = mnt / "reports"
        seeded = run_disklab("audit", "-i", str(inv), reports=reports)  # a real stored audit and its reports
        assert seeded.returncode == 0, seeded.stdout + seeded.stderr
        (reports / "oldhost" / "runs").mkdir(parents=True)  # and a stored run of another host
        shutil.copy(OLD_RUN, reports / "oldhost" / "runs" / OLD_RUN.name)
        # a run stopped between its fetch and its store: what it fetched is staged, its owner dead
        staged_id = "20261204T000000Z"
        incoming = reports / ".incoming" / staged_id
        incoming.mkdir(parents=True)
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        ownership.write_owner(incoming, staged_id, "runs", inv, [dead.pid])
        # the results it fetched, of its own run id (a host's results name the run that made them)
        fetched = {**json.loads(OLD_RUN.read_text()), "run_id": staged_id}
        (incoming / "oldhost.json").write_text(json.dumps(fetched))
        before = checksums(reports)
        assert len(before) == 3, before  # the audit, its run record, the old run
        host_files = sorted((tmp_path / "root").rglob("*"))

        filler = fill(mnt)
        # the run's start (the lock, the staging directory, the host package), and `disklab audit`'s
        for command in ("run", "audit"):
            proc = run_disklab(command, "-i", str(inv), reports=reports)
            line = _one_line(proc, command, reports, "is full")
            assert line.endswith(
                "free of 8.00 MiB): nothing ran on any host, and every stored file is as it was"
            )
        assert sorted((tmp_path / "root").rglob("*")) == host_files  # no host was touched
        # the store (playbook-store is the store of both disklab run and plain ansible-playbook)
        proc = run_disklab("playbook-store", "--run-id", staged_id, "--kind", "runs", "--inventory", str(inv),
                           "--hosts", "oldhost", reports=reports)  # fmt: skip
        line = _one_line(proc, "playbook-store", reports, "is full")
        assert (
            f"run {staged_id} is not stored in full: what was fetched and not stored stays in {incoming}"
            in line
        )
        # the render
        proc = run_disklab("report", "--force", reports=reports)
        line = _one_line(proc, "report", reports, "is full")
        assert line.endswith("no stored file changed, and each report file is the old one or the new one")
        assert checksums(reports) == before and (incoming / "oldhost.json").is_file()

        # with a little room, the store itself runs out (the lock's record fits, the run does not)
        filler.unlink()
        filler = fill(mnt, leave_kib=16)
        proc = run_disklab("playbook-store", "--run-id", staged_id, "--kind", "runs", "--inventory", str(inv),
                           "--hosts", "oldhost", reports=reports)  # fmt: skip
        line = _one_line(proc, "playbook-store", reports, "is full")
        assert f"run {staged_id} is not stored in full" in line
        assert checksums(reports) == before and (incoming / "oldhost.json").is_file()

        filler.unlink()
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        try:
            for command in ("run", "audit"):
                proc = run_disklab(command, "-i", str(inv), reports=reports)
                line = _one_line(proc, command, reports, "is on a read-only filesystem")
                assert line.endswith("nothing ran on any host, and every stored file is as it was")
            proc = run_disklab("report", "--force", reports=reports)
            _one_line(proc, "report", reports, "is on a read-only filesystem")
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(mnt)], check=True)
        assert checksums(reports) == before

        # once there is room, the next run stores what the stopped one had fetched: nothing was lost
        again = run_disklab("audit", "-i", str(inv), reports=reports)
        assert again.returncode == 0, again.stdout + again.stderr
        assert (
            f"run {staged_id} (started" in again.stderr
            and "stored what it had fetched: oldhost ok" in again.stderr
        )
        assert stored.read(reports / "oldhost" / "runs" / f"{staged_id}.json", "results") == {
            **stored.read(OLD_RUN, "results"),
            "run_id": staged_id,
        }
        after = checksums(reports)
        assert {k: after[k] for k in before} == before


@ROOT
@pytest.mark.root
@pytest.mark.slow
def test_a_reports_directory_that_fills_up_while_the_lab_runs_keeps_the_results_on_the_host(
    tmp_path, lab_root
):
    """ansible-playbook's own output (the run's artifacts) lives in the reports directory: when it fills up
    mid-run, the run stops in one line naming `--fetch`, and the lab, detached on the host, keeps its
    results, which that command then stores. Before, Ansible's event writes failed and it waited forever.
    (Filled while the step runs, or, on a busy machine, after it: then the fetch finds no room, and the
    line is the same.)"""
    workbench = tmp_path / "wb"
    workbench.mkdir()
    inv = write_local_inventory(tmp_path / "inv.yml", lab_root, workbench,
                                lab_run_steps=["fsync_bench"], lab_run_fsync_blocks=3000)  # fmt: skip
    with tmpfs(tmp_path / "small", 16) as mnt:
        reports = mnt / "reports"
        reports.mkdir()
        (reports / "oldhost" / "runs").mkdir(parents=True)
        shutil.copy(OLD_RUN, reports / "oldhost" / "runs" / OLD_RUN.name)
        before = checksums(reports)
        proc = subprocess.Popen(
            [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "run", "-i", str(inv)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        lock_path = lab_root / lab.LOCK_NAME
        deadline = time.monotonic() + 600
        while (holder_of(lock_path) or {}).get("step") != "fsync_bench":
            assert time.monotonic() < deadline and proc.poll() is None, "the lab never started"
            time.sleep(0.2)
        run_id = next(reports.glob(".incoming/*/owner.record")).parent.name
        filler = fill(mnt)
        out, err = proc.communicate(timeout=300)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        line = _one_line(done, "run", reports, "is full")
        assert f"`disklab run -i {inv} --fetch {run_id}` fetches and stores them" in line, line
        assert checksums(reports) == before
        filler.unlink()
        deadline = time.monotonic() + 300
        while holder_of(lock_path) is not None:  # the host's lab runner (detached) finishes its step
            assert time.monotonic() < deadline, "the lab runner never finished"
            time.sleep(0.5)
        fetched = run_disklab("run", "-i", str(inv), "--fetch", run_id, reports=reports)
        assert fetched.returncode == 0, fetched.stdout + fetched.stderr
        doc = stored.read(reports / "localhost" / "runs" / f"{run_id}.json", "results")
        assert doc["experiments"]["fsync_bench"]["blocks"] == 3000
        assert {k: v for k, v in checksums(reports).items() if k in before} == before


def test_a_fetch_that_ran_out_of_room_stores_nothing_and_names_what_fetches_it_later(tmp_path):
    """The fetch task's own ENOSPC (the event stream's message for the host, as lab_run_fetch words it):
    nothing is stored (no failure record, no run record), so `--fetch RUN` can store the kept results."""
    reports = tmp_path / "reports"
    reports.mkdir()
    message = "could not fetch /lab/runs/R/results.json: [Errno 28] No space left on device"
    outcomes = {
        "a": HostOutcome(
            host="a", status="failed", task="Fetch the results JSON to the controller", message=message
        ),
        "b": HostOutcome(
            host="b", status="failed", task="Fetch the results JSON to the controller", message=message
        ),
    }
    with pytest.raises(room.NoRoom) as said:
        store_and_render(reports, "20261204T000000Z", "runs", tmp_path / "inv.yml", outcomes)
    line = str(said.value)
    assert line.startswith(f"the reports directory {reports} is full (") and "\n" not in line
    assert (
        "the results of a, b stay on the hosts, not fetched; once there is room, `disklab run --fetch" in line
    )
    assert sorted(p.name for p in reports.iterdir()) == []  # no failure record, no run record


def test_the_words_of_each_error_and_the_free_space_are_named():
    assert room.said("x: [Errno 30] Read-only file system: '/r'") == 30
    assert room.said("could not fetch: No space left on device") == 28 and room.said("timed out") is None
    described = room.describe(Path("/nonexistent/reports"), 28)
    assert (
        described.startswith("the reports directory /nonexistent/reports is full (")
        and " free of " in described
    )
