"""The one registry of lab steps and their sizes. Everything else reads it.

Each :class:`Step` names the step, its module under ``disklab_host.steps``, its
sizes (name, quick value, full value, unit, one line of meaning, and the rules
a value must follow), whether it needs torch, the platforms it runs on, the
helper subpackages whose code it uses (for the code digest in every results
file) and how much disk it needs at once. The runner's order, the profiles,
preflight and the report's section order all come from :data:`STEPS`; the YAML that
Ansible reads (the step tags, lab_run's steps and sizes) is written from it by
``make steps`` (disklab.stepfiles), and tests/test_stepfiles.py names what differs.

Profiles: ``quick`` fits a 2-core machine in minutes; ``full`` uses the lesson's
sizes (the lesson, Build It section). Standard library only: the preflight
imports this with the host's own Python, before the lab venv exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .common.units import MIB

PROFILES = ("quick", "full")
PLATFORMS = ("Linux", "Darwin")

# The fewest MiB the load lab's big model fits in: the smallest of its family (loadlab/model.py big_config:
# width 256, one layer, a 32,000-token vocabulary) is 17.1 MiB in bf16. tests/test_prep.py checks it.
BIG_MIN_MIB = 18
# A weights file's bytes beyond its tensors (the safetensors header, torch.save's zip records), at most.
WEIGHTS_FILE_OVERHEAD_BYTES = 1 * MIB
# The ~135M-parameter small model in bf16, and its tiny config, rounded up.
SMALL_FULL_BYTES = 300 * MIB
SMALL_TINY_BYTES = 16 * MIB


@dataclass(frozen=True)
class Size:
    """One size setting of a step: ``lab_run_<name>`` in the inventory."""

    name: str
    quick: int
    full: int
    unit: str  # count, bytes, MiB, s or flag
    meaning: str
    minimum: int = 1
    multiple_of: int = 1

    def describe(self) -> str:
        """One line for the role's defaults and specs: meaning (unit, rules; quick and full values)."""
        rules = f", a multiple of {self.multiple_of}" if self.multiple_of > 1 else ""
        if self.minimum > 1 and self.minimum != self.multiple_of:
            rules = f", at least {self.minimum}{rules}"
        return f"{self.meaning} ({self.unit}{rules}; quick {self.quick}, full {self.full})"

    def check(self, value: object) -> int:
        """Return ``value`` when it follows this size's rules; raise ValueError naming the setting."""
        rule = "> 0" if self.minimum == 1 else f">= {self.minimum}"
        if self.multiple_of > 1:
            rule += f" and a multiple of {self.multiple_of}"
        if self.unit == "flag":
            rule = "0 or 1"
        bad_flag = self.unit == "flag" and value not in (0, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum or bad_flag:
            raise ValueError(f"lab_run_{self.name} must be an integer {rule}, got {value!r}")
        if value % self.multiple_of:
            raise ValueError(f"lab_run_{self.name} must be an integer {rule}, got {value!r}")
        return value


@dataclass(frozen=True)
class Step:
    """One experiment of the lab."""

    name: str
    title: str
    sizes: tuple[Size, ...]
    needs_torch: bool
    platforms: tuple[str, ...]
    needed_bytes: Callable[[dict[str, int]], int]
    uses: tuple[str, ...] = field(default=())  # helper subpackages of disklab_host besides common
    module: str = ""  # the module with run(cfg, workdir); disklab_host.steps.<name> when left empty
    # A step off by default: it runs only when settings[setting] is true (the role's lab_run_<setting>),
    # and needs no disk when off.
    setting: str | None = None
    # Rules between this step's sizes (each size's own rules are Size.check): raises ValueError naming the
    # settings; registry.resolve runs it, so a bad pair is refused before any work.
    check_sizes: Callable[[dict[str, int]], None] | None = None
    # Bytes the step writes beyond needed_bytes only when a host's settings ask for them (sizes, settings):
    # the load step's tensorizer files, made only when lab_run_load_loaders names tensorizer.
    settings_bytes: Callable[[dict[str, int], dict], int] | None = None

    def enabled(self, settings: dict) -> bool:
        """On unless its setting is off: a flag (true), or a list that names something (lab_run_savers; its
        text too, as ``-e 'NAME=[a,b]'`` passes it to Ansible)."""
        value = settings.get(self.setting) if self.setting else None
        if self.setting is None or value is True:
            return True
        if self.setting not in LIST_SETTINGS:
            return False
        text = ",".join(map(str, value)) if isinstance(value, list) else str(value or "")
        return bool(text.strip("[] ,"))

    def __post_init__(self) -> None:
        if not self.module:
            object.__setattr__(self, "module", f"disklab_host.steps.{self.name}")


def _load_weights_bytes(s: dict[str, int]) -> int:
    """The load lab's weights, kept on the workbench for reuse: .pt and .safetensors of both files."""
    small = SMALL_FULL_BYTES if s["load_small_full_size"] else SMALL_TINY_BYTES
    return 2 * (small + _big_file_bytes(s))


def _big_file_bytes(s: dict[str, int]) -> int:
    """One big weights file at most: the model fits in load_big_mib MiB, plus the file's own records."""
    return s["load_big_mib"] * MIB + WEIGHTS_FILE_OVERHEAD_BYTES


# tensorizer's format adds about 256 KiB per file and ~100 bytes per tensor to the tensor bytes (tensorizer
# 2.12.1, measured here: 262,319 bytes over one 32 MiB tensor, 262,977 over eight); 1 MiB per file covers it.
TENSORIZER_OVERHEAD_BYTES = MIB
# The setting that names the production loaders (loadlab/loaders.py), and the one that writes its own files.
LOADERS_SETTING = "load_loaders"
# Settings of a step (Step.setting) that are lists: the step is on when the list names something.
LIST_SETTINGS = ("savers",)
TENSORIZER = "tensorizer"


def _tensorizer_bytes(s: dict[str, int], settings: dict) -> int:
    """tensorizer's copy of the big weights (prep.TENSORIZER_FILES), kept on the workbench like the other
    weight files, when lab_run_load_loaders names tensorizer; else 0."""
    if TENSORIZER not in (settings.get(LOADERS_SETTING) or []):
        return 0
    return s["load_big_mib"] * MIB + TENSORIZER_OVERHEAD_BYTES


def _check_ceiling(s: dict[str, int]) -> None:
    """The parallel ceiling's block must fit in its file: one block at least per stream's slice."""
    if s["ceiling_block_bytes"] > s["ceiling_mib"] * MIB:
        raise ValueError(
            f"lab_run_ceiling_block_bytes must be at most the ceiling's file (lab_run_ceiling_mib "
            f"{s['ceiling_mib']} MiB = {s['ceiling_mib'] * MIB} bytes), got {s['ceiling_block_bytes']}"
        )


STEPS: tuple[Step, ...] = (
    Step(
        name="write_buffering",
        title="unbuffered 1-byte os.write against a buffered f.write",
        sizes=(Size("write_buffering_calls", 200_000, 1_000_000, "count", "1-byte calls timed per mode"),),
        needs_torch=False,
        platforms=PLATFORMS,
        needed_bytes=lambda s: 1 * MIB,
    ),
    Step(
        name="fsync_bench",
        title="latency of 4 KiB writes then nothing, fsync, fdatasync, F_FULLFSYNC, F_BARRIERFSYNC, O_DSYNC",
        sizes=(
            Size("fsync_blocks", 1000, 1000, "count", "blocks written per mode"),
            Size("fsync_block_bytes", 4096, 4096, "bytes", "size of each block"),
        ),
        needs_torch=False,
        platforms=PLATFORMS,
        needed_bytes=lambda s: (s["fsync_blocks"] + 5) * s["fsync_block_bytes"],  # + 5 warm-up blocks
    ),
    Step(
        name="big_write",
        title="one large write, then fsync, each timed",
        sizes=(Size("big_write_mib", 64, 512, "MiB", "size of the one large write"),),
        needs_torch=False,
        platforms=PLATFORMS,
        needed_bytes=lambda s: s["big_write_mib"] * MIB,
    ),
    Step(
        name="crash",
        title="SIGKILL during naive, atomic and safetensors saves, and the lesson's Break It cases",
        sizes=(
            Size("crash_state_mib", 128, 1024, "MiB", "state dict saved and killed, in 4 MiB tensors", 4, 4),
            Size("crash_time_points", 5, 8, "count", "kill delays in the time sweep"),
            Size("crash_repeats", 2, 3, "count", "repeats of each time-sweep kill"),
        ),
        needs_torch=True,
        platforms=PLATFORMS,
        needed_bytes=lambda s: 3 * s["crash_state_mib"] * MIB,  # good checkpoint + the killed save, per mode
        uses=("checkpoint", "cache"),
    ),
    Step(
        name="powercut",
        title="every crash state of each save recipe under process-kill and power-cut models",
        sizes=(
            Size("powercut_state_mib", 4, 8, "MiB", "state dict saved under strace, in 4 MiB tensors", 4, 4),
        ),
        needs_torch=True,
        platforms=("Linux",),
        # old and new checkpoint, temp file, and the strace text (data as hex, ~4.2x the state)
        needed_bytes=lambda s: 8 * s["powercut_state_mib"] * MIB,
        uses=("powercut", "checkpoint"),
    ),
    Step(
        name="savers",
        title="the savers users run (torch.distributed.checkpoint, transformers, accelerate, Lightning) "
        "under SIGKILL and every power-cut state",
        sizes=(
            Size(
                "savers_state_mib",
                4,
                8,
                "MiB",
                "the Llama-shaped model every saver saves (below 4: one layer)",
            ),
        ),
        needs_torch=True,
        platforms=("Linux",),
        # per case: the earlier and the new checkpoint, a scratch copy, and the strace text (hex, ~4.2x)
        needed_bytes=lambda s: 10 * max(s["savers_state_mib"], 6) * MIB,
        uses=("savers", "powercut", "checkpoint"),
        setting="savers",
    ),
    Step(
        name="realfs",
        title="the save recipes on real ext4, xfs and btrfs crash images; a real fsync error",
        sizes=(
            Size("realfs_filesystems", 1, 3, "count", "filesystems, in the order ext4, xfs, btrfs"),
            Size("realfs_recipes", 2, 7, "count", "save recipes, rename_no_fsync and atomic first"),
            Size(
                "realfs_state_mib", 4, 8, "MiB", "state dict saved on each filesystem, in 4 MiB tensors", 4, 4
            ),
            Size(
                "realfs_subsets", 1, 3, "count", "random subsets of the unflushed writes between two flushes"
            ),
            Size("realfs_max_states", 16, 48, "count", "crash images mounted per recipe and filesystem"),
            Size(
                "realfs_busy",
                0,
                1,
                "flag",
                "1 = also record each save beside a neighbour that fsyncs in a loop",
                0,
            ),
        ),
        needs_torch=True,
        platforms=("Linux",),
        # at most four sparse images at once (start, live or plain, begin, crash: xfs, the largest, has
        # ~70 MiB of data extents each, its zeroed log), plus the write log (~1.1x the state per save)
        needed_bytes=lambda s: 320 * MIB + 4 * s["realfs_state_mib"] * MIB,
        uses=("realfs", "powercut", "checkpoint"),
        setting="realfs",
    ),
    Step(
        name="ceiling",
        title="this host's own ceilings: one file read cold after eviction and warm in 8 MiB reads, and "
        "cold in parallel direct reads",
        sizes=(
            Size("ceiling_mib", 128, 1024, "MiB", "size of the file read cold and warm"),
            # 4 streams of 4 MiB: why, and what this VM measured, in steps/ceiling.py's docstring
            Size(
                "ceiling_streams",
                4,
                4,
                "count",
                "parallel ceiling: read streams, one read in flight each (queue depth)",
            ),
            Size(
                "ceiling_block_bytes",
                4 * MIB,
                4 * MIB,
                "bytes",
                "parallel ceiling: bytes per read call",
                4096,
                4096,
            ),
            Size(
                "ceiling_direct",
                1,
                1,
                "flag",
                "parallel ceiling: 1 = direct I/O (O_DIRECT; macOS: F_NOCACHE), 0 = buffered",
                0,
            ),
        ),
        needs_torch=False,
        platforms=PLATFORMS,
        needed_bytes=lambda s: 2 * s["ceiling_mib"] * MIB,  # the file, and a macOS cold copy of it
        uses=("cache",),
        check_sizes=_check_ceiling,
    ),
    Step(
        name="load",
        title="torch.load, mmap, safetensors and one tensor, cold and warm, at named readiness stages",
        sizes=(
            Size(
                "load_small_full_size",
                0,
                1,
                "flag",
                "1 = the ~135M-parameter small model, 0 = tiny",
                0,
            ),
            Size(
                "load_big_mib",
                256,
                2048,
                "MiB",
                "big file: the largest Llama-style bf16 DecoderLM that fits",
                BIG_MIN_MIB,
            ),
            # full: 8 a side is about the fewest at which one changed figure among a compare's ~60 can
            # clear Benjamini-Hochberg (2/C(16, 8) = 0.00016 < 0.05/60; disklab.verdicts); quick's 3 can
            # decide nothing (its smallest exact p is 0.10), and says so
            Size(
                "load_repeats",
                3,
                8,
                "count",
                "repeats of each load measurement (with load_adaptive: at least)",
            ),
            Size(
                "load_repeats_max",
                12,
                30,
                "count",
                "with load_adaptive: cap on a cell's repeats, till its median is known to ±5 %",
            ),
            Size(
                "load_budget_s", 600, 3600, "s", "with load_adaptive: the seconds the repeats may take in all"
            ),
        ),
        needs_torch=True,
        platforms=PLATFORMS,
        # the kept weights, plus one cold copy of the big file
        needed_bytes=lambda s: _load_weights_bytes(s) + _big_file_bytes(s),
        uses=("loadlab", "cache"),
        settings_bytes=_tensorizer_bytes,
    ),
    Step(
        name="pickle_safety",
        title="a crafted malicious .pt that torch.load must refuse",
        sizes=(),
        needs_torch=True,
        platforms=PLATFORMS,
        needed_bytes=lambda s: 1 * MIB,
    ),
)

BY_NAME: dict[str, Step] = {step.name: step for step in STEPS}
STEP_NAMES: tuple[str, ...] = tuple(BY_NAME)
SIZES: dict[str, Size] = {size.name: size for step in STEPS for size in step.sizes}
# Steps whose files stay on the workbench between runs (reused through a manifest).
KEPT = {"load": _load_weights_bytes}
# Size settings that no longer exist, and what to set instead: an inventory that still sets one is refused
# before any work (resolve), in one line, since the role would otherwise pass it over in silence.
RETIRED: dict[str, str] = {
    "load_big_tensors": (
        "lab_run_load_big_mib, the big model file's size in MiB (quick 256, full 2048; the old count of "
        "32 MiB tensors times 32: 8 tensors = 256 MiB)"
    ),
}


def step(name: str) -> Step:
    """The registered step ``name``; raises ValueError naming lab_run_steps and the known steps."""
    if name not in BY_NAME:
        raise ValueError(f"lab_run_steps has unknown step {name!r}; known: {list(STEP_NAMES)}")
    return BY_NAME[name]


def check_steps(steps: list[str]) -> list[str]:
    """``steps`` when every one is registered; raise ValueError naming the unknown ones."""
    unknown = [s for s in steps if s not in BY_NAME]
    if unknown:
        raise ValueError(f"lab_run_steps has unknown steps {unknown}; known: {list(STEP_NAMES)}")
    return steps


def profile_sizes(profile: str) -> dict[str, int]:
    """Every size at ``profile``'s value; raises ValueError naming lab_run_profile."""
    if profile not in PROFILES:
        raise ValueError(f"lab_run_profile must be one of {sorted(PROFILES)}, got {profile!r}")
    return {name: getattr(size, profile) for name, size in SIZES.items()}


def resolve(profile: str, overrides: dict | None = None, *, strict: bool = True) -> dict[str, int]:
    """Sizes for ``profile`` with ``overrides`` applied, each checked against its rules.

    ``overrides`` maps a size name (``lab_run_`` left off) to its value. With
    ``strict=False`` names that are not sizes are passed over: the lab_run role
    sends every lab_run_* setting that is set, and picks no names itself.
    Raises ValueError naming the setting for an unknown profile, a retired size
    (:data:`RETIRED`, strict or not: one line naming what to set instead), an
    unknown size name (strict), a value that breaks its size's rules, or sizes
    that break a rule between them (Step.check_sizes).
    """
    sizes = profile_sizes(profile)
    for name, value in (overrides or {}).items():
        if name in RETIRED:
            raise ValueError(f"lab_run_{name} is no longer a setting: set {RETIRED[name]} instead")
        if name not in SIZES:
            if strict:
                raise ValueError(f"lab_run_{name} is not a known size setting; known: {sorted(SIZES)}")
            continue
        sizes[name] = SIZES[name].check(value)
    for step_ in STEPS:
        if step_.check_sizes is not None:
            step_.check_sizes(sizes)
    return sizes


def needed_bytes(sizes: dict[str, int], steps: list[str], settings: dict | None = None) -> dict[str, int]:
    """Peak bytes each listed step writes to the workbench at once (its own files, while it runs, with
    what its settings add: Step.settings_bytes); 0 for a step whose setting is off (see Step.setting)."""
    settings = settings or {}

    def need(step: Step) -> int:
        if not step.enabled(settings):
            return 0
        extra = step.settings_bytes(sizes, settings) if step.settings_bytes else 0
        return step.needed_bytes(sizes) + extra

    return {name: need(BY_NAME[name]) for name in steps if name in BY_NAME}
