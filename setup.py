"""Build hook only (the project is described in pyproject.toml).

A wheel carries the Ansible side of disklab as package data, in
``disklab/ansible/``: ansible.cfg, playbooks/, roles/ and inventory/ are copied
there from the checkout's top directory when the package is built, so an
installed ``disklab`` (``pip install .``, ``pipx install .``) finds them with
importlib.resources (disklab.runner.ansible_home). An editable install uses the
checkout's own files and copies nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ANSIBLE_FILES = ("ansible.cfg", "playbooks", "roles", "inventory")


class BuildPyWithAnsible(build_py):
    """build_py, then the Ansible files into ``<build_lib>/disklab/ansible``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "disklab" / "ansible"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for name in ANSIBLE_FILES:
            src = HERE / name
            if src.is_dir():
                shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.retry"))
            else:
                shutil.copy2(src, dest / name)


setup(cmdclass={"build_py": BuildPyWithAnsible})
