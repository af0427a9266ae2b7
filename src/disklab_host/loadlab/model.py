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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

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


def param_count(config: DecoderConfig) -> int:
    """Number of parameters of ``DecoderLM(config)``, counting the tied embedding once."""
    h, kv = config.hidden_size, config.num_kv_heads * config.head_dim
    attention = 2 * h * h + 2 * h * kv  # q, o and k, v projections, no biases
    mlp = 3 * h * config.intermediate_size  # gate, up, down
    per_layer = attention + mlp + 2 * h  # two RMSNorm weights
    return config.vocab_size * h + config.num_layers * per_layer + h  # + final norm


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
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
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


def build_weights(config: DecoderConfig, seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> dict:
    """A seeded state dict for ``DecoderLM(config)``: name -> contiguous tensor of ``dtype``.

    Matrices are N(0, 0.02²) drawn in fp32 from a ``torch.Generator`` seeded
    from ``seed`` and the entry's name, then cast; RMSNorm weights are ones.
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
        gen = torch.Generator().manual_seed(derived_seed(seed, name))
        state[name] = (torch.randn(shape, generator=gen) * INIT_STD).to(dtype)
    return state
