"""Step "pickle_safety": does this host's torch.load refuse a checkpoint that runs code?

A ``.pt`` file is a zip whose ``data.pkl`` is a pickle, and unpickling can call
any function the pickle names (the lesson, "torch.load vs safetensors"; the
Python ``pickle`` docs' warning). Since PyTorch 2.6 ``torch.load`` defaults to
``weights_only=True``, an unpickler limited to an allowlist (PyTorch docs,
torch.load and "Serialization semantics").

The step writes a real ``torch.save`` checkpoint (a tensor plus one object whose
``__reduce__`` is ``open(marker, "a")``: it creates an empty marker file and
does nothing else), then:

1. reads the pickle's opcodes with ``pickletools.genops``, without running
   them, and finds the GLOBAL and the REDUCE that would call ``open``;
2. asks torch's own static scan (``get_unsafe_globals_in_checkpoint``);
3. calls ``torch.load(path)`` with the installed version's default, in a fresh
   process whose environment has no ``TORCH_FORCE_*WEIGHTS_ONLY_LOAD`` override,
   and records whether it refused, the exception and whether the marker exists;
4. as a control, unpickles ``data.pkl`` in another fresh process with
   ``pickle.Unpickler`` allowing exactly one callable, ``open`` restricted to the
   marker path, which shows that a permissive load would have created the marker.

The unsafe setting of ``weights_only`` is never passed anywhere.
"""

from __future__ import annotations

import builtins
import inspect
import json
import os
import pickletools
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import torch

from ..common.facts import unavailable

ENV_OVERRIDES = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
TRUE_VALUES = ("1", "y", "yes", "true")  # what torch.serialization accepts for those variables
CRAFTED = "crafted.pt"
MARKER = "MARKER_payload_ran"
CHILD_TIMEOUT_S = 300
CONTROL_METHOD = "pickle.Unpickler in a fresh process; only open(marker, 'a') allowed, other globals stubbed"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DETAIL = re.compile(
    r"(Unsupported global: GLOBAL \S+ was not an allowed global by default\.|[^\n]*blocked[^\n]*)"
)

# Child 1: the load under test, exactly as a user would call it (no weights_only argument).
_LOAD_CHILD = """
import json, sys, torch
try:
    obj = torch.load(sys.argv[1])
    print(json.dumps({"refused": False, "loaded_type": type(obj).__name__}))
except Exception as exc:
    cls = type(exc)
    print(json.dumps({"refused": True, "error_type": cls.__qualname__, "error_module": cls.__module__,
                      "error_message": str(exc)}))
"""

# Child 2: the control. Only open(marker, "a") may run; every other global is a no-op stub.
_CONTROL_CHILD = """
import builtins, io, json, pickle, sys, zipfile
path, member, marker = sys.argv[1:4]
calls = []
def only_marker(file, mode="r", *args, **kwargs):
    if file != marker or mode != "a":
        raise PermissionError(f"control refuses open({file!r}, {mode!r})")
    calls.append([file, mode])
    with builtins.open(file, mode):
        pass
def stub(*args, **kwargs):
    return None
OPEN = {("io", "open"), ("builtins", "open"), ("__builtin__", "open")}
class OnlyMarker(pickle.Unpickler):
    def find_class(self, module, name):
        return only_marker if (module, name) in OPEN else stub
    def persistent_load(self, pid):
        return None
with zipfile.ZipFile(path) as z:
    OnlyMarker(io.BytesIO(z.read(member))).load()
print(json.dumps({"calls": calls}))
"""


class MarkerPayload:
    """Pickles as ``open(marker, "a")``: unpickling it creates an empty file at ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (builtins.open, (self.marker, "a"))


def craft(path: Path, marker: Path) -> None:
    """Write a real ``torch.save`` checkpoint at ``path`` that would create ``marker`` if unpickled unsafely.

    It holds ``{"weight": 4 fp32 zeros, "config": MarkerPayload(marker)}``.
    """
    with open(path, "wb") as f:
        torch.save({"weight": torch.zeros(4), "config": MarkerPayload(marker)}, f)


def pickle_member(path: Path) -> str:
    """Name of the ``data.pkl`` record in a torch zip checkpoint. Raises ValueError if there is none."""
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
    if len(names) != 1:
        raise ValueError(f"{path} is not a torch zip checkpoint with one data.pkl, has {names}")
    return names[0]


class _Global(str):
    """A callable named by GLOBAL or STACK_GLOBAL, as ``module.name``."""


_STRING_OPS = {
    "BINUNICODE",
    "SHORT_BINUNICODE",
    "UNICODE",
    "BINUNICODE8",
    "STRING",
    "BINSTRING",
    "SHORT_BINSTRING",
}
_INT_OPS = {"BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4"}
_TUPLE_OPS = {"TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE"}


def scan_pickle(data: bytes) -> dict:
    """Static read of a pickle (pickletools.genops): which callables each REDUCE would call.

    Replays the opcodes' stack effects on placeholders, with the memo, and
    executes nothing. Returns ``{"globals": ["module.name", ...], "reduce_ops":
    int, "calls": [{"callable": "module.name" | None, "args": [str | int | None, ...]}]}``,
    where an argument that is not a string or an integer is None.
    """
    stack: list = []
    memo: dict = {}
    globals_, calls = [], []
    for op, arg, _pos in pickletools.genops(data):
        name = op.name
        if name == "MARK":
            stack.append(pickletools.markobject)
            continue
        if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
            continue
        if name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo.get(arg))
            continue
        popped = _pop(stack, op.stack_before)
        if name == "GLOBAL":
            value = _Global(arg.replace(" ", "."))
        elif name == "STACK_GLOBAL":
            value = _Global(".".join(str(p) for p in popped))
        elif name in _STRING_OPS or name in _INT_OPS:
            value = arg
        elif name in _TUPLE_OPS:
            value = tuple(popped)
        elif name == "REDUCE":
            func, args = popped
            func = str(func) if isinstance(func, _Global) else None
            args = [
                a if isinstance(a, (str, int)) else None for a in (args if isinstance(args, tuple) else ())
            ]
            calls.append({"callable": func, "args": args})
            value = None
        else:
            value = None
        if name in ("GLOBAL", "STACK_GLOBAL"):
            globals_.append(str(value))
        stack.extend([value] * len(op.stack_after))
    return {"globals": globals_, "reduce_ops": len(calls), "calls": calls}


def _pop(stack: list, before: list) -> list:
    """Pop what an opcode consumes (its ``stack_before``); a stackslice goes back to the MARK."""
    if pickletools.markobject in before:
        i = len(stack) - 1 - stack[::-1].index(pickletools.markobject)
        items, stack[i:] = stack[i + 1 :], []
        fixed = before.index(pickletools.markobject)
        head = stack[len(stack) - fixed :] if fixed else []
        del stack[len(stack) - fixed :]
        return head + items
    n = len(before)
    items = stack[len(stack) - n :] if n else []
    del stack[len(stack) - n :]
    return items


def weights_only_default() -> tuple[bool | dict, str]:
    """The installed torch.load's ``weights_only`` default, and how it was found.

    Reads ``inspect.signature(torch.load)``; when that default is None (decided at
    call time, as in torch >= 2.6) asks ``torch.serialization._default_to_weights_only(None)``,
    the function torch.load itself calls. Environment overrides are reported apart.
    """
    default = inspect.signature(torch.load).parameters["weights_only"].default
    if isinstance(default, bool):
        return default, f"inspect.signature(torch.load): weights_only defaults to {default}"
    decide = getattr(torch.serialization, "_default_to_weights_only", None)
    if default is None and decide is not None:
        value = bool(decide(None))
        return value, (
            "inspect.signature(torch.load): weights_only=None, resolved at call time by "
            f"torch.serialization._default_to_weights_only(pickle_module=None), which returns {value}"
        )
    return unavailable(f"torch.load's weights_only default is {default!r} and no resolver was found"), (
        "inspect.signature(torch.load)"
    )


def _child(code: str, args: list[str], env: dict, cwd: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        check=False,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


def run(cfg: dict, workdir: Path) -> dict:
    """Craft the checkpoint in ``workdir``, show what torch.load does with it; return the section.

    See the module docstring for the steps and ``pickle_safety.schema.json``
    for the fields. Raises RuntimeError when a child process dies without a result.
    """
    workdir = Path(workdir).resolve()
    path, marker = workdir / CRAFTED, workdir / MARKER
    marker.unlink(missing_ok=True)
    craft(path, marker)
    member = pickle_member(path)
    with zipfile.ZipFile(path) as z:
        scan = scan_pickle(z.read(member))
        members = z.namelist()
    payload = next((c for c in scan["calls"] if c["args"][:1] == [str(marker)]), None)
    if payload is None:
        raise RuntimeError(
            f"the crafted pickle has no REDUCE calling a function on {marker}: {scan['calls']}"
        )
    try:
        torch_scan = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except AttributeError as exc:
        torch_scan = unavailable(f"torch {torch.__version__} has no get_unsafe_globals_in_checkpoint: {exc}")

    default, source = weights_only_default()
    host_env = {name: os.environ.get(name) for name in ENV_OVERRIDES}
    clean_env = {k: v for k, v in os.environ.items() if k not in ENV_OVERRIDES}

    start = time.perf_counter()
    load = _child(_LOAD_CHILD, [str(path)], clean_env, workdir)
    load_wall_s = time.perf_counter() - start
    marker_created = marker.exists()
    marker.unlink(missing_ok=True)

    start = time.perf_counter()
    control = _child(_CONTROL_CHILD, [str(path), member, str(marker)], clean_env, workdir)
    control_wall_s = time.perf_counter() - start
    control_marker = marker.exists()
    marker.unlink(missing_ok=True)

    return {
        "status": "ok",
        "torch_version": torch.__version__,
        "weights_only_default": default,
        "weights_only_default_source": source,
        "env_overrides": host_env,
        "env_override_active": _override(host_env),
        "crafted_path": str(path),
        "crafted_size_bytes": path.stat().st_size,
        "crafted_members": members,
        "pickle_member": member,
        "pickle_globals": scan["globals"],
        "pickle_reduce_ops": scan["reduce_ops"],
        "payload_callable": payload["callable"],
        "payload_args": payload["args"],
        "payload_found_by": "pickletools.genops (static; nothing executed)",
        "torch_unsafe_globals": torch_scan,
        "load_call": "torch.load(path) in a fresh process, no weights_only argument, TORCH_FORCE_* unset",
        "refused": load["refused"],
        "error_type": load.get("error_type"),
        "error_module": load.get("error_module"),
        "error_message": _ANSI.sub("", load["error_message"]) if load["refused"] else None,
        "error_detail": _detail(load.get("error_message")),
        "load_wall_s": load_wall_s,
        "marker_path": str(marker),
        "marker_created": marker_created,
        "control_method": CONTROL_METHOD,
        "control_calls": control["calls"],
        "control_marker_created": control_marker,
        "control_wall_s": control_wall_s,
    }


def _detail(message: str | None) -> str | None:
    """The unpickler's one-line reason ("Unsupported global: GLOBAL io.open ..."), if the message has one."""
    found = _DETAIL.search(_ANSI.sub("", message)) if message else None
    return found.group(1).strip() if found else None


def _override(env: dict) -> str | None:
    """Which TORCH_FORCE_* variable set in this host's environment would change torch.load's default."""
    active = [name for name, value in env.items() if value is not None and value.lower() in TRUE_VALUES]
    return ",".join(active) or None
