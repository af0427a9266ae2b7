"""Report section for the pickle_safety experiment: what this host's torch.load did with a crafted checkpoint.

Every sentence is computed from the section's own fields (the torch version,
the exception, the marker file checks); nothing is assumed from the lesson.
"""

from __future__ import annotations

from pathlib import Path

_BUILTIN_OPEN = {"io.open", "builtins.open", "__builtin__.open"}  # how pickle names Python's open()


def _call(callable_: str, args: list) -> str:
    note = " (Python's built-in open)" if callable_ in _BUILTIN_OPEN else ""
    return f"{callable_}({', '.join(repr(a) for a in args)}){note}"


def _verdict(s: dict) -> str:
    version = s["torch_version"]
    if s["refused"] and not s["marker_created"]:
        return (
            f"torch {version} refused the crafted checkpoint with {s['error_type']}; "
            "the marker file was not created, so the payload did not run."
        )
    if s["refused"]:
        return (
            f"torch {version} raised {s['error_type']} on the crafted checkpoint, but the marker file was "
            "created: the payload ran before the refusal."
        )
    if s["marker_created"]:
        return (
            f"torch {version} loaded the crafted checkpoint with its default settings and the payload ran: "
            "the marker file was created. Any .pt file from an untrusted source can run code on this host."
        )
    return (
        f"torch {version} loaded the crafted checkpoint without an error, yet the marker file was not "
        "created; this run cannot tell whether the payload was skipped or failed."
    )


def _default_line(s: dict) -> str:
    default = s["weights_only_default"]
    if isinstance(default, dict):
        return f"The weights_only default could not be read: {default.get('unavailable')}."
    line = f"torch.load's weights_only default is {default} ({s['weights_only_default_source']})."
    if default is True and not s["refused"]:
        line += " That disagrees with the load above, which did not refuse: check the lab venv's torch."
    if default is False and s["refused"]:
        line += " Yet the load refused; see the error below."
    return line


def _env_line(s: dict) -> str | None:
    active = s["env_override_active"]
    if not active:
        return None
    return (
        f"This host's environment sets {active}, which overrides torch.load's default in every process that "
        "inherits it. The load above ran with it removed, to measure the installed version's default."
    )


def _proof_line(s: dict) -> str:
    scan = s["torch_unsafe_globals"]
    torch_scan = (
        f"torch's own scan (get_unsafe_globals_in_checkpoint) lists {', '.join(scan) or 'nothing'}"
        if isinstance(scan, list)
        else f"torch's own scan was not available ({scan.get('unavailable')})"
    )
    line = (
        f"The file is really malicious: read statically with pickletools, its {s['pickle_member']} has "
        f"{s['pickle_reduce_ops']} REDUCE opcodes, one of which calls "
        f"{_call(s['payload_callable'], s['payload_args'])}; {torch_scan}."
    )
    if s["control_marker_created"]:
        return line + (
            " A control unpickler in a separate process, allowed to make only that one call, created the "
            "marker, so an unrestricted load would have too."
        )
    return (
        line + " The control unpickler did not create the marker: this run does not prove the payload works."
    )


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Explanations for ``templates/sections/pickle_safety.md.j2``.

    Returns ``{"safe": bool | None, "verdict": str, "default_line": str | None,
    "env_line": str | None, "proof_line": str | None}``. ``safe`` is True when
    torch.load refused and the marker was absent, None when the step did not
    run. Never raises on a ``failed`` or ``not_run`` section. Writes no plots.
    """
    status = section.get("status")
    if status != "ok":
        why = section.get("reason") or section.get("error") or "no reason recorded"
        word = "did not run" if status == "not_run" else "failed"
        verdict = f"The pickle-safety check {word}: {why}."
        return {"safe": None, "verdict": verdict, "default_line": None, "env_line": None, "proof_line": None}
    return {
        "safe": bool(section["refused"] and not section["marker_created"]),
        "verdict": _verdict(section),
        "default_line": _default_line(section),
        "env_line": _env_line(section),
        "proof_line": _proof_line(section),
    }
