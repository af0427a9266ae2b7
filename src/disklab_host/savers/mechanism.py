"""The mechanisms a save's recording shows: what a kill or a power cut can break, named from its calls.

Each is found in the recorded effects on the checkpoint directory (:class:`disklab_host.powercut.states.Op`),
never quoted from a framework's documentation, and carries the fix it calls for. A mechanism says what
*can* go wrong; the crash states say whether it did (the page shows both).
"""

from __future__ import annotations

import posixpath

from ..powercut.states import DATA_KINDS, META_KINDS


def _parent(path: str) -> str:
    return posixpath.dirname(path) or "."


def find(ops: list, initial: dict[str, bytes], target: str) -> list[dict]:
    """The mechanisms in ``ops`` (the traced save's effects, ``initial`` the files before it) for the
    checkpoint directory ``target``: a list of {"kind", "text", "fix"}, in the order they first occur."""
    names = {p: i for i, p in enumerate(sorted(initial))}  # path -> ino, as Recording.initial_inodes
    path_of = {i: p for p, i in names.items()}
    before = set(names.values())
    last_data: dict[int, int] = {}
    last_fsync: dict[int, int] = {}
    rewritten: list[str] = []
    entries: dict[str, list] = {}  # directory -> [(call, words)] of its entry changes
    dirsync: dict[str, int] = {}
    removed: dict[str, int] = {}
    out: list[dict] = []

    def add(kind: str, text: str, fix: str) -> None:
        if not any(m["text"] == text for m in out):
            out.append({"kind": kind, "text": text, "fix": fix})

    for op in ops:
        if op.kind == "create":
            names[op.path], path_of[op.ino] = op.ino, op.path
        if op.kind in DATA_KINDS:
            last_data[op.ino] = op.call
            if op.ino in before and path_of.get(op.ino) not in rewritten:
                rewritten.append(path_of.get(op.ino))
        elif op.kind in ("fsync", "fdatasync"):
            last_fsync[op.ino] = op.call
        elif op.kind == "dirsync":
            dirsync[op.path] = op.call
        elif op.kind == "sync":  # sync(2), syncfs(2): every file and every directory
            last_fsync.update(dict.fromkeys(path_of, op.call))
            dirsync.update(dict.fromkeys([*entries, "."], op.call))
        if op.kind in META_KINDS:
            words = {"create": f"the creation of {op.path}", "mkdir": f"the creation of {op.path}/",
                     "rename": f"the rename of {op.path} to {op.dst}", "unlink": f"the removal of {op.path}",
                     "exchange": f"the exchange of {op.path} and {op.dst}"}[op.kind]  # fmt: skip
            where = op.path if op.kind == "mkdir" else (op.dst if op.kind == "rename" else op.path)
            entries.setdefault(_parent(where if op.kind != "mkdir" else op.path), []).append((op.call, words))
        if op.kind == "unlink":
            removed[op.path] = op.call
            gone = names.pop(op.path, None)
            if gone is not None:
                path_of.pop(gone, None)
        if op.kind == "rename":
            if op.dst in removed:
                add("remove_before_rename",
                    f"{op.dst} is removed before {op.path} is renamed over it: between the two, there is no "
                    f"{posixpath.basename(op.dst)}",
                    f"rename {op.path} over {op.dst} without removing it first (rename replaces it "
                    "atomically)")  # fmt: skip
            if op.ino is not None:
                path_of[op.ino] = op.dst
            if op.path in names:
                ino = names.pop(op.path)
                names[op.dst], path_of[ino] = ino, op.dst
    for path in rewritten:
        if path is not None and path.startswith(target + "/") or path == target:
            add("in_place_rewrite",
                f"{path} held the earlier checkpoint and is rewritten in place: until the save ends, part of "
                f"{target}/ is new and part is old",
                "save each checkpoint into a new directory and rename it into place (or keep the last "
                "two)")  # fmt: skip
    for ino, call in last_data.items():
        if ino not in path_of:  # removed again before the save returned (a temp file): nothing to lose
            continue
        name = path_of[ino]
        if ino not in last_fsync:
            add("never_fsynced", f"{name} is never fsynced: a power cut can lose its data",
                f"fsync {name} before the save returns")  # fmt: skip
        elif last_fsync[ino] < call:
            add("data_after_fsync",
                f"{name} is written after its last fsync (the fsync ran before the buffer was flushed): "
                "a power cut can lose that data",
                f"flush {name}'s buffer before fsyncing it")  # fmt: skip
    for directory, changes in entries.items():
        late = [w for call, w in changes if call > dirsync.get(directory, -1)]
        if late:
            shown = f"{directory}/" if directory != "." else "the checkpoint's parent directory"
            add("no_dir_fsync",
                f"{late[-1]} is not followed by an fsync of {shown}: a power cut can lose it"
                + (f" (and {len(late) - 1} other entry change(s) there)" if len(late) > 1 else ""),
                f"fsync {shown} after the save returns")  # fmt: skip
    return out


def suggestion(mechanisms: list[dict], verdicts: dict[str, str]) -> str | None:
    """The fix the verdicts call for, from the mechanisms found (None when every model gave safe)."""
    if all(v == "safe" for v in verdicts.values()) or not mechanisms:
        return None
    fixes = list(dict.fromkeys(m["fix"] for m in mechanisms))
    return "; ".join(fixes)
