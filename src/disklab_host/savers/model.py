"""The one model every saver saves: a Llama-shaped state dict, made from seeded random numbers.

The names and shapes are those of transformers' ``LlamaForCausalLM`` for :func:`config` (so
``save_pretrained`` takes it as it is), at a size the profile sets. Two steps (the earlier checkpoint and
the new one) differ in every value, so a judge can tell, tensor by tensor, which step a file holds.
Nothing is downloaded.
"""

from __future__ import annotations

from ..common.units import MIB

HEADS = 4
# (hidden, intermediate, vocabulary): the family's widths. A state of 4 MiB and more takes the first (about
# 3 MiB a decoder layer and 2 MiB of embeddings); a smaller one is the second's single layer (0.33 MiB in
# all: the tests' size, few tensors and so few crash states).
WIDTHS = ((256, 688, 1024), (64, 172, 256))


def widths(state_mib: int) -> tuple[int, int, int]:
    """(hidden, intermediate, vocabulary) for a state of ``state_mib`` MiB."""
    return WIDTHS[0] if state_mib >= 4 else WIDTHS[1]


def layers_for(state_mib: int) -> int:
    """Decoder layers that bring the fp32 state nearest ``state_mib`` MiB, at least one."""
    if state_mib < 4:
        return 1
    hidden, inter, vocab = widths(state_mib)
    per_layer = 4 * (4 * hidden * hidden + 3 * hidden * inter + 2 * hidden)
    outside = 4 * (2 * vocab * hidden + hidden)  # embeddings, lm_head, the final norm
    return max(1, round((state_mib * MIB - outside) / per_layer))


def config(state_mib: int) -> dict:
    """The LlamaConfig arguments of the model (fp32, untied embeddings)."""
    hidden, inter, vocab = widths(state_mib)
    return {
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers_for(state_mib),
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "vocab_size": vocab,
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }


def shapes(state_mib: int) -> dict[str, tuple[int, ...]]:
    """Each tensor's name and shape, as LlamaForCausalLM.state_dict() gives them."""
    hidden, inter, vocab = widths(state_mib)
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers_for(state_mib)):
        p = f"model.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[f"{p}.self_attn.{proj}.weight"] = (hidden, hidden)
        out[f"{p}.mlp.gate_proj.weight"] = (inter, hidden)
        out[f"{p}.mlp.up_proj.weight"] = (inter, hidden)
        out[f"{p}.mlp.down_proj.weight"] = (hidden, inter)
        out[f"{p}.input_layernorm.weight"] = (hidden,)
        out[f"{p}.post_attention_layernorm.weight"] = (hidden,)
    out["model.norm.weight"] = (hidden,)
    out["lm_head.weight"] = (vocab, hidden)
    return out


def state_bytes(state_mib: int) -> int:
    """The fp32 bytes of the model's tensors."""
    total = 0
    for shape in shapes(state_mib).values():
        n = 1
        for d in shape:
            n *= d
        total += 4 * n
    return total


def state(state_mib: int, step: int) -> dict:
    """The model's fp32 tensors at ``step``: seeded, so two calls with the same arguments are equal."""
    import torch

    gen = torch.Generator().manual_seed(7_919 * step + 1)
    return {name: torch.randn(shape, generator=gen) for name, shape in shapes(state_mib).items()}
