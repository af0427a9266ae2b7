"""The venv's record (``PATH/disklab-venv.json``: what it was made from) and the plan: keep, extend, create
or rebuild (``plan``).

A venv is kept when its record matches what is wanted and its Python has the pinned versions; otherwise
it is removed and rebuilt, but only when it is a venv (a record or a pyvenv.cfg): any other directory is
refused. A setting that only adds loaders extends it (the added loaders are installed, torch is not
installed again); one that removes, re-pins or locks a loader otherwise rebuilds it. pip arguments that
only change how pip fetches, waits or prints, or whether it writes ``.pyc`` files
(``PIP_TRANSPORT_OPTIONS``: ``--retries``, ``--no-compile``, ...), never rebuild a venv: its record keeps
the ones it was made with. The record is written last, atomically, so an interrupted install has none
and is rebuilt next time.
"""

from __future__ import annotations

import platform
import re
import sys
from pathlib import Path

from .. import lock as locklib
from .. import venvprobe
from ..loadlab import loaders as loaderlib
from . import hostfacts, venvstate
from .errors import Refused

RECORD_NAME = venvprobe.RECORD_NAME
RECORD_KIND = "disklab_host.provision"


def wanted_record(
    pins: list[str],
    index: str | None,
    pip_args: list[str],
    loader_names: list[str] | None = None,
    lock: locklib.Lock | None = None,
    loader_locks: dict[str, locklib.Lock | None] | None = None,
) -> dict:
    """What the venv is made from: this interpreter (path and version), the pins, the resolved torch
    index (None: PyPI's default), the extra pip arguments, the lock (``{"name", "sha256"}``, None without
    one) and, when any is set, the production loaders with their pins (``loaders``: ``{name: [pins]}``)
    and, when any is locked, their locks (``loader_locks``: ``{name: {"name", "sha256"}}``)."""
    out = {
        "made_by": RECORD_KIND,
        "base_python": sys.executable,
        "base_python_version": platform.python_version(),
        "pins": list(pins),
        "torch_index": index,
        "pip_args": list(pip_args),
        "lock": {"name": lock.name, "sha256": lock.sha256} if lock else None,
    }
    if loader_names:
        out["loaders"] = {name: list(loaderlib.BY_NAME[name].pins) for name in loader_names}
    locked = {n: {"name": x.name, "sha256": x.sha256} for n, x in (loader_locks or {}).items() if x}
    if locked:
        out["loader_locks"] = locked
    return out


# pip options that change how pip fetches, waits or prints, or only whether it writes .pyc files next to what
# it installs, never which packages or builds land in the venv (True: the option takes a value, as
# --retries=0 or as the next argument). A venv made with other values of these alone holds the same
# packages, so a change in them keeps it; its record keeps the ones it was made with. Every other pip
# argument (an index, find-links, --no-binary, a constraint) may change what is installed, and a change in
# it rebuilds the venv.
PIP_TRANSPORT_OPTIONS = {
    "--retries": True, "--timeout": True, "--progress-bar": True, "--no-compile": False, "--compile": False,
    "--quiet": False, "--verbose": False, "--no-cache-dir": False, "--disable-pip-version-check": False,
    "--no-input": False,
}  # fmt: skip
QUIET_OR_VERBOSE = re.compile(r"-(q+|v+)")  # -q, -qq, -v, -vv: pip's short forms, stacked
# pip install's options that take their value as the next argument (pip 23 to 25), so that value is never
# read as an option of its own (``--global-option --quiet`` is a build option, not pip's --quiet).
PIP_VALUE_OPTIONS = frozenset({
    "-c", "--constraint", "-r", "--requirement", "-e", "--editable", "-t", "--target", "--platform",
    "--python-version", "--implementation", "--abi", "--root", "--prefix", "--src", "--upgrade-strategy",
    "-C", "--config-settings", "--global-option", "--install-option", "--no-binary", "--only-binary",
    "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--proxy", "--cert", "--client-cert",
    "--cache-dir", "--trusted-host", "--log", "--exists-action", "--report", "--keyring-provider",
    "--use-feature", "--use-deprecated", "--python", "--progress-bar", "--retries", "--timeout",
})  # fmt: skip


def content_pip_args(pip_args: list[str] | None) -> list[str]:
    """The pip arguments that may change what is installed: ``pip_args`` without PIP_TRANSPORT_OPTIONS
    (and their values), in order. The value of any other option that takes one is kept as it is."""
    out, args = [], list(pip_args or [])
    i = 0
    while i < len(args):
        name, eq, _ = args[i].partition("=")
        step = 2 if name in PIP_VALUE_OPTIONS and not eq and i + 1 < len(args) else 1  # with its value
        if name not in PIP_TRANSPORT_OPTIONS and not QUIET_OR_VERBOSE.fullmatch(args[i]):
            out += args[i : i + step]
        i += step
    return out


def added_loaders(record: dict, want: dict) -> list[str]:
    """The loaders ``want`` adds to a venv made as ``record`` says, in ``want``'s order, when that is all
    that differs in its loaders: every recorded loader still wanted at the same pins and lock. Empty
    otherwise (none added, or one removed, re-pinned or locked otherwise, which rebuilds: the venv holds
    what its record says and no more)."""
    had, wanted = record.get("loaders") or {}, want.get("loaders") or {}
    had_locks, want_locks = record.get("loader_locks") or {}, want.get("loader_locks") or {}
    if any(wanted.get(n) != pins or want_locks.get(n) != had_locks.get(n) for n, pins in had.items()):
        return []
    return [name for name in wanted if name not in had]


def read_record(venv: Path) -> dict | None:
    """The venv's record, or None when it is missing or unreadable."""
    return venvprobe.read_record(venv)


def held_pins(
    pins: dict[str, str],
    loader_results: dict | None,
    loader_packages: dict[str, dict[str, str]] | None = None,
) -> dict[str, str]:
    """The versions a venv must hold: its ``pins`` and the pins of each loader installed in it (status ok
    in ``loader_results``), so that a loader still is there, at its pins; and, for such a loader installed
    from its lock, every package that lock installs (``loader_packages``: {loader: {PEP 503 name:
    version}}, each lock's packages), so that a dependency moved under it is seen too."""
    out = dict(pins)
    for name, rec in (loader_results or {}).items():
        if rec.get("status") == "ok":
            out.update(hostfacts.parse_pins([*rec.get("pins", []), "torch==" + pins["torch"]]))
            out.update((loader_packages or {}).get(name, {}))
    return out


def _matches(installed: str | None, pinned: str) -> bool:
    """Whether an installed version satisfies ``==pinned`` the way pip reads it: a pin without a local
    label (``+cpu``) matches any local label of that version."""
    if installed is None:
        return False
    return installed == pinned if "+" in pinned else installed.split("+", 1)[0] == pinned


def probe_problem(found: dict | None, pins: dict[str, str]) -> str | None:
    """Why a probe does not show the pinned versions, or None when it does."""
    if found is None:
        return "its python does not run"
    result = found["result"]
    modules = ("torch", "safetensors", "numpy")
    broken = [result[m]["unavailable"] for m in modules if isinstance(result.get(m), dict)]
    if broken:
        return f"its python cannot import the lab's packages ({'; '.join(broken)})"
    dists = result.get("dists") or {}
    wrong = [
        f"{name} {dists.get(name)} (pinned {version})"
        for name, version in pins.items()
        if not _matches(dists.get(name), version)
    ]
    return f"it holds {', '.join(wrong)}" if wrong else None


def plan(
    venv: Path, want: dict, pins: dict[str, str], loader_packages: dict[str, dict[str, str]] | None = None
) -> tuple[str, str, dict | None]:
    """``(action, reason, probe)`` with action keep, extend (keep, and install the loaders ``want`` adds:
    :func:`added_loaders`), create or rebuild. A kept venv must hold ``pins`` and what :func:`held_pins`
    adds for its loaders (``loader_packages``: the packages of each loader's lock).

    Raises Refused for a path that exists and is neither a venv nor an empty directory: nothing that
    disklab did not make is ever deleted.
    """
    if not venv.exists():
        return "create", f"no venv at {venv}", None
    if not venv.is_dir():
        raise Refused(f"the lab venv path {str(venv)!r} (lab_venv_root/venv) exists and is not a directory")
    record = read_record(venv)
    if record is None and not (venv / "pyvenv.cfg").is_file():
        if not any(venv.iterdir()):
            return "create", f"{venv} is an empty directory", None
        raise Refused(
            f"{str(venv)!r} (lab_venv_root/venv) is not a venv made by disklab (no {RECORD_NAME}, no "
            "pyvenv.cfg), so it is not deleted; move it away or set lab_venv_root to another directory"
        )
    if record is None:
        return "rebuild", f"no {RECORD_NAME}: an older or interrupted install", None
    keys = set(want) | ({"loaders", "loader_locks"} & set(record))  # with loaders differs from without
    changed = [k for k in sorted(keys) if record.get(k) != want.get(k)]
    notes = []
    if "pip_args" in changed and content_pip_args(record.get("pip_args")) == content_pip_args(
        want["pip_args"]
    ):
        changed.remove("pip_args")
        notes.append(
            f"pip's transport options differ ({record.get('pip_args')!r} -> {want['pip_args']!r}): how pip "
            "fetches, waits or prints, or whether it writes .pyc files, not which packages it installs"
        )
    added = added_loaders(record, want) if "loaders" in changed else []
    if added:
        changed = [k for k in changed if k not in ("loaders", "loader_locks")]
    if changed:
        parts = [f"{k} {record.get(k)!r} -> {want.get(k)!r}" for k in changed]
        return "rebuild", f"the venv was made from other settings: {'; '.join(parts)}", None
    found, why = venvstate.probe_or_recorded(venv, record)
    problem = probe_problem(found, held_pins(pins, record.get(loaderlib.RECORD_KEY), loader_packages))
    if problem:
        return "rebuild", f"the venv matches its record but {problem}", found
    source = "probed now" if found["from"] == "probed_now" else "versions from its record"
    reason = f"the venv matches its record and imports the pinned versions ({source}: {why})"
    reason += "".join(f"; {note}" for note in notes)
    if added:
        return "extend", f"{reason}; only the loader(s) {', '.join(added)} are added, into it", found
    return "keep", reason, found
