"""A realfs run killed outright (SIGKILL of its process group) leaves a loop device, an ext4 mount on it and
a dead FUSE mount; its journal lets the next run, or `disklab_host stop`, end them in the order that works
(realfs.mounts.sweep). A part of the step that fails makes the step partial, not ok."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from disklab import report, schemas, store
from disklab.runner import HostOutcome
from disklab_host.realfs.mounts import JOURNAL_NAME, Resources, held, mounted_source, sweep
from test_realfs import _ours, needs_root

# A child that sets up what fsync_error.measure does (the FUSE recorder, a loop device over its one file,
# ext4 mounted on it), says "ready", and waits to be killed.
SET_UP = """
import sys, time
from pathlib import Path
from disklab_host.realfs import crashlab
from disklab_host.realfs.mounts import FILESYSTEMS, Resources, make_image
work, journal = Path(sys.argv[1]), Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
res = Resources(journal)
make_image("ext4", work / "fe.img")
rec = crashlab.Recorder(work / "fe.img", work / "fuse", work / "fe.jsonl", work / "fe.bin", res)
dev = res.loop(rec.file, direct_io=True)
res.mount(dev, work / "mnt", "ext4")
(work / "mnt" / "victim.bin").write_bytes(b"x" * 4096)
print("ready", flush=True)
time.sleep(600)
"""


@needs_root
@pytest.mark.heavy
def test_a_killed_runs_loop_device_mount_and_fuse_mount_are_ended_by_the_sweep(tmp_path):
    work, journal = tmp_path / "realfs" / "fsync_error", tmp_path / JOURNAL_NAME
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", SET_UP, str(work), str(journal)], stdout=subprocess.PIPE,
                             text=True, start_new_session=True, env=env)  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "ready"
        os.killpg(child.pid, signal.SIGKILL)  # the lab runner's group, the recorder (FUSE server) with it
        child.wait(timeout=30)
        time.sleep(0.5)
        loops, mounts = _ours(tmp_path)
        assert len(loops) == 1 and len(mounts) == 2, (loops, mounts)  # what a killed run leaves
        assert [d["kind"] for d in held(journal)] == ["process", "fuse", "loop", "mount"]
        ended, errors = sweep(journal)
        assert errors == []
        kinds = [e.split(" ")[0] for e in ended]
        assert kinds[:3] == ["mount", "loop", "FUSE"], ended  # the order that works; then a recorder that
        assert kinds[3:] in ([], ["recorder"]), ended  # was still dying (a FUSE server on its mount) is ended
        assert _ours(tmp_path) == ([], [])
        assert mounted_source(work / "fuse") is None and not journal.exists()
        assert sweep(journal) == ([], [])  # nothing left: a second sweep ends nothing
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        subprocess.run(["umount", "-l", str(work / "mnt")], capture_output=True, check=False)


def test_the_sweep_ends_only_what_is_still_what_the_journal_names(tmp_path):
    """A pid reused by another process, a mount point that now holds another device: left alone."""
    journal = tmp_path / JOURNAL_NAME
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        res = Resources(journal)
        res.add("stale recorder", lambda: None, {"kind": "process", "pid": other.pid, "name": "recorder",
                                                 "start": "1"})  # fmt: skip
        res.add(
            "old mount", lambda: None, {"kind": "mount", "target": str(tmp_path), "source": "/dev/loop99"}
        )
        ended, errors = sweep(journal)
        assert (ended, errors) == ([], []) and other.poll() is None
        assert held(journal) == []  # what is gone from the journal's world is released, not retried forever
    finally:
        other.kill()
        other.wait()


def test_resources_closed_normally_leave_no_journal_entry(tmp_path):
    journal = tmp_path / JOURNAL_NAME
    with Resources(journal) as res:
        res.add("a", lambda: None, {"kind": "process", "pid": 1, "name": "x", "start": None})
        assert len(held(journal)) == 1
    assert held(journal) == []


def _realfs_partial() -> dict:
    return {
        "status": "partial",
        "failed_parts": ["the fsync error on ext4: OSError: [Errno 107] Transport endpoint is not connected"],
        "swept": {"ended": ["mount /wb/realfs/fsync_error/ext4/mnt (/dev/loop3)"], "errors": []},
        "filesystems": {"ext4": {"image_mib": 64, "mount": "defaults"}},
        "kernel": "6.18", "state_mib": 4, "subsets": 1, "max_states": 3, "loads": ["quiet"],
        "cells": [], "confusion": {}, "disagreements": [],
        "fsync_error": [{"fs": "ext4", "error": "OSError: [Errno 107] Transport endpoint is not connected",
                         "cleanup_errors": []}],
        "wall_s": 1.0, "step_wall_s": 1.1,
    }  # fmt: skip


@pytest.mark.heavy
def test_a_partial_realfs_step_makes_the_host_partial_and_the_report_names_the_failed_part(tmp_path):
    from disklab_host.audit import collect
    from test_report import _doc  # a results document around given experiments

    doc = _doc("box", "20261203T000000Z", collect.collect_all(str(tmp_path), sys.executable),
               {"realfs": _realfs_partial()})  # fmt: skip
    assert schemas.first_error("results", doc) is None, schemas.first_error("results", doc)
    reports = tmp_path / "reports"
    incoming = store.incoming_dir(reports, "20261203T000000Z")
    incoming.mkdir(parents=True)
    (incoming / "box.json").write_text(json.dumps(doc))
    outcomes = {"box": HostOutcome(host="box")}
    status = store.store_fetched(reports, "20261203T000000Z", "runs", outcomes)
    assert status == {"box": "partial"}
    assert "Transport endpoint is not connected" in outcomes["box"].message
    report.render_all(reports)
    text = (reports / "box" / "report.md").read_text()
    assert "Partial: 1 part(s) of this step failed" in text and "Errno 107" in text
    assert "ended what a killed earlier run of it had left" in text
