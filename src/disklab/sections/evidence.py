"""What several report sections read beside their own numbers: the host's ceiling, the device's
write-cache mode, the I/O record of an interval and the counted page-cache layers.

Not a section (no step has this name): sections/load/, fsync_bench.py, write_buffering.py,
big_write.py and crash.py import it, so each fact is read from the results in one place.
"""

from __future__ import annotations

from disklab.markup import code, md
from disklab.units import ibytes, pct

MIB = 1 << 20
# Below this an fsync with a volatile ("write back") cache is flagged: a drive that really writes
# 4 KiB to stable media and flushes its cache takes longer (flash program plus flush is well over
# 100 µs even on fast NVMe drives without power-loss protection). A drive with power-loss protection
# may honestly answer faster; the report says so with the flag.
PLAUSIBLE_FLUSH_US = 100.0
LAYER_LABELS = {
    "after_write": "after `write()`",
    "after_flush": "after `flush()`",
    "after_fsync": "after `fsync()`",
    "after_save": "after the naive save returned",
    "after_kill": "after SIGKILL of the saver",
}


def _unavailable(value: object) -> str | None:
    return value["unavailable"] if isinstance(value, dict) and set(value) == {"unavailable"} else None


def ceiling(results: dict) -> dict:
    """The ceilings of this run: ``{"cold": spread | None, "warm": spread | None, "why", "parallel":
    spread | None, "parallel_why", "parallel_settings": {"streams", "block_bytes", "direct_io"} | None,
    "parallel_label": parallel_label(settings)}``.

    ``cold`` is the single-stream buffered read, ``parallel`` the parallel direct read (steps/ceiling.py).
    ``why`` and ``parallel_why`` say why one is missing (the step did not run, the parallel read was
    not run or not in this run's results, or no run was proven).
    """
    section = (results.get("experiments") or {}).get("ceiling")
    if not isinstance(section, dict) or section.get("status") != "ok":
        why = (
            "the ceiling step did not run in this run" if not section else f"ceiling {section.get('status')}"
        )
        return {"cold": None, "warm": None, "why": why, "parallel": None, "parallel_why": why,
                "parallel_settings": None, "parallel_label": parallel_label(None)}  # fmt: skip
    cold, warm = section["cold_mib_s"], section["warm_mib_s"]
    par = section["parallel"]
    settings = None
    if _unavailable(par):
        par_cold, par_why = None, _unavailable(par)
    else:
        settings = {k: par.get(k) for k in ("streams", "block_bytes", "direct_io")}
        if par.get("status") != "ok":
            status = "not run" if par.get("status") == "not_run" else par.get("status")
            par_cold, par_why = None, f"{status}: {par.get('reason') or par.get('error')}"
        else:
            par_why = _unavailable(par["cold_mib_s"])
            par_cold = None if par_why else par["cold_mib_s"]
    return {
        "cold": None if _unavailable(cold) else cold,
        "warm": None if _unavailable(warm) else warm,
        "why": _unavailable(cold),
        "parallel": par_cold,
        "parallel_why": par_why,
        "parallel_settings": settings,
        "parallel_label": parallel_label(settings),
    }


def parallel_label(settings: dict | None) -> str:
    """The parallel ceiling's settings in words, e.g. ``4 streams of 4 MiB O_DIRECT reads``."""
    if not settings:
        return "parallel read"
    direct = settings["direct_io"]
    how = f"{direct} reads" if direct != "none" else "reads through the page cache"
    return f"{settings['streams']} streams of {ibytes(settings['block_bytes'])} {how}"


def ceiling_reading(rate_mib_s: float | None, ceil: dict) -> str | None:
    """Where a cold device rate sits between the two ceilings, in one sentence; None without both.

    Beat the single stream but not the parallel read: bandwidth left unused; at or above the parallel
    read: none left by the parallel read's measure.
    """
    single, par = ceil.get("cold"), ceil.get("parallel")
    if rate_mib_s is None or not single or not par or not single.get("median") or not par.get("median"):
        return None
    s, p = single["median"], par["median"]
    label = parallel_label(ceil.get("parallel_settings"))
    if rate_mib_s > s and rate_mib_s < p:
        return (
            f"faster than one buffered stream ({pct(rate_mib_s / s)} of it), but {pct(rate_mib_s / p)} of "
            f"the parallel read ({label}): this load left about {pct(1 - rate_mib_s / p)} of the bandwidth "
            "the storage showed it has unused"
        )
    if rate_mib_s >= p:
        return f"at or above the parallel read ({label}): no bandwidth it could show was left unused"
    return (
        f"below one buffered stream ({pct(rate_mib_s / s)} of it) and {pct(rate_mib_s / p)} of the parallel "
        f"read ({label}): slower than both, so the storage could deliver more than this load asked of it"
    )


def device_facts(results: dict) -> dict:
    """The workbench device's durability facts from the run's audit (facts 4): name, model, write_cache."""
    device = ((results.get("facts") or {}).get("workbench") or {}).get("device")
    if not isinstance(device, dict) or _unavailable(device):
        why = _unavailable(device) or "no device in the facts"
        # a workbench with no block device behind it (a network or FUSE filesystem): every key, all unknown
        return {"name": None, "write_cache": None, "write_cache_why": why, "model": None, "vendor": None,
                "rotational": None, "fua": None, "pcie_link": None}  # fmt: skip
    wc = device.get("write_cache")
    model = device.get("model")
    return {
        "name": device.get("name"),
        "write_cache": None if _unavailable(wc) or wc is None else wc,
        "write_cache_why": _unavailable(wc),
        "model": None if _unavailable(model) else model,
        "vendor": device.get("vendor") if not _unavailable(device.get("vendor")) else None,
        "rotational": device.get("rotational") if isinstance(device.get("rotational"), bool) else None,
        "fua": device.get("fua") if isinstance(device.get("fua"), bool) else None,
        "pcie_link": device.get("pcie_link") if not _unavailable(device.get("pcie_link")) else None,
    }


def fsync_reading(p50_us: float | None, facts: dict) -> str | None:
    """One sentence reading a durable-sync p50 against the device's write-cache mode."""
    if p50_us is None:
        return None
    wc = facts["write_cache"]
    dev = md(facts["name"]) if facts["name"] else "the workbench device"  # the host's strings, escaped
    if wc is None:
        return (
            f"The write-cache mode of {dev} is unknown ({md(facts['write_cache_why'])}), so this p50 "
            "cannot be read against it."
        )
    if wc == "write through":
        return (
            f"{dev} reports `write through` (queue/write_cache): the block layer sends no cache flush, "
            "so the sync waits for the write alone; durability then rests on the device really having no "
            "volatile cache."
        )
    if wc == "write back" and p50_us < PLAUSIBLE_FLUSH_US:
        return (
            f"**Possible lie from below.** {dev} reports a volatile write cache (`write back`), so each sync "
            f"should include a cache flush, yet the p50 was {p50_us:,.0f} µs, under the "
            f"{PLAUSIBLE_FLUSH_US:.0f} µs "
            "a 4 KiB write plus flush plausibly takes on real media: something below this OS (a hypervisor's "
            "cache, a controller) probably answered the flush, or the drive has power-loss protection."
        )
    if wc == "write back":
        return (
            f"{dev} reports a volatile write cache (`write back`): each sync includes a cache flush, and a "
            f"p50 of {p50_us:,.0f} µs is plausible for a write that reached stable media."
        )
    return f"{dev} reports write_cache {code(wc)}."


def io_bytes(record: object) -> dict:
    """``{"process_read", "process_written", "device_read", "device_written", "major", "minor", "why"}``
    of one I/O record; a value is None where the record lacks it, and ``why`` names the first reason."""
    out = dict.fromkeys(
        ("process_read", "process_written", "device_read", "device_written", "major", "minor")
    )
    why = _unavailable(record)
    if why or not isinstance(record, dict):
        return {**out, "why": why or "no I/O record"}
    proc, dev = record.get("process"), record.get("device")
    if not _unavailable(proc) and isinstance(proc, dict):
        out.update(process_read=proc["read_bytes"], process_written=proc["write_bytes"])
    else:
        why = _unavailable(proc)
    if not _unavailable(dev) and isinstance(dev, dict):
        out.update(device_read=dev["read_bytes"], device_written=dev["written_bytes"], device=dev["name"])
    else:
        why = why or _unavailable(dev)
    out.update(major=record["faults"]["major"], minor=record["faults"]["minor"])
    return {**out, "why": why}


def io_line(record: object) -> str:
    """One line of an I/O record: process and device bytes, faults."""
    b = io_bytes(record)
    if b["major"] is None:
        return f"no I/O record ({b['why']})"
    parts = []
    if b["process_read"] is not None:
        parts.append(f"process read {ibytes(b['process_read'])}, wrote {ibytes(b['process_written'])}")
    if b["device_read"] is not None:
        parts.append(
            f"device {b['device']} read {ibytes(b['device_read'])}, wrote {ibytes(b['device_written'])}"
        )
    else:
        parts.append(f"device counts unavailable ({b['why']})")
    parts.append(f"{b['major']} major / {b['minor']} minor faults")
    return "; ".join(parts)


def layer_rows(layers: object) -> dict:
    """Table rows of a layers record: ``{"ok", "why", "rows": [{"label", "st_size", "dirty", "writeback",
    "cached"}]}``; ``ok`` False with ``why`` when the run has none or cachestat was missing."""
    why = _unavailable(layers)
    if why or not isinstance(layers, dict):
        return {"ok": False, "why": why or "not recorded", "rows": []}
    rows = []
    for r in layers["rows"]:
        pages = r["pages"]
        miss = _unavailable(pages)
        rows.append(
            {
                "label": LAYER_LABELS.get(r["point"], r["point"]),
                "st_size": ibytes(r["st_size_bytes"]),
                "dirty": "n/a" if miss else f"{pages['dirty_pages']:,}",
                "writeback": "n/a" if miss else f"{pages['writeback_pages']:,}",
                "cached": "n/a" if miss else f"{pages['cached_pages']:,}",
            }
        )
    ok = layers.get("cachestat") == "ok"
    return {
        "ok": ok,
        "why": None if ok else f"cachestat is missing here: {layers.get('cachestat')}",
        "rows": rows,
    }


def share_of(rate_mib_s: float | None, ceiling_spread: dict | None) -> str:
    """A rate as a share of a ceiling's median (cold or parallel), e.g. ``87.0 %``; ``n/a`` without either."""
    if rate_mib_s is None or not ceiling_spread or not ceiling_spread.get("median"):
        return "n/a"
    return pct(rate_mib_s / ceiling_spread["median"])
