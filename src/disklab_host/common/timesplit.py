"""Where a timed interval's wall time went, for this process: CPU, blocked on I/O, waiting to run, the rest.

Read at the start of an interval and at each mark (a load's readiness stages, an fsync round), from
this process's own counters:

- ``user_s`` and ``system_s``: CPU time of every thread (getrusage(2) RUSAGE_SELF);
- ``blocked_io_s``: time its threads spent waiting for block I/O to complete, from delay accounting
  (/proc/self/task/<tid>/stat field 42, delayacct_blkio_ticks, in clock ticks: proc(5);
  Documentation/accounting/delay-accounting.rst). The kernel counts it only while
  ``kernel.task_delayacct`` is 1; it is 0 by default, so the lab runner turns it on for its run where
  it may act as root and puts it back after (:func:`delay_accounting_on`). Else the field says why it
  was not recorded. Its resolution is one clock tick (10 ms at USER_HZ 100);
- ``waiting_s``: time its threads were ready to run but waited for a CPU (the second field of
  /proc/self/task/<tid>/schedstat, in ns: Documentation/scheduler/sched-stats.rst);
- ``rest_s``: the wall time less all of the above: sleeping on anything else (a lock, a page being
  read by another task, a timer), and whatever the counters missed. Threads run side by side, so their
  sum can pass the wall time: then ``rest_s`` is 0 and ``overlap_s`` holds the excess.

Counters are summed over the threads alive at each read; a thread that ended in the interval takes
its time with it. Major and minor faults are in the interval's I/O record (common/iorecord.py).
On macOS only getrusage's CPU time is there: macOS has no delay accounting and no per-thread
run-queue wait counters, so those fields say they were not recorded (fixture tests only, never run on
a Mac). Standard library only.
"""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path

from . import asroot
from .facts import is_unavailable, unavailable

DELAYACCT = "proc/sys/kernel/task_delayacct"
# proc(5): field 42 of /proc/<pid>/stat (1-based); the split after the ")" that ends comm starts at field 3.
_BLKIO_FIELD = 42 - 3
NO_DELAYACCT = (
    "kernel.task_delayacct was 0 (delay accounting off, the kernel's default), so no blocked-I/O time was "
    "counted; the lab turns it on for its run where it may act as root (root, or become_allowed)"
)
NOT_ON_MACOS = "not recorded on macOS: it has no per-process delay accounting or run-queue wait counters"
MACOS_VALIDATION = "macOS path run only against injected test doubles on Linux, not on real Mac hardware"


def _tasks(root: Path) -> dict:
    """{tid: (run_ns, wait_ns, blkio_ticks | None)} of this process's threads, from /proc/self/task."""
    out = {}
    base = root / "proc/self/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        try:
            run_ns, wait_ns, *_ = (base / tid / "schedstat").read_text().split()
            stat = (base / tid / "stat").read_text()
        except (OSError, ValueError):
            continue  # the thread ended between the listing and the read
        fields = stat.rsplit(")", 1)[-1].split()
        blkio = int(fields[_BLKIO_FIELD]) if len(fields) > _BLKIO_FIELD else None
        out[tid] = (int(run_ns), int(wait_ns), blkio)
    return out


def delayacct_state(root: Path = Path("/")) -> int | None:
    """kernel.task_delayacct now (0 or 1), or None when the file is not there (older kernels: always on)."""
    try:
        return int((Path(root) / DELAYACCT).read_text().strip())
    except (OSError, ValueError):
        return None


class ProcessClock:
    """This process's CPU, blocked-I/O and run-queue counters at :meth:`read`; :meth:`split` of two.

    ``system``, ``root`` (prefix of /proc) and ``getrusage`` are injectable (tests). ``enabled=False``
    reads nothing and :meth:`split` returns None.
    """

    def __init__(self, *, enabled: bool = True, system: str | None = None, root: Path = Path("/"),
                 getrusage=resource.getrusage):  # fmt: skip
        self.enabled = enabled
        self.system = system or platform.system()
        self.root = Path(root)
        self._getrusage = getrusage
        self.tick_s = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01

    def read(self) -> dict | None:
        if not self.enabled:
            return None
        ru = self._getrusage(resource.RUSAGE_SELF)
        raw = {"user_s": ru.ru_utime, "system_s": ru.ru_stime}
        if self.system == "Linux":
            raw["tasks"] = _tasks(self.root)
            raw["delayacct"] = delayacct_state(self.root)
        return raw

    def split(self, before: dict | None, after: dict | None, wall_s: float) -> dict | None:
        """The split of ``wall_s`` between two reads (see the module doc for the fields)."""
        if not self.enabled or before is None or after is None:
            return None
        return split(before, after, wall_s, self.system, self.tick_s)


def split(before: dict, after: dict, wall_s: float, system: str, tick_s: float) -> dict:
    """The time split of one interval from two raw reads."""
    user = max(0.0, after["user_s"] - before["user_s"])
    system_s = max(0.0, after["system_s"] - before["system_s"])
    out: dict = {"wall_s": wall_s, "user_s": user, "system_s": system_s}
    if system == "Linux":
        tb, ta = before.get("tasks") or {}, after.get("tasks") or {}
        if not ta:
            out["waiting_s"] = unavailable("/proc/self/task/*/schedstat could not be read")
        else:
            out["waiting_s"] = sum(max(0, w - tb.get(t, (0, 0, 0))[1]) for t, (_, w, _) in ta.items()) / 1e9
        acct = (before.get("delayacct"), after.get("delayacct"))
        if not ta or any(b is None for _, _, b in ta.values()):
            out["blocked_io_s"] = unavailable(
                "/proc/self/task/*/stat has no field 42 (delayacct_blkio_ticks)"
            )
        elif 0 in acct:
            out["blocked_io_s"] = unavailable(NO_DELAYACCT)
        else:
            ticks = sum(max(0, b - (tb.get(t, (0, 0, 0))[2] or 0)) for t, (_, _, b) in ta.items())
            out["blocked_io_s"] = ticks * tick_s
        out["threads"] = len(ta)
    else:
        out["waiting_s"] = unavailable(NOT_ON_MACOS if system == "Darwin" else f"not recorded on {system}")
        out["blocked_io_s"] = unavailable(NOT_ON_MACOS if system == "Darwin" else f"not recorded on {system}")
        if system == "Darwin":
            out["validation"] = MACOS_VALIDATION
    counted = (
        user + system_s + sum(v for k in ("waiting_s", "blocked_io_s") if not is_unavailable(v := out[k]))
    )
    rest = wall_s - counted
    out["rest_s"] = max(0.0, rest)
    if rest < 0:
        out["overlap_s"] = -rest
    return out


def put_back_left_on(mark: Path, become_allowed: bool, root: Path = Path("/")) -> str | None:
    """After a runner ended: where its mark is still there (it was killed before it could set the switch
    back), set kernel.task_delayacct back to 0 and remove the mark; what was done, or None."""
    if not mark.is_file():
        return None
    if delayacct_state(root) != 1:
        mark.unlink(missing_ok=True)
        return None
    back = delay_accounting_restore({"state": "turned_on", "mark": str(mark)}, become_allowed, root)
    if back["restored"] is True:
        return "the runner ended before it set kernel.task_delayacct back; its supervisor set it back to 0"
    said = back["restored"]
    return f"the runner ended before it set kernel.task_delayacct back, and its supervisor could not: {said}"


def not_recorded(reason: str) -> dict:
    """The time-split field of an interval that has none (switched off, or an older run)."""
    return unavailable(f"no time split: {reason}")


# Kept in the lab root while a run holds kernel.task_delayacct at 1 that it found at 0: a run killed before it
# could set it back leaves this file, and the next run in that lab root sets it back when it ends.
DELAYACCT_MARK = "delayacct-turned-on"


def delay_accounting_on(
    become_allowed: bool, system: str | None = None, root: Path = Path("/"), mark: Path | None = None
) -> dict:
    """Turn kernel.task_delayacct on for this run where the lab may act as root; the record of what it did.

    Returns ``{"state": "already_on" | "turned_on" | "off" | "not_applicable", "previous": 0 | 1 | None,
    "why": str}``; pass it to :func:`delay_accounting_restore` when the run ends. Never raises: a host
    where it cannot be turned on runs the lab without blocked-I/O times, and each split says why.
    ``mark`` (a file in the lab root, whose lock the caller holds) is written while the switch is this
    run's to set back; found at 1 with the mark there, the switch was left on by a killed run, and this
    run sets it back in its place.
    """
    system = system or platform.system()
    if system != "Linux":
        return {"state": "not_applicable", "previous": None, "why": NOT_ON_MACOS if system == "Darwin" else
                f"delay accounting is a Linux counter; this host runs {system}"}  # fmt: skip
    previous = delayacct_state(root)
    if previous is None:
        why = "this kernel has no kernel.task_delayacct switch: delay accounting is always on"
        return {"state": "already_on", "previous": None, "why": why}
    if previous == 1 and mark is not None and mark.is_file():
        why = (
            "kernel.task_delayacct was 1, left on by an earlier lab run in this lab root that was killed "
            "before it could set it back to 0; this run sets it back to 0 after"
        )
        return {"state": "turned_on", "previous": 0, "why": why, "mark": str(mark)}
    if previous == 1:
        return {"state": "already_on", "previous": 1, "why": "kernel.task_delayacct was already 1"}
    if mark is not None:
        try:
            mark.write_text("kernel.task_delayacct was 0 and a lab run set it to 1\n")
        except OSError as exc:
            return {
                "state": "off",
                "previous": 0,
                "why": f"{NO_DELAYACCT}: {mark} could not be written ({exc})",
            }
    try:
        asroot.write_file(
            str(Path(root) / DELAYACCT), b"1", become_allowed, "turning on kernel.task_delayacct"
        )
    except (OSError, PermissionError) as exc:
        return {"state": "off", "previous": 0, "why": f"{NO_DELAYACCT}: {exc}"}
    if delayacct_state(root) != 1:
        return {"state": "off", "previous": 0, "why": f"{NO_DELAYACCT}: the write did not take"}
    why = "kernel.task_delayacct was 0; the lab set it to 1 for this run and sets it back to 0 after"
    return {"state": "turned_on", "previous": 0, "why": why, **({"mark": str(mark)} if mark else {})}


def delay_accounting_restore(record: dict, become_allowed: bool, root: Path = Path("/")) -> dict:
    """Put kernel.task_delayacct back to 0 when :func:`delay_accounting_on` turned it on; the record, with
    ``restored`` (True, or the reason it could not be)."""
    if record.get("state") != "turned_on":
        return record
    record = dict(record)
    mark = record.pop("mark", None)
    try:
        asroot.write_file(
            str(Path(root) / DELAYACCT), b"0", become_allowed, "restoring kernel.task_delayacct"
        )
        restored: object = delayacct_state(root) == 0 or "the write did not take"
    except (OSError, PermissionError) as exc:
        restored = f"could not set it back to 0: {exc}"
    if restored is True and mark:
        Path(mark).unlink(missing_ok=True)
    return {**record, "restored": restored}
