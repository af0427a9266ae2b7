"""Provision the lab venv: pinned torch, safetensors and numpy, from the right torch build.

Usage: python disklab_host.pyz provision --venv PATH --pin torch==2.13.0 --pin ... [--torch-index
auto|cpu|cuda|pypi|URL] [--pip-arg=ARG ...] [--require-cuda] [--loader NAME ...] [--check]

Standard library only: it runs with the host's own Python before the venv exists, and needs neither
pip nor packaging nor setuptools in that interpreter (Homebrew's Python 3.12+ and a venv made with
``--without-pip`` have none of them). In order:

1. the torch build (``decide_index``): ``auto`` is the CPU build on Linux without an NVIDIA GPU, the
   CUDA build on Linux with one, PyPI's default on Apple silicon; ``cpu``/``cuda`` force it, ``pypi``
   uses no index flag, and an http://, https:// or file:// URL is used as the torch index;
2. refusals before any download (``check_host``): an Intel Mac, a macOS older than the pinned torch's
   wheels need (``MACOS_FOR_TORCH``), ``cuda`` on macOS, a Python outside
   the range the pinned torch has wheels for (``TORCH_PYTHONS``), ``--require-cuda`` where the build
   chosen has no CUDA;
3. the venv (``plan``): kept when its record (``PATH/disklab-venv.json``) matches what is wanted and
   its Python has the pinned versions; otherwise removed and rebuilt, but only when it is a venv
   (a record or a pyvenv.cfg): any other directory is refused;
4. ``<python> -m venv PATH`` (ensurepip), then the venv's own pip. With the hash lock of the host's
   platform and Python (disklab_host.lock, ``--lock auto|required|never``: lab_venv_lock), ``pip install
   --require-hashes --no-deps -r LOCK``: every package at the lock's version, each file checked by its
   hash, a file with another hash refused naming the package. Without one (recorded not locked, with
   why): ``pip install --no-deps --index-url INDEX torch==V`` when an index applies (only torch comes
   from it), then ``pip install <pins> <pip args>`` (torch already satisfies its pin; its dependencies
   come from the default index);
5. the probe (disklab_host.venvprobe): python, torch, safetensors and numpy versions, every installed
   distribution's version, torch.cuda.is_available(), torch.version.cuda,
   torch.backends.mps.is_available(). It starts the venv's Python and imports torch (seconds), so it
   runs once and is kept in the record with a fingerprint of what could change it; a kept venv whose
   fingerprint still matches is not probed again (the host audit reuses the same probe);
6. with ``--loader NAME`` (the lab_venv role's ``lab_venv_loaders``, from ``lab_run_load_loaders``):
   each production loader's exact pins (loadlab.loaders.LOADERS), one pip install per loader after the
   venv's own pins: from the loader's own lock where the venv's lock has one (disklab_host.lock
   .choose_extra: ``pip install --require-hashes --no-deps``, only the packages it adds), else its pins
   alone (``auto``; ``required`` refuses it before any download). One that cannot be installed (pip's
   words on what failed) or imported (the import's error) is recorded ``not_run`` with the reason
   (``loader_results`` in the record and the printed object, each with its ``lock``) and the rest goes
   on; a file whose hash its lock does not list is refused, as for the venv's lock. The loaders' pins
   (and locks) are part of what the venv is made from
   (``loaders`` in the record, absent when none is set, so a venv made without loaders is kept as it
   was): the same setting keeps the venv; one that only adds loaders keeps it and installs just those
   (action extended: torch is not installed again); one that removes or re-pins a loader rebuilds it;
   a kept venv tries pip again for each loader pip could not install before (a wheelhouse filled since,
   an index back), and says so (an extended venv too). pip arguments that only change how pip fetches,
   waits or prints, or whether it writes ``.pyc`` files (``PIP_TRANSPORT_OPTIONS``: ``--retries``,
   ``--no-compile``, ...), never rebuild a venv: its record keeps the ones it was made with;
7. the record, written atomically last (``fsio.atomic_write_json``), so an interrupted install has
   no record and is rebuilt next time.

Prints one JSON object: ``{"ok", "changed", "action", "reason", "torch_index", "python", "versions",
"versions_source", "lock"}`` (lock: ``{"locked", "name", "sha256", "why"}``; versions_source: ``{"from":
"probed_now" | "venv_record", "probed_utc"}``; and, when a loader is set, ``loaders``: each one's
``{"status": "ok", "version", "pins"}`` or ``{"status": "not_run", "reason", "pins"}``) with action
kept, extended, created or rebuilt (``--check``: would_keep, would_extend, would_create or would_rebuild,
which change nothing; ``changed`` then says whether the real run would change the host). Exit status 0;
2 for a refusal and 1 for a failed command or file operation, with ``{"ok": false, "error": ...}`` on
stdout and the same line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import lock as locklib
from . import venvprobe
from .common.fsio import atomic_write_json
from .common.result import emit as emit_result
from .loadlab import loaders as loaderlib

# PyTorch's wheel indexes (disklab_host.lock). One CUDA build for the fleet: cu130 has wheels for Linux
# x86_64 and aarch64 (DGX Spark), so every GPU host gets the same build.
CPU_INDEX, CUDA_INDEX = locklib.CPU_INDEX, locklib.CUDA_INDEX
INDEX_CHOICES = ("auto", "cpu", "cuda", "pypi")
URL_PREFIXES = ("http://", "https://", "file://")

# The CPython versions (first, last) each torch release has wheels for. This is the project's own
# statement, checked against PyTorch's release notes (https://github.com/pytorch/pytorch/releases,
# "Python support"); check it again there when a pin changes. A torch release not listed here is not
# checked, and pip gives its own error for a Python without wheels.
TORCH_PYTHONS = {
    "2.13.0": ((3, 10), (3, 14)),
    "2.2.2": ((3, 8), (3, 12)),
}
# The last torch release with wheels for macOS on x86_64 (PyTorch dropped Intel Macs after it).
LAST_INTEL_MAC_TORCH = (2, 2, 2)
# The oldest macOS each torch release's Apple silicon wheels install on, newest release first: from
# torch 2.12 the wheels are tagged macosx_14_0_arm64, and MPS needs macOS 14 too. Below that, pip fails
# after the download starts with "No matching distribution", naming no OS. Check the wheel tags on PyPI
# (https://pypi.org/project/torch/#files) when a pin changes. Older releases are not checked.
MACOS_FOR_TORCH = (((2, 12), (14, 0)),)

# A loader installed without its lock's choice (tests, a pin given by hand): its pins alone.
UNLOCKED: tuple[locklib.Lock | None, str] = (None, "installed from its pins alone")
RECORD_NAME = venvprobe.RECORD_NAME
RECORD_KIND = "disklab_host.provision"
SUBPROCESS_TIMEOUT_S = 3600  # one pip install of torch over a slow link


class Refused(Exception):
    """A host or a setting that cannot be provisioned; the message names the setting to change."""


class Failed(Exception):
    """A venv or pip command that failed; the message gives the command and its last words (``last``)."""

    def __init__(self, message: str, last: str = "", output: str = ""):
        super().__init__(message)
        self.last = last or message
        self.output = output


@dataclass(frozen=True)
class HostFacts:
    """What the torch build depends on: ``system`` (platform.system(): Linux, Darwin), ``machine``
    (platform.machine(): x86_64, aarch64, arm64), ``nvidia_gpu``, the Python running this module and,
    on macOS, ``macos_version`` (platform.mac_ver(), from SystemVersion.plist: (14, 6, 1); None
    elsewhere, or where it could not be read)."""

    system: str
    machine: str
    nvidia_gpu: bool
    python_version: tuple[int, int]
    macos_version: tuple[int, ...] | None = None


def nvidia_gpu(proc: Path = Path("/proc"), nvidia_smi: str | None = None) -> bool:
    """True when the NVIDIA driver lists a GPU: ``/proc/driver/nvidia/gpus/*`` (one directory per GPU,
    from the kernel driver), else ``nvidia-smi -L`` printing a ``GPU 0: ...`` line."""
    gpus = proc / "driver" / "nvidia" / "gpus"
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    smi = nvidia_smi or shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        cp = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return cp.returncode == 0 and any(ln.startswith("GPU ") for ln in cp.stdout.splitlines())


def collect_host() -> HostFacts:
    """This host's facts (platform.system(), platform.machine(), nvidia_gpu(), sys.version_info,
    platform.mac_ver() on macOS)."""
    system = platform.system()
    return HostFacts(
        system=system,
        machine=platform.machine(),
        nvidia_gpu=system == "Linux" and nvidia_gpu(),
        python_version=sys.version_info[:2],
        macos_version=(_release(platform.mac_ver()[0]) or None) if system == "Darwin" else None,
    )


def parse_pins(pins: list[str]) -> dict[str, str]:
    """``["torch==2.13.0", ...]`` as ``{"torch": "2.13.0", ...}``; Refused unless each is NAME==VERSION
    and torch is among them."""
    out = {}
    for spec in pins:
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)\s*", spec)
        if not m:
            raise Refused(f"lab_venv_packages must hold pins NAME==VERSION, got {spec!r}")
        out[_canonical(m[1])] = m[2]
    if "torch" not in out:
        raise Refused(f"lab_venv_packages must pin torch as torch==VERSION, got {pins!r}")
    return out


def _canonical(name: str) -> str:
    """A distribution name as PEP 503 normalizes it (``Safe_Tensors`` -> ``safe-tensors``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``2.13.0+cu130`` -> (2, 13, 0)."""
    m = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in m[0].split(".")) if m else ()


def _matches(installed: str | None, pinned: str) -> bool:
    """Whether an installed version satisfies ``==pinned`` the way pip reads it: a pin without a local
    label (``+cpu``) matches any local label of that version."""
    if installed is None:
        return False
    return installed == pinned if "+" in pinned else installed.split("+", 1)[0] == pinned


def decide_index(setting: str, facts: HostFacts) -> str | None:
    """The torch index URL for ``lab_venv_torch_index`` on this host; None means PyPI's default.

    ``auto``: CUDA_INDEX on Linux x86_64 or aarch64 with an NVIDIA GPU, CPU_INDEX on other Linux
    hosts, None on macOS. Raises Refused for a value that is none of auto, cpu, cuda, pypi or a URL.
    """
    if setting.startswith(URL_PREFIXES):
        return setting
    if setting not in INDEX_CHOICES:
        raise Refused(
            f"lab_venv_torch_index must be one of {', '.join(INDEX_CHOICES)} or an http://, https:// "
            f"or file:// URL, got {setting!r}"
        )
    if setting == "cpu":
        return CPU_INDEX
    if setting == "cuda":
        return CUDA_INDEX
    if setting == "pypi" or facts.system == "Darwin":
        return None
    return CUDA_INDEX if facts.nvidia_gpu and facts.machine in ("x86_64", "aarch64") else CPU_INDEX


def check_host(facts: HostFacts, pins: dict[str, str], setting: str, index: str | None, require_cuda: bool):
    """Refuse, before any download, a host where the pinned torch cannot be installed or cannot do
    what is asked. Raises Refused with one line saying why and what to set."""
    torch = pins["torch"]
    if facts.system not in ("Linux", "Darwin"):
        raise Refused(f"disklab hosts run Linux or macOS (Darwin), this one is {facts.system}")
    if facts.system == "Darwin" and facts.machine == "x86_64" and _release(torch) > LAST_INTEL_MAC_TORCH:
        raise Refused(
            f"an Intel Mac (Darwin x86_64): PyTorch published no x86_64 macOS wheels after torch 2.2.2, so "
            f"torch=={torch} cannot be installed; leave the host out of `disklab run` (`disklab audit` needs "
            "no venv), or pin torch==2.2.2 in lab_venv_packages for it (its numbers are then not comparable)"
        )
    if facts.system == "Darwin" and facts.machine != "x86_64":
        _check_macos(facts.macos_version, torch)
    if facts.system == "Darwin" and index == CUDA_INDEX:
        raise Refused(
            f"lab_venv_torch_index is {setting!r} on macOS: PyTorch has no CUDA build for macOS; "
            "set lab_venv_torch_index to auto (Apple silicon uses PyPI's torch, with MPS)"
        )
    span = TORCH_PYTHONS.get(torch.split("+", 1)[0])
    if span and not span[0] <= facts.python_version <= span[1]:
        have = ".".join(map(str, facts.python_version))
        lo, hi = (".".join(map(str, v)) for v in span)
        raise Refused(
            f"torch=={torch} has wheels for CPython {lo} to {hi}, this host's Python is {have}; set "
            "lab_venv_python (or ansible_python_interpreter) to a Python in that range"
        )
    if require_cuda and (facts.system == "Darwin" or index == CPU_INDEX):
        why = (
            "macOS has no CUDA"
            if facts.system == "Darwin"
            else f"lab_venv_torch_index {setting!r} chose the CPU build ({CPU_INDEX})"
            + ("" if setting == "cpu" else ": no NVIDIA GPU in /proc/driver/nvidia/gpus or `nvidia-smi -L`")
        )
        raise Refused(
            f"lab_venv_require_cuda is true but {why}; set lab_venv_require_cuda: false for this host, "
            "or lab_venv_torch_index: cuda on a host with an NVIDIA GPU and driver"
        )


def macos_needed(torch: str) -> tuple[int, int] | None:
    """The oldest macOS the Apple silicon wheels of ``torch==VERSION`` install on (MACOS_FOR_TORCH), or
    None for a release older than every entry (not checked)."""
    release = _release(torch)
    return next((macos for first, macos in MACOS_FOR_TORCH if release >= first), None)


def _check_macos(have: tuple[int, ...] | None, torch: str) -> None:
    """Refuse an Apple silicon Mac whose macOS is older than the pinned torch's wheels need."""
    need = macos_needed(torch)
    if need is None:
        return
    want = ".".join(map(str, need))
    if have is None:
        raise Refused(
            f"this Mac's macOS version could not be read (platform.mac_ver() is empty), and torch=={torch}'s "
            f"wheels need macOS {want} or later; check `sw_vers -productVersion` on the host"
        )
    if tuple(have) < need:
        raise Refused(
            f"this Mac runs macOS {'.'.join(map(str, have))}, and torch=={torch}'s wheels "
            f"(macosx_{need[0]}_{need[1]}_arm64) and MPS need macOS {want} or later; upgrade macOS, or leave "
            "the host out of `disklab run` (`disklab audit` needs no venv)"
        )


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
    "lock"}`` with pip's words on what failed (no wheel for this host, say: :func:`_last_words`) or the
    import's error; ``lock`` is locklib.entry's. Raises Refused, naming the package, where the index
    serves a file with a hash the loader's lock does not list.
    """
    pins = list(pins or loaderlib.BY_NAME[name].pins)
    lock, why = locked
    pip = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check"]
    entry = {"pins": pins, "lock": locklib.entry(lock, why)}
    try:
        if lock is None:
            _run([*pip, *pins, *pip_args], f"installing the loader {name}")
        else:
            _run_lock(locklib.commands(pip, venv, lock, pip_args), lock, f"installing the loader {name}")
    except Failed as exc:
        return {"status": "not_run", "reason": f"pip could not install {' '.join(pins)}: {exc.last}", **entry}
    return {**loaderlib.import_check(name, str(venv_python(venv)), env=_clean_env()), **entry}


def _pip_failed(rec: dict) -> bool:
    """A loader record whose install pip refused (no wheel, no index): worth trying again next run."""
    return rec.get("status") == "not_run" and str(rec.get("reason", "")).startswith("pip could not install")


def _pip_failed_names(results: dict | None) -> list[str]:
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
            check = loaderlib.import_check(name, str(venv_python(venv)), env=_clean_env())
            out[name] = {**check, "pins": pins, **({"lock": rec["lock"]} if "lock" in rec else {})}
    return out


def _clean_env() -> dict:
    """This process's environment without PYTHONPATH and PYTHONHOME, so the venv's Python sees only
    the venv (the zipapp's entry puts itself on PYTHONPATH for its own children)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def venv_python(venv: Path) -> Path:
    """The venv's interpreter, ``PATH/bin/python`` (Linux and macOS)."""
    return venv / "bin" / "python"


def probe(venv: Path) -> dict | None:
    """The venv Python's versions (venvprobe.SCRIPT) as a record entry (venvprobe.entry) with
    ``from: probed_now``, or None when it cannot run at all."""
    py = venv_python(venv)
    if not py.exists():
        return None
    before = venvprobe.fingerprint(venv)
    try:
        cp = subprocess.run(
            [str(py), "-c", venvprobe.SCRIPT],
            capture_output=True,
            text=True,
            timeout=300,
            env=_clean_env(),
            check=False,
        )
        result = json.loads(cp.stdout) if cp.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not isinstance(result, dict):
        return None
    return {**venvprobe.entry(result, before), "from": "probed_now"}


def probe_or_recorded(venv: Path, record: dict | None) -> tuple[dict | None, str]:
    """The record's probe when nothing changed since it ran (``from: venv_record``), else a new probe;
    with why (venvprobe.recorded)."""
    kept, why = venvprobe.recorded(venv, record)
    if kept is not None:
        return {**kept, "from": "venv_record"}, why
    return probe(venv), why


def held_pins(pins: dict[str, str], loader_results: dict | None) -> dict[str, str]:
    """The versions a venv must hold: its ``pins`` and the pins of each loader installed in it (status ok
    in ``loader_results``), so that a loader still is there, at its pins."""
    out = dict(pins)
    for rec in (loader_results or {}).values():
        if rec.get("status") == "ok":
            out.update(parse_pins([*rec.get("pins", []), "torch==" + pins["torch"]]))
    return out


def _probe_problem(found: dict | None, pins: dict[str, str]) -> str | None:
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


def read_record(venv: Path) -> dict | None:
    """The venv's record, or None when it is missing or unreadable."""
    return venvprobe.read_record(venv)


def plan(venv: Path, want: dict, pins: dict[str, str]) -> tuple[str, str, dict | None]:
    """``(action, reason, probe)`` with action keep, extend (keep, and install the loaders ``want`` adds:
    :func:`added_loaders`), create or rebuild.

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
    found, why = probe_or_recorded(venv, record)
    problem = _probe_problem(found, held_pins(pins, record.get(loaderlib.RECORD_KEY)))
    if problem:
        return "rebuild", f"the venv matches its record but {problem}", found
    source = "probed now" if found["from"] == "probed_now" else "versions from its record"
    reason = f"the venv matches its record and imports the pinned versions ({source}: {why})"
    reason += "".join(f"; {note}" for note in notes)
    if added:
        return "extend", f"{reason}; only the loader(s) {', '.join(added)} are added, into it", found
    return "keep", reason, found


# The line pip ends a failed resolve with; it says where pip's docs are, not what failed, so the reason is
# taken from the ERROR line before it ("No matching distribution found for async-timeout>=4.0.3; ...", "Cannot
# install X because these package versions have conflicting dependencies.").
PIP_POINTER = "ResolutionImpossible: for help visit"


def _last_words(output: str) -> str:
    """What a failed pip or venv command said went wrong: its last ERROR line that names the failure (not
    pip's closing pointer to its docs), else its last ERROR line, else its last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    err = [ln for ln in lines if ln.startswith("ERROR")]
    named = [ln for ln in err if PIP_POINTER not in ln]
    return (named or err or lines or [""])[-1]


def _run(argv: list[str], what: str) -> None:
    """Run a venv or pip command; raise Failed with its exit status and what it said went wrong."""
    try:
        env = _clean_env()
        cp = subprocess.run(
            argv, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Failed(f"{what} failed: {' '.join(argv)}: {exc}") from None
    if cp.returncode != 0:
        last = _last_words(cp.stderr + "\n" + cp.stdout)
        raise Failed(
            f"{what} failed (exit {cp.returncode}): {' '.join(argv)}: {last}", last, cp.stdout + cp.stderr
        )


def install(
    venv: Path,
    pins: list[str],
    torch_pin: str,
    index: str | None,
    pip_args: list[str],
    lock: locklib.Lock | None = None,
) -> None:
    """Make the venv with this interpreter's ``-m venv`` (ensurepip) and install into it with its own pip.

    With a lock, every package in it, each file checked by its hash (lock.commands); Refused, naming the
    package, where the index serves a file with a hash the lock does not list. Without one: with an index,
    torch alone comes from it first (``--no-deps``); then every pin and the extra pip arguments from the
    default index, where torch already satisfies its pin.
    """
    venv.parent.mkdir(parents=True, exist_ok=True)
    try:
        _run([sys.executable, "-m", "venv", str(venv)], "creating the venv")
    except Failed as exc:
        hint = "on Debian and Ubuntu, `python3 -m venv` needs the python3-venv package"
        raise Failed(f"{exc} ({hint})") from None
    pip = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check"]
    if lock is not None:
        _run_lock(locklib.commands(pip, venv, lock, pip_args), lock, f"installing the lock {lock.name}")
        return
    if index is not None:
        torch_only = [*pip, "--no-deps", "--index-url", index, f"torch=={torch_pin}"]
        _run(torch_only, f"installing torch from {index}")
    _run([*pip, *pins, *pip_args], "installing the pinned packages")


def _run_lock(commands: list[list[str]], lock: locklib.Lock, what: str) -> None:
    """Run pip's installs of a lock (locklib.commands); Refused, naming the package, where the index served
    a file with a hash the lock does not list (locklib.hash_refusal), Failed for anything else."""
    for argv in commands:
        try:
            _run(argv, what)
        except Failed as exc:
            refusal = locklib.hash_refusal(exc.output, lock.name)
            if refusal:
                raise Refused(refusal) from None
            raise


def _remove_venv(venv: Path) -> None:
    """Remove a venv that plan() found to be a venv (a record or a pyvenv.cfg).

    The record goes first and pyvenv.cfg last, so a removal cut short leaves a directory that plan()
    still takes for a venv (pyvenv.cfg, no record: rebuilt) or an empty one (created), never one it
    refuses.
    """
    (venv / RECORD_NAME).unlink(missing_ok=True)
    for child in venv.iterdir():
        if child.name == "pyvenv.cfg":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    (venv / "pyvenv.cfg").unlink(missing_ok=True)
    venv.rmdir()


def _versions(found: dict) -> dict:
    """The probe's fields that the roles keep as lab_venv_versions."""
    r = found["result"]
    cuda = r.get("torch_version_cuda")
    return {
        "python": r.get("python"),
        "torch": r.get("torch"),
        "safetensors": r.get("safetensors"),
        "numpy": r.get("numpy"),
        "cuda_available": r.get("torch_cuda_available"),
        "torch_cuda": cuda if isinstance(cuda, str) else None,
        "mps_available": r.get("torch_mps_available"),
    }


def _source(found: dict) -> dict:
    """Where the versions came from: ``{"from": "probed_now" | "venv_record", "probed_utc"}``."""
    return {"from": found["from"], "probed_utc": found.get("probed_utc")}


def _record_entry(found: dict) -> dict:
    """The probe as the record keeps it (venvprobe.entry), without the ``from`` of this run."""
    return {k: v for k, v in found.items() if k != "from"}


def provision(
    venv: Path,
    pins: list[str],
    setting: str = "auto",
    pip_args: list[str] | None = None,
    require_cuda: bool = False,
    check: bool = False,
    facts: HostFacts | None = None,
    loader_names: list[str] | None = None,
    lock_setting: str = "auto",
) -> dict:
    """Decide, refuse or provision; return the JSON object main() prints. Raises Refused or Failed.

    ``loader_names``: the production loaders to install beside the pins (see the module doc, step 6);
    ``lock_setting``: lab_venv_lock (disklab_host.lock: auto, required, never).
    """
    pip_args = list(pip_args or [])
    loader_names = check_loaders(list(loader_names or []))
    if lock_setting not in locklib.SETTINGS:
        raise Refused(f"lab_venv_lock must be one of {', '.join(locklib.SETTINGS)}, got {lock_setting!r}")
    facts = facts or collect_host()
    parsed = parse_pins(pins)
    index = decide_index(setting, facts)
    check_host(facts, parsed, setting, index, require_cuda)
    lock, lock_why = locklib.choose(
        lock_setting, facts.system, facts.machine, facts.python_version, index, parsed
    )
    if lock is None and lock_setting == "required":
        raise Refused(
            f"lab_venv_lock is required but {lock_why}; set lab_venv_lock: auto to install the pins alone"
        )
    locks = loader_locks(lock_setting, lock, loader_names)
    want = wanted_record(pins, index, pip_args, loader_names, lock, {n: x for n, (x, _) in locks.items()})
    # a kept venv must hold every package of its lock at the lock's version (unless a loader, installed
    # without a lock, may have moved one: a loader's lock holds the venv's lock's versions)
    held = lock and all(x for x, _ in locks.values())
    action, reason, found = plan(venv, want, {**lock.packages, **parsed} if held else parsed)
    source = lock.extra_index if lock else index  # torch's index (None: PyPI's; the CUDA locks are PyPI's)
    out = {"torch_index": source or "pypi", "python": str(venv_python(venv)), "venv": str(venv),
           "lock": locklib.entry(lock, lock_why)}  # fmt: skip
    if check:
        kept = action in ("keep", "extend") and found
        versions = _versions(found) if kept else None
        if versions and require_cuda:
            _refuse_without_cuda(versions, venv, source)
        recorded = (read_record(venv) or {}).get(loaderlib.RECORD_KEY) if kept and loader_names else None
        retry = _pip_failed_names(recorded)
        if retry:
            reason += (
                f"; would try pip again for the loader(s) it could not install before: {', '.join(retry)}"
            )
        return {"ok": True, "changed": action != "keep" or bool(retry), "action": f"would_{action}",
                "reason": reason, **out, "versions": versions,
                "versions_source": _source(found) if kept else None,
                **({"loaders": recorded} if recorded else {})}  # fmt: skip
    results, retried = None, []
    if action == "extend":
        results, retried, found = extend(venv, want, parsed, pip_args, locks)
    elif action != "keep":
        if action == "rebuild":
            _remove_venv(venv)
        install(venv, pins, parsed["torch"], index, pip_args, lock)
        results = {name: install_loader(venv, name, pip_args, locked=locks[name]) for name in loader_names}
        found = probe(venv)
        problem = _probe_problem(found, held_pins(parsed, results))
        if problem:
            raise Failed(f"the new venv at {venv} was installed but {problem}")
        extra = {loaderlib.RECORD_KEY: results} if loader_names else {}
        extra["lock_why"] = lock_why
        atomic_write_json(venv / RECORD_NAME, {**want, **extra, venvprobe.PROBE_KEY: _record_entry(found)})
    else:
        record = read_record(venv) or want
        results = record.get(loaderlib.RECORD_KEY)
        # a loader pip could not install last time is tried again (a wheelhouse filled, an index back)
        retried = _pip_failed_names(results)
        if retried:
            results = {**results, **{n: install_loader(venv, n, pip_args, locked=locks[n]) for n in retried}}
            if any(results[n]["status"] == "ok" for n in retried):
                found = probe(venv)  # what the loader's install may have moved must still match the pins
                problem = _probe_problem(found, held_pins(parsed, results))
                if problem:
                    raise Failed(f"installing the loader(s) {', '.join(retried)} into {venv}: {problem}")
            record = {**record, loaderlib.RECORD_KEY: results}
        if found["from"] == "probed_now" or retried:  # kept, and probed or changed: the record keeps it
            if results and not retried:
                results = recheck_loaders(venv, results)
                record = {**record, loaderlib.RECORD_KEY: results}
            atomic_write_json(venv / RECORD_NAME, {**record, venvprobe.PROBE_KEY: _record_entry(found)})
    if retried:
        now = [f"{n} {'installed' if results[n]['status'] == 'ok' else 'still not'}" for n in retried]
        reason += f"; tried pip again for the loader(s) it could not install before: {', '.join(now)}"
    versions = _versions(found)
    if require_cuda:
        _refuse_without_cuda(versions, venv, source)
    action = {"keep": "kept", "extend": "extended", "create": "created", "rebuild": "rebuilt"}[action]
    changed = action != "kept" or any(results[n]["status"] == "ok" for n in retried)
    return {"ok": True, "changed": changed, "action": action, "reason": reason, **out,
            "versions": versions, "versions_source": _source(found),
            **({"loaders": results} if loader_names else {})}  # fmt: skip


def extend(
    venv: Path, want: dict, pins: dict[str, str], pip_args: list[str], locks: dict | None = None
) -> tuple[dict, list[str], dict]:
    """Install the loaders ``want`` adds (plan's extend) into the kept venv at ``venv``, one pip install
    each as on a new venv, and try pip again for a recorded loader pip could not install before (as a kept
    venv does); then import each loader installed before again (the venv changed under it); then probe it: the
    venv must still hold its pins and each installed loader's (Failed otherwise, with the record left as
    it was, so the next run sees the venv as it is). Writes the record (the loaders now held and each one's
    outcome) and returns every loader's outcome, the loaders tried again, and the probe. ``locks``: each
    loader's (lock, why), :func:`loader_locks` (None: each from its pins alone)."""
    record = read_record(venv) or {}
    had = record.get(loaderlib.RECORD_KEY) or {}
    retried = _pip_failed_names(had)
    new = {
        n: install_loader(venv, n, pip_args, locked=(locks or {}).get(n, UNLOCKED))
        for n in [*added_loaders(record, want), *retried]
    }
    # after the installs, which may have moved what the kept loaders import
    carried = recheck_loaders(venv, {n: r for n, r in had.items() if n not in retried})
    results = {name: {**carried, **new}[name] for name in want["loaders"]}
    found = probe(venv)
    problem = _probe_problem(found, held_pins(pins, results))
    if problem:
        raise Failed(f"installing the loader(s) {', '.join(new)} into {venv}: {problem}")
    entry = {
        "loaders": want["loaders"],
        loaderlib.RECORD_KEY: results,
        venvprobe.PROBE_KEY: _record_entry(found),
    }
    kept = {k: v for k, v in record.items() if k != "loader_locks"}
    locked = {"loader_locks": want["loader_locks"]} if "loader_locks" in want else {}
    atomic_write_json(venv / RECORD_NAME, {**kept, **entry, **locked})
    return results, retried, found


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
    ap.add_argument("--lock", default="auto", help="auto, required or never: install from the hash lock")
    ap.add_argument("--check", action="store_true", help="report what would be done, change nothing")
    args = ap.parse_args(argv)
    venv = Path(args.venv).expanduser().absolute()
    try:
        verdict = provision(
            venv, args.pin, args.torch_index, args.pip_arg, args.require_cuda, args.check,
            loader_names=args.loader, lock_setting=args.lock,
        )  # fmt: skip
    except (Refused, Failed, OSError) as exc:
        emit_result({"ok": False, "error": str(exc)})
        word = "refused" if isinstance(exc, Refused) else "failed"
        print(f"disklab provision {word}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, Refused) else 1
    emit_result(verdict)
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
