"""The lab runner: run each enabled experiment on this host, write one results JSON.

Usage: python disklab_host.pyz lab (--config CONFIG.json | --config-json JSON) --facts HOST.json
       --out RESULTS.json

CONFIG (from the lab_run role, inline with ``--config-json``) holds run_id, host, profile, workbench,
steps and settings (every lab_run_* set in the inventory, sizes among them).
Each step is registered in disklab_host.registry and is a module of
disklab_host.steps with ``run(cfg: dict, workdir: pathlib.Path) -> dict``; it
gets its own directory under the workbench. A step that raises is recorded as
failed with its error, its partial files are removed, and the next step still
runs, so one broken experiment never costs the others their results; a step
that failed because the workbench filled up says so, with the free space and
the step's need (:func:`no_space_error`). The results record the workbench's
own filesystem, mount and device (:func:`workbench_facts`, the audit's
collector), so the figures carry the facts of the place that made them, and
the run's ``noise_context`` (common.noise.context: governor, turbo, swap,
pressure counters; and delay accounting, which the runner turns on for its
run where it may act as root and puts back after: common.timesplit). A runner
killed outright (SIGKILL) cannot put it back, and kernel.task_delayacct stays 1. The
results file is written atomically, once, at the end. One run at a time per
lab root: a second run is refused (exit 3) naming the run that holds it.
With ``--config-json`` the runner makes the run's directory (the results
file's) and keeps the config there as ``config.json`` (atomically) before it
starts, so the role needs no remote task of its own for either.

While it runs, the runner keeps ``status.json`` beside the results file (one
line of JSON, replaced atomically at each step): the step running, its place in
the list, when it started (host clock, Unix seconds) and the steps done so far.
The lab_run role starts the runner with ``--detach`` (:mod:`detach`: it returns
at once and the runner goes on in its own session) and reads the status file
while the lab runs, so the controller shows each host's step live; see
:func:`write_status`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import importlib
import json
import os
import platform
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

from . import codeinfo, detach, registry
from .audit import collect as audit_collect
from .common import noise, timesplit
from .common.facts import unavailable
from .common.formats import stamp
from .common.fsio import atomic_write_json, atomic_write_text
from .common.lock import LockHeld, RunLock
from .common.result import emit as emit_result
from .common.units import MIB
from .loadlab import loaders
from .savers import registry as saverlib

# The lock file under the lab root: one run at a time per lab root (its workbench, its venv).
LOCK_NAME = "lab.lock"
# Exit status when another run holds the lab root.
EXIT_LOCKED = 3
# Exit status of a run stopped by SIGTERM or SIGINT (128 + SIGINT, as a shell reports Ctrl-C).
EXIT_INTERRUPTED = 130
# The most characters of a failed step's error and traceback kept in the results: the controller refuses
# a string past 64 Ki characters (disklab.values.MAX_STRING_CHARS), and would then lose the whole run.
ERROR_CHARS = 16 << 10


class Interrupted(BaseException):
    """SIGTERM or SIGINT reached the runner (``disklab_host.stop``, or Ctrl-C); not a step failure."""


def _interrupt(signum, frame) -> None:
    raise Interrupted(signal.Signals(signum).name)


# The status file, beside the results file (read by the lab_run role while the lab runs).
STATUS_NAME = "status.json"
# The run's config, kept beside the results file when it came inline (--config-json).
CONFIG_NAME = "config.json"


def write_status(path: Path, **fields) -> None:
    """Replace the status file with one line of JSON: ``fields`` plus pid and ``updated_unix``.

    Fields: state (starting | running | finished | interrupted | refused),
    run_id, step, step_index (1-based), steps, step_started_unix, done
    ([name, status, wall_s] per finished step). Never raises: a status file
    that cannot be written costs the live view, not the run.
    """
    doc = {"pid": os.getpid(), "updated_unix": round(time.time(), 3), **fields}
    try:
        atomic_write_text(path, json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
    except OSError as exc:
        print(f"disklab lab: cannot write the status file {path}: {exc}", file=sys.stderr)


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def load_config(path: Path) -> dict:
    """Read CONFIG and resolve its sizes. Raises ValueError naming a bad setting."""
    cfg = json.loads(path.read_text())
    for key in ("workbench", "lab_root"):  # the role leaves ~ for the host to expand
        if key in cfg:
            cfg[key] = os.path.expanduser(cfg[key])
    cfg["sizes"] = registry.resolve(cfg["profile"], cfg.get("settings") or {}, strict=False)
    cfg.setdefault("system", platform.system())
    registry.check_steps(cfg["steps"])
    loaders.check_settings(cfg.get("settings") or {})
    saverlib.check_settings(cfg.get("settings") or {})
    return cfg


# What torch's zip writer (caffe2/serialize/inline_container.cc) says when a write came up short: on a
# full disk torch.save raises these words, not ENOSPC.
TORCH_SHORT_WRITE = ("inline_container", "unexpected pos", "PytorchStreamWriter failed")


def _chain(exc: BaseException):
    """``exc`` and every exception it was raised from or while handling (__cause__, __context__)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def no_space_error(exc: BaseException, workbench: Path, needed_bytes: int) -> str | None:
    """The error to record when ``exc`` is the workbench filling up, else None.

    The workbench filled up when an OSError with errno ENOSPC is anywhere in the exception chain, or an
    exception there quotes ENOSPC's words (``os.strerror(ENOSPC)``: safetensors' error, or a child's
    OSError passed up as text by the crash step's saver), or when torch's zip writer failed
    (:data:`TORCH_SHORT_WRITE`) while the workbench's free space (shutil.disk_usage, measured now,
    before the step's files are removed) is below ``needed_bytes``, the step's need from the registry
    (registry.needed_bytes, as preflight counts it).
    """
    try:
        free: int | None = shutil.disk_usage(workbench).free
    except OSError:
        free = None
    chain = list(_chain(exc))
    words = os.strerror(errno.ENOSPC)  # "No space left on device"
    enospc = any((isinstance(e, OSError) and e.errno == errno.ENOSPC) or words in str(e) for e in chain)
    torch_short = any(
        isinstance(e, RuntimeError) and any(words in str(e) for words in TORCH_SHORT_WRITE) for e in chain
    )
    if not enospc and not (torch_short and free is not None and free < needed_bytes):
        return None
    free_text = f"{free / MIB:,.1f} MiB free" if free is not None else "free space unknown"
    need_text = f"the step needs {needed_bytes / MIB:,.1f} MiB"
    return f"no space left on the workbench {workbench}: {free_text}, {need_text}"


def bounded(text: str, limit: int = ERROR_CHARS) -> str:
    """``text`` itself, or past ``limit`` characters its start and its end with what was cut between."""
    if len(text) <= limit:
        return text
    marker = " … [{:,} characters cut] … "
    room = limit - len(marker.format(len(text)))
    head, tail = room - room // 2, room // 2
    return text[:head] + marker.format(len(text) - head - tail) + text[len(text) - tail :]


def run_step(name: str, cfg: dict) -> dict:
    """Run one step; never raises. Adds its wall time in seconds.

    A step that fails because the workbench filled up records that, with the free space and the step's
    need (:func:`no_space_error`), in place of the error it met (torch's says nothing of the disk).
    """
    workdir = Path(cfg["workbench"]) / name
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        module = importlib.import_module(registry.step(name).module)
        section = module.run(cfg, workdir)
    except Exception as exc:  # recorded, so the other steps keep their results
        sizes = cfg.get("sizes")  # resolved by the runner; a step run on its own may have none
        needed = registry.needed_bytes(sizes, [name], cfg.get("settings") or {}).get(name, 0) if sizes else 0
        no_space = no_space_error(exc, Path(cfg["workbench"]), needed)
        section = {
            "status": "failed",
            "error": no_space or bounded(f"{type(exc).__name__}: {exc}"),
            "traceback": bounded(traceback.format_exc(limit=8)),
        }
        if no_space:
            section["error_raised"] = bounded(f"{type(exc).__name__}: {exc}")
        if name not in registry.KEPT:  # a failed step leaves no partial files (a 54 MiB checkpoint, say)
            shutil.rmtree(workdir, ignore_errors=True)
    section["step_wall_s"] = time.perf_counter() - start
    return section


def workbench_facts(workbench: str) -> dict:
    """The filesystem, mount and device of the workbench the steps write to, collected by the runner
    itself (the audit's collector, audit.collect.collect_workbench), so the figures carry the facts of
    the place that made them; ``{"unavailable": reason}`` when the workbench cannot be located."""
    try:
        location = audit_collect.locate_workbench(workbench)
    except ValueError as exc:
        return unavailable(f"the lab runner could not locate its workbench: {exc}")
    return audit_collect.collect_workbench(audit_collect.Probe(), location["requested_path"], location)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", type=Path, help="the run's config.json")
    src.add_argument(
        "--config-json", help="the same config, inline: kept as config.json beside --out, its directory made"
    )
    ap.add_argument("--facts", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*", help="run only these steps (for development)")
    ap.add_argument(
        "--detach", action="store_true", help="return at once; run in the background, recording exit.json"
    )
    args = ap.parse_args(argv)

    if args.config_json is not None:
        try:
            json.loads(args.config_json)
        except ValueError as exc:
            ap.error(f"--config-json is not JSON: {exc}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.config = args.out.parent / CONFIG_NAME
        atomic_write_text(args.config, args.config_json.rstrip("\n") + "\n")
    if args.detach:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        return detach.start(args.out.parent, lambda: _attached(args), args.out, lambda: _after_runner(args))
    return _attached(args)


def _after_runner(args: argparse.Namespace) -> None:
    """The supervisor's part once the runner has ended: kernel.task_delayacct set back where a runner killed
    outright (SIGKILL, the OOM killer) left it on, as its mark in the lab root says."""
    cfg = load_config(args.config)
    lab_root = Path(cfg.get("lab_root") or Path(cfg["workbench"]).parent)
    note = timesplit.put_back_left_on(lab_root / timesplit.DELAYACCT_MARK, bool(cfg.get("become_allowed")))
    if note:
        print(f"disklab lab: {note}", file=sys.stderr, flush=True)


def _attached(args: argparse.Namespace) -> int:
    """The run itself, in this process: status, config, signals, the lab root's lock, the steps."""
    status = args.out.parent / STATUS_NAME
    write_status(status, state="starting")
    cfg = load_config(args.config)
    lab_root = Path(cfg.get("lab_root") or Path(cfg["workbench"]).parent)
    # Lead a process group of its own, so `stop` ends the runner with its savers and loaders, and
    # outlive a dropped SSH session (SIGHUP); SIGTERM and SIGINT end the run cleanly.
    if os.getpgrp() != os.getpid():
        os.setpgrp()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        with RunLock(lab_root / LOCK_NAME, cfg["run_id"], what=f"the lab root {lab_root}") as lock:
            if lock.took_over:
                print(f"disklab lab: {lock.took_over}", file=sys.stderr)
            return _run(cfg, args, lock)
    except LockHeld as exc:
        print(f"disklab lab: refused: {exc}", file=sys.stderr)
        write_status(status, state="refused", run_id=cfg["run_id"], reason=str(exc))
        return EXIT_LOCKED
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _run(cfg: dict, args: argparse.Namespace, lock: RunLock) -> int:
    """Run the steps and write the results file; holds the lab root's lock (see main).

    On SIGTERM or SIGINT the step that was running has its files removed and
    no results file is written: exit EXIT_INTERRUPTED, naming the step.
    """
    steps = [s for s in cfg["steps"] if not args.only or s in args.only]
    results = stamp(
        "results",
        {
            "run_id": cfg["run_id"],
            "host": cfg["host"],
            "profile": cfg["profile"],
            "sizes": cfg["sizes"],
            "started_utc": utc_now(),
            "lab_python": sys.version.split()[0],
            "lab_platform": platform.platform(),
            "lab_code": codeinfo.lab_code(steps),
            "lock_takeover": lock.took_over,
            "facts": json.loads(args.facts.read_text()),
            "workbench": workbench_facts(cfg["workbench"]),
            "experiments": {},
        },
    )
    name = None
    status = args.out.parent / STATUS_NAME
    done: list[list] = []
    become = bool(cfg.get("become_allowed"))
    lab_root = Path(cfg.get("lab_root") or Path(cfg["workbench"]).parent)  # its lock is held (_attached)
    acct = timesplit.delay_accounting_on(become, cfg.get("system"), mark=lab_root / timesplit.DELAYACCT_MARK)
    try:
        for i, name in enumerate(steps, 1):
            write_status(status, state="running", run_id=cfg["run_id"], step=name, step_index=i,
                         steps=len(steps), step_started_unix=round(time.time(), 3), done=done)  # fmt: skip
            lock.note(step=name, step_index=i, steps=len(steps))
            print(f"disklab-step {name}", flush=True)
            section = results["experiments"][name] = run_step(name, cfg)
            done.append([name, section.get("status"), round(section["step_wall_s"], 3)])
    except Interrupted as why:
        if name and name not in registry.KEPT:
            shutil.rmtree(Path(cfg["workbench"]) / name, ignore_errors=True)
        print(f"disklab lab: interrupted ({why}) at step {name}; no results written", file=sys.stderr)
        write_status(
            status, state="interrupted", run_id=cfg["run_id"], step=name, steps=len(steps), done=done
        )
        return EXIT_INTERRUPTED
    finally:
        acct = timesplit.delay_accounting_restore(acct, become)
    results["noise_context"] = {**noise.context(cfg.get("system")), "delay_accounting": acct}
    results["finished_utc"] = utc_now()
    atomic_write_json(args.out, results)
    write_status(status, state="finished", run_id=cfg["run_id"], steps=len(steps), done=done)
    failed = [n for n, s in results["experiments"].items() if s.get("status") == "failed"]
    emit_result({"out": str(args.out), "failed_steps": failed})
    return 0


if __name__ == "__main__":
    sys.exit(main())
