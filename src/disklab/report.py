"""Render reports from stored runs: one markdown report per host, and the fleet index.

Reports are a pure function of the files under reports/: `disklab report`
re-renders them all without touching a host. Templates use Jinja with
StrictUndefined, so a missing field fails loudly instead of printing nothing.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import jinja2

from disklab import __version__, compare, store
from disklab.fsio import atomic_write_text
from disklab.results import SCHEMA_VERSION
from disklab.units import FILTERS

# Report sections, in the order they appear; each has sections/NAME.py and templates/sections/NAME.md.j2.
SECTION_ORDER = ["write_buffering", "fsync_bench", "big_write", "crash", "powercut", "load", "pickle_safety"]


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("disklab", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    env.filters["figure"] = compare.format_value
    return env


def build_section(name: str, section: dict, doc: dict, plot_dir: Path) -> dict:
    """Run ``disklab.sections.<name>.build``; a section without a module gets no extra context."""
    try:
        module = importlib.import_module(f"disklab.sections.{name}")
    except ModuleNotFoundError:
        return {}
    return module.build(section, doc, plot_dir)


def host_context(host_dir: Path) -> dict | None:
    """Everything the host template needs, from the host's stored files; None without any."""
    from disklab import results

    run_files = store.files(host_dir, "runs")
    audit_path = store.latest(host_dir, "audits")
    failure_path = store.latest(host_dir, "failures")
    if not run_files and audit_path is None and failure_path is None:
        return None
    doc = results.load(run_files[-1]) if run_files else None
    audit = json.loads(audit_path.read_text()) if audit_path else None
    failure = json.loads(failure_path.read_text()) if failure_path else None
    if failure and doc and store.run_key(failure_path) < store.run_key(run_files[-1]):
        failure = None  # a later run succeeded
    sections = []
    if doc:
        for name in SECTION_ORDER + sorted(set(doc["experiments"]) - set(SECTION_ORDER)):
            if name in doc["experiments"]:
                s = doc["experiments"][name]
                sections.append({"name": name, "s": s, "x": build_section(name, s, doc, host_dir / "plots")})
    # the newest facts: an audit made after the last run shows the host as it is now
    audit_newer = audit is not None and (not doc or store.run_key(audit_path) > store.run_key(run_files[-1]))
    since = None
    if len(run_files) >= 2:
        since = compare.compare_runs(results.load(run_files[-2]), doc)
    return {
        "host": host_dir.name,
        "doc": doc,
        "facts": (audit if audit_newer else doc or {}).get("facts"),
        "facts_from": "audit" if audit_newer else "run",
        "audit": audit,
        "failure": failure,
        "sections": sections,
        "since": since,
        "n_runs": len(run_files),
    }


def render_host(host_dir: Path, env: jinja2.Environment | None = None) -> Path | None:
    """Write ``<host_dir>/report.md`` from the host's latest run; returns its path."""
    env = env or environment()
    ctx = host_context(host_dir)
    if ctx is None:
        return None
    text = env.get_template("host_report.md.j2").render(
        disklab_version=__version__, schema_version=SCHEMA_VERSION, **ctx
    )
    return atomic_write_text(host_dir / "report.md", text)


def index_row(host_dir: Path) -> dict:
    """One row of the fleet index: latest facts, fsync p50 and any failure of the latest invocation."""
    ctx = host_context(host_dir) or {}
    doc = ctx.get("doc")
    fsync = (doc or {}).get("experiments", {}).get("fsync_bench", {})
    p50 = fsync.get("modes", {}).get("fsync", {}).get("latency", {}).get("p50_us") if fsync else None
    return {
        "host": host_dir.name,
        "facts": ctx.get("facts"),
        "facts_from": ctx.get("facts_from"),
        "audit_run_id": ctx["audit"]["run_id"] if ctx.get("audit") else None,
        "run_id": doc["run_id"] if doc else None,
        "fsync_p50_us": p50,
        "failure": ctx.get("failure"),
        "has_report": doc is not None or ctx.get("audit") is not None,
    }


def render_index(reports: Path, env: jinja2.Environment | None = None) -> Path:
    """Write ``reports/index.md``: one row per host."""
    env = env or environment()
    rows = [index_row(reports / h) for h in store.hosts(reports)]
    text = env.get_template("index.md.j2").render(
        disklab_version=__version__, schema_version=SCHEMA_VERSION, rows=rows
    )
    return atomic_write_text(reports / "index.md", text)


def render_all(reports: Path) -> list[Path]:
    """Re-render every host report and the index from stored files only."""
    env = environment()
    written = [p for h in store.hosts(reports) if (p := render_host(reports / h, env))]
    written.append(render_index(reports, env))
    return written
