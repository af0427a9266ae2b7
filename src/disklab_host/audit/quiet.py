"""How quiet this host is for measuring: pyperf-style checks, read by the audit, nothing changed.

A figure is the host's storage only while nothing else competes with it. pyperf checks the frequency
governor, turbo, ASLR and isolated CPUs before a benchmark and says what to change (``pyperf system
tune``); disklab's audit reads the same kind of facts for a storage lab and gives advice, each check
``{"check", "state": "ok" | "advice" | "unknown", "found", "advice"}``:

- ``governor``: the CPU frequency governor (/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor);
- ``turbo``: turbo or boost (intel_pstate/no_turbo, cpufreq/boost): a clock that moves with heat and load;
- ``swap``: swap in use (/proc/meminfo): a sample that swaps is marked disturbed;
- ``load``: the 1-minute load average against the CPUs;
- ``busy_processes``: the processes that used more than :data:`BUSY_SHARE` of a CPU over a short window
  (/proc/<pid>/stat utime + stime, read twice), this audit excepted;
- ``pressure``: pressure stall averages over 10 s (/proc/pressure/*, avg10);
- ``steal``: CPU time the hypervisor took over the window (/proc/stat);
- ``delay_accounting``: whether time blocked on I/O can be recorded (kernel.task_delayacct, which the lab
  turns on for its run only where it may act as root).

On macOS only the load average and swap use (``sysctl vm.loadavg``, ``vm.swapusage``) are read; every
other check says it is not checked there. That path has been run only against recorded output in tests,
never on a Mac. Standard library only; the Probe is the audit's (audit.collect.Probe).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from ..common.facts import unavailable

# A process using more than this share of one CPU over the window is named as busy.
BUSY_SHARE = 0.10
# A pressure stall average (avg10, %) above this is advice.
PRESSURE_PCT = 5.0
# Steal above this share of the CPUs' time over the window is advice.
STEAL_SHARE = 0.05
# The load average above this share of the CPUs is advice.
LOAD_SHARE = 0.5
WINDOW_S = 0.5
NOT_ON_MACOS = "not checked on macOS (read from /sys and /proc on Linux)"
MACOS_VALIDATION = "macOS path run only against recorded output in tests, not on real Mac hardware"


def _check(check: str, state: str, found: str, advice: str | None = None) -> dict:
    return {"check": check, "state": state, "found": found, "advice": advice}


def _read(probe, path: str) -> str | None:
    try:
        return probe.read(path).strip()
    except OSError:
        return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def governor(probe) -> dict:
    cpus = sorted(probe.path("/sys/devices/system/cpu").glob("cpu[0-9]*"))
    found = sorted({g for c in cpus if (g := _text(c / "cpufreq/scaling_governor"))})
    if not found:
        return _check(
            "governor",
            "unknown",
            "no cpufreq scaling_governor (a VM's CPUs usually run as its host gives them)",
        )
    if found == ["performance"]:
        return _check("governor", "ok", "performance on every CPU")
    return _check(
        "governor",
        "advice",
        f"governor {', '.join(found)}",
        "set the performance governor for the run (cpupower frequency-set -g performance; pyperf system "
        "tune does the same): a power-saving governor moves the clock between samples",
    )


def turbo(probe) -> dict:
    no_turbo = _read(probe, "/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = _read(probe, "/sys/devices/system/cpu/cpufreq/boost")
    if no_turbo in ("0", "1") or boost in ("0", "1"):
        on = no_turbo == "0" if no_turbo in ("0", "1") else boost == "1"
        where = "intel_pstate/no_turbo" if no_turbo in ("0", "1") else "cpufreq/boost"
        if not on:
            return _check("turbo", "ok", f"off ({where})")
        return _check(
            "turbo",
            "advice",
            f"on ({where})",
            "turbo changes the clock with temperature and load; for steadier figures turn it off for the run "
            "(pyperf system tune does)",
        )
    return _check("turbo", "unknown", "neither intel_pstate/no_turbo nor cpufreq/boost is there")


def swap(probe) -> dict:
    text = _read(probe, "/proc/meminfo")
    if text is None:
        return _check("swap", "unknown", "/proc/meminfo could not be read")
    got = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("SwapTotal", "SwapFree"):
            got[key] = int(rest.split()[0]) * 1024
    if len(got) < 2:
        return _check("swap", "unknown", "/proc/meminfo has no SwapTotal")
    used = got["SwapTotal"] - got["SwapFree"]
    if used <= 0:
        return _check("swap", "ok", "no swap in use" if got["SwapTotal"] else "no swap configured")
    return _check(
        "swap",
        "advice",
        f"{used / (1 << 20):,.0f} MiB of swap in use",
        "a sample that swaps is marked disturbed; free memory (or turn swap off) before the run",
    )


def load(probe, cpus: int) -> dict:
    text = _read(probe, "/proc/loadavg")
    if text is None:
        return _check("load", "unknown", "/proc/loadavg could not be read")
    one = float(text.split()[0])
    return _load(one, cpus)


def _load(one: float, cpus: int) -> dict:
    found = f"load average {one:.2f} on {cpus} CPU{'s' if cpus != 1 else ''}"
    if one > LOAD_SHARE * cpus:
        return _check(
            "load",
            "advice",
            found,
            "other work is running: stop it, or the lab's samples are marked disturbed",
        )
    return _check("load", "ok", found)


def _proc_cpu(root: Path) -> dict[int, tuple[str, int]]:
    """{pid: (name, utime + stime ticks)} of every process readable under ``root``/proc."""
    out = {}
    for entry in (root / "proc").iterdir() if (root / "proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2 :].split()
        out[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))
    return out


def _command(root: Path, pid: int, width: int = 60) -> str | None:
    """A process's command line (/proc/<pid>/cmdline), cut to ``width`` characters; None when unreadable."""
    try:
        raw = (root / "proc" / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    text = " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)
    return text if len(text) <= width else text[: width - 1] + "…"


def _stat_ticks(root: Path) -> list[int] | None:
    try:
        fields = (root / "proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    return [int(x) for x in fields[1:9]]


def busy_and_steal(probe, window_s: float, sleep=time.sleep, tick_s: float | None = None) -> list[dict]:
    """The busy_processes and steal checks, from two reads ``window_s`` apart."""
    tick_s = tick_s or 1 / os.sysconf("SC_CLK_TCK")
    a, sa = _proc_cpu(probe.root), _stat_ticks(probe.root)
    sleep(window_s)
    b, sb = _proc_cpu(probe.root), _stat_ticks(probe.root)
    me = os.getpid()
    busy = []
    for pid, (name, ticks) in b.items():
        if pid == me or pid not in a:
            continue
        share = (ticks - a[pid][1]) * tick_s / window_s
        if share > BUSY_SHARE:
            busy.append((share, name, pid))
    busy.sort(reverse=True)
    if busy:
        named = ", ".join(
            f"{_command(probe.root, pid) or name} (pid {pid}, {share:.0%} of a CPU)"
            for share, name, pid in busy[:5]
        )
        procs = _check(
            "busy_processes", "advice", named, "stop them for the run, or its samples are marked disturbed"
        )
    else:
        procs = _check(
            "busy_processes", "ok", f"no process above {BUSY_SHARE:.0%} of a CPU over {window_s:g} s"
        )
    if sa is None or sb is None or len(sa) < 8:
        steal = _check("steal", "unknown", "/proc/stat has no steal field")
    else:
        d = [y - x for x, y in zip(sa, sb, strict=True)]
        share = d[7] / sum(d) if sum(d) else 0.0
        found = f"{share:.0%} of the CPUs' time over {window_s:g} s"
        steal = (
            _check(
                "steal",
                "advice",
                found,
                "the hypervisor is running other guests on these CPUs: figures will move",
            )
            if share > STEAL_SHARE
            else _check("steal", "ok", found)
        )
    return [procs, steal]


def pressure(probe) -> dict:
    high = []
    for r in ("cpu", "io", "memory"):
        text = _read(probe, f"/proc/pressure/{r}")
        if text is None:
            return _check("pressure", "unknown", "no /proc/pressure (CONFIG_PSI off)")
        m = re.search(r"^some avg10=([0-9.]+)", text, re.M)
        if m and float(m[1]) > PRESSURE_PCT:
            high.append(f"{r} {float(m[1]):.1f} %")
    if high:
        return _check(
            "pressure",
            "advice",
            f"stall over the last 10 s: {', '.join(high)}",
            "tasks are waiting for the CPU, I/O or memory: the host is busy",
        )
    return _check("pressure", "ok", f"every some avg10 at or below {PRESSURE_PCT:g} %")


def delay_accounting(probe) -> dict:
    text = _read(probe, "/proc/sys/kernel/task_delayacct")
    if text is None:
        return _check("delay_accounting", "ok", "no kernel.task_delayacct switch: always on")
    if text == "1":
        return _check("delay_accounting", "ok", "kernel.task_delayacct is 1")
    if os.geteuid() == 0:
        return _check(
            "delay_accounting", "ok", "kernel.task_delayacct is 0; the lab turns it on for its run (root)"
        )
    return _check(
        "delay_accounting",
        "advice",
        "kernel.task_delayacct is 0",
        "time blocked on I/O is recorded only where the lab may act as root: run it as root or set "
        "lab_run_become_allowed (it turns the switch on for its run and back off after)",
    )


def _macos(probe) -> list[dict]:
    checks = []
    try:
        loadavg = probe.run(["sysctl", "-n", "vm.loadavg"])  # "{ 1.23 1.10 0.98 }"
        one = float(loadavg.strip().strip("{} ").split()[0])
        checks.append(_load(one, os.cpu_count() or 1))
    except Exception as exc:  # a command that failed is a check that could not be made
        checks.append(_check("load", "unknown", f"sysctl vm.loadavg: {exc}"))
    try:
        said = probe.run(["sysctl", "-n", "vm.swapusage"])  # "total = 0.00M  used = 0.00M  free = 0.00M ..."
        used = float(re.search(r"used = ([0-9.]+)M", said)[1])
        checks.append(
            _check("swap", "advice", f"{used:,.0f} MiB of swap in use", "free memory before the run")
            if used > 0
            else _check("swap", "ok", "no swap in use")
        )
    except Exception as exc:
        checks.append(_check("swap", "unknown", f"sysctl vm.swapusage: {exc}"))
    for name in ("governor", "turbo", "busy_processes", "pressure", "steal", "delay_accounting"):
        checks.append(_check(name, "unknown", NOT_ON_MACOS))
    return checks


def collect_quiet(probe, window_s: float = WINDOW_S, sleep=time.sleep) -> dict:
    """The checks (see the module doc) as ``{"checks": [...], "window_s"}``, macOS with ``validation``."""
    if probe.system == "Darwin":
        return {"checks": _macos(probe), "window_s": None, "validation": MACOS_VALIDATION}
    if probe.system != "Linux":
        return unavailable(f"the quiet-host checks know Linux and macOS, not {probe.system}")
    cpus = os.cpu_count() or 1
    checks = [governor(probe), turbo(probe), swap(probe), load(probe, cpus)]
    checks += busy_and_steal(probe, window_s, sleep)
    checks += [pressure(probe), delay_accounting(probe)]
    return {"checks": _past_load(checks), "window_s": window_s}


def _past_load(checks: list[dict]) -> list[dict]:
    """A high load average while no process is busy now is work that has ended (the 1-minute average takes
    minutes to decay: a lab run just before this one leaves it above 1): no advice then, and said so."""
    by = {c["check"]: c for c in checks}
    load, busy = by.get("load"), by.get("busy_processes")
    if not (load and busy and load["state"] == "advice" and busy["state"] == "ok"):
        return checks
    quiet = _check(
        "load", "ok", f"{load['found']} (the 1-minute average, still decaying: no process is busy now)"
    )
    return [quiet if c is load else c for c in checks]
