"""The host's facts and the refusals before any download (``check_host``).

The facts: system, machine, an NVIDIA GPU, the Python running provision, the macOS version. Refused,
each in one line naming what to set: a platform other than Linux or macOS, an Intel Mac, a macOS older
than the pinned torch's wheels need (``MACOS_FOR_TORCH``), ``cuda`` on macOS, a Python outside the range
the pinned torch has wheels for (``TORCH_PYTHONS``), ``--require-cuda`` where the build chosen has no
CUDA; and pins that are not NAME==VERSION with torch among them (``parse_pins``).
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import lock as locklib
from .errors import Refused

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
        out[locklib.canonical(m[1])] = m[2]
    if "torch" not in out:
        raise Refused(f"lab_venv_packages must pin torch as torch==VERSION, got {pins!r}")
    return out


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``2.13.0+cu130`` -> (2, 13, 0)."""
    m = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in m[0].split(".")) if m else ()


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
    if facts.system == "Darwin" and index == locklib.CUDA_INDEX:
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
    if require_cuda and (facts.system == "Darwin" or index == locklib.CPU_INDEX):
        why = (
            "macOS has no CUDA"
            if facts.system == "Darwin"
            else f"lab_venv_torch_index {setting!r} chose the CPU build ({locklib.CPU_INDEX})"
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
