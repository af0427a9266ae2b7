"""The crash lab's gate: a saver (each rank of it) saves once, says its pid, and waits for strace.

The first save does the framework's lazy imports and first-call work (transformers imports much of itself
on its first ``save_pretrained``), so the recorded and the killed saves that follow it make the same calls
in the same order, and strace, attached only then (``disklab_host.savers.kill``), neither sees nor slows
the start-up.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from ..checkpoint import killpoint


def wait(where: Path, rank: int, warm, timeout_s: float) -> None:
    """The crash lab's gate: one save first (``warm``, into ``where``/warm, removed: the framework's lazy
    imports and first-call work are done before strace attaches), then this process's pid in
    ``where``/pid-RANK, then wait for ``where``/go (the crash lab has attached strace)."""
    warm()
    shutil.rmtree(where / "warm", ignore_errors=True)
    killpoint.allow_tracing()  # strace attaches to this process, not its child (Yama ptrace_scope 1)
    tmp = where / f".pid-{rank}"
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, where / f"pid-{rank}")
    deadline = time.monotonic() + timeout_s
    while not (where / "go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the crash lab did not open the gate within {timeout_s:g} s")
        time.sleep(0.005)
