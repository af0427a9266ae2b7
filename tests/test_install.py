"""`pip install .` (not editable): the installed disklab finds its playbooks, roles and host code as package
data, and writes its reports under the current directory, never inside the package."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from disklab_host import __version__

SOURCES = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "ansible.cfg",
    "galaxy.yml",
    "meta",
    "plugins",
    "src",
    "playbooks",
    "roles",
    "inventory",
)


def _venv_with_disklab(tmp_path: Path) -> Path:
    """A fresh venv with disklab installed from a copy of the checkout, non-editable, offline.

    Its dependencies (ansible-core, ansible-runner, jinja2 ...) come from this test's own venv through a .pth
    line (only a path: the editable disklab of this venv is not activated), so nothing is downloaded.
    """
    src = tmp_path / "src-copy"
    for name in SOURCES:
        if (REPO / name).is_dir():
            skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(REPO / name, src / name, ignore=skip, symlinks=True)
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = next(Path(p) for p in (venv / "lib").glob("python3*/site-packages"))
    (purelib / "disklab-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", str(src)],
        check=True,
        timeout=300,
        env=_env(venv),
    )
    # ansible-core's console script, as pip would write it had it installed ansible-core in this venv
    (venv / "bin" / "ansible-playbook").write_text(
        f"#!{py}\nimport sys\nfrom ansible.cli.playbook import main\nsys.exit(main())\n"
    )
    (venv / "bin" / "ansible-playbook").chmod(0o755)
    return venv


def _env(venv: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DISKLAB_CWD", "ANSIBLE_CONFIG")}
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
    return env


@pytest.mark.slow
def test_a_non_editable_install_runs_an_audit_from_another_directory(tmp_path):
    venv = _venv_with_disklab(tmp_path)
    disklab = str(venv / "bin" / "disklab")
    version = subprocess.run(
        [disklab, "--version"], capture_output=True, text=True, env=_env(venv), check=True
    )
    assert version.stdout.strip() == f"disklab {__version__}"
    py = str(venv / "bin" / "python")
    where = subprocess.run(
        [
            py,
            "-c",
            "import disklab, disklab_host, disklab.runner as r; "
            "print(disklab.__file__); print(disklab_host.__file__); print(r.ansible_home())",
        ],
        capture_output=True,
        text=True,
        env=_env(venv),
        check=True,
    ).stdout.split()
    package = Path(where[0]).parent
    assert all(Path(p).is_relative_to(venv) for p in where), where  # the installed copy, not the checkout
    collection = package / "ansible_collections" / "disklab" / "lab"
    assert Path(where[2]) == collection
    for part in ("ansible.cfg", "galaxy.yml", "meta/runtime.yml", "plugins/action/lab_run_fetch.py",
                 "playbooks/site.yml", "roles/lab_run/tasks/main.yml", "inventory/local.yml"):  # fmt: skip
        assert (collection / part).is_file(), part
    assert not (collection / "playbooks" / "collections").exists()  # the checkout's link is left out

    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    inv = cwd / "inv.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": py,
                            "disklab_root": str(tmp_path / "root"),
                            "disklab_workbench": str(tmp_path / "root" / "wb"),
                            "lab_run_workbench_create": True,
                        }
                    }
                }
            }
        )
    )
    proc = subprocess.run(
        [disklab, "audit", "-i", str(inv)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=_env(venv),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "audit " in proc.stdout and "fleet index in reports/index.md" in proc.stdout
    assert len(list((cwd / "reports" / "localhost" / "audits").glob("*.json"))) == 1
    assert (cwd / "reports" / "index.md").is_file() and list(
        (cwd / "reports" / ".artifacts").glob("*/audit/stdout")
    )
    written = [p for p in package.rglob("*") if p.name in ("reports", ".lab", ".incoming", ".artifacts")]
    assert written == []  # nothing written inside the installed package
