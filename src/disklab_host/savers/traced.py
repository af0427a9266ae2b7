"""The process the power-cut recorder runs under strace for one framework save.

It imports the framework, builds the model's state at ``--step``, opens the recorder's import and begin
markers, calls the framework's save into ``--dir``, and opens the end marker; it says "begin", then "ok",
"raised ..." or "spec ..." on the status pipe (the words of ``disklab_host.powercut.simulate``).
``dcp`` runs its ranks under torch's own launcher (``torch.distributed.run --standalone``); strace follows
them, rank 0 opens the markers and its stdout's status lines are relayed here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path

from ..common.child import child_env, module_argv
from ..powercut import record as pc_record
from ..powercut import simulate
from . import dcp_rank, frameworks, gate, model, registry

SAVE_RAISED = 3
# The launcher's run directory (its --log-dir; by default a torchelastic_* in /tmp that outlives every killed
# save), beside the checkpoint's directory, which the save's caller removes.
LAUNCHER_LOGS = "launcher-logs"


def _one_process(args, status: simulate.Status) -> int:
    try:
        import torch  # noqa: F401 -- imported before the markers, as the framework's own import

        for module in registry.BY_NAME[args.saver].imports:
            importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 -- not installed, or an install that fails on import
        status.send(f"spec {args.saver} cannot be imported here: {type(exc).__name__}: {exc}")
        return SAVE_RAISED
    pc_record.open_marker(args.root / pc_record.IMPORT_MARKER)
    state = model.state(args.state_mib, args.step)
    if args.gate:
        warm = (
            args.gate / "warm" / args.dir.name
        )  # named as the save's own (the Trainer reads its step there)
        gate.wait(
            args.gate, 0, lambda: frameworks.save_one(args.saver, state, warm, args.state_mib), args.timeout_s
        )
    status.send("begin")
    pc_record.open_marker(args.root / pc_record.BEGIN_MARKER)
    try:
        frameworks.save_one(args.saver, state, args.dir, args.state_mib)
    except BaseException as exc:  # noqa: BLE001 -- sys.exit() and KeyboardInterrupt get no verdict either
        status.send(f"raised {type(exc).__name__}: {exc}")
        print(f"{args.saver} save raised {type(exc).__name__}: {exc}", file=sys.stderr)
        return SAVE_RAISED
    pc_record.open_marker(args.root / pc_record.END_MARKER)
    status.send("ok")
    return 0


def launcher_argv(ranks: int, directory: Path, root: Path, state_mib: int, step: int, timeout_s: float,
                  gate_dir: Path | None) -> list[str]:  # fmt: skip
    """torch's launcher starting ``ranks`` processes of :mod:`.dcp_rank` on this host."""
    marks = ["--markers", pc_record.IMPORT_MARKER, pc_record.BEGIN_MARKER, pc_record.END_MARKER]
    marks += ["--gate", str(gate_dir)] if gate_dir else []
    return [
        *module_argv("torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                     f"--log-dir={root.parent / LAUNCHER_LOGS}"),
        "-m", "disklab_host.savers.dcp_rank", "--dir", str(directory), "--root", str(root),
        "--state-mib", str(state_mib), "--step", str(step), "--timeout-s", str(timeout_s), *marks,
    ]  # fmt: skip


def _ranks(args, status: simulate.Status) -> int:
    argv = launcher_argv(
        args.ranks, args.dir, args.root, args.state_mib, args.step, args.timeout_s, args.gate
    )
    env = child_env(dict(os.environ, OMP_NUM_THREADS="1"))
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    said = []
    for line in proc.stdout:
        if line.startswith(dcp_rank.STATUS):
            said.append(line.removeprefix(dcp_rank.STATUS).strip())
            status.send(said[-1])
    code = proc.wait()
    if code != 0:
        status.send(f"raised the launcher of {args.ranks} ranks ended with exit status {code}")
        return SAVE_RAISED
    return 0 if said[-1:] == ["ok"] else SAVE_RAISED


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--saver", required=True)
    ap.add_argument("--ranks", type=int, default=None)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--state-mib", type=int, required=True)
    ap.add_argument("--step", type=int, required=True)
    ap.add_argument("--timeout-s", type=float, required=True)
    ap.add_argument("--status-fd", type=int, default=None)
    ap.add_argument("--gate", type=Path, default=None, help="the crash lab's gate directory (gate())")
    args = ap.parse_args(argv)
    frameworks.quiet_hf()
    status = simulate.Status(args.status_fd)
    if args.saver == "dcp":
        return _ranks(args, status)
    return _one_process(args, status)


if __name__ == "__main__":
    sys.exit(main())
