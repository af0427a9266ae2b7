"""The lab venv's versions: one probe, kept in the venv's record while nothing that could change it has.

Starting the venv's Python and importing torch takes seconds. Provision (disklab_host.provision) runs
:data:`SCRIPT` once and keeps its result in the venv's record (``disklab-venv.json``, key ``probe``)
with a :func:`fingerprint` of what could change it; provision's keep path and the host audit
(disklab_host.audit.collect) reuse that result while the fingerprint matches (:func:`recorded`) and
run the probe again only when it differs or no probe is recorded. The fingerprint is cheap (no
subprocess): the names of the venv's ``*.dist-info`` and ``*.egg-info`` entries (a name carries the
version and local label, ``torch-2.13.0+cpu.dist-info``), the venv python's resolved path, size and
mtime, the kernel release (os.uname), the NVIDIA driver's version line and GPU list under
/proc/driver/nvidia, and CUDA_VISIBLE_DEVICES (it changes torch.cuda.is_available()).

Standard library only; the script runs in the venv, so this module never imports torch.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from pathlib import Path

# The venv's record (written by provision); the probe is kept under PROBE_KEY.
RECORD_NAME = "disklab-venv.json"
PROBE_KEY = "probe"

# Run with the venv's Python; prints one JSON object. The keys are the audit's version facts (a module
# that does not import gives {"unavailable": why} for its version and for the torch facts), and
# ``dists``: every installed distribution's version, by its PEP 503 name (provision checks the pins).
SCRIPT = r"""
import importlib.metadata as md, io, json, platform, re, sys
out = {"python": platform.python_version(), "python_executable": sys.executable,
       "io_default_buffer_size_bytes": io.DEFAULT_BUFFER_SIZE, "dists": {}}
for dist in md.distributions():
    name = dist.metadata["Name"]
    if name:
        out["dists"].setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
mods = {}
for name in ("torch", "safetensors", "numpy"):
    try:
        mods[name] = __import__(name)
        out[name] = mods[name].__version__
    except Exception as exc:
        out[name] = {"unavailable": f"import {name} failed: {type(exc).__name__}: {exc}"}
torch = mods.get("torch")
if torch is None:
    for key in ("torch_cuda_available", "torch_version_cuda", "torch_mps_available"):
        out[key] = out["torch"]
else:
    out["torch_cuda_available"] = bool(torch.cuda.is_available())
    out["torch_version_cuda"] = torch.version.cuda or {
        "unavailable": "CPU-only torch build: torch.version.cuda is None"}
    out["torch_mps_available"] = bool(torch.backends.mps.is_available())
print(json.dumps(out))
"""


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _first_line(path: Path) -> str | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    return text.splitlines()[0].strip() if text.strip() else ""


def fingerprint(venv: Path, proc: Path = Path("/proc"), environ: Mapping[str, str] | None = None) -> dict:
    """What could change the probe's result, read without starting any process (see the module doc);
    ``environ`` defaults to this process's environment."""
    environ = os.environ if environ is None else environ
    py = Path(venv) / "bin" / "python"
    try:
        st = py.stat()
        binary: dict | None = {"path": os.path.realpath(py), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    except OSError:
        binary = None
    dists = sorted(
        f"{p.parent.parent.name}/{p.name}"
        for pattern in ("lib/python*/site-packages/*.dist-info", "lib/python*/site-packages/*.egg-info")
        for p in Path(venv).glob(pattern)
    )
    gpus_dir = proc / "driver" / "nvidia" / "gpus"
    try:
        gpus = sorted(p.name for p in gpus_dir.iterdir())
    except OSError:
        gpus = []
    return {
        "python_binary": binary,
        "dists": dists,
        "kernel_release": os.uname().release,
        "nvidia_driver": _first_line(proc / "driver" / "nvidia" / "version"),
        "nvidia_gpus": gpus,
        "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
    }


def entry(result: dict, before: dict) -> dict:
    """What the record keeps under PROBE_KEY: the probe's ``result``, the fingerprint taken ``before``
    it ran (a change during the probe then shows as a difference next time) and when it ran."""
    return {"result": result, "fingerprint": before, "probed_utc": utc_now()}


def read_record(venv: Path) -> dict | None:
    """The venv's record, or None when it is missing or unreadable."""
    try:
        rec = json.loads((Path(venv) / RECORD_NAME).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _differences(old: object, new: dict) -> list[str]:
    if not isinstance(old, dict):
        return ["no fingerprint"]
    out = []
    for key in sorted(new):
        if old.get(key) == new[key]:
            continue
        if key == "dists" and isinstance(old.get(key), list):
            added = sorted(set(new[key]) - set(old[key]))
            gone = sorted(set(old[key]) - set(new[key]))
            out.append(f"dists added {added}, removed {gone}")
        else:
            out.append(f"{key} {old.get(key)!r} -> {new[key]!r}")
    return out


def recorded(
    venv: Path,
    record: dict | None = None,
    proc: Path = Path("/proc"),
    environ: Mapping[str, str] | None = None,
) -> tuple[dict | None, str]:
    """``(entry, why)``: the recorded probe entry when its fingerprint matches this venv now, else None
    and why it cannot be trusted (no record, no probe in it, or what changed since it ran).

    ``record`` is the venv's record when the caller has read it already.
    """
    record = read_record(venv) if record is None else record
    if record is None:
        return None, f"no {RECORD_NAME} in {venv}"
    got = record.get(PROBE_KEY)
    if not isinstance(got, dict) or not isinstance(got.get("result"), dict):
        return None, f"{RECORD_NAME} holds no probe"
    changed = _differences(got.get("fingerprint"), fingerprint(venv, proc, environ))
    if changed:
        return None, f"the venv changed since its probe at {got.get('probed_utc')}: {'; '.join(changed)}"
    return got, f"nothing changed since its probe at {got.get('probed_utc')}"
