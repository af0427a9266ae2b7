"""The load lab's weights: the DecoderLM architecture, and prep.prepare's files and reuse.

Real torch, real safetensors, real files. Most prepare() tests shrink the big
model's family (model.BIG_VOCAB and BIG_WIDTHS) to keep the writes near 1 MiB;
one test keeps the real family at its smallest size (registry.BIG_MIN_MIB).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from disklab_host import registry
from disklab_host.loadlab import model, prep


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _cfg(big: int = 2, full: int = 0, **extra) -> dict:
    return {"sizes": {"load_small_full_size": full, "load_big_mib": big}, **extra}


@pytest.fixture
def small_big(monkeypatch):
    """The big family shrunk to a 512-token vocabulary and width 64: 1 MiB gives 7 layers (~1 MiB of bf16)."""
    monkeypatch.setattr(model, "BIG_VOCAB", 512)
    monkeypatch.setattr(model, "BIG_WIDTHS", (64,))


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
    config = model.big_config(3)
    assert m["big_model"] == {"family": "big", "mib": 3, **model.describe_config(config)}
    assert m["big_model"]["config"]["hidden_size"] == 64 and m["big_model"]["config"]["num_layers"] >= 2
    assert m["files"]["big_pt"]["params"] == m["big_model"]["params"] == model.param_count(config)
    assert m["big_model"]["weights_bytes"] <= 3 << 20  # at most load_big_mib
    assert m["files"]["small_safetensors"]["params"] == model.param_count(model.CONFIGS["tiny"])
    assert json.loads((workbench / prep.MANIFEST).read_text())["files"] == m["files"]
    assert not list(workbench.glob(".*tmp"))  # no temp file left behind
    big = load_file(m["files"]["big_safetensors"]["path"])
    assert set(big) == set(model.state_shapes(config))  # a DecoderLM state dict, Llama-style names
    small = load_file(m["files"]["small_safetensors"]["path"])
    # seeded apart from the small model: the same name draws different numbers
    name = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(big[name].flatten()[:16], small[name].flatten()[:16])
    with torch.device("meta"):
        net = model.DecoderLM(config)
    net.load_state_dict(big, strict=True, assign=True)
    assert model.next_token(net)[0] in range(config.vocab_size)


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
    assert more["reused"] is False and more["big_model"]["mib"] == 3
    assert more["files"]["big_pt"]["params"] > reseeded["files"]["big_pt"]["params"]


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
def test_prepare_big_model_at_the_smallest_real_size(workbench):
    """The real family at registry.BIG_MIN_MIB: width 256, one layer, Llama 2's 32,000-token vocabulary."""
    m = prep.prepare(_cfg(big=registry.BIG_MIN_MIB), workbench)
    entry = m["files"]["big_safetensors"]
    config = m["big_model"]["config"]
    assert (config["vocab_size"], config["hidden_size"], config["num_layers"]) == (32_000, 256, 1)
    assert entry["params"] == m["big_model"]["params"]
    weights = m["big_model"]["weights_bytes"]
    assert weights <= registry.BIG_MIN_MIB << 20 <= weights + (1 << 20)
    assert weights <= entry["size_bytes"] < weights + registry.WEIGHTS_FILE_OVERHEAD_BYTES
    w = load_file(entry["path"])["model.layers.0.self_attn.q_proj.weight"]
    assert w.shape == (256, 256) and w.dtype == torch.bfloat16
    assert 0.015 < w.float().std().item() < 0.025  # N(0, 0.02²) cast to bf16


def test_big_config_rule_sizes_and_minimum():
    """The family's rule at the sizes the profiles and tests use, and the registry's minimum is its own."""
    for mib, (hidden, layers) in {32: (256, 11), 256: (1024, 9), 2048: (2048, 22)}.items():
        config = model.big_config(mib)
        assert (config.hidden_size, config.num_layers) == (hidden, layers)
        weights = model.param_count(config) * 2
        one_layer_more = 2 * model.param_count(
            model.DecoderConfig(**{**model.describe_config(config)["config"], "num_layers": layers + 1})
        )
        assert weights <= mib << 20 < one_layer_more  # the largest that fits
        assert (
            config.num_heads * 64 == hidden and config.num_heads == 8 * config.num_kv_heads or hidden == 256
        )
    tiny_llama = model.big_config(2048)
    assert (tiny_llama.num_heads, tiny_llama.num_kv_heads, tiny_llama.intermediate_size) == (32, 4, 5632)
    assert model.big_min_mib() == registry.BIG_MIN_MIB == registry.SIZES["load_big_mib"].minimum
    model.big_config(registry.BIG_MIN_MIB)
    with pytest.raises(ValueError, match=f"at least {registry.BIG_MIN_MIB} MiB"):
        model.big_config(registry.BIG_MIN_MIB - 1)


def test_next_token_is_fixed_for_fixed_weights_and_moves_with_them():
    cfg = model.CONFIGS["tiny"]
    weights = model.build_weights(cfg, seed=1)
    nets = []
    for _ in range(2):
        with torch.device("meta"):
            net = model.DecoderLM(cfg)
        net.load_state_dict(weights, assign=True)
        nets.append(net)
    token, margin = model.next_token(nets[0])
    assert (token, margin) == model.next_token(nets[1]) and 0 <= token < cfg.vocab_size and margin >= 0
    assert model.prompt_ids(cfg).tolist() == [[i % cfg.vocab_size for i in model.PROMPT_IDS]]
    other = model.DecoderLM(cfg)
    other.load_state_dict(model.build_weights(cfg, seed=2))
    assert model.next_token(other) != (token, margin)  # other weights, another answer


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (_cfg(big=0), "load_big_mib must be > 0"),
        (_cfg(big=1.5), "load_big_mib must be an integer"),
        (_cfg(big=registry.BIG_MIN_MIB - 1), "load_big_mib: the big model needs at least"),
        (_cfg(big=registry.BIG_MIN_MIB, prep_seed=-1), "prep_seed must be an integer"),
    ],
)
def test_prepare_rejects_bad_settings(workbench, cfg, match):
    with pytest.raises(ValueError, match=match):
        prep.prepare(cfg, workbench)
    assert not (workbench / prep.MANIFEST).exists()
