"""Make the lab venv's hash locks (``make locks``): every package of the venv, with its hashes, per platform.

``python -m disklab.locks [--only NAME ...] [--extras-only] [--cpu-source URL|DIR ...] [--cpu-index-url
URL]`` reads the pins from the lab_venv role's defaults (``lab_venv_packages``), resolves them for each
lock in :data:`LOCKS` with ``uv pip compile --python-platform P --python-version V --generate-hashes`` and
writes ``src/disklab_host/locks/NAME.txt``: a header (the lock, the platform, the CPython, the pins)
and uv's requirements with the sha256 of every file. The host's provision command (disklab_host.lock)
installs one with ``pip install --require-hashes --no-deps -r``. A lock uv cannot resolve (an index out
of reach) is not written: the old file stays, and the exit status is 1, naming it.

Then, for each base lock, each extra (:func:`extras`: the production loaders) gets its own lock,
``locks/GROUP/NAME/BASE.txt``: the base pins and the extra's resolved together, constrained to the base
lock's versions (so no base package moves) and to wheels (``--only-binary :all:``: a host never builds),
keeping only the packages the base lock lacks; its header names the base lock and its sha256. An extra
with no wheel for a platform and CPython (uv's words: no wheels with a matching tag, no usable wheels,
another Python) gets no lock there, said in one line, and is no failure; the old file, if any, is
removed. Anything else uv refuses (a conflict with the base lock's versions, a package not found, an
index out of reach) is a failure: the old file stays and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from disklab_host import lock as hostlock
from disklab_host.common.fsio import atomic_write_bytes
from disklab_host.loadlab import loaders as loaderlib

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
MACOS_TARGET = "14.0"  # torch 2.12 and later: macosx_14_0_arm64 wheels (provision.hostfacts.MACOS_FOR_TORCH)
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


def extras() -> dict[str, dict[str, list[str]]]:
    """The extras each group of hostlock.EXTRA_GROUPS installs beside the base pins, ``{group: {name:
    pins}}``: the production loaders at their pins (loadlab.loaders.LOADERS)."""
    return {"loaders": {spec.name: list(spec.pins) for spec in loaderlib.LOADERS}}


def uv_argv(
    uv: str,
    platform: str,
    python: str,
    reqs: Path,
    cpu_sources: list[str],
    cpu_index_url: str | None = None,
    constraints: Path | None = None,
) -> list[str]:
    """The ``uv pip compile`` command for one lock. The CPU build's torch comes from ``cpu_sources`` (index
    URLs, or directories of wheels) beside PyPI, or beside ``cpu_index_url`` in PyPI's place (a mirror
    that holds only what a lab host can reach: then the best version across them, each file's hash as
    the mirror serves it). An extra's lock (``constraints``: its base lock's versions) takes wheels only,
    and keeps PyPI beside that mirror: the extras are published there, and the constraints hold every
    base package at the base lock's version."""
    argv = [uv, "pip", "compile", str(reqs), "--python-platform", UV_PLATFORM[platform]]
    argv += ["--python-version", python, "--generate-hashes", "--no-header", "--no-annotate", "--quiet"]
    if constraints is not None:
        argv += ["--constraint", str(constraints), "--only-binary", ":all:"]
    if hostlock.PLATFORMS[platform].build == "cpu":
        for source in cpu_sources:
            argv += ["--find-links" if Path(source).is_dir() else "--extra-index-url", source]
        if cpu_index_url:
            mirror = "--index-url" if constraints is None else "--extra-index-url"
            argv += [mirror, cpu_index_url, "--index-strategy", "unsafe-best-match"]
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


def extra_header(base: hostlock.Lock, python: str, full: str, pins: list[str], sources: list[str]) -> str:
    """An extra's lock's first lines: as :func:`header`, with the extra's own pins and the base lock it
    extends (``# extends: BASE sha256:HEX``, which disklab_host.lock.choose_extra checks)."""
    spec = hostlock.PLATFORMS[base.platform]
    return (
        f"# disklab extra lock {full}: {spec.title}, CPython {python}\n"
        "# Made by `make locks` (python -m disklab.locks, uv pip compile --generate-hashes --only-binary\n"
        "# :all:, constrained to the base lock's versions); do not edit. Only what the base lock lacks.\n"
        f"# Resolved from: {', '.join(sources)}\n"
        f"{hostlock.PINS_PREFIX}{' '.join(sorted(pins))}\n"
        f"{hostlock.EXTENDS_PREFIX}{base.name} sha256:{base.sha256}\n"
    )


class NoWheel(RuntimeError):
    """uv found no wheel of an extra, or of a package it needs, for the platform and CPython: no lock
    there, and no failure."""


# uv's words (0.13) for a resolve that fails only for want of a wheel this platform and CPython install.
_NO_WHEEL = re.compile(r"has no (usable )?wheels|has no wheels with a matching|depends on Python")


def run_uv(argv: list[str], platform: str) -> str:
    """uv's requirements; raises NoWheel with uv's cause, or RuntimeError with its last line."""
    env = {**os.environ, "MACOSX_DEPLOYMENT_TARGET": MACOS_TARGET} if platform.startswith("macos") else None
    cp = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    if cp.returncode != 0:
        words = [ln.strip() for ln in (cp.stderr or cp.stdout).splitlines() if ln.strip()]
        no_wheel = [w for w in words if _NO_WHEEL.search(w)]
        if cp.returncode == 1 and no_wheel:
            raise NoWheel(no_wheel[0].removeprefix("cause: "))
        raise RuntimeError(words[-1] if words else f"uv exited {cp.returncode}")
    return cp.stdout


def compile_one(
    uv: str, platform: str, python: str, pins: list[str], cpu_sources: list[str], cpu_index_url: str | None
) -> str:
    """One lock's text; raises RuntimeError with uv's last line when uv cannot resolve it."""
    with tempfile.TemporaryDirectory(prefix="disklab-locks-") as tmp:
        reqs = Path(tmp) / "pins.in"
        reqs.write_text("".join(f"{p}\n" for p in pins))
        out = run_uv(uv_argv(uv, platform, python, reqs, cpu_sources, cpu_index_url), platform)
    cpu = hostlock.PLATFORMS[platform].build == "cpu"
    sources = [*cpu_sources, cpu_index_url or "PyPI"] if cpu else None
    return header(platform, python, pins, sources) + out


def compile_extra(
    uv: str,
    base: hostlock.Lock,
    full: str,
    pins: list[str],
    extra_pins: list[str],
    cpu_sources: list[str],
    cpu_index_url: str | None,
) -> str:
    """The lock ``full`` (GROUP/NAME/BASE) of an extra: ``extra_pins`` resolved with the base ``pins``,
    constrained to ``base``'s versions, keeping the requirements ``base`` lacks. Raises NoWheel (no lock
    here) or RuntimeError (a failure, also when uv moved a base package)."""
    python = base.name.rpartition("-py")[2]
    with tempfile.TemporaryDirectory(prefix="disklab-locks-") as tmp:
        reqs, held = Path(tmp) / "pins.in", Path(tmp) / "base.txt"
        reqs.write_text("".join(f"{p}\n" for p in [*pins, *extra_pins]))
        held.write_text("".join(f"{name}=={version}\n" for name, version in base.packages.items()))
        argv = uv_argv(uv, base.platform, python, reqs, cpu_sources, cpu_index_url, constraints=held)
        out = run_uv(argv, base.platform)
    resolved = hostlock.parse(out).packages
    moved = [f"{n} {base.packages[n]} -> {v}" for n, v in resolved.items() if base.packages.get(n, v) != v]
    if moved:
        raise RuntimeError(f"uv moved packages of the base lock {base.name}: {', '.join(moved)}")
    added = [block for name, block in hostlock.requirements(out).items() if name not in base.packages]
    cpu = hostlock.PLATFORMS[base.platform].build == "cpu"
    sources = ["PyPI", *cpu_sources, *([cpu_index_url] if cpu_index_url else [])] if cpu else ["PyPI"]
    return extra_header(base, python, full, extra_pins, sources) + "".join(added)


def make_extras(
    uv: str, base_name: str, pins: list[str], cpu_sources: list[str], cpu_index_url: str | None
) -> list[str]:
    """Write each extra's lock for the base lock ``base_name`` as it is in the repo; print one line per
    extra; return the locks that failed (a missing or stale base lock fails them all)."""
    base = hostlock.load(base_name)
    names = [f"{g}/{n}/{base_name}" for g, members in extras().items() for n in members]
    if base is None or base.pins != hostlock.parse("".join(f"{p}\n" for p in pins)).packages:
        why = "it is missing" if base is None else "it was made from other pins"
        print(f"{base_name}: no extra's lock made, {why}: make it first", file=sys.stderr)
        return names
    failed = []
    for group, members in extras().items():
        for name, extra_pins in members.items():
            full = f"{group}/{name}/{base_name}"
            path = OUT_DIR / group / name / f"{base_name}.txt"
            try:
                text = compile_extra(uv, base, full, pins, extra_pins, cpu_sources, cpu_index_url)
            except NoWheel as exc:
                path.unlink(missing_ok=True)
                print(f"{full}: no lock, no wheel for this platform and CPython: {exc}")
                continue
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                failed.append(full)
                print(f"{full}: not made, the old lock stays: {exc}", file=sys.stderr)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, text.encode())
            print(f"{full}: {len(hostlock.parse(text).packages)} packages beside {base_name}")
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [f"{p}-py{v}" for p, versions in LOCKS.items() for v in versions]
    ap.add_argument(
        "--only", action="append", choices=names, help="one lock and its extras' to make, repeatable"
    )
    ap.add_argument("--extras-only", action="store_true", help="only the extras' locks, on the base locks")
    ap.add_argument("--cpu-source", action="append", help="the CPU torch build's index or wheel directory")
    ap.add_argument("--cpu-index-url", help="the CPU lock's index in PyPI's place (a mirror lab hosts reach)")
    ap.add_argument("--uv", default=shutil.which("uv") or str(Path(sys.executable).parent / "uv"))
    args = ap.parse_args(argv)
    pins, failed = role_pins(), []
    cpu_sources = args.cpu_source or [hostlock.CPU_INDEX]
    for name in args.only or names:
        platform, _, python = name.rpartition("-py")
        if not args.extras_only:
            try:
                text = compile_one(args.uv, platform, python, pins, cpu_sources, args.cpu_index_url)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                failed.append(name)
                print(f"{name}: not made, the old lock stays: {exc}", file=sys.stderr)
                continue
            atomic_write_bytes(OUT_DIR / f"{name}.txt", text.encode())
            print(f"{name}: {len(hostlock.parse(text).packages)} packages")
        failed += make_extras(args.uv, name, pins, cpu_sources, args.cpu_index_url)
    if failed:
        print(f"make locks: {len(failed)} lock(s) not made: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
