"""Noisy hosts: a login banner and a Python warning around a command's output (stderr merged into stdout,
as SSH's pty gives it). The roles run for real on localhost with such a Python and still read the one
result line (disklab_host.common.result); without the line a task fails with one message that names the
host, the task and the first lines the command printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TINY_SIZES, collection_plugin
from disklab import ship
from disklab_host.common import result as result_line

ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
RUN_ID = "20261202T100000Z"
BANNER = "Welcome to lab7, a noisy lab host"
WARNING = "Python warning: this interpreter prints on start"


def _noisy_python(tmp_path: Path) -> Path:
    """The host's Python as a noisy host has it: a banner on stdout, then a warning on a stderr merged into
    stdout, then the real Python."""
    path = tmp_path / "noisy-python"
    path.write_text(
        f'#!/bin/sh\necho "{BANNER}"\nexec 2>&1\necho "{WARNING}" >&2\nexec {sys.executable} "$@"\n'
    )
    path.chmod(0o755)
    return path


def _mute_python(tmp_path: Path) -> Path:
    """A 'Python' that prints only noise and succeeds: the command's result line is missing."""
    path = tmp_path / "mute-python"
    lines = [BANNER, WARNING] + [f"motd line {i}: {'x' * 300}" for i in range(1, 9)]
    path.write_text("#!/bin/sh\n" + "".join(f"echo '{ln}'\n" for ln in lines) + "exit 0\n")
    path.chmod(0o755)
    return path


def _play(
    tmp_path: Path, name: str, tasks: list, check: bool = False, **host_vars
) -> subprocess.CompletedProcess:
    """Run ``tasks`` against localhost (local connection) with the checkout's ansible.cfg."""
    incoming = tmp_path / "incoming"
    incoming.mkdir(exist_ok=True)
    if not (incoming / "disklab_host.pyz").exists():
        ship.build(incoming / "disklab_host.pyz")
    inventory = {
        "all": {
            "hosts": {
                "localhost": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "disklab_root": str(tmp_path / "root"),
                    "disklab_workbench": str(tmp_path / "wb"),
                    "disklab_run_id": RUN_ID,
                    "disklab_incoming_dir": str(incoming),
                    **host_vars,
                }
            }
        }
    }
    (tmp_path / f"{name}.inv.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / f"{name}.yml").write_text(
        yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])
    )
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(tmp_path / f"{name}.inv.yml"), str(tmp_path / f"{name}.yml")]
        + (["--check"] if check else []),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def _role(name: str, tasks_from: str = "main", **kw) -> dict:
    return {
        "name": f"{name} {tasks_from}",
        "ansible.builtin.include_role": {"name": f"disklab.lab.{name}", "tasks_from": tasks_from, **kw},
    }


def _keep(var: str, dest: Path) -> dict:
    return {
        "name": f"Keep {var}",
        "ansible.builtin.copy": {"content": "{{ " + var + " | to_json }}", "dest": str(dest)},
    }


def _assert_one_message(proc: subprocess.CompletedProcess, task: str) -> str:
    """The failed task's message: it names the host and the task and shows the first lines, trimmed."""
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Expecting value" not in out and "from_json" not in out, out[-3000:]
    msg = re.search(r"localhost: the task '([^']*)' printed no disklab-result line.*", out)
    assert msg, out[-3000:]
    assert msg.group(1) == task
    assert BANNER in msg.group(0) and WARNING in msg.group(0) and "motd line 3" in msg.group(0)
    assert "motd line 4" not in msg.group(0) and "x" * 161 not in msg.group(0)  # the first 5 lines, trimmed
    return msg.group(0)


# --- the rule: one line, the same everywhere -------------------------------------------------------


def test_the_result_line_is_found_among_banners_warnings_and_a_merged_stderr():
    obj = {"ok": True, "text": "two\nlines", "n": 3}
    out = f"{BANNER}\r\n{WARNING}\r\nno newline before it{result_line.line(obj)}\r\nstderr: a note\r\n"
    assert result_line.parse(out) == obj
    assert "\n" not in result_line.line(obj)
    assert result_line.parse(f'{BANNER}\n{{"not": "marked"}}\n') is None


def test_every_role_and_the_controller_tasks_read_the_line_with_the_collections_filters():
    """One rule: each role's vars/main.yml and the controller tasks read the line with the filters
    of plugins/filter/result.py (disklab_host.common.result.parse); no task parses a stdout itself."""
    copies = {
        f"__{role}_": yaml.safe_load((REPO / "roles" / role / "vars" / "main.yml").read_text())
        for role in ("host_audit", "lab_run", "lab_venv")
    }
    begin = yaml.safe_load((REPO / "playbooks" / "tasks" / "begin_run.yml").read_text())
    copies["__disklab_"] = next(t for t in begin if "block" in t)["vars"]
    for prefix, found in copies.items():
        assert found[f"{prefix}result"] == f"{{{{ {prefix}out | disklab.lab.result }}}}", prefix
        assert found[f"{prefix}result_line"] == f"{{{{ {prefix}out | disklab.lab.result_line }}}}", prefix
        assert (
            f"{prefix}out | disklab.lab.no_result(inventory_hostname, {prefix}out_task)"
            in found[f"{prefix}no_result"]
        )
    text = "".join(
        p.read_text() for p in [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("playbooks/*.yml"),
                                *REPO.glob("playbooks/tasks/*.yml"), *REPO.glob("roles/*/vars/*.yml")]
    )  # fmt: skip
    assert "from_json" not in text  # no task parses a command's stdout itself


def test_the_filters_apply_the_host_modules_rule():
    filters = collection_plugin("filter.result").FilterModule().filters()  # as Ansible imports it
    obj = {"ok": True, "n": 3}
    out = {"rc": 0, "stdout": f"{BANNER}\n{WARNING}\n{result_line.line(obj)}\nShared connection closed.\n"}
    assert filters["result"](out) == obj == result_line.parse(out["stdout"])
    assert filters["result_line"](out) == result_line.line(obj)
    bare = {
        "rc": 2,
        "stdout": f"{BANNER}\n" + "x" * 400 + "\n",
        "stderr": "Traceback (most recent call last):\n",
    }
    assert filters["result"](bare) == {} and filters["result_line"](bare) == ""
    message = filters["no_result"](bare, "host7", "Record the facts")
    assert message.startswith("host7: the task 'Record the facts' printed no disklab-result line (rc 2)")
    assert BANNER.strip() in message and "Traceback" in message and "x" * 200 not in message
    assert filters["result"]({"rc": 0, "stdout": 'disklab-result {"broken"\n'}) == {}


# --- noisy hosts: the real roles still work --------------------------------------------------------


@pytest.mark.parametrize("staged", [False, True], ids=["script", "staged"])
@pytest.mark.heavy
def test_the_audit_reads_its_facts_on_a_noisy_host(tmp_path, staged):
    noisy = _noisy_python(tmp_path)
    artifact = tmp_path / "incoming" / "disklab_host.pyz"
    proc = _play(
        tmp_path,
        "audit",
        [_role("host_audit"), _keep("host_audit_facts", tmp_path / "facts.json")],
        ansible_python_interpreter=str(noisy),
        lab_run_workbench_create=True,
        **({"host_audit_staged_artifact": str(artifact)} if staged else {}),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["workbench"]["audited_path"] == str(tmp_path / "wb")
    assert facts == json.loads((tmp_path / "root" / "runs" / RUN_ID / "host.json").read_text())


@pytest.mark.heavy
def test_the_lab_runs_and_stops_on_a_noisy_host(tmp_path):
    """Preflight, the staged audit, the start, the poll and the exit record, the fetch, then stop."""
    noisy = _noisy_python(tmp_path)
    staged = str(tmp_path / "root" / "disklab_host.pyz")
    tasks = [
        _role("lab_run", "preflight", public=True),
        {**_role("host_audit"), "vars": {"host_audit_staged_artifact": staged}},
        _role("lab_run"),
        _role("lab_run", "stop"),
    ]
    proc = _play(
        tmp_path,
        "lab",
        tasks,
        ansible_python_interpreter=str(noisy),
        lab_venv_python_bin=str(noisy),
        lab_run_workbench_create=True,
        lab_run_steps=["fsync_bench"],
        **TINY_SIZES,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    doc = json.loads((tmp_path / "incoming" / "localhost.json").read_text())
    assert list(doc["experiments"]) == ["fsync_bench"] and doc["experiments"]["fsync_bench"]["status"] == "ok"
    assert re.search(
        r"TASK \[disklab\.lab\.lab_run : stop \| End the lab runner and its children\] \*+\n"
        r"ok: \[localhost\]",
        proc.stdout,
    )  # nothing to stop: not changed


@pytest.mark.heavy
def test_provisioning_reports_on_a_noisy_host_under_check(tmp_path):
    noisy = _noisy_python(tmp_path)
    proc = _play(tmp_path, "venv", [_role("lab_venv")], check=True, lab_venv_python=str(noisy))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert re.search(
        r"Report what provisioning the lab venv would change \(--check\)\] \*+\nchanged:", proc.stdout
    )
    assert not (tmp_path / "root").exists()


# --- no result line: one message ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "tasks_from", "setting", "task", "staged"),
    [
        ("host_audit", "main", "host_audit_python", "Record the host, workbench and writeback facts", False),
        ("host_audit", "main", "host_audit_python", "Record the host, workbench and writeback facts", True),
        ("lab_venv", "main", "lab_venv_python", "Provision the lab venv with the pinned packages", False),
        ("lab_run", "stop", "lab_run_host_python", "stop | End the lab runner and its children", False),
        (
            "lab_run",
            "preflight",
            "lab_run_host_python",
            "preflight | Check the settings, the workbench and the free disk space, then stage the host "
            "package",
            False,
        ),
    ],
    ids=["audit-script", "audit-staged", "provision", "stop", "preflight"],
)
@pytest.mark.heavy
def test_a_missing_result_line_fails_with_one_message_naming_host_task_and_output(
    tmp_path, role, tasks_from, setting, task, staged
):
    mute = _mute_python(tmp_path)
    extra = {"host_audit_staged_artifact": str(tmp_path / "incoming" / "disklab_host.pyz")} if staged else {}
    proc = _play(tmp_path, role, [_role(role, tasks_from)], **{setting: str(mute)}, **extra)
    _assert_one_message(proc, task)


@pytest.mark.heavy
def test_a_lab_start_without_its_result_line_fails_naming_the_start(tmp_path):
    mute = _mute_python(tmp_path)
    proc = _play(
        tmp_path, "start", [_role("lab_run")], lab_venv_python_bin=str(mute), lab_run_steps=["fsync_bench"]
    )
    _assert_one_message(proc, "Start the storage lab experiments on the host")


@pytest.mark.heavy
def test_plain_audit_stores_on_a_controller_whose_python_prints_on_start(tmp_path):
    """begin_run.yml (the run id) and the store task read the controller's own commands: a sitecustomize
    that prints a banner on stdout and a warning on stderr, as a site's Python may, changes nothing."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import sys\nprint({BANNER!r})\nprint({WARNING!r}, file=sys.stderr)\n"
    )
    inv = {
        "all": {
            "hosts": {
                "localhost": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "disklab_root": str(tmp_path / "root"),
                    "disklab_workbench": str(tmp_path / "wb"),
                }
            }
        }
    }
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inv))
    env = {
        **os.environ,
        "PWD": str(tmp_path),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "PYTHONPATH": str(site),
    }
    env.pop("DISKLAB_CWD", None)
    proc = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "inv.yml"), str(REPO / "playbooks" / "audit.yml")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    audits = list((tmp_path / "reports" / "localhost" / "audits").glob("*.json"))
    assert len(audits) == 1 and re.fullmatch(r"\d{8}T\d{6}Z", audits[0].stem)
