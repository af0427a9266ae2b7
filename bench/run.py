"""make bench: is disklab measuring the device, or its own overhead? Ratios on this host.

    python bench/run.py [--tiny] [--parts NAME ...] [--repeats N] [--workbench DIR]

Nine parts (bench/README.md): fsync fidelity, cold-read fidelity and
parallel-ceiling fidelity against fio, the I/O record's overhead on load
timings (with against without, paired),
harness overhead (``disklab run`` vs lab.py started directly), fleet
scaling (``disklab audit`` on 16 test-fleet hosts vs 1), report rendering
(``disklab report`` over 500 synthetic hosts) and changed or busy (does
``disklab compare`` call a quiet host unchanged, a busy one disturbed and a
throttled one slower), and together start (how simultaneous one common start
is on four test-fleet hosts: an absolute figure, not a ratio). Each comparison is taken in
pairs, the order alternating, and judged on the median of the pair ratios.
Writes bench/results/<host>-<run_id>.json, prints a markdown table, and ends
with a one-line summary. A part that cannot run here is recorded as not_run
with the reason; a part that raises is recorded as failed with the error.

``--tiny`` (the smoke test) runs in seconds: small files, one or two pairs,
and skips the parts that cannot be tiny, saying why.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

import common
import table
from common import PART_ORDER, REPO, not_run

from disklab_host.common.fsio import atomic_write_json
from disklab_host.common.units import MIB
from disklab_host.registry import profile_sizes

# Bumped when the results document changes; 1: first version.
BENCH_SCHEMA_VERSION = 1


def _settings(tiny: bool, repeats: int | None) -> dict:
    """Sizes and repeat counts: the quick profile's sizes, or tiny ones for the smoke test."""
    quick = profile_sizes("quick")
    if tiny:
        return {"fsync_blocks": 30, "read_bytes": 4 * MIB, "ceiling_bytes": 4 * MIB,
                "io_repeats": repeats or 2, "other_repeats": repeats or 1, "report_hosts": 5,
                "together_repeats": repeats or 1}  # fmt: skip
    return {
        "fsync_blocks": quick["fsync_blocks"],
        "read_bytes": quick["load_big_mib"] * MIB,
        # the full profile's ceiling file (1 GiB): a read of a second, not a quarter, so a burst of
        # another process's I/O on a shared disk moves one pair's ratio less
        "ceiling_bytes": profile_sizes("full")["ceiling_mib"] * MIB,
        "io_repeats": repeats or 9,
        "other_repeats": repeats or 3,
        "report_hosts": 500,
        "together_repeats": repeats or 9,
    }


def _part(name: str, args, s: dict, fio: str | None) -> dict:
    """Run one part; a missing tool or an impossible size gives not_run with the reason."""
    title = name.replace("_", " ")
    if name in ("fsync_fidelity", "cold_read_fidelity", "parallel_ceiling_fidelity") and fio is None:
        return not_run(title, "fio is not installed (make bench installs it with apt-get)")
    if name == "fsync_fidelity":
        import io_parts

        return io_parts.fsync_fidelity(args.workbench, s["fsync_blocks"], s["io_repeats"])
    if name == "cold_read_fidelity":
        import io_parts

        return io_parts.cold_read_fidelity(args.workbench, s["read_bytes"], s["io_repeats"])
    if name == "parallel_ceiling_fidelity":
        if platform.system() != "Linux":
            return not_run(
                title, "fio's --direct=1 is O_DIRECT here; the macOS F_NOCACHE path has no fio match"
            )
        import ceiling_part

        return ceiling_part.parallel_ceiling_fidelity(args.workbench, s["ceiling_bytes"], s["io_repeats"])
    if name == "io_record_overhead":
        if platform.system() != "Linux":
            return not_run(title, "the load step's cold path here evicts with fadvise_dontneed (Linux)")
        import iorecord_part

        return iorecord_part.io_record_overhead(args.workbench, s["read_bytes"], s["io_repeats"], args.tiny)
    if name == "harness_overhead":
        if args.tiny:
            return not_run(title, "cannot be tiny: the quick profile runs for minutes and needs the lab venv")
        import harness_parts

        return harness_parts.harness_overhead(args.lab_root, s["other_repeats"], args.harness_steps)
    if name == "fleet_scaling":
        if args.tiny:
            return not_run(title, "cannot be tiny: 16 namespace hosts with sshd and loop mounts take minutes")
        if os.geteuid() != 0:
            return not_run(title, "the test fleet needs root (network namespaces, loop mounts)")
        import harness_parts

        with tempfile.TemporaryDirectory(prefix="dlb-", dir="/tmp") as state_root:
            return harness_parts.fleet_scaling(s["other_repeats"], Path(state_root))
    if name == "changed_or_busy":
        if args.tiny:
            return not_run(title, "cannot be tiny: five lab runs of minutes each (a warm-up, A, B, C and D)")
        if platform.system() != "Linux" or os.geteuid() != 0:
            return not_run(
                title, "needs root on Linux: a cgroup throttles the device, and the lab drops caches"
            )
        if fio is None:
            return not_run(title, "fio is not installed (make bench installs it with apt-get)")
        import changed_part

        return changed_part.changed_or_busy(args.lab_root, args.changed_load_repeats)
    if name == "together_start":
        if args.tiny:
            return not_run(title, "cannot be tiny: four namespace hosts with sshd and a playbook per start")
        if os.geteuid() != 0:
            return not_run(title, "the test fleet needs root (network namespaces, loop mounts)")
        import together_part

        with tempfile.TemporaryDirectory(prefix="dlb-", dir="/tmp") as state_root:
            return together_part.together_start(s["together_repeats"], Path(state_root))
    import report_part

    return report_part.report_rendering(s["report_hosts"], s["other_repeats"], args.reports)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="smoke-test sizes: seconds, not minutes")
    ap.add_argument("--parts", nargs="+", choices=PART_ORDER, default=PART_ORDER)
    ap.add_argument(
        "--repeats",
        type=int,
        help="pairs per part (default: 9 for the fio parts; the I/O record takes 20 warm and 40 cold pairs "
        "per repeat, 180 and 360 by default; 3 for the others)",
    )
    ap.add_argument("--workbench", type=Path, default=REPO / ".lab" / "workbench" / "bench")
    ap.add_argument("--lab-root", type=Path, default=REPO / ".lab", help="disklab_root for the harness part")
    ap.add_argument(
        "--harness-steps", nargs="+", help="lab_run_steps for the harness part (default: the role's)"
    )
    ap.add_argument(
        "--reports", type=Path, default=REPO / "reports", help="where a real base run is looked for"
    )
    ap.add_argument("--report-hosts", type=int, help="synthetic hosts for the report part (default 500)")
    ap.add_argument(
        "--changed-load-repeats",
        type=int,
        default=8,
        help="load repeats of each run of the changed-or-busy part (default 8: a change can be called)",
    )
    ap.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.report_hosts is not None and args.report_hosts < 1:
        ap.error(f"--report-hosts must be >= 1, got {args.report_hosts}")
    args.workbench.mkdir(parents=True, exist_ok=True)
    s = _settings(args.tiny, args.repeats)
    if args.report_hosts is not None:
        s["report_hosts"] = args.report_hosts
    fio = common.fio_version()
    host = socket.gethostname()
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    doc = {
        "bench_schema_version": BENCH_SCHEMA_VERSION,
        "host": host,
        "run_id": run_id,
        "tiny": args.tiny,
        "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "fio_version": fio,
        "workbench": str(args.workbench),
        "settings": s,
        "part_order": args.parts,
        "parts": {},
    }
    for name in args.parts:
        print(f"bench: {name} ...", flush=True)
        t0, ticks = time.perf_counter(), common.cpu_times()
        try:
            part = _part(name, args, s, fio)
        except Exception as exc:  # recorded; the other parts still run
            error = f"{type(exc).__name__}: {exc}"
            part = {"status": "failed", "title": name.replace("_", " "), "error": error}
            part["traceback"] = traceback.format_exc(limit=6)
        part["part_wall_s"] = time.perf_counter() - t0
        part["machine_cpu"] = common.machine_share(ticks, common.cpu_times())  # steal: a contended host
        doc["parts"][name] = part
    doc["finished_utc"] = dt.datetime.now(dt.timezone.utc).isoformat()
    out = args.out_dir / f"{host}-{run_id}.json"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, doc)
    print()
    print(table.markdown(doc))
    print(f"\nresults: {out}")
    print(table.summary_line(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
