"""disklab.lab as an Ansible collection: built from the checkout with ansible-galaxy, installed into a fresh
directory, used by its full names from a user's own playbook and as `ansible-playbook disklab.lab.audit`,
and put into an execution environment's build context by ansible-builder. Localhost only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import tomllib
import yaml

from conftest import REPO
from disklab_host import __version__

BIN = Path(sys.executable).parent
GALAXY = BIN / "ansible-galaxy"
PLAYBOOK = BIN / "ansible-playbook"
BUILDER = BIN / "ansible-builder"


def _env(**extra: str) -> dict:
    """A user's shell: no ANSIBLE_* setting and no PYTHONPATH of the test run; the venv's tools on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"}
    return {**env, "PATH": f"{BIN}:/usr/bin:/bin", **extra}


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("collection")
    proc = subprocess.run([str(GALAXY), "collection", "build", "--output-path", str(out), str(REPO)], cwd=out,
                          capture_output=True, text=True, env=_env(), timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("disklab-lab-*.tar.gz")
    return built


@pytest.fixture(scope="module")
def installed(tarball, tmp_path_factory) -> Path:
    """The tarball installed with ansible-galaxy into a fresh collections directory."""
    where = tmp_path_factory.mktemp("collections")
    proc = subprocess.run([str(GALAXY), "collection", "install", str(tarball), "-p", str(where)], cwd=where,
                          capture_output=True, text=True, env=_env(), timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (where / "ansible_collections" / "disklab" / "lab" / "MANIFEST.json").is_file()
    return where


def test_the_collection_and_the_python_package_have_one_version_and_one_ansible_range():
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"], galaxy["version"]) == ("disklab", "lab", __version__)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (core,) = [d for d in project["dependencies"] if d.startswith("ansible-core")]
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == core.removeprefix("ansible-core")
    # the execution environment's Python packages are the controller's, less what an EE brings itself
    wanted = [d for d in project["dependencies"] if not d.startswith(("ansible-core", "ansible-runner"))]
    lines = [
        ln for ln in (REPO / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")
    ]
    assert lines == wanted


@pytest.mark.heavy
def test_the_tarball_holds_the_roles_plugins_playbooks_and_host_package_once(tarball):
    with tarfile.open(tarball) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
        manifest = json.loads(tar.extractfile("MANIFEST.json").read())
    for part in ("galaxy.yml", "MANIFEST.json", "meta/runtime.yml", "meta/execution-environment.yml",
                 "requirements.txt", "plugins/action/lab_run_fetch.py", "plugins/filter/result.py",
                 "plugins/filter/hostnames.py", "src/disklab_host/common/hostnames.py",
                 "playbooks/site.yml", "playbooks/audit.yml", "roles/host_audit/tasks/main.yml",
                 "roles/lab_run/tasks/main.yml", "roles/lab_venv/tasks/main.yml",
                 "src/disklab_host/__main__.py", "src/disklab/cli.py"):  # fmt: skip
        assert part in names or part == "galaxy.yml", part
    assert len(names) == len(set(names))
    assert not [n for n in names if n.startswith(("bench/", ".venv", "playbooks/collections", ".git"))]
    assert [n for n in names if n.startswith("tests/")] == [
        "tests/sanity/ignore-2.19.txt"
    ]  # ansible-test's only
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert manifest["collection_info"]["version"] == __version__


def test_the_sanity_ignores_name_files_that_exist_and_only_the_house_styles_exceptions():
    """ansible-test sanity's ignores (tests/sanity/ignore-2.19.txt): the `_` of an unused value (pylint's
    disallowed-name) and the GPLv3 header a module of ansible-core itself needs; nothing else."""
    for line in (REPO / "tests" / "sanity" / "ignore-2.19.txt").read_text().splitlines():
        path, check = line.split(" ")
        assert (REPO / path).is_file(), path
        assert check in ("pylint:disallowed-name", "validate-modules:missing-gplv3-license"), line


@pytest.mark.heavy
def test_a_users_own_playbook_runs_host_audit_by_its_full_name(installed, tmp_path):
    """From another directory, with only the installed collection: the role packs the host package itself."""
    (tmp_path / "inv.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}}}}))  # fmt: skip
    (tmp_path / "audit.yml").write_text(yaml.safe_dump([{
        "name": "My own audit", "hosts": "all", "gather_facts": False,
        "roles": [{"role": "disklab.lab.host_audit", "vars": {
            "host_audit_root": str(tmp_path / "root"), "host_audit_workbench_create": True}}],
        "tasks": [{"name": "Keep the facts", "delegate_to": "localhost", "ansible.builtin.copy": {
            "content": "{{ host_audit_facts | to_json }}", "dest": str(tmp_path / "facts.json"),
            "mode": "0644"}}],
    }]))  # fmt: skip
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", "inv.yml", "audit.yml"], cwd=tmp_path, capture_output=True, text=True,
        env=_env(ANSIBLE_COLLECTIONS_PATH=str(installed), HOME=str(tmp_path)), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["workbench"]["audited_path"] == str(tmp_path / "root" / "workbench")
    df = subprocess.run(["df", "--output=fstype", str(tmp_path)], capture_output=True, text=True).stdout
    assert facts["workbench"]["fstype"] == df.split()[-1]
    assert (tmp_path / ".ansible" / "disklab" / "disklab_host.pyz").is_file()  # packed by the role itself
    assert (tmp_path / "root" / "runs" / "standalone" / "host.json").is_file()


@pytest.mark.heavy
def test_ansible_playbook_runs_the_installed_collections_audit_playbook(installed, tmp_path):
    (tmp_path / "inv.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3",
        "disklab_root": str(tmp_path / "root"), "lab_run_workbench_create": True}}}}))  # fmt: skip
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = inv.yml\n")  # the user's own
    proc = subprocess.run(
        [str(PLAYBOOK), "disklab.lab.audit"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_env(
            ANSIBLE_COLLECTIONS_PATH=str(installed), ANSIBLE_SHOW_CUSTOM_STATS="True", PWD=str(tmp_path)
        ),
        timeout=300,
    )  # fmt: skip  (AWX shows a job's set_stats itself; ansible-playbook only when asked)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert len(list((tmp_path / "reports" / "localhost" / "audits").glob("*.json"))) == 1
    assert (tmp_path / "reports" / "index.md").is_file()
    stats = "".join(proc.stdout.split("CUSTOM STATS:", 1)[-1].split())  # set_stats, whitespace removed
    assert '"disklab_hosts":{"localhost":"ok"}' in stats and '"disklab_run_id":"' in stats, proc.stdout[
        -2000:
    ]


@pytest.mark.heavy
def test_ansible_builder_makes_an_execution_environment_context_with_the_collection(
    tarball, installed, tmp_path
):
    work = tmp_path / "ee"
    (work / ".ee").mkdir(parents=True)
    (work / ".ee" / "disklab-lab.tar.gz").write_bytes(tarball.read_bytes())
    (work / "execution-environment.yml").write_text((REPO / "execution-environment.yml").read_text())
    proc = subprocess.run([str(BUILDER), "create", "-f", "execution-environment.yml", "-c", "context"],
                          cwd=work, capture_output=True, text=True, env=_env(), timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    context = work / "context"
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert requirements["collections"] == [{"name": "collections/disklab-lab.tar.gz", "type": "file"}]
    assert (context / "_build" / "collections" / "disklab-lab.tar.gz").read_bytes() == tarball.read_bytes()
    build_file = next(
        p for p in (context / "Containerfile", context / "Dockerfile") if p.exists()
    ).read_text()
    assert "ansible-galaxy collection install" in build_file and "ansible-core>=2.16,<2.20" in build_file
    # the Python packages ansible-builder finds in the installed collection (meta/execution-environment.yml)
    found = subprocess.run([str(BUILDER), "introspect", str(installed)], capture_output=True, text=True,
                           cwd=work, env=_env(), timeout=120, check=True).stdout  # fmt: skip
    for package in ("jsonschema", "matplotlib", "rich", "jinja2"):
        assert f"{package}>=" in found and "from collection disklab.lab" in found, found
