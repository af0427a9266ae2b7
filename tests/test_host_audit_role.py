"""The host_audit role on this machine (ansible_connection local): both task variants, the script
(`disklab audit` sends the host package) and the staged command (`disklab run`), pass
--workbench-create when host_audit_workbench_create is true, which by default follows
lab_run_workbench_create; without it a missing workbench is audited through its parent."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from conftest import REPO
from disklab import ship

ANSIBLE_PLAYBOOK = REPO / ".venv-test" / "bin" / "ansible-playbook"


def _audit(tmp_path, name: str, staged: bool, **host_vars) -> dict:
    """Run the role once against localhost; return the facts it kept (host_audit_facts)."""
    incoming = tmp_path / "incoming"
    incoming.mkdir(exist_ok=True)
    artifact = incoming / "disklab_host.pyz"
    if not artifact.exists():
        ship.build(artifact)
    out = tmp_path / f"{name}.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {"name": "Audit", "ansible.builtin.include_role": {"name": "disklab.lab.host_audit"}},
                {
                    "name": "Keep the facts",
                    "ansible.builtin.copy": {"content": "{{ host_audit_facts | to_json }}", "dest": str(out)},
                },
            ],
        }
    ]
    (tmp_path / f"{name}.yml").write_text(yaml.safe_dump(play))
    inventory = {
        "all": {
            "hosts": {
                "localhost": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "disklab_root": str(tmp_path / "root"),
                    "disklab_run_id": "20261129T100000Z",
                    "disklab_incoming_dir": str(incoming),
                    **({"host_audit_staged_artifact": str(artifact)} if staged else {}),
                    **host_vars,
                }
            }
        }
    }
    (tmp_path / f"{name}.inv.yml").write_text(yaml.safe_dump(inventory))
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / f"{name}.inv.yml"), str(tmp_path / f"{name}.yml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("staged", [False, True], ids=["script", "staged"])
@pytest.mark.heavy
def test_the_role_creates_the_workbench_when_lab_run_workbench_create_is_true(tmp_path, staged):
    wb = tmp_path / "scratch" / "workbench"
    facts = _audit(tmp_path, "create", staged, disklab_workbench=str(wb), lab_run_workbench_create=True)
    assert wb.is_dir()
    assert facts["workbench"]["created"] is True and facts["workbench"]["audited_path"] == str(wb)


@pytest.mark.parametrize("staged", [False, True], ids=["script", "staged"])
@pytest.mark.heavy
def test_the_role_audits_the_parent_of_a_missing_workbench_by_default(tmp_path, staged):
    wb = tmp_path / "scratch" / "workbench"
    facts = _audit(tmp_path, "parent", staged, disklab_workbench=str(wb))
    assert not (tmp_path / "scratch").exists()
    w = facts["workbench"]
    assert w["exists"] is False and w["requested_path"] == str(wb) and w["audited_path"] == str(tmp_path)
    # host_audit_workbench_create overrides lab_run_workbench_create
    facts = _audit(
        tmp_path,
        "override",
        staged,
        disklab_workbench=str(wb),
        lab_run_workbench_create=True,
        host_audit_workbench_create=False,
    )
    assert facts["workbench"]["exists"] is False and not wb.exists()
