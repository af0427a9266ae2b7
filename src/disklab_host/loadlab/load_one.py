"""One load measurement in this fresh process; prints one JSON line.

Usage: python load_one.py METHOD PATH [PATH ...] [--model NAME --populate copy|assign
       [--decoder-config JSON]] [--state-key KEY] [--loader-knobs JSON] [--spawn-wall-ns NS] [--hold]
       [--at NS | --start-file PATH [--ready-timeout S]]

More than one PATH is a sharded safetensors model: each is loaded in turn into
one state dict, and residency is summed over all of them.

METHOD is one of :data:`METHODS`: torch's and safetensors' own, and the production loaders
(loaders.LOADERS, by name), each run through its adapter: its knobs (``--loader-knobs``: those the
inventory set; the rest keep the loader's defaults) and its import are done before the clock
(``process.loader_import_s``), its own load call inside it; the sample then records ``loader``
(name, version, every knob with its value and source) and ``read_path`` (how it read the file).
Every readiness stage (common.stages, in that order) is timed from one start point, the moment
recorded just before the load call, and the times leave out disklab's own probes (mincore, RSS),
whose total is ``probe_s``:

- ``loader_return``: the load call returned;
- ``module_populated`` (with ``--model``): a DecoderLM holds the weights, either
  built normally then ``load_state_dict`` (``copy``), or built on the meta
  device then ``load_state_dict(assign=True)`` (``assign``: the module's
  parameters are the loader's tensors, so a mapped file's pages stay where the
  loader left them);
- ``device_placed``: the module (else the tensors) ``.to(device)`` and the
  backend's synchronize, on the first backend available of CUDA
  (``torch.cuda.synchronize()``) and MPS (``torch.mps.synchronize()``);
  recorded as not run, with each backend checked and why it is unavailable,
  when neither is, and on MPS when a tensor has a dtype MPS cannot hold
  (:data:`MPS_UNSUPPORTED_DTYPES`: "MPS has no float64: tensor w is F64");
- ``first_response`` (with ``--model``): one forward pass of the model
  module's fixed prompt (``next_token``: model.PROMPT_IDS in
  ``torch.inference_mode()``) where the weights are (the device, else the CPU),
  stopped when the next-token id is on the host (``.item()``); the sample
  records ``next_token_id`` and ``next_token_margin`` (the gap between the top
  two logits). On the meta device (``DEVICE_OVERRIDE``, the tests' stand-in
  for a GPU) nothing can be computed, and a forward pass that raises is
  recorded as not run with torch's error;
- ``all_touched``: every tensor the loader returned summed once on the host
  (the lesson's touch, with a float32 accumulator instead of a float copy of
  each tensor). It comes last, so residency at ``first_response`` shows what
  the forward pass itself brought in.

Every measurement is a fresh process, so the backend's one-time start-up (CUDA
context creation, the first small allocation, a synchronize) would otherwise
fall inside device_placed, and on unified memory it can dwarf the copy. It runs
before the clock starts and is timed apart as ``process.device_init_s``; the
record's ``device`` names the backend, the device, its memory and whether it
shares memory with the CPU.

At each stage: residency of PATH (mincore, on a descriptor and mapping opened
before anything else and held, cache.HeldResidency: no probe opens the file
while the clock runs, since on some FUSE workbenches an open(2) empties the
page cache), current RSS and peak RSS. Peak RSS
is getrusage's ru_maxrss, the peak since this process started (imports
included), normalised to bytes (labcommon.peak_rss_bytes); ``before`` holds the
same right before the load call, so the load's own growth is visible.
``--hold`` waits for a line on stdin after printing (workers.py reads
/proc/PID/smaps_rollup meanwhile). ``--at NS`` or ``--start-file PATH`` (a together run's
cold-start storm, disklab_host.together.load) waits, after every preparation and
just before the clock starts, for the start it gives on this host's CLOCK_REALTIME
(together.start.start_now: PATH.ready says the process is ready), and records the
wait as ``together``: {"at_ns", "started_ns", "late_ns", "clock"}, so every host's
load call starts at one moment.
Interpreter start and imports are timed separately (``process``), never inside a stage.
"""

from __future__ import annotations

import time

_MAIN_WALL_NS = time.time_ns()
_IMPORT_START = time.perf_counter_ns()

import argparse  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from ..cache import pagecache as cache  # noqa: E402
from ..common import iorecord, noise, timesplit  # noqa: E402
from ..common.facts import not_run, peak_rss_bytes, unavailable  # noqa: E402
from ..common.stages import PARTIAL_METHODS, STAGES  # noqa: E402
from ..together.start import add_start_arguments, start_now  # noqa: E402
from . import loaders  # noqa: E402

_IMPORT_NS = time.perf_counter_ns() - _IMPORT_START

METHODS = ("torch.load", "torch.load-mmap", "load_file", "one-tensor", "load_file+willneed", *loaders.NAMES)
POPULATE = ("copy", "assign")
SYSTEM = platform.system()
# Tests set "meta" to run device_placed's bookkeeping without a GPU: the weights go there instead.
DEVICE_OVERRIDE: str | None = None
# Dtypes MPS cannot hold, with the name a safetensors header gives them: Metal has no 64-bit floats, and
# torch's .to("mps") raises TypeError for them ("the MPS framework doesn't support float64").
MPS_UNSUPPORTED_DTYPES = {torch.float64: ("float64", "F64"), torch.complex128: ("complex128", "C128")}
# What the last measure() loaded, kept alive so --hold shows its memory in smaps_rollup.
_KEEP: list = []


def willneed_hint(path: str) -> str:
    """Tell the kernel the whole file is about to be read; return which hint was given (a key of
    cache.WILLNEED_HINTS).

    posix_fadvise(2) POSIX_FADV_WILLNEED where Python has it (Linux), else
    madvise(2) MADV_WILLNEED over a mapping made through ctypes
    (cache.madvise_willneed, macOS): CPython's mmap.mmap would run
    fcntl(F_FULLFSYNC) inside the timed load there.
    """
    if not hasattr(os, "posix_fadvise"):
        return cache.madvise_willneed(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        return cache.FADVISE_WILLNEED
    finally:
        os.close(fd)


def load(
    method: str, path: str | list[str], state_key: str | None = None, prepared: dict | None = None
) -> tuple[dict, dict]:
    """Run one loader over ``path`` (a list: a sharded model's files, in turn); return (tensors, notes).

    The tensors are a dict of name -> CPU tensor; with ``state_key`` (a training
    checkpoint), torch.load's result under that key (the rest of the file is still
    read by torch.load, and dropped). A production loader (loaders.NAMES) runs its
    own load call with ``prepared`` (loaders.prepare, done before the clock).

    Raises ValueError naming METHOD for an unknown method, or for a production
    loader without ``prepared``. torch.load always runs with weights_only=True.
    one-tensor reads the first tensor of the first file.
    """
    paths = [path] if isinstance(path, str) else list(path)
    notes: dict = {}
    sd: dict = {}
    if method in loaders.BY_NAME:
        if prepared is None or prepared["loader"] != method:
            raise ValueError(f"METHOD {method!r} is a production loader: loaders.prepare it first")
        sd = loaders.load(prepared, paths)
    elif method == "torch.load":
        for p in paths:
            obj = torch.load(p, map_location="cpu", weights_only=True)
            sd.update(obj[state_key] if state_key else obj)
    elif method == "torch.load-mmap":
        for p in paths:
            obj = torch.load(p, map_location="cpu", weights_only=True, mmap=True)
            sd.update(obj[state_key] if state_key else obj)
    elif method == "load_file":
        for p in paths:
            sd.update(load_file(p))
    elif method == "load_file+willneed":
        notes["hint"] = [willneed_hint(p) for p in paths][0]
        for p in paths:
            sd.update(load_file(p))
    elif method == "one-tensor":
        with safe_open(paths[0], framework="pt") as f:
            key = next(iter(f.keys()))
            sd = {key: f.get_tensor(key)}
        notes["tensor"] = key
    else:
        raise ValueError(f"METHOD must be one of {list(METHODS)}, got {method!r}")
    return sd, notes


def current_rss_bytes() -> int | dict:
    """Resident set size now, from /proc/self/statm (proc(5)); unavailable elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * cache.page_size()
    except OSError as exc:
        return unavailable(f"current RSS needs /proc/self/statm (Linux): {exc}")


def snapshot(held: cache.HeldResidency) -> dict:
    """Residency of ``held``'s files (summed; opened before the load call, so the probe opens nothing)
    and this process's RSS and peak RSS, in bytes."""
    res = held.residency()
    resident = sum(r["resident_bytes"] for r in res)
    size = sum(r["size_bytes"] for r in res)
    return {
        "resident_bytes": resident,
        "resident_fraction": (res[0]["fraction"] if len(res) == 1 else resident / size if size else 0.0),
        "rss_bytes": current_rss_bytes(),
        "peak_rss_bytes": peak_rss_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, SYSTEM),
    }


def cache_before(paths: list[str]) -> dict:
    """The page cache's state of ``paths`` just before the load call (cache.cache_state, summed).

    cachestat(2) where the kernel has it (it also counts dirty and writeback
    pages), else mincore with its trust caveat; ``method`` names which.
    """
    states = [cache.cache_state(p) for p in paths]
    size = sum(os.stat(p).st_size for p in paths)
    resident = sum(s["resident_bytes"] for s in states)

    def total(key):
        vals = [s[key] for s in states]
        return sum(vals) if all(isinstance(v, int) for v in vals) else vals[0]

    return {
        "method": states[0]["method"] if len({s["method"] for s in states}) == 1 else "mixed",
        "fraction": states[0]["fraction"] if len(states) == 1 else (resident / size if size else 0.0),
        "resident_bytes": resident,
        "trust": next((s["trust"] for s in states if s["trust"] != "ok"), "ok"),
        "dirty_bytes": total("dirty_bytes"),
        "writeback_bytes": total("writeback_bytes"),
        "cachestat_unavailable": states[0]["cachestat_unavailable"],
    }


class StageClock:
    """Times stages from one start point, leaving out the time spent in probes.

    With ``io_record`` each stage also gets, for the interval from the start to that stage's mark, read
    right at the mark before the stage's residency probe: the I/O record (common.iorecord, ``io``), the
    noise record (common.noise: what else the host did meanwhile, ``noise``) and the time split
    (common.timesplit: CPU, blocked on I/O, waiting to run, the rest, ``time_split``; its counters
    include disklab's own probes, ``probe_s``, which the stage's time leaves out). Off, each says so.
    """

    def __init__(self, path: str | list[str], held: cache.HeldResidency, io_record: bool = True):
        self.held = held
        self.start_ns = 0
        self.probe_ns = 0
        self.stages: dict[str, dict] = {}
        first = path if isinstance(path, str) else path[0]
        self.io = iorecord.Recorder(first, enabled=io_record)
        self.noise = noise.Probe(enabled=io_record)
        self.split = timesplit.ProcessClock(enabled=io_record)
        self._before: tuple = (None, None, None)

    def start(self) -> None:
        self.probe_ns = 0
        self._before = (self.noise.begin(), self.split.read(), self.io.begin())
        self.start_ns = time.perf_counter_ns()

    def mark(self, stage: str) -> None:
        """Record ``stage`` (one of common.stages.STAGES) now: its time, I/O, noise and time split, and
        the residency snapshot."""
        now = time.perf_counter_ns()
        elapsed_ns = now - self.start_ns - self.probe_ns
        noise_before, split_before, io_before = self._before
        io = self.io.end(io_before, f"from just before the load call to {stage}")
        split = self.split.split(split_before, self.split.read(), elapsed_ns / 1e9)
        nz = self.noise.end(noise_before)
        off = "switched off for this run (bench)"
        self.stages[stage] = {
            "status": "ok",
            "time_s": elapsed_ns / 1e9,
            **snapshot(self.held),
            "io": io if io is not None else iorecord.not_recorded(off),
            "noise": nz if nz is not None else noise.not_recorded(off),
            "time_split": split if split is not None else timesplit.not_recorded(off),
        }
        self.probe_ns += time.perf_counter_ns() - now

    def skip(self, stage: str, reason: str) -> None:
        self.stages[stage] = not_run(reason)

    def order(self) -> list[str]:
        """The stages recorded, in common.stages.STAGES order; raises ValueError naming an unknown one."""
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown:
            raise ValueError(f"readiness stages must be among {list(STAGES)}, got {unknown}")
        return sorted(self.stages, key=STAGES.index)


def touch(tensors) -> tuple[float, int]:
    """Sum every tensor once (reads every byte); return (checksum, bytes touched)."""
    total, nbytes = 0.0, 0
    for t in tensors:
        total += float(t.sum(dtype=torch.float32))
        nbytes += t.numel() * t.element_size()
    return total, nbytes


def model_config(model_name: str, model_module: str, decoder_config: str | None = None):
    """``CONFIGS[model_name]``, or a ``DecoderConfig`` from ``decoder_config`` (JSON keyword arguments)."""
    mod = importlib.import_module(model_module)
    if decoder_config:
        return mod, mod.DecoderConfig(**json.loads(decoder_config))
    return mod, mod.CONFIGS[model_name]


def populate(
    sd: dict, model_name: str, mode: str, model_module: str, decoder_config: str | None = None
) -> torch.nn.Module:
    """Build the model ``model_name`` and give it the weights ``sd`` (see module docstring)."""
    mod, config = model_config(model_name, model_module, decoder_config)
    if mode == "copy":
        model = mod.DecoderLM(config)
        model.load_state_dict(sd)
    elif mode == "assign":
        with torch.device("meta"):
            model = mod.DecoderLM(config)
        model.load_state_dict(sd, assign=True)
    else:
        raise ValueError(f"--populate must be one of {list(POPULATE)}, got {mode!r}")
    return model


def warm_device_context(model_name: str, model_module: str, decoder_config: str | None = None) -> float:
    """Build the model once on the meta device before the clock starts; return its time in s.

    A module built under ``with torch.device(...)`` can meet one-time process
    costs like ``import torch``: nn.Embedding's own init on meta imports
    torch._dynamo (seen with ``python -X importtime`` on torch 2.13: over a
    second; model.py's DecoderLM now skips that init on meta, a user's
    ``--model-module`` may not). Building one throwaway instance first keeps such
    a cost out of the module_populated stage of the meta + assign path; the time
    is recorded as ``device_context_init_s``.
    """
    mod, config = model_config(model_name, model_module, decoder_config)
    t0 = time.perf_counter_ns()
    with torch.device("meta"):
        mod.DecoderLM(config)
    return (time.perf_counter_ns() - t0) / 1e9


def _cuda_unavailable() -> str:
    """Why torch.cuda.is_available() is False, from what this torch build says of itself."""
    hip = getattr(torch.version, "hip", None)
    if torch.version.cuda is None and hip is None:
        return "torch.cuda.is_available() is False (CPU-only build: torch.version.cuda is None)"
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else f"ROCm {hip} build"
    try:
        count = str(torch.cuda.device_count())
    except Exception as exc:  # the driver's own error says more than a guess
        count = f"unknown: {type(exc).__name__}: {exc}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    vis = f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    return (
        f"torch.cuda.is_available() is False ({build}, torch.cuda.device_count() is {count}{vis}: "
        "no GPU or driver this process can use)"
    )


def _mps_unavailable() -> str:
    """Why torch.backends.mps.is_available() is False."""
    if SYSTEM != "Darwin":
        return f"torch.backends.mps.is_available() is False (not macOS: {SYSTEM})"
    if not torch.backends.mps.is_built():
        return "torch.backends.mps.is_available() is False (this torch build has no MPS support)"
    macos = platform.mac_ver()[0] or "of unknown version (platform.mac_ver() is empty)"
    return (
        f"torch.backends.mps.is_available() is False (built with MPS, but macOS {macos} offers it no "
        "Metal device)"
    )


def mps_refusal(named: dict) -> str | None:
    """Why MPS cannot hold these tensors (name -> tensor), naming the first of a dtype it lacks
    (MPS_UNSUPPORTED_DTYPES), or None when it can hold them all."""
    for name, t in named.items():
        if t.dtype in MPS_UNSUPPORTED_DTYPES:
            what, label = MPS_UNSUPPORTED_DTYPES[t.dtype]
            return f"MPS has no {what}: tensor {name} is {label}"
    return None


def find_backend() -> tuple[str | None, list[dict]]:
    """The first available of CUDA and MPS, and each backend checked: {"backend", "available", "reason"}."""
    checked = []
    if torch.cuda.is_available():
        return "cuda", [{"backend": "cuda", "available": True, "reason": None}]
    checked.append({"backend": "cuda", "available": False, "reason": _cuda_unavailable()})
    if torch.backends.mps.is_available():
        return "mps", [*checked, {"backend": "mps", "available": True, "reason": None}]
    checked.append({"backend": "mps", "available": False, "reason": _mps_unavailable()})
    return None, checked


def device_info(backend: str) -> dict:
    """The device's name, memory in bytes and whether it shares memory with the CPU.

    CUDA: torch.cuda.get_device_properties (name, total_memory, is_integrated:
    an integrated GPU such as DGX Spark's GB10 uses the host's memory). MPS:
    Apple silicon's GPU always shares one unified memory with the CPU; torch
    offers no total or name, only Metal's recommended working set
    (torch.mps.recommended_max_memory, where this torch has it).
    """
    if backend == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        integrated = getattr(props, "is_integrated", None)
        return {
            "backend": "cuda",
            "name": props.name,
            "index": index,
            "capability": f"{props.major}.{props.minor}",
            "total_memory_bytes": int(props.total_memory),
            "shares_memory_with_cpu": bool(integrated)
            if integrated is not None
            else unavailable(f"torch {torch.__version__}'s device properties have no is_integrated"),
            "shares_memory_source": "torch.cuda.get_device_properties().is_integrated",
        }
    rec_max = getattr(torch.mps, "recommended_max_memory", None)
    return {
        "backend": "mps",
        "name": unavailable("torch.mps offers no device name"),
        "total_memory_bytes": unavailable(
            "torch.mps offers no total memory (the GPU uses the Mac's unified memory)"
        ),
        "recommended_max_memory_bytes": int(rec_max())
        if rec_max
        else unavailable(f"torch {torch.__version__} has no torch.mps.recommended_max_memory"),
        "shares_memory_with_cpu": True,
        "shares_memory_source": "MPS runs on Apple silicon, whose CPU and GPU share one unified memory",
    }


def synchronize(backend: str) -> None:
    """Wait for the backend's queued work: torch.cuda.synchronize() or torch.mps.synchronize()."""
    if backend == "cuda":
        torch.cuda.synchronize()
    elif backend == "mps":
        torch.mps.synchronize()


def device_init(backend: str, device: str) -> float:
    """The backend's one-time start-up, before any clock: context, a first small allocation, synchronize.

    Returns its time in s (``process.device_init_s``).
    """
    t0 = time.perf_counter_ns()
    first = torch.ones(1024, device=device)
    first.add_(1)
    synchronize(backend)
    del first
    return (time.perf_counter_ns() - t0) / 1e9


def first_response(clock: StageClock, module, model_module: str, where: str) -> dict:
    """Run the first response on ``module`` at ``where`` (a torch device string) and mark the stage.

    Returns ``{"next_token_id", "next_token_margin"}``, or ``{}`` when the stage
    is recorded as not run: on the meta device (nothing there holds values) or
    when the forward pass raised (torch's error, in one line).
    """
    if where == "meta":
        clock.skip(
            "first_response",
            "the weights were placed on the meta device (the tests' stand-in for a GPU), which holds no "
            "values: there is no forward pass to run there",
        )
        return {}
    next_token = importlib.import_module(model_module).next_token
    try:
        token, margin = next_token(module, where)
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as exc:
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        clock.skip("first_response", f"the forward pass on {where} raised {why}")
        return {}
    clock.mark("first_response")
    clock.stages["first_response"]["ran_on"] = where
    return {"next_token_id": token, "next_token_margin": margin}


def measure(args: argparse.Namespace) -> dict:
    """Run every stage once for ``args``; return the JSON-able record.

    Raises ValueError for ``--model`` with a method of :data:`PARTIAL_METHODS` (no whole state dict).
    """
    paths = [args.path] if isinstance(args.path, str) else list(args.path)
    decoder = getattr(args, "decoder_config", None)
    if args.model and args.method in PARTIAL_METHODS:
        raise ValueError(f"--model needs the whole state dict, and {args.method} returns part of it")
    # the files' residency is read on descriptors opened here, before anything else: no probe after this
    # opens them again (cache.HeldResidency: an open empties the page cache on some FUSE workbenches)
    with cache.HeldResidency(paths) as held:
        return _measure(args, paths, decoder, held)


def _measure(
    args: argparse.Namespace, paths: list[str], decoder: str | None, held: cache.HeldResidency
) -> dict:
    """:func:`measure`, its files held open for the residency probes."""
    clock = StageClock(paths, held, io_record=not getattr(args, "no_io_record", False))
    backend, checked = find_backend()
    device_init_s = None
    if backend:
        device = DEVICE_OVERRIDE or backend
        device_rec = {**device_info(backend), "status": "ok", "torch_device": device, "checked": checked}
        device_init_s = device_init(backend, device)
    else:
        reason = "; ".join(c["reason"] for c in checked)
        device_rec = {"status": "not_run", "reason": reason, "checked": checked}
    context_init_s = warm_device_context(args.model, args.model_module, decoder) if args.model else None
    prepared, loader_import_s = None, None
    if args.method in loaders.BY_NAME:  # its knobs and its import, outside the clock like import torch
        t0 = time.perf_counter_ns()
        knobs = json.loads(getattr(args, "loader_knobs", None) or "{}")
        prepared = loaders.prepare(args.method, knobs, paths)
        loader_import_s = (time.perf_counter_ns() - t0) / 1e9
    before = snapshot(held)
    before["cache"] = cache_before(paths)
    together = None
    if getattr(args, "at", None) is not None or getattr(args, "start_file", None) is not None:
        together = start_now(args)  # a storm's load: every preparation is done, the clock starts next
    clock.start()
    sd, notes = load(args.method, paths, getattr(args, "state_key", None), prepared)
    clock.mark("loader_return")
    module = None
    if args.model:
        module = populate(sd, args.model, args.populate, args.model_module, decoder)
        clock.mark("module_populated")
    t0 = time.perf_counter_ns()
    refusal = mps_refusal(sd) if backend == "mps" else None
    clock.probe_ns += time.perf_counter_ns() - t0  # disklab's own check, outside the stage times
    where, holder = "cpu", module if module is not None else sd
    if refusal:
        clock.skip("device_placed", refusal)
    elif backend:
        if module is not None:
            module.to(device)
        else:
            holder = {k: v.to(device) for k, v in sd.items()}
        synchronize(backend)
        clock.mark("device_placed")
        clock.stages["device_placed"].update(backend=backend, device=device)
        where = device
    else:
        clock.skip("device_placed", device_rec["reason"])
    response = first_response(clock, module, args.model_module, where) if module is not None else {}
    tensors = list(sd.values())  # the loader's own tensors, on the host, wherever the module went
    checksum, touched = touch(tensors)
    clock.mark("all_touched")
    _KEEP[:] = [sd, holder]
    if prepared is not None:
        notes["loader"], notes["read_path"] = loaders.describe(prepared)
    return {
        "method": args.method,
        "path": paths[0],
        **({"paths": paths} if len(paths) > 1 else {}),
        "file_size_bytes": sum(os.stat(p).st_size for p in paths),
        "model": args.model,
        "populate": args.populate if args.model else None,
        "pid": os.getpid(),
        "system": SYSTEM,
        "torch_version": torch.__version__,
        "device": device_rec,
        "process": {
            "spawn_to_main_s": (_MAIN_WALL_NS - args.spawn_wall_ns) / 1e9 if args.spawn_wall_ns else None,
            "import_s": _IMPORT_NS / 1e9,
            "device_init_s": device_init_s,
            "device_context_init_s": context_init_s,
            **({"loader_import_s": loader_import_s} if prepared is not None else {}),
        },
        "before": before,
        "residency_trust": cache.residency_trust(paths[0]),
        "stage_order": clock.order(),
        "stages": clock.stages,
        "probe_s": clock.probe_ns / 1e9,
        "residency_probe": "held",  # cache.HeldResidency: no probe opened the file while the clock ran
        **({"together": together} if together is not None else {}),
        "n_tensors": len(tensors),
        "touched_bytes": touched,
        "checksum": checksum,
        **response,
        **notes,
    }


def release() -> None:
    """Drop what :func:`measure` keeps alive: for a caller that measures again in its own process (bench)."""
    _KEEP.clear()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """This module's command line: the arguments :func:`measure` takes."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("method", choices=METHODS)
    ap.add_argument("path", nargs="+", help="the file; several: a sharded model's files, in load order")
    ap.add_argument("--model", help="DecoderLM config name: the file holds its state dict")
    ap.add_argument("--populate", choices=POPULATE, default="copy")
    ap.add_argument("--decoder-config", default=None, help="DecoderConfig keyword arguments as JSON")
    ap.add_argument("--state-key", default=None, help="torch.load: the weights sit under this key")
    ap.add_argument("--loader-knobs", default=None, help="a production loader's inventory knobs, JSON")
    ap.add_argument(
        "--model-module", default="disklab_host.loadlab.model", help="module with CONFIGS and DecoderLM"
    )
    ap.add_argument("--spawn-wall-ns", type=int, default=0, help="parent's time.time_ns() at spawn")
    ap.add_argument("--hold", action="store_true", help="after printing, wait for a line on stdin")
    ap.add_argument("--no-io-record", action="store_true", help="leave out the I/O record (bench only)")
    add_start_arguments(ap, required=False)  # a storm's load: its start (together.start)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(json.dumps(measure(args)), flush=True)
    if args.hold:
        sys.stdin.readline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
