"""The load lab step: how fast weights load, cold and warm, at each readiness stage.

For every cell (file, method, populate mode, cache state) and every repeat,
the step sets the cache state of the file (cache.evict for cold, cache.warm
for warm), then runs load_one.py in a fresh process with sys.executable, one
measurement per process (the lesson, Build It). Repeats are interleaved
across cells so slow drift on the host hits every cell alike.

Every sample carries its I/O record (common.iorecord, per stage, read inside
load_one.py) and its ``cache_proof`` (loadlab.proof): a cold run is cold only
when its file was at most 1 % resident just before the load call (cachestat,
else mincore, with cache.residency_trust), the device delivered at least the
bytes the stage touched, and a mapped method took major faults; a run that
fails a part is recorded as ``cold_unverified`` with the part named, and is
never reported as cold. A warm run is ``warm`` only at 99 % residency or more
just before the call, else ``warm_unverified``.

Cells: the big file, a DecoderLM of the profile's size (prep.py: model.big_config
of ``load_big_mib``), with torch.load, torch.load-mmap (the .pt), load_file,
one-tensor and load_file+willneed (the .safetensors); every one of them that
yields the whole state dict (all but one-tensor: common.stages.PARTIAL_METHODS)
populates the big DecoderLM by meta + assign (:data:`BIG_POPULATE`) and runs the
first response, so each reaches every readiness stage. The small model with
torch.load (.pt) and load_file (.safetensors), each populating a DecoderLM by
copy and by assign, answers copy against assign. With the setting ``load_model`` (prep.user_model), the
user's own files (one file or every shard, in place, never changed) and the
other format made from them in the workbench (prep.py) get the same cells:
torch.load and torch.load-mmap on the .pt (``user_pt``: the user's own
checkpoint or pytorch_model.bin files, else ``user.pt`` made from their
safetensors), load_file and one-tensor on the .safetensors (``user_safetensors``:
theirs, else ``user.safetensors`` made from their checkpoint's state dict). A
training checkpoint's weights are taken from under their key (``--state-key``).
torch.load-mmap on a legacy (pre-1.6) torch.save file is not run, with
PyTorch's own refusal as the reason (:func:`user_cells_not_run`). When
config.json describes a model DecoderLM can hold, torch.load and load_file also
populate a DecoderLM by copy and by assign. A cold method that must copy the
file (macOS coldcopy_nocache) copies it into the workbench's ``cold_copies/``
and the copy is what is timed (``timed_path``); it is deleted after its
measurement. Raw samples are kept; cells summarise them as median, min and max
(labcommon.spread).

With the setting ``load_loaders`` (loadlab.loaders), each production loader that
can run in this lab venv (:func:`loader_plan`: installed, importable, and with a
GPU where it needs one; else not_run with the reason) is a load method like the
others: on the big file (``big_safetensors``, or tensorizer's ``big_tensors``
that prep writes) cold and warm, and populating the small model by copy and by
assign, with the same eviction, proofs, I/O record and stages. The section's
``loaders`` says what was asked for, how each ran or why not, its version, pins
and knobs; each of its samples carries ``loader`` and ``read_path``.
"""

from __future__ import annotations

import json
import platform
import subprocess
import time
from pathlib import Path

from ..cache import pagecache as cache
from ..common.child import child_env, module_argv
from ..common.facts import is_unavailable, not_run, require_positive, unavailable
from ..common.stages import PARTIAL_METHODS, STAGES
from ..common.stats import median_interval, percentile, spread
from ..common.units import MIB
from ..loadlab import loaders, workers
from ..loadlab.proof import CACHE_STATE, cache_proof
from ..loadlab.usermodel import weights_note

LOAD_ONE = "disklab_host.loadlab.load_one"
CACHE_STATES = ("cold", "warm")
# (manifest file key, load_one method) for the big file; a method that yields the whole state dict also
# populates the big DecoderLM (BIG_MODEL, BIG_POPULATE) and runs the first response.
BIG_CELLS = (
    ("big_pt", "torch.load"),
    ("big_pt", "torch.load-mmap"),
    ("big_safetensors", "load_file"),
    ("big_safetensors", "one-tensor"),
    ("big_safetensors", "load_file+willneed"),
)
BIG_MODEL = "big"  # the model name of the big file's cells; its DecoderConfig travels as --decoder-config
# meta + load_state_dict(assign=True): the module's parameters are the loader's own tensors, so a mapped
# loader's pages stay unread until the forward pass needs them (what first_response's residency shows), and
# no second copy of the file is made (copy would read every mapped page at module_populated, and hold the
# weights twice). Copy against assign is the small model's question.
BIG_POPULATE = "assign"
# (manifest file key, load_one method) for the small model, each run with both populate modes.
SMALL_CELLS = (("small_pt", "torch.load"), ("small_safetensors", "load_file"))
POPULATE = ("copy", "assign")
# (manifest file key, load_one method) for the user's model (setting load_model), and those that populate.
USER_CELLS = (
    ("user_pt", "torch.load"),
    ("user_pt", "torch.load-mmap"),
    ("user_safetensors", "load_file"),
    ("user_safetensors", "one-tensor"),
)
USER_MODEL_CELLS = (("user_pt", "torch.load"), ("user_safetensors", "load_file"))
USER_MODEL = "user"  # the model name of the user's cells; its DecoderConfig travels as --decoder-config
COLD_COPIES = "cold_copies"  # under the step's workdir: where a cold method's copy is made and timed
RUN_TIMEOUT_S = 1800
# The quick profile skips cells whose answer the lesson does not ask for, to stay within
# about 3 minutes on 2 cores (each cell costs a fresh process that imports torch, ~1 s, and since results
# version 5 each big-file cell also runs a forward pass of the 256 MiB model, ~0.5 s):
# one-tensor and load_file+willneed are about cold residency and the cold mmap gap, and the
# tiny model's 6 MiB fits in one readahead window, so only copy against assign matters there, and it is
# asked once, of load_file (mapped pages kept by assign, or copied): torch.load's .pt is the full profile's.
# Each entry: (a method, "module" for the small model or a small file's key; the cache state, None for
# both; the reason the report gives).
QUICK_SKIPS = (
    (
        "one-tensor",
        "warm",
        "one-tensor is measured cold only in the quick profile: its question is cold residency",
    ),
    (
        "load_file+willneed",
        "warm",
        "load_file+willneed is measured cold only in the quick profile: the hint targets the cold mmap gap",
    ),
    (
        "module",
        "cold",
        "the small model is measured warm only in the quick profile: the tiny model fits in one readahead "
        "window, so its question is copy against assign",
    ),
    (
        "small_pt",
        None,
        "the small model's .pt (torch.load into a module by copy and by assign) is measured in the full "
        "profile only: the quick profile asks copy against assign once, of load_file on small.safetensors",
    ),
)


def skipped(cell: dict, state: str, profile: str | None) -> str | None:
    """The reason this cell × cache state is not measured in ``profile``, or None when it is."""
    if profile != "quick":
        return None
    kinds = ("module", cell["file"]) if cell["file"].startswith("small") else (cell["method"],)
    for what, skip_state, reason in QUICK_SKIPS:
        if what in kinds and skip_state in (state, None):
            return reason
    return None


def schedule(plan: list[dict], profile: str | None, repeats: int) -> list[tuple[int, dict, str]]:
    """What :func:`measure` measures, in its order: ``(repeat, cell, cache state)`` for each repeat, each
    cell of ``plan`` (:func:`cell_plan`) and each of :data:`CACHE_STATES`, leaving out what ``profile``
    skips (:func:`skipped`). Repeats are interleaved across cells, so slow drift hits every cell alike."""
    return [
        (rep, cell, state)
        for rep in range(repeats)
        for cell in plan
        for state in CACHE_STATES
        if not skipped(cell, state, profile)
    ]


def run(cfg: dict, workdir: Path) -> dict:
    """The lab step: prepare the weight files (prep.prepare), then :func:`measure`."""
    system = cfg.get("system") or platform.system()
    if system not in cache.DEFAULT_METHODS:
        return not_run(
            f"the load lab knows how to evict the page cache on Linux and macOS only, not {system}"
        )
    from ..loadlab import prep  # written by the prep step's owner; imports torch

    plan = loader_plan(cfg)
    manifest = prep.prepare(cfg, workdir, loader_formats(plan))
    return measure(cfg, manifest, scratch_dir=Path(workdir) / COLD_COPIES, loader_summary=plan)


def loader_plan(cfg: dict, record: dict | None = None) -> dict | None:
    """The production loaders the settings ask for (``load_loaders``, ``load_loader_knobs``, checked by
    loaders.check_settings), each with whether it can run in this lab venv (loaders.status, reading
    the venv's record ``record``, default the one in sys.prefix): loaders.summary's dict, or None when
    none is set. Raises ValueError naming a bad setting."""
    names, knobs = loaders.check_settings(cfg.get("settings") or {})
    if not names:
        return None
    record = loaders.venv_record() if record is None else record
    return loaders.summary(names, knobs, {n: loaders.status(n, record) for n in names})


def loader_formats(plan: dict | None) -> tuple[str, ...]:
    """The file formats prep.prepare must add for the loaders of ``plan`` (:func:`loader_plan`) that can
    run here: tensorizer's own, where it is set; safetensors is always made."""
    usable = [n for n, rec in (plan or {}).get("loaders", {}).items() if rec["status"] == "ok"]
    return tuple(sorted({loaders.BY_NAME[n].file_format for n in usable} - {"safetensors"}))


def _cell(
    files: dict,
    key: str,
    method: str,
    model=None,
    populate=None,
    decoder_config=None,
    state_key=None,
    loader_knobs=None,
) -> dict:
    entry = files[key]
    return {
        "file": key,
        "path": entry["path"],
        "paths": list(entry.get("paths") or [entry["path"]]),
        "method": method,
        "model": model,
        "populate": populate,
        "decoder_config": decoder_config,
        **({"state_key": state_key} if state_key else {}),
        **({"loader_knobs": loader_knobs} if loader_knobs is not None else {}),
    }


def user_cells_not_run(manifest: dict) -> list[dict]:
    """The user's cells that cannot run, each ``{"file", "method", "reason"}``: the one of a file that
    was not made (prep's ``made``), and torch.load-mmap on a legacy torch.save file (prep's
    ``mmap_refusal``, PyTorch's own words)."""
    user = manifest.get("user_model") or {}
    if user.get("status") != "ok":
        return []
    out = []
    for key, method in USER_CELLS:
        if key not in manifest["files"]:
            made = user.get("made") or not_run(f"{key} was not made")
            out.append({"file": key, "method": method, "reason": made["reason"]})
        elif method == "torch.load-mmap" and user.get("mmap_refusal"):
            reason = (
                f"{user['shards'][0]} is a legacy (pre-1.6) torch.save file, and PyTorch refuses mmap "
                f"there: {user['mmap_refusal']}"
            )
            out.append({"file": key, "method": method, "reason": reason})
    return out


def loader_cells(files: dict, summary: dict | None, big_config: str) -> list[dict]:
    """The cells of each production loader that can run (``summary``: :func:`loader_plan`): its big file
    (big_safetensors, or tensorizer's big_tensors: the same weights), populating the big DecoderLM
    (``big_config``, JSON) as every whole-file method does, so a loader reaches every stage up to
    first_response on the same model as torch.load and load_file. Each carries ``loader_knobs``: the
    knobs the inventory set for it, as JSON for load_one.py."""
    out = []
    for name, rec in ((summary or {}).get("loaders") or {}).items():
        if rec["status"] != "ok":
            continue
        spec = loaders.BY_NAME[name]
        knobs = json.dumps({k: v["value"] for k, v in rec["knobs"].items() if v["source"] == "inventory"})
        big_file = loaders.BIG_FILE[spec.file_format]
        out.append(_cell(files, big_file, name, BIG_MODEL, BIG_POPULATE, big_config, loader_knobs=knobs))
    return out


def cell_plan(manifest: dict, loader_summary: dict | None = None) -> tuple[list[dict], dict | None]:
    """The cells to measure, and a not_run record for the small model's module_populated when it cannot run.

    Each cell is ``{"file", "path", "paths", "method", "model", "populate",
    "decoder_config"}``; ``paths`` lists a sharded file's shards (else just ``path``).
    The big file's cells of a method that yields the whole state dict carry
    ``manifest["big_model"]["config"]`` as their decoder config. The production
    loaders' cells (:func:`loader_cells`) follow the small model's; the user's
    cells come last, and only when ``manifest["user_model"]`` is ok. Raises
    KeyError when the manifest has no ``big_model`` (prep.py writes it).
    """
    files = manifest["files"]
    big = json.dumps(manifest["big_model"]["config"], sort_keys=True)
    plan = [
        _cell(files, key, m) if m in PARTIAL_METHODS else _cell(files, key, m, BIG_MODEL, BIG_POPULATE, big)
        for key, m in BIG_CELLS
    ]
    small = manifest.get("small_config")
    # prep.py names the DecoderLM config the small files load into (None when none fits).
    config = manifest.get("module_config", small if small in ("tiny", "small") else None)
    skip = None
    if config is None:
        reason = manifest.get("module_class_reason") or f"small model config is {small!r}"
        skip = not_run(f"no DecoderLM config to populate: {reason}")
    else:
        for key, m in SMALL_CELLS:
            plan.extend(_cell(files, key, m, config, mode) for mode in POPULATE)
    plan.extend(loader_cells(files, loader_summary, big))
    user = manifest.get("user_model")
    if user and user.get("status") == "ok":
        off = {(c["file"], c["method"]) for c in user_cells_not_run(manifest)}
        key_of = {"user_pt": user.get("state_key")}  # a training checkpoint's weights sit under a key
        mine = [(key, m) for key, m in USER_CELLS if (key, m) not in off]
        plan.extend(_cell(files, key, m, state_key=key_of.get(key)) for key, m in mine)
        if user.get("module_config"):
            decoder = json.dumps(user["module_config"], sort_keys=True)
            for key, m in (c for c in USER_MODEL_CELLS if c not in off):
                plan.extend(
                    _cell(files, key, m, USER_MODEL, mode, decoder, key_of.get(key)) for mode in POPULATE
                )
    return plan, skip


def _evict(path: str, cfg: dict, methods, scratch_dir: Path | None) -> dict:
    """cache.evict for one file; the record's ``timed_path`` is the file to time (a copy, or ``path``)."""
    kwargs = {"become_allowed": bool(cfg.get("become_allowed")), "system": cfg.get("system")}
    if scratch_dir is not None:
        Path(scratch_dir).mkdir(parents=True, exist_ok=True)
        kwargs["scratch_dir"] = scratch_dir
    rec = cache.evict(path, methods, **kwargs)
    return {**rec, "timed_path": str(rec.get("timed_path") or path)}


def _merge_evictions(recs: list[dict]) -> dict:
    """One eviction record for a sharded file: the method when every shard used the same one."""
    if len(recs) == 1:
        return recs[0]
    methods = {r["method"] for r in recs}
    return {
        "method": methods.pop() if len(methods) == 1 else None,
        "attempts": [a for r in recs for a in r["attempts"]],
        "fraction_after": max(r["fraction_after"] for r in recs),
        "timed_path": recs[0]["timed_path"],
    }


def measure_one(
    cell: dict,
    state: str,
    *,
    cfg: dict,
    eviction_methods: list[str] | None = None,
    skip_eviction: bool = False,
    model_module: str = "disklab_host.loadlab.model",
    scratch_dir: Path | None = None,
    warm_why: str | None = None,
    start: list[str] | None = None,
) -> dict:
    """Set the cache state of the cell's file(s), run load_one.py once, return its record.

    ``start`` (a together run's storm, disklab_host.together.load: ``["--at", NS]`` or ``["--start-file",
    PATH, ...]``) has load_one.py start its load call at that start on this host's CLOCK_REALTIME, after
    its imports and preparation; the record's ``together`` says when it started and how late.

    ``warm_why`` says why this workbench cannot keep a file warm (see
    :func:`page_cache_check`); a warm run that fails its check carries it.

    ``skip_eviction`` leaves a "cold" run's file as it is (tests use it to
    cause cold_unverified for real). ``scratch_dir`` is where a cold method that
    must copy makes its copy (cache.evict); the copy is timed, recorded as
    ``timed_path`` (``timed_paths`` for shards) and deleted afterwards. Adds
    ``cache_state_requested``, ``cache_proof`` (loadlab.proof.cache_proof: the
    three-part cold proof or the warm check), ``cache_state`` (cold,
    cold_unverified, warm or warm_unverified, from the proof's verdict),
    ``eviction`` and the cell's keys. Raises ValueError for an unknown state,
    RuntimeError with the child's stderr when load_one.py fails.
    """
    if state not in CACHE_STATES:
        raise ValueError(f"cache state must be one of {list(CACHE_STATES)}, got {state!r}")
    paths = [str(p) for p in cell.get("paths") or [cell["path"]]]
    timed = list(paths)
    eviction = None
    if state == "cold" and not skip_eviction:
        recs = [_evict(p, cfg, eviction_methods, scratch_dir) for p in paths]
        timed = [r["timed_path"] for r in recs]
        eviction = _merge_evictions(recs)
    elif state == "warm":
        for p in paths:
            cache.warm(p)
    cmd = module_argv(LOAD_ONE, cell["method"], *timed, "--spawn-wall-ns", str(time.time_ns()))
    if cell["model"]:
        cmd += ["--model", cell["model"], "--populate", cell["populate"], "--model-module", model_module]
        if cell.get("decoder_config"):
            cmd += ["--decoder-config", cell["decoder_config"]]
    if cell.get("state_key"):
        cmd += ["--state-key", cell["state_key"]]
    if cell.get("loader_knobs") is not None:
        cmd += ["--loader-knobs", cell["loader_knobs"]]
    cmd += start or []
    try:
        proc = subprocess.run(
            workers.fresh_argv(cmd),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
            env=child_env(),
        )
    finally:
        for orig, t in zip(paths, timed, strict=True):
            if t != orig:
                Path(t).unlink(missing_ok=True)  # the copy made for this cold run, never the original
    if proc.returncode != 0:
        raise RuntimeError(f"load_one.py {cell['method']} {timed[0]} failed: {proc.stderr[-2000:]}")
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    proof = cache_proof(rec, state, warm_why=warm_why)
    out = {
        **rec,
        "file": cell["file"],
        "cache_state_requested": state,
        "cache_state": CACHE_STATE[proof["verdict"]],
        "cache_proof": proof,
        "eviction": eviction,
    }
    if timed != paths:
        out["timed_path"] = timed[0]
        out["original_path"] = paths[0]
        if len(paths) > 1:
            out["timed_paths"] = timed
    return out


def page_cache_check(path: str) -> dict:
    """Whether this workbench keeps a file's page cache across open(2), checked once on ``path`` before the
    cells (cache.open_keeps_cache), or ``{"unavailable": reason}`` when the check cannot run. On a
    workbench that drops it (sshfs's default) no warm run can pass, and each warm sample says why."""
    try:
        return cache.open_keeps_cache(path)
    except OSError as exc:
        return unavailable(f"whether open(2) keeps the page cache was not checked: {exc}")


def summarise(samples: list[dict]) -> list[dict]:
    """One cell per (file, method, populate, cache_state): median/min/max of each stage."""
    groups: dict[tuple, list[dict]] = {}
    for s in samples:
        groups.setdefault((s["file"], s["method"], s["populate"], s["cache_state"]), []).append(s)
    cells = []
    for (file, method, populate, state), group in groups.items():
        stages = {}
        for stage in STAGES:
            recs = [g["stages"][stage] for g in group if stage in g["stages"]]
            if not recs:
                continue
            ok = [r for r in recs if r["status"] == "ok"]
            if not ok:
                stages[stage] = not_run(recs[0]["reason"])
                continue
            stages[stage] = {
                "status": "ok",
                "time_s": spread([r["time_s"] for r in ok]),
                "resident_fraction": spread([r["resident_fraction"] for r in ok]),
                "resident_bytes": spread([r["resident_bytes"] for r in ok]),
                "peak_rss_bytes": spread([r["peak_rss_bytes"] for r in ok]),
                **_device_reads(ok),
            }
        cells.append(
            {
                "file": file,
                "method": method,
                "model": group[0]["model"],
                "populate": populate,
                "cache_state": state,
                "n": len(group),
                "file_size_bytes": group[0]["file_size_bytes"],
                "before_resident_fraction": spread([g["before"]["resident_fraction"] for g in group]),
                "before_peak_rss_bytes": spread([g["before"]["peak_rss_bytes"] for g in group]),
                "import_s": spread([g["process"]["import_s"] for g in group]),
                **(
                    {"device_init_s": spread(inits)}
                    if (inits := [i for g in group if (i := g["process"].get("device_init_s")) is not None])
                    else {}
                ),
                "stages": stages,
                **(
                    {"next_token_ids": sorted(tokens)}
                    if (tokens := {g["next_token_id"] for g in group if "next_token_id" in g})
                    else {}
                ),
                "cache_proof": {
                    "verdicts": sorted({g["cache_proof"]["verdict"] for g in group}),
                    "failed": sorted({f for g in group for f in g["cache_proof"]["failed"]}),
                    "unchecked": sorted({u for g in group for u in g["cache_proof"]["unchecked"]}),
                },
            }
        )
    return cells


def _device_reads(recs: list[dict]) -> dict:
    """Bytes the device delivered up to a stage, and those bytes over the stage's time (MiB/s), when
    every sample recorded them; else ``device_reads_unavailable`` with the first sample's reason."""
    got = []
    for r in recs:
        io = r.get("io", unavailable("no I/O record in this sample"))
        dev = io if is_unavailable(io) else io["device"]
        if is_unavailable(dev):
            return {"device_reads_unavailable": dev["unavailable"]}
        got.append((dev["read_bytes"], r["time_s"]))
    return {
        "device_read_bytes": spread([b for b, _ in got]),
        "device_read_mib_s": spread([b / MIB / t if t > 0 else 0.0 for b, t in got]),
    }


def measure(
    cfg: dict,
    manifest: dict,
    *,
    eviction_methods: list[str] | None = None,
    two_workers: bool = True,
    model_module: str = "disklab_host.loadlab.model",
    scratch_dir: Path | None = None,
    loader_summary: dict | None = None,
) -> dict:
    """Measure every cell ``sizes["load_repeats"]`` times, cold and warm, in :func:`schedule`'s order (with
    the setting ``load_adaptive``: at least that many, then until each cell's median is known,
    :func:`measure_adaptive`); return the section.

    ``scratch_dir`` is where a cold method that must copy makes the copy it times (see measure_one).
    ``loader_summary`` (:func:`loader_plan`) adds the production loaders' cells and the section's
    ``loaders`` (:func:`loaders_section`).

    Raises ValueError naming ``sizes.load_repeats`` when it is not > 0.
    """
    start = time.perf_counter()
    repeats = require_positive("sizes.load_repeats", cfg["sizes"]["load_repeats"])
    system = cfg.get("system") or platform.system()
    plan, module_skip = cell_plan(manifest, loader_summary)
    page_cache = page_cache_check(manifest["files"]["big_safetensors"]["path"])
    warm_why = page_cache.get("why") if not is_unavailable(page_cache) else None
    skips = sorted({r for c in plan for st in CACHE_STATES if (r := skipped(c, st, cfg.get("profile")))})

    def one(rep: int, cell: dict, state: str) -> dict:
        s = measure_one(
            cell,
            state,
            cfg=cfg,
            eviction_methods=eviction_methods,
            model_module=model_module,
            scratch_dir=scratch_dir,
            warm_why=warm_why,
        )
        s["repeat"] = rep
        return s

    adaptive = None
    if (cfg.get("settings") or {}).get("load_adaptive") is True:
        samples, adaptive = measure_adaptive(one, plan, cfg, repeats)
        repeats = adaptive["rounds"]
    else:
        samples = [one(rep, cell, state) for rep, cell, state in schedule(plan, cfg.get("profile"), repeats)]
    big_pt = manifest["files"]["big_pt"]["path"]
    if two_workers:
        cache.warm(big_pt)  # both workers then share one warm page cache
        workers_result = workers.run(big_pt, system)
    else:
        workers_result = not_run("two-worker memory was switched off for this run")
    used = sorted({s["eviction"]["method"] for s in samples if s["eviction"] and s["eviction"]["method"]})
    device = next(s["stages"]["device_placed"] for s in samples)
    backend = next((s["device"] for s in samples if "device" in s), None)
    return {
        "status": "ok",
        "system": system,
        "page_size_bytes": cache.page_size(),
        "repeats": repeats,
        "small_config": manifest.get("small_config"),
        "files": {
            k: {"path": str(v["path"]), "size_bytes": v["size_bytes"], "format": v["format"]}
            for k, v in manifest["files"].items()
        },
        "big_model": manifest["big_model"],
        "module_populated": module_skip or {"status": "ok"},
        "first_response": first_response_summary(samples),
        "cells_skipped": skips,
        "device_placed": {"status": "ok"} if device["status"] == "ok" else device,
        **({"device": backend} if backend else {}),
        "user_model": user_section(manifest, samples),
        **({"loaders": loaders_section(loader_summary, samples)} if loader_summary else {}),
        "eviction_methods_used": used,
        "drop_caches_used": "drop_caches" in used,
        "become_allowed": bool(cfg.get("become_allowed")),
        "n_cold_unverified": sum(s["cache_state"] == "cold_unverified" for s in samples),
        "n_warm_unverified": sum(s["cache_state"] == "warm_unverified" for s in samples),
        "residency_trust": sorted({s["residency_trust"] for s in samples}),
        **({"adaptive": adaptive} if adaptive else {}),
        "workbench_page_cache": page_cache,
        "samples": samples,
        "cells": summarise(samples),
        "two_workers": workers_result,
        "measure_wall_s": time.perf_counter() - start,
    }


# Adaptive repeats (setting load_adaptive): a cell is settled once the 95 % interval of its median time at
# ADAPTIVE_STAGE (common.stats.median_interval, its order statistics) is within ±ADAPTIVE_SHARE of it.
ADAPTIVE_SHARE = 0.05
ADAPTIVE_LEVEL = 0.95
ADAPTIVE_STAGE = "all_touched"


def settled(times: list[float]) -> tuple[bool, float | None]:
    """(settled, the interval's half-width over the median) of one cell's proven times, or (False, None)
    while the samples are too few for an interval at ADAPTIVE_LEVEL (6, for order statistics)."""
    if not times:
        return False, None
    ci = median_interval(times, ADAPTIVE_LEVEL)
    med = percentile(sorted(times), 50)
    if ci["coverage"] < ADAPTIVE_LEVEL or med <= 0:
        return False, None
    share = (ci["high"] - ci["low"]) / 2 / med
    return share <= ADAPTIVE_SHARE, share


def _times_of(samples: list[dict], cell: dict, state: str) -> list[float]:
    """The proven times at ADAPTIVE_STAGE (else the last stage reached) of one cell's samples in ``state``."""
    out = []
    for s in samples:
        if (s["file"], s["method"], s.get("populate")) != (
            cell["file"],
            cell["method"],
            cell.get("populate"),
        ):
            continue
        if s["cache_state_requested"] != state or s["cache_state"] != state:
            continue  # a sample that failed its cache proof is no figure of that state
        st = s["stages"].get(ADAPTIVE_STAGE) or s["stages"][s["stage_order"][-1]]
        if st.get("status") == "ok":
            out.append(st["time_s"])
    return out


def measure_adaptive(one, plan: list[dict], cfg: dict, minimum: int) -> tuple[list[dict], dict]:
    """Repeats until each cell's median is known to ±ADAPTIVE_SHARE: ``minimum`` rounds over every cell, then
    rounds over the cells not yet settled (:func:`settled`), interleaved across them as :func:`schedule`
    interleaves, until none is left, ``sizes.load_repeats_max`` rounds ran, or the next round (as long as
    the last) would pass ``sizes.load_budget_s``. ``one(rep, cell, state)`` measures one sample. Returns
    (samples, the section's ``adaptive`` record)."""
    sizes = cfg["sizes"]
    cap = require_positive("sizes.load_repeats_max", sizes.get("load_repeats_max", 12))
    budget = require_positive("sizes.load_budget_s", sizes.get("load_budget_s", 600))
    pending = [(c, st) for c in plan for st in CACHE_STATES if not skipped(c, st, cfg.get("profile"))]
    samples: list[dict] = []
    start, last_round_s, rep, stopped = time.perf_counter(), 0.0, 0, None
    while stopped is None:
        if rep >= minimum:
            pending = [(c, st) for c, st in pending if not settled(_times_of(samples, c, st))[0]]
        if rep >= minimum and not pending:
            stopped = "settled"
        elif rep >= max(cap, minimum):
            stopped = "cap"
        elif rep >= minimum and time.perf_counter() - start + last_round_s > budget:
            stopped = "budget"
        else:
            t0 = time.perf_counter()
            samples += [one(rep, cell, state) for cell, state in pending]
            last_round_s = time.perf_counter() - t0
            rep += 1
    cells = []
    for cell in plan:
        for state in CACHE_STATES:
            if skipped(cell, state, cfg.get("profile")):
                continue
            times = _times_of(samples, cell, state)
            ok, share = settled(times)
            cells.append(
                {
                    "file": cell["file"],
                    "method": cell["method"],
                    "populate": cell.get("populate"),
                    "cache_state": state,
                    "n": len(times),
                    "half_width_share": share,
                    "settled": ok,
                }
            )
    record = {
        "target_share": ADAPTIVE_SHARE,
        "level": ADAPTIVE_LEVEL,
        "stage": ADAPTIVE_STAGE,
        "minimum": minimum,
        "cap": cap,
        "budget_s": budget,
        "rounds": rep,
        "stopped": stopped,
        "wall_s": time.perf_counter() - start,
        "cells": cells,
    }
    return samples, record


def first_response_summary(samples: list[dict]) -> dict:
    """Whether the first responses agree: the same weights must give the same next token.

    Per model (``big``, the small config, ``user``: the .pt and the
    .safetensors of one model hold the same weights), every sample that reached
    ``first_response``: ``{"model", "agree", "n", "margin_min", "votes":
    [{"next_token_id", "n", "cells": [label]}]}``, most votes first. ``agree``
    is False as soon as two samples of one model gave different tokens; the
    section's ``agree`` is False when any model's is. ``{"status": "not_run",
    "reason"}`` when no sample reached the stage (the first sample's reason, or
    that no cell populates a module).
    """
    ran = [s for s in samples if s["stages"].get("first_response", {}).get("status") == "ok"]
    if not ran:
        skipped_ = [st for s in samples if (st := s["stages"].get("first_response"))]
        reason = skipped_[0]["reason"] if skipped_ else "no cell populated a module, so none could respond"
        return not_run(reason)
    models = []
    for name in dict.fromkeys(s["model"] for s in ran):
        mine = [s for s in ran if s["model"] == name]
        votes: dict[int, list[dict]] = {}
        for s in mine:
            votes.setdefault(s["next_token_id"], []).append(s)
        ordered = sorted(votes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        models.append(
            {
                "model": name,
                "agree": len(votes) == 1,
                "n": len(mine),
                "margin_min": min(s["next_token_margin"] for s in mine),
                "votes": [
                    {
                        "next_token_id": token,
                        "n": len(group),
                        "cells": sorted({_sample_label(s) for s in group}),
                    }
                    for token, group in ordered
                ],
            }
        )
    return {"status": "ok", "agree": all(m["agree"] for m in models), "models": models}


def _sample_label(s: dict) -> str:
    """``torch.load → module (assign), big_pt, cold`` (the report's cell name, and the cache state)."""
    what = f"{s['method']} → module ({s['populate']})" if s.get("populate") else s["method"]
    return f"{what}, {s['file']}, {s['cache_state']}"


def loaders_section(summary: dict, samples: list[dict]) -> dict:
    """loaders.summary's dict with, for each loader that ran, how its samples actually read the file
    (``observed``: each distinct ``read_path`` of its samples, with the sample count)."""
    out = json.loads(json.dumps(summary))
    for name, rec in out["loaders"].items():
        seen: dict[str, dict] = {}
        for s in samples:
            if s["method"] == name and s.get("read_path"):
                key = json.dumps(s["read_path"], sort_keys=True)
                seen.setdefault(key, {**s["read_path"], "n": 0})["n"] += 1
        if rec["status"] == "ok":
            rec["observed"] = list(seen.values())
    return out


def user_section(manifest: dict, samples: list[dict]) -> dict | None:
    """What the section says of the user's model: None when unset, else where it came from and how it ran.

    Names the format found (``format``: safetensors, zip or legacy; usermodel.sniff),
    the file made from it in the workbench (``made``, with ``pt_path`` for a
    safetensors model as before), where a training checkpoint's weights sat
    (``weights_note``, usermodel.weights_note) and the cells that could not run
    (``cells_not_run``, :func:`user_cells_not_run`).
    """
    user = manifest.get("user_model")
    if not user:
        return None
    if user.get("status") != "ok":
        return {"status": "not_run", "setting": user.get("setting", ""), "reason": user["reason"]}
    files = manifest["files"]
    mine = [s for s in samples if s["file"] in ("user_safetensors", "user_pt")]
    keep = (
        "setting", "kind", "format", "shards", "size_bytes", "config_json", "repo_id", "revision",
        "hub_cache", "state_key",
    )  # fmt: skip
    module = (
        {"status": "ok", "decoder_config": user["module_config"]}
        if user.get("module_config")
        else not_run(f"DecoderLM cannot hold this model: {user.get('module_reason')}")
    )
    refused = (s["stages"]["device_placed"] for s in mine if s["stages"]["device_placed"]["status"] != "ok")
    placed = next(refused, None)
    responses = [s["stages"]["first_response"] for s in mine if "first_response" in s["stages"]]
    if module["status"] != "ok":
        response = not_run(f"no module to run: {module['reason']}")
    else:
        response = next((r for r in responses if r["status"] != "ok"), None) or {"status": "ok"}
    made_key = "user_pt" if user.get("format", "safetensors") == "safetensors" else "user_safetensors"
    made = (
        {"status": "ok", "file": made_key, "path": files[made_key]["path"],
         "size_bytes": files[made_key]["size_bytes"]}
        if made_key in files
        else user.get("made") or not_run(f"{made_key} was not made")
    )  # fmt: skip
    return {
        "status": "ok",
        **{k: user[k] for k in keep if k in user},
        "device_placed": placed or {"status": "ok"},
        "first_response": response,
        **({"pt_path": made["path"], "pt_size_bytes": made["size_bytes"]} if made_key == "user_pt" and
           made["status"] == "ok" else {}),
        "made": made,
        "weights_note": weights_note(user),
        "cells_not_run": user_cells_not_run(manifest),
        "module_populated": module,
        "timed_copies": sorted({s["timed_path"] for s in mine if "timed_path" in s}),
    }  # fmt: skip
