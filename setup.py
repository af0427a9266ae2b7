"""Build hook only (the project is described in pyproject.toml).

A wheel carries the Ansible side of disklab, the collection disklab.lab, as
package data in ``disklab/ansible_collections/disklab/lab/``: ansible.cfg,
galaxy.yml, meta/, plugins/, playbooks/, roles/ and inventory/ are copied there
from the checkout's top directory (the collection's root) when the package is
built, so an installed ``disklab`` (``pip install .``, ``pipx install .``) finds
them with importlib.resources (disklab.runner.ansible_home) and puts
``disklab/`` first on Ansible's collections path. The link
``playbooks/collections`` (the checkout's own way to the collection) is left
out. An editable install uses the checkout's own files and copies nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ANSIBLE_FILES = ("ansible.cfg", "galaxy.yml", "meta", "plugins", "playbooks", "roles", "inventory")
SKIP = shutil.ignore_patterns("__pycache__", "*.retry", "collections")  # collections: the checkout's link


class BuildPyWithAnsible(build_py):
    """build_py, then the Ansible files into ``<build_lib>/disklab/ansible_collections/disklab/lab``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "disklab" / "ansible_collections" / "disklab" / "lab"
        shutil.rmtree(dest.parents[1], ignore_errors=True)
        dest.mkdir(parents=True)
        for name in ANSIBLE_FILES:
            src = HERE / name
            if src.is_dir():
                shutil.copytree(src, dest / name, ignore=SKIP)
            else:
                shutil.copy2(src, dest / name)


setup(cmdclass={"build_py": BuildPyWithAnsible})
