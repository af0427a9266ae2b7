"""The reports directory: where fetched runs, audits and failures are kept.

Layout (every file written atomically through disklab.stored, none ever overwritten)::

    reports/<host>/runs/<run_id>.json       results of one lab run (schema-validated)
    reports/<host>/audits/<run_id>.json     facts of one `disklab audit`
    reports/<host>/failures/<run_id>.json   what failed on that host, and where
    reports/.runs/<run_id>.json             per-host status of one invocation (for --retry-failed)
    reports/.incoming/<run_id>/<host>.json  staging for fetched files, removed once stored

``<host>`` is always the host's name through disklab.hostnames (``../x`` is ``%2E.%2Fx``, ``Web1`` is
``Web1%u4``): a name from an inventory becomes a path only there. The name itself is kept inside the files
and shown in the reports; a run or audit file lies only in the directory of the host it names
(disklab.stored.read's ``host``), and a file that names another host is refused where it is read.
A host directory an older disklab named by the rule before its case suffix (``reports/Web1``) is moved
to the host's name now by :func:`move_legacy_dirs`, file by file where it holds another host's files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import sys
from pathlib import Path

from disklab import console, hostnames, ownership, stored
from disklab.runner import HostOutcome
from disklab_host.common.fsio import fsync_dir

# What new_run_id makes: a UTC timestamp, with -N when that second was taken already.
RUN_ID = re.compile(r"^\d{8}T\d{6}Z(-\d+)?$")


def new_run_id(reports: Path, now: dt.datetime | None = None) -> str:
    """A UTC timestamp run id, e.g. ``20261129T113000Z``; suffixed ``-N`` if already used."""
    base = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    taken = (
        {p.stem for p in reports.glob("*/runs/*.json")}
        | {p.stem for p in reports.glob(".runs/*.json")}
        | {p.name for p in reports.glob(".incoming/*")}
        | {p.name for p in reports.glob(".artifacts/*")}  # a --check run keeps only its artifacts
    )
    run_id, n = base, 0
    while run_id in taken:
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def incoming_dir(reports: Path, run_id: str) -> Path:
    return reports / ".incoming" / run_id


def discard_incoming(reports: Path, run_id: str) -> None:
    """Remove a run's staging directory and what it holds (an interrupted or --check run stores nothing)."""
    shutil.rmtree(incoming_dir(reports, run_id), ignore_errors=True)
    with contextlib.suppress(OSError):  # .incoming itself goes when no other run is staging
        (reports / ".incoming").rmdir()


def _why_nothing_fetched(host: str, outcome, outcomes: dict) -> str:
    """Why an ok host has no results: its own, or, where another host failed at the task this one stopped
    at (the refusals before any work end the play for every host), that host's refusal."""
    for other, o in outcomes.items():
        if other != host and o.status in ("failed", "unreachable") and o.task and o.task == outcome.task:
            return (
                f"not run: the play stopped for every host, before any work, when host {other!r} failed at "
                f"{o.task!r}: {o.message or 'no message'}"
            )
    return "no results file was fetched from this host"


def store_fetched(
    reports: Path, run_id: str, kind: str, outcomes: dict[str, HostOutcome], *, fetched: bool = True
) -> dict[str, str]:
    """Move each host's fetched file into ``<host>/<kind>/<run_id>.json``.

    ``kind`` is ``runs`` (results files) or ``audits`` (facts, kept as audit files).
    A host whose file is missing or invalid is marked failed in ``outcomes``
    with the reason; the other hosts keep their results. A host whose run was
    stored but whose steps failed is ``partial``, with each failed step and its
    error in ``outcome.failed_steps``. Returns host -> status.

    ``fetched=False``: the run's tags fetched no results (``--tags provision``,
    ``--tags audit``, ``--skip-tags fetch``; :data:`disklab.runner.FETCHING_FACT`),
    so a host without a file is ok when its tasks were. What such a run stages is
    the audit's facts (site.yml keeps them): a staged facts file is stored as an
    audit, ``<host>/audits/<run_id>.json``, whatever the run's kind.
    """
    staging = incoming_dir(reports, run_id)
    kept_facts = set()  # hosts whose staged facts were stored as an audit (a leftover of such a run, too)
    for path in sorted(staging.glob("*.json")) if staging.is_dir() else []:
        try:
            host = hostnames.decode(path.stem)  # the playbooks name it with disklab.lab.host_file
        except ValueError as exc:
            try:  # staged by a disklab from before the case suffix: the file's own host is checked below
                host = hostnames.legacy_decode(path.stem)
            except ValueError:
                print(console.text(f"disklab: left {path} as it is: {exc}"), file=sys.stderr)
                continue
        outcome = outcomes.setdefault(host, HostOutcome(host=host))
        as_kind = "audits" if kind == "audits" or _file_kind(path) == "facts" else "runs"
        dest = hostnames.host_dir(reports, host) / as_kind / f"{run_id}.json"
        valid: set[str] = set()  # the key of the file stored: its first render skips the schema check
        try:
            if as_kind == "runs":
                doc = stored.read(path, "results", host=host)
                if doc.get("run_id") != run_id:  # stored under its own id, as every reader checks
                    raise stored.StoredFileError(
                        f"{path}: results of run {doc.get('run_id')!r}, fetched for run {run_id!r}: kept as "
                        "it came, not stored"
                    )
                stored.write(dest, "results", doc, known_valid=valid, read_just_now=True)
                failed = {  # a step that failed, or one with a part that failed (partial)
                    n: s.get("error") or "; ".join(s.get("failed_parts") or [])
                    for n, s in doc["experiments"].items()
                    if s["status"] in ("failed", "partial")
                }
                if failed and outcome.status == "ok":
                    outcome.status, outcome.failed_steps = "partial", failed
                    outcome.task = "Run the storage lab experiments on the host"
                    outcome.message = "failed steps: " + "; ".join(f"{n} ({e})" for n, e in failed.items())
            else:
                facts = stored.read(path, "facts")
                audit = {"run_id": run_id, "host": host, "facts": facts}
                stored.write(dest, "audit", audit, known_valid=valid)
                kept_facts.add(host)
        except stored.StoredFileError as exc:
            outcome.status, outcome.task, outcome.message = "failed", "Store the fetched results", str(exc)
            continue
        stored.remember_valid(dest.parent.parent, stored.known_valid(dest.parent.parent) | valid)
        path.unlink()
    for host, outcome in outcomes.items():
        try:
            host_dir = hostnames.host_dir(reports, host)
        except ValueError as exc:  # a name the rule refuses (empty, too long): said, never a path
            print(console.text(f"disklab: {host}: {outcome.status}, not stored: {exc}"), file=sys.stderr)
            continue
        stored_here = host in kept_facts or (host_dir / kind / f"{run_id}.json").exists()
        if fetched and outcome.status == "ok" and not stored_here:
            outcome.status, outcome.message = "failed", _why_nothing_fetched(host, outcome, outcomes)
        if outcome.status != "ok":
            stored.write(
                host_dir / "failures" / f"{run_id}.json",
                "failure",
                {
                    "run_id": run_id,
                    "run_kind": kind,
                    "status": outcome.status,
                    "task": outcome.task,
                    "role": outcome.role,
                    "message": outcome.message,
                    "failed_steps": outcome.failed_steps,
                },
            )
    for packed in ("disklab_host.pyz", ownership.OWNER):  # packed and owned for this run only: now stored
        (staging / packed).unlink(missing_ok=True)
    if staging.is_dir() and not any(staging.iterdir()):
        staging.rmdir()
        if not any(staging.parent.iterdir()):
            staging.parent.rmdir()
    status = {h: o.status for h, o in sorted(outcomes.items())}
    return status


def _file_kind(path: Path) -> str | None:
    """The ``file_kind`` a staged file says it is (results, facts), or None when it says none; the store
    reads it again through disklab.stored, which refuses what is not that kind."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return doc.get("file_kind") if isinstance(doc, dict) else None


def record_invocation(reports: Path, run_id: str, kind: str, inventory: Path, status: dict[str, str]) -> Path:
    """Write ``.runs/<run_id>.json``: which hosts succeeded, for ``--retry-failed``."""
    return stored.write(
        reports / ".runs" / f"{run_id}.json",
        "run_record",
        {"run_id": run_id, "run_kind": kind, "inventory": str(inventory.resolve()), "hosts": status},
    )


def failed_hosts_of_last_run(reports: Path, inventory: Path) -> tuple[str, list[str]] | None:
    """(run_id, hosts that failed or were unreachable) of the newest `disklab run` on ``inventory``."""
    for path in sorted((reports / ".runs").glob("*.json"), key=run_key, reverse=True):
        try:
            doc = stored.read(path, "run_record")
        except stored.StoredFileError as exc:
            print(console.text(f"disklab: skipped an unreadable run record: {exc}"), file=sys.stderr)
            continue
        if doc["run_kind"] == "runs" and doc["inventory"] == str(inventory.resolve()):
            return doc["run_id"], [h for h, s in doc["hosts"].items() if s != "ok"]
    return None


def hosts_without_a_dir(reports: Path) -> dict[str, dict]:
    """Hosts of the newest run record of each inventory and kind whose names make no directory (the rule
    refuses them: too long), for the index: host -> {run_id, run_kind, status, why}. Such a host was
    refused before any work (the playbooks' first task), so it has no stored file, only its record."""
    out: dict[str, dict] = {}
    seen: set[tuple[str, str]] = set()
    for path in sorted((reports / ".runs").glob("*.json"), key=run_key, reverse=True):
        try:
            doc = stored.read(path, "run_record")
        except stored.StoredFileError:
            continue  # failed_hosts_of_last_run names it
        if (doc["run_kind"], doc["inventory"]) in seen:
            continue
        seen.add((doc["run_kind"], doc["inventory"]))
        for host, status in doc["hosts"].items():
            try:
                hostnames.host_dir(reports, host)
            except ValueError as exc:
                why = f"not stored: {exc}"
                out.setdefault(
                    host, {"run_id": doc["run_id"], "run_kind": doc["run_kind"], "status": status, "why": why}
                )
    return out


def hosts(reports: Path) -> list[str]:
    """Every host (its name, not its directory's) with at least one stored run, audit or failure.

    A directory whose name disklab.hostnames never makes (one written by hand, or by a disklab from before
    host names were encoded) is no host's; :func:`foreign_dirs` names them.
    """
    return sorted(hostnames.host_of(p) for p in _host_like_dirs(reports) if _is_encoded(p.name))


def foreign_dirs(reports: Path) -> list[Path]:
    """Directories that hold runs, audits or failures but whose name is no host's encoded name."""
    return sorted(p for p in _host_like_dirs(reports) if not _is_encoded(p.name))


def _host_like_dirs(reports: Path) -> list[Path]:
    if not reports.is_dir():
        return []
    return [
        p
        for p in reports.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and any((p / k).is_dir() for k in ("runs", "audits", "failures"))
    ]


def _is_encoded(name: str) -> bool:
    try:
        hostnames.decode(name)
    except ValueError:
        return False
    return True


# --- host directories an older disklab named -------------------------------------------------------

# The kinds of a host's stored files, and those whose files name their host (disklab.stored.NAMES_HOST).
KINDS = {"runs": "results", "audits": "audit", "failures": "failure"}


def legacy_dirs(reports: Path) -> list[Path]:
    """Host directories named by the rule before its case suffix (hostnames.legacy_encode) and by no
    host's name now: ``reports/Web1``, where ``Web1``'s files now go to ``reports/Web1%u4``."""
    out = []
    for p in foreign_dirs(reports):
        with contextlib.suppress(ValueError):
            hostnames.legacy_decode(p.name)
            out.append(p)
    return out


def move_legacy_dirs(reports: Path) -> list[str]:
    """Move what :func:`legacy_dirs` hold to each host's directory now; one line for each thing done.

    A directory whose run and audit files all name its own host (every one on a case-sensitive
    filesystem, unless one was moved there by hand) is renamed to the host's name now, whole (rename(2),
    then a directory fsync). Otherwise each file moves alone, linked at its new name (link(2), which never
    replaces a file) and then unlinked here; one whose new name is taken stays, and is named. A run or
    audit file goes to the host it names where the older rule would have put it here (a case-insensitive
    filesystem kept ``Web1`` and ``web1`` in one directory, ``Web1``); one moved here by hand stays (its
    readers name it). Failure records, which name no host, go with the directory's own host unless the
    directory is another host's now too (``web1``'s on a case-insensitive filesystem: they stay). A
    directory left with one host's files only, whose name the filesystem already takes for that host's
    name now, is renamed to it (``Web1`` becomes ``web1``). Every stored file keeps its bytes; none is
    removed or replaced. Call it holding the reports directory's lock.
    """
    said = []
    for old in legacy_dirs(reports):
        host = hostnames.legacy_decode(old.name)
        owners = _owners(old)
        try:
            new = hostnames.host_dir(reports, host)
        except ValueError as exc:  # its name with the case suffix is too long: left, and named
            said.append(f"left {old} as it is: {exc}")
            continue
        if set(owners.values()) <= {host} and not new.exists():
            os.rename(old, new)
            fsync_dir(reports)
            said.append(f"moved the stored files of host {host!r} from {old} to {new} (its name now)")
            continue
        shared = False  # whether this directory is another host's now too (a case-insensitive filesystem)
        for path, owner in sorted(owners.items()):
            try:
                home = hostnames.host_dir(reports, owner)
            except ValueError:
                continue
            if home.exists() and os.path.samefile(home, old):
                shared = True
                continue  # already home: on a case-insensitive filesystem this directory is web1's too
            if not _same(reports / hostnames.legacy_encode(owner), old):
                continue  # the older rule never put it here: moved by hand (its readers name it)
            said += _move_file(path, home / path.parent.name / path.name, owner)
        if not shared:  # failure records name no host: this directory's are its own host's
            for path in files(old, "failures"):
                said += _move_file(path, new / "failures" / path.name, host)
        left = set(_owners(old).values())
        if len(left) == 1:
            (owner,) = left
            with contextlib.suppress(ValueError):
                home = hostnames.host_dir(reports, owner)
                if home.name != old.name and home.exists() and os.path.samefile(home, old):
                    os.rename(old, home)  # the same directory: only the case of its name changes
                    fsync_dir(reports)
                    said.append(f"renamed {old} to {home} (the name of host {owner!r} now)")
        with contextlib.suppress(OSError):  # emptied: no stored file, no report left in it
            old.rmdir()
    return said


def _same(a: Path, b: Path) -> bool:
    return os.path.lexists(a) and os.path.lexists(b) and os.path.samefile(a, b)


def _move_file(path: Path, dest: Path, owner: str) -> list[str]:
    """Link ``path`` at ``dest`` (never over a file there), then unlink it: what was done, in a line."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, dest)
    except FileExistsError:
        return [f"left {path} as it is: {dest} exists already"]
    fsync_dir(dest.parent)
    path.unlink()
    fsync_dir(path.parent)
    with contextlib.suppress(OSError):  # a kind's directory that is now empty goes
        path.parent.rmdir()
    return [f"moved {path} to {dest} (of host {owner!r}, by its name now)"]


def _owners(host_dir: Path) -> dict[Path, str]:
    """Each run and audit file under ``host_dir`` with the host it names (unreadable ones left out)."""
    out = {}
    for kind in ("runs", "audits"):
        for path in files(host_dir, kind):
            with contextlib.suppress(stored.StoredFileError):
                out[path] = stored.read(path, KINDS[kind])["host"]
    return out


def run_key(path: Path) -> tuple[str, int, str]:
    """Sort key of a run file: its timestamp, then its ``-N`` suffix; a name of another shape (a copy a
    user made, ``<id>-a1.json``) sorts by its text and never raises."""
    base, _, n = path.stem.partition("-")
    return base, int(n) if n.isdigit() else 0, n


def has_file(reports: Path, host: str, kind: str, run_id: str) -> bool:
    """Whether ``host`` has a stored file of ``kind`` (runs, audits, failures) for ``run_id``."""
    try:
        return (hostnames.host_dir(reports, host) / kind / f"{run_id}.json").is_file()
    except ValueError:  # a name disklab.hostnames refuses is never stored
        return False


def files(host_dir: Path, kind: str) -> list[Path]:
    """A host's files of ``kind`` (runs, audits, failures), oldest first."""
    return sorted((host_dir / kind).glob("*.json"), key=run_key)


def latest(host_dir: Path, kind: str) -> Path | None:
    """The newest file of ``kind`` for a host."""
    found = files(host_dir, kind)
    return found[-1] if found else None
