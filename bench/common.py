"""What every benchmark part shares: paired samples, ratios, targets, and fio.

A part measures disklab (side A) against a reference (side B) in pairs, A and
B back to back, with the order alternating from pair to pair so that a drift
in the machine's load touches both sides alike. The ratio is taken within each
pair, and the part is judged on the median of those ratios.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

from disklab_host.common.stats import percentile

REPO = Path(__file__).resolve().parent.parent

# Part names, in the order they run and appear in the table.
PART_ORDER = [
    "fsync_fidelity",
    "cold_read_fidelity",
    "parallel_ceiling_fidelity",
    "io_record_overhead",
    "harness_overhead",
    "fleet_scaling",
    "report_rendering",
    "changed_or_busy",
    "together_start",
]


def summary(samples: list[float], unit: str = "") -> dict:
    """``{"n", "samples<_unit>", "median<_unit>", "min<_unit>", "max<_unit>"}`` of raw samples.

    ``unit`` is a field suffix such as ``"us"`` or ``"mib_s"``; "" for a ratio.
    Raises ValueError on an empty list.
    """
    if not samples:
        raise ValueError("summary of no samples")
    s = sorted(samples)
    suffix = f"_{unit}" if unit else ""
    return {
        "n": len(s),
        f"samples{suffix}": list(samples),
        f"median{suffix}": percentile(s, 50),
        f"min{suffix}": s[0],
        f"max{suffix}": s[-1],
    }


def median_interval(samples: list[float], level: float = 0.95) -> dict | None:
    """A distribution-free interval for the median of ``samples``: two order statistics.

    The k-th smallest and k-th largest sample, with k the largest for which the
    chance that fewer than k samples fall below the true median, Binomial(n, 1/2),
    is at most (1 - level) / 2 (the sign test's interval). Returns ``{"low",
    "high", "k", "coverage"}`` (coverage: the exact chance the interval holds the
    median, at least ``level``), or None when ``n`` is too small for any such
    interval (n < 6 at 95 %).
    """
    n = len(samples)
    s = sorted(samples)
    tail, k = 0.0, 0
    for i in range(n // 2 + 1):  # tail = P(B <= i)
        tail += math.comb(n, i) / 2**n
        if tail > (1 - level) / 2:
            break
        k = i + 1
    if k == 0:
        return None
    coverage = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n
    return {"low": s[k - 1], "high": s[n - k], "k": k, "coverage": coverage}


def target_met(value: float, target: dict) -> bool:
    """Whether ``value`` meets ``target``.

    ``target`` is ``{"op": "between", "low", "high"}`` (inclusive) or
    ``{"op": ">=" | "<=" | "<", "value"}``. Raises ValueError for another op.
    """
    op = target["op"]
    if op == "between":
        return target["low"] <= value <= target["high"]
    if op == ">=":
        return value >= target["value"]
    if op == "<=":
        return value <= target["value"]
    if op == "<":
        return value < target["value"]
    raise ValueError(f"target op must be between, >=, <= or <, got {op!r}")


def target_text(target: dict) -> str:
    """The target as the table shows it, e.g. ``0.9 to 1.1`` or ``≤ 1.10``."""
    if target["op"] == "between":
        return f"{target['low']} to {target['high']}"
    return f"{ {'>=': '≥', '<=': '≤', '<': '<'}[target['op']] } {target['value']}"


def pair_orders(n: int, names: tuple[str, str]) -> list[tuple[str, str]]:
    """The order of each of ``n`` pairs: A then B, B then A, A then B, ..."""
    a, b = names
    return [(a, b) if i % 2 == 0 else (b, a) for i in range(n)]


def judged_part(
    *, title: str, quantity: str, unit: str, sides: dict[str, list[float]], target: dict, notes: list[str]
) -> dict:
    """A part's section for a disklab/reference pair: ratio per pair, judged on its median.

    ``sides`` maps exactly two names, disklab's first, to per-pair values in
    ``unit``; the ratio of pair i is first[i] / second[i]. Raises ValueError
    when the sides differ in length or a reference value is not > 0.
    """
    (a_name, a), (b_name, b) = sides.items()
    if len(a) != len(b) or not a:
        raise ValueError(
            f"{title}: sides must hold the same number of pairs (> 0), got {len(a)} and {len(b)}"
        )
    if min(b) <= 0:
        raise ValueError(f"{title}: every {b_name} value must be > 0 to take a ratio, got {b}")
    ratio = summary([x / y for x, y in zip(a, b, strict=True)])
    return {
        "status": "ok",
        "title": title,
        "quantity": quantity,
        "ratio_of": f"{a_name} / {b_name}",
        "unit": unit,
        "ratio": ratio,
        "target": target,
        "met": target_met(ratio["median"], target),
        "sides": {a_name: summary(a, unit), b_name: summary(b, unit)},
        "notes": notes,
    }


def not_run(title: str, reason: str) -> dict:
    """A part that did not run here, with the reason."""
    return {"status": "not_run", "title": title, "reason": reason}


def fio_version() -> str | None:
    """``fio --version`` (e.g. ``fio-3.33``), or None when fio is not installed."""
    exe = shutil.which("fio")
    if exe is None:
        return None
    return subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout.strip()


def run_fio(args: list[str], timeout_s: float = 600) -> dict:
    """Run one fio job with ``--output-format=json`` and return its ``jobs[0]``.

    Raises RuntimeError with fio's own message when fio exits non-zero or the
    job reports an error (fio(1), "JSON output").
    """
    cmd = ["fio", "--output-format=json", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    job = json.loads(proc.stdout[proc.stdout.index("{") :])["jobs"][0]
    if job.get("error"):
        raise RuntimeError(f"{' '.join(cmd)}: job error {job['error']}")
    return job


def fio_p50_ns(lat: dict) -> float:
    """The p50 of a fio latency block (``clat_ns`` or ``sync.lat_ns``), in ns.

    fio's percentiles come from its latency histogram, so they are bin values
    (fio(1), "percentile_list"), not exact order statistics. Raises KeyError
    when the block has no percentiles (fio ran with them switched off).
    """
    return float(lat["percentile"]["50.000000"])


def cpu_times() -> list[int] | None:
    """The machine's CPU time counters (the ``cpu`` line of /proc/stat, in clock ticks), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def machine_share(before: list[int] | None, after: list[int] | None) -> dict | None:
    """How the machine's CPU time went between two :func:`cpu_times`: busy, idle and steal fractions.

    steal (field 8 of proc(5)'s cpu line) is time a virtual machine's CPUs were
    ready but the hypervisor ran something else: a part measured with much of
    it ran on a contended host, and its absolute seconds are slower for it.
    """
    if before is None or after is None:
        return None
    d = [a - b for a, b in zip(after, before, strict=False)]
    total = sum(d[:8]) or 1  # user nice system idle iowait irq softirq steal (guest is inside user)
    return {
        "steal": round(d[7] / total, 4),
        "idle": round((d[3] + d[4]) / total, 4),
        "busy": round(sum(d[i] for i in (0, 1, 2, 5, 6)) / total, 4),
    }
