"""The user's own model for the load lab (setting ``lab_run_load_model``): find it, check it, describe it.

The setting takes one of:

- a ``.safetensors`` file;
- a directory of sharded safetensors with ``model.safetensors.index.json``
  (or the index file itself);
- a Hugging Face repo id (``ORG/NAME``, e.g. ``HuggingFaceTB/SmolLM2-135M-Instruct``),
  looked up offline in the host's Hugging Face cache: ``$HF_HUB_CACHE``, else
  ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; ``models--ORG--NAME/refs/main``
  names the snapshot ``snapshots/<rev>/``, whose files are often symlinks to
  ``../../blobs/<sha256>``. Nothing is downloaded.

Every file is checked before any timing, with the standard library only: the
safetensors header (8-byte little-endian length, then JSON naming each tensor's
dtype, shape and data_offsets; the safetensors format description) must parse
and fit in the file, and an index's weight_map must name shards that exist and
hold the tensors it assigns to them. A file that is not what it claims raises
:class:`UserModelError` with one line naming the file and what is wrong.
Nothing here writes: the user's files are never changed.

``config.json`` next to the weights decides whether module_populated can run:
:func:`decoder_config` maps the Llama-style keys onto ``model.DecoderConfig``'s
fields, and says why not when the model is not one DecoderLM can hold.
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors refuses larger headers
# bytes per element of each safetensors dtype (the format description)
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


class UserModelError(ValueError):
    """The user's model is missing or not what it claims; the message is one line naming the file."""


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


def _index_shards(index: Path) -> list[Path]:
    """The shards a model.safetensors.index.json names, in first-use order, each checked."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        if not isinstance(weight_map, dict) or not weight_map:
            raise TypeError("weight_map is empty or not an object")
    except OSError as exc:
        raise UserModelError(f"{index}: cannot be read: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise UserModelError(f"{index}: not a safetensors index: {type(exc).__name__}: {exc}") from None
    order: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        order.setdefault(shard, []).append(tensor)
    shards = []
    for shard, tensors in order.items():
        path = index.parent / shard
        if not path.is_file():
            raise UserModelError(f"{index}: names shard {shard}, which is missing ({path})")
        missing = [t for t in tensors if t not in read_header(path)]
        if missing:
            raise UserModelError(
                f"{path}: lacks {len(missing)} tensor(s) the index assigns to it, first {missing[0]!r}"
            )
        shards.append(path)
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


def resolve(setting: str, env: dict | None = None) -> dict:
    """Find and check the user's model; return its description. Reads only.

    Returns ``{"setting", "kind": "file" | "sharded" | "hf_repo", "shards": [str]
    (files in load order, symlinks resolved), "size_bytes" (all shards),
    "tensors": {name: {"dtype", "shape"}}, "config_json": str | None, and for a
    repo "repo_id", "revision", "hub_cache", "hub_cache_from"}``. Raises
    UserModelError (one line naming the file or repo id) when it is missing or
    not what it claims.
    """
    text = str(setting).strip()
    path = Path(text).expanduser()
    extra: dict = {}
    if path.exists():
        kind = "file" if path.is_file() and path.name != INDEX_NAME else "sharded"
        base = path
    elif REPO_ID.match(text) and not text.endswith((".safetensors", ".json")):
        base, extra = _snapshot(text, env)
        kind = "hf_repo"
    else:
        raise UserModelError(f"{text}: no such file or directory on this host, and not an ORG/NAME repo id")
    if base.is_dir():
        if (base / INDEX_NAME).is_file():
            shards = _index_shards(base / INDEX_NAME)
            kind = "sharded" if kind != "hf_repo" else kind
        elif (base / SINGLE_NAME).is_file():
            shards = [base / SINGLE_NAME]
            kind = "file" if kind != "hf_repo" else kind
        else:
            raise UserModelError(f"{base}: has neither {INDEX_NAME} nor {SINGLE_NAME}")
        config = base / "config.json"
    elif base.name == INDEX_NAME:
        shards, config = _index_shards(base), base.parent / "config.json"
    else:
        if base.suffix != ".safetensors":
            raise UserModelError(f"{base}: not a .safetensors file, a sharded model directory or its index")
        shards, config = [base], base.parent / "config.json"
    tensors: dict[str, dict] = {}
    for shard in shards:
        for name, t in read_header(shard).items():
            tensors[name] = {"dtype": t["dtype"], "shape": list(t["shape"])}
    real = [str(s.resolve()) for s in shards]
    return {
        "setting": text,
        "kind": kind,
        "shards": real,
        "size_bytes": sum(os.stat(s).st_size for s in real),
        "tensors": tensors,
        "config_json": str(config) if config.is_file() else None,
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
