"""Shared test setup: tests get a workbench on the real filesystem, and tiny lab sizes."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

import shared

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# torch's CPU operators run on one thread in the tests (OpenMP's OMP_NUM_THREADS, read when torch is
# imported; a value already set is kept). `make test` runs four workers on two cores, and every lab step,
# load sample and crash test beside them is a process of its own, so a second thread per torch process costs
# more than it gives: tests/test_load.py alone, with and without it, took 60 s against 89 s wall and 66
# against 83 CPU seconds (10 against 20 of them system time). What the tests start inherits it, and so do
# the test fleet's SSH sessions (their sshd's SetEnv, tests/fleet/fleet.py), though not what sudo starts
# (sudo resets the environment). No test checks a time against a target; `make bench`, which does, runs
# with the machine's own setting.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# ansible-core replaces sys.intern with a callable object when its parser is imported (disklab.passthrough
# reads -e with it, in the test process too), and torch._dynamo, imported lazily by torch.optim, then refuses
# to load ("substitute_in_graph expects a function"). Each test worker imports torch anyway (the test modules
# do); importing torch._dynamo first, before any test, keeps the two apart. The disklab controller never
# imports torch, and the lab's torch processes never import Ansible.
with contextlib.suppress(ImportError):
    import torch._dynamo  # noqa: F401


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


# pip's byte-compiling of torch is two thirds of provisioning a lab venv here (38 s against 14 s for torch
# alone, pip install in a new venv): a test whose hosts provision from nothing, and that does not test what
# pip compiles, passes this (lab_venv_pip_args reaches pip and the venv's record as any extra argument).
PROVISION_QUICKLY = {"lab_venv_pip_args": ["--no-compile"]}
# A test-fleet host is a network namespace with no route out: its pip asks PyPI first for every package, and
# waits through urllib3's five retries (about 8 s of backoff) before that lookup fails and the machine's
# local wheel directories (pip.conf) answer it. That wait was most of a fleet host's provisioning (about
# 300 s of the netfs host's, with the loaders). ``--retries=0`` skips the wait, not the lookup: pip finds
# the same wheels. Only for namespace hosts: a controller-side pip that can reach an index keeps its retries.
PROVISION_IN_NAMESPACE = {"lab_venv_pip_args": [*PROVISION_QUICKLY["lab_venv_pip_args"], "--retries=0"]}


# The Python a localhost lab venv is made from (lab_venv_python): the machine's own, the base the test fleet's
# hosts make theirs from too, so the whole run provisions one lab venv template (tests/shared.py), not one
# for this base and one for the test venv's. Ansible itself still runs the modules with the test venv's
# Python (ansible_python_interpreter), as a user's controller would with its own.
LAB_VENV_BASE = "/usr/bin/python3"


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory) -> Path:
    """One lab root for the worker's session, its venv the run's one provisioned lab venv (tests/shared.py):
    the lab_venv role keeps it, so torch is installed once per run, not once per worker."""
    root = tmp_path_factory.mktemp("labroot")
    shared.seed_lab_venv(tmp_path_factory, root / "venv", LAB_VENV_BASE)
    return root


def write_local_inventory(path: Path, lab_root: Path, workbench: Path, **overrides) -> Path:
    """A localhost inventory for the real playbook, at tiny sizes unless overridden."""
    import yaml

    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "lab_venv_python": LAB_VENV_BASE,
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


def copy_render_caches(rendered: Path, reports: Path) -> None:
    """Copy what a render of the reports tree ``rendered`` drew and checked to the same places in
    ``reports``: each plot (its PNG and the digest beside it that disklab.plotting.draw_once writes) and
    each host's record of the stored files found valid (stored.VALID_FILE). Both are caches the product
    keys on content: a render of ``reports`` draws again only a plot whose data or drawing code differ,
    and checks again only a stored file whose bytes differ, while every page is rendered in full. For a
    module whose tests render the same stored runs again and again and check the pages, not the plots or
    the schema checks (those have their own tests: test_report, test_stored_values)."""
    from disklab import fleet, stored

    for src in sorted(rendered.rglob("*")):
        cache = src.parent.name in ("plots", fleet.PLOT_DIR) or src.name == stored.VALID_FILE
        if src.is_file() and cache:
            dst = reports / src.relative_to(rendered)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def unrendered_copy(rendered: Path, reports: Path) -> Path:
    """A new reports tree ``reports`` holding the stored files of the rendered tree ``rendered`` (the same
    bytes its write path wrote) and its render caches (:func:`copy_render_caches`), without the pages, the
    render stamps and the index's digest: a render of it renders every page again. Returns ``reports``."""
    from disklab import reportcache

    done = ("*.md", "*.html", reportcache.STAMP_FILE, reportcache.INDEX_STAMP_FILE)
    shutil.copytree(rendered, reports, ignore=shutil.ignore_patterns(*done))
    return reports


def collection_plugin(dotted: str):
    """A plugin module of the checkout's collection imported as Ansible imports it, by its collection name
    (``filter.result``: ansible_collections.disklab.lab.plugins.filter.result), through Ansible's collection
    loader with the checkout's collections path (ansible.cfg) first."""
    import importlib

    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader([str(REPO / "playbooks" / "collections")])
    return importlib.import_module(f"ansible_collections.disklab.lab.plugins.{dotted}")


def viewer_heading_ids(markdown: str) -> list[tuple[str, str]]:
    """(id, heading text) of each heading of a markdown page, in order, as GitHub's viewer makes them,
    written out here apart from disklab: the heading's text (backslash escapes, entities, code spans' and
    emphasis' marks undone), lowercased, every character but letters, numbers, ``-``, ``_`` and spaces
    dropped, each space a ``-``; a repeated id gets ``-1``, ``-2`` in page order."""
    import html
    import re
    import unicodedata

    ids, seen, fenced = [], set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6} +(.*?)(?: +#+)? *$", line)
        if not m:
            continue
        text = html.unescape(re.sub(r"\\(.)", r"\1", m[1].replace("`", "").replace("**", "")))
        base = "".join(
            ch for ch in text.strip().lower() if ch in "-_ " or unicodedata.category(ch)[0] in "LMN"
        ).replace(" ", "-")
        uniq, n = base, 0
        while uniq in seen:
            n += 1
            uniq = f"{base}-{n}"
        seen.add(uniq)
        ids.append((uniq, text.strip()))
    return ids


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


# The modules that take longest, longest first, from the suite's own per-module times (a run's
# --junitxml, setup and teardown included). `make test` hands whole modules to its workers (pytest-xdist's
# loadfile) in collection order, so these start first and the short ones fill in around them.
LONGEST_FIRST = (
    "test_fleet_profiles",
    "test_fleet_users_world",
    "test_fleet_lab",
    "test_fleet_netfs",
    "test_fleet_together",
    "test_load",
    "test_playbook_local",
    "test_loaders",
    "test_savers",
    "test_powercut_cli",
    "test_killed_controller",
    "test_provision",
    "test_fleet_infra",
    "test_powercut",
    "test_lint",
)
# The modules that go after all the rest. test_cache holds a test that empties the whole page cache, which
# waits for every test in flight to end and stops new ones from starting meanwhile (tests/shared.py). At the
# start of a run the tests in flight are lab runs and fleets being made (a first test's setup of 30 s and
# more), and three workers stood idle behind it (about 114 worker-seconds in one run); at the end it waits
# only for the tail's last tests, while the queue has nothing left to start anyway.
LAST = ("test_cache",)


def pytest_collection_modifyitems(items):
    """Order the modules longest first (:data:`LONGEST_FIRST`), then the rest in their order, then
    :data:`LAST`; and mark heavy a test that shares a set-up of module or session scope (make test-fast
    leaves it out; make test runs it): such a set-up is shared because it is costly (a lab root and its
    venv, a real lab step, a measured results document)."""
    # every module in neither list ranks between them; the sort is stable, so they keep their order
    rest = len(LONGEST_FIRST)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)} | {name: rest + 1 for name in LAST}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).stem, rest))
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs if info is not None else {}
        if any(d and d[-1].scope != "function" for d in defs.values()):
            item.add_marker(pytest.mark.heavy)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every test holds the page cache shared for its setup, call and teardown (a module's shared set-up is
    made in its first test's setup), and a test marked ``drops_page_cache`` holds it alone
    (tests/shared.py)."""
    with shared.page_cache(exclusive=item.get_closest_marker("drops_page_cache") is not None):
        yield


# Where the suite's time goes (printed after pytest's slowest-tests listing): the whole run, and each shared
# set-up, a fixture of module or session scope, by name and the module that defines it. Under pytest-xdist
# each worker times its own set-ups and sends them to the controller when it ends (workeroutput).
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


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: hand the set-up times to the controller
        workeroutput["shared_setups"] = dict(_SHARED_SETUPS)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: the controller, as each worker ends
def pytest_testnodedown(node, error):
    for key, secs in getattr(node, "workeroutput", {}).get("shared_setups", {}).items():
        _SHARED_SETUPS[key] = _SHARED_SETUPS.get(key, 0.0) + secs


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    total = time.monotonic() - _SUITE_START
    setups = sorted(_SHARED_SETUPS.items(), key=lambda kv: -kv[1])
    top = ", ".join(f"{name} {secs:.0f} s" for name, secs in setups[:8] if secs >= 1)
    workers = getattr(terminalreporter.config.option, "numprocesses", None)
    terminalreporter.write_line(
        f"suite time: {total:.0f} s in all"
        + (f" on {workers} workers" if workers else "")
        + f"; shared set-ups {sum(s for _, s in setups):.0f} s"
        + (f" (slowest: {top})" if top else "")
    )
