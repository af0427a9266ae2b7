"""Results: the JSON each host's lab run writes, its schema, loading and migration.

Results are the interface between a host and the controller. A reader refuses
a newer schema_version than it knows and upgrades older ones one step at a
time through ``MIGRATIONS``.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

# Version history of the results format:
#   1: first version: facts, sizes, experiments keyed by step name, each with
#      status and step_wall_s; raw samples kept in each experiment.
SCHEMA_VERSION = 1

# Base URI of the shipped schemas; "$ref": "facts.schema.json" resolves against it.
SCHEMA_BASE = "https://disklab.invalid/schema/"

# MIGRATIONS[n] upgrades a version-n document to version n + 1, in place.
MIGRATIONS: dict[int, callable] = {}


class ResultsError(ValueError):
    """A results document that cannot be read: bad JSON, a newer version, or a schema violation."""


def _schema_dir():
    return resources.files("disklab") / "schema"


def _load_json(traversable) -> dict:
    return json.loads(traversable.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    """Every schema shipped in the package, addressable by file name for $ref."""
    resources_ = []
    base = _schema_dir()
    for entry in base.iterdir():
        if entry.name.endswith(".schema.json"):
            resources_.append((SCHEMA_BASE + entry.name, Resource.from_contents(_load_json(entry))))
    return Registry().with_resources(resources_)


@functools.cache
def _validator(kind: str, name: str = "") -> jsonschema.Draft202012Validator | None:
    """A compiled validator, built once per process: kind is "results", "facts" or "experiment"."""
    if kind == "experiment":
        schema = experiment_schema(name)
        if schema is None:
            return None
    else:
        schema = _load_json(_schema_dir() / f"{kind}.schema.json")
    return jsonschema.Draft202012Validator(schema, registry=_registry())


def experiment_schema(name: str) -> dict | None:
    """The JSON Schema of one experiment's section, or None when none is shipped."""
    entry = _schema_dir() / "experiments" / f"{name}.schema.json"
    return _load_json(entry) if entry.is_file() else None


def validate(doc: dict) -> None:
    """Validate a current-version results document, experiments included.

    Raises ResultsError with the JSON path of the first violation.
    """
    checks = [(_validator("results"), doc, "")]
    for name, section in doc.get("experiments", {}).items():
        sub = _validator("experiment", name)
        if sub is not None and section.get("status") == "ok":
            checks.append((sub, section, f"experiments.{name}."))
    for validator, inst, prefix in checks:
        error = jsonschema.exceptions.best_match(validator.iter_errors(inst))
        if error is not None:
            where = prefix + ".".join(str(p) for p in error.absolute_path)
            raise ResultsError(f"results do not match the schema at {where or '<root>'}: {error.message}")


def upgrade(doc: dict) -> dict:
    """Bring ``doc`` to SCHEMA_VERSION through MIGRATIONS; refuse newer versions."""
    version = doc.get("schema_version")
    if not isinstance(version, int):
        raise ResultsError(f"schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise ResultsError(
            f"results have schema_version {version}, newer than this disklab reads ({SCHEMA_VERSION}): "
            "upgrade disklab"
        )
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ResultsError(f"no migration from schema_version {version}")
        MIGRATIONS[version](doc)
        version += 1
        doc["schema_version"] = version
    return doc


def load(path: str | Path) -> dict:
    """Read, upgrade and validate one results file. Raises ResultsError."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: {exc}") from exc
    try:
        upgrade(doc)
        validate(doc)
    except ResultsError as exc:
        raise ResultsError(f"{path}: {exc}") from exc
    return doc


def load_audit(path: str | Path, run_id: str, host: str) -> dict:
    """Read the facts fetched by `disklab audit` and wrap them as an audit document.

    Raises ResultsError when the facts do not match facts.schema.json.
    """
    path = Path(path)
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: {exc}") from exc
    doc = {"schema_version": SCHEMA_VERSION, "kind": "audit", "run_id": run_id, "host": host, "facts": facts}
    error = jsonschema.exceptions.best_match(_validator("facts").iter_errors(facts))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "<root>"
        raise ResultsError(f"{path}: facts do not match the schema at {where}: {error.message}")
    return doc
