"""Which torch build a host gets: the torch index for ``lab_venv_torch_index`` (``decide_index``).

``auto`` is the CPU build on Linux without an NVIDIA GPU, the CUDA build on Linux with one, PyPI's default
on Apple silicon; ``cpu``/``cuda`` force it, ``pypi`` uses no index flag, and an http://, https:// or
file:// URL is used as the torch index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import lock as locklib
from .errors import Refused

if TYPE_CHECKING:
    from .hostfacts import HostFacts

# PyTorch's wheel indexes (disklab_host.lock). One CUDA build for the fleet: cu130 has wheels for Linux
# x86_64 and aarch64 (DGX Spark), so every GPU host gets the same build.
CPU_INDEX, CUDA_INDEX = locklib.CPU_INDEX, locklib.CUDA_INDEX


INDEX_CHOICES = ("auto", "cpu", "cuda", "pypi")
URL_PREFIXES = ("http://", "https://", "file://")


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
