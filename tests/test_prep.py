"""The load lab's weights: the DecoderLM architecture, and prep.prepare's files and reuse.

Real torch, real safetensors, real files. Most prepare() tests shrink the big
tensors' shape (prep.BIG_SHAPE) to keep the writes small; one test keeps the
real 4096 x 4096 bf16 shape with a single tensor.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from disklab_host.loadlab import model, prep


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _cfg(big: int = 2, full: int = 0, **extra) -> dict:
    return {"sizes": {"load_small_full_size": full, "load_big_tensors": big}, **extra}


@pytest.fixture
def small_big(monkeypatch):
    """Big tensors of 64 x 64 bf16 instead of 4096 x 4096 (8 KiB instead of 32 MiB)."""
    monkeypatch.setattr(prep, "BIG_SHAPE", (64, 64))


def test_tiny_forward_shape_dtype_and_causality():
    cfg = model.CONFIGS["tiny"]
    net = model.DecoderLM(cfg)
    net.load_state_dict(model.build_weights(cfg, seed=1), strict=True)
    ids = torch.randint(0, cfg.vocab_size, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = net(ids)
        changed = ids.clone()
        changed[:, -1] = (changed[:, -1] + 1) % cfg.vocab_size
        logits2 = net(changed)
    assert logits.shape == (2, 6, cfg.vocab_size)
    assert torch.isfinite(logits).all()
    # causal: changing the last token leaves every earlier position's logits as they were
    assert torch.equal(logits[:, :-1], logits2[:, :-1])
    assert not torch.equal(logits[:, -1], logits2[:, -1])
    with pytest.raises(ValueError, match="input_ids"):
        net(ids[0])


def test_param_count_matches_the_module_and_the_lesson_size():
    for cfg in model.CONFIGS.values():
        with torch.device("meta"):
            net = model.DecoderLM(cfg)
        assert model.param_count(cfg) == sum(p.numel() for p in net.parameters())
    small = model.param_count(model.CONFIGS["small"])
    assert 130_000_000 <= small <= 140_000_000
    tiny_bytes = 2 * model.param_count(model.CONFIGS["tiny"])
    assert 1 << 20 <= tiny_bytes <= 16 << 20  # a few MiB in bf16, within registry.SMALL_TINY_BYTES


def test_tied_embedding_is_stored_once_and_used_as_output_projection():
    cfg = model.CONFIGS["tiny"]
    net = model.DecoderLM(cfg).eval()
    names = list(net.state_dict())
    assert "model.embed_tokens.weight" in names
    assert not any(n.startswith("lm_head") for n in names)
    assert not list(net.buffers())  # nothing stays on the meta device after assign=True
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        before = net(ids)
        net.model.embed_tokens.weight[5].mul_(3)  # row 5 is token 5's input and output vector
        after = net(ids)
    assert not torch.equal(before[..., 5], after[..., 5])


def test_config_rejects_bad_shapes_with_the_field_name():
    with pytest.raises(ValueError, match="hidden_size must be a multiple of num_heads"):
        model.DecoderConfig(
            vocab_size=8, hidden_size=10, num_layers=1, num_heads=3, num_kv_heads=1, intermediate_size=4
        )
    with pytest.raises(ValueError, match="num_layers must be an integer > 0"):
        model.DecoderConfig(
            vocab_size=8, hidden_size=12, num_layers=0, num_heads=3, num_kv_heads=1, intermediate_size=4
        )
    with pytest.raises(ValueError, match="seed"):
        model.build_weights(model.CONFIGS["tiny"], seed=-1)


def test_build_weights_is_seeded_and_unshared():
    cfg = model.CONFIGS["tiny"]
    a, b, c = model.build_weights(cfg, 3), model.build_weights(cfg, 3), model.build_weights(cfg, 4)
    assert list(a) == list(model.state_shapes(cfg))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])
    assert len({t.untyped_storage().data_ptr() for t in a.values()}) == len(a)
    assert {t.dtype for t in a.values()} == {torch.bfloat16}
    w = a["model.layers.0.mlp.up_proj.weight"].float()
    assert 0.015 < w.std().item() < 0.025  # N(0, 0.02²)
    assert torch.equal(a["model.norm.weight"], torch.ones(cfg.hidden_size, dtype=torch.bfloat16))


def test_meta_model_assign_from_pt_and_safetensors(workbench, small_big):
    manifest = prep.prepare(_cfg(big=1), workbench)
    files = manifest["files"]
    cfg = model.CONFIGS["tiny"]
    expected = model.build_weights(cfg, seed=0)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    outputs = []
    from_pt = torch.load(files["small_pt"]["path"], weights_only=True)
    for sd in (from_pt, load_file(files["small_safetensors"]["path"])):
        with torch.device("meta"):
            net = model.DecoderLM(cfg)
        result = net.load_state_dict(sd, strict=True, assign=True)
        assert not result.missing_keys and not result.unexpected_keys
        assert not any(p.is_meta for p in net.parameters())
        assert all(torch.equal(net.state_dict()[k], expected[k]) for k in expected)
        with torch.no_grad():
            outputs.append(net(ids))
    assert torch.equal(outputs[0], outputs[1])


def test_prepare_manifest_describes_the_files(workbench, small_big):
    m = prep.prepare(_cfg(big=3), workbench)
    assert m["user_model"] is None and m["small_config"] == "tiny" and m["module_class"] == "DecoderLM"
    assert m["reused"] is False and m["prep_s"] > 0
    assert set(m["files"]) == {"small_pt", "small_safetensors", "big_pt", "big_safetensors"}
    for key, entry in m["files"].items():
        path = Path(entry["path"])
        assert path.parent == workbench.resolve() and path.name == prep.FILES[key]
        assert entry["size_bytes"] == path.stat().st_size
        assert entry["format"] == ("pt" if key.endswith("_pt") else "safetensors")
        assert entry["dtype"] == "bfloat16"
    assert m["files"]["big_pt"]["tensors"] == 3 and m["files"]["big_pt"]["params"] == 3 * 64 * 64
    assert m["files"]["small_safetensors"]["params"] == model.param_count(model.CONFIGS["tiny"])
    assert json.loads((workbench / prep.MANIFEST).read_text())["files"] == m["files"]
    assert not list(workbench.glob(".*tmp"))  # no temp file left behind
    big = load_file(m["files"]["big_safetensors"]["path"])
    assert list(big) == ["w0", "w1", "w2"] and big["w0"].shape == (64, 64)
    assert not torch.equal(big["w0"], big["w1"])


def test_prepare_reuses_then_regenerates_identical_bytes(workbench, small_big):
    first = prep.prepare(_cfg(), workbench)
    shas = {k: _sha(e["path"]) for k, e in first["files"].items()}

    again = prep.prepare(_cfg(), workbench)
    assert again["reused"] is True
    assert {k: _sha(e["path"]) for k, e in again["files"].items()} == shas

    for name in [*prep.FILES.values(), prep.MANIFEST]:
        (workbench / name).unlink()
    fresh = prep.prepare(_cfg(), workbench)
    assert fresh["reused"] is False
    assert {k: _sha(e["path"]) for k, e in fresh["files"].items()} == shas  # same bytes on re-run

    reseeded = prep.prepare(_cfg(prep_seed=7), workbench)
    assert reseeded["reused"] is False and reseeded["recipe"]["seed"] == 7
    assert all(_sha(e["path"]) != shas[k] for k, e in reseeded["files"].items())

    more = prep.prepare(_cfg(big=3, prep_seed=7), workbench)
    assert more["reused"] is False and more["files"]["big_pt"]["tensors"] == 3


def test_prepare_regenerates_a_changed_file(workbench, small_big):
    first = prep.prepare(_cfg(), workbench)
    path = Path(first["files"]["big_safetensors"]["path"])
    good = _sha(path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, different last MiB
    path.write_bytes(bytes(data))
    second = prep.prepare(_cfg(), workbench)
    assert second["reused"] is False
    assert _sha(path) == good


def test_prepare_regenerates_for_another_torch_version(workbench, small_big, monkeypatch):
    prep.prepare(_cfg(), workbench)
    monkeypatch.setattr(prep.torch, "__version__", "0.0.0-test")
    assert prep.prepare(_cfg(), workbench)["reused"] is False


@pytest.mark.heavy
def test_prepare_big_tensor_has_the_lesson_shape(workbench):
    m = prep.prepare(_cfg(big=1), workbench)
    entry = m["files"]["big_safetensors"]
    assert entry["params"] == 4096 * 4096
    assert 32 << 20 <= entry["size_bytes"] < (32 << 20) + (1 << 16)  # 32 MiB of bf16 plus a small header
    w0 = load_file(entry["path"])["w0"]
    assert w0.shape == (4096, 4096) and w0.dtype == torch.bfloat16
    assert 0.9 < w0.float().std().item() < 1.1  # N(0, 1) cast to bf16


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (_cfg(big=0), "load_big_tensors must be > 0"),
        (_cfg(big=1.5), "load_big_tensors must be an integer"),
        (_cfg(prep_seed=-1), "prep_seed must be an integer"),
    ],
)
def test_prepare_rejects_bad_settings(workbench, cfg, match):
    with pytest.raises(ValueError, match=match):
        prep.prepare(cfg, workbench)
    assert not (workbench / prep.MANIFEST).exists()
