"""The fleet's Together page: the newest stored together run (disklab.togetherrun), as reports/together.md
and its HTML twin, with a plot of each method's per-host time against N.

What the page states, from the stored run alone: the clients and their one shared filesystem (from each
client's audit), the storage server's page cache (unknown unless stated; never "cold" without where), the
production loaders of the run with where each could not run, each round's spread of the starts with its
uncertainty and whether it was together within the run's bound, each round's cold proofs, each host's time
and slowdown, first and last done, the aggregate; over each N's rounds, the median host's time, each N
judged against N = 1 and each mapped method against torch.load's eager reads with the rounds as test
units, what the family's size asks of one comparison, and the first N shown to double (disklab.storm,
disklab.stormverdicts); then the checkpoint burst, when the run had one: its save and read-back with MLPerf
Storage's duration and both its throughputs, said which is which, the commit, each read's cold proof and
byte check, and MLPerf's rule on caches against each client's RAM (disklab.burst)."""

from __future__ import annotations

from pathlib import Path

from disklab import burst, htmlpage, plotting, ranktests, stored, storm, stormverdicts, togetherrun, verdicts
from disklab_host.common.fsio import atomic_write_text
from disklab_host.common.units import MIB

PAGE = "together.md"
PLOT = "together.png"
TEMPLATE = "together.md.j2"
NAV = [("fleet index", "index.html"), ("fleet side by side", "fleet.html"), ("markdown", PAGE)]


def rounds_of(doc: dict) -> list[dict]:
    """The stored records as disklab.storm's rounds: one per (N, method, repeat), in the run's order."""
    rounds: dict[tuple, dict] = {}
    for host in doc["clients"]:
        for rec in doc["records"].get(host) or []:
            key = (rec["n"], rec["method"], rec.get("repeat", 1))  # a run before repeats: one each
            rnd = rounds.setdefault(key, {"n": key[0], "method": key[1], "repeat": key[2], "hosts": {}})
            rnd["hosts"][host] = {k: rec[k] for k in ("clock", "sample", "failed", "not_run") if k in rec}
    order = {m: i for i, m in enumerate(doc["settings"]["methods"])}
    return sorted(rounds.values(), key=lambda r: (r["n"], order.get(r["method"], len(order)), r["repeat"]))


def loaders_of(doc: dict) -> dict:
    """Each production loader of the run (``lab_run_load_loaders``), as the page states it: its record from
    the first host that sent one (title, how it reads, its knobs and where each value came from: the page
    names those the inventory set), the version each host ran, how its samples actually read the file (each
    distinct way, with its hosts), and why it did not run on the hosts where it could not."""
    out = {}
    for name in doc["settings"].get("loaders") or []:
        recs: dict[str, dict] = {}  # host -> the loader's record, from the host's first round of it
        versions: dict[str, list[str]] = {}
        read_as: dict[str, list[str]] = {}  # how the loader said it read, in the samples of its rounds
        for h in doc["clients"]:
            for rec in doc["records"].get(h) or []:
                if rec["method"] != name:
                    continue
                if "loader" in rec and h not in recs:
                    recs[h] = rec["loader"]
                    if rec["loader"]["status"] == "ok":
                        versions.setdefault(rec["loader"]["version"], []).append(h)
                how = ((rec.get("sample") or {}).get("read_path") or {}).get("how")
                if how and h not in read_as.setdefault(how, []):
                    read_as[how].append(h)
        out[name] = {
            "record": next(iter(recs.values()), None),
            "versions": versions,
            "read_as": read_as,
            "not_run": {h: r["reason"] for h, r in recs.items() if r["status"] != "ok"},
        }
    return out


def context(doc: dict) -> dict:
    """What together.md.j2 renders: the stored run, disklab.storm's figures of it, and what the page says of
    the storm's test."""
    bound_ns = round(doc["settings"]["bound_ms"] * 1e6)
    fig = storm.figures(rounds_of(doc), bound_ns)
    workbenches = {h: w for h, w in doc["workbench"].items() if w}
    shared = {(w["fstype"], w["source"]) for w in workbenches.values()}
    missed: dict[str, list[str]] = {}  # host -> why it did not run each round it was in
    for host, state in doc["hosts"].items():
        if state["status"] != "ok":
            where = f' at "{state["task"]}"' if state.get("task") else ""
            said = state.get("message") or "no message"
            missed.setdefault(host, []).append(f"{state['status']}{where}: {said}")
    for host in doc["clients"]:
        for rec in doc["records"].get(host) or []:
            if "failed" in rec and doc["hosts"].get(host, {}).get("status") == "ok":
                again = f", repeat {rec.get('repeat', 1)}" if doc["settings"].get("repeats", 1) > 1 else ""
                missed.setdefault(host, []).append(f"N = {rec['n']}, {rec['method']}{again}: {rec['failed']}")
    shots = doc.get("burst")
    shard_bytes = (doc["settings"].get("burst_mib") or 0) * MIB
    return {
        "doc": doc,
        "figures": fig,
        "burst": burst.figures(shots, bound_ns) if shots else None,
        "ram_rule": burst.ram_rule(shard_bytes, doc.get("ram_bytes") or {}) if shots else None,
        "ns": sorted({r["n"] for r in fig["rounds"]}),
        "shared": sorted(shared)[0] if len(shared) == 1 else None,
        "network": all(w["network"] for w in workbenches.values()) if workbenches else False,
        "writer": doc["clients"][0] if doc["clients"] else None,  # the storm's files (together-prepare)
        "missed": missed,
        "loaders": loaders_of(doc),
        "stats": {  # what the page says of the storm's test (disklab.verdicts, disklab.stormverdicts)
            "min_effect": verdicts.MIN_EFFECT[stormverdicts.MEASURE],
            "fdr": verdicts.FDR,
            "level": verdicts.LEVEL,
            "decides_from": ranktests.smallest_n_reaching(1 - verdicts.LEVEL),
        },
        "stages": storm.STAGES,
    }


def render(reports: Path, env) -> tuple[dict | None, list[str]]:
    """Write together.md, together.html and together.png from the newest stored together run that can be
    read, and return its summary for the fleet page's Together section ({"page", "plot", "run_id", "ns",
    "methods": {method: {stage: {"median_s", "doubling_n", "doubling"}}}, "mapped_behind", "repeats",
    "rounds", "not_simultaneous", "no_host", "server_cache", "burst"}; None when no run can be read, and
    nothing is written) with one error line for each newer run that cannot be."""
    errors: list[str] = []
    for path in reversed(togetherrun.runs(reports)):
        try:
            doc = stored.read(path, "together")
            ctx = context(doc)
        except stored.StoredFileError as exc:
            errors.append(f"the Together page leaves out {path.name}: {exc}")
            continue
        ctx["unreadable"] = [e.split(": ", 1)[1] for e in errors]
        break
    else:
        return None, errors
    ctx["plot"] = PLOT if draw(reports / PLOT, ctx["figures"], ctx["ns"]) else None
    text = env.get_template(TEMPLATE).render(**ctx)
    atomic_write_text(reports / PAGE, text)
    htmlpage.write(reports / PAGE, text, NAV)
    fig = ctx["figures"]
    # the rounds the fleet page counts: not those of a loader that could run on none of their hosts
    counted = [r for r in fig["rounds"] if set(r["not_run"]) != set(r["hosts"])]
    return {
        "page": PAGE,
        "plot": ctx["plot"],
        "run_id": doc["run_id"],
        "ns": ctx["ns"],
        "methods": {
            m: {
                st: {
                    "median_s": {str(n): t for n, t in v["median_s"].items()},
                    "doubling_n": v["doubling_n"],
                    "doubling": stormverdicts.doubling_text(v),
                }
                for st, v in by.items()
            }
            for m, by in fig["methods"].items()
        },  # fmt: skip
        "mapped_behind": fig["mapped_behind"],
        "repeats": doc["settings"].get("repeats", 1),
        "rounds": len(counted),
        "not_simultaneous": sum(1 for r in counted if r["spread"] and not r["spread"]["together"]),
        "no_host": sum(1 for r in counted if r["spread"] is None),
        "server_cache": doc["storage_server"]["state"],
        "burst": _burst_summary(ctx["burst"]),
    }, errors


def _burst_summary(fig: dict | None) -> dict | None:
    """The burst's line on the fleet page: each phase's duration and both throughputs, and the commit."""
    if fig is None:
        return None
    keys = ("duration_s", "throughput_rules", "throughput_dlio", "hosts")
    phases = {p: {k: fig[p][k] for k in keys} if fig[p] else None for p in burst.PHASES}
    return {**phases, "tried": fig["tried"], "committed": fig["committed"], "cold": fig["cold"],
            "matches": fig["matches"]}  # fmt: skip


def draw(path: Path, figures: dict, ns: list[int]) -> bool:
    """Per-host time (the median host's) against N, one line per method, one panel per stage; False when
    there is nothing to plot (no round gave a time)."""
    methods = figures["methods"]
    series = {stage: {m: methods[m][stage]["median_s"] for m in methods} for stage in storm.STAGES}
    series = {st: {m: pts for m, pts in by.items() if pts} for st, by in series.items()}
    if not any(series.values()):
        return False
    shown = {st: {m: sorted(p.items()) for m, p in by.items()} for st, by in series.items()}
    data = {"series": shown, "ns": ns}

    def make():
        fig = plotting.figure(8.0, 3.4)
        axes = fig.subplots(1, len(storm.STAGES), sharey=False)
        for ax, stage in zip(axes, storm.STAGES, strict=True):
            for method, points in sorted(series[stage].items()):
                xs = sorted(points)
                ax.plot(xs, [points[n] for n in xs], marker="o", label=method)
            ax.set_xscale("log", base=2)
            ax.set_xticks(ns, [str(n) for n in ns])
            ax.set_xlabel("N (hosts loading at once)")
            ax.set_ylabel(f"median host's time to {stage} (s)")
            ax.set_title(stage, fontsize="medium")
            ax.set_ylim(bottom=0)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=max(1, len(labels)))
        plotting.margins(fig, left=0.8, right=0.2, bottom=1.0, top=0.4, wspace=0.35)
        return fig

    plotting.draw_once(path, data, make, __file__)
    return True
