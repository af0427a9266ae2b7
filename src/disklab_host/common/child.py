"""How a host-side module starts another one in a fresh process.

Children are started as ``python -m disklab_host.<module>`` with the package's
root (a directory, or the zipapp the controller ships) on PYTHONPATH, so they
find the package wherever it was unpacked or shipped, with no sys.path edits.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The directory (or zip archive) that holds the disklab_host package.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def module_argv(module: str, *args: str) -> list[str]:
    """``[python, -m, module, *args]`` with this interpreter (the lab venv's on a host)."""
    return [sys.executable, "-m", module, *args]


def child_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's) with the package root first on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != PACKAGE_ROOT]
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *rest])
    return env
