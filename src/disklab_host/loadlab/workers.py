"""Two workers load the same file: private copies against shared page-cache pages.

Two load_one.py processes load the same big .pt file at once, first with
torch.load, then with torch.load-mmap, touch every tensor and hold. While
both hold, their memory is read from /proc/PID/smaps_rollup (proc(5)): PSS
splits each shared page between the processes that map it, so two torch.load
workers show private copies and two mmap workers split one set of page-cache
pages (the lesson, Measure: "two mmap workers cost one page cache's worth").
Linux only; elsewhere the result says it was not measured.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from ..common.child import child_env, module_argv
from ..common.facts import not_run
from ..common.units import KIB

LOAD_ONE = "disklab_host.loadlab.load_one"
# Runs "$@" in a child forked by a small shell, keeping stdin (see fresh_argv).
_LAUNCH = ["/bin/sh", "-c", 'exec 3<&0; "$@" <&3 3<&- & wait $!', "sh"]
METHODS = ("torch.load", "torch.load-mmap")
# smaps_rollup lines read, and the field each one fills (values are kB in the file).
_FIELDS = {
    "Rss": "rss_bytes",
    "Pss": "pss_bytes",
    "Shared_Clean": "shared_clean_bytes",
    "Shared_Dirty": "shared_dirty_bytes",
    "Private_Clean": "private_clean_bytes",
    "Private_Dirty": "private_dirty_bytes",
}


def fresh_argv(argv: list[str]) -> list[str]:
    """``argv`` wrapped so the measured process's peak RSS starts from its own, not the caller's.

    ru_maxrss survives execve(2) (getrusage(2)), and at exec Linux folds the
    old address space's high-water RSS into it: a child exec'd straight from
    the lab runner, which holds torch and the weights it just generated, would
    report the runner's peak as its own. A fork(2) starts a new, zeroed count,
    so the command runs in a child forked by a small shell, whose exec then
    adds only the shell's few MiB. The process that runs ``argv`` is not the
    Popen's pid: load_one.py reports its own ``pid``.
    """
    return [*_LAUNCH, *argv]


def parse_smaps_rollup(text: str) -> dict:
    """Memory of one process, in bytes, from the text of /proc/PID/smaps_rollup.

    Returns rss, pss, the four shared/private clean/dirty fields, and their
    sums ``shared_bytes`` and ``private_bytes``. The file gives kB (KiB).
    Raises ValueError when a field is missing.
    """
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":") and parts[0][:-1] in _FIELDS:
            found[_FIELDS[parts[0][:-1]]] = int(parts[1]) * KIB
    missing = [k for k, v in _FIELDS.items() if v not in found]
    if missing:
        raise ValueError(f"smaps_rollup lacks the fields {missing}")
    found["shared_bytes"] = found["shared_clean_bytes"] + found["shared_dirty_bytes"]
    found["private_bytes"] = found["private_clean_bytes"] + found["private_dirty_bytes"]
    return found


def smaps_rollup(pid: int) -> dict:
    """:func:`parse_smaps_rollup` of /proc/PID/smaps_rollup (Linux 4.14+)."""
    return parse_smaps_rollup(Path(f"/proc/{pid}/smaps_rollup").read_text())


def two_workers(path: str, method: str, *, timeout_s: float = 600) -> dict:
    """Start two load_one.py ``--hold`` workers on ``path``, read their memory, let them exit.

    Both are started before either is read, so each loads while the other
    may already hold the file. Returns ``{"method", "workers": [{"pid",
    "loader_return_s", "all_touched_s", "rss_bytes", "pss_bytes",
    "private_bytes", "shared_bytes", ...}], "pss_sum_bytes",
    "private_sum_bytes"}``. Raises RuntimeError with the worker's stderr when
    a worker fails.
    """
    procs = [
        subprocess.Popen(
            fresh_argv(module_argv(LOAD_ONE, method, str(path), "--hold")),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for _ in range(2)
    ]
    workers = []
    try:
        records = []
        for p in procs:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {p.pid} ({method}) failed: {p.stderr.read()[-2000:]}")
            records.append(json.loads(line))
        for rec in records:  # both hold now
            workers.append(
                {
                    "pid": rec["pid"],
                    "loader_return_s": rec["stages"]["loader_return"]["time_s"],
                    "all_touched_s": rec["stages"]["all_touched"]["time_s"],
                    **smaps_rollup(rec["pid"]),
                }
            )
    finally:
        deadline = time.monotonic() + timeout_s
        for p in procs:
            try:
                p.stdin.write("\n")
                p.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    return {
        "method": method,
        "workers": workers,
        "pss_sum_bytes": sum(w["pss_bytes"] for w in workers),
        "private_sum_bytes": sum(w["private_bytes"] for w in workers),
    }


def run(path: str, system: str) -> dict:
    """Both methods on ``path``: ``{"status": "ok", "file_size_bytes", "runs": [...]}``,
    or not_run with the reason on a system without smaps_rollup."""
    if system != "Linux":
        return not_run(f"PSS/private/shared need /proc/PID/smaps_rollup (Linux); not measured on {system}")
    return {
        "status": "ok",
        "file_size_bytes": Path(path).stat().st_size,
        "runs": [two_workers(path, m) for m in METHODS],
    }
