"""The markdown table and the one-line summary printed at the end of ``make bench``."""

from __future__ import annotations

from common import target_text

UNIT_TEXT = {"us": "µs", "ms": "ms", "s": "s", "mib_s": "MiB/s"}


def _side(side: dict, unit: str) -> str:
    u = UNIT_TEXT[unit]
    return f"{side[f'median_{unit}']:.4g} {u} ({side[f'min_{unit}']:.4g} to {side[f'max_{unit}']:.4g})"


def _row(name: str, part: dict) -> str:
    title = part.get("title", name)
    if part["status"] != "ok":
        why = (part.get("reason") or part.get("error") or "").strip().splitlines()
        shown = why[0] + (f" ... {why[-1].strip()}" if len(why) > 1 else "") if why else ""
        return f"| {title} | {part['status']}: {shown.replace('|', '/')} | | | | |"
    met = "yes" if part["met"] else "**no**"
    if "lines" in part:  # verdict counts, not a ratio (changed or busy): its four figures follow the table
        return f"| {title} | see its lines below the table | its goals, below | {met} | | |"
    unit = part["unit"]
    if "ratio" not in part:  # an absolute figure (report rendering): the column judges the repeated render
        met = "yes" if part.get("repeat_render_met", part["met"]) else "**no**"
        value = part["value"]
        shown = f"{value[f'median_{unit}']:.3g} {UNIT_TEXT[unit]}"
        target = f"{target_text(part['target'])} {UNIT_TEXT[unit]}"
        first, force = part.get("first_render_s"), part.get("force_render_s")
        note = f"first render, nothing rendered yet: {first:.3g} s" if first is not None else ""
        if first is not None and "first_render_target" in part:
            verdict = "met" if part["first_render_met"] else "MISSED"
            note += f" (target {target_text(part['first_render_target'])} s, {verdict})"
        note += f"; --force: {force:.3g} s" if force is not None else ""
        if part.get("store_s") is not None:
            note += f"; storing the runs first, as disklab run does: {part['store_s']:.3g} s"
        return f"| {title} | {shown} | {target} | {met} | {_side(value, unit)} | {note} |"
    a, b = part["sides"]
    r = part["ratio"]
    ratio = f"{r['median']:.3f} ({r['min']:.3f} to {r['max']:.3f}), {part['ratio_of']}"
    sides = f"{a}: {_side(part['sides'][a], unit)} | {b}: {_side(part['sides'][b], unit)}"
    return f"| {title} | {ratio} | {target_text(part['target'])} | {met} | {sides} |"


def markdown(doc: dict) -> str:
    """The results table: each part's median ratio (min to max), target, verdict and raw medians."""
    lines = [
        f"## disklab bench on {doc['host']} ({doc['run_id']}{', tiny' if doc['tiny'] else ''})",
        "",
        "| part | ratio median (min to max) | target | met | disklab median (min to max) "
        "| reference median (min to max) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [_row(name, doc["parts"][name]) for name in doc["part_order"]]
    extra = []
    fs = doc["parts"].get("fsync_fidelity", {})
    if fs.get("status") == "ok":
        r = fs["write_plus_fsync_ratio"]
        extra.append(
            f"- fsync: write+fsync p50 ratio disklab/fio {r['median']:.3f} (fio side: sum of its p50s)"
        )
    cr = doc["parts"].get("cold_read_fidelity", {})
    if cr.get("status") == "ok":
        w = cr["warm"]
        extra.append(
            f"- warm read: disklab {_side(w['sides']['disklab'], 'mib_s')}, "
            f"fio {_side(w['sides']['fio'], 'mib_s')}, ratio {w['ratio']['median']:.3f}"
        )
    pc = doc["parts"].get("parallel_ceiling_fidelity", {})
    if pc.get("status") == "ok":
        fio_bw = sorted(p["fio"]["bw_mib_s"] for p in pc["pairs"])
        n, kib, mib = pc["streams"], pc["block_bytes"] // 1024, pc["size_bytes"] // (1 << 20)
        extra.append(
            f"- parallel ceiling: {n} streams x {kib} KiB {pc['direct_io']} reads of a {mib} MiB file, "
            f"matched by fio --ioengine=psync --direct=1 --bs={pc['block_bytes']} --numjobs={n} --thread "
            f"--size/--offset_increment (the same slices); fio's own bw figure, median "
            f"{fio_bw[len(fio_bw) // 2]:.4g} MiB/s"
        )
    io = doc["parts"].get("io_record_overhead", {})
    if io.get("status") == "ok" and "record_cost" in io:
        for state in ("warm", "cold"):
            j, r = io[state], io[state]["ratio"]
            ci = j["interval"]
            ci_text = f"interval (≥ 95 %) {ci['low']:.3f} to {ci['high']:.3f}" if ci else ""
            ci_text = ci_text or "too few pairs of each order for an interval"
            orders = ", ".join(f"{k} {v['median']:.3f} (n={v['n']})" for k, v in j["by_order"].items())
            balanced = j["order_balanced_ratio"]
            judged = f"{balanced:.3f}" if balanced is not None else "none (one order only)"
            if j.get("interval_reading") == "outside":
                ci_text += " (wholly outside the target band: a real difference)"
            elif not j.get("resolved"):
                ci_text += " (wider than the target band: noise-limited)"
            extra.append(
                f"- I/O record, {state}: order-balanced ratio with/without {judged}, {ci_text}, "
                f"{'met' if j['met'] else 'MISSED'}; by order: {orders}; pooled median {r['median']:.3f} "
                f"({r['min']:.3f} to {r['max']:.3f}, n={r['n']})"
            )
        c = io["record_cost"]
        extra.append(
            f"- I/O record's own reads: {c['begin_plus_end_us']['median_us']:.1f} µs per begin+end "
            f"(device {c['device']}), outside the stage clock; file read by them: "
            f"{'YES' if c['reads_the_file'] else 'no'}; samples retaken for a failed cache proof: "
            f"{io['retaken']['warm']} warm, {io['retaken']['cold']} cold"
        )
    ho = doc["parts"].get("harness_overhead", {})
    if ho.get("status") == "ok" and "fixed_cost_per_host" in ho:
        f, b = ho["fixed_cost_per_host"], ho["task_breakdown"]
        top = ", ".join(f"{t} {s:.1f} s" for t, s in b["tasks_median_s"][:6])
        extra.append(
            f"- harness fixed cost per host: {f['median_s']:.1f} s (target ≤ {f['target_s']:g} s, "
            f"{'met' if f['met'] else 'MISSED'}; {f.get('gross_median_s', f['median_s']):.1f} s outside the "
            f"lab less the runner's own start and exit, {f.get('runner_own_median_s', 0.0):.1f} s, which the "
            f"direct side pays too); median per task over {b['runs']} runs: "
            f"lab {b['lab_s']:.1f} s, "
            f"Ansible between tasks {b['between_tasks_s']:.1f} s; largest tasks: {top}"
        )
        if ho.get("step_wall_s"):
            steps = ", ".join(
                f"{s} {v['disklab_run']:.1f}/{v['lab_py_direct']:.1f}" for s, v in ho["step_wall_s"].items()
            )
            extra.append(f"- lab steps inside disklab run / started directly (median s): {steps}")
    fl = doc["parts"].get("fleet_scaling", {})
    if fl.get("status") == "ok" and "wall" in fl:
        w = fl["wall"]
        many = next(k for k in w if k.endswith("_hosts"))
        extra.append(
            f"- fleet wall time (not judged; the hosts share this machine's cores): 1 host "
            f"{w['audit_1_host']['median_s']:.2f} s, {many.split('_')[1]} hosts {w[many]['median_s']:.2f} s, "
            f"ratio {w['ratio_16_to_1']['median']:.2f}"
        )
    cb = doc["parts"].get("changed_or_busy", {})
    if cb.get("status") == "ok":
        extra += [f"- changed or busy: {line}" for line in cb["lines"]]
        extra.append(
            f"- changed or busy: the background was fio {cb['background']}; the throttle {cb['throttle']}"
        )
    ts = doc["parts"].get("together_start", {})
    if ts.get("status") == "ok":
        c, b, rt = ts["corrected_spread"], ts["spread_bound"], ts["round_trip"]
        extra.append(
            f"- together start, {ts['hosts']} hosts, {ts['value']['n']} runs: raw spread (one kernel "
            f"clock) {_side(ts['value'], 'ms')}; moved back by the measured offsets {_side(c, 'ms')}, at "
            f"most {_side(b, 'ms')} with their uncertainty (best round trip {_side(rt, 'ms')}); called "
            f"together in {ts['called_together']} of {ts['value']['n']} runs; the stated bound held the true "
            f"spread in {ts['bound_held']} of {ts['value']['n']}; the worst wait's overshoot "
            f"{_side(ts['overshoot'], 'ms')}"
        )
        cc = ts.get("controller_cost")
        if cc:
            extra.append(
                f"- together start, the controller's cost against the same command started the ordinary way: "
                f"CPU {_side(cc['together_cpu'], 's')} against {_side(cc['ordinary_cpu'], 's')} (ratio "
                f"{cc['cpu_ratio']['median']:.2f}), wall {_side(cc['together_wall'], 's')} against "
                f"{_side(cc['ordinary_wall'], 's')} (ratio {cc['wall_ratio']['median']:.2f})"
            )
    shares = {n: p["machine_cpu"] for n, p in doc["parts"].items() if p.get("machine_cpu")}
    if shares:
        extra.append(
            "- machine CPU while each part ran (steal: the hypervisor ran something else; much of it slows "
            "every absolute figure): "
            + ", ".join(f"{n} steal {m['steal']:.0%} busy {m['busy']:.0%}" for n, m in shares.items())
        )
    return "\n".join(lines + ([""] + extra if extra else []))


def summary_line(doc: dict) -> str:
    """One line: how many targets were met, and each part's verdict."""
    parts = [(n, doc["parts"][n]) for n in doc["part_order"]]
    judged = [(n, p) for n, p in parts if p["status"] == "ok"]
    met = sum(p["met"] for _, p in judged)
    verdicts = ", ".join(
        f"{n} {'met' if p['met'] else 'MISSED'}" if p["status"] == "ok" else f"{n} {p['status']}"
        for n, p in parts
    )
    return f"bench {doc['run_id']} on {doc['host']}: {met}/{len(judged)} targets met ({verdicts})"
