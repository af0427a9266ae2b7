"""Running pip and the venv command: make the venv (``-m venv``, ensurepip) and fill it with its own pip,
from the hash lock (disklab_host.lock: ``--require-hashes --no-deps``, a file with another hash refused
naming the package) or from the pins; remove a venv the plan rebuilds.

A failed command is Failed with what it said went wrong: its last ERROR line that names the failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .. import lock as locklib
from .. import venvprobe
from .errors import Failed, Refused

SUBPROCESS_TIMEOUT_S = 3600  # one pip install of torch over a slow link


def venv_python(venv: Path) -> Path:
    """The venv's interpreter, ``PATH/bin/python`` (Linux and macOS)."""
    return venv / "bin" / "python"


def clean_env() -> dict:
    """This process's environment without PYTHONPATH and PYTHONHOME, so the venv's Python sees only
    the venv (the zipapp's entry puts itself on PYTHONPATH for its own children)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


# The line pip ends a failed resolve with; it says where pip's docs are, not what failed, so the reason is
# taken from the ERROR line before it ("No matching distribution found for async-timeout>=4.0.3; ...", "Cannot
# install X because these package versions have conflicting dependencies.").
PIP_POINTER = "ResolutionImpossible: for help visit"


def _last_words(output: str) -> str:
    """What a failed pip or venv command said went wrong: its last ERROR line that names the failure (not
    pip's closing pointer to its docs), else its last ERROR line, else its last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    err = [ln for ln in lines if ln.startswith("ERROR")]
    named = [ln for ln in err if PIP_POINTER not in ln]
    return (named or err or lines or [""])[-1]


def run(argv: list[str], what: str) -> None:
    """Run a venv or pip command; raise Failed with its exit status and what it said went wrong."""
    try:
        env = clean_env()
        cp = subprocess.run(
            argv, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Failed(f"{what} failed: {' '.join(argv)}: {exc}") from None
    if cp.returncode != 0:
        last = _last_words(cp.stderr + "\n" + cp.stdout)
        raise Failed(
            f"{what} failed (exit {cp.returncode}): {' '.join(argv)}: {last}", last, cp.stdout + cp.stderr
        )


def run_lock(commands: list[list[str]], lock: locklib.Lock, what: str) -> None:
    """Run pip's installs of a lock (locklib.commands); Refused, naming the package, where the index served
    a file with a hash the lock does not list (locklib.hash_refusal), Failed for anything else."""
    for argv in commands:
        try:
            run(argv, what)
        except Failed as exc:
            refusal = locklib.hash_refusal(exc.output, lock.name)
            if refusal:
                raise Refused(refusal) from None
            raise


def install(
    venv: Path,
    pins: list[str],
    torch_pin: str,
    index: str | None,
    pip_args: list[str],
    lock: locklib.Lock | None = None,
) -> None:
    """Make the venv with this interpreter's ``-m venv`` (ensurepip) and install into it with its own pip.

    With a lock, every package in it, each file checked by its hash (lock.commands); Refused, naming the
    package, where the index serves a file with a hash the lock does not list. Without one: with an index,
    torch alone comes from it first (``--no-deps``); then every pin and the extra pip arguments from the
    default index, where torch already satisfies its pin.
    """
    venv.parent.mkdir(parents=True, exist_ok=True)
    try:
        run([sys.executable, "-m", "venv", str(venv)], "creating the venv")
    except Failed as exc:
        hint = "on Debian and Ubuntu, `python3 -m venv` needs the python3-venv package"
        raise Failed(f"{exc} ({hint})") from None
    pip = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check"]
    if lock is not None:
        run_lock(locklib.commands(pip, venv, lock, pip_args), lock, f"installing the lock {lock.name}")
        return
    if index is not None:
        torch_only = [*pip, "--no-deps", "--index-url", index, f"torch=={torch_pin}"]
        run(torch_only, f"installing torch from {index}")
    run([*pip, *pins, *pip_args], "installing the pinned packages")


def remove_venv(venv: Path) -> None:
    """Remove a venv that venvrecord.plan found to be a venv (a record or a pyvenv.cfg).

    The record goes first and pyvenv.cfg last, so a removal cut short leaves a directory that the plan
    still takes for a venv (pyvenv.cfg, no record: rebuilt) or an empty one (created), never one it
    refuses.
    """
    (venv / venvprobe.RECORD_NAME).unlink(missing_ok=True)
    for child in venv.iterdir():
        if child.name == "pyvenv.cfg":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    (venv / "pyvenv.cfg").unlink(missing_ok=True)
    venv.rmdir()
