"""One load measurement in this fresh process; prints one JSON line.

Usage: python load_one.py METHOD PATH [--model NAME --populate copy|assign]
       [--spawn-wall-ns NS] [--hold]

METHOD is one of :data:`METHODS`. Every readiness stage is timed from one
start point, the moment recorded just before the load call, and the times
leave out disklab's own probes (mincore, RSS), whose total is ``probe_s``:

- ``loader_return``: the load call returned;
- ``module_populated`` (with ``--model``): a DecoderLM holds the weights, either
  built normally then ``load_state_dict`` (``copy``), or built on the meta
  device then ``load_state_dict(assign=True)`` (``assign``);
- ``all_touched``: every tensor summed once (the lesson's touch, with a float32
  accumulator instead of a float copy of each tensor);
- ``device_placed``: ``.to("cuda")`` and ``torch.cuda.synchronize()``; recorded
  as not run, with the reason, when CUDA is not available.

At each stage: residency of PATH (mincore), current RSS and peak RSS. Peak RSS
is getrusage's ru_maxrss, the peak since this process started (imports
included), normalised to bytes (labcommon.peak_rss_bytes); ``before`` holds the
same right before the load call, so the load's own growth is visible.
``--hold`` waits for a line on stdin after printing (workers.py reads
/proc/PID/smaps_rollup meanwhile). Interpreter start and imports are timed
separately (``process``), never inside a stage.
"""

from __future__ import annotations

import time

_MAIN_WALL_NS = time.time_ns()
_IMPORT_START = time.perf_counter_ns()

import argparse  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from ..cache import pagecache as cache  # noqa: E402
from ..common.facts import not_run, peak_rss_bytes, unavailable  # noqa: E402

_IMPORT_NS = time.perf_counter_ns() - _IMPORT_START

METHODS = ("torch.load", "torch.load-mmap", "load_file", "one-tensor", "load_file+willneed")
POPULATE = ("copy", "assign")
SYSTEM = platform.system()
# Where device_placed puts the weights; tests set "meta" to run the stage without a GPU.
DEVICE = "cuda"
# What the last measure() loaded, kept alive so --hold shows its memory in smaps_rollup.
_KEEP: list = []


def willneed_hint(path: str) -> str:
    """Tell the kernel the whole file is about to be read; return which hint was given.

    posix_fadvise(2) POSIX_FADV_WILLNEED where Python has it (Linux), else
    madvise(2) MADV_WILLNEED over a read-only mapping (macOS).
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            return "posix_fadvise(POSIX_FADV_WILLNEED)"
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
            mm.madvise(mmap.MADV_WILLNEED)
        return "madvise(MADV_WILLNEED)"
    finally:
        os.close(fd)


def load(method: str, path: str) -> tuple[dict, dict]:
    """Run one loader; return (name -> CPU tensor, notes about the call).

    Raises ValueError naming METHOD for an unknown method. torch.load always
    runs with weights_only=True.
    """
    notes: dict = {}
    if method == "torch.load":
        sd = torch.load(path, map_location="cpu", weights_only=True)
    elif method == "torch.load-mmap":
        sd = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    elif method == "load_file":
        sd = load_file(path)
    elif method == "load_file+willneed":
        notes["hint"] = willneed_hint(path)
        sd = load_file(path)
    elif method == "one-tensor":
        with safe_open(path, framework="pt") as f:
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


def snapshot(path: str) -> dict:
    """Residency of ``path`` and this process's RSS and peak RSS, in bytes."""
    res = cache.residency(path)
    return {
        "resident_bytes": res["resident_bytes"],
        "resident_fraction": res["fraction"],
        "rss_bytes": current_rss_bytes(),
        "peak_rss_bytes": peak_rss_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, SYSTEM),
    }


class StageClock:
    """Times stages from one start point, leaving out the time spent in probes."""

    def __init__(self, path: str):
        self.path = path
        self.start_ns = 0
        self.probe_ns = 0
        self.stages: dict[str, dict] = {}

    def start(self) -> None:
        self.probe_ns = 0
        self.start_ns = time.perf_counter_ns()

    def mark(self, stage: str) -> None:
        now = time.perf_counter_ns()
        elapsed_ns = now - self.start_ns - self.probe_ns
        self.stages[stage] = {"status": "ok", "time_s": elapsed_ns / 1e9, **snapshot(self.path)}
        self.probe_ns += time.perf_counter_ns() - now

    def skip(self, stage: str, reason: str) -> None:
        self.stages[stage] = not_run(reason)


def touch(tensors) -> tuple[float, int]:
    """Sum every tensor once (reads every byte); return (checksum, bytes touched)."""
    total, nbytes = 0.0, 0
    for t in tensors:
        total += float(t.sum(dtype=torch.float32))
        nbytes += t.numel() * t.element_size()
    return total, nbytes


def populate(sd: dict, model_name: str, mode: str, model_module: str) -> torch.nn.Module:
    """Build the model ``model_name`` and give it the weights ``sd`` (see module docstring)."""
    mod = importlib.import_module(model_module)
    config = mod.CONFIGS[model_name]
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


def warm_device_context(model_name: str, model_module: str) -> float:
    """Build the model once on the meta device before the clock starts; return its time in s.

    The first module built under ``with torch.device(...)`` in a process imports
    torch._dynamo (nn.Embedding's init did it here; seen with
    ``python -X importtime`` on torch 2.13: over a second), a one-time process
    cost like ``import torch``. Building one throwaway instance first keeps it
    out of the module_populated stage of the meta + assign path; the time is
    recorded as ``device_context_init_s``.
    """
    mod = importlib.import_module(model_module)
    t0 = time.perf_counter_ns()
    with torch.device("meta"):
        mod.DecoderLM(mod.CONFIGS[model_name])
    return (time.perf_counter_ns() - t0) / 1e9


def measure(args: argparse.Namespace) -> dict:
    """Run every stage once for ``args``; return the JSON-able record."""
    clock = StageClock(args.path)
    context_init_s = warm_device_context(args.model, args.model_module) if args.model else None
    before = snapshot(args.path)
    clock.start()
    sd, notes = load(args.method, args.path)
    clock.mark("loader_return")
    holder = sd
    if args.model:
        holder = populate(sd, args.model, args.populate, args.model_module)
        clock.mark("module_populated")
    tensors = list(holder.state_dict().values()) if args.model else list(sd.values())
    checksum, touched = touch(tensors)
    clock.mark("all_touched")
    if torch.cuda.is_available():
        if args.model:
            holder.to(DEVICE)
        else:
            holder = {k: v.to(DEVICE) for k, v in sd.items()}
        torch.cuda.synchronize()
        clock.mark("device_placed")
        clock.stages["device_placed"]["device"] = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    else:
        clock.skip("device_placed", "torch.cuda.is_available() is False on this host")
    _KEEP[:] = [sd, holder]
    return {
        "method": args.method,
        "path": args.path,
        "file_size_bytes": os.stat(args.path).st_size,
        "model": args.model,
        "populate": args.populate if args.model else None,
        "pid": os.getpid(),
        "system": SYSTEM,
        "torch_version": torch.__version__,
        "process": {
            "spawn_to_main_s": (_MAIN_WALL_NS - args.spawn_wall_ns) / 1e9 if args.spawn_wall_ns else None,
            "import_s": _IMPORT_NS / 1e9,
            "device_context_init_s": context_init_s,
        },
        "before": before,
        "residency_trust": cache.residency_trust(args.path),
        "stage_order": list(clock.stages),
        "stages": clock.stages,
        "probe_s": clock.probe_ns / 1e9,
        "n_tensors": len(tensors),
        "touched_bytes": touched,
        "checksum": checksum,
        **notes,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("method", choices=METHODS)
    ap.add_argument("path")
    ap.add_argument("--model", help="DecoderLM config name: the file holds its state dict")
    ap.add_argument("--populate", choices=POPULATE, default="copy")
    ap.add_argument(
        "--model-module", default="disklab_host.loadlab.model", help="module with CONFIGS and DecoderLM"
    )
    ap.add_argument("--spawn-wall-ns", type=int, default=0, help="parent's time.time_ns() at spawn")
    ap.add_argument("--hold", action="store_true", help="after printing, wait for a line on stdin")
    args = ap.parse_args(argv)
    print(json.dumps(measure(args)), flush=True)
    if args.hold:
        sys.stdin.readline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
