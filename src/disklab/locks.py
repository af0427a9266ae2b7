"""Make the lab venv's hash locks (``make locks``): every package of the venv, with its hashes, per platform.

``python -m disklab.locks [--only NAME ...] [--cpu-source URL|DIR]`` reads the pins from the lab_venv
role's defaults (``lab_venv_packages``), resolves them for each lock in :data:`LOCKS` with ``uv pip
compile --python-platform P --python-version V --generate-hashes`` and writes
``src/disklab_host/locks/NAME.txt``: a header (the platform, the CPython, the pins, where torch comes
from) and uv's requirements with every artifact's sha256. The host's provision command
(disklab_host.lock) installs one with ``pip install --require-hashes --no-deps -r``. A lock uv cannot
resolve (an index out of reach) is not written: the old file stays, and the exit status is 1, naming it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from disklab_host import lock as hostlock
from disklab_host.common.fsio import atomic_write_bytes

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = REPO / "roles" / "lab_venv" / "defaults" / "main.yml"
OUT_DIR = Path(hostlock.__file__).resolve().parent / hostlock.LOCK_DIR

# uv's --python-platform for each of hostlock.PLATFORMS. The CUDA builds are PyPI's torch wheels: on Linux
# x86_64 and aarch64 PyPI's torch 2.13.0 is a CUDA 13.0 build (it pulls cuda-toolkit 13.0.3), the CUDA of
# the cu130 index; PyTorch's own indexes are not reachable from every controller, PyPI is.
UV_PLATFORM = {
    "linux-x86_64-cpu": "x86_64-manylinux_2_28",
    "linux-x86_64-cuda": "x86_64-manylinux_2_28",
    "linux-aarch64-cuda": "aarch64-manylinux_2_28",
    "macos-arm64": "aarch64-apple-darwin",
}
MACOS_TARGET = "14.0"  # torch 2.12 and later: macosx_14_0_arm64 wheels (provision.MACOS_FOR_TORCH)
# The CPythons each platform is locked for. The CPU build is only for 3.11: its torch wheel comes from the
# CPU index (--cpu-source), and the copy of it this project's controller reaches holds the cp311 wheel alone.
LOCKS = {
    "linux-x86_64-cpu": ("3.11",),
    "linux-x86_64-cuda": ("3.11", "3.12"),
    "linux-aarch64-cuda": ("3.12",),
    "macos-arm64": ("3.11", "3.12"),
}


def role_pins(defaults: Path = DEFAULTS) -> list[str]:
    """The lab_venv role's ``lab_venv_packages``, as the role reads them."""
    return [str(p) for p in yaml.safe_load(defaults.read_text())["lab_venv_packages"]]


def uv_argv(uv: str, platform: str, python: str, reqs: Path, cpu_source: str) -> list[str]:
    """The ``uv pip compile`` command for one lock; the CPU build's torch from ``cpu_source`` (an index
    URL, or a directory of wheels)."""
    argv = [uv, "pip", "compile", str(reqs), "--python-platform", UV_PLATFORM[platform]]
    argv += ["--python-version", python, "--generate-hashes", "--no-header", "--no-annotate", "--quiet"]
    if hostlock.PLATFORMS[platform].build == "cpu":
        flag = "--find-links" if Path(cpu_source).is_dir() else "--extra-index-url"
        argv += [flag, cpu_source]
    return argv


def header(platform: str, python: str, pins: list[str]) -> str:
    """The lock's first lines, which disklab_host.lock reads (its pins line) and people read."""
    spec = hostlock.PLATFORMS[platform]
    return (
        f"# disklab lab venv lock {platform}-py{python}: {spec.title}, CPython {python}\n"
        f"# Made by `make locks` (python -m disklab.locks, uv pip compile --generate-hashes); do not edit.\n"
        f"{hostlock.PINS_PREFIX}{' '.join(sorted(pins))}\n"
    )


def compile_one(uv: str, platform: str, python: str, pins: list[str], cpu_source: str) -> str:
    """One lock's text; raises RuntimeError with uv's last line when uv cannot resolve it."""
    with tempfile.TemporaryDirectory(prefix="disklab-locks-") as tmp:
        reqs = Path(tmp) / "pins.in"
        reqs.write_text("".join(f"{p}\n" for p in pins))
        env = (
            {**os.environ, "MACOSX_DEPLOYMENT_TARGET": MACOS_TARGET} if platform.startswith("macos") else None
        )
        cp = subprocess.run(
            uv_argv(uv, platform, python, reqs, cpu_source), capture_output=True, text=True, env=env,
            timeout=600, check=False,
        )  # fmt: skip
    if cp.returncode != 0:
        words = [ln.strip() for ln in (cp.stderr or cp.stdout).splitlines() if ln.strip()]
        raise RuntimeError(words[-1] if words else f"uv exited {cp.returncode}")
    return header(platform, python, pins) + cp.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [f"{p}-py{v}" for p, versions in LOCKS.items() for v in versions]
    ap.add_argument("--only", action="append", choices=names, help="one lock to make, repeatable")
    ap.add_argument("--cpu-source", default=hostlock.CPU_INDEX, help="the CPU torch build's index or wheels")
    ap.add_argument("--uv", default=shutil.which("uv") or str(Path(sys.executable).parent / "uv"))
    args = ap.parse_args(argv)
    pins, failed = role_pins(), []
    for name in args.only or names:
        platform, _, python = name.rpartition("-py")
        try:
            text = compile_one(args.uv, platform, python, pins, args.cpu_source)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            failed.append(name)
            print(f"{name}: not made, the old lock stays: {exc}", file=sys.stderr)
            continue
        atomic_write_bytes(OUT_DIR / f"{name}.txt", text.encode())
        print(f"{name}: {len(hostlock.parse(text).packages)} packages")
    if failed:
        print(f"make locks: {len(failed)} lock(s) not made: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
