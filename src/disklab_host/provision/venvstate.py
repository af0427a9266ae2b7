"""What the venv holds: one probe of its Python (disklab_host.venvprobe: python, torch, safetensors and
numpy versions, every installed distribution's version, torch.cuda.is_available(), torch.version.cuda,
torch.backends.mps.is_available()).

The probe starts the venv's Python and imports torch (seconds), so it runs once and is kept in the
record with a fingerprint of what could change it; a kept venv whose fingerprint still matches is not
probed again (the host audit reuses the same probe).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .. import venvprobe
from . import install


def probe(venv: Path) -> dict | None:
    """The venv Python's versions (venvprobe.SCRIPT) as a record entry (venvprobe.entry) with
    ``from: probed_now``, or None when it cannot run at all."""
    py = install.venv_python(venv)
    if not py.exists():
        return None
    before = venvprobe.fingerprint(venv)
    try:
        cp = subprocess.run(
            [str(py), "-c", venvprobe.SCRIPT],
            capture_output=True,
            text=True,
            timeout=300,
            env=install.clean_env(),
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


def versions(found: dict) -> dict:
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


def source(found: dict) -> dict:
    """Where the versions came from: ``{"from": "probed_now" | "venv_record", "probed_utc"}``."""
    return {"from": found["from"], "probed_utc": found.get("probed_utc")}


def record_entry(found: dict) -> dict:
    """The probe as the record keeps it (venvprobe.entry), without the ``from`` of this run."""
    return {k: v for k, v in found.items() if k != "from"}
