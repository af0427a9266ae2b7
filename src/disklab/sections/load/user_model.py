"""The load section's "Your model" block."""

from __future__ import annotations

# The user's model's format, as usermodel.sniff names it, in the report's words.
USER_FORMATS = {
    "safetensors": "safetensors",
    "zip": "torch.save's zip format (torch 1.6 and later)",
    "legacy": "torch.save's legacy pickle format (before torch 1.6)",
}


# The rows of the user's own files, by their format, and of the file made from them.
USER_OWN_FILE = {"safetensors": "user_safetensors", "zip": "user_pt", "legacy": "user_pt"}


def user_model_summary(section: dict) -> dict | None:
    """What the "Your model" block says: the section's user_model, with the format found in words
    (``format_text``: sharded .bin included), the rows of the user's own files (``own_file``) and of
    the one made from them (``made``: ok with its path and size, or not_run with the reason)."""
    user = section.get("user_model")
    if not user or user.get("status") != "ok":
        return user
    fmt = user["format"]
    text = USER_FORMATS[fmt]
    if len(user["shards"]) > 1:
        ext = ".safetensors" if fmt == "safetensors" else ".bin"
        text = f"sharded {ext}, {len(user['shards'])} files, in {text}"
    return {
        **user,
        "format_text": text,
        "own_file": USER_OWN_FILE[fmt],
        "made_what": "a .pt (torch.save)"
        if fmt == "safetensors"
        else "a .safetensors of its state dict alone",
        "weights_note": user.get("weights_note"),
        "cells_not_run": user.get("cells_not_run") or [],
    }
