"""What a restart finds in a checkpoint directory, judged tensor by tensor against the two saved states.

A checkpoint that loads is not yet right: each tensor the framework returned is compared with the earlier
state and the new one. Outcomes:

* ``new_ok`` / ``old_ok``: every tensor equals the new state's / the earlier state's;
* ``mixed``: it loads and every element equals one of the two states, but not all the same one: old and new
  together (whole tensors, or rows of one tensor from different ranks), which no training step ever held.
  The most serious verdict: nothing fails, the run resumes from a state that never existed;
* ``corrupt``: it loads but a tensor equals neither state (lost bytes, zeros), or it does not load;
* ``missing``: the framework found no checkpoint there.
"""

from __future__ import annotations

OUTCOMES = ("new_ok", "old_ok", "mixed", "corrupt", "missing")
NO_CHECKPOINT = "global metadata read failed"  # DCP's words where a directory has no .metadata


def worst(verdicts) -> str:
    """The worst of several verdicts (a saver's over its cases): unsafe, then rolled_back, then safe."""
    verdicts = list(verdicts)
    return "unsafe" if "unsafe" in verdicts else "rolled_back" if "rolled_back" in verdicts else "safe"


def compare(found: dict, old: dict, new: dict) -> dict:
    """``found`` (name -> tensor) against ``old`` and ``new``, element by element: {"outcome", "old", "new",
    "both", "neither"} with the names in each group. ``both``: a tensor whose every element equals the one
    of either state, some of each (rows from a rank that wrote the new step and rows from one that had
    not); an element equal to both states counts as new. The two states differ in every element (seeded
    random values), so an element tells which step it came from."""
    import torch

    groups: dict[str, list[str]] = {"old": [], "new": [], "both": [], "neither": []}
    for name, want in new.items():
        got = found.get(name)
        if got is None or got.shape != want.shape:
            groups["neither"].append(name)
            continue
        is_new = got == want
        if bool(is_new.all()):
            groups["new"].append(name)
            continue
        is_old = got == old[name]
        if bool(is_old.all()):
            groups["old"].append(name)
        elif bool(torch.logical_or(is_new, is_old).all()):
            groups["both"].append(name)
        else:
            groups["neither"].append(name)
    if groups["neither"]:
        outcome = "corrupt"
    elif groups["both"] or (groups["old"] and groups["new"]):
        outcome = "mixed"
    else:
        outcome = "old_ok" if groups["old"] else "new_ok"
    return {"outcome": outcome, **groups}


def describe(result: dict) -> str:
    """One line for a judged load, e.g. "loads: 3 tensors of the new state, 9 of the earlier one"."""
    if result["outcome"] in ("missing",) or "error" in result:
        return result.get("error", "no checkpoint")
    parts = []
    groups = (
        ("new", "of the new state"), ("old", "of the earlier state"), ("both", "part new, part earlier"),
        ("neither", "equal to neither state"),
    )  # fmt: skip
    for group, words in groups:
        if result[group]:
            first = result[group][0]
            parts.append(f"{len(result[group])} tensor(s) {words} (e.g. {first})")
    return "loads: " + "; ".join(parts)


def judge_load(load, old: dict, new: dict) -> dict:
    """Call ``load()`` (a framework's load of one directory) and judge what it returned.

    A load that raises FileNotFoundError found no checkpoint (``missing``); any other error is ``corrupt``,
    with the error as ``"Type: first line"``.
    """
    try:
        found = load()
    except FileNotFoundError as exc:
        return {"outcome": "missing", "error": _text(exc), "old": [], "new": [], "both": [], "neither": []}
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 -- any failure to load is the finding (DCP's CheckpointException
        # is a BaseException)
        text = _text(exc)
        outcome = "missing" if NO_CHECKPOINT in text else "corrupt"
        return {"outcome": outcome, "error": text, "old": [], "new": [], "both": [], "neither": []}
    return compare(found, old, new)


def _text(exc: BaseException) -> str:
    """``Type: first line``; for an error that carries a rank's traceback (DCP's CheckpointException), the
    traceback's last line, the error the rank raised."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("CheckpointException"):
        return f"{type(exc).__name__} on a rank: {lines[-1][:300]}"
    return f"{type(exc).__name__}: {lines[0][:300] if lines else '(no message)'}"
