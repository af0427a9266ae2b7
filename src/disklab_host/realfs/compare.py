"""The real images held against the simulator: a confusion matrix, and each disagreement in words.

Verdicts are the power-cut simulator's (powercut.check.check_model): ``safe``
(every state new_ok or old_ok), ``rolled_back`` (some state after the return
holds the old checkpoint), ``unsafe`` (some state corrupt or missing). Ranked
safe > rolled_back > unsafe, a real filesystem is *kinder* than the POSIX model
where its verdict ranks higher, *harsher* where it ranks lower; harsher is a
bug in the simulator (the model allows less damage than a real image shows),
and ``tests/test_realfs_simulator.py`` holds each one found.

:data:`MECHANISMS` names, for the disagreements measured on this kernel, the
filesystem mechanism that explains them (sources: ext4(5) auto_da_alloc;
Documentation/filesystems/ext4.rst; fs/btrfs/inode.c btrfs_rename; xfs(5)).
"""

from __future__ import annotations

VERDICTS = ("safe", "rolled_back", "unsafe")
RANK = {v: i for i, v in enumerate(reversed(VERDICTS))}  # unsafe 0 < rolled_back 1 < safe 2

RENAME_OVER = ("rename_no_fsync", "safetensors", "fsync_before_flush")
MECHANISMS = {
    ("ext4", "rename"): (
        "ext4's auto_da_alloc (on by default): renaming a file over an existing one starts writeback of "
        "the new file's delayed-allocation blocks at the rename (ext4_alloc_da_blocks), and data=ordered "
        "writes those blocks before the journal commits the rename, so no commit can name a file whose "
        "data is not on the device"
    ),
    ("btrfs", "rename"): (
        "btrfs starts writeback of a file renamed over a non-empty one (btrfs_rename, the same heuristic "
        "as ext4's auto_da_alloc), and only a transaction commit makes the rename durable: the bystander's "
        "fsync went through btrfs's log tree, which holds that file alone, not the rename"
    ),
    ("ext4", "truncate"): (
        "ext4's auto_da_alloc also writes out a file truncated to zero when it is closed, and no journal "
        "commit came between the truncate and the data writes of this short save (ext4 commits every 5 s): "
        "a longer save, or another process's fsync during it, reaches the truncated state the model allows"
    ),
    ("any", "neighbour"): (
        "the neighbour's fsync committed the journal (ext4) or forced the log (xfs) with the rename in it "
        "before the save returned, which is what the save's missing directory fsync would have done"
    ),
    ("any", "truncate"): (
        "no journal or log commit came between the truncate and the data writes of this short save; a "
        "longer save, or another process's fsync during it, reaches the truncated state the model allows"
    ),
}


def mechanism(fs: str, recipe: str, load: str = "quiet") -> str | None:
    """The named mechanism for a kinder verdict of ``recipe`` on ``fs``, or None when none is known."""
    if recipe == "no_dir_fsync":
        return MECHANISMS[("any", "neighbour")] if load == "busy" else None
    if recipe in RENAME_OVER:
        return MECHANISMS.get((fs, "rename"))
    if recipe == "naive" and load == "quiet":
        return MECHANISMS.get((fs, "truncate"), MECHANISMS[("any", "truncate")])
    return None


def label(cell: dict) -> str:
    """A column of the matrix: the filesystem, with ", busy" for a save recorded beside a neighbour."""
    return cell["fs"] if cell.get("load", "quiet") == "quiet" else f"{cell['fs']}, {cell['load']}"


def judge(simulator: str | None, real: str | None) -> str:
    """``agree``, ``kinder``, ``harsher`` (a simulator bug) or ``unknown`` (one side has no verdict)."""
    if simulator not in RANK or real not in RANK:
        return "unknown"
    if RANK[real] == RANK[simulator]:
        return "agree"
    return "kinder" if RANK[real] > RANK[simulator] else "harsher"


def confusion(cells: list[dict]) -> dict:
    """Per filesystem and load (:func:`label`): {simulator verdict: {real verdict: number of recipes}}."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for c in cells:
        if c.get("verdict") not in RANK or c.get("simulator") not in RANK:
            continue
        m = out.setdefault(label(c), {s: dict.fromkeys(VERDICTS, 0) for s in VERDICTS})
        m[c["simulator"]][c["verdict"]] += 1
    return out


def disagreements(cells: list[dict]) -> list[dict]:
    """Every cell whose real verdict differs from the simulator's, with its kind and mechanism."""
    out = []
    for c in cells:
        kind = judge(c.get("simulator"), c.get("verdict"))
        if kind in ("kinder", "harsher"):
            why = mechanism(c["fs"], c["recipe"], c.get("load", "quiet")) if kind == "kinder" else None
            out.append({
                "fs": c["fs"], "load": c.get("load", "quiet"), "recipe": c["recipe"],
                "simulator": c["simulator"], "real": c["verdict"],
                "kind": kind, "mechanism": why,
                "simulator_bug": kind == "harsher",
            })  # fmt: skip
    return out
