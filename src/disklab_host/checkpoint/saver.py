"""Checkpoint savers: naive, atomic, safetensors, and the lesson's broken variants.

Every saver has the signature ``save(state_dict, path) -> None``. The state
dict maps names to fp32 tensors plus a ``"step"`` entry (a 0-d int64 tensor),
so a load can tell the old checkpoint from the new one.

Run as a script, it is the process that crash.py kills (see :func:`main`).

Sources: the lesson ("Saving a file so no crash can break it", Break It 1 and
3); rename(2) and fsync(2) for what each call promises; strace of
safetensors 0.8.0 on the dev host for what ``save_file`` does (see
:func:`safetensors_save`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import time
from pathlib import Path

import torch

from ..common.fsio import fsync_dir
from ..common.units import MIB
from . import killpoint

# Temp files written by disklab's own savers: "<name>.tmp" next to the target.
TEMP_SUFFIX = ".tmp"
TENSOR_BYTES = 4 * MIB  # one 1024 x 1024 fp32 tensor
# Bytes that Break It 1 leaves in Python's buffer: below any io buffer size (>= 4 KiB).
TAIL_BYTES = 1024
# The hidden temp file safetensors 0.8.0 writes next to the target (Rust tempfile
# crate defaults: ".tmp" and 6 random alphanumerics), e.g. ".tmpGuPbzQ".
SAFETENSORS_TEMP_RE = re.compile(r"\.tmp[A-Za-z0-9]{6}")


def make_state(state_mib: int, step: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A state dict of ``state_mib // 4`` fp32 tensors of shape (1024, 1024) and a step.

    Values are seeded, so two calls with the same arguments are equal.
    Raises ValueError when ``state_mib`` is not a positive multiple of 4.
    """
    if state_mib <= 0 or state_mib % 4:
        raise ValueError(f"state_mib must be a positive multiple of 4, got {state_mib}")
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    state = {f"layer{i}": torch.randn(1024, 1024, generator=gen) for i in range(state_mib // 4)}
    state["step"] = torch.tensor(step, dtype=torch.int64)
    return state


def temp_path(path: str | os.PathLike) -> Path:
    """Where :func:`atomic_save` writes before the rename: ``path`` + ``.tmp``."""
    path = Path(path)
    return path.with_name(path.name + TEMP_SUFFIX)


def is_temp_name(path: str | os.PathLike, name: str, *, fmt: str = "pt") -> bool:
    """True when ``name`` is a temp file that a disklab saver of ``fmt`` leaves next to ``path``.

    Exact patterns: ``<checkpoint name>.tmp`` (atomic and fsync-before-flush
    saves) and, for ``fmt="safetensors"`` only, safetensors' own hidden temp
    ``.tmp`` + 6 alphanumerics. Raises ValueError for an unknown ``fmt``.
    """
    if fmt not in ("pt", "safetensors"):
        raise ValueError(f"fmt must be 'pt' or 'safetensors', got {fmt!r}")
    if name == temp_path(path).name:
        return True
    return fmt == "safetensors" and SAFETENSORS_TEMP_RE.fullmatch(name) is not None


def recover(path: str | os.PathLike, *, fmt: str = "pt") -> list[dict]:
    """Remove the stray temp files a killed save left next to ``path``; return what it removed.

    Only names matched by :func:`is_temp_name` are removed: the checkpoint
    itself and every other file stay. A temp file is never loaded or renamed
    into place: it may be incomplete, and a kill cannot tell (the lesson,
    Measure: "delete stray .tmp files and move on"). The safetensors pattern
    matches any program's Rust-tempfile name, so never run two saves in one
    directory at once. Returns ``[{"name": str, "size_bytes": int}]``;
    raises ValueError for an unknown ``fmt``.
    """
    if fmt not in FORMATS.values():
        raise ValueError(f"fmt must be 'pt' or 'safetensors', got {fmt!r}")
    path = Path(path)
    removed = []
    for entry in os.scandir(path.parent):
        if entry.is_file(follow_symlinks=False) and is_temp_name(path, entry.name, fmt=fmt):
            size = entry.stat(follow_symlinks=False).st_size
            os.unlink(entry.path)
            removed.append({"name": entry.name, "size_bytes": size})
    return sorted(removed, key=lambda r: r["name"])


def naive_save(obj: dict, path: str | os.PathLike) -> None:
    """``torch.save`` straight to the final path: it truncates the old file first."""
    torch.save(obj, path)


def atomic_save(obj: dict, path: str | os.PathLike, *, fsync=os.fsync) -> None:
    """Save so that no crash leaves a broken ``path``.

    Writes ``path.tmp`` in the same directory, flushes Python's buffer, fsyncs
    the file, ``os.replace``s it over ``path``, then fsyncs the directory.
    If fsync raises, the error propagates, the rename never happens, the temp
    file is removed and the old checkpoint stays (fsyncgate: a failed fsync is
    never retried; the lesson, Break It 3). ``fsync`` is injectable only so
    tests can make it fail.
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_before_flush_save(obj: dict, path: str | os.PathLike) -> None:
    """Break It 1: :func:`atomic_save` with fsync *before* flush.

    The serialized checkpoint goes through Python's buffer in two writes; the
    last ``TAIL_BYTES`` are still in that buffer when fsync runs, so they are
    not durable at the rename. Every kill test passes (the flush still happens
    before the process can be killed after the rename); a power cut does not.
    ``torch.save(obj, f)`` itself flushes ``f`` when it finishes
    (torch/serialization.py, ``_open_zipfile_writer_buffer.__exit__``), which
    is why the bytes are serialized first: see
    :func:`fsync_before_flush_torch_save` for that masked variant.
    """
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    path = Path(path)
    tmp = temp_path(path)
    with open(tmp, "wb") as f:
        f.write(data[:-TAIL_BYTES])
        f.write(data[-TAIL_BYTES:])  # smaller than the buffer: stays in this process
        os.fsync(f.fileno())
        f.flush()
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_before_flush_torch_save(obj: dict, path: str | os.PathLike) -> None:
    """fsync before flush around ``torch.save(obj, f)``: torch flushed ``f`` already.

    The ordering bug is in the code, but torch 2.x flushes the file object at
    the end of torch.save, so nothing is left in Python's buffer at the fsync.
    The power-cut simulator shows whether the installed torch still does this.
    """
    path = Path(path)
    tmp = temp_path(path)
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        os.fsync(f.fileno())
        f.flush()
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_error_ignoring_save(obj: dict, path: str | os.PathLike, *, fsync=os.fsync) -> None:
    """Break It 3, the wrong way: :func:`atomic_save` that swallows an fsync error and renames anyway.

    After a failed fsync the data's state on the drive is unknown, yet this
    replaces the old checkpoint with it. Kept only to show the damage.
    """
    path = Path(path)
    tmp = temp_path(path)
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        with contextlib.suppress(OSError):  # the bug being demonstrated
            fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def import_safetensors() -> None:
    """Import safetensors' torch API (as :func:`safetensors_save` does); raises what that import raises.

    torch is imported with this module; the power-cut check's first child calls this too, so a Python
    that lacks either is found before any save runs.
    """
    import safetensors.torch  # noqa: F401


def safetensors_save(obj: dict, path: str | os.PathLike) -> None:
    """``safetensors.torch.save_file``: its own hidden temp file and rename, no fsync.

    What safetensors 0.8.0 does (strace on the dev host): creates
    ``.tmpXXXXXX`` in the target's directory (O_EXCL, mode 0600),
    ftruncates it to the full size at once (so its st_size says "complete"
    while it is still a sparse file of zeros), writes header and tensors,
    renames it over the target, and calls neither fsync nor fdatasync on the
    file or the directory. The final file keeps mode 0600.
    """
    from safetensors.torch import save_file

    save_file(obj, str(path))


SAVERS = {
    "naive": naive_save,
    "atomic": atomic_save,
    "safetensors": safetensors_save,
    "fsync_before_flush": fsync_before_flush_save,
}
FORMATS = {"naive": "pt", "atomic": "pt", "safetensors": "safetensors", "fsync_before_flush": "pt"}


def save_with_recovery(mode: str, obj: dict, path: str | os.PathLike) -> list[dict]:
    """:func:`recover`, then save ``obj`` to ``path`` with the saver named ``mode``.

    Returns what recover removed. Raises ValueError naming ``mode`` when unknown.
    """
    if mode not in SAVERS:
        raise ValueError(f"mode must be one of {sorted(SAVERS)}, got {mode!r}")
    removed = recover(path, fmt=FORMATS[mode])
    SAVERS[mode](obj, path)
    return removed


def _say(*words: object) -> None:
    sys.stdout.write(" ".join(str(w) for w in words) + "\n")
    sys.stdout.flush()


def _save_and_report(mode: str, state: dict, path: str, gate: bool = False) -> None:
    removed = recover(path, fmt=FORMATS[mode])  # every save starts by clearing a killed save's temp
    _say("recovered", json.dumps(removed))
    if gate:  # wait for "go" on stdin, so a tracer can attach before the first write
        killpoint.allow_tracing()
    _say("ready", os.getpid())
    if gate and os.read(0, 3) != b"go\n":
        raise RuntimeError("gated save: expected 'go' on stdin")
    start = time.perf_counter()
    SAVERS[mode](state, path)
    _say("saved", time.perf_counter() - start)


def serve(state_mib: int, seed: int = 0) -> None:
    """Serve saves read from stdin, one forked child per save, so a kill costs no torch import.

    Protocol, one line each: stdin ``save MODE PATH STEP [gate]``; the child
    prints ``recovered JSON``, ``ready PID`` (state built, save starts now; with
    ``gate``, it starts only when stdin next says ``go``, so that strace can
    attach first) and, if it is not killed, ``saved SECONDS``; this process
    then prints ``reaped PID RC`` (RC < 0: killed by signal -RC). The state of
    each step is built once here and shared with the children copy-on-write.
    """
    states: dict[int, dict] = {}
    _say("serving", os.getpid())
    for line in sys.stdin:
        cmd, mode, path, step, *gate = line.split()
        if cmd != "save" or mode not in SAVERS or gate not in ([], ["gate"]):
            raise ValueError(
                f"bad request {line!r}: want 'save MODE PATH STEP [gate]', MODE in {sorted(SAVERS)}"
            )
        state = states.setdefault(int(step), make_state(state_mib, int(step), seed))
        pid = os.fork()
        if pid == 0:  # the child: save, then leave without running parent cleanup
            code = 0
            try:
                _save_and_report(mode, state, path, gate=bool(gate))
            except BaseException as exc:
                _say("error", f"{type(exc).__name__}: {exc}")
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        _say("reaped", pid, os.waitstatus_to_exitcode(status))


def main(argv: list[str] | None = None) -> int:
    """``saver.py MODE PATH --step N --state-mib M``: one save; or ``saver.py --serve --state-mib M``."""
    ap = argparse.ArgumentParser(description="Save a checkpoint of fp32 tensors (disklab crash lab).")
    ap.add_argument("mode", nargs="?", choices=sorted(SAVERS))
    ap.add_argument("path", nargs="?")
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--state-mib", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve", action="store_true", help="serve saves from stdin (see serve())")
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.state_mib, args.seed)
        return 0
    if not args.mode or not args.path:
        ap.error("MODE and PATH are required unless --serve")
    _save_and_report(args.mode, make_state(args.state_mib, args.step, args.seed), args.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
