"""The production loaders users are sold, as load methods on the same clock as torch.load and load_file.

One table, :data:`LOADERS`: each loader's setting name (``lab_run_load_loaders``), its exact pip pins
and why, the import that checks it, its own knobs with the pinned version's documented defaults, how it
reads the file (``reads_through_mapping`` decides the cold proof's major-faults part; a loader that
reads with O_DIRECT bypasses the page cache) and whether it needs a GPU. One small adapter per loader
(``_<name>_prepare`` before the clock: knobs into the environment, the import; ``_<name>_load`` inside
it: the loader's own load call, from the same start as every other method, giving a dict name -> tensor)
and one that reads, after the clock, how it actually read (``_<name>_read_path``).

Knobs are left at the loader's documented defaults unless the inventory sets them
(``lab_run_load_loader_knobs``, :func:`check_settings`); every sample records each knob's value and
where it came from (``default`` or ``inventory``).

Standard library only at module level: preflight, provision and the lab runner import the table with
the host's own Python, before or outside the lab venv; each adapter imports torch and its loader inside
the function, in load_one.py's fresh process.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..common.facts import not_run

SETTING = "lab_run_load_loaders"
KNOBS_SETTING = "lab_run_load_loader_knobs"
# The venv's record (venvprobe.RECORD_NAME), read here by name: this module is imported by provision, so
# it cannot import provision back.
VENV_RECORD = "disklab-venv.json"
RECORD_KEY = "loader_results"  # where provision keeps each loader's install and import outcome
IMPORT_TIMEOUT_S = 300


@dataclass(frozen=True)
class Knob:
    """One knob of a loader: ``lab_run_load_loader_knobs: {LOADER: {name: value}}``.

    ``env`` is the environment variable the loader reads it from (None: an argument of its load
    call); ``default`` the pinned version's own default (None: the loader decides at run time, as
    ``default_text`` says), with ``default_source`` saying where that is documented. ``kind`` is
    int, float, bool or str; ``minimum`` and ``choices`` are the values :meth:`check` accepts.
    """

    name: str
    kind: type
    default: object
    default_source: str
    meaning: str
    env: str | None = None
    minimum: float | None = None
    choices: tuple[str, ...] | None = None
    default_text: str | None = None

    def check(self, loader: str, value: object) -> object:
        """``value`` when it fits this knob; raises ValueError naming the setting, the knob and the rule."""
        where = f"{KNOBS_SETTING}.{loader}.{self.name}"
        ok = isinstance(value, self.kind) and not (self.kind is not bool and isinstance(value, bool))
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise ValueError(f"{where} must be {self.kind.__name__}, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{where} must be >= {self.minimum}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{where} must be one of {list(self.choices)}, got {value!r}")
        return value


@dataclass(frozen=True)
class Loader:
    """One production loader (see the module doc). ``pins`` are exact ``NAME==VERSION`` requirement
    strings for pip, installed beside the lab venv's own pins; ``pin_why`` says why each was chosen.
    ``file_format`` is the format it reads (``safetensors`` or ``tensorizer``, whose files prep.py
    writes); ``read_path`` how the pinned version reads a local file by default (its docs or code).
    """

    name: str
    title: str
    dist: str
    pins: tuple[str, ...]
    pin_why: str
    import_check: str
    file_format: str
    reads_through_mapping: bool
    read_path: str
    needs_gpu: bool
    knobs: tuple[Knob, ...] = field(default=())
    gpu_why: str = ""

    def knob(self, name: str) -> Knob:
        return next(k for k in self.knobs if k.name == name)


_RUNAI_SRC = "runai-model-streamer 0.17.1: docs/src/env-vars.md, and its own configuration line"
_FST_SRC = "fastsafetensors 0.5.0: SafeTensorsFileLoader's signature (loader.py)"
_IT_SRC = "instanttensor 0.2.2: safe_open's docstring (_impl.py)"
_TZ_SRC = "tensorizer 2.12.1: TensorDeserializer's docstring, _choose_dynamic_num_readers (serialization.py)"

LOADERS: tuple[Loader, ...] = (
    Loader(
        name="model_streamer",
        title="Run:ai Model Streamer",
        dist="runai-model-streamer",
        pins=("runai-model-streamer==0.17.1", "humanize==4.17.0"),
        pin_why=(
            "0.17.1 is the newest release, a py3-none-manylinux_2_28_x86_64 wheel (its native libstreamer.so "
            "inside), so it installs for any CPython 3 here; it imports humanize, which its metadata leaves "
            "unpinned, so humanize is pinned to 4.17.0 (newest) for the same venv on every host"
        ),
        import_check="from runai_model_streamer import SafetensorsStreamer",
        file_format="safetensors",
        reads_through_mapping=False,
        read_path=(
            "its own threads or io_uring read the file into CPU buffers: by default it tries io_uring "
            "with O_DIRECT, then libaio with O_DIRECT, then buffered synchronous reads (the first the host "
            "serves); the strategy it resolved is read from its own log after the clock"
        ),
        needs_gpu=False,
        knobs=(
            Knob(
                "concurrency",
                int,
                16,
                _RUNAI_SRC,
                "OS threads reading the file",
                "RUNAI_STREAMER_CONCURRENCY",
                1,
            ),
            Knob(
                "chunk_bytesize",
                int,
                2097152,
                _RUNAI_SRC,
                "bytes each thread reads at once (synchronous reader)",
                "RUNAI_STREAMER_CHUNK_BYTESIZE",
                2097152,
            ),
            Knob(
                "memory_limit_bytes",
                int,
                40_000_000_000,
                _RUNAI_SRC,
                "CPU buffer limit (-1 unlimited, 0 minimum)",
                "RUNAI_STREAMER_MEMORY_LIMIT",
                -1,
            ),
            Knob(
                "fs_strategy",
                str,
                "io_uring_direct,libaio_direct,sync_buffered",
                _RUNAI_SRC,
                "filesystem read strategies, first the host serves wins",
                "RUNAI_STREAMER_FS_STRATEGY",
            ),
            Knob(
                "fs_chunk_bytesize",
                int,
                8388608,
                _RUNAI_SRC,
                "bytes per read of the asynchronous readers (io_uring, libaio)",
                "RUNAI_STREAMER_FS_CHUNK_BYTESIZE",
                4096,
            ),
            Knob(
                "fs_queue_depth",
                int,
                None,
                _RUNAI_SRC,
                "reads in flight, node-wide (asynchronous readers)",
                "RUNAI_STREAMER_FS_QUEUE_DEPTH",
                1,
                # 0.17.1's own configuration line said 64 at concurrency 16 and 4 at concurrency 4
                default_text="the streamer's own, from the concurrency when unset (64 at concurrency 16)",
            ),
        ),
    ),
    Loader(
        name="fastsafetensors",
        title="fastsafetensors",
        dist="fastsafetensors",
        pins=("fastsafetensors==0.5.0",),
        pin_why=(
            "0.5.0 is the newest release and has a cp311 manylinux_2_28 x86_64 wheel; its one runtime "
            "dependency, typer, is unpinned in its metadata and left so (only its CLI uses it)"
        ),
        import_check="from fastsafetensors import SafeTensorsFileLoader, SingleGroup",
        file_format="safetensors",
        reads_through_mapping=False,
        read_path=(
            "its native threads pread(2) the file into a buffer (nogds: a bounce buffer), with O_DIRECT on a "
            "local filesystem and buffered on network and RAM filesystems (fastsafetensors.common."
            "is_odirect_enabled, asked before the clock); GPUDirect Storage when nogds is false, on a GPU"
        ),
        needs_gpu=False,
        knobs=(
            Knob(
                "nogds",
                bool,
                True,
                "disklab's choice, not the loader's: its own default (nogds=False) asks for GPUDirect "
                "Storage, which reads into GPU memory; its CPU example passes nogds=True",
                "read with pread(2), not GDS",
            ),
            Knob("bbuf_size_kb", int, 16384, _FST_SRC, "bounce buffer size, KiB", minimum=1),
            Knob("max_threads", int, 16, _FST_SRC, "reader threads", minimum=1),
            Knob(
                "odirect",
                str,
                "auto",
                "fastsafetensors 0.5.0: is_odirect_enabled (common.py)",
                "O_DIRECT: auto = its filesystem policy, on = 1, off = 0",
                "FASTSAFETENSORS_ODIRECT",
                choices=("auto", "on", "off"),
            ),
        ),
    ),
    Loader(
        name="instanttensor",
        title="InstantTensor",
        dist="instanttensor",
        pins=("instanttensor==0.2.2",),
        pin_why=(
            "0.2.2 is the newest release and has a cp311 manylinux_2_28 x86_64 wheel; it needs torch>=2.8, "
            "which the lab venv's torch==2.13.0 meets"
        ),
        import_check="import instanttensor",
        file_format="safetensors",
        reads_through_mapping=False,
        read_path=(
            "io_uring, else libaio, with O_DIRECT into a GPU buffer on a disk filesystem, and a mapping "
            "(MMAP) on tmpfs and ramfs (its docs); not observed on real hardware by this disklab"
        ),
        needs_gpu=True,
        gpu_why=(
            "instanttensor.safe_open accepts only a CUDA device (it raises ValueError 'InstantTensor only "
            "supports CUDA devices for now' for any other)"
        ),
        knobs=(
            Knob(
                "backend",
                str,
                None,
                _IT_SRC,
                "I/O backend(s), comma-separated",
                "INSTANTTENSOR_BACKEND",
                default_text="the loader's choice: URING,AIO on disk, MMAP on tmpfs/ramfs",
            ),
            Knob(
                "chunk_size",
                int,
                None,
                _IT_SRC,
                "bytes per file I/O",
                "INSTANTTENSOR_CHUNK_SIZE",
                1,
                default_text="the loader's choice, by storage type",
            ),
            Knob(
                "concurrency",
                int,
                None,
                _IT_SRC,
                "worker threads (MMAP and CUFILE backends)",
                "INSTANTTENSOR_CONCURRENCY",
                1,
                default_text="the loader's choice, by backend",
            ),
            Knob(
                "io_depth",
                int,
                None,
                _IT_SRC,
                "I/O operations in flight",
                "INSTANTTENSOR_IO_DEPTH",
                1,
                default_text="the loader's choice, by storage type",
            ),
            Knob(
                "buffer_size",
                int,
                None,
                _IT_SRC,
                "GPU buffer bytes",
                "INSTANTTENSOR_BUFFER_SIZE",
                1,
                default_text="the loader's choice, from the tensor sizes",
            ),
            Knob(
                "max_free_mem_usage",
                float,
                0.5,
                _IT_SRC,
                "largest share of free GPU memory for its buffer",
                "INSTANTTENSOR_MAX_FREE_MEM_USAGE",
                0.0,
            ),
        ),
    ),
    Loader(
        name="tensorizer",
        title="tensorizer",
        dist="tensorizer",
        pins=("tensorizer==2.12.1",),
        pin_why=(
            "2.12.1 is the newest release, a pure-Python py3-none-any wheel; its dependencies (protobuf, "
            "psutil, boto3, redis, hiredis, libnacl) are unpinned in its metadata and come from PyPI"
        ),
        import_check="from tensorizer import TensorDeserializer, TensorSerializer",
        file_format="tensorizer",
        reads_through_mapping=False,
        read_path=(
            "its reader threads readinto() the file through ordinary buffered file objects (read(2), through "
            "the page cache); its own file format, written once from the big safetensors weights by prep"
        ),
        needs_gpu=False,
        knobs=(
            Knob(
                "num_readers",
                int,
                None,
                _TZ_SRC,
                "reader threads",
                minimum=1,
                default_text="dynamic: 8 for a local file, at most one per tensor",
            ),
            Knob("verify_hash", bool, False, _TZ_SRC, "check each tensor's stored hash"),
        ),
    ),
)
BY_NAME: dict[str, Loader] = {loader.name: loader for loader in LOADERS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
# The manifest key of the file each file format is read from (prep.py writes the tensorizer ones).
BIG_FILE = {"safetensors": "big_safetensors", "tensorizer": "big_tensors"}


def check_settings(settings: dict) -> tuple[list[str], dict]:
    """``(loaders, knobs)`` from a host's settings (``load_loaders``, ``load_loader_knobs``), checked.

    Raises ValueError naming the setting and the known names: a loader that is not in :data:`LOADERS`,
    a knob for a loader that is unknown or not set in ``lab_run_load_loaders``, a knob the loader does
    not have, or a value that breaks the knob's rule (:meth:`Knob.check`). Unset gives ``([], {})``.
    """
    names = settings.get("load_loaders") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{SETTING} must be a list of loader names, got {names!r}; known: {list(NAMES)}")
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"{SETTING} has unknown loader(s) {unknown}; known: {list(NAMES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{SETTING} names a loader more than once: {names}")
    knobs = settings.get("load_loader_knobs") or {}
    if not isinstance(knobs, dict):
        raise ValueError(f"{KNOBS_SETTING} must be a mapping of loader to knobs, got {knobs!r}")
    out: dict = {}
    for loader, values in knobs.items():
        if loader not in BY_NAME:
            raise ValueError(f"{KNOBS_SETTING} names unknown loader {loader!r}; known: {list(NAMES)}")
        if loader not in names:
            raise ValueError(
                f"{KNOBS_SETTING} sets knobs of {loader!r}, which {SETTING} does not name ({names})"
            )
        if not isinstance(values, dict):
            raise ValueError(f"{KNOBS_SETTING}.{loader} must be a mapping of knob to value, got {values!r}")
        known = {k.name: k for k in BY_NAME[loader].knobs}
        for knob, value in values.items():
            if knob not in known:
                raise ValueError(
                    f"{KNOBS_SETTING}.{loader} has unknown knob {knob!r}; known: {sorted(known)}"
                )
            out.setdefault(loader, {})[knob] = known[knob].check(loader, value)
    return list(names), out


def resolve_knobs(loader: str, inventory: dict | None) -> dict:
    """Every knob of ``loader`` with its value and where it came from:
    ``{name: {"value", "source": "default" | "inventory", "env", "default", "default_source", "meaning"}}``
    (``default_text`` where the loader decides the default at run time)."""
    inventory = inventory or {}
    out = {}
    for k in BY_NAME[loader].knobs:
        set_here = k.name in inventory
        out[k.name] = {
            "value": inventory[k.name] if set_here else k.default,
            "source": "inventory" if set_here else "default",
            "env": k.env,
            "default": k.default,
            "default_source": k.default_source,
            "meaning": k.meaning,
            **({"default_text": k.default_text} if k.default_text else {}),
        }
    return out


# --- which loaders can run here (the lab step, in the lab venv) -----------------------------------------

# Run with the lab venv's Python: the import check of one loader, then its installed version.
_CHECK = (
    "import importlib.metadata as md, json, sys\n"
    "{check}\n"
    "print(json.dumps({{'version': md.version(sys.argv[1])}}))\n"
)


def venv_record(prefix: str | None = None) -> dict | None:
    """The lab venv's record (provision wrote it) in ``prefix`` (default sys.prefix), or None."""
    try:
        rec = json.loads((Path(prefix or sys.prefix) / VENV_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def import_check(loader: str, python: str | None = None, env: dict | None = None) -> dict:
    """Import ``loader`` in a fresh ``python`` (default: this one; environment ``env``, default this
    process's) and read its version: ``{"status": "ok", "version"}``, or ``{"status": "not_run",
    "reason"}`` with the error's last line."""
    spec = BY_NAME[loader]
    try:
        cp = subprocess.run(
            [python or sys.executable, "-c", _CHECK.format(check=spec.import_check), spec.dist],
            capture_output=True,
            text=True,
            timeout=IMPORT_TIMEOUT_S,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return not_run(f"`{spec.import_check}` could not be run: {exc}")
    if cp.returncode != 0:
        return not_run(f"`{spec.import_check}` failed: {_last_line(cp.stderr) or f'exit {cp.returncode}'}")
    try:
        return {"status": "ok", "version": json.loads(_last_line(cp.stdout))["version"]}
    except (ValueError, KeyError):
        return not_run(f"`{spec.import_check}` printed no version: {_last_line(cp.stdout)!r}")


def cuda_missing() -> str | None:
    """Why this process's torch cannot use CUDA, or None when it can (imports torch)."""
    import torch  # only when a GPU-only loader is set

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"torch.cuda.is_available() is False (torch {torch.__version__} is a CPU-only build)"
    build = f"torch {torch.__version__}, CUDA {torch.version.cuda}"
    return f"torch.cuda.is_available() is False ({build}: no GPU this process can use)"


def status(loader: str, record: dict | None, *, cuda_why: Callable[[], str | None] = cuda_missing) -> dict:
    """Whether ``loader`` can run in this lab venv: ``{"status": "ok", "version"}``, or not_run and why.

    In order: pip could not install it when the venv was provisioned (``record[RECORD_KEY]``, pip's own
    last line); it does not import here (not installed: the venv was provisioned without it; or another
    import error); it needs a GPU and this torch has no CUDA (``cuda_why``, "needs CUDA: ...").
    """
    spec = BY_NAME[loader]
    outcome = ((record or {}).get(RECORD_KEY) or {}).get(loader)
    if outcome and outcome.get("status") == "not_run":
        return not_run(outcome["reason"])
    got = import_check(loader)
    if got["status"] != "ok":
        if "No module named" in got["reason"] and outcome is None:
            return not_run(
                f"{spec.dist} is not installed in the lab venv ({sys.prefix}): lab_venv installs it when "
                f"{SETTING} names it ({got['reason']})"
            )
        return got
    if spec.needs_gpu:
        why = cuda_why()
        if why:
            return not_run(f"needs CUDA: {spec.gpu_why}; {why}")
    return got


def summary(names: list[str], knobs: dict, statuses: dict) -> dict:
    """What the section says of the loaders asked for: ``{"requested", "loaders": {name: {...}}}``,
    each with its title, status (and reason or version), pins and why, how it reads, whether it needs
    a GPU (and whether its GPU path ran), and its knobs (:func:`resolve_knobs`)."""
    out = {}
    for name in names:
        spec = BY_NAME[name]
        st = statuses[name]
        out[name] = {
            **st,
            "title": spec.title,
            "dist": spec.dist,
            "pins": list(spec.pins),
            "pin_why": spec.pin_why,
            "file_format": spec.file_format,
            "reads_through_mapping": spec.reads_through_mapping,
            "read_path": spec.read_path,
            "needs_gpu": spec.needs_gpu,
            "gpu_path_run": spec.needs_gpu and st["status"] == "ok",
            "knobs": resolve_knobs(name, knobs.get(name)),
        }
    return {"requested": list(names), "loaders": out}


# --- the adapters (in load_one.py's fresh process) ----------------------------------------------------


def _set_env(knobs: dict, mapping: Callable[[object], str] = str) -> None:
    """Put each knob the inventory set into its environment variable (defaults stay unset: the
    loader's own default applies)."""
    for k in knobs.values():
        if k["env"] and k["source"] == "inventory":
            os.environ[k["env"]] = mapping(k["value"])


# The streamer's log directory, in the temp directory: ``disklab-runai-<pid>-<random>``, named with the pid
# of the load process that made it. That process removes it after the clock, or at its exit when the load
# raised; one killed outright leaves it, and the next prepare removes every such directory of this user
# whose process has ended (:func:`_remove_ended_logs`).
RUNAI_LOG_PREFIX = "disklab-runai-"


def _remove_ended_logs(tmp: Path | None = None) -> list[Path]:
    """Remove this user's streamer log directories whose load process has ended; return them."""
    removed = []
    for path in Path(tmp or tempfile.gettempdir()).glob(f"{RUNAI_LOG_PREFIX}*-*"):
        pid = path.name[len(RUNAI_LOG_PREFIX) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or path.lstat().st_uid != os.getuid() or not path.is_dir():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:  # ended: its directory is left over
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:  # alive (another user's pid), or gone meanwhile
            continue
    return removed


def _model_streamer_prepare(knobs: dict, paths: list[str]) -> dict:
    _set_env(knobs)
    _remove_ended_logs()
    # A dozen INFO lines go to a file, so the filesystem strategy it resolved can be read after the clock.
    log_dir = Path(tempfile.mkdtemp(prefix=f"{RUNAI_LOG_PREFIX}{os.getpid()}-"))
    atexit.register(shutil.rmtree, log_dir, True)  # a load that raised never reaches read_path
    log = log_dir / "streamer.log"
    os.environ["RUNAI_STREAMER_LOG_FILE"] = str(log)
    os.environ.setdefault("RUNAI_STREAMER_LOG_LEVEL", "INFO")
    from runai_model_streamer import SafetensorsStreamer

    return {"cls": SafetensorsStreamer, "log": log}


def _model_streamer_load(ctx: dict, paths: list[str]) -> dict:
    sd: dict = {}
    with ctx["cls"]() as streamer:
        streamer.stream_files(list(paths))
        for name, tensor in streamer.get_tensors():
            sd[name] = tensor
    return sd


def _model_streamer_read_path(ctx: dict) -> dict:
    try:
        text = ctx["log"].read_text(errors="replace")
    except OSError as exc:
        text, missing = "", str(exc)
    else:
        missing = "its log names no filesystem strategy"
    found = re.findall(r"Filesystem strategy: (\S+)", text)
    shutil.rmtree(ctx["log"].parent, ignore_errors=True)
    if not found:
        return {"page_cache": "unknown", "how": f"not known: {missing}", "source": "RUNAI_STREAMER_LOG_FILE"}
    strategy = found[-1]
    direct = strategy.endswith("_direct")
    return {
        "page_cache": "bypassed" if direct else "used",
        "how": f"{strategy}: {'O_DIRECT reads, which bypass the page cache' if direct else 'buffered reads'}",
        "source": "the streamer's own log line 'Filesystem strategy: ...' (RUNAI_STREAMER_LOG_FILE)",
    }


def _fastsafetensors_prepare(knobs: dict, paths: list[str]) -> dict:
    odirect = knobs["odirect"]["value"]
    if odirect != "auto":
        os.environ["FASTSAFETENSORS_ODIRECT"] = "1" if odirect == "on" else "0"
    import torch
    from fastsafetensors import SafeTensorsFileLoader, SingleGroup
    from fastsafetensors.common import get_fs_type, is_odirect_enabled

    direct = [is_odirect_enabled(p, buffered_ram_fs=True) for p in paths]
    return {
        "make": lambda: SafeTensorsFileLoader(
            SingleGroup(),
            torch.device("cpu"),
            nogds=knobs["nogds"]["value"],
            bbuf_size_kb=knobs["bbuf_size_kb"]["value"],
            max_threads=knobs["max_threads"]["value"],
        ),
        "direct": direct[0],
        "fstype": get_fs_type(paths[0]) or "unknown",
    }


def _fastsafetensors_load(ctx: dict, paths: list[str]) -> dict:
    loader = ctx["make"]()
    try:
        loader.add_filenames({0: list(paths)})
        buffers = loader.copy_files_to_device()
        sd = {name: buffers.get_tensor(name) for name in loader.get_keys()}
        buffers.close()  # the tensors keep their storage (fastsafetensors: shared ownership)
    finally:
        loader.close()
    return sd


def _fastsafetensors_read_path(ctx: dict) -> dict:
    direct = ctx["direct"]
    return {
        "page_cache": "bypassed" if direct else "used",
        "how": f"pread(2) {'with O_DIRECT, which bypasses the page cache' if direct else 'buffered'} "
        f"on {ctx['fstype']}",
        "source": "fastsafetensors.common.is_odirect_enabled(path, buffered_ram_fs=True), its own policy, "
        "asked before the clock (a filesystem that refuses O_DIRECT makes it fall back to buffered reads)",
    }


def _instanttensor_prepare(knobs: dict, paths: list[str]) -> dict:
    _set_env(knobs)
    import instanttensor
    import torch

    return {"module": instanttensor, "device": torch.cuda.current_device()}


def _instanttensor_load(ctx: dict, paths: list[str]) -> dict:
    sd: dict = {}
    with ctx["module"].safe_open(list(paths), framework="pt", device=ctx["device"]) as f:
        for name, tensor in f.tensors():
            sd[name] = tensor  # on the GPU: loader_return already includes the copy to the device
    return sd


def _instanttensor_read_path(ctx: dict) -> dict:
    return {
        "page_cache": "unknown",
        "how": "URING or AIO with O_DIRECT on disk filesystems, MMAP on tmpfs/ramfs (its docs; not observed)",
        "source": "instanttensor 0.2.2's safe_open docstring",
    }


def _tensorizer_prepare(knobs: dict, paths: list[str]) -> dict:
    from tensorizer import TensorDeserializer

    kwargs = {name: knobs[name]["value"] for name in ("num_readers", "verify_hash")}
    return {"cls": TensorDeserializer, "kwargs": kwargs}


def _tensorizer_load(ctx: dict, paths: list[str]) -> dict:
    sd: dict = {}
    for p in paths:
        with ctx["cls"](p, device="cpu", lazy_load=False, **ctx["kwargs"]) as de:
            sd.update(de.items())
    return sd


def _tensorizer_read_path(ctx: dict) -> dict:
    return {
        "page_cache": "used",
        "how": "readinto() on buffered file objects: read(2) through the page cache",
        "source": "tensorizer 2.12.1's TensorDeserializer (serialization.py) opens local files with open()",
    }


_ADAPTERS = {
    "model_streamer": (_model_streamer_prepare, _model_streamer_load, _model_streamer_read_path),
    "fastsafetensors": (_fastsafetensors_prepare, _fastsafetensors_load, _fastsafetensors_read_path),
    "instanttensor": (_instanttensor_prepare, _instanttensor_load, _instanttensor_read_path),
    "tensorizer": (_tensorizer_prepare, _tensorizer_load, _tensorizer_read_path),
}


def prepare(loader: str, inventory_knobs: dict | None, paths: list[str]) -> dict:
    """Before the clock: the loader's knobs resolved (:func:`resolve_knobs`), its environment set, its
    import done. Returns the context :func:`load` and :func:`describe` take."""
    knobs = resolve_knobs(loader, inventory_knobs)
    prep, _, _ = _ADAPTERS[loader]
    return {"loader": loader, "knobs": knobs, "paths": list(paths), "ctx": prep(knobs, list(paths))}


def load(prepared: dict, paths: list[str]) -> dict:
    """The loader's own load call over ``paths`` (a sharded model's files, in turn): a dict name -> tensor
    (CPU tensors; InstantTensor's land on the GPU)."""
    _, call, _ = _ADAPTERS[prepared["loader"]]
    return call(prepared["ctx"], list(paths))


def describe(prepared: dict) -> tuple[dict, dict]:
    """After the clock: ``(loader, read_path)`` for the sample. ``loader`` is ``{"name", "version",
    "knobs"}``; ``read_path`` is ``{"mapping": bool, "page_cache": "used" | "bypassed" | "unknown",
    "how", "source"}``, how it actually read where the loader says so (proof.py reads it)."""
    import importlib.metadata as md

    name = prepared["loader"]
    spec = BY_NAME[name]
    _, _, read = _ADAPTERS[name]
    loader = {"name": name, "version": md.version(spec.dist), "knobs": prepared["knobs"]}
    return loader, {"mapping": spec.reads_through_mapping, **read(prepared["ctx"])}
