"""The kinds of file disklab stores, and the version each is written at now.

Every stored JSON file carries ``file_kind`` (one of :data:`VERSIONS`) and an
integer ``schema_version``. The controller reads every kind through one path
(``disklab.stored.read``), which upgrades an older file one version at a time
(``update_to_N``) and refuses a newer one; it writes every kind through
``disklab.stored.write``. The host writes two kinds itself (results and facts)
with :func:`stamp`, so the numbers live here, once, for both sides.

Version history (a file written before its kind carried a version is version 1):

results
  1: facts, sizes, experiments keyed by step name, each with status and step_wall_s.
  2: file_kind; lab_code (the disklab version and a digest of each step's code);
     facts at their version 2.
  3: crash kills say how they were placed: kill_method (strace_stop, poll, timer) and stopped_at (the
     write call a strace stop came after), and the section's progress_stop_unusable says why not;
     powercut recipes' recordings carry unplaced_calls, judged_on, outside_files and replay_differs
     (older recordings: none, "every recorded call", none, none);
     I/O records: each load sample's stages carry io (common/iorecord.py) and each sample its
     cache_proof (the three-part cold proof, the warm check; cache_state may be warm_unverified); the
     write-path sections carry io records and layers (dirty and writeback pages counted); the ceiling
     step; crash.layers.
  4: workbench: the filesystem, mount and device of the workbench the steps wrote to, collected by the
     lab runner itself (audit.collect.collect_workbench) where it measured, beside the audit's facts
     (older runs: unavailable, their figures read against the audit's facts); a failed step's
     error_raised (the exception, when error names its cause instead: a full workbench).
  5: load: the big file is a DecoderLM state dict of the profile's size (sizes.load_big_mib replaces
     load_big_tensors; the section's big_model states its config, parameters and bytes), and every big
     method that yields the whole state dict populates it by meta + assign; the first_response stage (one
     forward pass of a fixed prompt: each sample's next_token_id and next_token_margin, each cell's
     next_token_ids, the section's first_response saying whether they agree, and the user model's); the
     stages in the order loader_return, module_populated, device_placed, first_response, all_touched
     (all_touched now follows the forward pass; before, it came before device_placed). Older runs: the
     section's and the user model's first_response not_run, saying the stage was not measured.
  6: the noise of every sample: each timed interval carries a noise record (common/noise.py: pressure
     stall, steal, swap, runnable tasks) and a time split (common/timesplit.py: CPU, blocked on I/O,
     waiting to run, the rest) beside its I/O record: each load sample's stages, each ceiling read,
     and rounds (``{first, count, io_record, noise, time_split}``) in fsync_bench's modes (its measured
     blocks in rounds that take turns across the modes), write_buffering's modes (one per repeat; its
     io_records move into them) and big_write; the run's noise_context (governor, turbo, swap, delay
     accounting, which the runner turns on for its run where it may act as root). Older runs: every
     noise record and time split unavailable ("not recorded"), fsync_bench's rounds made from
     consecutive blocks (those runs wrote each mode in one go), and noise_context unavailable.
facts (a host's audit; host.json on the host, inside every results and audit file)
  1: facts_schema_version 1.
  2: file_kind and schema_version replace facts_schema_version.
  3: flags in three states, {state: set | not_set | unknown, why, reason (when unknown)}, where
     {set: bool | unavailable, why} read an unknown flag as set; workbench.path becomes
     requested_path, with audited_path, exists, created and note (a missing workbench is
     audited through its nearest existing parent).
  4: workbench.device gains model, vendor, write_cache (queue/write_cache), fua and pcie_link
     (NVMe link speed and width), the facts that bound durability and a cold read.
  5: versions_source: whether the versions came from the probe kept in the venv's record
     (disklab-venv.json, trusted while its fingerprint matches) or were probed by this audit.
  6: quiet: how quiet the host is for measuring (audit/quiet.py: governor, turbo, swap, load, busy
     processes, pressure, steal, delay accounting, each ok, advice or unknown); older audits: unavailable.
  7: versions.packages (every distribution in the lab venv at its version) and versions.lock (the hash
     lock it was installed from, disklab_host.lock, or why none); older audits: both unavailable.
audit (reports/<host>/audits/<run_id>.json)
  1: schema_version 1 (the results' number) and kind "audit".
  2: file_kind replaces kind; its own version.
failure (reports/<host>/failures/<run_id>.json)
  1: no version; kind was the run's kind ("runs" or "audits").
  2: file_kind, schema_version; kind renamed run_kind.
run_record (reports/.runs/<run_id>.json)
  1: no version; kind was the run's kind.
  2: file_kind, schema_version; kind renamed run_kind.
render_stamp (reports/<host>/.rendered.json)
  1: no version.
  2: file_kind, schema_version.
together (reports/.together/<run_id>.json: a together run, disklab.togetherrun)
  1: clients, each host's status, the settings, the storage server's cache state, each client's workbench
     and its cold-start storm rounds (disklab.storm).
"""

from __future__ import annotations

VERSIONS: dict[str, int] = {
    "results": 6,
    "facts": 7,
    "audit": 2,
    "failure": 2,
    "run_record": 2,
    "render_stamp": 2,
    "together": 1,
}


def stamp(kind: str, doc: dict) -> dict:
    """``doc`` with ``file_kind`` and the current ``schema_version`` of ``kind`` first.

    Raises ValueError for a kind not in :data:`VERSIONS`.
    """
    if kind not in VERSIONS:
        raise ValueError(f"file kind must be one of {sorted(VERSIONS)}, got {kind!r}")
    rest = {k: v for k, v in doc.items() if k not in ("file_kind", "schema_version")}
    return {"file_kind": kind, "schema_version": VERSIONS[kind], **rest}


# What disklab prints or exports for other programs (not stored files): each JSON carries ``kind`` and
# ``schema_version``, and a JSON Schema ``<kind>.schema.json`` ships in the controller package
# (disklab/schema; docs/outputs.md). A change a consumer must handle raises the number.
#   export 1: {columns, rows} of `disklab export --format json`; export_row 1: one row, and each line of
#   --format jsonl; compare 1: `disklab compare --json` (results_schema_version: the runs' own);
#   powercut 1: `disklab powercut --json OUT`; history 1: `disklab history --json`; runs 1: `disklab runs
#   --json`. compare 2: each figure judged by disklab.verdicts (verdict changed | no change | inconclusive |
#   disturbed, ratio with its interval, p, q, n, units, noise; level, fdr, min_effects, context) in place of
#   the range rule's verdict, p_value and judged_by. history 2: each point's since_previous verdict.
#   export 2, export_row 2: each row's run context (kernel, fstype, device, profile, torch,
#   disklab_version) and its noise (measure, units, n_units, n_disturbed, noise).
OUTPUT_VERSIONS: dict[str, int] = {
    "export": 2,
    "export_row": 2,
    "compare": 2,
    "powercut": 1,
    "history": 2,
    "runs": 1,
}


def output(kind: str, body: dict) -> dict:
    """``body`` with ``kind`` and its ``schema_version`` (:data:`OUTPUT_VERSIONS`) first."""
    if kind not in OUTPUT_VERSIONS:
        raise ValueError(f"output kind must be one of {sorted(OUTPUT_VERSIONS)}, got {kind!r}")
    rest = {k: v for k, v in body.items() if k not in ("kind", "schema_version")}
    return {"kind": kind, "schema_version": OUTPUT_VERSIONS[kind], **rest}
