"""The user's own model (setting lab_run_load_model): a file, a sharded directory, a repo id in a
Hugging Face cache laid out here (no download), its checks before any timing, and its load cells."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest
import torch
from safetensors.torch import load_file, save_file

from disklab_host.loadlab import model, prep, usermodel
from disklab_host.steps import load

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "src/disklab/schema/experiments/load.schema.json").read_text())
TINY = model.CONFIGS["tiny"]
# The Llama-style config.json of a model shaped like CONFIGS["tiny"] (SmolLM2's keys).
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": TINY.vocab_size,
    "hidden_size": TINY.hidden_size,
    "num_hidden_layers": TINY.num_layers,
    "num_attention_heads": TINY.num_heads,
    "num_key_value_heads": TINY.num_kv_heads,
    "intermediate_size": TINY.intermediate_size,
    "rope_theta": 100000,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
}


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_sharded(folder: Path, state: dict, shards: int = 2) -> list[Path]:
    """state split over ``shards`` files with a model.safetensors.index.json, as transformers writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    names = list(state)
    files, weight_map = [], {}
    for i in range(shards):
        part = names[i::shards]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: state[k] for k in part}, str(folder / fname))
        weight_map.update(dict.fromkeys(part, fname))
        files.append(folder / fname)
    (folder / usermodel.INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return files


def hf_cache(root: Path, repo_id: str, state: dict, *, sharded: bool = False) -> Path:
    """models--ORG--NAME/{refs/main, snapshots/<rev>/, blobs/<sha>} with the snapshot's files as symlinks."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    rev = "0123456789abcdef0123456789abcdef01234567"
    staging = root / "staging"
    if sharded:
        made = [*write_sharded(staging, state), staging / usermodel.INDEX_NAME]
    else:
        staging.mkdir(parents=True)
        save_file(state, str(staging / "model.safetensors"))
        made = [staging / "model.safetensors"]
    (staging / "config.json").write_text(json.dumps(CONFIG))
    made.append(staging / "config.json")
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    for f in made:
        blob = repo / "blobs" / _sha(f)
        f.rename(blob)
        (snap / f.name).symlink_to(Path("../../blobs") / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    return snap


@pytest.fixture
def small_big(monkeypatch):
    """The big family shrunk (a 512-token vocabulary, width 64): the big files are about 1 MiB."""
    monkeypatch.setattr(model, "BIG_VOCAB", 512)
    monkeypatch.setattr(model, "BIG_WIDTHS", (64,))


def _cfg(setting) -> dict:
    return {"sizes": {"load_small_full_size": 0, "load_big_mib": 1}, "settings": {"load_model": setting}}


def test_single_file_with_config_is_holdable(tmp_path):
    f = tmp_path / "m" / "model.safetensors"
    f.parent.mkdir()
    save_file(model.build_weights(TINY, seed=2), str(f))
    (f.parent / "config.json").write_text(json.dumps(CONFIG))
    desc = usermodel.resolve(str(f))
    assert desc["kind"] == "file" and desc["shards"] == [str(f.resolve())]
    assert desc["size_bytes"] == f.stat().st_size
    kwargs, why = usermodel.decoder_config(desc["config_json"])
    assert why is None and model.DecoderConfig(**kwargs) == model.DecoderConfig(**{**TINY.__dict__})


def test_sharded_directory_in_index_order(tmp_path):
    files = write_sharded(tmp_path / "sh", model.build_weights(TINY))
    desc = usermodel.resolve(str(tmp_path / "sh"))
    assert desc["kind"] == "sharded" and desc["shards"] == [str(p.resolve()) for p in files]
    assert set(desc["tensors"]) == set(model.state_shapes(TINY))
    assert desc["config_json"] is None
    assert "no config.json" in usermodel.decoder_config(None)[1]


def test_repo_id_found_offline_in_the_hf_cache(tmp_path):
    snap = hf_cache(tmp_path / "hub", "HuggingFaceTB/SmolLM2-135M-Instruct", model.build_weights(TINY))
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    desc = usermodel.resolve("HuggingFaceTB/SmolLM2-135M-Instruct", env)
    assert desc["kind"] == "hf_repo" and desc["revision"] == snap.name
    assert desc["hub_cache_from"] == "HF_HUB_CACHE"
    # the snapshot's file is a symlink; the blob is what gets timed
    assert Path(desc["shards"][0]).parent.name == "blobs"
    assert usermodel.hf_hub_cache({"HF_HOME": "/h"}) == (Path("/h/hub"), "HF_HOME/hub")
    assert usermodel.hf_hub_cache({})[0] == Path("~/.cache/huggingface/hub").expanduser()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda d: (d / "x.safetensors").write_bytes(b"\x05\x00"),
         r"x\.safetensors: not a safetensors file: 2 bytes"),
        (lambda d: (d / "x.safetensors").write_bytes((10**9).to_bytes(8, "little") + b"{}"),
         r"x\.safetensors: not a safetensors file: its header length 1000000000 does not fit"),
        (lambda d: (d / "x.safetensors").write_bytes((4).to_bytes(8, "little") + b"nope"),
         r"x\.safetensors: not a safetensors file: its header is not JSON"),
        (lambda d: (d / "x.safetensors").write_bytes(
            (len(h := json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()))
            .to_bytes(8, "little") + h + b"\0" * 8),
         r"x\.safetensors: tensor 'w' claims bytes 0\.\.16 .* holds 8 data bytes"),
    ],
)  # fmt: skip
def test_bad_file_gives_one_line_naming_it(tmp_path, make, match):
    make(tmp_path)
    with pytest.raises(usermodel.UserModelError, match=match) as info:
        usermodel.resolve(str(tmp_path / "x.safetensors"))
    assert "\n" not in str(info.value)


def test_missing_shard_and_index_naming_a_missing_file(tmp_path):
    files = write_sharded(tmp_path / "sh", model.build_weights(TINY))
    files[1].unlink()
    with pytest.raises(usermodel.UserModelError, match=r"index\.json: names shard model-00002-of-00002"):
        usermodel.resolve(str(tmp_path / "sh"))
    save_file({"other": torch.ones(2)}, str(files[1]))  # present, but not holding what the index says
    with pytest.raises(usermodel.UserModelError, match=r"00002\.safetensors: lacks \d+ tensor\(s\)"):
        usermodel.resolve(str(tmp_path / "sh" / usermodel.INDEX_NAME))


def test_repo_id_not_in_the_cache(tmp_path):
    want = r"ORG/absent: not in the Hugging Face cache.*HF_HUB_CACHE"
    with pytest.raises(usermodel.UserModelError, match=want):
        usermodel.resolve("ORG/absent", {"HF_HUB_CACHE": str(tmp_path)})
    with pytest.raises(usermodel.UserModelError, match="no such file or directory"):
        usermodel.resolve(str(tmp_path / "nope.safetensors"))


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "not a Llama-style decoder"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings is false"),
        ({"attention_bias": True}, "attention_bias is true"),
        ({"head_dim": 7}, "head_dim 7"),
    ],
)
def test_config_that_decoderlm_cannot_hold_says_why(tmp_path, change, why):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, **change}))
    kwargs, reason = usermodel.decoder_config(str(path))
    assert kwargs is None and why in reason and str(path) in reason


def test_prep_records_a_bad_model_and_makes_the_synthetic_files(workbench, small_big, tmp_path):
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"garbage!garbage!")
    m = prep.prepare(_cfg(str(bad)), workbench)
    assert m["user_model"]["status"] == "not_run" and str(bad) in m["user_model"]["reason"]
    assert set(m["files"]) == set(prep.FILES)  # the rest of the lab still runs
    plan, _ = load.cell_plan(m)
    assert not any(c["file"].startswith("user") for c in plan)
    assert prep.prepare(_cfg(None), workbench)["user_model"] is None


def test_prep_shape_mismatch_keeps_loads_but_not_module(workbench, small_big, tmp_path):
    f = tmp_path / "m" / "model.safetensors"
    f.parent.mkdir()
    save_file({"encoder.weight": torch.ones(4, 4)}, str(f))
    (f.parent / "config.json").write_text(json.dumps(CONFIG))
    m = prep.prepare(_cfg(str(f)), workbench)
    assert m["user_model"]["status"] == "ok" and m["user_model"]["module_config"] is None
    assert "do not match DecoderLM" in m["user_model"]["module_reason"]
    assert m["files"]["user_pt"]["dtype"] == "float32"


@pytest.mark.heavy
def test_user_model_from_the_hf_cache_measured_and_never_changed(workbench, small_big, tmp_path, monkeypatch):
    """A sharded repo in a cache made here: prep makes user.pt, and the cells load the user's own shards."""
    state = model.build_weights(TINY, seed=5)
    snap = hf_cache(tmp_path / "hub", "ORG/tiny", state, sharded=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    blobs = sorted((tmp_path / "hub" / "models--ORG--tiny" / "blobs").iterdir())
    before = {b: (_sha(b), b.stat().st_mtime_ns) for b in blobs}
    m = prep.prepare(_cfg("ORG/tiny"), workbench)
    user = m["user_model"]
    assert user["status"] == "ok" and user["kind"] == "hf_repo" and len(user["shards"]) == 2
    assert user["module_config"]["num_layers"] == TINY.num_layers
    assert Path(m["files"]["user_pt"]["path"]).parent == workbench.resolve()
    pt = torch.load(m["files"]["user_pt"]["path"], weights_only=True)
    assert all(torch.equal(pt[k], v) for k, v in state.items())
    assert prep.prepare(_cfg("ORG/tiny"), workbench)["reused"] is True
    plan, _ = load.cell_plan(m)
    cells = [c for c in plan if c["file"] == "user_safetensors" and c["method"] == "load_file"]
    cfg = {"system": "Linux", "become_allowed": False}
    samples = []
    for cell in cells[:1] + [c for c in cells if c["populate"] == "assign"]:
        for state_name in ("cold", "warm"):
            samples.append(
                load.measure_one(
                    cell, state_name, cfg=cfg, eviction_methods=["fadvise_dontneed"],
                    scratch_dir=workbench / load.COLD_COPIES,
                )
            )  # fmt: skip
    for s in samples:
        assert s["paths"] == user["shards"] and s["file_size_bytes"] == user["size_bytes"]
        assert s["stages"]["all_touched"]["resident_fraction"] > 0.99
        assert "timed_path" not in s  # fadvise_dontneed makes the user's file cold where it is
    cold = [s for s in samples if s["cache_state_requested"] == "cold"]
    assert all(s["cache_state"] == "cold" for s in cold)
    populated = [s for s in samples if s["model"] == load.USER_MODEL]
    assert populated and all(s["stages"]["module_populated"]["status"] == "ok" for s in populated)
    # the user's model answered, and with the token its own weights give here, in this process
    net = model.DecoderLM(TINY)
    net.load_state_dict(state)
    want = model.next_token(net)[0]
    assert all(s["stages"]["first_response"]["status"] == "ok" for s in populated)
    assert {s["next_token_id"] for s in populated} == {want}
    assert all(s["stage_order"][-2:] == ["first_response", "all_touched"] for s in populated)
    assert {b: (_sha(b), b.stat().st_mtime_ns) for b in blobs} == before  # the user's files never changed
    sec = load.user_section(m, samples)
    assert sec["module_populated"]["status"] == "ok" and sec["timed_copies"] == []
    assert sec["first_response"] == {"status": "ok"}
    user_schema = {"$defs": SCHEMA["$defs"], **SCHEMA["properties"]["user_model"]}
    jsonschema.validate(sec, user_schema)
    assert snap.is_dir() and os.path.islink(snap / usermodel.INDEX_NAME)


# --- the user's .pt and .bin files (torch.save's zip and legacy formats), sniffed by their bytes ---
# Tiny tensors suffice: every check reads the format's structure (zip directory, pickles), not the data.
TINY_SD = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3)}


def _save(path: Path, obj, legacy: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy)
    return path


def _checkpoint(weights: dict, **extra) -> dict:
    """A training checkpoint as nanoGPT-style scripts write it: weights under "model", optimizer state."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9)
    return {"model": weights, "optimizer": opt.state_dict(), "step": 7, **extra}


@pytest.mark.parametrize(
    ("name", "legacy", "fmt"), [("ckpt.pt", False, "zip"), ("pytorch_model.bin", True, "legacy")]
)
def test_torch_save_files_are_sniffed_by_their_bytes(tmp_path, name, legacy, fmt):
    f = _save(tmp_path / name, TINY_SD, legacy)
    desc = usermodel.resolve(str(f))
    assert desc["format"] == fmt and desc["kind"] == "file" and desc["shards"] == [str(f.resolve())]
    assert desc["tensors"] == {
        "w": {"dtype": "float32", "shape": [2, 3]},
        "b": {"dtype": "float32", "shape": [3]},
    }
    assert desc["state_key"] is None and usermodel.weights_note(desc) is None
    # the name decides nothing: the same bytes under another name are the same format
    other = tmp_path / "weights.safetensors"
    other.write_bytes(f.read_bytes())
    assert usermodel.sniff(other) == fmt


def test_safetensors_misnamed_bin_is_safetensors(tmp_path):
    f = tmp_path / "pytorch_model.bin"
    save_file(TINY_SD, str(f))
    desc = usermodel.resolve(str(f))
    assert desc["format"] == "safetensors" and set(desc["tensors"]) == {"w", "b"}


def test_training_checkpoint_weights_found_under_their_key(tmp_path):
    f = _save(tmp_path / "ckpt.pt", _checkpoint(TINY_SD))
    desc = usermodel.resolve(str(f))
    assert desc["state_key"] == "model" and desc["optimizer_keys"] == ["optimizer"]
    assert set(desc["tensors"]) == {"w", "b"}  # the optimizer's tensors are not the model's
    assert usermodel.weights_note(desc) == (
        "the weights are the state dict under the checkpoint's key 'model'; its optimizer state "
        "('optimizer') is read by torch.load with the file but never loaded into the model; "
        "its other keys ('step') are not weights"
    )
    g = _save(tmp_path / "sd.pt", {"state_dict": TINY_SD, "epoch": 1})
    assert usermodel.resolve(str(g))["state_key"] == "state_dict"
    h = _save(tmp_path / "none.pt", {"step": 1, "note": "no weights"})
    with pytest.raises(usermodel.UserModelError) as info:
        usermodel.resolve(str(h))
    assert str(info.value) == (
        f"{h}: a checkpoint with keys 'step', 'note': none of them is a state dict of tensors "
        "(looked first under state_dict, model, model_state_dict, module, net)"
    )


def _lfs(d: Path) -> Path:
    f = d / "pytorch_model.bin"
    f.write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 269060552\n"
    )
    return f


def _truncated(d: Path, legacy: bool, keep) -> Path:
    whole = _save(d / "whole.pt", TINY_SD, legacy).read_bytes()
    f = d / "ckpt.pt"
    f.write_bytes(whole[: keep(len(whole))])
    return f


@pytest.mark.parametrize(
    ("make", "line"),
    [
        (_lfs,
         "{f}: a Git LFS pointer ({size} bytes of text: oid "
         "sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393, size 269060552), not "
         "the weights: the real file was never fetched (git lfs pull, or "
         "download the model)"),
        (lambda d: _truncated(d, False, lambda n: n // 2),
         "{f}: a zip (torch.save's format since 1.6) whose central directory is missing (File is not a zip "
         "file) in a {size}-byte file: truncated"),
        (lambda d: _truncated(d, True, lambda n: 40),
         "{f}: a legacy (pre-1.6) torch.save file whose pickle 3 of 5 ends early (expected 16 bytes in a "
         "unicodestring4, but only 8 remain) in a 40-byte file: truncated"),
        (lambda d: _truncated(d, True, lambda n: n - 4),  # the pickles whole, the last storage cut short
         "{f}: a torch.save legacy file that torch.load could not read (RuntimeError: unexpected EOF, "
         "expected 4 more bytes. The file might be corrupted.): truncated or damaged"),
    ],
)  # fmt: skip
def test_pointer_and_truncated_files_give_one_line(tmp_path, make, line):
    f = make(tmp_path)
    with pytest.raises(usermodel.UserModelError) as info:
        usermodel.resolve(str(f))
    assert str(info.value) == line.format(f=f, size=f.stat().st_size)


def test_unsafe_globals_are_named_and_weights_only_is_never_dropped(tmp_path, monkeypatch):
    """argparse.Namespace (the script's args) and numpy's RNG state: outside torch's allowlist."""
    import argparse

    import numpy as np

    extra = {"args": argparse.Namespace(lr=0.1), "rng": np.random.get_state()}
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k) or real_load(*a, **k))
    z = _save(tmp_path / "zip" / "ckpt.pt", _checkpoint(TINY_SD, **extra))
    with pytest.raises(usermodel.UserModelError) as info:
        usermodel.resolve(str(z))
    assert re.fullmatch(
        re.escape(
            f"{z}: a torch.save zip checkpoint that needs globals outside torch's weights_only allowlist: "
        )
        + r"argparse\.Namespace, numpy\.(_core|core)\.multiarray\._reconstruct, numpy\.dtype, numpy\.ndarray"
        + re.escape("; it is loaded only with weights_only=True, so it was not loaded"),
        str(info.value),
    )
    assert calls == []  # a zip's globals are read statically, before any torch.load
    leg = _save(tmp_path / "leg" / "ckpt.pt", _checkpoint(TINY_SD, **extra), legacy=True)
    with pytest.raises(usermodel.UserModelError) as info:
        usermodel.resolve(str(leg))
    assert str(info.value) == (
        f"{leg}: a torch.save legacy checkpoint that needs globals outside torch's weights_only allowlist: "
        "argparse.Namespace (torch names only the first it meets in a legacy file); it is loaded only with "
        "weights_only=True, so it was not loaded"
    )
    assert calls and all(k["weights_only"] is True for k in calls)  # never retried without it


def _bin_index(folder: Path, state: dict, legacy: bool = False) -> list[Path]:
    """state split over two pytorch_model-0000N-of-00002.bin files with pytorch_model.bin.index.json."""
    names = list(state)
    files, weight_map = [], {}
    for i in range(2):
        fname = f"pytorch_model-{i + 1:05d}-of-00002.bin"
        files.append(_save(folder / fname, {k: state[k] for k in names[i::2]}, legacy))
        weight_map.update(dict.fromkeys(names[i::2], fname))
    (folder / usermodel.BIN_INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return files


def test_sharded_bin_directory_and_index(tmp_path):
    files = _bin_index(tmp_path / "sh", TINY_SD)
    desc = usermodel.resolve(str(tmp_path / "sh"))
    assert desc["kind"] == "sharded" and desc["format"] == "zip"
    assert desc["shards"] == [str(p.resolve()) for p in files] and set(desc["tensors"]) == {"w", "b"}
    _save(files[1], {"other": torch.ones(1)})  # present, but not holding what the index says
    with pytest.raises(usermodel.UserModelError, match=r"00002-of-00002\.bin: lacks 1 tensor\(s\)"):
        usermodel.resolve(str(tmp_path / "sh" / usermodel.BIN_INDEX_NAME))
    _save(files[1], {"b": TINY_SD["b"]}, legacy=True)
    with pytest.raises(usermodel.UserModelError, match=r"00002\.bin: is legacy, but .*00002\.bin is zip"):
        usermodel.resolve(str(tmp_path / "sh"))


def test_hf_snapshot_with_bin_files_only(tmp_path):
    """A repo published only as pytorch_model.bin: the snapshot holds .bin, config.json, no safetensors."""
    repo = tmp_path / "hub" / "models--ORG--binonly"
    rev = "fedcba9876543210fedcba9876543210fedcba98"
    snap = repo / "snapshots" / rev
    _save(repo / "blobs" / "b1", model.build_weights(TINY, seed=3))
    (repo / "blobs" / "c1").write_text(json.dumps(CONFIG))
    snap.mkdir(parents=True)
    (snap / usermodel.BIN_SINGLE_NAME).symlink_to("../../blobs/b1")
    (snap / "config.json").symlink_to("../../blobs/c1")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    desc = usermodel.resolve("ORG/binonly", {"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert desc["kind"] == "hf_repo" and desc["format"] == "zip"
    assert desc["shards"] == [str((repo / "blobs" / "b1").resolve())]
    assert usermodel.decoder_config(desc["config_json"])[0]["num_layers"] == TINY.num_layers


def _ckpt_dir(tmp_path: Path, legacy: bool = False, seed: int = 4) -> tuple[Path, dict]:
    """ckpt.pt holding DecoderLM tiny's weights under "model" with optimizer state, and its config.json.
    The tiny config (about 6 MiB) is the smallest DecoderLM shape, so module_populated can run."""
    weights = model.build_weights(TINY, seed=seed)
    f = _save(tmp_path / "run" / "ckpt.pt", _checkpoint(weights), legacy)
    (f.parent / "config.json").write_text(json.dumps(CONFIG))
    return f, weights


def test_prep_checkpoint_gets_a_safetensors_copy_and_every_cell(workbench, small_big, tmp_path):
    f, weights = _ckpt_dir(tmp_path)
    before = (_sha(f), f.stat().st_mtime_ns)
    m = prep.prepare(_cfg(str(f)), workbench)
    user = m["user_model"]
    assert user["status"] == "ok" and user["format"] == "zip" and user["state_key"] == "model"
    assert user["module_config"]["num_layers"] == TINY.num_layers
    own, made = m["files"]["user_pt"], m["files"]["user_safetensors"]
    assert own["paths"] == [str(f.resolve())] and own["source_format"] == "zip"
    assert Path(made["path"]) == (workbench / prep.USER_ST).resolve()
    copy = load_file(made["path"])
    assert copy.keys() == weights.keys() and all(torch.equal(copy[k], v) for k, v in weights.items())
    assert (_sha(f), f.stat().st_mtime_ns) == before  # the user's checkpoint is never changed
    assert prep.prepare(_cfg(str(f)), workbench)["reused"] is True
    plan, _ = load.cell_plan(m)
    mine = [c for c in plan if c["file"].startswith("user")]
    assert {(c["file"], c["method"]) for c in mine} == set(load.USER_CELLS)
    assert {c.get("state_key") for c in mine if c["file"] == "user_pt"} == {"model"}
    assert all("state_key" not in c for c in mine if c["file"] == "user_safetensors")
    assert len([c for c in mine if c["model"] == load.USER_MODEL]) == 4
    sec = load.user_section(m, [])
    assert sec["format"] == "zip" and sec["made"]["file"] == "user_safetensors" and "pt_path" not in sec
    assert sec["weights_note"].startswith("the weights are the state dict under the checkpoint's key 'model'")
    assert sec["cells_not_run"] == []
    jsonschema.validate(sec, {"$defs": SCHEMA["$defs"], **SCHEMA["properties"]["user_model"]})


def test_prep_legacy_checkpoint_mmap_cell_is_not_run_with_torchs_reason(workbench, small_big, tmp_path):
    f, _ = _ckpt_dir(tmp_path, legacy=True)
    m = prep.prepare(_cfg(str(f)), workbench)
    assert m["user_model"]["format"] == "legacy"
    plan, _ = load.cell_plan(m)
    mine = {(c["file"], c["method"]) for c in plan if c["file"].startswith("user")}
    assert mine == set(load.USER_CELLS) - {("user_pt", "torch.load-mmap")}
    # torch 2.13's own refusal, quoted: it names the file it was given
    reason = (
        f"{f.resolve()} is a legacy (pre-1.6) torch.save file, and PyTorch refuses mmap there: "
        f"torch {torch.__version__} raised RuntimeError: mmap can only be used with files saved with "
        f"`torch.save({f.resolve()}, _use_new_zipfile_serialization=True), please torch.save your checkpoint "
        "with this option in order to use mmap."
    )
    want = [{"file": "user_pt", "method": "torch.load-mmap", "reason": reason}]
    assert load.user_cells_not_run(m) == want
    sec = load.user_section(m, [])
    assert sec["cells_not_run"] == want and sec["format"] == "legacy"
    jsonschema.validate(sec, {"$defs": SCHEMA["$defs"], **SCHEMA["properties"]["user_model"]})


def test_prep_records_a_pointer_or_unsafe_checkpoint_as_not_run(workbench, small_big, tmp_path):
    import argparse

    pointer = _lfs(tmp_path)
    m = prep.prepare(_cfg(str(pointer)), workbench)
    assert m["user_model"]["status"] == "not_run" and m["user_model"]["reason"].startswith(
        f"{pointer}: a Git LFS pointer ("
    )
    assert set(m["files"]) == set(prep.FILES)  # the synthetic lab runs as always
    unsafe = _save(tmp_path / "u" / "ckpt.pt", _checkpoint(TINY_SD, args=argparse.Namespace(lr=1)))
    m = prep.prepare(_cfg(str(unsafe)), workbench)
    assert m["user_model"] == {
        "status": "not_run",
        "setting": str(unsafe),
        "reason": f"{unsafe}: a torch.save zip checkpoint that needs globals outside torch's weights_only "
        "allowlist: argparse.Namespace; it is loaded only with weights_only=True, so it was not loaded",
    }
    assert not any(c["file"].startswith("user") for c in load.cell_plan(m)[0])


def test_a_safetensors_copy_save_file_refuses_is_not_run_and_the_pt_rows_stay(workbench, small_big, tmp_path):
    """Tied weights sharing one storage, as some pytorch_model.bin files hold them: save_file refuses."""
    w = torch.ones(4, 4)
    f = _save(tmp_path / "t" / "pytorch_model.bin", {"embed.weight": w, "lm_head.weight": w})
    m = prep.prepare(_cfg(str(f)), workbench)
    user = m["user_model"]
    assert user["status"] == "ok" and "user_safetensors" not in m["files"]
    assert user["made"]["status"] == "not_run"
    assert user["made"]["reason"].startswith("user.safetensors could not be made: RuntimeError:")
    plan, _ = load.cell_plan(m)
    assert {(c["file"], c["method"]) for c in plan if c["file"].startswith("user")} == {
        ("user_pt", "torch.load"),
        ("user_pt", "torch.load-mmap"),
    }
    off = load.user_cells_not_run(m)
    assert [(c["file"], c["method"]) for c in off] == [("user_safetensors", "load_file"),
                                                       ("user_safetensors", "one-tensor")]  # fmt: skip
    assert all(c["reason"] == user["made"]["reason"] for c in off)


@pytest.mark.heavy
def test_checkpoint_cells_load_the_weights_under_their_key(workbench, small_big, tmp_path):
    """load_one.py on the user's own ckpt.pt: --state-key picks the weights, a DecoderLM holds them."""
    f, weights = _ckpt_dir(tmp_path)
    m = prep.prepare(_cfg(str(f)), workbench)
    plan, _ = load.cell_plan(m)
    cfg = {"system": "Linux", "become_allowed": False}
    pick = [
        c
        for c in plan
        if c["file"] == "user_pt" and (c["method"] == "torch.load-mmap" or c["populate"] == "assign")
    ]
    samples = [load.measure_one(c, "warm", cfg=cfg, scratch_dir=workbench / load.COLD_COPIES) for c in pick]
    assert [s["method"] for s in samples] == ["torch.load-mmap", "torch.load"]
    assert all(s["path"] == str(f.resolve()) for s in samples)
    assert samples[0]["n_tensors"] == len(weights)  # the state dict alone, not the optimizer's tensors
    assert samples[1]["stages"]["module_populated"]["status"] == "ok"
