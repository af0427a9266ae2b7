"""What the tests of one pytest run share across its workers (pytest-xdist), and locks on machine state.

`make test` runs the suite in several worker processes (``pytest -n``, one test module per worker at a
time). These things must then hold across processes:

- **One lab venv per run.** Provisioning torch into a venv takes a minute of both cores. A test that
  does not test provisioning gets its lab venv as hard links of one venv that the real provisioning
  command made once in this run (:func:`seed_lab_venv`): the same files, the same record, so the
  lab_venv role keeps it exactly as it keeps a venv it made itself on an earlier run. Every lab venv
  of the run is made from ``/usr/bin/python3`` (conftest.LAB_VENV_BASE, the fleet hosts' Python), so one
  template serves them all. Provisioning itself stays tested from nothing (tests/test_provision.py, and
  the fresh, mac-like, sudo-password and network-filesystem fleet hosts, the last with the loaders).
- **Machine-wide state changes one at a time**: a test that changes a setting every process sees
  (``vm.dirty_expire_centisecs``) holds :func:`machine_lock` exclusively, and a test that compares it
  with what it recorded holds it shared; a test that empties the whole page cache (``drop_caches``)
  holds :func:`page_cache` exclusively, while every other test holds it shared.
- **Fleet ids** are reserved across processes by tests/fleet/fleet.py's ``free_fleet_id``.
- **A real measurement that many modules read** (test_report's ``linux_doc``: the write steps run on
  this host at tiny sizes, and its audit; test_report_answers' ``full_doc``: a real crash and
  pickle_safety run added) is made once per run by the first worker that asks and read back by every
  other (:func:`once_per_run`), instead of once per module.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from disklab_host.common.result import parse as parse_result
from disklab_host.venvprobe import RECORD_NAME

REPO = Path(__file__).resolve().parent.parent
LOCK_DIR = Path("/tmp/disklab-test-locks")
LAB_VENV_DEFAULTS = REPO / "roles" / "lab_venv" / "defaults" / "main.yml"
PROVISION_TIMEOUT_S = 1800


def shared_dir(tmp_path_factory) -> Path:
    """A directory every worker of this pytest run sees (xdist gives each worker a basetemp below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def flock(path: Path, shared: bool = False) -> Iterator[None]:
    """Hold an flock(2) on ``path`` (made if missing), shared or exclusive, for the ``with`` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def once_per_run(tmp_path_factory, name: str, make: Callable[[Path], dict]) -> dict:
    """``make(folder)``, a JSON document, made once in this pytest run and read by every caller after.

    The first caller of any worker runs ``make`` with ``folder``, a new directory every worker sees (a
    workbench, say: it stays for the run), and writes the result beside it; the others wait on the lock
    and read that file. Every caller gets its own copy, as a module-scoped fixture of its own would. A
    ``make`` that raises leaves nothing behind, so the next caller tries again.
    """
    root = shared_dir(tmp_path_factory) / f"once-{name}"
    result = root / "result.json"
    with flock(root.with_suffix(".lock")):
        if not result.exists():
            folder = root / "work"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            partial = root / "result.json.partial"
            partial.write_text(json.dumps(make(folder)))
            partial.rename(result)
    return json.loads(result.read_text())


def machine_lock(name: str, shared: bool = False):
    """The machine-wide lock ``name`` (``vm_sysctl``): exclusive to change that state, shared to read it
    and rely on it. Machine-wide, so two pytest runs side by side take turns too."""
    return flock(LOCK_DIR / f"{name}.lock", shared=shared)


@contextlib.contextmanager
def page_cache(exclusive: bool = False) -> Iterator[None]:
    """Hold the page cache: shared by every test while it runs (conftest), exclusively by a test that
    empties the whole machine's page cache (marker ``drops_page_cache``), which would otherwise turn
    another test's warm file cold under it.

    A gate lock comes first, so an exclusive holder waiting for the tests in flight to end stops new
    ones from starting meanwhile (flock(2) alone would let shared holders starve it)."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_DIR / "page_cache.lock", "a") as f:
        with flock(LOCK_DIR / "page_cache.gate"):
            fcntl.flock(f.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _role_pins() -> tuple[list[str], str]:
    """The lab_venv role's default pins and torch index (roles/lab_venv/defaults/main.yml, read as the
    role reads it), so the venv made here is the venv the role would make."""
    defaults = yaml.safe_load(LAB_VENV_DEFAULTS.read_text())
    return list(defaults["lab_venv_packages"]), str(defaults["lab_venv_torch_index"])


def lab_venv_template(tmp_path_factory, python: str, loaders: tuple[str, ...] = ()) -> Path:
    """The run's one lab venv for the base interpreter ``python`` (and the production ``loaders``, installed
    beside the pins as lab_venv_loaders does), made by the provisioning command (``disklab_host
    provision``, with the role's pins) the first time any worker asks; waits while another worker makes it.
    Returns the venv's path. Raises AssertionError with provision's output when it fails."""
    key = hashlib.sha256(" ".join([python, *loaders]).encode()).hexdigest()[:12]
    root = shared_dir(tmp_path_factory) / f"labvenv-{key}"
    venv = root / "venv"
    with flock(root.with_suffix(".lock")):
        if not (venv / RECORD_NAME).exists():
            pins, index = _role_pins()
            argv = [python, "-m", "disklab_host", "provision", f"--venv={venv}", f"--torch-index={index}"]
            argv += [f"--loader={name}" for name in loaders]
            env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
            proc = subprocess.run(
                argv + [f"--pin={p}" for p in pins],
                capture_output=True,
                text=True,
                env=env,
                timeout=PROVISION_TIMEOUT_S,
                check=False,
            )
            assert proc.returncode == 0, f"provisioning the run's lab venv failed: {proc.stdout}{proc.stderr}"
            installed = parse_result(proc.stdout).get("loaders") or {}
            failed = {n: r for n, r in installed.items() if r.get("status") != "ok"}
            assert not failed, f"the loaders could not be installed into the run's lab venv: {failed}"
    return venv


def seed_lab_venv(tmp_path_factory, venv: Path, python: str, loaders: tuple[str, ...] = ()) -> bool:
    """Give ``venv`` (a host's ``<lab root>/venv``) the run's lab venv for ``python`` as hard links, when it
    does not exist yet; returns whether it seeded. Hard links cost no copy, and Python replaces a
    ``.pyc`` by rename, so a host writing its own caches never changes the template."""
    venv = Path(venv)
    if venv.exists():
        return False
    template = lab_venv_template(tmp_path_factory, python, loaders)
    venv.parent.mkdir(parents=True, exist_ok=True)
    partial = venv.with_name(venv.name + ".seeding")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(["cp", "-al", str(template), str(partial)], check=True)
    partial.rename(venv)
    return True


def seed_fleet_hosts(tmp_path_factory, fleet, names: list[str], loaders: tuple[str, ...] = ()) -> None:
    """Seed the lab venv of each of the fleet's hosts ``names`` (their own lab roots, their own Python),
    with the production ``loaders`` in it: every run on them then sets lab_venv_loaders to the same."""
    for name in names:
        h = fleet.host(name)
        python = h.get("python", "/usr/bin/python3")
        seed_lab_venv(tmp_path_factory, Path(h["lab_venv_root"]) / "venv", python, loaders)
