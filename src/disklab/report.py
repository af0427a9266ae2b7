"""Render reports from stored runs: one markdown report per host, and the fleet index.

Each markdown page gets its HTML twin beside it (``report.html``, ``index.html``, ``fleet.html``), built
from the rendered markdown by disklab.htmlpage whenever the markdown is written, or when it is missing.

Reports are a pure function of the files under reports/: `disklab report`
re-renders them all without touching a host. Templates use Jinja with
StrictUndefined, so a missing field fails loudly instead of printing nothing. What a render keeps to
skip work the next time is disklab.reportcache's; the pool of processes that renders many hosts,
disklab.reportpool's.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from importlib import resources
from pathlib import Path

import jinja2

from disklab import (
    __version__,
    anchors,
    answers,
    compare,
    figures,
    fleet,
    history,
    hostnames,
    htmlpage,
    markup,
    predictions,
    reportcache,
    reportpool,
    store,
    stored,
    stormverdicts,
    togetherpage,
    verdicts,
)
from disklab.fsio import atomic_write_text
from disklab.units import FILTERS
from disklab_host import registry
from disklab_host.common.formats import VERSIONS

# Report sections, in the registry's step order; each has sections/NAME.py and templates/sections/NAME.md.j2.
SECTION_ORDER = list(registry.STEP_NAMES)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("disklab", "templates"),
        bytecode_cache=reportcache.bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    env.filters["figure"] = compare.format_value
    env.filters["verdict_sentence"] = verdicts.sentence
    env.filters["behind_text"] = stormverdicts.behind_text
    env.filters["doubling_text"] = stormverdicts.doubling_text
    env.filters["storm_verdict"] = stormverdicts.verdict_text
    env.filters.update(markup.FILTERS)  # every string from an inventory or a host is escaped where it lands
    return env


def build_section(name: str, section: dict, doc: dict, plot_dir: Path) -> dict:
    """Run ``disklab.sections.<name>.build``; a section without a module gets no extra context."""
    module = _section_module(name) if name in SECTION_ORDER else None  # a name from a host is no module path
    return module.build(section, doc, plot_dir) if module else {}


def _section_module(name: str):
    """``disklab.sections.<name>``, or None for a step without one."""
    try:
        return importlib.import_module(f"disklab.sections.{name}")
    except ModuleNotFoundError:
        return None


def _compile_templates(env: jinja2.Environment) -> None:
    """Compile every template into ``env`` (and Jinja's bytecode cache)."""
    for name in env.list_templates(extensions=["j2"]):
        env.get_template(name)


def warm_up() -> None:
    """Load, before there is anything to render, what a render loads first: the section modules,
    matplotlib with its font, and the compiled templates (into Jinja's bytecode cache). About a second of a
    single-host render; ``disklab run`` calls this in a thread while the hosts work. Any error is left for
    the render itself to report."""
    with contextlib.suppress(Exception):
        for name in SECTION_ORDER:
            _section_module(name)
        from disklab import plotting

        plotting.warm_up()
        _compile_templates(environment())


# The facts that name a filesystem: when the audit's and the run's differ in any, they are two places.
FILESYSTEM_KEYS = ("mount_point", "fstype", "source")


def run_workbench(doc: dict | None) -> dict | None:
    """The workbench facts the lab runner recorded where it measured (results 4), or None when the run
    has none (an older run, or a workbench the runner could not locate)."""
    wb = (doc or {}).get("workbench")
    return wb if isinstance(wb, dict) and "unavailable" not in wb else None


def measured_doc(doc: dict | None) -> dict | None:
    """``doc`` as its figures are read: its facts' workbench replaced by the run's own, when recorded.

    The sections and the report read the workbench through ``facts.workbench``; the audit's stays in
    the stored file, unchanged.
    """
    wb = run_workbench(doc)
    if wb is None or not isinstance(doc.get("facts"), dict):
        return doc
    return {**doc, "facts": {**doc["facts"], "workbench": wb}}


def workbench_split(audit_wb: object, run_wb: dict | None) -> dict | None:
    """``{"audit": ..., "run": ..., "differ": [keys]}`` when the audit's workbench facts and the run's
    name different filesystems (any of :data:`FILESYSTEM_KEYS` differs), else None."""
    if not isinstance(audit_wb, dict) or run_wb is None:
        return None
    differ = [key for key in FILESYSTEM_KEYS if audit_wb.get(key) != run_wb.get(key)]
    return {"audit": audit_wb, "run": run_wb, "differ": differ} if differ else None


anchor = answers.anchor  # a section's id in the host report, from its heading (disklab.anchors)


def run_of(doc: dict, latest: bool, experiment: str | None = None) -> dict:
    """What a section's heading names of the run it is from: ``{"run_id", "started_utc", "kernel",
    "torch", "latest", "noise"}`` (kernel and torch from that run's own facts; a missing one is
    ``None``); ``latest``: it is the newest readable run of the host; ``noise``: what the step's figures
    say of the host's noise (figures.noise_of), None without ``experiment``."""
    facts = doc.get("facts") or {}
    return {
        "run_id": doc["run_id"],
        "started_utc": doc.get("started_utc"),
        "kernel": (facts.get("host") or {}).get("kernel"),
        "torch": (facts.get("versions") or {}).get("torch"),
        "latest": latest,
        "noise": figures.noise_of(doc, experiment) if experiment else None,
    }


def mixed_runs(sections: list[dict]) -> list[dict]:
    """The runs the sections come from, newest first: ``[{"run_id", "latest", "sections": [(name,
    anchor)]}]``; more than one when a run of fewer steps followed a fuller one."""
    by_run: dict[str, dict] = {}
    for sec in sections:
        entry = by_run.setdefault(
            sec["run"]["run_id"],
            {"run_id": sec["run"]["run_id"], "latest": sec["run"]["latest"], "sections": []},
        )
        entry["sections"].append((sec["name"], sec["anchor"]))
    return sorted(by_run.values(), key=lambda r: store.run_key(Path(r["run_id"])), reverse=True)


def host_context(host_dir: Path, known_valid: set[str] | None = None) -> dict | None:
    """Everything the host template needs, from the host's stored files; None without any.

    ``known_valid``: the :func:`disklab.stored.validity_key` digests of files already found valid (their
    schema check is skipped; those that pass are added), as :func:`render_host` keeps them.

    A stored file that cannot be read costs only itself: the newest readable run is shown, an unreadable
    audit or failure is left out, and each is named in ``unreadable_latest`` (the newest of its kind) or
    ``unreadable_runs`` (older runs). The host keeps its report and its index row either way.
    """
    host = hostnames.host_of(host_dir)
    run_files = store.files(host_dir, "runs")
    audit_path = store.latest(host_dir, "audits")
    failure_path = store.latest(host_dir, "failures")
    if not run_files and audit_path is None and failure_path is None:
        return None
    kv = known_valid
    unreadable_latest: list[str] = []

    def read(path: Path | None, kind: str) -> dict | None:
        if path is None:
            return None
        try:
            return stored.read(path, kind, known_valid=kv, host=host)
        except stored.StoredFileError as exc:
            unreadable_latest.append(str(exc))
            return None

    doc, doc_path = None, None
    for path in reversed(run_files):  # the newest run that can be read
        doc = read(path, "results")
        if doc is not None:
            doc_path = path
            break
    audit = read(audit_path, "audit")
    failure = read(failure_path, "failure")
    newest_ok = max(
        (
            store.run_key(p)
            for p, d in ((doc_path, doc), (audit_path, audit))
            if p is not None and d is not None
        ),
        default=None,
    )
    if failure and newest_ok is not None and store.run_key(failure_path) < newest_ok:
        failure = None  # a later run or audit succeeded
    status = host_status(doc, doc_path, audit, audit_path, failure, failure_path, unreadable_latest)
    n_runs = len(run_files)
    run_files = run_files[: run_files.index(doc_path) + 1] if doc_path else []  # up to the one shown
    # older runs, newest first, read only as far as needed: the previous run (the comparison), the
    # five before the shown one (experiments they had), and every run back to the newest that holds
    # each step the shown run lacks. One that cannot be read costs only itself, never the report.
    older: dict[Path, dict | None] = {}
    unreadable: list[str] = []
    sources: dict[str, tuple[Path, dict]] = {}
    if doc:
        sources = {name: (doc_path, doc) for name in doc["experiments"]}
        wanted = set(SECTION_ORDER) - set(sources)
        for n, path in enumerate(reversed(run_files[:-1])):
            if n >= 5 and not wanted:
                break
            try:
                old = stored.read(path, "results", known_valid=kv, host=host)
            except stored.StoredFileError as exc:
                older[path] = None
                unreadable.append(str(exc))
                continue
            older[path] = old
            for name in old["experiments"]:
                if name not in sources:
                    sources[name] = (path, old)
                    wanted.discard(name)
    sections = []
    for name in SECTION_ORDER + sorted(set(sources) - set(SECTION_ORDER)):
        if name not in sources:
            continue
        path, source = sources[name]
        measured_source = measured_doc(source)  # read against the workbench of the run that made them
        s = source["experiments"][name]
        x = build_section(name, s, measured_source, host_dir / "plots")
        # the load section marks its own busy samples, cell by cell (sections/load/time_split.py)
        run = run_of(source, latest=path == doc_path, experiment=None if name == "load" else name)
        sections.append(
            {
                "name": name,
                "anchor": anchor(name),
                "heading": anchors.section_heading(name),
                "section": s,
                "view": x,
                "doc": measured_source,
                "run": run,
            }
        )
    # the newest facts: an audit made after the last run shows the host as it is now
    audit_newer = audit is not None and (not doc or store.run_key(audit_path) > store.run_key(run_files[-1]))
    since = None
    if len(run_files) >= 2 and older.get(run_files[-2]):
        earlier = [older[p] for p in run_files[:-2] if older.get(p)]  # the host's run-to-run drift
        since = compare.compare_runs(older[run_files[-2]], doc, earlier=earlier)
    facts = (audit if audit_newer else doc or {}).get("facts")
    run_wb = run_workbench(doc)
    split = workbench_split((facts or {}).get("workbench"), run_wb)
    if facts and run_wb is not None:
        facts = {**facts, "workbench": run_wb}
    runs_used = mixed_runs(sections)
    fsync = next((sec for sec in sections if sec["name"] == "fsync_bench"), None)
    sync = durable_sync(fsync["doc"] if fsync else doc)
    if doc and fsync is None:
        sync = {**sync, "why": "no stored run of this host holds fsync_bench"}
    measured = measured_doc(doc)
    return {
        "host": host,
        "host_link": host_dir.name,
        "status": status,
        "unreadable_latest": unreadable_latest,
        "doc": measured,
        "facts": facts,
        "facts_from": "audit" if audit_newer else "run",
        "workbench_split": split,
        "workbench_from": "run" if facts and run_wb is not None else "audit",
        "audit": audit,
        "failure": failure,
        "sections": sections,
        "since": since,
        "statistics_link": f"../{STATISTICS_PAGE}",
        "one_run_only": compare.ONE_RUN_ONLY,
        "since_shown": [g for g in since["figures"] if compare.shown(g)] if since else [],
        "since_noise": compare.noise_missing(since) if since else {},
        "n_runs": n_runs,
        "runs_used": runs_used,
        "absent": [(n, anchors.section_heading(n)) for n in SECTION_ORDER if doc and n not in sources],
        "durable_sync": {**sync, "run_id": fsync["run"]["run_id"] if fsync else None},
        "answers": answers.host_answers(sections, sync, runs_used),
        "unreadable_runs": unreadable,
        "history": history.section(host_dir, known_valid=kv),  # every run's key figures (disklab.history)
        # the fleet's predictions beside this host's figures (disklab.predictions), None without the file
        "predictions": predictions.host_table(host_dir.parent, host, sections),
    }


# The sync call that reaches stable storage on each OS, as (fsync_bench mode, the name the index shows).
# Linux: fsync(2) flushes the drive's volatile cache. macOS: fsync(2) stops at the drive's cache, and
# only fcntl(F_FULLFSYNC) asks the drive to write it to stable storage (Apple's fsync(2) man page).
DURABLE_SYNC = {"Linux": ("fsync", "fsync"), "Darwin": ("f_fullfsync", "F_FULLFSYNC")}


def durable_sync(doc: dict | None) -> dict:
    """The p50 latency of the run's sync call that reaches stable storage on its host's OS.

    Returns {call, p50_us, why}: call is the name shown ("fsync", "F_FULLFSYNC",
    or None for an OS without a known call), p50_us the median per-call latency
    of a 4 KiB write plus that call in µs (None when there is no figure), why the
    reason when there is none (else None); with a figure also units_ns, unit_kind,
    flags and noise, its test units and their noise (figures.units_of) for the
    fleet's verdicts. The OS is the run's own facts'
    host.system. A Mac without an F_FULLFSYNC figure gets none: plain fsync is
    never shown in its place.
    """
    if not doc:
        return {"call": None, "p50_us": None, "why": "no lab run stored"}
    system = doc["facts"]["host"]["system"]
    if system not in DURABLE_SYNC:
        why = f"no sync call known to reach stable storage on {system}"
        return {"call": None, "p50_us": None, "why": why}
    mode_name, call = DURABLE_SYNC[system]
    instead = "; plain fsync is not shown in its place: on macOS it stops at the drive's cache"
    instead = instead if system == "Darwin" else ""

    def missing(why: str) -> dict:
        return {"call": call, "p50_us": None, "why": why + instead}

    section = doc["experiments"].get("fsync_bench")
    if section is None:
        return missing("fsync_bench was not in this run")
    if section["status"] == "not_run":
        return missing(f"fsync_bench not run: {section['reason']}")
    if section["status"] != "ok":
        return missing(f"fsync_bench {section['status']}: {section.get('error', 'no error recorded')}")
    mode = section["modes"].get(mode_name)
    if mode is None:
        return missing(f"no {call} figure in this run")
    if mode["status"] != "ok":
        return missing(f"{call} {mode['status']}: {mode.get('reason', 'no reason recorded')}")
    if mode.get("fallback"):  # F_FULLFSYNC failed and plain fsync was timed in its place
        errno = mode["fallback"].get("errno", "an error")
        return missing(f"{call} fell back to plain fsync on this host ({errno})")
    kind, units, flags, summary = figures.units_of(mode["samples_ns"], mode)
    return {
        "call": call,
        "p50_us": mode["latency"]["p50_us"],
        "why": None,
        # its test units (each round's median, ns) and their noise, for the fleet's verdicts
        "units_ns": list(units),
        "unit_kind": kind,
        "flags": None if flags is None else list(flags),
        "noise": summary,
    }


def host_status(doc, doc_path, audit, audit_path, failure, failure_path, unreadable: list[str]) -> dict:
    """A host's latest status and where it came from: {status, source, run_id}.

    ``source`` is ``run``, ``audit`` or ``failure record`` (the newest readable one; a failure that a later
    run or audit cleared is None here), or ``unreadable`` when no stored file of the host can be read.
    """
    found = [
        (store.run_key(p), source, d)
        for p, source, d in (
            (doc_path, "run", doc),
            (audit_path, "audit", audit),
            (failure_path, "failure record", failure),
        )
        if p is not None and d is not None
    ]
    if not found:
        return {"status": "unreadable", "source": "unreadable", "run_id": None, "why": "; ".join(unreadable)}
    _when, source, newest = max(found, key=lambda t: (t[0], t[1] == "failure record"))
    status = newest["status"] if source == "failure record" else "ok"
    return {"status": status, "source": source, "run_id": newest["run_id"], "why": None}


def index_row(ctx: dict) -> dict:
    """One row of the fleet index from a host's context: newest facts, durable sync p50, latest failure."""
    doc = ctx.get("doc")
    return {
        "host": ctx["host"],
        "host_link": ctx["host_link"],
        "status": ctx["status"],
        "unreadable": ctx["unreadable_latest"],
        "facts": ctx.get("facts"),
        "facts_from": ctx.get("facts_from"),
        "workbench_from": ctx.get("workbench_from"),
        "workbench_split": ctx.get("workbench_split"),
        "audit_run_id": ctx["audit"]["run_id"] if ctx.get("audit") else None,
        "run_id": doc["run_id"] if doc else None,
        "durable_sync": ctx["durable_sync"],
        "cold_unproven": answers.cold_unproven(ctx["sections"]),
        "failure": ctx.get("failure"),
        "has_report": True,
        "fleet": fleet.host_column(doc),
    }


# A list item's first line (``- x``, ``* x``, ``+ x``, ``1. x``, ``1) x``), in a blockquote too (``> - x``).
_LIST_ITEM = re.compile(r"^(?P<quote>(?:> ?)*)(?:[-*+]|[0-9]{1,9}[.)])(?: |$)")


def _after_list(quote: str, line: str) -> str | None:
    """What a line after a list item (in a blockquote when ``quote``, the item's ``> `` prefix) is:
    ``"item"`` (another item), ``"more"`` (indented under the item), ``"blank"`` (blank, in the quote or
    not: the item's paragraph ends there), or the line that must come before it to end the list (``""``,
    or the quote's own ``>``): CommonMark reads any other text right after an item as the item's lazy
    continuation, a paragraph inside the bullet."""
    if _LIST_ITEM.match(line):
        return "item"
    mark = quote.rstrip()
    if not line.strip():
        return "blank"
    if mark and not line.startswith(mark):
        return ""
    body = line[len(mark) :]
    body = body[1:] if body.startswith(" ") and quote.endswith(" ") else body
    if not body.strip():
        return "blank"
    if body.startswith((" ", "\t")):
        return "more"
    return mark


def tidy_markdown(text: str) -> str:
    """Blank lines around headings and tables, after lists, and no runs of blank lines.

    Section templates are included inside loops, and Jinja's whitespace
    control can glue a table or heading to the line before it, which stops
    markdown renderers from seeing it as a table or heading; a paragraph glued
    to a list would be read as part of its last item (inside a blockquote, the
    quote's own ``>`` line ends the list).
    """
    out: list[str] = []
    fenced = False
    in_list: str | None = None  # the quote prefix of the list item the lines above belong to
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or line.startswith("```"):
            out.append(line)
            in_list = None
            continue
        after = _after_list(in_list, line) if in_list is not None else None
        if after not in (None, "item", "more", "blank"):
            out.append(after)
        prev = out[-1] if out else ""
        starts_block = line.startswith("#") or (line.startswith("|") and not prev.startswith("|"))
        ends_table = prev.startswith("|") and line.strip() and not line.startswith("|")
        if (starts_block or ends_table or (prev.startswith("#") and line.strip())) and prev.strip():
            out.append("")
        if line.strip() or (out and out[-1].strip()):
            out.append(line)
        item = _LIST_ITEM.match(line)
        if item:
            in_list = item["quote"]
        elif after != "more":
            in_list = None
    return "\n".join(out).strip() + "\n"


def render_host(host_dir: Path, env: jinja2.Environment, renderer: str, force: bool = False) -> dict | None:
    """Write ``<host_dir>/report.md`` and ``report.html`` from the host's stored files; return its index row.

    A host whose stored files and renderer are unchanged since its last render
    (``.rendered.json`` holds the stamp and the index row) is not rendered
    again unless ``force``: the report is a pure function of those inputs. Its
    ``report.html``, when missing, is then written from the ``report.md`` there.
    Returns None for a directory without any stored file.
    """
    stamp = reportcache.input_stamp(host_dir, renderer)
    if not force and (row := reportcache.cached_row(host_dir, stamp)) is not None:
        _html_twin(host_dir)  # the markdown is up to date; its HTML is written when missing
        return row
    known = stored.known_valid(host_dir)
    valid = set(known)
    ctx = host_context(host_dir, valid)
    if ctx is None:
        return None
    if valid != known:  # written before the report: a failed render still keeps what was checked
        stored.remember_valid(host_dir, valid)
    older = (ctx.get("doc") or {}).get("stored_schema_version")  # set by disklab.stored.upgrade
    stored_at = (
        f" (the run was stored at version {older}; what that version did not record is said where it is "
        "missing)"
        if older
        else ""
    )
    text = env.get_template("host_report.md.j2").render(
        disklab_version=__version__, schema_version=VERSIONS["results"], stored_at=stored_at, **ctx
    )
    text = tidy_markdown(text)
    atomic_write_text(host_dir / "report.md", text)
    htmlpage.write(host_dir / "report.md", text, htmlpage.HOST_NAV)  # before the stamp: a crash renders again
    row = index_row(ctx)
    reportcache.remember_row(host_dir, stamp, row)
    return row


# How figures are judged (docs/statistics.md, shipped in the package), written beside the index so every
# report links to it offline.
STATISTICS_PAGE = "statistics.md"
INDEX_PAGES = ("index.md", "index.html", fleet.FLEET_PAGE, "fleet.html", STATISTICS_PAGE, "statistics.html")


def render_index(
    reports: Path,
    rows: list[dict],
    env: jinja2.Environment,
    renderer: str | None = None,
    together: dict | None = None,
) -> Path:
    """Write ``reports/index.md`` (one row per host) and beside it ``reports/fleet.md`` (disklab.fleet), each
    with its HTML twin (``index.html``, ``fleet.html``); returns the path of ``index.md``. ``together``: the
    newest together run's summary (disklab.togetherpage.render), for the fleet page's Together section.

    With ``renderer`` (:func:`renderer_stamp`), the four pages are left as they are when they exist and
    ``.index.sha256`` holds the digest of that renderer, the rows and the fleet plots: they are a pure
    function of those, so they would be written again byte for byte (rendering them took about a second
    at 500 hosts, most of a re-render with nothing changed).
    """
    plots = fleet.plots(reports, rows)  # a missing plot is drawn again either way
    key = None if renderer is None else reportcache.index_key(renderer, rows, plots, together)
    if key is not None and reportcache.index_current(reports, key, INDEX_PAGES):
        return reports / "index.md"
    reportcache.forget_index(reports)
    guide = (resources.files("disklab") / STATISTICS_PAGE).read_text(encoding="utf-8")
    atomic_write_text(reports / STATISTICS_PAGE, guide)
    htmlpage.write(reports / STATISTICS_PAGE, guide, htmlpage.STATISTICS_NAV)
    hosts, tables = fleet.tables(rows)
    text = env.get_template(fleet.TEMPLATE).render(
        disklab_version=__version__,
        schema_version=VERSIONS["results"],
        tables=tables,
        plots=plots,
        columns=len(hosts) <= fleet.MAX_COLUMNS,
        max_columns=fleet.MAX_COLUMNS,
        together=together,
    )
    text = tidy_markdown(text)
    atomic_write_text(reports / fleet.FLEET_PAGE, text)
    htmlpage.write(reports / fleet.FLEET_PAGE, text, htmlpage.FLEET_NAV)
    text = env.get_template("index.md.j2").render(
        disklab_version=__version__,
        schema_version=VERSIONS["results"],
        rows=rows,
        answers=fleet.answers(rows),
        fleet_page=fleet.FLEET_PAGE,
        picture=plots["sync"],
        together=together,
    )
    text = tidy_markdown(text)
    written = atomic_write_text(reports / "index.md", text)
    htmlpage.write(reports / "index.md", text, htmlpage.INDEX_NAV)
    if key is not None:
        reportcache.remember_index(reports, key)
    return written


def render_all(reports: Path, force: bool = False) -> tuple[list[Path], list[str]]:
    """Render every host report that is out of date, then the index, from stored files only.

    Returns (the markdown reports written this time and the index, each with its
    HTML twin beside it, and one line per host that could not be rendered). A
    host whose stored files cannot be read is left out of the index and named in
    the errors; the other hosts render.
    Out-of-date hosts are rendered in a pool of processes, one per CPU (disklab.reportpool).
    """
    env = environment()
    renderer = reportcache.renderer_stamp()
    hosts = store.hosts(reports)
    before = {h: _mtime(hostnames.host_dir(reports, h) / "report.md") for h in hosts}
    # an up-to-date host's row comes from its stamp, read once here; only the others are rendered
    cached = {} if force else {h: _cached_row(hostnames.host_dir(reports, h), renderer) for h in hosts}
    for host, row in cached.items():
        if row is not None:
            _html_twin(hostnames.host_dir(reports, host))
    stale = [h for h in hosts if cached.get(h) is None]
    rendered: dict[str, tuple] = {}
    workers = reportpool.workers(len(stale))
    if workers > 1:
        jobs = [(str(reports), h, renderer, force) for h in stale]
        for result in reportpool.run(_render_one, jobs, workers, before_fork=lambda: _preload(env)):
            rendered[result[0]] = result
    else:
        rendered = {h: _render_one((str(reports), h, renderer, force), env) for h in stale}
    done = [rendered.get(h) or (h, cached[h], None) for h in hosts]
    rows, written, errors = [], [], []
    bad_predictions = predictions.error(reports)  # each report says so too; the reports still render
    if bad_predictions:
        errors.append(bad_predictions)
    for path in store.foreign_dirs(reports):
        errors.append(f"{path}: not rendered: not a host directory disklab writes (see disklab.hostnames)")
    for host, row, error in done:
        if error:
            errors.append(error)
        if row is None:
            continue
        rows.append(row)
        errors.extend(f"{host}: {line}" for line in row.get("unreadable") or ())
        report_md = hostnames.host_dir(reports, host) / "report.md"
        if _mtime(report_md) != before[host]:
            written.append(report_md)
    rows += unstored_rows(reports)
    together, unreadable = togetherpage.render(reports, env)
    errors.extend(unreadable)
    if together is not None:
        written.append(reports / together["page"])
    written.append(render_index(reports, rows, env, renderer, together))
    return written, errors


def _html_twin(host_dir: Path) -> None:
    """Write an up-to-date host's ``report.html`` from its ``report.md`` when the HTML is missing."""
    report_md = host_dir / "report.md"
    if not htmlpage.html_path(report_md).is_file():
        htmlpage.write(report_md, report_md.read_text(), htmlpage.HOST_NAV)


def _mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.exists() else None


def _cached_row(host_dir: Path, renderer: str) -> dict | None:
    """The index row of a host whose report is up to date, else None."""
    return reportcache.cached_row(host_dir, reportcache.input_stamp(host_dir, renderer))


def _preload(env: jinja2.Environment) -> None:
    """Before forking workers: compile every template into ``env`` and make it the workers' environment,
    so no forked worker compiles them again. matplotlib is not loaded here: a render whose plots are all
    current (``--force`` after a template change) never imports it."""
    global _WORKER_ENV
    _compile_templates(env)
    _WORKER_ENV = env


_WORKER_ENV: jinja2.Environment | None = None


def _render_one(job: tuple, env: jinja2.Environment | None = None) -> tuple[str, dict | None, str | None]:
    """Render one host (in a pool worker, or here with ``env``): (host, index row or None, error or None)."""
    global _WORKER_ENV
    reports, host, renderer, force = job
    if env is None:
        _WORKER_ENV = _WORKER_ENV or environment()
        env = _WORKER_ENV
    try:
        return host, render_host(hostnames.host_dir(Path(reports), host), env, renderer, force), None
    except stored.StoredFileError as exc:  # the host keeps its index row, saying why it has no report
        why = f"not rendered: {exc}"
        status = {"status": "unreadable", "source": "unreadable", "run_id": None, "why": why}
        return host, row_without_report(host, hostnames.encode(host), status), f"{host}: {why}"


def row_without_report(host: str, host_link: str | None, status: dict, failure: dict | None = None) -> dict:
    """The index row of a host that has no report: ``status`` (:func:`host_status`'s) and ``failure``."""
    return {
        "host": host,
        "host_link": host_link,
        "status": status,
        "unreadable": [],
        "facts": None,
        "facts_from": None,
        "audit_run_id": None,
        "run_id": None,
        "durable_sync": {**durable_sync(None), "run_id": None},
        "cold_unproven": None,
        "failure": failure,
        "has_report": False,
        "fleet": None,
    }


def unstored_rows(reports: Path) -> list[dict]:
    """Index rows of the hosts whose names make no directory (disklab.store.hosts_without_a_dir): each
    was refused, and keeps its row, from the run record that names it."""
    rows = []
    for host, rec in sorted(store.hosts_without_a_dir(reports).items()):
        word = rec["status"] if rec["status"] != "ok" else "not stored"
        status = {"status": word, "source": "run record", "run_id": rec["run_id"], "why": rec["why"]}
        failure = {"status": word, "task": "Store the fetched results", "message": rec["why"]}
        rows.append(row_without_report(host, None, status, failure))
    return rows
