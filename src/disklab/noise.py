"""Which samples ran while the host was busy: the bounds, and how a figure says it.

The host records, for every timed interval (common/noise.py, common/timesplit.py, common/iorecord.py),
what else it did meanwhile. This module reads one interval's records against stated bounds and says
whether the sample was *disturbed*, and why; :mod:`disklab.verdicts` then keeps a disturbed sample
from being read as a change of the host. The bounds (docs/statistics.md gives the measurements behind
them):

* **other I/O** on the sample's device: the device's bytes (read and written) less the process's own
  (/proc/self/io), less :data:`JOURNAL_ALLOWANCE` times its own writes (a filesystem writes its
  journal and metadata for each sync: ext4 wrote 2 to 3 times the data of a 4 KiB fsync here), at
  least :data:`OTHER_IO_MIN_BYTES` and at a rate of at least :data:`OTHER_IO_MIN_MIB_S`;
* **waiting for a CPU**: the process's threads waited to run (schedstat) for at least
  :data:`WAIT_SHARE` of the interval while other tasks used at least that much CPU time (the CPUs'
  busy time less iowait, steal and the process's own CPU time: where they did not, its threads
  waited for each other, which is the load itself, not other work); where waiting is not recorded,
  pressure stall on the CPU (``cpu some``) for at least :data:`CPU_PRESSURE_SHARE`;
* **steal**: the hypervisor ran something else on this VM's CPUs for at least :data:`STEAL_SHARE` of
  their time, judged only over at least :data:`STEAL_MIN_CPU_S` of CPU time (USER_HZ ticks are 10 ms);
* **memory**: tasks stalled on memory (``memory some``) for at least :data:`MEMORY_PRESSURE_SHARE` of
  the interval, or any page swapped in or out.

An interval whose records were not kept (a run from before results version 6) is *not recorded*:
neither quiet nor disturbed. Controller side, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from disklab_host.common.units import MIB

# A filesystem's own writes for each of the sample's writes (journal, metadata): not other work.
JOURNAL_ALLOWANCE = 4.0
OTHER_IO_MIN_BYTES = 1 * MIB
OTHER_IO_MIN_MIB_S = 16.0
WAIT_SHARE = 0.10
CPU_PRESSURE_SHARE = 0.50
STEAL_SHARE = 0.10
STEAL_MIN_CPU_S = 0.2
MEMORY_PRESSURE_SHARE = 0.05
KINDS = ("other_io", "cpu_wait", "steal", "memory", "swap")


@dataclass(frozen=True)
class Disturbance:
    """One reason a sample was disturbed: ``kind`` (one of :data:`KINDS`), its size, and its words."""

    kind: str
    value: float
    words: str


def _secs(x: float) -> str:
    """Seconds in a sentence: ``0.42 s``, or ms below 0.1 s (``18 ms``)."""
    return f"{x * 1e3:.0f} ms" if x < 0.1 else f"{x:.2f} s"


def _ok(x: object) -> bool:
    return isinstance(x, dict) and "unavailable" not in x


def _other_io(io: dict, interval_s: float) -> Disturbance | None:
    dev, own = io.get("device"), io.get("process")
    if not _ok(dev) or not _ok(own) or interval_s <= 0:
        return None
    own_bytes = own["read_bytes"] + own["write_bytes"]
    other = dev["read_bytes"] + dev["written_bytes"] - own_bytes - JOURNAL_ALLOWANCE * own["write_bytes"]
    rate = other / MIB / interval_s
    if other >= OTHER_IO_MIN_BYTES and rate >= OTHER_IO_MIN_MIB_S:
        return Disturbance("other_io", rate, f"the device served {rate:,.0f} MiB/s of other I/O")
    return None


def _others_cpu_s(split: dict, noise: dict) -> float | None:
    """CPU time other tasks used in the interval: every CPU's busy time less iowait, steal and the
    process's own user and system time; None where a part of it was not recorded."""
    cpu = noise.get("cpu") if _ok(noise) else None
    own = [split.get(k) for k in ("user_s", "system_s")]
    if not _ok(cpu) or "busy_s" not in cpu or not all(isinstance(v, (int, float)) for v in own):
        return None
    return max(0.0, cpu["busy_s"] - cpu.get("iowait_s", 0.0) - cpu.get("steal_s", 0.0) - sum(own))


def _cpu(split: dict, noise: dict, interval_s: float) -> Disturbance | None:
    wall = split.get("wall_s") if _ok(split) else None
    waiting = split.get("waiting_s") if _ok(split) else None
    if isinstance(waiting, (int, float)) and wall:
        share = waiting / wall
        others = _others_cpu_s(split, noise)
        if share >= WAIT_SHARE and (others is None or others >= waiting):
            threads = "its threads" if (split.get("threads") or 1) > 1 else "it"
            used = "" if others is None else f" while other tasks used {_secs(others)} of CPU"
            return Disturbance(
                "cpu_wait", share, f"{threads} waited {_secs(waiting)} for a CPU in its {_secs(wall)}{used}"
            )
        return None
    pressure = noise.get("pressure") if _ok(noise) else None
    if _ok(pressure) and "cpu_some_s" in pressure and interval_s > 0:
        share = pressure["cpu_some_s"] / interval_s
        if share >= CPU_PRESSURE_SHARE:
            return Disturbance("cpu_wait", share, f"tasks waited for a CPU for {share:.0%} of it")
    return None


def _steal(noise: dict) -> Disturbance | None:
    cpu = noise.get("cpu") if _ok(noise) else None
    if not _ok(cpu) or "steal_s" not in cpu or cpu["cpu_time_s"] < STEAL_MIN_CPU_S:
        return None
    share = cpu["steal_s"] / cpu["cpu_time_s"]
    if share >= STEAL_SHARE:
        return Disturbance("steal", share, f"the hypervisor took {share:.0%} of the CPUs' time (steal)")
    return None


def _memory(noise: dict, interval_s: float) -> list[Disturbance]:
    out = []
    pressure = noise.get("pressure")
    if _ok(pressure) and "memory_some_s" in pressure and interval_s > 0:
        share = pressure["memory_some_s"] / interval_s
        if share >= MEMORY_PRESSURE_SHARE:
            out.append(Disturbance("memory", share, f"tasks stalled on memory for {share:.0%} of it"))
    swap = noise.get("swap")
    if _ok(swap) and swap["in_pages"] + swap["out_pages"] > 0:
        pages = swap["in_pages"] + swap["out_pages"]
        out.append(Disturbance("swap", pages, f"the host swapped {pages:,} pages"))
    return out


def disturbances(io_record: object, noise: object, time_split: object) -> list[Disturbance] | None:
    """Every bound one interval broke (empty: quiet), or None when its noise was not recorded."""
    if not _ok(noise):
        return None
    interval_s = noise.get("interval_s") or 0.0
    found = []
    if _ok(io_record):
        found.append(_other_io(io_record, interval_s))
    found.append(_cpu(time_split if _ok(time_split) else {}, noise, interval_s))
    found.append(_steal(noise))
    return [d for d in found if d is not None] + _memory(noise, interval_s)


def flag(found: list[Disturbance] | None) -> str | None:
    """One unit's flag for :class:`disklab.verdicts.Side`: None when quiet or not recorded, else why."""
    if not found:
        return None
    return "; ".join(d.words for d in found)


def summary(per_unit: list[list[Disturbance] | None], word: str = "samples") -> str | None:
    """A side's noise in one sentence: ``2 of 3 samples ran while the device served up to 180 MiB/s of
    other I/O``; None when no unit was disturbed; says so when none was recorded."""
    if per_unit and all(u is None for u in per_unit):
        return f"its noise was not recorded (a run from before results version 6): no {word} judged quiet"
    busy = [u for u in per_unit if u]
    if not busy:
        return None
    worst: dict[str, Disturbance] = {}
    for unit in busy:
        for d in unit:
            if d.kind not in worst or d.value > worst[d.kind].value:
                worst[d.kind] = d
    words = "; ".join(worst[k].words for k in KINDS if k in worst)
    worst_of = "at worst, " if len(busy) > 1 else ""
    return f"{len(busy)} of {len(per_unit)} {word} ran while the host was busy ({worst_of}{words})"


def flags_of(found: list[list[Disturbance] | None], word: str = "samples") -> tuple[tuple | None, str | None]:
    """(flags, summary) of a side's units from their :func:`disturbances`: the flags per unit (None as a
    whole when no unit's noise was recorded) and :func:`summary`'s sentence."""
    if all(f is None for f in found):
        return None, summary(found, word)
    return tuple(flag(f) for f in found), summary(found, word)
