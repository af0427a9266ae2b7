"""Report section for the load lab: stage table, stage timelines, two-worker memory, explanations.

Every figure names its readiness stage and its cache state, and comparisons
are drawn only between figures at the same stage and cache state. The
explanations are computed from this host's own medians (the lesson's figures
are never quoted as this host's).
"""

from __future__ import annotations

from pathlib import Path

from disklab.fsio import save_figure

STAGES = ("loader_return", "module_populated", "all_touched", "device_placed")
STATES = ("cold", "warm", "cold_unverified")
BIG_METHODS = ("torch.load", "torch.load-mmap", "load_file", "one-tensor", "load_file+willneed")
PLOT_NAME = "load_stages.png"


def _label(cell: dict) -> str:
    if cell.get("populate"):
        return f"{cell['method']} → module ({cell['populate']}), {cell['file']}"
    return f"{cell['method']}, {cell['file']}"


def _median(cell: dict | None, stage: str, field: str = "time_s", which: str = "median") -> float | None:
    if not cell:
        return None
    st = cell["stages"].get(stage)
    if not st or st.get("status") != "ok":
        return None
    return st[field][which]


def _slower(a: dict | None, b: dict | None, stage: str) -> bool:
    """True when cell ``a`` was slower than ``b`` beyond noise: its fastest run beat none of b's."""
    lo, hi = _median(a, stage, which="min"), _median(b, stage, which="max")
    return lo is not None and hi is not None and lo > hi


def _find(cells: list[dict], method: str, state: str, populate=None, file=None) -> dict | None:
    for c in cells:
        same = c["method"] == method and c["cache_state"] == state and c.get("populate") == populate
        if same and (file is None or c["file"] == file):
            return c
    return None


def _order(cell: dict) -> tuple:
    method = BIG_METHODS.index(cell["method"]) if cell["method"] in BIG_METHODS else 99
    return (
        cell.get("populate") is not None,
        cell["file"],
        method,
        cell.get("populate") or "",
        cell["cache_state"],
    )


def rows(section: dict) -> list[dict]:
    """One row per cell × stage that ran: medians and spreads, in a stable order."""
    out = []
    for cell in sorted(section["cells"], key=_order):
        for stage in STAGES:
            st = cell["stages"].get(stage)
            if not st or st.get("status") != "ok":
                continue
            out.append(
                {
                    "what": _label(cell),
                    "cache_state": cell["cache_state"],
                    "stage": stage,
                    "n": cell["n"],
                    "time_s": st["time_s"],
                    "resident_fraction": st["resident_fraction"]["median"],
                    "resident_bytes": st["resident_bytes"]["median"],
                    "peak_rss_bytes": st["peak_rss_bytes"]["median"],
                    "flag": cell["cache_state"] == "cold_unverified",
                }
            )
    return out


def _ratio_line(cells, state, stage, method, base="torch.load") -> str | None:
    a, b = _median(_find(cells, method, state), stage), _median(_find(cells, base, state), stage)
    if a is None or not b:
        return None
    return f"{state}, {stage}: {method} took {_x(a / b)} {base} here ({a:.3f} s against {b:.3f} s, medians)."


def explanations(section: dict) -> list[str]:
    """Sentences computed from this host's medians; each names its stage and cache state."""
    cells = section["cells"]
    lines = []
    for stage in ("loader_return", "all_touched"):
        for state in ("cold", "warm"):
            for method in ("torch.load-mmap", "load_file"):
                line = _ratio_line(cells, state, stage, method)
                if line:
                    lines.append(line)
    methods = ("load_file+willneed", "load_file", "torch.load")
    will_c, plain_c, tl_c = (_find(cells, m, "cold") for m in methods)
    will, plain, tl = (_median(c, "all_touched") for c in (will_c, plain_c, tl_c))
    if None not in (will, plain, tl) and plain and tl:
        # "beyond noise" as in disklab compare: the min..max ranges do not overlap
        if not _slower(plain_c, tl_c, "all_touched"):
            verdict = (
                "there was no cold mmap gap to close here: load_file was not slower than torch.load "
                "beyond noise (their min..max ranges overlap)"
            )
        elif not _slower(will_c, tl_c, "all_touched"):
            verdict = "the hint closed the cold mmap gap here"
        elif _slower(plain_c, will_c, "all_touched"):
            verdict = "the hint narrowed the cold mmap gap here but did not close it"
        else:
            verdict = "the hint made no difference beyond noise here"
        lines.append(
            f"cold, all_touched: load_file+willneed took {_x(will / plain)} load_file and "
            f"{_x(will / tl)} torch.load; {verdict}."
        )
    one = _find(cells, "one-tensor", "cold")
    frac = _median(one, "all_touched", "resident_fraction")
    if frac is not None:
        share = _one_tensor_share(section)
        share_txt = f" (the tensor itself is {100 * share:.1f} % of the file)" if share else ""
        lines.append(
            f"cold, all_touched: one-tensor left {100 * frac:.1f} % of the file resident{share_txt}; "
            "the rest never came in, apart from readahead."
        )
    for file in ("small_pt", "small_safetensors"):
        for state in ("cold", "warm"):
            c = _find(cells, _small_method(cells, file), state, "copy", file)
            a = _find(cells, _small_method(cells, file), state, "assign", file)
            tc, ta = _median(c, "module_populated"), _median(a, "module_populated")
            pc, pa = (
                _median(c, "module_populated", "peak_rss_bytes"),
                _median(a, "module_populated", "peak_rss_bytes"),
            )
            if None in (tc, ta, pc, pa) or not tc:
                continue
            lines.append(
                f"{state}, module_populated, {file}: meta + assign took {_x(ta / tc)} normal construction + "
                f"copy ({ta:.3f} s against {tc:.3f} s); peak RSS {_mib(pa)} against {_mib(pc)}."
            )
    return lines


def _small_method(cells: list[dict], file: str) -> str:
    for c in cells:
        if c["file"] == file:
            return c["method"]
    return ""


def _one_tensor_share(section: dict) -> float | None:
    for s in section["samples"]:
        if s["method"] == "one-tensor" and s["file_size_bytes"]:
            return s["touched_bytes"] / s["file_size_bytes"]
    return None


def _import_spread(section: dict, key: str = "import_s") -> dict | None:
    """Median, min and max over all samples of a per-process setup time in s (imports by default)."""
    vals = sorted(v for s in section["samples"] if (v := s["process"].get(key)) is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    median = vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
    return {"median": median, "min": vals[0], "max": vals[-1], "n": len(vals)}


def _x(r: float) -> str:
    """A ratio with two significant figures below 0.1, so a 0.004× figure never prints as 0.0×."""
    if r >= 10:
        return f"{r:.0f}×"
    return f"{r:.1f}×" if r >= 0.1 else f"{r:.2g}×"


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def warnings(section: dict) -> list[str]:
    """Things the reader must know before trusting a figure."""
    out = []
    if section["n_cold_unverified"]:
        cells = sorted({_label(c) for c in section["cells"] if c["cache_state"] == "cold_unverified"})
        out.append(
            f"{section['n_cold_unverified']} cold run(s) found the file more than 1 % resident before the "
            f"load call, so they are reported as cold_unverified, never as cold: {', '.join(cells)}."
        )
    for trust in section["residency_trust"]:
        if trust != "ok":
            out.append(f"Residency: {trust}.")
    if section["drop_caches_used"]:
        out.append(
            "drop_caches was used: it empties the page cache of the whole machine, not just the lab's files, "
            "so anything else running on this host lost its cache too."
        )
    return out


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


def plot(section: dict, plot_dir: Path) -> str | None:
    """Stage timelines per method (medians), cold and warm side by side; returns the plot's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted(section["cells"], key=_order)
    labels = sorted({_label(c) for c in cells}, key=lambda lab: [_label(c) for c in cells].index(lab))
    if not labels:
        return None
    markers = {"loader_return": "o", "module_populated": "s", "all_touched": "D", "device_placed": "^"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(labels) + 1.8), sharey=True, sharex=True)
    for ax, state in zip(axes, ("cold", "warm"), strict=True):
        for y, lab in enumerate(labels):
            cell = next((c for c in cells if _label(c) == lab and c["cache_state"] == state), None)
            times = [(s, _median(cell, s)) for s in STAGES if _median(cell, s) is not None]
            if not times:
                continue
            ax.hlines(y, 0, times[-1][1], color="0.75")
            for stage, t in times:
                ax.plot(t, y, markers[stage], color=f"C{STAGES.index(stage)}", label=stage)
        ax.set_title(f"{state} (median time from the load call)")
        ax.set_xlabel("time since the load call (s)")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(labels)), labels)
    axes[0].invert_yaxis()  # top to bottom in table order
    handles = {h.get_label(): h for ax in axes for h in ax.get_lines()}
    fig.legend(
        [handles[s] for s in STAGES if s in handles],
        [s for s in STAGES if s in handles],
        loc="lower center",
        ncol=4,
    )
    fig.subplots_adjust(bottom=0.2)
    save_figure(fig, Path(plot_dir) / PLOT_NAME)
    return f"{Path(plot_dir).name}/{PLOT_NAME}"


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
        name=fact(dev["name"]),
        name_known=not isinstance(dev["name"], dict),
        total_memory_bytes=None if isinstance(total, dict) else total,
        total_memory_reason=fact(total) if isinstance(total, dict) else None,
        shares=None if isinstance(shares, dict) else shares,
        shares_reason=fact(shares) if isinstance(shares, dict) else dev.get("shares_memory_source"),
        init_s=_import_spread(section, "device_init_s"),
    )
    return out


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Context for templates/sections/load.md.j2 (see disklab.sections). Never raises on not_run/failed."""
    if section.get("status") != "ok":
        return {"ok": False}
    return {
        "ok": True,
        "rows": rows(section),
        "explanations": explanations(section),
        "warnings": warnings(section),
        "workers": workers_summary(section),
        "import_s": _import_spread(section),
        "device_context_init_s": _import_spread(section, "device_context_init_s"),
        "device": device_summary(section),
        "user_model": section.get("user_model"),
        "plot": plot(section, plot_dir),
    }
