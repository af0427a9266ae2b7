"""Running a command as root from the detached lab runner: directly as root, or ``sudo -n`` with become.

Standard library only. The runner has no terminal, so sudo must never prompt: ``sudo -n`` fails at once
where this login needs a password, and the caller is told so in sudo's own words.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def prefix(become_allowed: bool, what: str) -> list[str]:
    """The command prefix that runs as root: [] as root, ``sudo -n`` with become; PermissionError else."""
    if os.geteuid() == 0:
        return []
    if not become_allowed:
        raise PermissionError(f"{what} needs root: run as root or set become_allowed")
    if shutil.which("sudo") is None:
        raise PermissionError(f"{what} needs root and sudo is not installed")
    return ["sudo", "-n"]


def run(argv: list[str], what: str, hint: str = "", **kw) -> None:
    """Run ``argv`` (``sudo -n ...`` off root); a refusal raises PermissionError with sudo's own words and
    ``hint`` (what the caller can do instead)."""
    proc = subprocess.run(argv, capture_output=True, check=False, **kw)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
        raise PermissionError(
            f"{what} needs root and `{' '.join(argv)}` was refused (exit status {proc.returncode}: "
            f"{said[-1] if said else 'no message'}); the lab runs without a terminal, so a sudo that asks "
            f"for a password cannot be used{f': {hint}' if hint else ''}"
        )


def write_file(path: str, data: bytes, become_allowed: bool, what: str, hint: str = "") -> None:
    """Write ``data`` to a root-only file such as /proc/sys/...: directly as root, else ``sudo -n tee``."""
    pre = prefix(become_allowed, what)
    if not pre:
        fd = os.open(path, os.O_WRONLY)  # write-only: some of these files are not readable
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return
    run(pre + ["tee", path], what, hint, input=data, timeout=60)
