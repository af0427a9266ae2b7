"""The provision command: decide, refuse or provision, then print one JSON object.

Usage: python disklab_host.pyz provision --venv PATH --pin torch==2.13.0 --pin ... [--torch-index
auto|cpu|cuda|pypi|URL] [--pip-arg=ARG ...] [--require-cuda] [--loader NAME ...] [--lock
auto|required|never] [--check]

Prints one JSON object: ``{"ok", "changed", "action", "reason", "torch_index", "python", "versions",
"versions_source", "lock"}`` (lock: ``{"locked", "name", "sha256", "why"}``; versions_source: ``{"from":
"probed_now" | "venv_record", "probed_utc"}``; and, when a loader is set, ``loaders``: each one's
``{"status": "ok", "version", "pins", "lock"}`` or ``{"status": "not_run", "reason", "pins", "lock"}``,
and ``loader_locks``: each one's lock as ``lock`` is, or why it has none, in ``--check`` too)
with action kept, extended, created or rebuilt (``--check``: would_keep, would_extend, would_create or
would_rebuild, which change nothing; ``changed`` then says whether the real run would change the host).
Exit status 0; 2 for a refusal and 1 for a failed command or file operation, with ``{"ok": false,
"error": ...}`` on stdout and the same line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import lock as locklib
from .. import venvprobe
from ..common.fsio import atomic_write_json
from ..common.result import emit as emit_result
from ..loadlab import loaders as loaderlib
from . import hostfacts, install, loaders, savers, torchindex, venvrecord, venvstate
from .errors import Failed, Refused


def provision(
    venv: Path,
    pins: list[str],
    setting: str = "auto",
    pip_args: list[str] | None = None,
    require_cuda: bool = False,
    check: bool = False,
    facts: hostfacts.HostFacts | None = None,
    loader_names: list[str] | None = None,
    lock_setting: str = "auto",
    saver_names: list[str] | None = None,
) -> dict:
    """Decide, refuse or provision; return the JSON object main() prints. Raises Refused or Failed.

    ``loader_names``: the production loaders to install beside the pins (provision.loaders);
    ``lock_setting``: lab_venv_lock (disklab_host.lock: auto, required, never); ``saver_names``: the
    framework savers to install last, at their pins, with the venv's pins as constraints (provision.savers).
    """
    pip_args = list(pip_args or [])
    loader_names = loaders.check_loaders(list(loader_names or []))
    saver_names = savers.check_savers(list(saver_names or []))
    if lock_setting not in locklib.SETTINGS:
        raise Refused(f"lab_venv_lock must be one of {', '.join(locklib.SETTINGS)}, got {lock_setting!r}")
    facts = facts or hostfacts.collect_host()
    parsed = hostfacts.parse_pins(pins)
    index = torchindex.decide_index(setting, facts)
    hostfacts.check_host(facts, parsed, setting, index, require_cuda)
    lock, lock_why = locklib.choose(
        lock_setting, facts.system, facts.machine, facts.python_version, index, parsed
    )
    if lock is None and lock_setting == "required":
        raise Refused(
            f"lab_venv_lock is required but {lock_why}; set lab_venv_lock: auto to install the pins alone"
        )
    locks = loaders.loader_locks(lock_setting, lock, loader_names)
    want = venvrecord.wanted_record(
        pins, index, pip_args, loader_names, lock, {n: x for n, (x, _) in locks.items()}
    )
    # a kept venv must hold every package of its lock at the lock's version (unless a loader, installed
    # without a lock, may have moved one: a loader's lock holds the venv's lock's versions)
    held = lock and all(x for x, _ in locks.values())
    # and every package each loader's lock installs, for a loader installed (venvrecord.held_pins)
    loader_packages = {name: x.packages for name, (x, _) in locks.items()} if held else None
    action, reason, found = venvrecord.plan(
        venv, want, {**lock.packages, **parsed} if held else parsed, loader_packages
    )
    source = lock.extra_index if lock else index  # torch's index (None: PyPI's; the CUDA locks are PyPI's)
    out = {"torch_index": source or "pypi", "python": str(install.venv_python(venv)), "venv": str(venv),
           "lock": locklib.entry(lock, lock_why)}  # fmt: skip
    if loader_names:  # each loader's lock, or why it is installed from its pins alone (--check says it too)
        out["loader_locks"] = {name: locklib.entry(x, why) for name, (x, why) in locks.items()}
    if check:
        kept = action in ("keep", "extend") and found
        versions = venvstate.versions(found) if kept else None
        if versions and require_cuda:
            _refuse_without_cuda(versions, venv, source)
        recorded = (
            (venvrecord.read_record(venv) or {}).get(loaderlib.RECORD_KEY) if kept and loader_names else None
        )
        retry = loaders.pip_failed_names(recorded)
        if retry:
            reason += (
                f"; would try pip again for the loader(s) it could not install before: {', '.join(retry)}"
            )
        return {"ok": True, "changed": action != "keep" or bool(retry), "action": f"would_{action}",
                "reason": reason, **out, "versions": versions,
                "versions_source": venvstate.source(found) if kept else None,
                **({"loaders": recorded} if recorded else {})}  # fmt: skip
    results, retried = None, []
    if action == "extend":
        results, retried, found = loaders.extend(venv, want, parsed, pip_args, locks, loader_packages)
    elif action != "keep":
        if action == "rebuild":
            install.remove_venv(venv)
        install.install(venv, pins, parsed["torch"], index, pip_args, lock)
        results = {
            name: loaders.install_loader(venv, name, pip_args, locked=locks[name]) for name in loader_names
        }
        found = venvstate.probe(venv)
        problem = venvrecord.probe_problem(found, venvrecord.held_pins(parsed, results, loader_packages))
        if problem:
            raise Failed(f"the new venv at {venv} was installed but {problem}")
        extra = {loaderlib.RECORD_KEY: results} if loader_names else {}
        extra["lock_why"] = lock_why
        atomic_write_json(
            venv / venvrecord.RECORD_NAME,
            {**want, **extra, venvprobe.PROBE_KEY: venvstate.record_entry(found)},
        )
    else:
        record = venvrecord.read_record(venv) or want
        results = record.get(loaderlib.RECORD_KEY)
        # a loader pip could not install last time is tried again (a wheelhouse filled, an index back)
        retried = loaders.pip_failed_names(results)
        if retried:
            results = {
                **results,
                **{n: loaders.install_loader(venv, n, pip_args, locked=locks[n]) for n in retried},
            }
            if any(results[n]["status"] == "ok" for n in retried):
                found = venvstate.probe(
                    venv
                )  # what the loader's install may have moved must still match the pins
                problem = venvrecord.probe_problem(
                    found, venvrecord.held_pins(parsed, results, loader_packages)
                )
                if problem:
                    raise Failed(f"installing the loader(s) {', '.join(retried)} into {venv}: {problem}")
            record = {**record, loaderlib.RECORD_KEY: results}
        if found["from"] == "probed_now" or retried:  # kept, and probed or changed: the record keeps it
            if results and not retried:
                results = loaders.recheck_loaders(venv, results)
                record = {**record, loaderlib.RECORD_KEY: results}
            atomic_write_json(
                venv / venvrecord.RECORD_NAME, {**record, venvprobe.PROBE_KEY: venvstate.record_entry(found)}
            )
    if retried:
        now = [f"{n} {'installed' if results[n]['status'] == 'ok' else 'still not'}" for n in retried]
        reason += f"; tried pip again for the loader(s) it could not install before: {', '.join(now)}"
    versions = venvstate.versions(found)
    if require_cuda:
        _refuse_without_cuda(versions, venv, source)
    action = {"keep": "kept", "extend": "extended", "create": "created", "rebuild": "rebuilt"}[action]
    changed = action != "kept" or any(results[n]["status"] == "ok" for n in retried)
    if saver_names:  # last, held to the venv's pins and, where it came from a lock, to every package of it
        held_to = [*pins, *(f"{n}=={v}" for n, v in (lock.packages if lock else {}).items())]
        out["savers"] = savers.install_savers(venv, saver_names, held_to, pip_args)
        changed = changed or any(r.get("installed_now") for r in out["savers"].values())
    return {"ok": True, "changed": changed, "action": action, "reason": reason, **out,
            "versions": versions, "versions_source": venvstate.source(found),
            **({"loaders": results} if loader_names else {})}  # fmt: skip


def _refuse_without_cuda(versions: dict, venv: Path, index: str | None) -> None:
    """Refuse a venv whose torch has no CUDA (lab_venv_require_cuda), naming the index it came from."""
    if versions.get("cuda_available"):
        return
    source = index or "PyPI's default index"
    if versions.get("torch_cuda") is None:
        raise Refused(
            f"lab_venv_require_cuda is true but torch {versions.get('torch')} in {venv} is a CPU-only build "
            f"(torch.version.cuda is None), installed from {source}; set lab_venv_torch_index to cuda or auto"
        )
    raise Refused(
        f"lab_venv_require_cuda is true but torch {versions.get('torch')} in {venv} (CUDA "
        f"{versions['torch_cuda']}, from {source}) reports torch.cuda.is_available() == False: "
        "check the NVIDIA driver with nvidia-smi"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", required=True, help="the venv's directory (~ is expanded)")
    ap.add_argument("--pin", action="append", default=[], help="NAME==VERSION, repeatable")
    ap.add_argument("--torch-index", default="auto", help="auto, cpu, cuda, pypi or an index URL")
    ap.add_argument("--pip-arg", action="append", default=[], help="an extra pip argument: --pip-arg=ARG")
    ap.add_argument("--require-cuda", action="store_true", help="refuse a torch without CUDA")
    ap.add_argument(
        "--loader", action="append", default=[], help="a production loader to install, repeatable"
    )
    ap.add_argument("--saver", action="append", default=[], help="a framework saver to install, repeatable")
    ap.add_argument("--lock", default="auto", help="auto, required or never: install from the hash lock")
    ap.add_argument("--check", action="store_true", help="report what would be done, change nothing")
    args = ap.parse_args(argv)
    venv = Path(args.venv).expanduser().absolute()
    try:
        verdict = provision(
            venv, args.pin, args.torch_index, args.pip_arg, args.require_cuda, args.check,
            loader_names=args.loader, lock_setting=args.lock, saver_names=args.saver,
        )  # fmt: skip
    except (Refused, Failed, OSError) as exc:
        emit_result({"ok": False, "error": str(exc)})
        word = "refused" if isinstance(exc, Refused) else "failed"
        print(f"disklab provision {word}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, Refused) else 1
    emit_result(verdict)
    return 0
