"""``python -m disklab_host.savers.check --saver NAME[:RANKS]``: one framework saver under the power-cut
simulator, into a fresh directory and over an earlier checkpoint, printed as tables (``disklab powercut
--saver`` runs it with the lab venv's Python).

Exit status: 0 when no crash state under ``--model`` lost or mixed the checkpoint in either case, 1 when
one did, 2 for bad input or a save that gets no verdict (one line on stderr), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from ..common.fsio import atomic_write_json
from ..common.interrupts import interrupt_once
from ..powercut import record as pc_record
from ..powercut import simulate
from ..powercut import states as pc_states
from ..powercut.trace import RecordError
from . import frameworks, judge, mechanism, registry
from . import powercut as sp

INTERRUPTED = 130
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def render(result: dict) -> str:
    """One case's verdicts, first unsafe states and mechanisms, as plain text."""
    rec = result["recording"]
    where = "a fresh directory beside the earlier checkpoint" if result["case"] == "fresh" else (
        "the directory of the earlier checkpoint, over it")  # fmt: skip
    lines = [f"{result['saver']} saving into {where}: {rec['calls']} recorded calls, files "
             f"{', '.join(rec['files'])}", ""]  # fmt: skip
    lines += simulate.verdict_table(result["models"], sp.OUTCOMES)
    for key, m in result["models"].items():
        for which in ("first_mixed", "first_unsafe"):
            p = m.get(which)
            if p and (which == "first_mixed" or p != m.get("first_mixed")):
                lines += ["", f"{'first mixed' if which == 'first_mixed' else 'first unsafe'} state "
                          f"({key.replace('_', '-')}): after call {p['call_index']}: {p['call']}",
                          f"  state {p['state']} -> {p['outcome']}: {p['found']}",
                          f"  why: {p['why']}"]  # fmt: skip
    if result["mechanisms"]:
        lines += ["", "what the recording shows:"] + [f"  - {m['text']}" for m in result["mechanisms"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--saver", required=True, help=f"one of {', '.join(registry.NAMES)} (dcp:4: four ranks)")
    ap.add_argument("--model", default="power-cut", choices=sorted(pc_states.MODELS))
    ap.add_argument("--case", default="both", choices=[*sp.CASES, "both"])
    ap.add_argument("--state-mib", type=int, default=4)
    ap.add_argument("--timeout-s", type=float, default=sp.DEFAULT_TIMEOUT_S)
    ap.add_argument("--max-write-mib", type=int, default=simulate.DEFAULT_MAX_WRITE_MIB)
    ap.add_argument("--max-files", type=int, default=simulate.DEFAULT_MAX_FILES)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workdir", type=Path, default=None, help="kept; by default a temp dir, always removed")
    ap.add_argument("--ready-fd", type=int, default=None)
    args = ap.parse_args(argv)
    with interrupt_once(STOP_SIGNALS):
        return _check(args)


def _check(args) -> int:
    simulate.tell(args.ready_fd, "check")
    base = None
    try:
        spec = registry.parse(args.saver, "--saver")
        try:
            import torch  # noqa: F401
        except ImportError:
            simulate.tell(args.ready_fd, "notorch")
            return 2
        missing = [m for m in spec.saver.imports if _absent(m)]
        if missing:
            raise simulate.SpecError(
                f"{spec.saver.name} needs {', '.join(missing)}, which this Python ({sys.executable}) cannot "
                f"import: pip install {' '.join(spec.saver.pins)}, or pass --python with the lab venv's"
            )
        if pc_record.find_strace() is None:
            raise simulate.SpecError("strace is not installed (apt-get install strace)")
        if args.state_mib <= 0:
            raise simulate.SpecError(f"--state-mib must be > 0, got {args.state_mib}")
        base = args.workdir or Path(tempfile.mkdtemp(prefix="disklab-saver-"))
        cases = sp.CASES if args.case == "both" else (args.case,)
        limits = dict(timeout_s=args.timeout_s, max_write_mib=args.max_write_mib, max_files=args.max_files)
        results = {case: sp.analyse(spec, case, base / case, args.state_mib, **limits) for case in cases}
        for result in results.values():
            print(render(result), end="\n\n")
        key = simulate.MODEL_KEYS[args.model]
        verdicts = {
            "kill" if k == "process_kill" else k: judge.worst(
                [r["models"][k]["verdict"] for r in results.values()]
            )
            for k in ("process_kill", "power_cut")
        }
        fix = mechanism.suggestion([m for r in results.values() for m in r["mechanisms"]], verdicts)
        if frameworks.UNPICKLES.get(spec.saver.name):
            print(f"note: {frameworks.UNPICKLES[spec.saver.name]}")
        if fix:
            print(f"to fix: {fix}")
        if args.json:
            atomic_write_json(args.json, {"saver": spec.label, "cases": results, "suggestion": fix})
        worst = judge.worst([r["models"][key]["verdict"] for r in results.values()])
        print(f"\nverdict under {args.model}: {worst}")
        return 1 if worst == "unsafe" else 0
    except (ValueError, simulate.SpecError, RecordError) as exc:
        print(f"disklab powercut: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except MemoryError:
        print(
            "disklab powercut: no verdict: the analysis ran out of memory (--max-memory-mib)", file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        print("disklab powercut: interrupted; no verdict (the save was stopped)", file=sys.stderr)
        return INTERRUPTED
    except Exception as exc:  # noqa: BLE001 -- exit 1 means unsafe: anything else is no verdict
        print(
            f"disklab powercut: no verdict: {type(exc).__name__}: {' '.join(str(exc).split())[:500]}",
            file=sys.stderr,
        )
        return 2
    finally:
        if base is not None and args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)


def _absent(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module.split(".")[0]) is None


if __name__ == "__main__":
    sys.exit(main())
