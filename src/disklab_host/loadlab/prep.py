"""Make the load lab's weight files once, and reuse them while nothing has changed.

The lesson's prep.py writes the same weights as ``.pt`` and ``.safetensors``
(the lesson, Build It). Here the weights are generated, seeded, on the host, so
nothing is downloaded at run time:

- ``small.pt`` / ``small.safetensors``: a :class:`model.DecoderLM` state dict,
  config ``tiny`` when ``sizes["load_small_full_size"] == 0``, else ``small``
  (SmolLM2-135M's shape);
- ``big.pt`` / ``big.safetensors``: a :class:`model.DecoderLM` state dict in
  bf16 of config ``model.big_config(sizes["load_big_mib"])``, the largest model
  of the big family that fits in that many MiB (its rule is in model.py; the
  manifest's ``big_model`` states the config, parameter count and bytes), so
  every loader of the big file can populate a module and answer;
- with the setting ``load_model`` (``cfg["settings"]["load_model"]``: a
  .safetensors file, a torch.save checkpoint or pytorch_model.bin, a sharded
  directory, or a Hugging Face repo id found in the host's cache; see
  usermodel.py): the other format of the user's weights, made in the workbench
  from their state dict (every shard merged into one). For safetensors that is
  ``user.pt``, saved with torch.save, as the lesson's prep.py does with the
  SmolLM2 file; for a torch.save file (zip or legacy) it is ``user.safetensors``,
  saved with save_file, from the state dict alone (a training checkpoint's
  optimizer state and other keys are left out), so the report can say what
  load_file on a converted copy would give against torch.load on the user's own
  file. The user's own files are loaded where they are and never changed; a
  user model that is missing or not what it claims is recorded in
  ``manifest["user_model"]`` with one line naming the file, and the synthetic
  files are made as always;
- with the loader ``tensorizer`` set (``formats``, see :func:`prepare`):
  ``big.tensors``, tensorizer's own format, written once from ``big.safetensors``
  (load_file, then TensorSerializer), outside any clock; kept and reused like the others
  (:func:`ensure_tensorizer`), and removed when the loader is no longer set.

``prep_manifest.json`` (written atomically, last) records the recipe and, per
file, its size and the sha256 of its first and last MiB. A later call reuses
the files only when the recipe (seed, configs, torch and safetensors versions,
the user model's files' sizes and mtimes) is equal and every file still matches. Each weight
file is written to a temp name, fsynced, renamed and its directory fsynced, so
its pages are clean (evictable) when the loads start.

Usage (for a manual run): python prep.py --workdir DIR [--profile quick] [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import safetensors
import torch
from safetensors.torch import load_file, save_file

from ..common.facts import not_run, require_positive
from ..common.fsio import atomic_write_json, fsync_dir
from ..common.units import MIB
from . import model, usermodel

MANIFEST = "prep_manifest.json"
# Bump when the layout of the generated files changes. 1: big.* were 4096 x 4096 bf16 tensors w0..;
# 2: big.* are a DecoderLM state dict of model.big_config(load_big_mib).
PREP_FORMAT = 2
FILES = {
    "small_pt": "small.pt",
    "small_safetensors": "small.safetensors",
    "big_pt": "big.pt",
    "big_safetensors": "big.safetensors",
}
# tensorizer's files (loader tensorizer) by manifest key: the file, and the safetensors file it is made from.
TENSORIZER_FILES = {
    "big_tensors": ("big.tensors", "big_safetensors"),
}
USER_PT = "user.pt"
USER_ST = "user.safetensors"
# The file made in the workbench from the user's weights, by the format of the user's own files.
USER_MADE = {"user_pt": USER_PT, "user_safetensors": USER_ST}
BIG_LABEL = "big/"  # the big file's seeds are derived from this label and each tensor's name
SUM_BYTES = MIB  # head and tail hashed to recognise a file


def recipe(cfg: dict) -> dict:
    """What decides the files' bytes, from ``cfg``. Equal recipes give equal files.

    Reads ``cfg["sizes"]["load_small_full_size"]`` (0 or 1), ``["load_big_mib"]``
    (at least model.big_min_mib()) and ``cfg.get("prep_seed", 0)``; the user model's identity is added
    by :func:`prepare`. Raises ValueError naming a bad setting.
    """
    sizes = cfg["sizes"]
    big = sizes["load_big_mib"]
    if isinstance(big, bool) or not isinstance(big, int):
        raise ValueError(f"load_big_mib must be an integer >= {model.big_min_mib()}, got {big!r}")
    require_positive("load_big_mib", big)
    try:
        config = model.big_config(big)
    except ValueError as exc:
        raise ValueError(f"load_big_mib: {exc}") from None
    seed = cfg.get("prep_seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"prep_seed must be an integer in [0, 2**32), got {seed!r}")
    out = {
        "prep_format": PREP_FORMAT,
        "seed": seed,
        "small_config": "small" if sizes["load_small_full_size"] else "tiny",
        "big_mib": big,
        "big_config": asdict(config),
        "torch_version": torch.__version__,
        "safetensors_version": safetensors.__version__,
        "user_model": None,
    }
    return out


def prepare(cfg: dict, workdir: Path, formats: tuple[str, ...] = ()) -> dict:
    """Make (or reuse) the weight files in ``workdir``; return the manifest.

    ``formats`` names extra file formats the loaders set for this run read: ``tensorizer``
    adds ``big_tensors`` (:func:`ensure_tensorizer`); without it
    it is removed, so nothing here changes when no loader is set.

    The manifest is ``{"files": {"small_pt" | "small_safetensors" | "big_pt" |
    "big_safetensors" [| "user_safetensors" | "user_pt"]: {"path", "size_bytes",
    "format", "tensors", "dtype", "params", ...}}, "small_config": "tiny" |
    "small", "module_class": "DecoderLM", "module_config": "tiny" | "small" (the
    CONFIGS name the small files load into), "big_model": {"family": "big",
    "mib": load_big_mib, "config": DecoderConfig fields, "params": count,
    "weights_bytes": bf16 bytes}, "user_model": None (no setting) |
    {"status": "ok", ...} | {"status": "not_run", "setting", "reason"}, "recipe",
    "generate_s", "reused": bool, "prep_s": float}``. The user's own files' entry
    (``user_safetensors`` for safetensors, ``user_pt`` for a torch.save model) has
    ``paths``, the user's shards in load order (``path`` is the first); the other
    is the file made in the workbench, absent when it could not be made (the
    reason is ``user_model["made"]``).
    ``prep_s`` is this call's wall time in seconds (checking only, when reused).
    Raises ValueError for a bad setting (see :func:`recipe`); a bad user model
    never raises.
    """
    start = time.perf_counter()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    want = recipe(cfg)
    user = user_model(cfg)
    if user and user["status"] == "ok":
        want["user_model"] = {
            "setting": user["setting"],
            "shards": [{"path": p, "size_bytes": os.stat(p).st_size, "mtime_ns": os.stat(p).st_mtime_ns}
                       for p in user["shards"]],
        }  # fmt: skip
    old = _read_manifest(workdir / MANIFEST)
    if old is not None and old.get("recipe") == want and _files_match(workdir, old["files"]):
        for key, name in FILES.items():
            old["files"][key]["path"] = str((workdir / name).resolve())
        if not user or user["status"] != "ok":
            old["user_model"] = user  # this call's check: unset, or what is wrong now
        for key in _made_keys(old["files"]):
            old["files"][key]["path"] = str((workdir / USER_MADE[key]).resolve())
        old = ensure_tensorizer(old, workdir, "tensorizer" in formats)
        return dict(old, reused=True, prep_s=time.perf_counter() - start)
    manifest = _generate(want, workdir, user)
    manifest["generate_s"] = time.perf_counter() - start
    manifest["reused"] = False
    manifest["prep_s"] = manifest["generate_s"]
    atomic_write_json(workdir / MANIFEST, manifest)
    if "tensorizer" in formats:
        manifest = ensure_tensorizer(manifest, workdir, True)
        manifest["prep_s"] = time.perf_counter() - start
    return manifest


def _tensorizer_matches(workdir: Path, entry: dict | None, source: dict, version: str) -> bool:
    """Whether a kept tensorizer file still is the one its manifest entry describes, written from the
    same safetensors file (its head and tail digests) by the same tensorizer version."""
    if not entry or entry.get("tensorizer_version") != version:
        return False
    digests = [source.get("head_sha256"), source.get("tail_sha256")]
    if [entry.get("source_head_sha256"), entry.get("source_tail_sha256")] != digests:
        return False
    path = workdir / Path(str(entry.get("path", ""))).name
    if not path.is_file() or path.stat().st_size != entry.get("size_bytes"):
        return False
    return list(head_tail_sha256(path)) == [entry.get("head_sha256"), entry.get("tail_sha256")]


def ensure_tensorizer(manifest: dict, workdir: Path, wanted: bool) -> dict:
    """Make, keep or remove tensorizer's files (TENSORIZER_FILES); returns the manifest, rewritten
    atomically when it changed.

    Wanted: each kept file that still matches (:func:`_tensorizer_matches`) is reused, else it is
    written from its safetensors file (load_file, then tensorizer's TensorSerializer, to a temp name,
    fsynced and renamed, as the other files), its entry recording the tensorizer version, the source's
    digests and ``write_s`` (seconds, outside any clock). Not wanted: the files and their entries go.
    Imports tensorizer only when wanted, and raises its ImportError then.
    """
    files = manifest["files"]
    if not wanted:
        gone = [key for key in TENSORIZER_FILES if key in files]
        for key, (name, _) in TENSORIZER_FILES.items():
            (workdir / name).unlink(missing_ok=True)
            files.pop(key, None)
        if gone:
            atomic_write_json(workdir / MANIFEST, manifest)
        return manifest
    import tensorizer
    from tensorizer import TensorSerializer

    changed = False
    for key, (name, source_key) in TENSORIZER_FILES.items():
        source = files[source_key]
        if _tensorizer_matches(workdir, files.get(key), source, tensorizer.__version__):
            files[key]["path"] = str((workdir / name).resolve())
            continue
        start = time.perf_counter()
        state = load_file(source["path"])

        def write(tmp: Path, state=state) -> None:
            serializer = TensorSerializer(str(tmp))
            serializer.write_state_dict(state)
            serializer.close()

        _replace_into(workdir / name, write)
        entry = _describe(workdir / name, "tensorizer", state)
        entry.update(
            source=source_key,
            source_head_sha256=source["head_sha256"],
            source_tail_sha256=source["tail_sha256"],
            tensorizer_version=tensorizer.__version__,
            write_s=time.perf_counter() - start,
        )
        files[key] = entry
        changed = True
    if changed:
        atomic_write_json(workdir / MANIFEST, manifest)
    return manifest


def user_model(cfg: dict) -> dict | None:
    """The user's model from the setting ``load_model``, checked (usermodel.resolve); None when unset.

    Returns usermodel.resolve's description with ``"status": "ok"``, whether
    DecoderLM can hold it (``module_config``: DecoderConfig keyword arguments,
    or None with ``module_reason``), for a legacy torch.save file
    ``mmap_refusal`` (usermodel.legacy_mmap_refusal: this torch's own error), or
    ``{"status": "not_run", "setting", "reason"}`` with usermodel's one line when
    it is missing or not what it claims.
    """
    setting = (cfg.get("settings") or {}).get("load_model")
    if setting is None or str(setting).strip() == "":
        return None
    try:
        desc = usermodel.resolve(str(setting))
    except usermodel.UserModelError as exc:
        return {"status": "not_run", "setting": str(setting), "reason": str(exc)}
    kwargs, reason = usermodel.decoder_config(desc["config_json"])
    if kwargs is not None:
        try:
            shapes = model.state_shapes(model.DecoderConfig(**kwargs))
            reason = usermodel.shape_mismatch(shapes, desc["tensors"])
        except (TypeError, ValueError) as exc:
            reason = f"{desc['config_json']}: {exc}"
        if reason:
            kwargs = None
    desc.pop("tensors")
    if desc["format"] == "legacy":
        desc["mmap_refusal"] = usermodel.legacy_mmap_refusal(Path(desc["shards"][0]))
    return {"status": "ok", **desc, "module_config": kwargs, "module_reason": reason}


def _read_manifest(path: Path) -> dict | None:
    try:
        manifest = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None


def head_tail_sha256(path: Path) -> tuple[str, str]:
    """sha256 hex digests of the first and of the last MiB of ``path`` (the whole file if smaller)."""
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(SUM_BYTES)).hexdigest()
        f.seek(max(0, os.fstat(f.fileno()).st_size - SUM_BYTES))
        tail = hashlib.sha256(f.read(SUM_BYTES)).hexdigest()
    return head, tail


def _made_keys(files: dict) -> list[str]:
    """The manifest keys of the user-model files made in the workbench (the user's own have ``paths``)."""
    return [k for k in USER_MADE if k in files and "paths" not in files[k]]


def _files_match(workdir: Path, files: dict) -> bool:
    names = dict(FILES, **{k: USER_MADE[k] for k in _made_keys(files)})
    for key, name in names.items():
        entry, path = files.get(key), workdir / name
        if not entry or not path.is_file() or path.stat().st_size != entry.get("size_bytes"):
            return False
        if list(head_tail_sha256(path)) != [entry.get("head_sha256"), entry.get("tail_sha256")]:
            return False
    return True


def big_model(mib: int) -> dict:
    """What the big file holds for ``load_big_mib`` = ``mib``: ``{"family": "big", "mib", "config" (the
    DecoderConfig's fields), "params", "weights_bytes"}`` (model.big_config, model.describe_config).
    Raises ValueError below model.big_min_mib()."""
    return {"family": "big", "mib": mib, **model.describe_config(model.big_config(mib))}


def big_weights(mib: int, seed: int) -> dict[str, torch.Tensor]:
    """The big file's state dict: ``model.build_weights`` of ``model.big_config(mib)``, bf16, seeded from
    ``seed`` and :data:`BIG_LABEL` with each name, so the same arguments give the same bytes on the same
    torch version. Raises ValueError below model.big_min_mib()."""
    return model.build_weights(model.big_config(mib), seed=seed, label=BIG_LABEL)


def _replace_into(path: Path, write) -> None:
    """Call ``write(tmp_path)``, fsync the result, rename it over ``path``, fsync the directory."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        # readable by all, as a file made under the host package's umask (022) is: safetensors makes its
        # file 0600, which a client of a shared workbench logged in as another user could not read
        os.chmod(tmp, 0o644)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _torch_save(state: dict, path: Path) -> None:
    # Saving through a file object names the zip's records "archive/...", whatever the
    # file is called, so the bytes do not depend on the temp name.
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            torch.save(state, f)

    _replace_into(path, write)


def _describe(path: Path, fmt: str, state: dict) -> dict:
    head, tail = head_tail_sha256(path)
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in state.values()})
    return {
        "path": str(path.resolve()),
        "size_bytes": path.stat().st_size,
        "format": fmt,
        "tensors": len(state),
        "dtype": ",".join(dtypes),
        "params": sum(t.numel() for t in state.values()),
        "head_sha256": head,
        "tail_sha256": tail,
    }


def _write_small(want: dict, workdir: Path) -> dict:
    """small.safetensors and small.pt (DecoderLM's seeded weights); returns their descriptions."""
    st_path, pt_path = workdir / FILES["small_safetensors"], workdir / FILES["small_pt"]
    state = model.build_weights(model.CONFIGS[want["small_config"]], seed=want["seed"])
    _replace_into(st_path, lambda tmp: save_file(state, str(tmp)))
    _torch_save(state, pt_path)
    return {
        "small_pt": _describe(pt_path, "pt", state),
        "small_safetensors": _describe(st_path, "safetensors", state),
    }


def _user_state(user: dict) -> dict:
    """The user's weights, every shard merged into one state dict: load_file for safetensors, else
    usermodel.load_torch (weights_only=True) and the state dict found in it (usermodel.find_state_dict).

    Raises usermodel.UserModelError naming the shard that could not be loaded.
    """
    state: dict = {}
    for shard in user["shards"]:
        if user["format"] != "safetensors":
            obj = usermodel.load_torch(Path(shard), user["format"], mmap=True)  # zip only: fewer copies
            state.update(usermodel.find_state_dict(obj, Path(shard))[0])
            continue
        try:
            state.update(load_file(shard))
        except Exception as exc:  # the user's file, not ours: recorded, and the lab goes on
            reason = f"{shard}: safetensors could not load it: {type(exc).__name__}: {exc}"
            raise usermodel.UserModelError(reason.replace("\n", " ")) from None
    return state


def _own_entry(user: dict, state: dict) -> tuple[str, dict]:
    """The manifest entry of the user's own files (in place; identified by size and mtime, not hashed)."""
    key, fmt = ("user_safetensors", "safetensors") if user["format"] == "safetensors" else ("user_pt", "pt")
    entry = _describe(Path(user["shards"][0]), fmt, state)
    entry.update(path=user["shards"][0], paths=list(user["shards"]), size_bytes=user["size_bytes"])
    entry["source_format"] = user["format"]
    del entry["head_sha256"], entry["tail_sha256"]
    return key, entry


def _write_user(user: dict, workdir: Path) -> tuple[dict, dict]:
    """The other format of the user's weights, made in the workbench (their files are read, never
    written); returns the file entries and the status, with ``made`` saying what was made.

    Weights the loaders cannot read give ``({}, {"status": "not_run", ...})``. A
    safetensors copy save_file refuses (tensors that share memory, as tied
    weights do in some state dicts) is left out with ``made`` saying why; the
    user's own file is still measured.
    """
    try:
        state = _user_state(user)
    except usermodel.UserModelError as exc:
        return {}, {"status": "not_run", "setting": user["setting"], "reason": str(exc)}
    own_key, own = _own_entry(user, state)
    files = {own_key: own}
    made_key = next(k for k in USER_MADE if k != own_key)
    path = workdir / USER_MADE[made_key]
    try:
        if made_key == "user_pt":
            _torch_save(state, path)
        else:
            flat = {k: v.contiguous() for k, v in state.items()}
            _replace_into(path, lambda tmp: save_file(flat, str(tmp)))
    except Exception as exc:  # save_file's own refusal, e.g. shared tensors
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        return files, {**user, "made": not_run(f"{USER_MADE[made_key]} could not be made: {why}")}
    files[made_key] = _describe(path, "pt" if made_key == "user_pt" else "safetensors", state)
    return files, {**user, "made": {"status": "ok", "file": made_key, "path": files[made_key]["path"]}}


def _write_big(want: dict, workdir: Path) -> dict:
    """big.pt and big.safetensors; returns their descriptions."""
    state = big_weights(want["big_mib"], want["seed"])
    st_path, pt_path = workdir / FILES["big_safetensors"], workdir / FILES["big_pt"]
    _torch_save(state, pt_path)
    _replace_into(st_path, lambda tmp: save_file(state, str(tmp)))
    return {
        "big_pt": _describe(pt_path, "pt", state),
        "big_safetensors": _describe(st_path, "safetensors", state),
    }


def _generate(want: dict, workdir: Path, user: dict | None) -> dict:
    """Write the files for recipe ``want``; the old manifest goes first, so a crash leaves none."""
    (workdir / MANIFEST).unlink(missing_ok=True)
    fsync_dir(workdir)
    for name in USER_MADE.values():
        (workdir / name).unlink(missing_ok=True)
    files = _write_small(want, workdir)  # its tensors are freed before the big ones
    if user and user["status"] == "ok":
        user_files, user = _write_user(user, workdir)
        files.update(user_files)
    files.update(_write_big(want, workdir))
    return {
        "files": files,
        "small_config": want["small_config"],
        "module_class": "DecoderLM",
        "module_config": want["small_config"],
        "big_model": big_model(want["big_mib"]),
        "user_model": user,
        "recipe": want,
    }


def main(argv: list[str] | None = None) -> int:
    from .. import registry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--profile", default="quick", choices=sorted(registry.PROFILES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--load-model",
        default=None,
        help="a .safetensors, .pt or .bin file, a sharded directory or a repo id in the HF cache",
    )
    args = ap.parse_args(argv)
    cfg = {
        "sizes": registry.resolve(args.profile),
        "prep_seed": args.seed,
        "settings": {"load_model": args.load_model},
    }
    print(json.dumps(prepare(cfg, args.workdir), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
