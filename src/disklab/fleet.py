"""The fleet side by side: ``reports/fleet.md``, one table per key question, hosts as columns.

Each table puts the same figure of every host's latest lab run side by side:
the same call, method, file, readiness stage and cache state. The figures come
from :func:`disklab.figures.extract` (the one extraction, shared with compare
and export) and the durable sync p50 from :func:`disklab.report.durable_sync`
(the index's column), through each host's index row, so a host whose stored
files did not change is not read again.

Tables: the runs compared (profile, kernel, torch, load file sizes); durable
sync p50; load at ``all_touched`` and at ``first_response`` (:data:`STAGES`), cold and warm, for each
method; the host's own ceilings (``experiments.ceiling.cold_mib_s``, ``warm_mib_s`` and
``parallel.cold_mib_s``, "not measured in this run" without that step or part); peak RSS at
``all_touched`` and at ``first_response``; the power-cut verdicts. A run without a first_response
figure (first_response not run) has cells that say "not measured in this run"; a cell whose samples all failed
their cache proof says it was measured and that none was proven (a loader reading with O_DIRECT has no
provable warm state, nor has a network filesystem that drops the page cache at open). Two plots (load
at all_touched, durable sync p50), one point per host, and a grid of the power-cut verdicts, host by
host, under ``reports/fleet-plots/``. With more than
:data:`MAX_COLUMNS` hosts the tables turn round (hosts as rows), so they stay
readable.
"""

from __future__ import annotations

from pathlib import Path

from disklab import anchors, figures, markup, plotting, units, verdicts

FLEET_PAGE = "fleet.md"
TEMPLATE = "fleet.md.j2"
PLOT_DIR = "fleet-plots"
LOAD_PLOT, SYNC_PLOT = "load_all_touched.png", "durable_sync_p50.png"
POWERCUT_PLOT = "powercut_verdicts.png"
POWERCUT_TITLE = "Each save recipe over every crash state, host by host: safe, rolled back, unsafe"
STAGE = "all_touched"  # the stage of the load plot
# The readiness stages tabled side by side, each cold and warm: every byte read once, and the first response.
STAGES = ("all_touched", "first_response")
# What each stage's table says it measures, after "Median [min, max] seconds from the load call until".
STAGE_WORDS = {
    "all_touched": "every byte of every tensor was touched",
    "first_response": "one forward pass of a fixed prompt had its next-token id on the host",
}
MAX_COLUMNS = 16
# Past this many hosts the sync plot drops the host names (sorted points without names), and the
# power-cut grid is not drawn (its table says it all).
MAX_BARS = 40
NOT_MEASURED = "not measured in this run"
# The order of the load methods in the tables (the host report's), then the rest by name.
METHODS = ("torch.load", "torch.load-mmap", "load_file", "one-tensor", "load_file+willneed")


def _why(section: dict | None, what: str) -> str:
    """Why a host has no such figure, escaped for a table cell (the reason and error are the host's)."""
    if section is None:
        return f"{what} {NOT_MEASURED}"
    if section.get("status") == "not_run":
        return f"{what} not run: {markup.md(section.get('reason', 'no reason recorded'))}"
    return (
        f"{what} {markup.md(section.get('status'))}: {markup.md(section.get('error', 'no error recorded'))}"
    )


def _parallel_why(ceiling: dict) -> str:
    """Why a ceiling section that ran has no parallel figure, escaped for a table cell."""
    par = ceiling["parallel"]
    if "unavailable" in par:
        return f"parallel ceiling: {markup.md(par['unavailable'])}"
    if par.get("status") == "ok":
        cold = par.get("cold_mib_s") or {}
        return f"parallel ceiling: {markup.md(cold.get('unavailable', 'no figure'))}"
    return _why(par, "parallel ceiling")


def host_column(doc: dict | None) -> dict | None:
    """What the fleet page needs of one host's latest run, JSON-able (kept in the host's render stamp).

    Returns None without a lab run, else ``{"run_id", "profile", "kernel", "torch",
    "file_sizes": {file: bytes}, "load": [{"file", "method", "populate", "cache", "stage" (of
    :data:`STAGES`), "time": summary, "peak_rss": summary | None}], "load_why", "ceiling": {"cold":
    summary | None, "warm": ..., "parallel.cold": ...} (figures.CEILING's stems),
    "ceiling_why", "powercut": [{"recipe", "model", "verdict", "states"}], "powercut_why"}``;
    each ``*_why`` is None when the section ran.
    """
    if not doc:
        return None
    exps = doc.get("experiments") or {}
    facts = doc.get("facts") or {}
    found = figures.extract(doc, experiments=("load", "ceiling", "powercut"))
    load, rss, unproven = [], {}, []
    for f in found:
        measured = f.experiment == "load" and f.stage in STAGES and f.unit != "bytes"
        if measured and f.cache and f.cache not in figures.PROVEN:  # its cell says so, not "not measured"
            unproven.append(
                {"file": f.file, "method": f.method, "populate": f.populate, "cache": f.cache,
                 "stage": f.stage, "n": f.summary.get("n")}
            )  # fmt: skip
        if f.experiment == "load" and f.stage in STAGES and f.cache in figures.PROVEN:
            if f.unit == "bytes":
                rss[(f.file, f.method, f.populate, f.cache, f.stage)] = f.summary
            else:
                load.append(
                    {
                        "file": f.file,
                        "method": f.method,
                        "populate": f.populate,
                        "cache": f.cache,
                        "stage": f.stage,
                        "time": f.summary,
                    }
                )
    for row in load:
        row["peak_rss"] = rss.get((row["file"], row["method"], row["populate"], row["cache"], row["stage"]))
    ceiling = {stem: None for stem, _, _ in figures.CEILING}  # by stem: the parallel read is cold too
    for f in found:
        for stem in ceiling:
            if f.unit == "mib_s" and f.key in (
                f"experiments.ceiling.{stem}_mib_s",
                f"experiments.ceiling.{stem}_samples_mib_s",
            ):
                ceiling[stem] = {k: f.summary.get(k) for k in ("median", "n", "min", "max")}
    ls, cs, ps = exps.get("load"), exps.get("ceiling"), exps.get("powercut")

    def ok(s: object) -> bool:
        return isinstance(s, dict) and s.get("status") == "ok"

    return {
        "run_id": doc.get("run_id"),
        "profile": doc.get("profile"),
        "kernel": markup.fact((facts.get("host") or {}).get("kernel")),
        "torch": markup.fact((facts.get("versions") or {}).get("torch")),
        "file_sizes": {k: v["size_bytes"] for k, v in (ls.get("files") or {}).items()} if ok(ls) else {},
        "load": load,
        "load_unproven": unproven,
        "load_why": None if ok(ls) else _why(ls, "load"),
        "ceiling": ceiling,
        "ceiling_why": None if ok(cs) else _why(cs, "ceiling"),
        # why a part of a ceiling section that ran has no figure (the parallel read not run or not in it)
        "ceiling_part_why": {"parallel.cold": _parallel_why(cs)} if ok(cs) else {},
        "powercut": [
            {
                "recipe": f.name.removeprefix("powercut · ").rsplit(" · ", 1)[0],
                "model": f.name.rsplit(" · ", 1)[1],
                "verdict": f.value,
                "states": f.summary.get("n"),
            }
            for f in found
            if f.kind == figures.VERDICT and f.experiment == "powercut"
        ],
        "powercut_why": None if ok(ps) else _why(ps, "powercut"),
        # the savers step runs only where lab_run_savers names some: no row for a host that did not ask
        "savers": [
            {
                "saver": x["saver"],
                "verdicts": x.get("verdicts"),
                "why": None if x["status"] == "ok" else markup.fact(x.get("reason") or x.get("error")),
            }
            for x in ((exps.get("savers") or {}).get("savers") or [])
        ]
        if ok(exps.get("savers"))
        else [],  # fmt: skip
    }


def load_keys(cols: list, stage: str = STAGE) -> list[tuple]:
    """The (file, method, populate) cells with a figure at ``stage`` on any host, proven or not, in the
    tables' order."""
    rows = [x for _, c, _ in cols for x in [*c["load"], *c["load_unproven"]] if x["stage"] == stage]
    return sorted({(x["file"], x["method"], x["populate"]) for x in rows}, key=_cell_order)


def _cell_order(key: tuple) -> tuple:
    file, method, populate = key
    group = 0 if file.startswith("big") else 1 if file.startswith("small") else 2
    return (
        group,
        file,
        METHODS.index(method) if method in METHODS else 99,
        method,
        populate or "",
    )


def _cell(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def _time(summary: dict) -> str:
    lo, hi = units.secs(summary["min"]), units.secs(summary["max"])
    return f"{units.secs(summary['median'])} [{lo}, {hi}] (n={summary['n']})"


def _table(name: str, title: str, explain: str, hosts: list[str], rows: list[tuple[str, list[str]]]) -> dict:
    return {
        "name": name,
        "title": title,
        "explain": explain,
        "hosts": hosts,
        "rows": [(_cell(r), [_cell(c) for c in cs]) for r, cs in rows],
    }


def tables(index_rows: list[dict]) -> tuple[list[str], list[dict]]:
    """(hosts with a lab run, the side-by-side tables) from the index rows (:func:`host_column`)."""
    cols = [(r["host"], r["fleet"], r["durable_sync"]) for r in index_rows if r.get("fleet")]
    hosts = [h for h, _, _ in cols]
    if not cols:
        return hosts, []
    out = []
    files = sorted({f for _, c, _ in cols for f in c["file_sizes"]})
    out.append(
        _table(
            "runs",
            "Runs side by side",
            "Each host's latest lab run. A load figure is comparable across hosts only for the same file "
            "size (the profile sets it).",
            hosts,
            [
                ("run", [markup.code(c["run_id"]) for _, c, _ in cols]),
                ("profile", [markup.md(c["profile"]) for _, c, _ in cols]),
                ("kernel", [c["kernel"] for _, c, _ in cols]),
                ("torch", [c["torch"] for _, c, _ in cols]),
                *[
                    (
                        f"{f} size",
                        [
                            units.ibytes(c["file_sizes"][f]) if f in c["file_sizes"] else "n/a"
                            for _, c, _ in cols
                        ],
                    )
                    for f in files
                ],
            ],
        )
    )
    out.append(
        _table(
            "sync",
            "Durable sync p50",
            "Median latency of a 4 KiB `os.write` followed by the call that reaches stable storage on the "
            "host's OS: `fsync` on Linux, `fcntl(F_FULLFSYNC)` on macOS, where plain `fsync` stops at the "
            "drive's cache. "
            "Lower is faster; a figure far below the device's flush time can mean a volatile write cache "
            "acknowledged it.",
            hosts,
            [
                (
                    "4 KiB write + durable sync, p50",
                    [
                        f"{units.us_short(d['p50_us'])} ({d['call']})"
                        if d["p50_us"] is not None
                        else f"n/a ({markup.md(d['why'])})"
                        for _, _, d in cols
                    ],
                )
            ],
        )
    )
    keys = {st: load_keys(cols, st) for st in STAGES}

    def load_cell(c: dict, key: tuple, cache: str, field: str, stage: str) -> str:
        if c["load_why"]:
            return c["load_why"]
        for x in c["load"]:
            if (x["file"], x["method"], x["populate"]) == key and x["cache"] == cache and x["stage"] == stage:
                if field == "time":
                    return _time(x["time"])
                return units.ibytes(x["peak_rss"]["median"]) if x["peak_rss"] else NOT_MEASURED
        failed = [
            f"{x['n']} {x['cache']}" if x.get("n") is not None else x["cache"]
            for x in c["load_unproven"]
            if (x["file"], x["method"], x["populate"]) == key
            and x["cache"].startswith(cache)
            and x["stage"] == stage
        ]
        if failed:
            return f"measured, no sample proven {cache} ({', '.join(failed)})"
        return NOT_MEASURED

    # Without a load figure on any host, one row says why for each host (a table with no rows says nothing).
    def no_load(stage: str) -> list:
        return [(f"load cells at {stage}", [c["load_why"] or NOT_MEASURED for _, c, _ in cols])]

    for stage in STAGES:
        for cache, what in (
            ("cold", "page cache emptied and proven cold before each call"),
            ("warm", "file resident in the page cache"),
        ):
            out.append(
                _table(
                    f"load_{cache}" if stage == STAGE else f"load_{cache}_{stage}",
                    f"{cache.capitalize()} load at {stage}",
                    f"Median [min, max] seconds from the load call until {STAGE_WORDS[stage]} ({stage}), "
                    f"{what}; one fresh process per sample. Samples whose cache proof failed "
                    f"(cold_unverified, cold_unproven, warm_unverified) are left out.",
                    hosts,
                    [
                        (
                            figures.cell_name(m, f, p),
                            [load_cell(c, (f, m, p), cache, "time", stage) for _, c, _ in cols],
                        )
                        for f, m, p in keys[stage]
                    ]
                    or no_load(stage),
                )
            )
    out.append(
        _table(
            "ceiling",
            "Cold ceiling",
            "The host's own ceilings, measured in the same run: a cold sequential read of a file after "
            "eviction with large buffered reads (one stream), a warm read (memory copy speed), and a cold "
            "parallel read of the same file with direct I/O, as production loaders read (its streams and "
            "block size in the host's report). A cold load that delivers its bytes faster than both cold "
            "ceilings was probably served by a cache below this OS.",
            hosts,
            [
                (
                    name,
                    [
                        units.mib_s(c["ceiling"][stem]["median"])
                        if c["ceiling"].get(stem)
                        else (c["ceiling_why"] or c["ceiling_part_why"].get(stem) or NOT_MEASURED)
                        for _, c, _ in cols
                    ],
                )
                for stem, _, name in figures.CEILING
            ],
        )
    )
    for stage in STAGES:
        out.append(
            _table(
                "rss" if stage == STAGE else f"rss_{stage}",
                f"Peak RSS at {stage}",
                f"Median peak resident set size (getrusage ru_maxrss, since the process started, imports "
                f"included) when the load reached {stage}.",
                hosts,
                [
                    (
                        f"{figures.cell_name(m, f, p)} · {cache}",
                        [load_cell(c, (f, m, p), cache, "rss", stage) for _, c, _ in cols],
                    )
                    for f, m, p in keys[stage]
                    for cache in figures.PROVEN
                ]
                or no_load(stage),
            )
        )
    pkeys = []
    for _, c, _ in cols:
        for x in c["powercut"]:
            if (x["recipe"], x["model"]) not in pkeys:
                pkeys.append((x["recipe"], x["model"]))

    def verdict(c: dict, key: tuple) -> str:
        if c["powercut_why"]:
            return c["powercut_why"]
        x = next((x for x in c["powercut"] if (x["recipe"], x["model"]) == key), None)
        if x is None:
            return NOT_MEASURED
        v = f"**{x['verdict']}**" if x["verdict"] == "unsafe" else x["verdict"]
        return f"{v} ({x['states']} states)"

    out.append(
        _table(
            "powercut",
            "Power-cut verdicts",
            "Each save recipe's verdict over every crash state of this host's own recording: safe, "
            "rolled_back (an older checkpoint loads) or unsafe (a state that loads nothing, or garbage).",
            hosts,
            [(f"{markup.md(r)} · {markup.md(m)}", [verdict(c, (r, m)) for _, c, _ in cols]) for r, m in pkeys]
            or [("recipes", [c["powercut_why"] or NOT_MEASURED for _, c, _ in cols])],
        )
    )
    skeys = list(dict.fromkeys(x["saver"] for _, c, _ in cols for x in c.get("savers") or []))

    def saver_cell(c: dict, name: str, model: str) -> str:
        x = next((x for x in c.get("savers") or [] if x["saver"] == name), None)
        if x is None:
            return NOT_MEASURED
        if x["why"]:
            return f"not run: {x['why']}"
        v = x["verdicts"][model]
        return f"**{v}**" if v == "unsafe" else v.replace("_", " ")

    if skeys:
        out.append(
            _table(
                "savers",
                "The savers you run",
                "Each framework saver of lab_run_savers on each host, over both of its cases (a fresh "
                "directory, and over the earlier checkpoint): a real SIGKILL at exact calls and the "
                "simulator's kill states, then every power-cut state, each checkpoint loaded back and "
                "checked tensor by tensor.",
                hosts,
                [
                    (f"{markup.md(name)} · {label}", [saver_cell(c, name, model) for _, c, _ in cols])
                    for name in skeys
                    for model, label in (("kill", "kill"), ("power_cut", "power cut"))
                ],
            )  # fmt: skip
        )
    return hosts, out


def _left_margin_in(fig, labels: list[str]) -> float:
    """The left margin that holds the widest y tick label, in inches (host names vary in length)."""
    return plotting.text_width_in(fig, labels) + 0.25 if labels else 0.75


def _plot_load(cols: list, keys: list):
    """Load at all_touched, cold and warm side by side: one row per cell, one point per host (log s)."""
    legend = len(cols) <= 10
    labels = [figures.cell_name(m, f, p) for f, m, p in keys]
    fig = plotting.figure(12, 0.4 * len(keys) + 1.8)
    axes = fig.subplots(1, 2, sharey=True, sharex=True)
    for ax, cache in zip(axes, figures.PROVEN, strict=True):
        for i, (host, c, _) in enumerate(cols):
            pts = [
                (x["time"]["median"], keys.index((x["file"], x["method"], x["populate"])))
                for x in c["load"]
                if x["cache"] == cache and x["stage"] == STAGE and plotting.on_log_axis(x["time"]["median"])
            ]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, "o", color=f"C{i % 10}" if legend else "C0", alpha=0.7, label=_plain(host))
        plotting.log_x(ax)
        ax.set_xlabel("seconds from the load call (log scale)")
        ax.set_title(f"{cache}, {STAGE}: median per host")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(keys)), labels)
    axes[0].invert_yaxis()
    if legend and axes[1].get_legend_handles_labels()[0]:
        axes[1].legend(loc="best", fontsize="small")
    plotting.margins(fig, left=_left_margin_in(fig, labels), right=0.2, bottom=0.6, top=0.4, wspace=0.05)
    return fig


def _plain(text: str) -> str:
    """A host's string as matplotlib text shown as it is: a ``$`` would start mathtext, which raises on
    an unknown symbol (a host named ``a$\\x$`` stopped the fleet page)."""
    return str(text).replace("$", r"\$")


def _plot_sync(syncs: list):
    """Durable sync p50 per host as a point on a log µs axis, named; past MAX_BARS hosts, sorted points
    without names."""
    named = len(syncs) <= MAX_BARS
    labels = [_plain(f"{h} ({call})") for h, _, call in syncs] if named else []
    fig = plotting.figure(7, 0.35 * len(syncs) + 1.2 if named else 4)
    ax = fig.subplots()
    if named:
        # points, not bars: a bar's length on a log axis starts at an arbitrary edge and means nothing
        ax.plot([s[1] for s in syncs], range(len(syncs)), "o", color="C0")
        ax.set_yticks(range(len(syncs)), labels)
        ax.set_ylim(len(syncs) - 0.5, -0.5)
        ax.grid(axis="y", alpha=0.3)
    else:
        ax.plot(sorted(s[1] for s in syncs), range(len(syncs)), ".", color="C0")
        ax.set_ylabel(f"hosts, fastest first ({len(syncs)})")
    plotting.log_x(ax)
    ax.set_xlabel("4 KiB write + durable sync, p50 (µs, log scale)")
    ax.grid(axis="x", alpha=0.3)
    plotting.margins(fig, left=_left_margin_in(fig, labels), right=0.25, bottom=0.6, top=0.15)
    return fig


def _powercut_grid(cols: list) -> list | None:
    """The power-cut table as a grid's rows (recipe · model), columns (hosts) and cells (verdict, words);
    None where no host has a verdict, or past :data:`MAX_BARS` hosts."""
    keys = list(dict.fromkeys((x["recipe"], x["model"]) for _, c, _ in cols for x in c["powercut"]))
    if not keys or len(cols) > MAX_BARS:
        return None

    def cell(c: dict, key: tuple) -> list[str]:
        x = next((x for x in c["powercut"] if (x["recipe"], x["model"]) == key), None)
        if x is None:
            return ["", "not measured"]
        return [x["verdict"], f"{x['verdict'].replace('_', ' ')}\n{x['states']} states"]

    rows = [_plain(f"{r} · {m}") for r, m in keys]
    return [rows, [_plain(h) for h, _, _ in cols], [[cell(c, k) for _, c, _ in cols] for k in keys]]


def plots(reports: Path, index_rows: list[dict]) -> dict[str, dict]:
    """The fleet plots under ``reports/fleet-plots/``: ``{table name: {"path", "note", "alt"}}``.

    ``path`` is relative to reports, or None without a plot; ``note`` (else None) says how many figures
    the plot leaves out because a log axis cannot place them (0 or below: a zero time, say), so a
    stored zero never raises from matplotlib and never vanishes unsaid.
    The load plot sits with the cold load table (it shows cold and warm), the sync plot and the power-cut
    grid (up to :data:`MAX_BARS` hosts) with theirs.
    A plot whose data and drawing code are unchanged since it was drawn (its ``.NAME.sha256`` beside
    it) is not drawn again, so `disklab report` with nothing new costs no matplotlib time.
    """
    cols = [(r["host"], r["fleet"], r["durable_sync"]) for r in index_rows if r.get("fleet")]
    keys = load_keys(cols)
    measured = [(h, d["p50_us"], d["call"]) for h, _, d in cols if d["p50_us"] is not None]
    syncs = [s for s in measured if plotting.on_log_axis(s[1])]
    medians = [x["time"]["median"] for _, c, _ in cols for x in c["load"] if x["stage"] == STAGE]
    placed = sum(map(plotting.on_log_axis, medians))
    load_data = [
        [keys],
        *(
            [
                h,
                [
                    [x["file"], x["method"], x["populate"], x["cache"], x["time"]["median"]]
                    for x in c["load"]
                    if x["stage"] == STAGE
                ],
            ]
            for h, c, _ in cols
        ),
    ]
    grid = _powercut_grid(cols)
    out: dict[str, dict] = {
        "load_cold": {
            "path": None,
            "note": plotting.left_out(len(medians) - placed, len(medians), "host medians (load cells)"),
            "alt": "Load time to all_touched, cold and warm, one point per host",
        },
        "sync": {
            "path": None,
            "note": plotting.left_out(len(measured) - len(syncs), len(measured), "hosts' durable sync p50"),
            "alt": "Durable sync p50, one point per host",
        },
        "powercut": {"path": None, "note": None, "alt": "Each save recipe's verdict on each host"},
    }
    for table, name, drawable, data, draw in (
        ("load_cold", LOAD_PLOT, placed, load_data, lambda: _plot_load(cols, keys)),
        ("sync", SYNC_PLOT, syncs, syncs, lambda: _plot_sync(syncs)),
        ("powercut", POWERCUT_PLOT, grid, grid, lambda: plotting.verdict_grid(*grid, POWERCUT_TITLE)),
    ):
        if not drawable:
            continue
        plotting.draw_once(reports / PLOT_DIR / name, data, draw, __file__)
        out[table]["path"] = f"{PLOT_DIR}/{name}"
    return out


# --- the fleet's answers, at the top of the index ----------------------------------------------------


def _host_link(row: dict, step: str = "") -> str:
    """The host's name, linked to its report (at the section of ``step``: disklab.anchors.section) when it
    has one; escaped."""
    name = markup.md(row["host"])
    if not row.get("has_report", True):
        return name
    anchor = "#" + anchors.section(step) if step else ""
    return f"[{name}]({markup.link(row['host_link'] + '/report.md')}{anchor})"


def _sync_text(d: dict) -> str:
    return f"{units.us_short(d['p50_us'])} ({d['call']})"


def _flags_set(row: dict) -> list[str]:
    f = row.get("facts")
    if not f:
        return []
    flags = sorted((f["workbench"].get("flags") or {}).items())
    flags.append(("cpu_only_torch_on_gpu_host", (f.get("gpu") or {}).get("cpu_only_torch_on_gpu_host") or {}))
    return [name for name, flag in flags if isinstance(flag, dict) and flag.get("state") == "set"]


def answers(rows: list[dict]) -> list[str]:
    """The index's first lines, markdown with every host string escaped: which hosts stand out.

    The slowest durable sync p50 (with its call, and the fastest for scale), the hosts whose cold load
    figures failed their cache proof (their load section's samples), the hosts with a flag set, and
    the hosts that are not ok (failed, unreachable, partial, unreadable); each host linked to its report.
    A fleet of one host says so: one host stands out from nothing.
    """
    lines = []
    synced = [r for r in rows if (r.get("durable_sync") or {}).get("p50_us") is not None]
    if len(rows) == 1:
        r = rows[0]
        d = r.get("durable_sync") or {}
        said = (
            f"Its durable sync p50 is {_sync_text(d)}."
            if d.get("p50_us") is not None
            else f"It has no durable sync figure: {markup.md(d.get('why') or 'no lab run stored')}."
        )
        lines.append(f"This fleet has one host, {_host_link(r)}: nothing to compare it with. {said}")
    elif len(synced) >= 2:
        ordered = sorted(synced, key=lambda r: r["durable_sync"]["p50_us"])
        slow, fast = ordered[-1], ordered[0]
        median = units.us_short(_median([r["durable_sync"]["p50_us"] for r in synced]))
        lines.append(
            f"Slowest durable sync p50: {_host_link(slow, 'fsync_bench')}, "
            f"{_sync_text(slow['durable_sync'])}, "
            f"of {len(synced)} hosts with a figure (fastest: {_host_link(fast, 'fsync_bench')}, "
            f"{_sync_text(fast['durable_sync'])}; median {median}); slowest against fastest, two hosts "
            f"picked out of {len(synced)} after the run, one run each, so a description of these runs: "
            f"{markup.md(_sync_verdict(fast, slow))}."
        )
    elif synced:
        lines.append(
            f"Durable sync p50: only {_host_link(synced[0], 'fsync_bench')} has a figure, "
            f"{_sync_text(synced[0]['durable_sync'])}; nothing to compare it with."
        )
    else:
        lines.append("Durable sync p50: no host has a figure (each row below says why).")
    loaded = [r for r in rows if r.get("cold_unproven")]
    unproven = [r for r in loaded if r["cold_unproven"]["samples"]]
    if unproven:
        parts = [
            f"{_host_link(r, 'load')} ({r['cold_unproven']['samples']} cold sample(s): "
            f"{markup.md('; '.join(r['cold_unproven']['cells']))}; failed: "
            f"{markup.md(', '.join(r['cold_unproven']['failed']) or 'residency')})"
            for r in unproven
        ]
        lines.append("Cold load figures that failed their proof: " + "; ".join(parts) + ".")
    elif loaded:
        lines.append(
            f"Cold load figures that failed their proof: none; every cold sample of the {len(loaded)} "
            f"host(s) with a load step passed its proof."
        )
    else:
        lines.append("Cold load figures that failed their proof: no host has a load step that ran.")
    busy = busy_hosts(rows)
    if busy:
        lines.append(
            "Measured while busy: "
            + "; ".join(f"{_host_link(r, 'fsync_bench')}: {markup.md(words)}" for r, words in busy)
            + " (their figures may show other work on the host, not its storage)."
        )
    flagged = [(r, names) for r in rows if (names := _flags_set(r))]
    if flagged:
        lines.append(
            "Flags set: "
            + "; ".join(
                f"{_host_link(r)}: {', '.join(markup.md(n.replace('_', ' ')) for n in names)}"
                for r, names in flagged
            )
            + " (see Flags below)."
        )
    else:
        lines.append("Flags set: none.")
    bad = [r for r in rows if (r.get("status") or {}).get("status", "ok") != "ok" or r.get("failure")]
    if bad:
        parts = []
        for r in bad:
            st = r.get("failure") or {}
            word = st.get("status") or (r.get("status") or {}).get("status")
            where = f' at "{markup.md(st["task"])}"' if st.get("task") else ""
            parts.append(f"{_host_link(r)}: **{markup.md(word)}**{where}")
        lines.append(f"Not ok: {'; '.join(parts)}.")
    else:
        lines.append("Every host is ok.")
    return lines


def _sync_side(row: dict) -> verdicts.Side:
    d = row["durable_sync"]
    return verdicts.Side(d["units_ns"], d["flags"], d["noise"])


def _sync_verdict(fast: dict, slow: dict) -> str:
    """The slowest host's durable sync against the fastest's, judged on their rounds (disklab.verdicts)."""
    unit = fast["durable_sync"]["unit_kind"]
    j = verdicts.judge(_sync_side(fast), _sync_side(slow), "durable_sync", unit)
    return verdicts.brief(j)


def busy_hosts(rows: list[dict]) -> list[tuple[dict, str]]:
    """The hosts whose latest durable sync ran (in part) while the host was busy, with the words."""
    return [
        (r, d["noise"])
        for r in rows
        if (d := r.get("durable_sync") or {}).get("noise") and any(d.get("flags") or [])
    ]


def _median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
