"""The fetch action disklab.lab.lab_run_fetch (plugins/action/lab_run_fetch.py), run by Ansible itself."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO

ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def _fetch(tmp_path: Path, src: str, dest: Path) -> dict:
    """A one-task play that runs lab_run_fetch over the local connection; the task's registered result."""
    out = tmp_path / "result.json"
    play = [{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "fetch", "disklab.lab.lab_run_fetch": {"src": src, "dest": str(dest)}, "register": "r",
             "ignore_errors": True},
            {"name": "keep", "ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(out)}},
        ],
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / "playbooks" / "collections"),  # the checkout's collection link
        "ANSIBLE_NOCOLOR": "1",
    }
    cp = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-c", "local", "-i", "localhost,", "-e",
         f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return json.loads(out.read_text())


@pytest.mark.heavy
def test_fetch_brings_the_file_whole_and_expands_the_hosts_home(tmp_path):
    """A ~ in src is the login user's home on the host (Ansible asks the host's shell), as in ~/.disklab."""
    home = Path(f"~{getpass.getuser()}").expanduser()
    home_dir = Path(tempfile.mkdtemp(prefix=".disklab-fetch-test-", dir=home))
    try:
        body = json.dumps({"host": "localhost", "pad": "x" * 300_000})
        (home_dir / "results.json").write_text(body)
        dest = tmp_path / "incoming" / "new" / "localhost.json"
        result = _fetch(tmp_path, f"~/{home_dir.name}/results.json", dest)
    finally:
        shutil.rmtree(home_dir)
    assert result.get("failed") is not True, result
    assert result["changed"] is True and result["size"] == len(body)
    assert dest.read_text() == body
    assert result["src"] == f"{home_dir}/results.json"
    assert [p.name for p in dest.parent.iterdir()] == ["localhost.json"]  # no temporary file left


@pytest.mark.heavy
def test_a_missing_file_fails_with_its_path_and_leaves_nothing(tmp_path):
    dest = tmp_path / "incoming" / "localhost.json"
    result = _fetch(tmp_path, str(tmp_path / "nowhere" / "results.json"), dest)
    assert result["failed"] is True, result
    assert result["msg"].startswith(f"could not fetch {tmp_path}/nowhere/results.json"), result["msg"]
    assert not dest.exists() and list(dest.parent.iterdir()) == []
