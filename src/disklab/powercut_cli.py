"""``disklab powercut FILE.py:FUNC``: check a user's save function against simulated crashes.

The controller never imports torch. This module checks the input, picks a
Python that has torch, and runs ``python -m disklab_host.powercut.simulate check`` with it,
passing its output and exit status through: 0 when no crash state under the
chosen model is corrupt or missing, 1 when one is, 2 for bad input (a
one-line error, never a traceback), which includes a save that returns
without leaving its state dict at the path in the declared --format.
``main`` parses the raw argument list itself: ``-h``/``--help`` print the
usage and return 0, and options may come before or after the spec.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from disklab_host.common.child import child_env
from disklab_host.powercut import check, states

LOCAL_LAB_PYTHON = Path(".lab/venv/bin/python")
SIMULATOR = "disklab_host.powercut.simulate"
MODELS = tuple(states.MODELS)
FORMATS = check.FORMATS


class UsageError(ValueError):
    """Bad input; the message is the one line the user sees."""


def _has_torch(python: str) -> bool:
    probe = [python, "-c", "import torch, safetensors"]
    try:
        return subprocess.run(probe, capture_output=True, check=False, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pick_python(requested: str | None) -> str:
    """--python if given, else this interpreter if it has torch, else ./.lab/venv/bin/python.

    Raises UsageError when the chosen Python cannot import torch and safetensors.
    """
    if requested:
        if not _has_torch(requested):
            raise UsageError(f"--python {requested} cannot import torch and safetensors")
        return requested
    if _has_torch(sys.executable):
        return sys.executable
    if LOCAL_LAB_PYTHON.is_file() and _has_torch(str(LOCAL_LAB_PYTHON)):
        return str(LOCAL_LAB_PYTHON)
    raise UsageError("no Python with torch found: pass --python PATH (the lab venv's python)")


def check_spec(spec: str) -> str:
    """Validate FILE.py:FUNC; returns it with FILE made absolute. Raises UsageError."""
    if ":" not in spec:
        raise UsageError(f"save function must be FILE.py:FUNC, got {spec!r}")
    where, func = spec.rsplit(":", 1)
    if where == "recipe":
        return spec
    if not func.isidentifier():
        raise UsageError(f"{func!r} is not a Python function name")
    if not Path(where).is_file():
        raise UsageError(f"{where}: no such file")
    return f"{Path(where).resolve()}:{func}"


EPILOG = """exit status:
  0  no crash state is corrupt or missing under --model
  1  at least one is (the first unsafe point is printed)
  2  bad input, one line on stderr: no such file or function, the function
     raises, strace or a Python with torch is missing, or a save returned
     without leaving its state dict at the path in --format (a save that
     writes nothing or elsewhere, or the other format)

Options may come before or after FILE.py:FUNC. See docs/powercut.md."""


def parser() -> argparse.ArgumentParser:
    """The ``disklab powercut`` argument parser (``-h``/``--help`` print usage and the exit statuses)."""
    ap = argparse.ArgumentParser(
        prog="disklab powercut",
        description="Check your own save function against simulated crashes (process kill, power cut).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("spec", metavar="FILE.py:FUNC", help="FUNC(state_dict, path) saves a checkpoint to path")
    ap.add_argument("--model", default="power-cut", choices=MODELS, help="model that decides the exit status")
    ap.add_argument("--format", default="torch", choices=FORMATS, help="what FUNC writes (default torch)")
    ap.add_argument("--state-mib", type=int, default=4, help="state dict size in MiB, a multiple of 4")
    ap.add_argument("--python", metavar="PY", default=None, help="a Python with torch and safetensors")
    ap.add_argument("--json", metavar="OUT", type=Path, default=None, help="also write the full result here")
    return ap


def main(argv: list[str]) -> int:
    """Run the check on ``argv`` (the raw arguments after ``powercut``); returns the exit status.

    0 safe, 1 unsafe, 2 bad input; ``-h``/``--help`` print the usage and return 0.
    """
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed its one-line error or the help
        return int(exc.code or 0)
    try:
        spec = check_spec(args.spec)
        if shutil.which("strace") is None:
            raise UsageError("strace is not installed (on Debian/Ubuntu: apt-get install strace)")
        if args.state_mib <= 0 or args.state_mib % 4:
            raise UsageError(f"--state-mib must be a positive multiple of 4, got {args.state_mib}")
        python = pick_python(args.python)
    except UsageError as exc:
        print(f"disklab powercut: {exc}", file=sys.stderr)
        return 2
    cmd = [python, "-m", SIMULATOR, "check", spec, "--model", args.model, "--format", args.format]
    cmd += ["--state-mib", str(args.state_mib)]
    if args.json:
        cmd += ["--json", str(args.json.resolve())]
    rc = subprocess.run(cmd, check=False, env=child_env()).returncode
    if rc not in (0, 1, 2):
        print(f"disklab powercut: the host-side check ended with status {rc}", file=sys.stderr)
        return 2
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
