"""The playbooks and roles pass ansible-lint's production profile (`make lint` runs the same command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

ANSIBLE_LINT = Path(sys.executable).parent / "ansible-lint"


@pytest.mark.slow
@pytest.mark.skipif(not ANSIBLE_LINT.exists(), reason="ansible-lint is not installed in this venv")
def test_playbooks_and_roles_pass_ansible_lint_production():
    proc = subprocess.run([str(ANSIBLE_LINT), "--profile", "production", "--nocolor", "playbooks", "roles"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in proc.stderr + proc.stdout
