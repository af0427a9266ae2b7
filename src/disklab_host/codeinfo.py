"""What made the numbers: the disklab version and a digest of each step's code.

Every results file records :func:`lab_code`, so ``disklab compare`` can tell a
changed host from a changed lab. A step's digest is a sha256 over the source
of its module, of every module in the helper subpackages it uses
(``registry.Step.uses``), of ``common`` and of the registry itself; sources are
read through each module's loader, so this works from the shipped zipapp too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import pkgutil

import disklab_host

from . import registry


def _source(name: str) -> bytes:
    spec = importlib.util.find_spec(name)
    source = spec.loader.get_source(name) if spec and spec.loader else None
    if source is None:
        raise RuntimeError(f"no source for {name}")
    return source.encode()


def _modules(prefix: str = "") -> list[str]:
    """Every module of disklab_host (or of its subpackage ``prefix``), sorted."""
    names = [m.name for m in pkgutil.walk_packages(disklab_host.__path__, "disklab_host.")]
    names.append("disklab_host")
    return sorted(n for n in names if not prefix or n == prefix or n.startswith(prefix + "."))


def digest(names: list[str]) -> str:
    """sha256 over (name, source) of each module in ``names``, in order."""
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"\0" + _source(name) + b"\0")
    return h.hexdigest()


def step_modules(step: registry.Step) -> list[str]:
    """The modules whose code shapes ``step``'s numbers (see the module docstring)."""
    names = {step.module, "disklab_host.registry", *_modules("disklab_host.common")}
    for sub in step.uses:
        names.update(_modules(f"disklab_host.{sub}"))
    return sorted(names)


def lab_code(steps: list[str]) -> dict:
    """``{"disklab_version", "host_package_sha256", "steps": {name: sha256}}`` for ``steps``."""
    return {
        "disklab_version": disklab_host.__version__,
        "host_package_sha256": digest(_modules()),
        "steps": {name: digest(step_modules(registry.step(name))) for name in steps},
    }
