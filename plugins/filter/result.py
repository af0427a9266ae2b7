"""Filters ``disklab.lab.result``, ``result_line``, ``no_result`` and ``last_line``: a host command's result
line, or why it failed.

Every command the roles and playbooks read prints its result as one line
(``disklab-result {json}``, disklab_host.common.result), among whatever else a
login shell, the host's Python or a merged stderr prints. These filters take a
registered command result and apply that module's own rule (its ``parse``), the
one place the rule is written::

    __lab_run_result: "{{ __lab_run_out | disklab.lab.result }}"          # {} when there is no line
    __lab_run_result_line: "{{ __lab_run_out | disklab.lab.result_line }}"  # '' when there is none
    fail_msg: "{{ __lab_run_out | disklab.lab.no_result(inventory_hostname, 'the task') }}"
    why: "{{ ansible_failed_result | disklab.lab.last_line }}"  # a failed command's own last line

The rule is the collection's own (plugins/plugin_utils/result.py, a link to the host package's
src/disklab_host/common/result.py, standard library only), imported by its collection name: whatever
``disklab_host`` the controller's Python path holds, these filters read the line as the hosts of their
own collection write it. Their documentation is plugins/filter/result.yml, result_line.yml,
no_result.yml and last_line.yml (``ansible-doc -t filter disklab.lab.result``).
"""

from __future__ import annotations

import re

from ansible_collections.disklab.lab.plugins.plugin_utils import result as _result

DOCUMENTATION_LINES = 5  # how many of a command's first lines a missing result's message shows
# A backgrounded command's exit status (playbooks/tasks/together_start.yml): not a line of the command's.
_EXIT_STATUS = re.compile(r"^disklab-exit \S+$")


def _text(out, stream: str) -> str:
    """A registered result's ``stdout`` (or ``stderr``), from its ``_lines`` when only those are there."""
    if not isinstance(out, dict):
        return ""
    text = out.get(stream)
    return str(text) if text is not None else "\n".join(str(ln) for ln in out.get(f"{stream}_lines") or [])


def _stdout(out) -> str:
    return _text(out, "stdout")


def result(out) -> dict:
    """The object of the command's result line, or {} when it printed none."""
    return _result.parse(_stdout(out)) or {}


def result_line(out) -> str:
    """The command's result line itself, or '' when it printed none."""
    return _result.line(result(out)) if _result.parse(_stdout(out)) is not None else ""


def no_result(out, host: str, task: str) -> str:
    """One message for a command without its result line: the host, the task, and its first lines."""
    out = out if isinstance(out, dict) else {}
    lines = [ln.strip() for ln in _stdout(out).splitlines() + _text(out, "stderr").splitlines()]
    shown = [ln if len(ln) <= 160 else ln[:157] + "..." for ln in lines if ln][:DOCUMENTATION_LINES]
    return (
        f"{host}: the task '{task}' printed no disklab-result line (rc {out.get('rc', 'unknown')}); "
        f"its first lines: {' | '.join(shown) or '(nothing)'}"
    )


def last_line(out) -> str:
    """Why a command failed, in one line: its own last line of output (stdout, then stderr), or the task's
    message when it printed none."""
    out = out if isinstance(out, dict) else {}
    lines = [ln.strip() for ln in _stdout(out).splitlines() + _text(out, "stderr").splitlines()]
    own = [ln for ln in lines if ln and not _EXIT_STATUS.match(ln) and not _result.SSH_CLOSED.match(ln)]
    return own[-1] if own else str(out.get("msg") or "failed")


class FilterModule:
    def filters(self):
        return {
            "result": result, "result_line": result_line, "no_result": no_result, "last_line": last_line
        }  # fmt: skip
