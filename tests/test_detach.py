"""``lab --detach``, the lab_run role's start: returns at once, the runner goes on in its own session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from disklab_host import detach, lab
from disklab_host.common import result as result_line
from disklab_host.common import timesplit


def _wait_for(path, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)
    return json.loads(path.read_text())


def _cfg(tmp_path, run_id, **settings):
    wb = tmp_path / "root" / "workbench"
    wb.mkdir(parents=True, exist_ok=True)
    return {"run_id": run_id, "host": "h", "profile": "quick", "workbench": str(wb),
            "lab_root": str(tmp_path / "root"), "steps": ["write_buffering"],
            "settings": {"write_buffering_calls": 200, **settings}, "system": "Linux"}  # fmt: skip


def _start(tmp_path, cfg):
    (tmp_path / "host.json").write_text("{}")
    run_dir = tmp_path / "root" / "runs" / cfg["run_id"]
    argv = [sys.executable, "-m", "disklab_host", "lab", "--detach", "--config-json", json.dumps(cfg),
            "--facts", str(tmp_path / "host.json"), "--out", str(run_dir / "results.json")]  # fmt: skip
    # start_new_session=False on purpose: the runner must leave the caller's session by itself
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return run_dir, result_line.parse(proc.stdout)


def _runner_pid(run_dir, timeout_s=60.0):
    """The runner's own pid, from the status file it writes first thing."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return json.loads((run_dir / lab.STATUS_NAME).read_text())["pid"]
        except (OSError, ValueError):
            assert time.monotonic() < deadline, "the runner wrote no status file"
            time.sleep(0.02)


@pytest.mark.heavy
def test_the_detached_runner_leaves_the_session_runs_and_records_its_exit(tmp_path):
    run_dir, started = _start(tmp_path, _cfg(tmp_path, "D1", write_buffering_calls=400_000))
    assert started["started"] is True and started["run_dir"] == str(run_dir)
    # The supervisor leads a session of its own (setsid): a dropped SSH session's SIGHUP misses it and
    # the runner, its child. Both are alive here: the start returns right after the fork, and 400,000
    # calls per mode take seconds.
    supervisor = started["pid"]
    assert os.getsid(supervisor) == supervisor != os.getsid(0)
    runner = _runner_pid(run_dir)
    assert runner != supervisor and os.getsid(runner) == supervisor
    record = _wait_for(run_dir / detach.EXIT_NAME)
    assert record["rc"] == 0 and record["pid"] == runner and record["signal"] is None
    assert "disklab-step write_buffering" in record["stdout"]  # the runner's stdout, kept in runner.out
    results = json.loads((run_dir / "results.json").read_text())
    assert results["experiments"]["write_buffering"]["status"] == "ok"
    assert json.loads((run_dir / lab.STATUS_NAME).read_text())["state"] == "finished"

    again_dir, again = _start(tmp_path, _cfg(tmp_path, "D1"))  # its results exist: not run again
    assert again["started"] is False and json.loads((run_dir / detach.EXIT_NAME).read_text())["rc"] == 0


def test_a_failing_detached_runner_records_its_exit_status_and_stderr(tmp_path):
    cfg = _cfg(tmp_path, "D2")
    cfg["profile"] = "no-such-profile"  # load_config refuses it, after the start has returned
    run_dir, started = _start(tmp_path, cfg)
    record = _wait_for(run_dir / detach.EXIT_NAME)
    assert record["rc"] != 0 and "no-such-profile" in record["stderr"]
    assert not (run_dir / "results.json").exists()


def test_a_runner_killed_outright_still_gets_its_exit_record_and_is_reaped(tmp_path):
    """SIGKILL (what the OOM killer sends) leaves the runner no time to write a thing: its supervisor does,
    and sets kernel.task_delayacct back where the runner had turned it on for its run."""
    switch = timesplit.delayacct_state()
    run_dir, started = _start(tmp_path, _cfg(tmp_path, "D3", write_buffering_calls=5_000_000))
    runner = _runner_pid(run_dir)
    mark = tmp_path / "root" / timesplit.DELAYACCT_MARK
    if switch == 0 and os.geteuid() == 0:  # the runner turns it on before its first step
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert time.monotonic() < deadline, "the runner left no mark of turning delay accounting on"
            time.sleep(0.02)
        assert timesplit.delayacct_state() == 1
    os.kill(runner, signal.SIGKILL)
    record = _wait_for(run_dir / detach.EXIT_NAME)
    assert (record["rc"], record["signal"], record["pid"]) == (-signal.SIGKILL, signal.SIGKILL, runner)
    with pytest.raises(ProcessLookupError):  # reaped by its supervisor, not left a zombie
        os.kill(runner, 0)
    assert not (run_dir / "results.json").exists()
    assert timesplit.delayacct_state() == switch and not mark.exists()
    if switch == 0 and os.geteuid() == 0:
        assert "its supervisor set it back to 0" in record["stderr"]
