"""The controller's file writes: the host package's atomic writes, and plots through them.

Every file the controller writes goes through disklab_host.common.fsio (temp
file, fsync, rename, directory fsync): one implementation for both sides.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from disklab_host.common.fsio import atomic_write_bytes, atomic_write_json, atomic_write_text

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "save_figure"]


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure as PNG through :func:`atomic_write_bytes`, then close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
