"""The JSON Schemas of every stored file kind, shipped in the package, and one check per kind.

Results are the interface between a host and the controller; their schema has
one sub-schema per experiment (``schema/experiments/<step>.schema.json``),
checked for each experiment whose status is ok. Every other kind has
``schema/<kind>.schema.json``. Reading and writing go through disklab.stored.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import jsonschema
from referencing import Registry, Resource

# Base URI of the shipped schemas; "$ref": "facts.schema.json" resolves against it.
SCHEMA_BASE = "https://disklab.invalid/schema/"


def _schema_dir():
    return resources.files("disklab") / "schema"


def _load_json(traversable) -> dict:
    return json.loads(traversable.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    """Every schema shipped in the package, addressable by file name for $ref."""
    found = []
    for entry in _schema_dir().iterdir():
        if entry.name.endswith(".schema.json"):
            found.append((SCHEMA_BASE + entry.name, Resource.from_contents(_load_json(entry))))
    return Registry().with_resources(found)


@functools.cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    """The compiled validator of a stored kind, built once per process."""
    return jsonschema.Draft202012Validator(
        _load_json(_schema_dir() / f"{kind}.schema.json"), registry=_registry()
    )


@functools.cache
def _experiment_validator(name: str) -> jsonschema.Draft202012Validator | None:
    schema = experiment_schema(name)
    return None if schema is None else jsonschema.Draft202012Validator(schema, registry=_registry())


def validator(schema: dict, base: str = "experiments/") -> jsonschema.Draft202012Validator:
    """A validator of ``schema`` (a shipped schema, or a fragment of one) that resolves the shipped
    schemas' ``$ref`` between files (sample_records.schema.json, facts.schema.json): a fragment without
    an ``$id`` resolves as if it sat in ``base`` (``experiments/``, where the step schemas are)."""
    if "$id" not in schema:
        schema = {"$id": SCHEMA_BASE + base + "fragment.schema.json", **schema}
    return jsonschema.Draft202012Validator(schema, registry=_registry())


def experiment_validator(name: str) -> jsonschema.Draft202012Validator:
    """The validator of one step's section (``schema/experiments/<name>.schema.json``); KeyError when
    none is shipped."""
    found = _experiment_validator(name)
    if found is None:
        raise KeyError(f"no schema shipped for experiment {name!r}")
    return found


def experiment_schema(name: str) -> dict | None:
    """The JSON Schema of one experiment's section, or None when none is shipped."""
    entry = _schema_dir() / "experiments" / f"{name}.schema.json"
    return _load_json(entry) if entry.is_file() else None


def first_error(kind: str, doc: dict) -> str | None:
    """None when ``doc`` matches its kind's schema (experiments too, for results), else one line.

    The line says where: ``does not match the schema at experiments.crash.modes: ...``.
    """
    checks = [(_validator(kind), doc, "")]
    if kind == "results" and isinstance(doc.get("experiments"), dict):
        for name, section in doc["experiments"].items():
            sub = _experiment_validator(name)
            if sub is not None and isinstance(section, dict) and section.get("status") in ("ok", "partial"):
                checks.append((sub, section, f"experiments.{name}."))
    for validator, inst, prefix in checks:
        error = jsonschema.exceptions.best_match(validator.iter_errors(inst))
        if error is not None:
            where = prefix + ".".join(str(p) for p in error.absolute_path)
            return f"does not match the schema at {where or '<root>'}: {error.message}"
    return None
