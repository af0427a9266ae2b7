"""Plain `ansible-playbook` on the playbooks, as an Ansible user runs them: defaults, tags, check mode."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, write_local_inventory
from disklab import stored
from disklab_host import registry

ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
STEP_TAGS = set(registry.STEP_NAMES)


def _flat(tasks: list[dict]) -> list[dict]:
    """The tasks of a task list, with those of each block (and its always part) in place of the block."""
    out = []
    for task in tasks:
        out += _flat(task["block"] + task.get("always", [])) if "block" in task else [task]
    return out


def _tags(tasks: list[dict]) -> dict[str, set[str]]:
    return {t["name"]: set(t.get("tags") or []) for t in _flat(tasks)}


def test_every_step_is_a_tag_of_the_tasks_that_run_it():
    """`--tags crash` must reach the venv, the audit, the lab and the fetch: exactly the registry's steps
    (`make steps` writes them; tests/test_stepfiles.py names a file that differs)."""
    site = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    play = _tags(site[1]["tasks"])
    for name, phase in (
        ("Provision the lab venv", {"lab_venv_provision", "provision"}),
        ("Audit the host", {"host_audit", "audit"}),
        ("Run the experiments and fetch the results", {"lab_run_fetch", "fetch"}),
    ):
        assert play[name] == STEP_TAGS | phase | {"measure"}, name
    role = yaml.safe_load((REPO / "roles" / "lab_run" / "tasks" / "main.yml").read_text())
    fetch_task = "Fetch the results JSON to the controller"
    for name, tags in _tags(role).items():
        assert tags == STEP_TAGS | {"measure"} | (
            {"lab_run_fetch", "fetch"} if name == fetch_task else set()
        ), name
    defaults = yaml.safe_load((REPO / "roles" / "lab_run" / "defaults" / "main.yml").read_text())
    assert defaults["lab_run_steps"] == list(registry.STEP_NAMES)
    first = _tags(
        site[0]["tasks"]
    )  # validation, run id: always; the note that the run fetches: with the fetch
    fetch_note = "Note that this run fetches results (for the store task at the end)"
    assert first.pop(fetch_note) == play["Run the experiments and fetch the results"]
    assert all("always" in tags for name, tags in first.items())


# Tags that reach more than one role, kept as they are (redhat-cop's rule prefixes a role's own tags): what a
# user's `--tags crash,load` or `--tags measure` selects, and the fetch of both playbooks. A role's own tag is
# prefixed with its name; the name it had before stays on the same tasks, so old commands still work.
CROSS_ROLE_TAGS = {"always", "measure", "fetch", *registry.STEP_NAMES}
# Each role's own tag, and the name that selected the same tasks before (fetch is also audit.yml's, above).
ROLE_TAGS = {"lab_venv": ("lab_venv_provision", "provision"), "host_audit": ("host_audit", "audit"),
             "lab_run": ("lab_run_fetch", "fetch")}  # fmt: skip
OLD_NAMES = {old: new for new, old in ROLE_TAGS.values() if old not in CROSS_ROLE_TAGS}
ROLES = {p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir()}


def _all_tags(node) -> list[set[str]]:
    """Every tags list in a parsed YAML file (a task's, a block's, an include's apply), as sets."""
    if isinstance(node, list):
        return [tags for item in node for tags in _all_tags(item)]
    if not isinstance(node, dict):
        return []
    own = [set(node["tags"])] if isinstance(node.get("tags"), list) else []
    return own + [tags for value in node.values() for tags in _all_tags(value)]


def test_a_roles_own_tags_are_prefixed_with_its_name_and_old_names_still_select_the_same_tasks():
    files = [*REPO.glob("playbooks/**/*.yml"), *REPO.glob("roles/*/tasks/*.yml")]
    seen = set()
    for path in files:
        where = path.relative_to(REPO)
        role = where.parts[1] if where.parts[0] == "roles" else None
        for tags in _all_tags(yaml.safe_load(path.read_text())):
            for tag in tags - CROSS_ROLE_TAGS - set(OLD_NAMES):
                owner = next((r for r in ROLES if tag == r or tag.startswith(f"{r}_")), None)
                seen.add(tag)
                assert owner, f"{where}: tag {tag!r} is no role's (prefix it with its role's name)"
                assert role in (None, owner), f"{where}: tag {tag!r} of role {owner} in role {role}"
            for old, new in OLD_NAMES.items():
                assert (old in tags) == (new in tags), (
                    f"{where}: {sorted(tags)} should hold both {old} and {new}"
                )
    assert seen == {new for new, old in ROLE_TAGS.values()}, seen
    for role in ROLES:  # within a role: the cross-role tags, or the role's own
        for path in (REPO / "roles" / role / "tasks").glob("*.yml"):
            for tags in _all_tags(yaml.safe_load(path.read_text())):
                assert all(t in CROSS_ROLE_TAGS or t.startswith(f"{role}_") for t in tags), (path, tags)


def test_the_audit_describes_the_workbench_the_lab_writes_to():
    """Issue 26, finding 3: host_audit_workbench follows lab_run_workbench in site.yml, so neither a role
    default nor an inventory setting can make the stored facts describe another place than the figures."""
    site = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    audit_task = next(t for t in _flat(site[1]["tasks"]) if t["name"] == "Audit the host")
    assert audit_task["vars"]["host_audit_workbench"] == "{{ lab_run_workbench }}"
    assert audit_task["vars"]["host_audit_workbench_create"] == "{{ lab_run_workbench_create }}"


def _plain(cwd: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """ansible-playbook started in ``cwd`` by a shell (which sets PWD), with the checkout's ansible.cfg."""
    env = {**os.environ, "PWD": str(cwd), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    env.pop("DISKLAB_CWD", None)
    return subprocess.run(
        [ANSIBLE_PLAYBOOK, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_plain_audit_with_defaults_stores_and_renders_under_the_current_directory(tmp_path):
    inv = write_local_inventory(
        tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb", lab_run_workbench_create=True
    )
    proc = _plain(tmp_path, "-i", str(inv), str(REPO / "playbooks" / "audit.yml"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    reports = tmp_path / "reports"
    audits = list((reports / "localhost" / "audits").glob("*.json"))
    assert len(audits) == 1
    doc = stored.read(audits[0], "audit")
    run_id = audits[0].stem
    assert doc["run_id"] == run_id and doc["facts"]["workbench"]["requested_path"] == str(tmp_path / "wb")
    record = stored.read(reports / ".runs" / f"{run_id}.json", "run_record")
    assert record["hosts"] == {"localhost": "ok"} and record["run_kind"] == "audits"
    index = (reports / "index.md").read_text()
    assert "| localhost | ok |" in index and f"| audit `{run_id}` |" in index  # its status, and from what
    assert (reports / "localhost" / "report.md").is_file()
    assert not (reports / ".incoming").exists()
    assert f"audit {run_id}: fleet index in" in proc.stdout


@pytest.mark.slow
def test_plain_check_mode_on_a_fresh_host_passes_and_changes_nothing(tmp_path):
    root = tmp_path / "fresh-root"
    inv = write_local_inventory(tmp_path / "inv.yml", root, root / "wb", lab_run_workbench_create=True)
    reports = tmp_path / "reports"
    proc = _plain(tmp_path, "-i", str(inv), str(REPO / "playbooks" / "site.yml"), "--check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "check mode: nothing was stored for run" in proc.stdout
    assert not root.exists()  # no lab root, workbench, venv or run directory on the host
    assert not list(reports.glob("*/*/*.json")) and not (reports / ".incoming").exists()


@pytest.mark.slow
def test_plain_site_with_one_step_tag_runs_that_step_and_stores_the_rendered_run(tmp_path, lab_root):
    wb = tmp_path / "wb"
    wb.mkdir()
    reports = tmp_path / "somewhere" / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", lab_root, wb)
    proc = _plain(
        tmp_path,
        "-i",
        str(inv),
        str(REPO / "playbooks" / "site.yml"),
        "--tags",
        "fsync_bench",
        "-e",
        f"disklab_reports={reports}",
        "-e",
        "lab_run_fsync_blocks=60 lab_run_realfs=false",  # strings to Ansible; the role's spec types them
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    runs = list((reports / "localhost" / "runs").glob("*.json"))
    assert len(runs) == 1
    doc = stored.read(runs[0], "results")
    assert list(doc["experiments"]) == ["fsync_bench"] and doc["experiments"]["fsync_bench"]["status"] == "ok"
    assert doc["experiments"]["fsync_bench"]["blocks"] == 60  # was refused: "an integer > 0, got '60'"
    assert "fsync p50 is" in (reports / "localhost" / "report.md").read_text()
    status = json.loads((lab_root / "runs" / runs[0].stem / "status.json").read_text())
    assert status["state"] == "finished" and [d[0] for d in status["done"]] == ["fsync_bench"]
    assert not (reports / ".incoming").exists() and not (tmp_path / "reports").exists()


@pytest.mark.slow
def test_plain_site_where_every_host_fails_stores_the_failures(tmp_path):
    """Ansible ends a play whose hosts all failed; the play's always part still stores what there is."""
    inv = write_local_inventory(
        tmp_path / "inv.yml",
        tmp_path / "root",
        tmp_path / "wb",
        lab_run_workbench_create=True,
        lab_venv_python=str(tmp_path / "no-such-python"),  # provision fails, before any venv is made
    )
    proc = _plain(tmp_path, "-i", str(inv), str(REPO / "playbooks" / "site.yml"))
    assert proc.returncode != 0
    reports = tmp_path / "reports"
    failures = list((reports / "localhost" / "failures").glob("*.json"))
    assert len(failures) == 1, proc.stdout[-3000:] + proc.stderr
    run_id = failures[0].stem
    failure = stored.read(failures[0], "failure")
    assert failure["status"] == "failed"
    assert failure["message"] == "no results file was fetched from this host"
    record = stored.read(reports / ".runs" / f"{run_id}.json", "run_record")
    assert record["hosts"] == {"localhost": "failed"} and record["run_kind"] == "runs"
    assert "localhost: failed" in proc.stdout and (reports / "index.md").is_file()
    assert not (reports / ".incoming").exists()
    assert "a host without a results file failed earlier in the play" in proc.stdout


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs")
def test_plain_check_mode_refuses_a_too_small_workbench_as_the_real_run_does(tmp_path):
    """Issue 26, finding 4: `--check` printed check ok where the real run was refused for disk. The
    workbench is not made yet, on an 8 MiB tmpfs (the issue's /tmp/small/wb)."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    try:
        root, wb = tmp_path / "root", small / "wb"
        inv = write_local_inventory(tmp_path / "inv.yml", root, wb, lab_run_workbench_create=True)
        site = str(REPO / "playbooks" / "site.yml")
        dry = _plain(tmp_path, "-i", str(inv), site, "--check")
        assert not wb.exists() and not root.exists()  # --check created nothing
        real = _plain(tmp_path, "-i", str(inv), site)
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert dry.returncode != 0 and real.returncode != 0
    said = [
        next(line for line in p.stdout.splitlines() if "not enough free disk on the workbench" in line)
        for p in (dry, real)
    ]
    assert f"the workbench '{wb}'" in said[0] and "MiB free" in said[0]
    assert said[0].strip() == said[1].strip(), (said, dry.stdout[-3000:])


@pytest.mark.parametrize("role", sorted(ROLE_TAGS))
def test_each_role_has_a_readme_with_its_purpose_settings_tags_and_an_example(role):
    """redhat-cop: a README per role. Its purpose first, then its settings, its tags (the prefixed name
    first) and an example."""
    text = (REPO / "roles" / role / "README.md").read_text()
    assert text.startswith(f"# {role}\n\n") and text.split("\n")[2].strip(), "no purpose under the title"
    sections = dict(re.findall(r"^## (\w[^\n]*)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    assert {"Settings", "Tags", "Example"} <= set(sections), sorted(sections)
    assert f"`{role}_" in sections["Settings"]
    assert "```yaml" in sections["Example"] or "```yaml" in sections["Settings"]
    new, old = ROLE_TAGS[role]
    tags = sections["Tags"]
    assert f"`{new}`" in tags and f"`{old}`" in tags and tags.index(f"`{new}`") < tags.index(f"`{old}`")


def _task_names(cwd: Path, inv: Path, playbook: str, *select: str) -> list[str]:
    proc = _plain(cwd, "-i", str(inv), str(REPO / "playbooks" / playbook), "--list-tasks", *select)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    return [line.split("\tTAGS:")[0].strip() for line in proc.stdout.splitlines() if "\tTAGS:" in line]


@pytest.mark.slow
def test_a_roles_old_tag_and_its_prefixed_name_select_the_same_tasks(tmp_path):
    """The same commands keep working: `--tags provision` selects what `--tags lab_venv_provision` does,
    as ansible-playbook itself lists them."""
    inv = write_local_inventory(tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb")
    always = {p: _task_names(tmp_path, inv, p, "--tags", "always") for p in ("site.yml", "audit.yml")}
    runs = [("site.yml", "--tags", new, old) for new, old in ROLE_TAGS.values()]
    runs += [
        ("site.yml", "--skip-tags", "lab_run_fetch", "fetch"),
        ("audit.yml", "--tags", "host_audit", "audit"),
    ]
    for playbook, flag, new, old in runs:
        selected = _task_names(tmp_path, inv, playbook, flag, new)
        assert selected == _task_names(tmp_path, inv, playbook, flag, old), (playbook, flag, new)
        assert set(selected) > set(always[playbook]), (playbook, flag, new, selected)
