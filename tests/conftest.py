"""Shared test setup: lab scripts are importable, and tests get a workbench on the real filesystem."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LABSCRIPTS = REPO / "labscripts"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(LABSCRIPTS))


@pytest.fixture
def workbench(tmp_path: Path) -> Path:
    """A directory on the real filesystem that holds /tmp (ext4 on the dev machine)."""
    wb = tmp_path / "workbench"
    wb.mkdir()
    return wb
