"""The page cache's layers through a SIGKILL: a naive save's bytes survive the kill as dirty pages.

A naive save (``torch.save(state, path)``, no fsync) runs in a child process.
It writes the whole file, closes it and prints ``saved``; the parent then
counts the file's pages (cachestat(2): cached, dirty, writeback), SIGKILLs the
child before it can sync anything, counts again, then opens the file itself,
fsyncs it and counts a third time. So a reader sees the bytes sit in the page
cache as dirty pages, survive the process's death (the kernel, not the
process, owns them), and leave for the device at the parent's fsync. A kill
is not a power cut: the dirty pages would not have survived that (the
powercut section).

Where cachestat is missing each count is ``{"unavailable": reason}`` and the
rows still give the file's size. Run the child alone:
``python -m disklab_host.checkpoint.layers --child PATH MIB``.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..cache.layers import count
from ..common.child import child_env, module_argv

MODULE = "disklab_host.checkpoint.layers"
SAVED = "saved"
STEP = 1
MAX_MIB = 16  # the kill-and-count save needs no more than this to show its pages (4 tensors)
WAIT_S = 600


def _row(point: str, what: str, path: Path) -> dict:
    return {"point": point, "what": what, "st_size_bytes": path.stat().st_size, "pages": count(path)}


def _wait_saved(proc: subprocess.Popen, timeout_s: float) -> None:
    """Block until the child prints ``saved``; RuntimeError with its stderr when it dies or stalls."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    fd = proc.stdout.fileno()
    while SAVED.encode() not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"the naive save did not say {SAVED!r} within {timeout_s:.0f} s")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                err = proc.stderr.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"the naive save exited before {SAVED!r}: {err}")
            buf += chunk


def kill_after_naive_save(workdir: Path, state_mib: int) -> dict:
    """Run one naive save in a child, SIGKILL it after ``saved``, fsync from the parent; count each time.

    ``state_mib`` is capped at :data:`MAX_MIB` and rounded down to a multiple of 4
    (saver.make_state). Returns ``{"status": "ok", "save": "torch.save(state, path), no fsync",
    "state_mib", "size_bytes", "killed_by", "exit_signal", "rows": [{"point", "what",
    "st_size_bytes", "pages"}], "cachestat": "ok" | reason}`` with rows after the save, after the
    kill and after the parent's fsync. The file is deleted afterwards.
    """
    mib = max(4, min(MAX_MIB, state_mib) // 4 * 4)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "layers_naive.pt"
    path.unlink(missing_ok=True)
    proc = subprocess.Popen(
        module_argv(MODULE, "--child", str(path), str(mib)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    rows = []
    try:
        _wait_saved(proc, WAIT_S)
        rows.append(_row("after_save", "the child's torch.save returned (file closed, nothing synced)", path))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        rows.append(_row("after_kill", "SIGKILL, the child reaped", path))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        rows.append(_row("after_fsync", "the parent's os.fsync on the file", path))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
        size = path.stat().st_size if path.exists() else 0
        path.unlink(missing_ok=True)
    first = rows[0]["pages"]
    return {
        "status": "ok",
        "save": "torch.save(state, path), no fsync, in a child process",
        "state_mib": mib,
        "size_bytes": size,
        "killed_by": "SIGKILL after the child printed 'saved'",
        "exit_signal": -proc.returncode if proc.returncode is not None and proc.returncode < 0 else None,
        "rows": rows,
        "cachestat": first.get("unavailable", "ok"),
    }


def _child(path: str, mib: int) -> int:
    import torch  # only the child saves

    from . import saver

    torch.save(saver.make_state(mib, STEP), path)
    print(SAVED, flush=True)
    sys.stdin.read()  # wait to be killed
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("PATH", "MIB"), required=True)
    args = ap.parse_args(argv)
    return _child(args.child[0], int(args.child[1]))


if __name__ == "__main__":
    sys.exit(main())
