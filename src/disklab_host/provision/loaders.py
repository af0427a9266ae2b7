"""The production loaders of ``--loader NAME`` (``lab_venv_loaders``): one pip install per loader after the
venv's own pins, at its exact pins (loadlab.loaders.LOADERS).

Each comes from its own lock where the venv's lock has one (disklab_host.lock.choose_extra: ``pip install
--require-hashes --no-deps``, only the packages it adds), else from its pins alone (``auto``; ``required``
refuses it before any download). One that cannot be installed (pip's words on what failed) or imported
(the import's error) is recorded ``not_run`` with the reason (``loader_results`` in the record and the
printed object, each with its ``lock``) and the rest goes on; a file whose hash its lock does not list
is refused, as for the venv's lock. A kept venv tries pip again for each loader pip could not install
before (a wheelhouse filled since, an index back), and says so (an extended venv too).
"""

from __future__ import annotations

from pathlib import Path

from .. import lock as locklib
from .. import venvprobe
from ..common.fsio import atomic_write_json
from ..loadlab import loaders as loaderlib
from . import install, venvrecord, venvstate
from .errors import Failed, Refused

# A loader installed without its lock's choice (tests, a pin given by hand): its pins alone.
UNLOCKED: tuple[locklib.Lock | None, str] = (None, "installed from its pins alone")


def check_loaders(names: list[str]) -> list[str]:
    """``names`` when each is a production loader (loadlab.loaders.NAMES); raises Refused naming the
    setting and the known loaders."""
    unknown = [n for n in names if n not in loaderlib.BY_NAME]
    if unknown:
        raise Refused(f"lab_venv_loaders has unknown loader(s) {unknown}; known: {list(loaderlib.NAMES)}")
    return list(dict.fromkeys(names))


def loader_locks(
    setting: str, lock: locklib.Lock | None, names: list[str]
) -> dict[str, tuple[locklib.Lock | None, str]]:
    """Each loader's ``(lock, why)`` on a venv installed from ``lock`` (disklab_host.lock.choose_extra);
    under ``lab_venv_lock: required``, Refused for the first loader without one, before any download."""
    out = {}
    for name in names:
        pins = {
            locklib.canonical(p.partition("==")[0]): p.partition("==")[2]
            for p in loaderlib.BY_NAME[name].pins
        }
        out[name] = locklib.choose_extra(setting, lock, "loaders", name, pins)
        if out[name][0] is None and setting == "required":
            where = lock.name if lock else "this host"
            raise Refused(
                f"lab_venv_lock is required but the loader {name} has no lock for {where}: {out[name][1]}; "
                "set lab_venv_lock: auto to install it from its pins alone, or leave it out of "
                "lab_run_load_loaders"
            )
    return out


def install_loader(
    venv: Path,
    name: str,
    pip_args: list[str],
    pins: list[str] | None = None,
    locked: tuple[locklib.Lock | None, str] = UNLOCKED,
) -> dict:
    """pip install one loader into the venv, then import it there (loaders.import_check): from its lock
    where ``locked`` (:func:`loader_locks`) has one (locklib.commands), else its pins (default: its pins in
    loaders.LOADERS).

    Returns ``{"status": "ok", "version", "pins", "lock"}``, or ``{"status": "not_run", "reason", "pins",
    "lock"}`` with pip's words on what failed (no wheel for this host, say: install.run) or the
    import's error; ``lock`` is locklib.entry's. Raises Refused, naming the package, where the index
    serves a file with a hash the loader's lock does not list.
    """
    pins = list(pins or loaderlib.BY_NAME[name].pins)
    lock, why = locked
    pip = [str(install.venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check"]
    entry = {"pins": pins, "lock": locklib.entry(lock, why)}
    try:
        if lock is None:
            install.run([*pip, *pins, *pip_args], f"installing the loader {name}")
        else:
            install.run_lock(
                locklib.commands(pip, venv, lock, pip_args), lock, f"installing the loader {name}"
            )
    except Failed as exc:
        return {"status": "not_run", "reason": f"pip could not install {' '.join(pins)}: {exc.last}", **entry}
    return {**loaderlib.import_check(name, str(install.venv_python(venv)), env=install.clean_env()), **entry}


def _pip_failed(rec: dict) -> bool:
    """A loader record whose install pip refused (no wheel, no index): worth trying again next run."""
    return rec.get("status") == "not_run" and str(rec.get("reason", "")).startswith("pip could not install")


def pip_failed_names(results: dict | None) -> list[str]:
    """The loaders of ``results`` (a record's loader_results) whose install pip refused, sorted."""
    return sorted(n for n, r in (results or {}).items() if _pip_failed(r))


def recheck_loaders(venv: Path, results: dict) -> dict:
    """Each installed loader imported again in the venv (after the venv changed under its record);
    a loader pip could not install keeps its reason."""
    out = {}
    for name, rec in results.items():
        pins = rec.get("pins") or list(loaderlib.BY_NAME[name].pins)
        if _pip_failed(rec):
            out[name] = rec
        else:
            check = loaderlib.import_check(name, str(install.venv_python(venv)), env=install.clean_env())
            out[name] = {**check, "pins": pins, **({"lock": rec["lock"]} if "lock" in rec else {})}
    return out


def extend(
    venv: Path,
    want: dict,
    pins: dict[str, str],
    pip_args: list[str],
    locks: dict | None = None,
    loader_packages: dict[str, dict[str, str]] | None = None,
) -> tuple[dict, list[str], dict]:
    """Install the loaders ``want`` adds (plan's extend) into the kept venv at ``venv``, one pip install
    each as on a new venv, and try pip again for a recorded loader pip could not install before (as a kept
    venv does); then import each loader installed before again (the venv changed under it); then probe it: the
    venv must still hold its pins and each installed loader's (Failed otherwise, with the record left as
    it was, so the next run sees the venv as it is). Writes the record (the loaders now held and each one's
    outcome) and returns every loader's outcome, the loaders tried again, and the probe. ``locks``: each
    loader's (lock, why), :func:`loader_locks` (None: each from its pins alone); ``loader_packages``: what
    each loader's lock installs, held too (venvrecord.held_pins)."""
    record = venvrecord.read_record(venv) or {}
    had = record.get(loaderlib.RECORD_KEY) or {}
    retried = pip_failed_names(had)
    new = {
        n: install_loader(venv, n, pip_args, locked=(locks or {}).get(n, UNLOCKED))
        for n in [*venvrecord.added_loaders(record, want), *retried]
    }
    # after the installs, which may have moved what the kept loaders import
    carried = recheck_loaders(venv, {n: r for n, r in had.items() if n not in retried})
    results = {name: {**carried, **new}[name] for name in want["loaders"]}
    found = venvstate.probe(venv)
    problem = venvrecord.probe_problem(found, venvrecord.held_pins(pins, results, loader_packages))
    if problem:
        raise Failed(f"installing the loader(s) {', '.join(new)} into {venv}: {problem}")
    entry = {
        "loaders": want["loaders"],
        loaderlib.RECORD_KEY: results,
        venvprobe.PROBE_KEY: venvstate.record_entry(found),
    }
    kept = {k: v for k, v in record.items() if k != "loader_locks"}
    locked = {"loader_locks": want["loader_locks"]} if "loader_locks" in want else {}
    atomic_write_json(venv / venvrecord.RECORD_NAME, {**kept, **entry, **locked})
    return results, retried, found
