"""The user's own model (setting lab_run_load_model): a file, a sharded directory, a repo id in a
Hugging Face cache laid out here (no download), its checks before any timing, and its load cells."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import jsonschema
import pytest
import torch
from safetensors.torch import save_file

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
    monkeypatch.setattr(prep, "BIG_SHAPE", (64, 64))


def _cfg(setting) -> dict:
    return {"sizes": {"load_small_full_size": 0, "load_big_tensors": 1}, "settings": {"load_model": setting}}


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
    assert {b: (_sha(b), b.stat().st_mtime_ns) for b in blobs} == before  # the user's files never changed
    sec = load.user_section(m, samples)
    assert sec["module_populated"]["status"] == "ok" and sec["timed_copies"] == []
    user_schema = {"$defs": SCHEMA["$defs"], **SCHEMA["properties"]["user_model"]}
    jsonschema.validate(sec, user_schema)
    assert snap.is_dir() and os.path.islink(snap / usermodel.INDEX_NAME)
