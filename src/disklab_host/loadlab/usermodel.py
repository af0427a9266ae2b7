"""The user's own model for the load lab (setting ``lab_run_load_model``): find it, check it, describe it.

The setting takes one of:

- a ``.safetensors`` file;
- a directory of sharded safetensors with ``model.safetensors.index.json``
  (or the index file itself);
- a torch.save file: a training checkpoint (``ckpt.pt``) or a ``pytorch_model.bin``;
- a directory of sharded ``.bin`` files with ``pytorch_model.bin.index.json`` (or
  the index file itself), or a directory holding ``pytorch_model.bin``;
- a Hugging Face repo id (``ORG/NAME``, e.g. ``HuggingFaceTB/SmolLM2-135M-Instruct``),
  looked up offline in the host's Hugging Face cache: ``$HF_HUB_CACHE``, else
  ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; ``models--ORG--NAME/refs/main``
  names the snapshot ``snapshots/<rev>/``, whose files are often symlinks to
  ``../../blobs/<sha256>``; safetensors are used where the snapshot has them, else
  its .bin files. Nothing is downloaded.

Each file's format is sniffed from its bytes, never its name (:func:`sniff`):
safetensors; torch.save's zip format (torch >= 1.6: a zip whose records include
``<name>/data.pkl``); torch.save's legacy format (before 1.6, or
``_use_new_zipfile_serialization=False``: a pickle of torch's magic number, then
the protocol version, sys info, the object and the storage keys, then the raw
storages). A Git LFS pointer (the text ``version https://git-lfs.github.com/spec/v1``
with the real file's ``oid`` and ``size``), a zip without its central directory or
a pickle that ends early (a truncated copy) are refused with one line saying so.

The setting must name regular files: a file, or a directory whose entries are regular files or
directories (symlinks followed, as the load follows them). A FIFO, a socket or a device, named or held
there, is refused in one line naming the setting, the path and what it is (:func:`refuse_special`; the
preflight runs it before any work): opening a FIFO blocks until a writer comes, and a device such as
``/dev/zero`` reads as endless bytes with no size.

Every file is checked before any timing. A safetensors file with the standard
library only: its header (8-byte little-endian length, then JSON naming each tensor's
dtype, shape and data_offsets; the safetensors format description) must parse
and fit in the file, and an index's weight_map must name shards that exist and
hold the tensors it assigns to them. A file that is not what it claims raises
:class:`UserModelError` with one line naming the file and what is wrong.
A torch.save file is only ever opened with ``weights_only=True``
(:func:`load_torch`; with mmap for a zip, so the check reads little; torch is
imported only by the functions that open one); one that needs globals outside
torch's allowlist is refused with a line naming them, and never retried with
the unsafe unpickler (weights_only is always True). A training checkpoint whose weights sit under a key
(``{"model": state_dict, "optimizer": ..., "step": ...}``) is described by
:func:`find_state_dict`.
Nothing here writes: the user's files are never changed.

``config.json`` next to the weights decides whether module_populated can run:
:func:`decoder_config` maps the Llama-style keys onto ``model.DecoderConfig``'s
fields, and says why not when the model is not one DecoderLM can hold.
"""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import re
import stat
import struct
import zipfile
from pathlib import Path

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
BIN_INDEX_NAME = "pytorch_model.bin.index.json"  # transformers' name for sharded torch.save weights
BIN_SINGLE_NAME = "pytorch_model.bin"
INDEX_NAMES = (INDEX_NAME, BIN_INDEX_NAME)
TORCH_FORMATS = ("zip", "legacy")  # sniff()'s names for torch.save's two formats
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"  # the Git LFS pointer file spec's first line
ZIP_MAGIC = b"PK\x03\x04"  # a zip's local file header
# torch.serialization.MAGIC_NUMBER, the first pickle of a legacy torch.save file
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PICKLES = 5  # magic number, protocol version, sys info, the object, the storage keys
# Keys a training checkpoint keeps its model's weights under, tried in this order.
STATE_KEYS = ("state_dict", "model", "model_state_dict", "module", "net")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors refuses larger headers
# bytes per element of each safetensors dtype (the format description)
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


class UserModelError(ValueError):
    """The user's model is missing or not what it claims; the message is one line naming the file."""


SETTING = "lab_run_load_model"
# What a file that is neither a regular file nor a directory is, in a refusal (stat(2)'s file types).
SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _special_kind(path: Path) -> str | None:
    """What ``path`` is when it is a FIFO, a socket or a device (stat, following symlinks), else None
    (a regular file, a directory, or nothing there: a dangling link is left to the checks that read)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    return next((what for test, what in SPECIAL_KINDS if test(mode)), None)


def locate(setting: str, env: dict | None = None) -> tuple[Path, dict]:
    """Where ``setting`` points on this host: ``(path, {})`` for a file or directory there, or a repo id's
    snapshot directory in the Hugging Face cache with ``{"repo_id", "revision", "hub_cache",
    "hub_cache_from"}``. Raises UserModelError (one line) when it names nothing here. Reads file types and
    the cache's ``refs/main`` only."""
    text = str(setting).strip()
    path = Path(text).expanduser()
    if path.exists():
        return path, {}
    if REPO_ID.match(text) and not text.endswith((".safetensors", ".json", ".bin", ".pt", ".pth")):
        return _snapshot(text, env)
    raise UserModelError(f"{text}: no such file or directory on this host, and not an ORG/NAME repo id")


def refuse_special(setting: str, env: dict | None = None) -> tuple[Path, dict]:
    """Where ``setting`` points (:func:`locate`); raise UserModelError naming ``lab_run_load_model`` when it
    names nothing on this host, or names, or a directory it names holds, anything that is not a regular
    file or a directory: a FIFO, a socket, a character or block device.

    Reads only file types (stat(2), following symlinks), never the files: it cannot block on a FIFO. A
    directory's own entries are checked (the files a load reads sit there, shards named by an index
    included), not its subdirectories; a repo id's snapshot directory likewise.
    """
    try:
        path, extra = locate(setting, env)
    except UserModelError as exc:
        raise UserModelError(f"{SETTING}: {exc}") from None
    what = _special_kind(path)
    if what:
        raise UserModelError(
            f"{SETTING}: {path} is {what}, not a regular file or a directory of them: "
            "name the model's weight file or its directory"
        )
    if not path.is_dir():
        return path, extra
    try:
        entries = sorted(path.iterdir())
    except OSError as exc:
        raise UserModelError(f"{SETTING}: {path}: cannot be listed: {exc.strerror or exc}") from None
    for entry in entries:
        what = _special_kind(entry)
        if what:
            raise UserModelError(
                f"{SETTING}: the directory {path} holds {entry.name}, {what}: the model's directory must "
                "hold only regular files and directories"
            )
    return path, extra


def hf_hub_cache(env: dict | None = None) -> tuple[Path, str]:
    """The Hugging Face hub cache directory and where that choice came from.

    ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else ``~/.cache/huggingface/hub``
    (huggingface_hub's documented environment variables).
    """
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser(), "HF_HUB_CACHE"
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub", "HF_HOME/hub"
    return Path("~/.cache/huggingface/hub").expanduser(), "~/.cache/huggingface/hub (default)"


def read_header(path: Path) -> dict[str, dict]:
    """Tensor name -> ``{"dtype", "shape", "data_offsets"}`` from a safetensors file's header.

    Raises UserModelError naming ``path`` when the file is unreadable, too short,
    its header length or JSON is bad, or a tensor's byte range does not fit the
    file or its dtype and shape.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise UserModelError(
                    f"{path}: not a safetensors file: {size} bytes, shorter than its 8-byte header length"
                )
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise UserModelError(
                    f"{path}: not a safetensors file: its header length {n} does not fit a {size}-byte file"
                )
            raw = f.read(n)
    except OSError as exc:
        raise UserModelError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserModelError(f"{path}: not a safetensors file: its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise UserModelError(f"{path}: not a safetensors file: its header is not a JSON object")
    header.pop("__metadata__", None)
    data = size - 8 - n
    for name, t in header.items():
        try:
            begin, end = t["data_offsets"]
            shape, itemsize = list(t["shape"]), DTYPE_BYTES[t["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise UserModelError(f"{path}: tensor {name!r} has a malformed header entry: {t!r}") from None
        count = 1
        for d in shape:
            count *= d
        if not 0 <= begin <= end <= data or end - begin != count * itemsize:
            raise UserModelError(
                f"{path}: tensor {name!r} claims bytes {begin}..{end} for {t['dtype']} {shape}, "
                f"but the file holds {data} data bytes"
            )
    if not header:
        raise UserModelError(f"{path}: holds no tensors")
    return header


def _index_shards(index: Path) -> list[tuple[Path, list[str]]]:
    """The shards an index (model.safetensors.index.json or pytorch_model.bin.index.json) names, in
    first-use order, each with the tensors it assigns to it; each shard must exist."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        if not isinstance(weight_map, dict) or not weight_map:
            raise TypeError("weight_map is empty or not an object")
    except OSError as exc:
        raise UserModelError(f"{index}: cannot be read: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        what = "safetensors" if index.name == INDEX_NAME else "weights"
        raise UserModelError(f"{index}: not a {what} index: {type(exc).__name__}: {exc}") from None
    order: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        order.setdefault(shard, []).append(tensor)
    shards = []
    for shard, tensors in order.items():
        path = index.parent / shard
        if not path.is_file():
            raise UserModelError(f"{index}: names shard {shard}, which is missing ({path})")
        shards.append((path, tensors))
    return shards


def _snapshot(repo_id: str, env: dict | None) -> tuple[Path, dict]:
    cache, where = hf_hub_cache(env)
    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    if not repo_dir.is_dir():
        raise UserModelError(
            f"{repo_id}: not in the Hugging Face cache on this host ({repo_dir} is missing; "
            f"cache from {where}); nothing is downloaded"
        )
    ref = repo_dir / "refs" / "main"
    try:
        rev = ref.read_text().strip()
    except OSError:
        raise UserModelError(f"{repo_id}: {ref} is missing, so no snapshot is the main revision") from None
    snap = repo_dir / "snapshots" / rev
    if not snap.is_dir():
        raise UserModelError(f"{repo_id}: refs/main names revision {rev}, but {snap} is missing")
    return snap, {"repo_id": repo_id, "revision": rev, "hub_cache": str(cache), "hub_cache_from": where}


def _lfs_pointer(path: Path, text: bytes) -> str:
    """The one line for a Git LFS pointer file: its oid and size (the pointer spec's keys)."""
    fields = dict(line.split(" ", 1) for line in text.decode("utf-8", "replace").splitlines() if " " in line)
    oid, size = fields.get("oid", "unknown"), fields.get("size", "unknown")
    return (
        f"{path}: a Git LFS pointer ({len(text)} bytes of text: oid {oid}, size {size}), not the weights: "
        "the real file was never fetched (git lfs pull, or download the model)"
    )


def _is_legacy(f) -> bool:
    """Whether the open file starts with torch's legacy magic-number pickle (PROTO, LONG1, STOP)."""
    try:
        ops = [(op.name, arg) for op, arg, _ in pickletools.genops(f)]
    except (ValueError, EOFError, UnicodeDecodeError, pickle.UnpicklingError):
        return False
    return [name for name, _ in ops] == ["PROTO", "LONG1", "STOP"] and ops[1][1] == LEGACY_MAGIC


def _check_legacy(path: Path, f, size: int) -> None:
    """Walk the legacy file's pickles without running them; one that ends early is a truncated file."""
    f.seek(0)
    for n in range(LEGACY_PICKLES):
        try:
            for _ in pickletools.genops(f):
                pass
        except (ValueError, EOFError, pickle.UnpicklingError, UnicodeDecodeError) as exc:
            raise UserModelError(
                f"{path}: a legacy (pre-1.6) torch.save file whose pickle {n + 1} of {LEGACY_PICKLES} ends "
                f"early ({exc}) in a {size}-byte file: truncated"
            ) from None


def _check_zip(path: Path, size: int) -> None:
    """The zip's central directory must be there and hold a torch.save ``<name>/data.pkl``."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserModelError(
            f"{path}: a zip (torch.save's format since 1.6) whose central directory is missing ({exc}) "
            f"in a {size}-byte file: truncated"
        ) from None
    if not any(n.count("/") == 1 and n.endswith("/data.pkl") for n in names):
        raise UserModelError(f"{path}: a zip file, but not a torch.save checkpoint (no <name>/data.pkl)")


def sniff(path: Path) -> str:
    """The format of ``path`` from its bytes: ``"safetensors"``, ``"zip"`` or ``"legacy"`` (torch.save's).

    A zip or legacy file is checked whole here (its central directory; its
    pickles, walked with pickletools without running them); anything else is
    checked as safetensors (:func:`read_header`). Raises UserModelError naming
    ``path`` for a Git LFS pointer, a truncated torch.save file, or a file that is
    none of these.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(1024)
            if head.startswith(LFS_POINTER):
                raise UserModelError(_lfs_pointer(path, head))
            if head.startswith(ZIP_MAGIC):
                _check_zip(path, size)
                return "zip"
            f.seek(0)
            if head[:1] == b"\x80" and _is_legacy(f):
                _check_legacy(path, f, size)
                return "legacy"
    except OSError as exc:
        raise UserModelError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        read_header(path)
    except UserModelError as exc:
        if path.suffix == ".safetensors":
            raise
        raise UserModelError(f"{exc}; nor a torch.save zip or legacy file, nor a Git LFS pointer") from None
    return "safetensors"


def _unsafe_line(path: Path, fmt: str, names: list[str]) -> str:
    first = " (torch names only the first it meets in a legacy file)" if fmt == "legacy" else ""
    return (
        f"{path}: a torch.save {fmt} checkpoint that needs globals outside torch's weights_only allowlist: "
        f"{', '.join(names)}{first}; it is loaded only with weights_only=True, so it was not loaded"
    )


def load_torch(path: Path, fmt: str, *, mmap: bool = False):
    """``torch.load(path, map_location="cpu", weights_only=True)``, ``mmap`` for a zip file; never
    with the unsafe unpickler.

    A zip file's pickle is first checked with
    torch.serialization.get_unsafe_globals_in_checkpoint (all its globals outside
    the allowlist, statically); a legacy file's refusal is read from torch's
    UnpicklingError ("Unsupported global: GLOBAL argparse.Namespace ..."), which
    names the first. Raises UserModelError with one line naming ``path``: those
    globals, or what torch.load could not read.
    """
    import torch

    if fmt == "zip":
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
        if unsafe:
            raise UserModelError(_unsafe_line(path, fmt, sorted(unsafe)))
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap and fmt == "zip")
    except pickle.UnpicklingError as exc:
        text = str(exc)
        names = list(dict.fromkeys(re.findall(r"GLOBAL (\S+)", text)))
        if names:
            raise UserModelError(_unsafe_line(path, fmt, names)) from None
        why = next((ln.strip() for ln in text.splitlines() if "WeightsUnpickler error" in ln), text[:300])
        raise UserModelError(f"{path}: torch.load(weights_only=True) refused it: {why}") from None
    except Exception as exc:  # the user's file: torch's own words, on one line
        msg = " ".join(str(exc).split())[:300]
        raise UserModelError(
            f"{path}: a torch.save {fmt} file that torch.load could not read ({type(exc).__name__}: {msg}): "
            "truncated or damaged"
        ) from None


def legacy_mmap_refusal(path: Path) -> str | None:
    """What this torch says to ``torch.load(path, mmap=True, weights_only=True)`` on a legacy file, on one
    line, or None if it loads. torch 2.13 refuses before reading: RuntimeError "mmap can only be used
    with files saved with `torch.save(PATH, _use_new_zipfile_serialization=True)` ..."."""
    import torch

    try:
        torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as exc:
        return f"torch {torch.__version__} raised {type(exc).__name__}: " + " ".join(str(exc).split())
    return None


def _is_state_dict(value) -> bool:
    import torch

    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in value.items())
    )


def _is_optimizer(key: str, value) -> bool:
    """An optimizer's state: named so, or shaped as Optimizer.state_dict() (``state``, ``param_groups``)."""
    return "optim" in key.lower() or (isinstance(value, dict) and {"state", "param_groups"} <= value.keys())


def find_state_dict(obj, path: Path) -> tuple[dict, str | None, dict]:
    """The state dict (str -> tensor) in what torch.load returned, the key it sits under, and the rest.

    ``obj`` itself when it is one (a pytorch_model.bin); else the first of
    :data:`STATE_KEYS` holding one, else the only top-level value that is one
    (not an optimizer's). Returns ``(state_dict, key or None, {"other_keys":
    [...], "optimizer_keys": [...]})``. Raises UserModelError naming ``path``
    when none is found.
    """
    if _is_state_dict(obj):
        return obj, None, {"other_keys": [], "optimizer_keys": []}
    if not isinstance(obj, dict):
        raise UserModelError(f"{path}: holds a {type(obj).__name__}, not a state dict or a dict holding one")
    keys = [k for k in obj if isinstance(k, str)]
    found = [k for k in STATE_KEYS if k in obj and _is_state_dict(obj[k])]
    if not found:
        found = [k for k in keys if _is_state_dict(obj[k]) and not _is_optimizer(k, obj[k])]
        if len(found) != 1:
            shown = ", ".join(repr(k) for k in keys[:8]) + (", ..." if len(keys) > 8 else "")
            why = "none of them is" if not found else f"{len(found)} of them are"
            raise UserModelError(
                f"{path}: a checkpoint with keys {shown}: {why} a state dict of tensors "
                f"(looked first under {', '.join(STATE_KEYS)})"
            )
    key = found[0]
    rest = [k for k in keys if k != key]
    return (
        obj[key],
        key,
        {"other_keys": rest, "optimizer_keys": [k for k in rest if _is_optimizer(k, obj[k])]},
    )


def weights_note(desc: dict) -> str | None:
    """One line on where the weights came from in a training checkpoint, or None for a bare state dict."""
    key = desc.get("state_key")
    if key is None:
        return None
    line = f"the weights are the state dict under the checkpoint's key {key!r}"
    opt = desc.get("optimizer_keys") or []
    if opt:
        line += (
            f"; its optimizer state ({', '.join(repr(k) for k in opt)}) is read by torch.load with the "
            "file but never loaded into the model"
        )
    other = [k for k in desc.get("other_keys") or [] if k not in opt]
    if other:
        line += f"; its other keys ({', '.join(repr(k) for k in other[:8])}) are not weights"
    return line


def _torch_tensors(shards: list[Path], fmt: str) -> tuple[dict, dict, dict]:
    """Each shard loaded (weights_only, mmap for zip): the tensors' {"dtype", "shape"}, where the
    state dict sat (``state_key``, ``other_keys``, ``optimizer_keys``; one key for every shard) and
    each shard's tensor names."""
    tensors: dict[str, dict] = {}
    where: dict = {}
    names: dict[Path, set] = {}
    for shard in shards:
        sd, key, rest = find_state_dict(load_torch(shard, fmt, mmap=True), shard)
        if where and where["state_key"] != key:
            raise UserModelError(f"{shard}: its weights sit under {key!r}, those of {shards[0]} under "
                                 f"{where['state_key']!r}")  # fmt: skip
        where = where or {"state_key": key, **rest}
        names[shard] = set(sd)
        for name, t in sd.items():
            tensors[name] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
        del sd
    return tensors, where, names


def _shards_of(base: Path) -> tuple[list[tuple[Path, list[str] | None]], bool]:
    """A directory's weight files (index first, safetensors before .bin), and whether an index named them."""
    for index in INDEX_NAMES:
        if (base / index).is_file():
            return _index_shards(base / index), True
    for single in (SINGLE_NAME, BIN_SINGLE_NAME):
        if (base / single).is_file():
            return [(base / single, None)], False
    raise UserModelError(
        f"{base}: has none of {INDEX_NAME}, {SINGLE_NAME}, {BIN_INDEX_NAME}, {BIN_SINGLE_NAME}"
    )


def resolve(setting: str, env: dict | None = None) -> dict:
    """Find and check the user's model; return its description. Reads only.

    Returns ``{"setting", "kind": "file" | "sharded" | "hf_repo", "format":
    "safetensors" | "zip" | "legacy" (:func:`sniff`, the same for every shard),
    "shards": [str] (files in load order, symlinks resolved), "size_bytes" (all
    shards), "tensors": {name: {"dtype", "shape"}}, "config_json": str | None, for
    a torch.save file "state_key" (None for a bare state dict), "other_keys" and
    "optimizer_keys" (see :func:`find_state_dict`), and for a repo "repo_id",
    "revision", "hub_cache", "hub_cache_from"}``. Raises UserModelError (one
    line naming the file or repo id) when it is missing or not what it claims.
    """
    base, extra = refuse_special(setting, env)
    single = base.is_file() and base.name not in INDEX_NAMES
    kind = "hf_repo" if extra else "file" if single else "sharded"
    if base.is_dir():
        listed, indexed = _shards_of(base)
        if kind != "hf_repo":
            kind = "sharded" if indexed else "file"
        config = base / "config.json"
    elif base.name in INDEX_NAMES:
        listed, config = _index_shards(base), base.parent / "config.json"
    else:
        listed, config = [(base, None)], base.parent / "config.json"
    shards = [p for p, _ in listed]
    formats = [sniff(p) for p in shards]
    for shard, fmt in zip(shards, formats, strict=True):
        if fmt != formats[0]:
            raise UserModelError(
                f"{shard}: is {fmt}, but {shards[0]} is {formats[0]}: the shards mix formats"
            )
    fmt = formats[0]
    where: dict = {}
    if fmt == "safetensors":
        per_shard = {p: read_header(p) for p in shards}
        tensors = {n: {"dtype": t["dtype"], "shape": list(t["shape"])} for h in per_shard.values()
                   for n, t in h.items()}  # fmt: skip
        names = {p: set(h) for p, h in per_shard.items()}
    else:
        tensors, where, names = _torch_tensors(shards, fmt)
    for p, assigned in listed:
        missing = [t for t in assigned or [] if t not in names[p]]
        if missing:
            raise UserModelError(
                f"{p}: lacks {len(missing)} tensor(s) the index assigns to it, first {missing[0]!r}"
            )
    real = [str(s.resolve()) for s in shards]
    return {
        "setting": str(setting).strip(),
        "kind": kind,
        "format": fmt,
        "shards": real,
        "size_bytes": sum(os.stat(s).st_size for s in real),
        "tensors": tensors,
        "config_json": str(config) if config.is_file() else None,
        **where,
        **extra,
    }


# Llama-style config.json key -> DecoderConfig field (Hugging Face LlamaConfig's names).
CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "intermediate_size": "intermediate_size",
    "rope_theta": "rope_theta",
    "rms_norm_eps": "rms_norm_eps",
}
HOLDABLE_ARCHITECTURES = ("LlamaForCausalLM",)


def decoder_config(config_json: str | None) -> tuple[dict | None, str | None]:
    """DecoderConfig keyword arguments from a Llama-style config.json, or (None, why not).

    DecoderLM holds a Llama-shaped decoder with tied embeddings, no biases,
    SiLU gates and head_dim = hidden_size / num_attention_heads.
    """
    if config_json is None:
        return None, "no config.json next to the weights, so the model's shape is unknown"
    try:
        cfg = json.loads(Path(config_json).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, f"{config_json}: cannot be read as JSON ({exc})"
    archs = cfg.get("architectures") or []
    if cfg.get("model_type") != "llama" and not set(archs) & set(HOLDABLE_ARCHITECTURES):
        return None, (
            f"{config_json}: model_type {cfg.get('model_type')!r} / architectures {archs} is not a "
            "Llama-style decoder, the only kind DecoderLM holds"
        )
    rules = (
        (
            cfg.get("tie_word_embeddings", True) is True,
            "tie_word_embeddings is false (DecoderLM has no lm_head)",
        ),
        (not cfg.get("attention_bias", False), "attention_bias is true (DecoderLM has no biases)"),
        (not cfg.get("mlp_bias", False), "mlp_bias is true (DecoderLM has no biases)"),
        (cfg.get("hidden_act", "silu") == "silu", f"hidden_act is {cfg.get('hidden_act')!r}, not silu"),
    )
    for ok, why in rules:
        if not ok:
            return None, f"{config_json}: {why}"
    kwargs = {}
    for key, field in CONFIG_KEYS.items():
        if key in cfg and cfg[key] is not None:
            kwargs[field] = cfg[key]
    kwargs.setdefault("num_kv_heads", kwargs.get("num_heads"))
    optional = ("rope_theta", "rms_norm_eps")
    missing = [k for k, f in CONFIG_KEYS.items() if f not in kwargs and f not in optional]
    if missing:
        return None, f"{config_json}: lacks {', '.join(missing)}"
    head_dim = cfg.get("head_dim")
    if head_dim is not None and head_dim * kwargs["num_heads"] != kwargs["hidden_size"]:
        return None, f"{config_json}: head_dim {head_dim} is not hidden_size / num_attention_heads"
    return kwargs, None


def shape_mismatch(want: dict[str, tuple], tensors: dict[str, dict]) -> str | None:
    """Why the file's tensors are not exactly DecoderLM's state dict (names and shapes), or None."""
    have = {k: tuple(v["shape"]) for k, v in tensors.items()}
    missing, unexpected = sorted(want.keys() - have.keys()), sorted(have.keys() - want.keys())
    wrong = sorted(k for k in want.keys() & have.keys() if want[k] != have[k])
    if not (missing or unexpected or wrong):
        return None
    parts = []
    for label, names in (("missing", missing), ("unexpected", unexpected), ("with another shape", wrong)):
        if names:
            parts.append(f"{len(names)} {label} (first {names[0]!r})")
    return "the weights' names/shapes do not match DecoderLM for config.json: " + ", ".join(parts)
