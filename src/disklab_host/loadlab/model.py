"""A decoder-only transformer in plain torch.nn, with the load lab's seeded weights.

The ``small`` config has the shape of SmolLM2-135M, the model the lesson loads
(the lesson, Build It: prep.py): hidden 576, 30 layers, 9 query heads sharing
3 key/value heads (grouped-query attention), SwiGLU MLP of width 1536,
RMSNorm, rotary position embeddings and a 49152-token vocabulary whose
embedding doubles as the output projection. ``tiny`` keeps the same structure
at about 6 MiB in bf16, for the quick profile.

Parameter names follow Hugging Face's ``LlamaForCausalLM`` (``model.layers.0.
self_attn.q_proj.weight``, ...), so a real SmolLM2-135M ``model.safetensors``
loads into ``DecoderLM(CONFIGS["small"])`` with ``strict=True``.

Tied embeddings: the model has no ``lm_head`` parameter. ``forward`` projects
onto ``model.embed_tokens.weight`` directly, so a state dict holds the tied
weight once (safetensors' ``save_file`` refuses tensors that share memory) and
``load_state_dict(strict=True)`` restores the tie by construction, from a
``.pt`` or a ``.safetensors`` state dict alike, with or without ``assign=True``.
The module has no buffers (rotary frequencies are computed in ``forward``), so a
model built on the meta device is complete after ``load_state_dict(assign=True)``.

The big file of the load lab is a DecoderLM too, of the config :func:`big_config`
picks for a size in MiB (the ``big`` family: Llama-style widths, a 32,000-token
vocabulary; at 2 GiB it has TinyLlama-1.1B's layers, with the embedding tied).
:func:`next_token` is the first response: one forward pass of :data:`PROMPT_IDS`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

INIT_STD = 0.02  # normal init of every matrix, as in Llama-family configs (initializer_range)


@dataclass(frozen=True)
class DecoderConfig:
    """Shape of a :class:`DecoderLM`. Every size counts elements, not bytes.

    Raises ValueError naming the field when a size is not a positive integer,
    ``hidden_size`` is not a multiple of ``num_heads``, ``num_heads`` is not a
    multiple of ``num_kv_heads``, or the head size is odd (rotary pairs channels).
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    rope_theta: float = 100_000.0  # SmolLM2-135M's config.json
    rms_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        sizes = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size")
        for name in sizes:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"DecoderConfig.{name} must be an integer > 0, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"DecoderConfig.hidden_size must be a multiple of num_heads, "
                f"got {self.hidden_size} and {self.num_heads}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"DecoderConfig.num_heads must be a multiple of num_kv_heads, "
                f"got {self.num_heads} and {self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"DecoderConfig hidden_size / num_heads must be even, got {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


CONFIGS: dict[str, DecoderConfig] = {
    # ~3.1M parameters, ~6 MiB in bf16: same structure, quick-profile size.
    "tiny": DecoderConfig(
        vocab_size=8192, hidden_size=192, num_layers=4, num_heads=3, num_kv_heads=1, intermediate_size=512
    ),
    # SmolLM2-135M (Hugging Face config.json): 134,515,008 parameters, ~257 MiB in bf16.
    "small": DecoderConfig(
        vocab_size=49152, hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3, intermediate_size=1536
    ),
}


# The big family (:func:`big_config`): Llama 2's 32,000-token vocabulary, 64-channel heads, one key/value
# head per 8 query heads (TinyLlama's 32 and 4), and these widths, tried from the widest down.
BIG_VOCAB = 32_000
BIG_HEAD_DIM = 64
BIG_KV_GROUP = 8
BIG_WIDTHS = (8192, 4096, 2048, 1024, 512, 256)
BIG_MIN_LAYERS = (
    8  # a width is chosen only when at least this many layers of it fit (the narrowest always is)
)
BIG_ROPE_THETA = 10_000.0  # Llama's
BIG_DTYPE_BYTES = 2  # bf16


def llama_intermediate(hidden: int) -> int:
    """Llama's SwiGLU width: 8/3 of ``hidden``, rounded up to a multiple of 256 (2048 -> 5632)."""
    return 256 * math.ceil(8 * hidden / 3 / 256)


def big_config(mib: int) -> DecoderConfig:
    """The largest model of the big family whose bf16 weights fit in ``mib`` MiB.

    The rule, deterministic: for each width ``h`` of :data:`BIG_WIDTHS`, widest
    first, the layers that fit are ``floor((mib * 2**20 / 2 - vocab * h - h) /
    per_layer(h))`` (tied embedding, final norm; per layer the attention's q, k,
    v, o, the MLP's gate, up, down and two norms); the first width where at least
    :data:`BIG_MIN_LAYERS` fit is taken with that many layers, else the narrowest
    width with as many as fit. Heads: ``h / 64``; key/value heads: one per 8
    (at least 1); MLP width: :func:`llama_intermediate`. So the weights are at
    most ``mib`` MiB and within one layer of it: 32 MiB gives h=256, 11 layers
    (16,488,192 parameters, 31.4 MiB); 256 MiB gives h=1024, 9 layers
    (131,877,888, 251.5 MiB); 2048 MiB gives h=2048, 22 layers (1,034,512,384,
    1.93 GiB: TinyLlama-1.1B's layers, 32 heads, 4 key/value heads, MLP 5632,
    with the embedding tied).

    Raises ValueError when ``mib`` is not an integer or below :func:`big_min_mib`.
    """
    if isinstance(mib, bool) or not isinstance(mib, int):
        raise ValueError(f"the big model's size must be an integer number of MiB, got {mib!r}")
    params = mib * (1 << 20) // BIG_DTYPE_BYTES
    fallback = None
    for hidden in BIG_WIDTHS:
        heads = hidden // BIG_HEAD_DIM
        shape = {
            "vocab_size": BIG_VOCAB,
            "hidden_size": hidden,
            "num_heads": heads,
            "num_kv_heads": max(1, heads // BIG_KV_GROUP),
            "intermediate_size": llama_intermediate(hidden),
            "rope_theta": BIG_ROPE_THETA,
        }
        one = param_count(DecoderConfig(num_layers=1, **shape))
        zero = one - _layer_params(DecoderConfig(num_layers=1, **shape))
        layers = (params - zero) // (one - zero)
        if layers >= BIG_MIN_LAYERS:
            return DecoderConfig(num_layers=layers, **shape)
        fallback = (layers, shape)
    layers, shape = fallback
    if layers < 1:
        raise ValueError(
            f"the big model needs at least {big_min_mib()} MiB (one layer of width 256), got {mib}"
        )
    return DecoderConfig(num_layers=layers, **shape)


def big_min_mib() -> int:
    """The fewest whole MiB that hold the smallest model of the big family (width 256, one layer)."""
    heads = BIG_WIDTHS[-1] // BIG_HEAD_DIM
    config = DecoderConfig(
        vocab_size=BIG_VOCAB, hidden_size=BIG_WIDTHS[-1], num_layers=1, num_heads=heads,
        num_kv_heads=max(1, heads // BIG_KV_GROUP), intermediate_size=llama_intermediate(BIG_WIDTHS[-1]),
    )  # fmt: skip
    return math.ceil(param_count(config) * BIG_DTYPE_BYTES / (1 << 20))


def describe_config(config: DecoderConfig) -> dict:
    """A config as JSON-able facts: its fields, ``params`` (count) and ``weights_bytes`` in bf16."""
    params = param_count(config)
    return {"config": asdict(config), "params": params, "weights_bytes": params * BIG_DTYPE_BYTES}


def _layer_params(config: DecoderConfig) -> int:
    h, kv = config.hidden_size, config.num_kv_heads * config.head_dim
    return 2 * h * h + 2 * h * kv + 3 * h * config.intermediate_size + 2 * h


def param_count(config: DecoderConfig) -> int:
    """Number of parameters of ``DecoderLM(config)``, counting the tied embedding once."""
    # per layer: q, o and k, v projections (no biases), gate, up, down, two RMSNorm weights
    h = config.hidden_size
    return config.vocab_size * h + config.num_layers * _layer_params(config) + h  # + final norm


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x², last dim) + eps) * weight, computed in fp32 (Zhang & Sennrich, 2019)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def _rotary(seq: int, config: DecoderConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape [seq, head_dim], fp32 (RoFormer, Su et al. 2021; Llama's layout)."""
    half = torch.arange(0, config.head_dim, 2, device=device, dtype=torch.float32) / config.head_dim
    inv_freq = 1.0 / (config.rope_theta**half)
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def _apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat([-second, first], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary positions; no biases."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        h, kv = config.hidden_size, config.num_kv_heads * config.head_dim
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, kv, bias=False)
        self.v_proj = nn.Linear(h, kv, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        c = self.config
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, c.num_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, c.num_kv_heads, c.head_dim).transpose(1, 2)
        q, k = _apply_rotary(q, cos, sin), _apply_rotary(k, cos, sin)
        groups = c.num_heads // c.num_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, c.hidden_size))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)) (Shazeer, 2020)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderBody(nn.Module):
    """Embedding, the layers and the final norm (Hugging Face's ``model.`` prefix)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        # Built from an empty tensor and initialised here only off the meta device: on meta, nn.Embedding's
        # own init (normal_) runs a Python decomposition that imports torch._dynamo, over a second in a
        # fresh process (torch 2.13), for values a meta tensor never holds.
        weight = torch.empty(config.vocab_size, config.hidden_size)
        if weight.device.type != "meta":
            nn.init.normal_(weight)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, _weight=weight)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class DecoderLM(nn.Module):
    """Decoder-only language model with tied input and output embeddings.

    ``forward(input_ids)`` takes int64 token ids of shape [batch, seq] and
    returns logits of shape [batch, seq, vocab_size] in the weights' dtype.
    Raises ValueError when ``input_ids`` is not 2-D.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderBody(config)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape [batch, seq], got {tuple(input_ids.shape)}")
        x = self.model.embed_tokens(input_ids)
        cos, sin = _rotary(input_ids.shape[1], self.config, x.device)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return F.linear(self.model.norm(x), self.model.embed_tokens.weight)  # the tied output projection


def state_shapes(config: DecoderConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every entry of ``DecoderLM(config).state_dict()``, in its order (no allocation)."""
    with torch.device("meta"):
        model = DecoderLM(config)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def derived_seed(seed: int, label: str) -> int:
    """A 32-bit generator seed from ``seed`` and a label (a tensor's name): sha256, first 4 bytes.

    Hashed down to 32 bits because torch's CPU generator (mt19937) keeps only the
    low 32 bits of ``manual_seed``'s value: seeds that differ only above bit 31
    give the same numbers (seen on torch 2.13; tests/test_prep.py checks ours differ).
    """
    return int.from_bytes(hashlib.sha256(f"{seed}:{label}".encode()).digest()[:4], "little")


def build_weights(
    config: DecoderConfig, seed: int = 0, dtype: torch.dtype = torch.bfloat16, label: str = ""
) -> dict:
    """A seeded state dict for ``DecoderLM(config)``: name -> contiguous tensor of ``dtype``.

    Matrices are N(0, 0.02²) drawn in fp32 from a ``torch.Generator`` seeded
    from ``seed`` and ``label`` + the entry's name (the big file's label is
    ``big/``, so its tensors never repeat the small model's), then cast; RMSNorm weights are ones.
    The same arguments give the same values on the same torch version (CPU
    generator). No two entries share memory, so the dict suits both
    ``torch.save`` and safetensors' ``save_file``. Raises ValueError for a
    ``seed`` outside [0, 2**32).
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    state = {}
    for name, shape in state_shapes(config).items():
        if name.endswith("norm.weight"):
            state[name] = torch.ones(shape, dtype=dtype)
            continue
        gen = torch.Generator().manual_seed(derived_seed(seed, label + name))
        state[name] = (torch.randn(shape, generator=gen) * INIT_STD).to(dtype)
    return state


# The first response's fixed prompt: token ids, each taken modulo the model's vocabulary (so it fits any
# vocabulary). Eight ids: a short prompt, so the forward pass reads every weight once and little more.
PROMPT_IDS = (1, 415, 2936, 9060, 285, 1142, 461, 754)


def prompt_ids(config: DecoderConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    """:data:`PROMPT_IDS` modulo ``config.vocab_size``: int64, shape [1, 8], on ``device``."""
    ids = [i % config.vocab_size for i in PROMPT_IDS]
    return torch.tensor([ids], dtype=torch.int64, device=device)


def next_token(model: DecoderLM, device: torch.device | str = "cpu") -> tuple[int, float]:
    """One forward pass of the fixed prompt; return (next-token id, margin) on the host.

    Runs in ``torch.inference_mode()`` with the prompt on ``device`` (where the
    weights are). The id is the argmax of the last position's logits, read with
    ``.item()``, which waits for the device; the margin is the gap between the
    top two logits (in the weights' dtype, as a float), so a disagreement
    between two loads of the same weights can be read against how close the
    call was. Raises RuntimeError (torch's) when the weights and ``device`` differ.
    """
    with torch.inference_mode():
        logits = model(prompt_ids(model.config, device))[0, -1]
        top = torch.topk(logits.float(), 2).values
        token = int(logits.argmax().item())
        margin = float((top[0] - top[1]).item())
    return token, margin
