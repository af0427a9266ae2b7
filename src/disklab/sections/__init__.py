"""Report sections, one module per experiment.

Each module ``disklab.sections.<experiment>`` defines::

    def build(section: dict, results: dict, plot_dir: pathlib.Path) -> dict

``section`` is ``results["experiments"][<experiment>]`` (already validated
against ``schema/experiments/<experiment>.schema.json``). It returns the extra
context that ``templates/sections/<experiment>.md.j2`` renders as ``view`` (beside ``section``, the
stored one): explanations computed from this host's own numbers, and the paths of plots it
wrote under ``plot_dir`` (relative to the host's report directory, e.g.
``plots/crash_bytes.png``, drawn with :func:`disklab.plotting.draw_once`, which skips a plot whose data
and code are unchanged).
It must not raise on a section whose status is ``failed`` or ``not_run``.
"""


def status_note(section: dict) -> str:
    """One line for a section that did not run or failed: ``not run: reason`` or ``failed: error``."""
    if section.get("status") == "not_run":
        return f"not run: {section.get('reason', 'no reason recorded')}"
    return f"failed: {section.get('error', 'no error recorded')}"
