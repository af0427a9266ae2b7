"""Lab step ``savers``: the checkpoint savers users run, under a real SIGKILL and every power-cut state.

For each saver of ``lab_run_savers`` (disklab_host.savers.registry) and each case, a fresh directory beside
the earlier checkpoint and the same directory over it: the crash lab's kills at exact calls
(disklab_host.savers.kill) and the power-cut simulator over every crash state of the recorded save
(disklab_host.savers.powercut), each state judged by content. A saver that cannot be imported here (not
installed: provisioning's words on why, where it tried) is ``not_run`` with the reason; one whose save
fails is ``failed`` with the error, and the other savers go on. Linux with strace only.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import platform
import shutil
import sys
import time
from pathlib import Path

from ..common.facts import not_run
from ..powercut import record as pc_record
from ..powercut import simulate
from ..powercut.trace import RecordError
from ..savers import frameworks, judge, kill, mechanism, registry
from ..savers import powercut as sp

SETTING = "savers"  # lab_run_savers
DROPPED = ("samples", "call_texts")  # per-state rows and every call's text: the report reads neither


def install_record() -> dict:
    """Each saver's outcome as provisioning recorded it in this venv ({} where it recorded none)."""
    try:
        return json.loads((Path(sys.prefix) / registry.INSTALL_RECORD).read_text())
    except (OSError, ValueError):
        return {}


def unavailable(spec: registry.Spec, record: dict) -> str | None:
    """Why ``spec`` cannot run in this Python, or None."""
    missing = [m for m in spec.saver.imports if importlib.util.find_spec(m.split(".")[0]) is None]
    if not missing:
        return None
    why = (record.get(spec.saver.name) or {}).get("reason")
    if why:
        return why
    return (f"{', '.join(missing)} is not installed in the lab venv (provisioning installs "
            f"{' '.join(spec.saver.pins)} when {registry.SETTING} names {spec.saver.name})")  # fmt: skip


def versions(spec: registry.Spec) -> dict[str, str]:
    """The installed version of torch and of each package the saver pins."""
    names = ["torch", *(p.partition("==")[0] for p in spec.saver.pins)]
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _slim(result: dict) -> dict:
    rec = {k: v for k, v in result["recording"].items() if k not in DROPPED}
    models = {k: {f: v for f, v in m.items() if f not in DROPPED} for k, m in result["models"].items()}
    return {**{k: v for k, v in result.items() if k not in ("recording", "models")}, "recording": rec,
            "models": models}  # fmt: skip


def one_case(spec: registry.Spec, case: str, workdir: Path, state_mib: int) -> dict:
    """The power-cut simulator and the crash lab's kills for one saver and case."""
    base = workdir / f"{spec.label.replace(':', '-')}-{case}"
    try:
        result = _slim(sp.analyse(spec, case, base / "powercut", state_mib))
    finally:
        shutil.rmtree(base / "powercut", ignore_errors=True)
    try:
        kills = kill.run(spec, case, base / "kill", state_mib)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {"powercut": result, "kill": kills}


def judge_saver(cases: dict) -> dict:
    """The saver's verdicts over its cases: survives a kill (no real kill and no process-kill state lost or
    mixed it), survives a power cut, and the fix to make."""
    kill_safe = all(
        c["kill"].get("verdict") != "unsafe" and c["powercut"]["models"]["process_kill"]["verdict"] == "safe"
        for c in cases.values()
    )
    power_verdict = judge.worst(c["powercut"]["models"]["power_cut"]["verdict"] for c in cases.values())
    found = []
    for case, c in cases.items():
        for m in c["powercut"]["mechanisms"]:
            found.append({**m, "case": case})
    verdicts = {"kill": "safe" if kill_safe else "unsafe", "power_cut": power_verdict}
    return {"verdicts": verdicts, "mechanisms": found, "suggestion": mechanism.suggestion(found, verdicts)}


def run(cfg: dict, workdir: Path) -> dict:
    """Lab step: every saver of lab_run_savers under kill and power cut. Returns the ``savers`` section."""
    specs = registry.parse_all((cfg.get("settings") or {}).get(SETTING) or [], registry.SETTING)
    if not specs:
        return not_run(
            f"{registry.SETTING} is empty (the default): set it to the savers to judge, e.g. "
            f"[{', '.join(registry.NAMES)}] (dcp:4 for four ranks)"
        )
    if cfg.get("system", platform.system()) != "Linux":
        return not_run("not available: the recorder and the exact kills need Linux strace")
    if pc_record.find_strace() is None:
        return not_run("not available (no strace): strace is not installed on this host")
    state_mib = cfg["sizes"]["savers_state_mib"]
    start = time.perf_counter()
    record = install_record()
    out = []
    for spec in specs:
        entry = {"saver": spec.label, "name": spec.saver.name, "ranks": spec.ranks, "title": spec.saver.title,
                 "call": spec.saver.call, "pins": list(spec.saver.pins), "versions": versions(spec),
                 "unpickles": frameworks.UNPICKLES.get(spec.saver.name)}  # fmt: skip
        why = unavailable(spec, record)
        if why:
            out.append({**entry, "status": "not_run", "reason": why})
            continue
        try:
            cases = {case: one_case(spec, case, workdir, state_mib) for case in sp.CASES}
        except Exception as exc:  # noqa: BLE001 -- one saver's failure never costs the others their results
            words = (
                str(exc)
                if isinstance(exc, (simulate.SpecError, RecordError))
                else f"{type(exc).__name__}: {exc}"
            )
            out.append({**entry, "status": "failed", "error": " ".join(words.split())[:2000]})
            continue
        out.append({**entry, "status": "ok", "cases": cases, **judge_saver(cases)})
    return {
        "status": "ok",
        "state_mib": state_mib,
        "state_bytes": sp.model.state_bytes(state_mib),
        "model": sp.model.config(state_mib),
        "timeout_s": sp.DEFAULT_TIMEOUT_S,
        "gloo_timeout_s": sp.DEFAULT_TIMEOUT_S,
        "savers": out,
        "wall_s": time.perf_counter() - start,
    }
