"""disklab.lab as an Ansible collection: built from the checkout with ansible-galaxy, installed into a fresh
directory, used by its full names from a user's own playbook and as `ansible-playbook disklab.lab.audit`,
and put into an execution environment's build context by ansible-builder. Localhost only."""

from __future__ import annotations

import ast
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
from disklab_host.common import hostnames, result

BIN = Path(sys.executable).parent
GALAXY = BIN / "ansible-galaxy"
PLAYBOOK = BIN / "ansible-playbook"
BUILDER = BIN / "ansible-builder"
DOC = BIN / "ansible-doc"
# The controller-side code the collection's filters share (plugins/plugin_utils/NAME.py): each a link to the
# host package's standard-library module, its one source.
PLUGIN_UTILS = {
    "clock": "src/disklab_host/together/clock.py",
    "hostnames": "src/disklab_host/common/hostnames.py",
    "pipelines": "src/disklab_host/common/pipelines.py",
    "result": "src/disklab_host/common/result.py",
}


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
                 "plugins/filter/host_file.yml", "plugins/filter/result.yml",
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


def _filters() -> dict[str, list[str]]:
    """Each filter the collection's filter plugins name, with its function's parameters, read from the
    plugin files' source (FilterModule.filters' dict and the functions it names)."""
    found = {}
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        tree = ast.parse(path.read_text())
        funcs = {f.name: [a.arg for a in f.args.args] for f in tree.body if isinstance(f, ast.FunctionDef)}
        module = next(c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "FilterModule")
        mapping = next(n for n in ast.walk(module) if isinstance(n, ast.Dict))
        for key, value in zip(mapping.keys, mapping.values, strict=True):
            found[key.value] = funcs[value.id]
    return found


def test_the_filters_share_code_through_plugin_utils_one_source_no_path_edits():
    """plugins/plugin_utils/ holds links to the host package's modules (one source, no copy kept by hand);
    the filter plugins import them by the collection's name, and none edits sys.path or loads a file."""
    for name, source in PLUGIN_UTILS.items():
        link = REPO / "plugins" / "plugin_utils" / f"{name}.py"
        assert link.is_symlink() and link.resolve() == (REPO / source).resolve(), link
        assert not os.path.isabs(os.readlink(link)), "a relative link, so it holds in a built collection"
        imported = {
            (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
            for n in ast.walk(ast.parse(link.read_text()))
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names
        }
        assert imported <= set(sys.stdlib_module_names) | {"__future__"}, (name, imported)  # standard library
    for path in (REPO / "plugins").rglob("*.py"):
        if "plugin_utils" in path.parts:
            continue
        text = path.read_text()
        assert "sys.path" not in text and "spec_from_file_location" not in text, path
        assert "import disklab_host" not in text and "from disklab_host" not in text, path
    # the filters whose rules are the host package's take them from plugin_utils (spec_typed uses Ansible's)
    for name in ("hostnames", "result"):
        text = (REPO / "plugins" / "filter" / f"{name}.py").read_text()
        assert "from ansible_collections.disklab.lab.plugins.plugin_utils import " in text, name


def _doc(name: str, env: dict, cwd: Path) -> dict:
    proc = subprocess.run([str(DOC), "-t", "filter", "--json", name], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and "ERROR" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)[name]


@pytest.mark.heavy
def test_ansible_doc_shows_every_filter_from_the_checkout_and_the_installed_collection(installed, tmp_path):
    filters = _filters()
    assert set(filters) == {
        "host_file", "host_file_refusal", "result", "result_line", "no_result", "last_line", "spec_typed"
    }  # fmt: skip
    where = {
        "checkout": (_env(ANSIBLE_CONFIG=str(REPO / "ansible.cfg")), REPO),
        "installed": (_env(ANSIBLE_COLLECTIONS_PATH=str(installed), HOME=str(tmp_path)), tmp_path),
    }
    for kind, (env, cwd) in where.items():
        listed = subprocess.run([str(DOC), "-t", "filter", "-l", "-j", "disklab.lab"], capture_output=True,
                                text=True, env=env, cwd=cwd, timeout=120, check=True).stdout  # fmt: skip
        shown = json.loads(listed)
        assert set(shown) == {f"disklab.lab.{f}" for f in filters}, (kind, shown)
        assert "UNDOCUMENTED" not in shown.values(), (kind, shown)
        for name, params in filters.items():
            got = _doc(f"disklab.lab.{name}", env, cwd)
            doc = got["doc"]
            assert doc["name"] == name and doc["short_description"] and doc["description"], (kind, name)
            assert doc["collection"] == "disklab.lab" and doc["filename"].endswith(f"/filter/{name}.yml")
            positional = [p.strip() for p in doc["positional"].split(",")]
            assert positional == ["_input", *params[1:]], (kind, name, positional, params)  # the function's
            assert set(doc["options"]) == set(positional) and all(
                o["description"] for o in doc["options"].values()
            )
            assert f"disklab.lab.{name}" in got["examples"], (kind, name)
            assert got["return"]["_value"]["description"], (kind, name)


# An older disklab_host: a result module with another rule, and no hostnames module (before it had one).
OLD_RESULT = """MARKER = "old-result "
def parse(text):
    return {"read by": "an older disklab_host"}
def line(obj):
    return "old-result line"
"""


@pytest.mark.heavy
def test_an_older_disklab_host_on_the_path_changes_nothing_the_filters_load(installed, tmp_path):
    """A controller whose Python path holds an older disklab_host (PYTHONPATH, or an old pip install): each
    filter still applies its own collection's rule, run from the checkout and from the installed
    collection. Expected values are the host package's own functions here."""
    old = tmp_path / "old"
    (old / "disklab_host" / "common").mkdir(parents=True)
    (old / "disklab_host" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (old / "disklab_host" / "common" / "__init__.py").write_text("")
    (old / "disklab_host" / "common" / "result.py").write_text(OLD_RESULT)
    shadowed = subprocess.run(
        [sys.executable, "-c", "import disklab_host.common.result as r; print(r.__file__)"],
        capture_output=True, text=True, env=_env(PYTHONPATH=str(old)), check=True,
    ).stdout  # fmt: skip
    assert shadowed.strip() == str(old / "disklab_host" / "common" / "result.py")  # it is what Python finds
    out = {"stdout": 'a banner\ndisklab-result {"pid": 4242, "ok": true}\n', "stderr": "", "rc": 0}
    names = ["../x", "web-01", "index.html", ".hidden", "a b|<c>"]
    (tmp_path / "inv.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}}}}))  # fmt: skip
    content = (
        "{{ {'files': names | map('disklab.lab.host_file') | list, 'result': out | disklab.lab.result,"
        " 'line': out | disklab.lab.result_line,"
        " 'none': {'stdout': 'nothing'} | disklab.lab.no_result('h1', 'the task')} | to_json }}"
    )
    (tmp_path / "filters.yml").write_text(yaml.safe_dump([{
        "name": "Apply the filters", "hosts": "all", "gather_facts": False,
        "vars": {"out": out, "names": names},
        "tasks": [{"name": "Write what they give",
                   "ansible.builtin.copy": {"dest": "{{ dest }}", "mode": "0644", "content": content}}],
    }]))  # fmt: skip
    expected = {
        "files": [hostnames.encode(n) for n in names],
        "result": result.parse(out["stdout"]),
        "line": result.line(result.parse(out["stdout"])),
    }
    assert expected["result"] == {"pid": 4242, "ok": True} and expected["files"][0] == "%2E.%2Fx"
    where = {
        "checkout": _env(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), PYTHONPATH=str(old)),
        "installed": _env(ANSIBLE_COLLECTIONS_PATH=str(installed), HOME=str(tmp_path), PYTHONPATH=str(old)),
    }
    for kind, env in where.items():
        dest = tmp_path / f"{kind}.json"
        proc = subprocess.run(
            [str(PLAYBOOK), "-i", "inv.yml", "filters.yml", "-e", f"dest={dest}"], cwd=tmp_path,
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, (kind, proc.stdout[-3000:] + proc.stderr)
        got = json.loads(dest.read_text())
        assert {k: got[k] for k in expected} == expected, kind
        assert got["none"].startswith("h1: the task 'the task' printed no disklab-result line (rc unknown)")
        assert "its first lines: nothing" in got["none"], kind


@pytest.mark.heavy
def test_the_built_collection_carries_plugin_utils_as_links_to_its_own_src(tarball, installed):
    """ansible-galaxy keeps each link (to a file inside the collection), so the installed collection's filters
    share its own src/ too: the same bytes as the checkout's one source."""
    with tarfile.open(tarball) as tar:
        links = {m.name: m.linkname for m in tar.getmembers() if m.name.startswith("plugins/plugin_utils/")
                 and not m.isdir()}  # fmt: skip
    assert links == {
        f"plugins/plugin_utils/{n}.py": os.readlink(REPO / "plugins" / "plugin_utils" / f"{n}.py")
        for n in PLUGIN_UTILS
    }
    root = installed / "ansible_collections" / "disklab" / "lab"
    for name, source in PLUGIN_UTILS.items():
        used = root / "plugins" / "plugin_utils" / f"{name}.py"
        assert (
            used.resolve() == (root / source).resolve() and used.read_bytes() == (REPO / source).read_bytes()
        )
