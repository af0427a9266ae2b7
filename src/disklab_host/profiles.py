"""Lab profiles: the sizes each experiment uses, and the disk space they need.

``quick`` is the default and fits a 2-core machine in minutes; ``full`` uses
the lesson's sizes (the lesson, Build It section). Any size can be overridden
one by one from the inventory (``lab_run_<size name>``, e.g.
``lab_run_fsync_blocks``); overrides are validated
here, so a bad value is refused before any work starts, with its name.
Standard library only: the preflight runs this before the lab venv exists.
"""

from __future__ import annotations

from .common.units import MIB

PROFILES: dict[str, dict[str, int]] = {
    "quick": {
        # write_buffering: 1-byte calls timed per mode
        "write_buffering_calls": 200_000,
        # fsync_bench: blocks written per mode, and their size
        "fsync_blocks": 1000,
        "fsync_block_bytes": 4096,
        # big_write: one large write, then fsync
        "big_write_mib": 64,
        # crash: state dict of fp32 4 MiB tensors; time-kill sweep points and repeats
        "crash_state_mib": 128,
        "crash_time_points": 5,
        "crash_repeats": 2,
        # powercut: the small state dict saved under strace
        "powercut_state_mib": 4,
        # load: small model (0 = tiny config, 1 = the lesson's ~135M), big file tensors, repeats
        "load_small_full_size": 0,
        "load_big_tensors": 8,
        "load_repeats": 3,
    },
    "full": {
        "write_buffering_calls": 1_000_000,
        "fsync_blocks": 1000,
        "fsync_block_bytes": 4096,
        "big_write_mib": 512,
        "crash_state_mib": 1024,
        "crash_time_points": 8,
        "crash_repeats": 3,
        "powercut_state_mib": 8,
        "load_small_full_size": 1,
        "load_big_tensors": 64,
        "load_repeats": 5,
    },
}

# Sizes that may be 0 (flags); every other size must be > 0.
_FLAGS = {"load_small_full_size"}

# One big-file tensor: 4096 x 4096 bf16 (the lesson's big_src).
BIG_TENSOR_BYTES = 4096 * 4096 * 2
# The ~135M-parameter small model in bf16, and the tiny one, rounded up.
SMALL_FULL_BYTES = 300 * MIB
SMALL_TINY_BYTES = 16 * MIB


def resolve(profile: str, overrides: dict | None = None) -> dict[str, int]:
    """Sizes for ``profile`` with ``overrides`` applied.

    Raises ValueError naming the setting for an unknown profile, an unknown
    size name, or a size that is not a positive integer.
    """
    if profile not in PROFILES:
        raise ValueError(f"lab_run_profile must be one of {sorted(PROFILES)}, got {profile!r}")
    sizes = dict(PROFILES[profile])
    for name, value in (overrides or {}).items():
        if name not in sizes:
            raise ValueError(f"lab_run_{name} is not a known size setting; known: {sorted(sizes)}")
        low = 0 if name in _FLAGS else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            rule = ">= 0" if low == 0 else "> 0"
            raise ValueError(f"lab_run_{name} must be an integer {rule}, got {value!r}")
        sizes[name] = value
    return sizes


def needed_bytes(sizes: dict[str, int], steps: list[str]) -> dict[str, int]:
    """Peak bytes each enabled step writes to the workbench at once.

    Steps run one after another and remove their large files, so the peak is
    the largest step plus the load lab's weights, which are kept for reuse.
    """
    small = SMALL_FULL_BYTES if sizes["load_small_full_size"] else SMALL_TINY_BYTES
    big = sizes["load_big_tensors"] * BIG_TENSOR_BYTES
    table = {
        "write_buffering": 1 * MIB,
        "fsync_bench": (sizes["fsync_blocks"] + 5) * sizes["fsync_block_bytes"],  # + 5 warm-up blocks
        "big_write": sizes["big_write_mib"] * MIB,
        # good checkpoint + the killed save's file, for each saver mode
        "crash": 3 * sizes["crash_state_mib"] * MIB,
        # old and new checkpoint, temp file, and the strace text (data as hex, ~4.2x the state)
        "powercut": 8 * sizes["powercut_state_mib"] * MIB,
        # .pt and .safetensors of both, plus one cold copy of the largest
        "load": 2 * (small + big) + big,
    }
    return {step: table[step] for step in steps if step in table}
