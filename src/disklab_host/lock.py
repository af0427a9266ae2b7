"""The lab venv's hash locks: which one a host gets, what it holds, pip's refusal of a file it does not list.

A lock (``locks/NAME.txt`` in this package, NAME ``PLATFORM-pyX.Y``; made on the controller by ``make
locks``, disklab.locks, with ``uv pip compile --generate-hashes``) names every package of the lab venv at
an exact version with the sha256 of each of its files, for one platform and one CPython. Provision
(disklab_host.provision) installs it with ``pip install --require-hashes --no-deps -r LOCK``: pip installs
exactly those packages, pulls in nothing else, and refuses a file whose hash the lock does not list.

Which lock (:func:`choose`), by ``lab_venv_lock``: ``auto`` takes the lock of the host's platform
(:data:`PLATFORMS`: system, machine and the torch build provision chose) and Python when this package
holds one made from the same pins, and otherwise installs the pins alone, as before, recorded not locked
with why; ``required`` refuses a host without one before any download; ``never`` installs the pins alone.

An extra (a production loader now, a saver later: :data:`EXTRA_GROUPS`) has its own lock per base lock,
``locks/GROUP/NAME/PLATFORM-pyX.Y.txt``: only the packages it adds to that base lock's venv, resolved
with the base lock's versions as constraints, and the base lock's sha256 in its header
(:func:`choose_extra` takes it only for a venv installed from exactly that base lock).

Standard library only: it runs with the host's own Python, inside the zipapp.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

# PyTorch's wheel indexes (https://pytorch.org/get-started/locally/); provision picks one (decide_index).
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CUDA_INDEX = "https://download.pytorch.org/whl/cu130"

SETTINGS = ("auto", "required", "never")
LOCK_DIR = "locks"
PINS_PREFIX = "# pins: "  # the lock's header line with the pins it was made from (disklab.locks.header)
EXTENDS_PREFIX = "# extends: "  # an extra's lock: "BASE sha256:HEX", the base lock it adds packages to
# Where a venv keeps the lock it was installed from, beside its record (an extra's: Lock.copy_name).
COPY_NAME = "disklab-lock.txt"
# The groups of extras, each a folder of locks/ with one folder per extra: the production loaders
# (loadlab.loaders.LOADERS, lab_venv_loaders); the savers (issue 43) will be the next.
EXTRA_GROUPS = ("loaders",)


@dataclass(frozen=True)
class Platform:
    """One platform the roles support: ``system`` and ``machine`` as platform.system() and .machine()
    give them, ``build`` (cpu: PyTorch's CPU index; cuda: PyPI's CUDA 13.0 build on Linux; pypi: PyPI's
    macOS build) and ``extra_index``: the index pip needs beside PyPI for the lock's files."""

    system: str
    machine: str
    build: str
    title: str
    extra_index: str | None = None


PLATFORMS = {
    "linux-x86_64-cpu": Platform("Linux", "x86_64", "cpu", "Linux x86_64, PyTorch's CPU build", CPU_INDEX),
    "linux-x86_64-cuda": Platform("Linux", "x86_64", "cuda", "Linux x86_64, PyPI's CUDA 13.0 build"),
    "linux-aarch64-cuda": Platform(
        "Linux", "aarch64", "cuda", "Linux aarch64 (DGX Spark), PyPI's CUDA 13.0 build"
    ),
    "macos-arm64": Platform("Darwin", "arm64", "pypi", "macOS arm64, PyPI's build (MPS)"),
}


@dataclass(frozen=True)
class Lock:
    """One lock file: its ``name`` (PLATFORM-pyX.Y; an extra's GROUP/NAME/PLATFORM-pyX.Y), ``text``, the
    ``sha256`` of its bytes, the ``pins`` it was made from and every package it installs (``packages``),
    both ``{PEP 503 name: version}``; an extra's lock also the base lock it ``extends``: (name, sha256)."""

    name: str
    platform: str
    text: str = field(repr=False)
    sha256: str
    pins: dict[str, str]
    packages: dict[str, str]
    extends: tuple[str, str] | None = None

    @property
    def extra_index(self) -> str | None:
        """The index torch's file comes from (None: pip's own, with every other package, or no torch)."""
        return PLATFORMS[self.platform].extra_index if "torch" in self.packages else None

    @property
    def copy_name(self) -> str:
        """The file in the venv this lock is installed from (:func:`commands`)."""
        group_name = self.name.split("/")[:-1]
        return f"disklab-lock-{'-'.join(group_name)}.txt" if group_name else COPY_NAME


@dataclass(frozen=True)
class Parsed:
    pins: dict[str, str]
    packages: dict[str, str]
    extends: tuple[str, str] | None = None


_REQ = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 normalizes it (``Typing_Extensions`` -> ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str) -> Parsed:
    """A lock's pins (its header line) and packages (each ``NAME==VERSION`` line uv wrote)."""
    pins: dict[str, str] = {}
    packages: dict[str, str] = {}
    extends = None
    for line in text.splitlines():
        if line.startswith(EXTENDS_PREFIX):
            base, _, digest = line[len(EXTENDS_PREFIX) :].strip().partition(" sha256:")
            extends = (base, digest)
        if line.startswith(PINS_PREFIX):
            for spec in line[len(PINS_PREFIX) :].split():
                m = _REQ.fullmatch(spec)
                if m:
                    pins[canonical(m[1])] = m[2]
        m = _REQ.match(line)
        if m:
            packages[canonical(m[1])] = m[2]
    return Parsed(pins, packages, extends)


def platform_of(system: str, machine: str, index: str | None) -> str | None:
    """The lock platform for a host and the torch index provision chose (None: PyPI's default), or None
    where no lock applies (an index URL of the user's own, a platform without one)."""
    if index == CPU_INDEX:
        build = "cpu"
    elif index == CUDA_INDEX or (index is None and system == "Linux"):
        build = "cuda"  # on Linux, PyPI's torch is the CUDA 13.0 build: the cuda locks are PyPI's
    elif index is None:
        build = "pypi"
    else:
        return None
    machine = "arm64" if (system, machine) == ("Darwin", "aarch64") else machine
    found = [n for n, p in PLATFORMS.items() if (p.system, p.machine, p.build) == (system, machine, build)]
    return found[0] if found else None


def names() -> list[str]:
    """The locks this package holds, sorted."""
    folder = resources.files(__package__).joinpath(LOCK_DIR)
    return sorted(p.name[: -len(".txt")] for p in folder.iterdir() if p.name.endswith(".txt"))


def extra_names(group: str, name: str) -> list[str]:
    """The base locks the extra ``group/name`` has a lock for, sorted."""
    folder = resources.files(__package__).joinpath(LOCK_DIR, group, name)
    if not folder.is_dir():
        return []
    return sorted(p.name[: -len(".txt")] for p in folder.iterdir() if p.name.endswith(".txt"))


def load(name: str) -> Lock | None:
    """The lock NAME (PLATFORM-pyX.Y, or GROUP/NAME/PLATFORM-pyX.Y) from this package (also inside the
    zipapp), or None when it holds none."""
    *folders, base = name.split("/")
    path = resources.files(__package__).joinpath(LOCK_DIR, *folders, f"{base}.txt")
    if not path.is_file():
        return None
    data = path.read_bytes()
    parsed = parse(data.decode())
    platform = base.rpartition("-py")[0]
    return Lock(
        name, platform, data.decode(), hashlib.sha256(data).hexdigest(), parsed.pins, parsed.packages,
        parsed.extends,
    )  # fmt: skip


def choose(
    setting: str, system: str, machine: str, python: tuple[int, int], index: str | None, pins: dict[str, str]
) -> tuple[Lock | None, str]:
    """``(lock, why)``: the lock for this host, or None and why not (then only the pins are exact and every
    other package is what pip resolves that day).
    ``pins`` are lab_venv_packages as ``{PEP 503 name: version}``; ``setting`` one of :data:`SETTINGS`."""
    if setting == "never":
        return None, "lab_venv_lock is never"
    index = index.rstrip("/") if index else index  # PyTorch's CPU index with a trailing slash is still it
    platform = platform_of(system, machine, index)
    if platform is None:
        if index not in (None, CPU_INDEX, CUDA_INDEX):
            return None, (
                f"lab_venv_torch_index is the index URL {index}, and the locks are made for PyTorch's CPU "
                "build and PyPI's builds"
            )
        build = (
            "the CPU build" if index == CPU_INDEX else "PyPI's build" if index is None else "the CUDA build"
        )
        return None, f"no lock is made for {system} {machine} with {build}"
    name = f"{platform}-py{python[0]}.{python[1]}"
    lock = load(name)
    if lock is None:
        made = [n for n in names() if n.startswith(platform + "-py")]
        return None, (
            f"no lock {name} for this host's CPython {python[0]}.{python[1]} (made for {platform}: "
            f"{', '.join(made) or 'none'})"
        )
    stale = _other_pins(lock, name, pins, "lab_venv_packages")
    if stale:
        return None, stale
    return lock, f"the lock {name}: {len(lock.packages)} packages, each file checked by its sha256"


def _other_pins(lock: Lock, name: str, pins: dict[str, str], whose: str) -> str | None:
    """Why the lock ``name`` does not serve ``pins`` (``whose``: the setting or the extra that pins them),
    or None when it was made from exactly those."""
    if lock.pins == pins:
        return None
    want = " ".join(f"{k}=={v}" for k, v in sorted(pins.items()))
    have = " ".join(f"{k}=={v}" for k, v in sorted(lock.pins.items()))
    return (
        f"the lock {name} was made from {have}, {whose} pins {want}; make the locks again with `make locks`"
    )


def choose_extra(
    setting: str, base: Lock | None, group: str, name: str, pins: dict[str, str]
) -> tuple[Lock | None, str]:
    """``(lock, why)``: the lock of the extra ``group/name`` (a loader: group ``loaders``) that extends
    ``base``, the lock the venv is installed from, or None and why not (then the extra is installed from
    its pins alone, as without locks). ``pins`` are the extra's own, ``{PEP 503 name: version}``."""
    if setting == "never":
        return None, "lab_venv_lock is never"
    if base is None:
        return None, "the venv is not installed from a lock"
    full = f"{group}/{name}/{base.name}"
    lock = load(full)
    if lock is None:
        made = extra_names(group, name)
        return None, (
            f"no lock {full} (`make locks` writes none where uv finds no wheel of it for that platform and "
            f"CPython; made for: {', '.join(made) or 'none'})"
        )
    stale = _other_pins(lock, full, pins, name)
    if stale:
        return None, stale
    if lock.extends != (base.name, base.sha256):
        was = f"{lock.extends[0]} sha256 {lock.extends[1][:12]}" if lock.extends else "no base lock"
        return None, (
            f"the lock {full} extends {was}, not the venv's lock {base.name} (sha256 {base.sha256[:12]}); "
            "make the locks again with `make locks`"
        )
    return (
        lock,
        f"the lock {full}: {len(lock.packages)} packages beside {base.name}, each file checked by its sha256",
    )


def entry(lock: Lock | None, why: str) -> dict:
    """What the venv's record and provision's result keep: ``{"locked", "name", "sha256", "why"}``."""
    if lock is None:
        return {"locked": False, "name": None, "sha256": None, "why": why}
    return {"locked": True, "name": lock.name, "sha256": lock.sha256, "why": why}


def requirements(text: str) -> dict[str, str]:
    """Each requirement of uv's output or a lock, by its PEP 503 name: its ``NAME==VERSION`` line and the
    indented hash lines after it, as written."""
    out: dict[str, str] = {}
    name = None
    for line in text.splitlines(keepends=True):
        if line[:1] not in (" ", "\t", ""):
            m = _REQ.match(line)
            name = canonical(m[1]) if m else None
            if name:
                out[name] = ""
        if name:
            out[name] += line
    return out


def torch_part(text: str) -> str:
    """The lock's torch requirement with its hashes (its line and the indented lines after it)."""
    return requirements(text).get("torch", "")


def commands(pip: list[str], venv: Path, lock: Lock, pip_args: list[str]) -> list[list[str]]:
    """pip's installs of the lock, which this writes into ``venv`` (``lock.copy_name``, and torch's part
    beside it where torch comes from its own index), each file checked by its hash (``--require-hashes``)
    and nothing pulled in that the lock does not name (``--no-deps``). As without a lock, only torch comes
    from PyTorch's index (the whole lock then finds it installed); everything else from pip's own."""
    copy = venv / lock.copy_name
    copy.write_text(lock.text)
    hashed = [*pip, "--require-hashes", "--no-deps"]
    out = []
    if lock.extra_index:
        torch_only = venv / f"{COPY_NAME}.torch"
        torch_only.write_text(torch_part(lock.text))
        out.append([*hashed, "--index-url", lock.extra_index, "-r", str(torch_only)])
    return [*out, [*hashed, "-r", str(copy), *pip_args]]


# pip's words for a file whose hash the requirements do not list (pip 21 to 25): a heading line, then one
# line per file, "    NAME==VERSION from URL:" (or "(from -r ...)"), "Expected sha256 ..." and "Got ...".
_MISMATCH = "DO NOT MATCH THE HASHES"
_FILE = re.compile(r"\s+([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?: from (\S+?))?:?(?: \(from .*)?$")
_GOT = re.compile(r"\s+Got\s+([0-9a-f]{64})")


def hash_refusal(output: str, lock_name: str) -> str | None:
    """One line naming each package whose file the index served with a hash the lock ``lock_name`` does
    not list, from pip's output; None when pip refused nothing for a hash."""
    lines = output.splitlines()
    start = next((i for i, ln in enumerate(lines) if _MISMATCH in ln), None)
    if start is None:
        return None
    found = []
    for i in range(start + 1, len(lines)):
        m = _FILE.match(lines[i])
        if not m:
            continue
        got = next((g[1] for ln in lines[i + 1 : i + 12] if (g := _GOT.match(ln))), "unknown")
        url = m[3] or ""
        where = f" ({url.rsplit('/', 1)[-1]} from {url.split('/')[2]})" if url.count("/") >= 3 else ""
        found.append(f"{m[1]}=={m[2]}{where} with sha256 {got}")
    named = "; ".join(found) or "a file pip did not name"
    return (
        f"the index served {named}, a hash the lock {lock_name} does not list: refused, nothing more "
        "installed; check the host's index or mirror (lab_venv_pip_args), or make the locks again "
        "(`make locks`) if a pin changed"
    )
