"""What else the host did while a sample ran: the noise record of one timed interval.

A figure that moved between two runs may be the host, or what else the host was doing. So every
timed interval (a load sample up to each readiness stage, an fsync round, a write repeat, a ceiling
read) gets a record of the host-wide counters, read just before and just after it, beside its I/O
record (common/iorecord.py, which holds this process's and the device's bytes: the controller takes
the device's other I/O from the two):

- ``pressure``: pressure stall time from /proc/pressure/{cpu,io,memory} (Documentation/accounting/
  psi.rst): the seconds in the interval during which some task (``some``), or every non-idle task
  (``full``), was stalled waiting for a CPU, for I/O or for memory. Host-wide, this process included.
- ``cpu``: CPU time of every CPU from the ``cpu`` line of /proc/stat (proc(5), in USER_HZ ticks, shown
  in seconds): the whole, the time the hypervisor ran something else on this VM's CPUs (``steal``),
  and idle time with I/O outstanding (``iowait``).
- ``runnable``: /proc/stat's procs_running at both ends (tasks running or ready to run, this one
  included): an instant, where pressure is the interval's integral.
- ``swap``: pages swapped in and out (pswpin, pswpout of /proc/vmstat).

On macOS the record holds what the OS offers an unprivileged process: CPU ticks from
host_statistics(HOST_CPU_LOAD_INFO) (user, system, idle, nice: no steal and no iowait) and swap-ins
and swap-outs from host_statistics64(HOST_VM_INFO64), through ctypes; macOS has no pressure stall
counters. That path has been run only against injected test doubles on Linux, never on a Mac, and
each record says so in ``validation``. A counter that cannot be read is ``{"unavailable": reason}``.

:func:`context` gives the run-wide facts that decide how noisy a host is (the CPU frequency governor,
turbo, swap, the CPUs), recorded once per run. Standard library only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import time
from pathlib import Path

from .facts import is_unavailable, unavailable

PRESSURE = ("cpu", "io", "memory")
MACOS_VALIDATION = "macOS path run only against injected test doubles on Linux, not on real Mac hardware"
NO_PRESSURE_MACOS = "macOS has no pressure stall counters (Linux /proc/pressure)"
# macOS <mach/host_info.h> and <mach/vm_statistics.h>: flavors and counts (in natural_t words).
HOST_CPU_LOAD_INFO, HOST_CPU_LOAD_INFO_COUNT = 3, 4
HOST_VM_INFO64, HOST_VM_INFO64_COUNT = 4, 38
# Byte offsets of swapins and swapouts in struct vm_statistics64: 4 natural_t, 9 uint64, 2 natural_t,
# then decompressions and compressions (uint64) before them.
_VM64_SWAPINS, _VM64_SWAPOUTS = 112, 120
_VM64_BYTES = HOST_VM_INFO64_COUNT * 4


def parse_pressure(text: str) -> dict:
    """``{"some_us", "full_us"}`` totals (µs) from one /proc/pressure/* file; ``full`` is absent for cpu on
    older kernels. ValueError when no ``some`` line is there."""
    out = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for field in fields:
            key, _, value = field.partition("=")
            if key == "total":
                out[f"{kind}_us"] = int(value)
    if "some_us" not in out:
        raise ValueError(f"a pressure file has a 'some ... total=' line, got {text!r}")
    return out


def parse_proc_stat(text: str) -> dict:
    """The ``cpu`` line's ticks (user, nice, system, idle, iowait, irq, softirq, steal) and procs_running."""
    cpu, running = None, None
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
            ticks = [int(x) for x in fields[1:9]]
            cpu = dict(zip(names[: len(ticks)], ticks, strict=True))  # an older kernel lacks steal
        elif fields and fields[0] == "procs_running":
            running = int(fields[1])
    if cpu is None:
        raise ValueError("/proc/stat has no 'cpu' line")
    return {"ticks": cpu, "procs_running": running}


def parse_vmstat_swap(text: str) -> dict:
    """pswpin and pswpout from /proc/vmstat; ValueError when either is missing."""
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key in ("pswpin", "pswpout"):
            found[key] = int(value)
    if len(found) < 2:
        raise ValueError(f"/proc/vmstat lacks {sorted({'pswpin', 'pswpout'} - set(found))}")
    return {"in": found["pswpin"], "out": found["pswpout"]}


def _mach():
    """host_statistics and host_statistics64 through ctypes (macOS), or an unavailable fact."""
    name = ctypes.util.find_library("System")
    if not name:
        return unavailable("libSystem (host_statistics) not found")
    try:
        lib = ctypes.CDLL(name, use_errno=True)
        host = lib.mach_host_self()
        stats, stats64 = lib.host_statistics, lib.host_statistics64
    except (OSError, AttributeError) as exc:
        return unavailable(f"host_statistics not reachable: {exc}")

    def call(fn, flavor: int, words: int) -> bytes:
        buf = (ctypes.c_uint32 * words)()
        count = ctypes.c_uint32(words)
        if fn(host, flavor, ctypes.byref(buf), ctypes.byref(count)) != 0:
            raise OSError(f"host_statistics flavor {flavor} failed")
        return bytes(buf)

    def read() -> dict:
        cpu = call(stats, HOST_CPU_LOAD_INFO, HOST_CPU_LOAD_INFO_COUNT)
        vm = call(stats64, HOST_VM_INFO64, HOST_VM_INFO64_COUNT)
        user, system, idle, nice = (int.from_bytes(cpu[i : i + 4], "little") for i in range(0, 16, 4))
        return {
            "ticks": {"user": user, "system": system, "idle": idle, "nice": nice},
            "swap": {
                "in": int.from_bytes(vm[_VM64_SWAPINS : _VM64_SWAPINS + 8], "little"),
                "out": int.from_bytes(vm[_VM64_SWAPOUTS : _VM64_SWAPOUTS + 8], "little"),
            },
        }

    return read


class Probe:
    """Reads the host-wide counters of :meth:`begin` and :meth:`end` around one interval.

    ``system``, ``root`` (prefix of /proc, for tests) and ``mach`` (a callable returning macOS's
    ``{"ticks": {user, system, idle, nice}, "swap": {in, out}}``) are injectable. ``enabled=False``
    reads nothing and :meth:`end` returns None.
    """

    def __init__(self, *, enabled: bool = True, system: str | None = None, root: Path = Path("/"), mach=None):
        self.enabled = enabled
        self.system = system or platform.system()
        self.root = Path(root)
        self.tick_s = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
        self._mach = None
        if enabled and self.system == "Darwin":
            self._mach = mach if mach is not None else _mach()

    def _read_text(self, rel: str) -> str:
        return (self.root / rel).read_text()

    def _linux(self) -> dict:
        out: dict = {}
        try:
            out["pressure"] = {r: parse_pressure(self._read_text(f"proc/pressure/{r}")) for r in PRESSURE}
        except (OSError, ValueError) as exc:
            out["pressure"] = unavailable(
                f"/proc/pressure: {exc} (the kernel needs CONFIG_PSI, on by default)"
            )
        try:
            out["stat"] = parse_proc_stat(self._read_text("proc/stat"))
        except (OSError, ValueError) as exc:
            out["stat"] = unavailable(f"/proc/stat: {exc}")
        try:
            out["swap"] = parse_vmstat_swap(self._read_text("proc/vmstat"))
        except (OSError, ValueError) as exc:
            out["swap"] = unavailable(f"/proc/vmstat: {exc}")
        return out

    def _darwin(self) -> dict:
        if is_unavailable(self._mach):
            return {"pressure": unavailable(NO_PRESSURE_MACOS), "stat": self._mach, "swap": self._mach}
        try:
            got = self._mach()
        except OSError as exc:
            bad = unavailable(str(exc))
            return {"pressure": unavailable(NO_PRESSURE_MACOS), "stat": bad, "swap": bad}
        return {
            "pressure": unavailable(NO_PRESSURE_MACOS),
            "stat": {"ticks": got["ticks"], "procs_running": None},
            "swap": got["swap"],
        }

    def read(self) -> dict | None:
        """The counters now (raw), or None when disabled."""
        if not self.enabled:
            return None
        if self.system == "Linux":
            raw = self._linux()
        elif self.system == "Darwin":
            raw = self._darwin()
        else:
            bad = unavailable(f"no noise counters known on {self.system}")
            raw = {"pressure": bad, "stat": bad, "swap": bad}
        raw["t_ns"] = time.monotonic_ns()
        return raw

    begin = read

    def end(self, before: dict | None) -> dict | None:
        """The noise record of the interval since ``before`` (:meth:`begin`'s answer), or None when off."""
        if not self.enabled or before is None:
            return None
        return delta(before, self.read(), self.system, self.tick_s)


def _pressure_delta(a, b) -> dict:
    if is_unavailable(a):
        return a
    if is_unavailable(b):
        return b
    out = {}
    for r in PRESSURE:
        for kind in ("some", "full"):
            key = f"{kind}_us"
            if key in a[r] and key in b[r]:
                out[f"{r}_{kind}_s"] = max(0, b[r][key] - a[r][key]) / 1e6
    return out


def _cpu_delta(a, b, tick_s: float) -> dict:
    if is_unavailable(a):
        return a
    if is_unavailable(b):
        return b
    d = {k: max(0, b["ticks"][k] - a["ticks"][k]) for k in b["ticks"] if k in a["ticks"]}
    out = {"cpu_time_s": sum(d.values()) * tick_s, "busy_s": (sum(d.values()) - d.get("idle", 0)) * tick_s}
    for k in ("steal", "iowait"):
        if k in d:
            out[f"{k}_s"] = d[k] * tick_s
    out["tick_s"] = tick_s
    return out


def delta(before: dict, after: dict, system: str, tick_s: float) -> dict:
    """The noise record of one interval from two raw readings (see the module doc for the fields)."""
    interval = max(0, after["t_ns"] - before["t_ns"]) / 1e9
    sa, sb = before["stat"], after["stat"]
    runnable = (
        unavailable("procs_running is a Linux /proc/stat field")
        if system != "Linux" or is_unavailable(sa) or is_unavailable(sb)
        else {"begin": sa["procs_running"], "end": sb["procs_running"]}
    )
    swap_a, swap_b = before["swap"], after["swap"]
    if is_unavailable(swap_a) or is_unavailable(swap_b):
        swap = swap_a if is_unavailable(swap_a) else swap_b
    else:
        swap = {
            "in_pages": max(0, swap_b["in"] - swap_a["in"]),
            "out_pages": max(0, swap_b["out"] - swap_a["out"]),
        }
    out = {
        "interval_s": interval,
        "pressure": _pressure_delta(before["pressure"], after["pressure"]),
        "cpu": _cpu_delta(sa, sb, tick_s),
        "runnable": runnable,
        "swap": swap,
    }
    if system == "Darwin":
        out["validation"] = MACOS_VALIDATION
    return out


def not_recorded(reason: str) -> dict:
    """The noise field of an interval that has none (switched off, or an older run)."""
    return unavailable(f"no noise record: {reason}")


# --- the run's context: what makes a host noisy, read once per run ---------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def governor(root: Path = Path("/")) -> dict:
    """The CPU frequency governors in use (``{"governors": [...], "cpus": n}``), or unavailable: a VM
    usually exposes no cpufreq at all (/sys/devices/system/cpu/cpu*/cpufreq)."""
    cpus = sorted((Path(root) / "sys/devices/system/cpu").glob("cpu[0-9]*"))
    found = {g for c in cpus if (g := _read(c / "cpufreq/scaling_governor"))}
    if not found:
        return unavailable(
            "no cpufreq scaling_governor under /sys/devices/system/cpu (a VM usually has none)"
        )
    return {"governors": sorted(found), "cpus": len(cpus)}


def turbo(root: Path = Path("/")) -> dict:
    """Whether turbo / boost is on: intel_pstate's no_turbo, else cpufreq's boost; unavailable without."""
    base = Path(root) / "sys/devices/system/cpu"
    no_turbo = _read(base / "intel_pstate/no_turbo")
    if no_turbo in ("0", "1"):
        return {"on": no_turbo == "0", "source": "intel_pstate/no_turbo"}
    boost = _read(base / "cpufreq/boost")
    if boost in ("0", "1"):
        return {"on": boost == "1", "source": "cpufreq/boost"}
    return unavailable("neither intel_pstate/no_turbo nor cpufreq/boost under /sys/devices/system/cpu")


def swap_total(root: Path = Path("/")) -> dict:
    """SwapTotal and SwapFree from /proc/meminfo, in bytes; unavailable off Linux."""
    text = _read(Path(root) / "proc/meminfo")
    if text is None:
        return unavailable("/proc/meminfo is Linux only")
    got = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("SwapTotal", "SwapFree"):
            got[key] = int(rest.split()[0]) * 1024
    if len(got) < 2:
        return unavailable("/proc/meminfo has no SwapTotal/SwapFree")
    return {"total_bytes": got["SwapTotal"], "free_bytes": got["SwapFree"]}


def context(system: str | None = None, root: Path = Path("/")) -> dict:
    """The run-wide noise facts: governor, turbo, swap, CPUs and whether pressure counters exist."""
    system = system or platform.system()
    if system != "Linux":
        why = f"read from /sys and /proc on Linux; not recorded on {system}"
        return {
            "system": system,
            "cpus": os.cpu_count(),
            "governor": unavailable(why),
            "turbo": unavailable(why),
            "swap": unavailable(why),
            "pressure": unavailable(NO_PRESSURE_MACOS if system == "Darwin" else why),
        }
    pressure_ok = (Path(root) / "proc/pressure/cpu").exists()
    return {
        "system": system,
        "cpus": os.cpu_count(),
        "governor": governor(root),
        "turbo": turbo(root),
        "swap": swap_total(root),
        "pressure": {"available": True} if pressure_ok else unavailable("no /proc/pressure (CONFIG_PSI off)"),
    }
