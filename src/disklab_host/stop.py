"""Stop the lab run that holds a lab root: ``python disklab_host.pyz stop --lab-root DIR``.

The controller runs this on every host after Ctrl-C (or SIGTERM). It reads the
holder of ``<lab root>/lab.lock`` (disklab_host.lab), sends SIGTERM to its
process group (the lab runner leads its own group, so its savers and loaders
stop with it), waits for the lock to be released and the runner to be gone, and
falls back to SIGKILL.
The runner cleans the files of the step it was in and writes no results.
With ``--workbench``, the loop devices, mounts and FUSE processes that the
realfs step's journal still holds are then ended (realfs.mounts.sweep): a
runner killed outright could not end them itself.
Prints one result line (common.result: ``disklab-result`` and a JSON object):
{"stopped": bool, "run_id", "step", "forced", "reason"} and, with --workbench,
"swept": {"ended": [...], "errors": [...]}.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from .common.lock import holder_of
from .common.result import emit as emit_result
from .lab import LOCK_NAME

GRACE_S = 30.0


def _wait_free(path: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if holder_of(path) is None:
            return True
        time.sleep(0.1)
    return holder_of(path) is None


def _wait_gone(pid: int, timeout_s: float) -> None:
    """Wait until process ``pid`` no longer exists: the lock is released a moment before it exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)


def stop(lab_root: Path, grace_s: float = GRACE_S) -> dict:
    """Stop the run holding ``lab_root``; see the module docstring for the record returned."""
    path = lab_root / LOCK_NAME
    holder = holder_of(path)
    if holder is None:
        return {"stopped": False, "run_id": None, "step": None, "forced": False,
                "reason": f"no lab run holds {lab_root}"}  # fmt: skip
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 1:
        return {"stopped": False, "run_id": holder.get("run_id"), "step": holder.get("step"), "forced": False,
                "reason": f"the lock on {lab_root} names no process id"}  # fmt: skip
    forced = False
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        if _wait_free(path, wait_s):
            _wait_gone(pid, 5.0)
            break
        forced = True
    return {"stopped": True, "run_id": holder.get("run_id"), "step": holder.get("step"), "forced": forced,
            "reason": None}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab-root", required=True)
    ap.add_argument("--grace-s", type=float, default=GRACE_S)
    ap.add_argument("--workbench", help="sweep the realfs step's journal of kernel resources there too")
    args = ap.parse_args(argv)
    said = stop(Path(os.path.expanduser(args.lab_root)), args.grace_s)
    if args.workbench and sys.platform.startswith("linux"):
        from .realfs.mounts import JOURNAL_NAME, sweep

        ended, errors = sweep(Path(os.path.expanduser(args.workbench)) / JOURNAL_NAME)
        said["swept"] = {"ended": ended, "errors": errors}
    emit_result(said)
    return 0


if __name__ == "__main__":
    sys.exit(main())
