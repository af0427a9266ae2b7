"""Shared test setup: tests get a workbench on the real filesystem, and tiny lab sizes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def workbench(tmp_path: Path) -> Path:
    """A directory on the real filesystem that holds /tmp (ext4 on the dev machine)."""
    wb = tmp_path / "workbench"
    wb.mkdir()
    return wb


# Sizes small enough for tests; every lab step still runs for real.
TINY_SIZES = {
    "lab_run_write_buffering_calls": 2000,
    "lab_run_fsync_blocks": 50,
    "lab_run_big_write_mib": 4,
    "lab_run_crash_state_mib": 8,
    "lab_run_crash_time_points": 2,
    "lab_run_crash_repeats": 1,
    "lab_run_powercut_state_mib": 4,
    "lab_run_ceiling_mib": 4,
    "lab_run_load_big_mib": 32,
    "lab_run_load_repeats": 1,
}


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory) -> Path:
    """One lab root for the whole session, so the lab venv (torch) is installed once."""
    return tmp_path_factory.mktemp("labroot")


def write_local_inventory(path: Path, lab_root: Path, workbench: Path, **overrides) -> Path:
    """A localhost inventory for the real playbook, at tiny sizes unless overridden."""
    import yaml

    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "disklab_root": str(lab_root),
        "disklab_workbench": str(workbench),
        **TINY_SIZES,
        **overrides,
    }
    path.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": host_vars}}}))
    return path


# The side-by-side tables of reports/fleet.md (src/disklab/fleet.py), in their order.
FLEET_TABLES = (
    "Runs side by side",
    "Durable sync p50",
    "Cold load at all_touched",
    "Warm load at all_touched",
    "Cold load at first_response",
    "Warm load at first_response",
    "Cold ceiling",
    "Peak RSS at all_touched",
    "Peak RSS at first_response",
    "Power-cut verdicts",
)


def fleet_tables(page: str) -> dict[str, dict]:
    """The tables of a reports/fleet.md: ``{title: {"header": [cells], "rows": {label: [cells]}}}``."""
    out = {}
    for chunk in page.split("\n## ")[1:]:
        title, _, body = chunk.partition("\n")
        lines = [ln for ln in body.splitlines() if ln.startswith("| ")]
        cells = [[c.strip() for c in ln.strip().strip("|").split(" | ")] for ln in lines]
        out[title] = {"header": cells[0] if cells else [], "rows": {c[0]: c[1:] for c in cells[1:]}}
    return out


def run_disklab(*args: str, reports: Path, timeout: int = 900):
    """Run the disklab CLI in a fresh process, as a user would; returns CompletedProcess."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "disklab.cli", "--reports", str(reports), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def pytest_collection_modifyitems(items):
    """A test that shares a set-up of module or session scope is heavy (make test-fast leaves it out; make
    test runs it): such a set-up is shared because it is costly (a lab root and its venv, a real lab step,
    a measured results document)."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs if info is not None else {}
        if any(d and d[-1].scope != "function" for d in defs.values()):
            item.add_marker(pytest.mark.heavy)


# Where the suite's time goes (printed after pytest's slowest-tests listing): the whole run, and each shared
# set-up, a fixture of module or session scope, by name and the module that defines it.
_SUITE_START = time.monotonic()
_SHARED_SETUPS: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    start = time.monotonic()
    yield
    if fixturedef.scope != "function":
        where = Path(fixturedef.baseid.split("::")[0]).stem or "conftest"
        key = f"{where}::{fixturedef.argname}"
        _SHARED_SETUPS[key] = _SHARED_SETUPS.get(key, 0.0) + time.monotonic() - start


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    total = time.monotonic() - _SUITE_START
    shared = sorted(_SHARED_SETUPS.items(), key=lambda kv: -kv[1])
    top = ", ".join(f"{name} {secs:.0f} s" for name, secs in shared[:8] if secs >= 1)
    terminalreporter.write_line(
        f"suite time: {total:.0f} s in all; shared set-ups {sum(s for _, s in shared):.0f} s"
        + (f" (slowest: {top})" if top else "")
    )
