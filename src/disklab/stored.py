"""Every file the controller stores, read and written through one path.

Kinds and their current versions are in disklab_host.common.formats (shared
with the host, which writes results and facts). :func:`read` parses a file,
upgrades it one version at a time through :data:`UPDATES` (``update_to_N``
functions), refuses a version newer than this disklab reads, and validates it
against its kind's JSON Schema and its values for sense (disklab.values: a bounded size, no NaN or
infinity, no negative or absurd time, no huge string); :func:`write` stamps the kind and version,
validates, and writes atomically (temp file, fsync, rename, directory fsync).
Any file that is not what its kind says raises :class:`StoredFileError`, whose
message starts with the file's path and says what is wrong in one line.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from disklab import schemas, values
from disklab_host.common import formats, stats
from disklab_host.common.formats import VERSIONS, stamp
from disklab_host.common.fsio import atomic_write_json, atomic_write_text

KINDS = tuple(VERSIONS)


class StoredFileError(ValueError):
    """A stored file that cannot be read as its kind: too large, not JSON, not an object, the wrong kind,
    a newer version, a schema violation, or a value that makes no sense (disklab.values). The message
    names the file."""


# How every reason an upgrade (update_to_N below) writes in place of what an older file did not record
# begins ("not recorded: written before facts version 7 ..."), so disklab.compare can tell a fact the
# older run's format predates from a fact that changed. Anchored: a host's own reason that merely holds
# the words (an import error's text) is not one.
PREDATES = re.compile(r"(?:not [a-z ]+: )?written before (?:results|facts) ")


# --- update_to_N: each upgrades a version N-1 document of its kind in place ----------------------


def _results_update_to_2(doc: dict) -> None:
    doc["lab_code"] = {"unavailable": "written before results recorded the lab code, at results version 1"}


def _results_3_kill_method(doc: dict) -> None:
    """Crash kills before exact stops: progress kills watched the file, time kills used a timer."""
    experiments = doc.get("experiments")
    crash = experiments.get("crash") if isinstance(experiments, dict) else None
    if not isinstance(crash, dict) or crash.get("status") != "ok":
        return
    crash.setdefault("progress_stop_unusable", "this run predates exact stops (results version 2)")
    for mode in (crash.get("modes") or {}).values():
        for kill in (mode.get("kills") or []) if isinstance(mode, dict) else []:
            if not isinstance(kill, dict):
                continue
            kill.setdefault("kill_method", "poll" if kill.get("kill_by") == "progress" else "timer")
            kill.setdefault("stopped_at", None)


def _results_3_powercut_unplaced(doc: dict) -> None:
    """Power-cut recordings from before copies, temp files outside and unplaced calls were recorded.

    Every call of those recordings was placed (an unplaced one refused the save), none had a temp file
    outside the directory (a write outside refused it), and their replay matched the real files.
    """
    experiments = doc.get("experiments")
    section = experiments.get("powercut") if isinstance(experiments, dict) else None
    if not isinstance(section, dict):
        return
    for recipe in section.get("recipes") or ():
        rec = recipe.get("recording") if isinstance(recipe, dict) else None
        if isinstance(rec, dict):
            rec.setdefault("unplaced_calls", [])
            rec.setdefault("judged_on", "every recorded call")
            rec.setdefault("outside_files", [])
            rec.setdefault("replay_differs", [])


NOT_RECORDED_V2 = "not recorded: written before results version 3, which added the I/O record"
# Why a part of an upgraded cache proof is not_recorded (results 3 added the three-part proof), as the
# proof's cell says it.
PROOF_PART_NOT_RECORDED = "run from before results 3"


def _results_3_io_record(doc: dict) -> None:
    """Mark what results 3 added as not recorded, so an older run still renders: each load sample gets a
    cache_proof saying only residency before a cold call was checked, and the write-path and crash
    sections a layers field saying the layers were not counted."""
    experiments = doc.get("experiments")
    if not isinstance(experiments, dict):
        return
    load = experiments.get("load")
    if isinstance(load, dict) and isinstance(load.get("samples"), list):
        for sample in load["samples"]:
            if isinstance(sample, dict) and "cache_proof" not in sample:
                sample["cache_proof"] = _old_cache_proof(sample)
    for name in ("write_buffering", "big_write", "crash"):
        section = experiments.get(name)
        if isinstance(section, dict) and section.get("status") == "ok":
            section.setdefault("layers", {"unavailable": NOT_RECORDED_V2})


def _old_cache_proof(sample: dict) -> dict:
    """The cache_proof of a results-2 load sample: its cache_state as it was judged then."""
    state = sample.get("cache_state")
    requested = sample.get("cache_state_requested", "warm" if state == "warm" else "cold")
    verdict = {"cold": "cold", "cold_unverified": "cold_unproven", "warm": "warm"}.get(state, "cold_unproven")
    not_recorded = {"status": "not_recorded", "why": PROOF_PART_NOT_RECORDED}
    if requested == "warm":
        parts = {"residency": not_recorded}  # warm residency was not checked before results 3
    else:
        residency = {"status": "pass" if verdict == "cold" else "fail", "why": "mincore, before results 3"}
        parts = {"residency": residency, "device_reads": not_recorded, "major_faults": not_recorded}
    return {
        "verdict": verdict,
        "requested": requested,
        "failed": [] if verdict in ("cold", "warm") else ["residency"],
        "unchecked": [k for k, v in parts.items() if v["status"] == "not_recorded"],
        "stage": None,
        "recorded": False,
        "note": NOT_RECORDED_V2
        + ("; a cold sample was checked by residency alone" if requested == "cold" else ""),
        "parts": parts,
    }


def _results_update_to_3(doc: dict) -> None:
    _results_3_kill_method(doc)
    _results_3_powercut_unplaced(doc)
    _results_3_io_record(doc)


# What an older run holds in place of the run's own workbench facts (results version 4).
NO_RUN_WORKBENCH = (
    "not recorded: written before results version 4, whose lab runner records its own workbench's facts; "
    "the figures are read against the audit's"
)


# What an older run's big_write says beside the durable call it did not name (recorded during results 3).
DURABLE_CALL_UNRECORDED = (
    "a run from before disklab recorded the durable call, when fsync was the only sync timed"
)


def _results_4_big_write_call(doc: dict) -> None:
    """big_write's own ``system`` and ``durable_call`` (recorded together during results 3): the run's
    facts' host.system (the host the step ran on), where the facts name it, and plain fsync, the one
    sync those runs timed, with ``durable_call_unrecorded`` saying the run did not name it."""
    experiments = doc.get("experiments")
    big = experiments.get("big_write") if isinstance(experiments, dict) else None
    if not isinstance(big, dict) or big.get("status") != "ok":
        return
    facts = doc.get("facts") if isinstance(doc.get("facts"), dict) else {}
    system = (facts.get("host") or {}).get("system") if isinstance(facts.get("host"), dict) else None
    if isinstance(system, str):
        big.setdefault("system", system)
    if "durable_call" not in big:
        big.update(durable_call="fsync", durable_call_unrecorded=DURABLE_CALL_UNRECORDED)


# The files a user model's samples load (steps/load.py user_section).
USER_FILES = ("user_safetensors", "user_pt")


def _results_4_user_device_placed(doc: dict) -> None:
    """The user model's own ``device_placed`` (recorded during results 3), by the rule the host records it
    with (steps/load.py user_section): the first of its samples' device_placed stages that is not ok,
    else ok."""
    experiments = doc.get("experiments")
    load = experiments.get("load") if isinstance(experiments, dict) else None
    user = load.get("user_model") if isinstance(load, dict) and load.get("status") == "ok" else None
    if not isinstance(user, dict) or user.get("status") != "ok" or "device_placed" in user:
        return
    mine = [s for s in load.get("samples") or [] if isinstance(s, dict) and s.get("file") in USER_FILES]
    stages = [(s.get("stages") or {}).get("device_placed") for s in mine]
    refused = (st for st in stages if isinstance(st, dict) and st.get("status") != "ok")
    user["device_placed"] = next(refused, None) or {"status": "ok"}


def _results_update_to_4(doc: dict) -> None:
    """The run's own workbench facts, as not recorded: the report reads the audit's, as it did then;
    big_write's system and durable call, and the user model's device_placed, as that run made them."""
    doc.setdefault("workbench", {"unavailable": NO_RUN_WORKBENCH})
    _results_4_big_write_call(doc)
    _results_4_user_device_placed(doc)


# What an older run's load section says of the first response (results version 5 added the stage).
FIRST_RESPONSE_NOT_MEASURED = (
    "not measured in this run: written before results version 5, which added the first response (one "
    "forward pass of a fixed prompt) and made the big file a model"
)


# What an older run's ceiling section holds in place of its parallel read (added during results 4).
PARALLEL_NOT_IN_RUN = "this run's ceiling step predates the parallel ceiling"

# What an older run's load section holds in place of big_model (the big file became a model at results 5).
BIG_FILE_NOT_A_MODEL = "a run from before results version 5"


def _results_5_user_model(user: dict) -> None:
    """The user model's ``format`` and ``made`` (recorded since during results 4): before them the user's
    files were safetensors only, and the .pt made from them was ``pt_path`` (with ``pt_size_bytes``)."""
    user.setdefault("format", "safetensors")
    if "made" not in user and "pt_path" in user and "pt_size_bytes" in user:
        made = {"status": "ok", "file": "user_pt", "path": user["pt_path"]}
        user["made"] = {**made, "size_bytes": user["pt_size_bytes"]}
    user.setdefault("made", {"status": "not_run", "reason": "no file was made from it"})


def _results_update_to_5(doc: dict) -> None:
    """The ceiling's parallel read, as not in the run; the first response, as not measured: the load
    section's and its user model's (when it ran); the big file, as not a model; the user model's format
    and made file, as results 4 recorded them."""
    experiments = doc.get("experiments")
    ceiling = experiments.get("ceiling") if isinstance(experiments, dict) else None
    if isinstance(ceiling, dict) and ceiling.get("status") == "ok":
        ceiling.setdefault("parallel", {"unavailable": PARALLEL_NOT_IN_RUN})
    load = experiments.get("load") if isinstance(experiments, dict) else None
    if not isinstance(load, dict) or load.get("status") != "ok":
        return
    load.setdefault("first_response", {"status": "not_run", "reason": FIRST_RESPONSE_NOT_MEASURED})
    load.setdefault("big_model", {"unavailable": BIG_FILE_NOT_A_MODEL})
    user = load.get("user_model")
    if isinstance(user, dict) and user.get("status") == "ok":
        user.setdefault("first_response", {"status": "not_run", "reason": FIRST_RESPONSE_NOT_MEASURED})
        _results_5_user_model(user)


# What an older run holds in place of each noise record and time split (results version 6 added them).
NOISE_NOT_RECORDED = (
    "not recorded: written before results version 6, which records what else the host did during each "
    "sample and where its time went"
)
# fsync_bench's rounds of an older run: it wrote each mode in one go, so its rounds are consecutive blocks.
FSYNC_ROUNDS_UPGRADED = (
    "consecutive blocks of a run from before results version 6, which wrote each mode's blocks in one go "
    "(its rounds did not take turns across the modes)"
)


# How a page names a run whose samples carry no noise record: every such run was upgraded from before 6.
NOISE_NOT_RECORDED_RUN = "a run from before results version 6"


def _not_recorded() -> dict:
    return {"unavailable": NOISE_NOT_RECORDED}


def _rounds_not_recorded(first_counts: list[tuple[int, int]], io_records: list | None = None) -> list[dict]:
    return [
        {
            "first": first,
            "count": count,
            "io_record": (io_records[i] if io_records and i < len(io_records) else _not_recorded()),
            "noise": _not_recorded(),
            "time_split": _not_recorded(),
        }
        for i, (first, count) in enumerate(first_counts)
    ]


def _results_update_to_6(doc: dict) -> None:
    """Every noise record and time split as not recorded; rounds where the current format has them."""
    doc.setdefault("noise_context", _not_recorded())
    exps = doc.get("experiments")
    if not isinstance(exps, dict):
        return
    fsync = exps.get("fsync_bench")
    if isinstance(fsync, dict) and fsync.get("status") == "ok" and isinstance(fsync.get("modes"), dict):
        for mode in fsync["modes"].values():
            samples = mode.get("samples_ns") if isinstance(mode, dict) else None
            if mode.get("status") != "ok" or not isinstance(samples, list) or not samples:
                continue
            sizes = stats.round_sizes(len(samples))  # the rule the current runs follow
            firsts = [sum(sizes[:i]) for i in range(len(sizes))]
            mode.setdefault("rounds", _rounds_not_recorded(list(zip(firsts, sizes, strict=True))))
            for r in mode["rounds"]:
                r["io_record"] = {"unavailable": f"no I/O record per round: {FSYNC_ROUNDS_UPGRADED}"}
            mode.setdefault("rounds_from", FSYNC_ROUNDS_UPGRADED)
    wb = exps.get("write_buffering")
    if isinstance(wb, dict) and wb.get("status") == "ok" and isinstance(wb.get("modes"), dict):
        for mode in wb["modes"].values():
            if not isinstance(mode, dict) or "rounds" in mode:
                continue
            n = len(mode.get("per_call_samples_ns") or [])
            mode["rounds"] = _rounds_not_recorded([(i, 1) for i in range(n)], mode.pop("io_records", None))
    big = exps.get("big_write")
    if isinstance(big, dict) and big.get("status") == "ok" and "rounds" not in big:
        n = len(big.get("write_samples_s") or [])
        big["rounds"] = _rounds_not_recorded([(i, 1) for i in range(n)])
    ceiling = exps.get("ceiling")
    if isinstance(ceiling, dict) and ceiling.get("status") == "ok":
        parallel = ceiling.get("parallel") if isinstance(ceiling.get("parallel"), dict) else {}
        for runs in (ceiling.get("cold_runs"), ceiling.get("warm_runs"), parallel.get("cold_runs")):
            for run in runs if isinstance(runs, list) else []:
                if isinstance(run, dict):
                    run.setdefault("noise", _not_recorded())
                    run.setdefault("time_split", _not_recorded())
    load = exps.get("load")
    if isinstance(load, dict) and load.get("status") == "ok":
        for sample in load.get("samples") or []:
            if isinstance(sample, dict):  # "held" since during results 5; before, each probe opened the file
                sample.setdefault("residency_probe", "opened")
            for stage in (sample.get("stages") or {}).values() if isinstance(sample, dict) else []:
                if isinstance(stage, dict) and stage.get("status") == "ok":
                    stage.setdefault("noise", _not_recorded())
                    stage.setdefault("time_split", _not_recorded())


def _audit_update_to_2(doc: dict) -> None:
    doc.pop("kind", None)


def _run_kind_update_to_2(doc: dict) -> None:
    if "kind" in doc:
        doc["run_kind"] = doc.pop("kind")


def _facts_update_to_2(doc: dict) -> None:
    doc.pop("facts_schema_version", None)


def _flag_to_3(old: object) -> object:
    """A version-2 flag {set: true | false | {unavailable: reason}, why} in its three-state form.

    Anything else is returned as it is, for the schema check to name.
    """
    if not isinstance(old, dict) or "set" not in old:
        return old
    value, why = old["set"], old.get("why")
    if value is True or value is False:
        return {"state": "set" if value else "not_set", "why": why}
    if isinstance(value, dict) and set(value) == {"unavailable"}:
        return {"state": "unknown", "why": why, "reason": value["unavailable"]}
    return old


def _facts_update_to_3(doc: dict) -> None:
    """Three-state flags; workbench.path is requested_path, and it existed (older audits refused a
    missing workbench), so it is also the audited path."""
    workbench = doc.get("workbench")
    if isinstance(workbench, dict):
        if "path" in workbench:
            path = workbench.pop("path")
            workbench.update(requested_path=path, audited_path=path, exists=True, created=False, note=None)
        flags = workbench.get("flags")
        if isinstance(flags, dict):
            for name in list(flags):
                flags[name] = _flag_to_3(flags[name])
    gpu = doc.get("gpu")
    if isinstance(gpu, dict) and "cpu_only_torch_on_gpu_host" in gpu:
        gpu["cpu_only_torch_on_gpu_host"] = _flag_to_3(gpu["cpu_only_torch_on_gpu_host"])


# The device facts facts version 4 added (audit.collect.durability_facts).
DURABILITY_FACTS = ("model", "vendor", "write_cache", "fua", "pcie_link")


def _facts_update_to_4(doc: dict) -> None:
    """The durability facts of the workbench device, as not audited (older audits did not read them)."""
    workbench = doc.get("workbench")
    device = workbench.get("device") if isinstance(workbench, dict) else None
    if isinstance(device, dict) and "unavailable" not in device:
        for key in DURABILITY_FACTS:
            device.setdefault(key, {"unavailable": "not audited: written before facts version 4"})


def _facts_5_versions_source(doc: dict) -> None:
    """Where the versions came from, as unknown: older audits always probed, but did not say so."""
    doc.setdefault(
        "versions_source",
        {"from": "unknown", "probed_utc": None, "record": None, "why": "written before facts version 5"},
    )


def _facts_update_to_5(doc: dict) -> None:
    _facts_5_versions_source(doc)


def _facts_update_to_6(doc: dict) -> None:
    """The quiet-host checks, as not read: older audits did not make them."""
    doc.setdefault("quiet", {"unavailable": "not checked: written before facts version 6"})


def _facts_update_to_7(doc: dict) -> None:
    """The venv's packages and lock, as not recorded: older audits kept torch, safetensors and numpy only."""
    versions = doc.get("versions")
    if isinstance(versions, dict):
        for key in ("packages", "lock"):
            versions.setdefault(key, {"unavailable": "not recorded: written before facts version 7"})


def _nothing(doc: dict) -> None:
    """An update that only stamps the kind and version (the kind had none before)."""


UPDATES: dict[str, dict[int, Callable[[dict], None]]] = {
    "results": {
        2: _results_update_to_2,
        3: _results_update_to_3,
        4: _results_update_to_4,
        5: _results_update_to_5,
        6: _results_update_to_6,
    },
    "facts": {
        2: _facts_update_to_2,
        3: _facts_update_to_3,
        4: _facts_update_to_4,
        5: _facts_update_to_5,
        6: _facts_update_to_6,
        7: _facts_update_to_7,
    },
    "audit": {2: _audit_update_to_2},
    "failure": {2: _run_kind_update_to_2},
    "run_record": {2: _run_kind_update_to_2},
    "render_stamp": {2: _nothing},
    "together": {},
}

# Kinds that hold facts: their facts carry a version of their own and are upgraded by the facts chain.
_HOLDS_FACTS = ("results", "audit")


def version_of(doc: dict, kind: str) -> int:
    """The version a document of ``kind`` was written at (1 for a file from before its kind had one).

    Raises StoredFileError (without a path) for another kind's file or a version that is not an integer.
    """
    found = doc.get("file_kind")
    if found is not None and found != kind:
        raise StoredFileError(f"is a {found!r} file, not {kind!r}")
    if "schema_version" in doc:
        version = doc["schema_version"]
    elif kind == "facts" and "facts_schema_version" in doc:
        version = doc["facts_schema_version"]
    else:
        version = 1
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise StoredFileError(f"schema_version must be an integer >= 1, got {version!r}")
    return version


def upgrade(doc: dict, kind: str) -> dict:
    """Bring ``doc`` (in place) to the current version of ``kind``; returns it.

    Raises StoredFileError (without a path) for a newer version than this disklab reads.
    """
    if kind not in VERSIONS:
        raise ValueError(f"file kind must be one of {sorted(VERSIONS)}, got {kind!r}")
    version, current = version_of(doc, kind), VERSIONS[kind]
    if version > current:
        raise StoredFileError(
            f"{kind} version {version} is newer than this disklab reads ({current}): upgrade disklab"
        )
    if kind == "results" and version < current:
        doc["stored_schema_version"] = version  # what the file holds; the report names it (not stored)
    while version < current:
        version += 1
        UPDATES[kind][version](doc)  # update_to_<version>
        doc["file_kind"], doc["schema_version"] = kind, version
    doc["file_kind"] = kind
    if kind in _HOLDS_FACTS and isinstance(doc.get("facts"), dict):
        upgrade(doc["facts"], "facts")
    return doc


def _too_large(size: int) -> str:
    mib = values.MAX_FILE_BYTES >> 20
    return f"is {size / (1 << 20):,.1f} MiB, past the {mib} MiB a stored file may hold: not read"


def parse(data: bytes, kind: str, *, check: bool = True) -> dict:
    """A stored file's bytes as an upgraded, validated ``kind`` document; StoredFileError, no path.

    Refuses bytes past :data:`disklab.values.MAX_FILE_BYTES`; then checks the values
    (:func:`disklab.values.first_error`: NaN, infinities, times, sizes, string lengths; before the
    upgrade or the schema check copies anything) and the schema. ``check=False`` skips only those two
    checks, for bytes this same code found valid before (see :func:`read`).
    """
    if len(data) > values.MAX_FILE_BYTES:
        raise StoredFileError(_too_large(len(data)))
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=values.NotANumber)
    except UnicodeDecodeError as exc:
        raise StoredFileError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise StoredFileError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits
        raise StoredFileError(f"not JSON disklab reads ({exc})") from None
    except RecursionError:
        raise StoredFileError(f"not JSON disklab reads (nested past {values.MAX_DEPTH} levels)") from None
    if not isinstance(doc, dict):
        raise StoredFileError(f"holds a JSON {type(doc).__name__}, not a {kind} object")
    error = values.first_error(doc) if check else None
    if error:
        raise StoredFileError(error)
    upgrade(doc, kind)
    error = schemas.first_error(kind, doc) if check else None
    if error:
        raise StoredFileError(error)
    return doc


@functools.cache
def _checker_digest() -> bytes:
    """What decides whether bytes are valid: the shipped schemas and the reading code (this module's
    updates, disklab.schemas' and disklab.values' checks, the host package's versions)."""
    h = hashlib.sha256()
    base = Path(schemas.__file__).parent / "schema"
    code = (Path(__file__), Path(schemas.__file__), Path(values.__file__), Path(formats.__file__))
    for path in (*sorted(base.rglob("*.json")), *code):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.digest()


def validity_key(data: bytes, kind: str) -> str:
    """The digest under which ``data`` as a ``kind`` file is remembered as valid (see :func:`read`)."""
    return hashlib.sha256(_checker_digest() + kind.encode() + b"\0" + data).hexdigest()


# Beside a host's stored files, the validity keys of those found valid, one a line: disklab.store adds
# each file it stores, a render each file it checks, and :func:`read` skips the schema check of those.
VALID_FILE = ".validated.sha256"
# Kinds whose files name their host (``host``): such a file is that host's, wherever it lies.
NAMES_HOST = ("results", "audit")
# The directories of a host's stored files, each named <run_id>.json (disklab.store).
STORED_DIRS = ("runs", "audits")


def read(
    path: str | Path, kind: str, *, known_valid: set[str] | None = None, host: str | None = None
) -> dict:
    """Read, upgrade and validate one stored file of ``kind``. Raises StoredFileError naming ``path``.

    With ``known_valid`` (a set of :func:`validity_key` digests the caller keeps): bytes whose key is in
    it skip the schema check (the same bytes, schemas and code passed it before), and the key of bytes
    that pass is added to it. Stored runs never change, so re-rendering them need not validate again.
    With ``host`` (the host whose directory, or staged file name, ``path`` is: disklab.store), a file of
    a kind in :data:`NAMES_HOST` that names another host is refused, naming both: a run moved or copied
    from another host's ``runs/`` is not this host's; and one in its ``runs/`` or ``audits/`` whose name is
    not its run id is refused too: a copy under another name is not a second run.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            # a larger file is refused unread; one that grows while it is read, after one byte more
            data = f.read(values.MAX_FILE_BYTES + 1) if size <= values.MAX_FILE_BYTES else b""
            size = max(size, len(data))
    except OSError as exc:
        raise StoredFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if size > values.MAX_FILE_BYTES:
        raise StoredFileError(f"{path}: {kind} file {_too_large(size)}")
    key = validity_key(data, kind) if known_valid is not None else None
    try:
        doc = parse(data, kind, check=key is None or key not in known_valid)
    except StoredFileError as exc:
        raise StoredFileError(f"{path}: {kind} file {exc}") from None
    if key is not None:
        known_valid.add(key)
    if host is not None and kind in NAMES_HOST and doc.get("host") != host:
        raise StoredFileError(
            f"{path}: {kind} file of host {doc.get('host')!r}, found among the files of host {host!r}: a "
            f"file moved or copied from another host's directory is not this host's (left out, as it is)"
        )
    run_id = doc.get("run_id")
    if host is not None and kind in NAMES_HOST and path.parent.name in STORED_DIRS and run_id != path.stem:
        raise StoredFileError(
            f"{path}: {kind} file of run {run_id!r}, stored under the name {path.stem!r}: a copy under "
            "another name is not another run (left out, as it is)"
        )
    return doc


def write(
    path: str | Path,
    kind: str,
    doc: dict,
    *,
    overwrite: bool = False,
    known_valid: set[str] | None = None,
    read_just_now: bool = False,
) -> Path:
    """Stamp ``doc`` with ``kind`` and its version, validate it, and write it atomically.

    With ``overwrite=False`` (stored runs, audits, failures, run records) an
    existing file is never replaced: FileExistsError. Raises StoredFileError
    when the document does not match its kind's schema or holds a value :func:`read` would refuse.
    With ``known_valid``: the :func:`validity_key` of the bytes written is added to it.
    ``read_just_now``: ``doc`` is what :func:`read` returned for a ``kind`` file, unchanged, so it passed
    these same checks already (disklab.store storing a fetched run): they are not run a second time.
    """
    doc = stamp(kind, doc)
    error = None if read_just_now else values.first_error(doc) or schemas.first_error(kind, doc)
    if error:
        raise StoredFileError(f"{path}: refusing to write a {kind} file that {error}")
    written = atomic_write_json(path, doc, overwrite=overwrite)
    if known_valid is not None:
        known_valid.add(validity_key(written.read_bytes(), kind))
    return written


def known_valid(host_dir: Path) -> set[str]:
    """The validity keys of the host's stored files found valid (:data:`VALID_FILE`; empty without one)."""
    try:
        return set((host_dir / VALID_FILE).read_text().split())
    except OSError:
        return set()


def remember_valid(host_dir: Path, valid: set[str]) -> None:
    """Write the host's :data:`VALID_FILE`: a cache, written without fsync, and not at all where it cannot
    be (a full disk, a directory in its place): a lost key costs one schema check, never a stored run."""
    with contextlib.suppress(OSError):
        atomic_write_text(host_dir / VALID_FILE, "".join(f"{k}\n" for k in sorted(valid)), durable=False)
