"""Every run kept: ansible-runner's artifacts under reports/.artifacts/<run_id>/, and a recording callback
(ARA's way in, docs/fleet.md) enabled through the environment is loaded by `disklab audit`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, write_local_inventory

PROBE = '''
import json, os
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Records what ARA's callback would see: the playbook, and each task's result per host."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "disklab_probe"
    CALLBACK_NEEDS_ENABLED = True

    def _note(self, **what):
        with open(os.environ["DISKLAB_PROBE_OUT"], "a") as f:
            f.write(json.dumps(what) + "\\n")

    def v2_playbook_on_start(self, playbook):
        self._note(playbook=os.path.basename(playbook._file_name))

    def v2_runner_on_ok(self, result):
        self._note(host=result._host.get_name(), task=result._task.get_name())
'''


@pytest.mark.slow
def test_the_run_is_kept_and_a_callback_enabled_in_the_environment_is_loaded(tmp_path):
    plugins = tmp_path / "callback_plugins"
    plugins.mkdir()
    (plugins / "disklab_probe.py").write_text(PROBE)
    out = tmp_path / "probe.jsonl"
    reports = tmp_path / "reports"
    inv = write_local_inventory(
        tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb", lab_run_workbench_create=True
    )
    env = {
        **os.environ,
        "ANSIBLE_CALLBACK_PLUGINS": str(plugins),
        "ANSIBLE_CALLBACKS_ENABLED": "disklab_probe",
        "DISKLAB_PROBE_OUT": str(out),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "audit", "-i", str(inv)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [json.loads(line) for line in out.read_text().splitlines()]
    assert notes[0] == {"playbook": "audit.yml"}
    assert {"host": "localhost", "task": "Keep the facts on the controller"} in notes
    (run_dir,) = list((reports / ".artifacts").iterdir())
    assert (reports / "localhost" / "audits" / f"{run_dir.name}.json").is_file()
    kept = run_dir / "audit"
    assert "Keep the facts on the controller" in (kept / "stdout").read_text()
    events = [json.loads(p.read_text()) for p in (kept / "job_events").glob("*.json")]
    assert any(e.get("event") == "playbook_on_stats" for e in events)


@pytest.mark.slow
def test_the_users_stdout_callback_writes_the_kept_output_and_one_that_cannot_run_is_refused(tmp_path):
    """Issue 40, item 13: ANSIBLE_STDOUT_CALLBACK=yaml (ansible-core routes it to community.general, where it
    was removed) was said to be "replaced by awx_display", and then ansible-playbook crashed ("NoneType takes
    no arguments"). awx_display wraps the user's callback; one Ansible cannot load, or that awx_display
    cannot wrap (oneline), is now refused in one line before any work, and one that loads writes the kept
    output."""
    inv = write_local_inventory(
        tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb", lab_run_workbench_create=True
    )
    reports = tmp_path / "reports"

    def audit(callback: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        return subprocess.run(
            [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "audit", "-i", str(inv)],
            cwd=REPO, env={**env, "ANSIBLE_STDOUT_CALLBACK": callback}, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip

    for callback, said in (
        ("yaml", "Ansible cannot load this callback plugin (Error loading plugin 'community.general.yaml'"),
        ("oneline", "ansible-runner's awx_display, which disklab follows each host through, cannot wrap"),
    ):
        proc = audit(callback)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.splitlines()
        assert line.startswith(f"disklab: stdout_callback = {callback} from your environment "
                               "(ANSIBLE_STDOUT_CALLBACK): ") and said in line, line  # fmt: skip
        assert "Traceback" not in proc.stdout + proc.stderr
        assert not reports.exists() and not (tmp_path / "root").exists()  # refused before any work
    proc = audit("minimal")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "stdout_callback = minimal from your environment (ANSIBLE_STDOUT_CALLBACK) writes Ansible's output"
        in (proc.stderr)
    )
    (run_dir,) = list((reports / ".artifacts").iterdir())
    kept = (run_dir / "audit" / "stdout").read_text()
    assert "localhost | SUCCESS => " in kept and "TASK [" not in kept  # minimal's lines, not default's
    assert (reports / "localhost" / "audits" / f"{run_dir.name}.json").is_file()
