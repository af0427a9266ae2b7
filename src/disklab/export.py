"""``disklab export``: every figure of every stored run, one row per host, run and figure.

Runs are read from ``reports/<host>/runs/*.json`` through :func:`disklab.stored.read`
(so older files are upgraded first), and their figures through
:func:`disklab.figures.extract`, the same records ``disklab compare`` and the
fleet page use. Each row has the columns :data:`COLUMNS`:

host, run_id, started_utc, the run's context (kernel, fstype and device of the
workbench the run measured, profile, torch, disklab_version: each row stands
alone, no join needed), experiment, figure (readable name), key (the same in
every run and on every host), unit (``s``, ``ns``, ``bytes``, ``mib_s``, ...,
``verdict``), stage (readiness stage, load figures only), cache (cold, warm, or
a failed proof: cold_unverified, cold_unproven, warm_unverified), proven,
method, file, populate, figure_kind (samples, value or verdict), n (samples, or crash
states for a verdict), median, min, max, p90, p99 (latency units), value (a
verdict, or a value stored without samples), then its noise: measure (the kind
of figure, which sets its minimum effect), units (samples, or batches: rounds'
medians), n_units, n_disturbed (units run while the host was busy; empty where
the run recorded no noise) and noise (one sentence). Values are in the
figure's own unit, never converted. Empty cells in CSV are fields that do not apply; in
JSON they are null. JSON adds each figure's raw ``samples``.

Formats: ``csv``; ``json``, one document ``{kind: "export", schema_version,
columns, rows}``; ``jsonl``, one row per line, each ``{kind: "export_row",
schema_version, ...}``. Their JSON Schemas ship in disklab/schema
(``export.schema.json``, ``export_row.schema.json``); docs/outputs.md has the columns.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from disklab import compare, figures, hostnames, store, stored
from disklab_host.common.formats import output

COLUMNS = (
    "host",
    "run_id",
    "started_utc",
    "kernel",
    "fstype",
    "device",
    "profile",
    "torch",
    "disklab_version",
    "experiment",
    "figure",
    "key",
    "unit",
    "stage",
    "cache",
    "proven",
    "method",
    "file",
    "populate",
    "figure_kind",
    "n",
    "median",
    "min",
    "max",
    "p90",
    "p99",
    "value",
    "measure",
    "units",
    "n_units",
    "n_disturbed",
    "noise",
)
FORMATS = ("csv", "json", "jsonl")


def rows_of(doc: dict, host: str) -> list[dict]:
    """One row (:data:`COLUMNS`, plus ``samples``) per figure of one results document."""
    out = []
    ctx = compare.run_context(doc)
    for f in figures.extract(doc):
        samples = f.kind == figures.SAMPLES
        out.append(
            {
                "host": host,
                "run_id": doc.get("run_id"),
                "started_utc": doc.get("started_utc"),
                **{k: ctx[k] for k in ("kernel", "fstype", "device", "profile", "torch", "disklab_version")},
                "experiment": f.experiment,
                "figure": f.name,
                "key": f.key,
                "unit": f.unit,
                "stage": f.stage,
                "cache": f.cache,
                "proven": f.proven,
                "method": f.method,
                "file": f.file,
                "populate": f.populate,
                "figure_kind": f.kind,
                **{k: f.summary.get(k) for k in ("n", "median", "min", "max", "p90", "p99")},
                "value": f.value if f.kind == figures.VERDICT else None,
                "measure": f.measure if samples else None,
                "units": f.unit_kind if samples else None,
                "n_units": len(f.units) if samples else None,
                "n_disturbed": f.n_disturbed if samples and f.flags is not None else None,
                "noise": f.noise_summary if samples else None,
                "samples": list(f.samples),
            }
        )
    return out


def collect(reports: Path, hosts: list[str] | None = None) -> tuple[list[dict], list[str]]:
    """Rows of every stored run of every host (or of ``hosts``), oldest run first per host.

    Returns (rows, errors): a run that cannot be read, or that names another host than the one whose
    directory holds it, is named in ``errors`` and left out; the other runs are exported. Raises
    ValueError naming a host of ``hosts`` that has no stored run under ``reports``.
    """
    known = store.hosts(reports)
    for h in hosts or ():
        if not store.files(hostnames.host_dir(reports, h), "runs"):
            raise ValueError(f"--host {h}: no stored run under {hostnames.host_dir(reports, h) / 'runs'}")
    rows: list[dict] = []
    errors: list[str] = []
    for host in hosts or known:
        for path in store.files(hostnames.host_dir(reports, host), "runs"):
            try:
                doc = stored.read(path, "results", host=host)
            except stored.StoredFileError as exc:
                errors.append(f"{host}: {path.name} not exported: {exc}")
                continue
            rows.extend(rows_of(doc, host))
    return rows, errors


def to_csv(rows: list[dict]) -> str:
    """CSV text: a header of :data:`COLUMNS`, then one line per row; None is an empty cell."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if r[k] is None else r[k] for k in COLUMNS})
    return buf.getvalue()


def to_json(rows: list[dict]) -> str:
    """JSON text: ``{"kind": "export", "schema_version", "columns": [...], "rows": [{column: value, ...,
    "samples": [...]}]}``."""
    doc = output("export", {"columns": list(COLUMNS), "rows": rows})
    return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def to_jsonl(rows: list[dict]) -> str:
    """JSON Lines text: one row per line, ``{"kind": "export_row", "schema_version", column: value, ...}``."""
    return "".join(
        json.dumps(output("export_row", r), ensure_ascii=False, allow_nan=False) + "\n" for r in rows
    )


def render(rows: list[dict], fmt: str) -> str:
    """Rows as ``csv``, ``json`` or ``jsonl`` text. Raises ValueError naming ``--format`` for any other."""
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {list(FORMATS)}, got {fmt!r}")
    return {"csv": to_csv, "json": to_json, "jsonl": to_jsonl}[fmt](rows)
