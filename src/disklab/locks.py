"""Make the lab venv's hash locks (``make locks``): every package of the venv, with its hashes, per platform.

``python -m disklab.locks [--only NAME ...] [--cpu-source URL|DIR ...] [--cpu-index-url URL]`` reads the
pins from the lab_venv role's defaults (``lab_venv_packages``), resolves them for each lock in
:data:`LOCKS` with ``uv pip compile --python-platform P --python-version V --generate-hashes`` and
writes ``src/disklab_host/locks/NAME.txt``: a header (the lock, the platform, the CPython, the pins)
and uv's requirements with the sha256 of every file. The host's provision command (disklab_host.lock)
installs one with ``pip install --require-hashes --no-deps -r``. A lock uv cannot resolve (an index out
of reach) is not written: the old file stays, and the exit status is 1, naming it.
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


def uv_argv(
    uv: str, platform: str, python: str, reqs: Path, cpu_sources: list[str], cpu_index_url: str | None = None
) -> list[str]:
    """The ``uv pip compile`` command for one lock. The CPU build's torch comes from ``cpu_sources`` (index
    URLs, or directories of wheels) beside PyPI, or beside ``cpu_index_url`` in PyPI's place (a mirror
    that holds only what a lab host can reach: then the best version across them, each file's hash as
    the mirror serves it)."""
    argv = [uv, "pip", "compile", str(reqs), "--python-platform", UV_PLATFORM[platform]]
    argv += ["--python-version", python, "--generate-hashes", "--no-header", "--no-annotate", "--quiet"]
    if hostlock.PLATFORMS[platform].build == "cpu":
        for source in cpu_sources:
            argv += ["--find-links" if Path(source).is_dir() else "--extra-index-url", source]
        if cpu_index_url:
            argv += ["--index-url", cpu_index_url, "--index-strategy", "unsafe-best-match"]
    return argv


def header(platform: str, python: str, pins: list[str], sources: list[str] | None = None) -> str:
    """The lock's first lines, which disklab_host.lock reads (its pins line) and people read; ``sources``
    are the indexes and wheel directories it was resolved from (None: PyPI)."""
    spec = hostlock.PLATFORMS[platform]
    return (
        f"# disklab lab venv lock {platform}-py{python}: {spec.title}, CPython {python}\n"
        f"# Made by `make locks` (python -m disklab.locks, uv pip compile --generate-hashes); do not edit.\n"
        f"# Resolved from: {', '.join(sources or ['PyPI'])}\n"
        f"{hostlock.PINS_PREFIX}{' '.join(sorted(pins))}\n"
    )


def compile_one(
    uv: str, platform: str, python: str, pins: list[str], cpu_sources: list[str], cpu_index_url: str | None
) -> str:
    """One lock's text; raises RuntimeError with uv's last line when uv cannot resolve it."""
    with tempfile.TemporaryDirectory(prefix="disklab-locks-") as tmp:
        reqs = Path(tmp) / "pins.in"
        reqs.write_text("".join(f"{p}\n" for p in pins))
        env = (
            {**os.environ, "MACOSX_DEPLOYMENT_TARGET": MACOS_TARGET} if platform.startswith("macos") else None
        )
        argv = uv_argv(uv, platform, python, reqs, cpu_sources, cpu_index_url)
        cp = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    if cp.returncode != 0:
        words = [ln.strip() for ln in (cp.stderr or cp.stdout).splitlines() if ln.strip()]
        raise RuntimeError(words[-1] if words else f"uv exited {cp.returncode}")
    cpu = hostlock.PLATFORMS[platform].build == "cpu"
    sources = [*cpu_sources, cpu_index_url or "PyPI"] if cpu else None
    return header(platform, python, pins, sources) + cp.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [f"{p}-py{v}" for p, versions in LOCKS.items() for v in versions]
    ap.add_argument("--only", action="append", choices=names, help="one lock to make, repeatable")
    ap.add_argument("--cpu-source", action="append", help="the CPU torch build's index or wheel directory")
    ap.add_argument("--cpu-index-url", help="the CPU lock's index in PyPI's place (a mirror lab hosts reach)")
    ap.add_argument("--uv", default=shutil.which("uv") or str(Path(sys.executable).parent / "uv"))
    args = ap.parse_args(argv)
    pins, failed = role_pins(), []
    for name in args.only or names:
        platform, _, python = name.rpartition("-py")
        try:
            text = compile_one(
                args.uv, platform, python, pins, args.cpu_source or [hostlock.CPU_INDEX], args.cpu_index_url
            )
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
