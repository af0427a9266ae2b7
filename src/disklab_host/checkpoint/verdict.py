"""The one checkpoint verdict: what a restart finds at a checkpoint path.

The crash lab, Break It and the power-cut simulator all judge a checkpoint
with :func:`classify`, so their outcomes mean the same thing. torch is
imported when a checkpoint is classified, not when this module is imported.
"""

from __future__ import annotations

import os
from pathlib import Path

OUTCOMES = ("new_ok", "old_ok", "corrupt", "missing", "unexpected_step")


def error_kind(message: str) -> str:
    """A short class for a load error: ``zip_central_directory``, ``zip``, ``safetensors`` or ``other``."""
    low = message.lower()
    if "central directory" in low:
        return "zip_central_directory"
    if "zip" in low or "pytorchstreamreader" in low:
        return "zip"
    if "safetensor" in low or "header" in low:
        return "safetensors"
    return "other"


def classify(path: str | os.PathLike, *, fmt: str, old_step: int, new_step: int, states=None) -> dict:
    """Load the checkpoint at ``path`` and say what a restart would find there.

    ``fmt`` is ``"pt"`` (torch.load with its default weights_only=True, the
    default since PyTorch 2.6) or ``"safetensors"`` (safetensors.torch.load_file).
    ``states`` optionally maps a step to the exact state dict saved for it;
    then every tensor is compared, so a file that loads but holds wrong bytes
    (e.g. zeros after a power cut) counts as corrupt.
    Returns ``{"outcome": one of OUTCOMES, "step": int | None, "error": str | None,
    "error_kind": str | None}``; ``error`` is ``"Type: message"`` (first line).
    Never raises for a bad file; raises ValueError for an unknown ``fmt``.
    """
    import torch

    if fmt not in ("pt", "safetensors"):
        raise ValueError(f"fmt must be 'pt' or 'safetensors', got {fmt!r}")
    path = Path(path)
    if not path.exists():
        return {"outcome": "missing", "step": None, "error": f"no file at {path.name}", "error_kind": None}
    try:
        if fmt == "pt":
            sd = torch.load(path, map_location="cpu")
        else:
            from safetensors.torch import load_file

            sd = load_file(str(path))
        step = int(sd["step"])
    except Exception as exc:  # any failure to load is the finding
        text = str(exc).strip()
        msg = f"{type(exc).__name__}: {text.splitlines()[0] if text else '(no message)'}"
        return {"outcome": "corrupt", "step": None, "error": msg, "error_kind": error_kind(msg)}
    if step not in (old_step, new_step):
        return {"outcome": "unexpected_step", "step": step, "error": None, "error_kind": None}
    if states is not None and step in states:
        want = states[step]
        bad = [k for k in want if k not in sd or not torch.equal(sd[k], want[k])]
        if bad or set(sd) != set(want):
            msg = f"ValueError: loads as step {step} but tensors differ from the saved state: {bad[:3]}"
            return {"outcome": "corrupt", "step": step, "error": msg, "error_kind": "values"}
    return {
        "outcome": "new_ok" if step == new_step else "old_ok",
        "step": step,
        "error": None,
        "error_kind": None,
    }
