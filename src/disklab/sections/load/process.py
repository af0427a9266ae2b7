"""What a load process cost outside the load call: imports, the device's start-up, two workers' PSS."""

from __future__ import annotations

from disklab import markup


def import_spread(section: dict, key: str = "import_s") -> dict | None:
    """Median, min and max over all samples of a per-process setup time in s (imports by default)."""
    vals = sorted(v for s in section["samples"] if (v := s["process"].get(key)) is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    median = vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
    return {"median": median, "min": vals[0], "max": vals[-1], "n": len(vals)}


def workers_summary(section: dict) -> dict | None:
    """PSS sums of the two-worker runs, and how much torch.load cost beyond mmap."""
    tw = section["two_workers"]
    if tw.get("status") != "ok":
        return None
    runs = {r["method"]: r for r in tw["runs"]}
    copy, mapped = runs.get("torch.load"), runs.get("torch.load-mmap")
    if not copy or not mapped:
        return None
    extra = copy["pss_sum_bytes"] - mapped["pss_sum_bytes"]
    return {
        "extra_pss_bytes": extra,
        "extra_per_file": extra / tw["file_size_bytes"] if tw["file_size_bytes"] else None,
    }


def device_summary(section: dict) -> dict | None:
    """The backend device_placed used, its memory, and its one-time start-up time (outside the clock)."""
    dev = section.get("device")
    if not dev:
        return None
    out = {"status": dev["status"], "reason": dev.get("reason"), "checked": dev.get("checked", [])}
    if dev["status"] != "ok":
        return out

    def fact(v):
        return v["unavailable"] if isinstance(v, dict) else v

    shares, total = dev["shares_memory_with_cpu"], dev["total_memory_bytes"]
    out.update(
        backend=dev["backend"],
        name=markup.md(fact(dev["name"])),  # the host's GPU name, escaped for the report
        name_known=not isinstance(dev["name"], dict),
        total_memory_bytes=None if isinstance(total, dict) else total,
        total_memory_reason=fact(total) if isinstance(total, dict) else None,
        shares=None if isinstance(shares, dict) else shares,
        shares_reason=fact(shares) if isinstance(shares, dict) else dev.get("shares_memory_source"),
        init_s=import_spread(section, "device_init_s"),
    )
    return out
