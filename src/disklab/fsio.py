"""The controller's file writes: the host package's atomic writes.

Every file the controller writes goes through disklab_host.common.fsio (temp
file, fsync, rename, directory fsync; a cache that only saves work, without the
fsyncs): one implementation for both sides. Plots go through them too, by
disklab.plotting.
"""

from __future__ import annotations

from disklab_host.common.fsio import atomic_write_bytes, atomic_write_json, atomic_write_text

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text"]
