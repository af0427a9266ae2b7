"""Action ``lab_clock``: the host clock's offset to the controller's, measured over the host's own connection.

Each exchange reads the controller's clock, has the host print its clock in ns, and reads the controller's
clock again: NTP's timestamps with the host's two taken at one instant (plugins/plugin_utils/clock.py, the
host package's disklab_host/together/clock.py). The exchange with the smallest round trip gives the offset,
within half that round trip. Where chronyc answers on the host, chronyd's own bound on the host clock's
error is read too.

A first exchange, a shell command of its own (``date +%s%N``; the host's Python where date has no %N, as
on macOS), opens the connection and checks that the host prints its clock. Then ``exchanges`` exchanges run
in one session of the host's Python, a line each way (``clock.PYTHON_LOOP``), over the local connection's
shell or ssh's own command line for this host (ansible.builtin.ssh's, sharing its ControlMaster where it
has one), and the first exchange is not used. A command per exchange pays the login shell's start inside
each round trip, before the host reads its clock: about 100 ms on the test fleet, against about 0.1 ms in
one session. Another connection, a connection password, or a session that does not answer within
SESSION_TIMEOUT_S falls back to a command per exchange, the first one counted; ``method`` says which.

Options: ``exchanges`` (how many, 1 to 100, default 9), ``python`` (the host's Python, for the session
and for a date without %N; default the host's ansible_python_interpreter where it is a path, else the
interpreter Ansible discovered there, else python3).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.disklab.lab.plugins.plugin_utils import clock as _clock
from ansible_collections.disklab.lab.plugins.plugin_utils.pipelines import Lines

DEFAULT_EXCHANGES = 9
SESSION_TIMEOUT_S = 20.0  # for the clock loop to start on the host, and for each of its answers
END_TIMEOUT_S = 2.0  # for the session to end once its input has ended


def host_python(given: object, task_vars: dict) -> str:
    """The host's Python for the clock: ``given`` (the option), else ansible_python_interpreter where it
    names one (Ansible's ``auto`` values name none), else the one Ansible discovered on the host, else
    python3."""
    facts = task_vars.get("ansible_facts") or {}
    for value in (
        given,
        task_vars.get("ansible_python_interpreter"),
        facts.get("discovered_interpreter_python"),
    ):
        if value and not str(value).startswith("auto"):
            return str(value)
    return "python3"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("exchanges", "python"))

    def _exchange(self, command: str) -> tuple[int, int, int | None, str]:
        """One exchange, a command of its own: (sent_ns, received_ns, the host's ns or None, its output)."""
        sent = time.time_ns()
        res = self._low_level_execute_command(command)
        received = time.time_ns()
        said = (res.get("stdout") or "") + (res.get("stderr") or "")
        return sent, received, _clock.host_ns(res.get("stdout", "")) if res.get("rc") == 0 else None, said

    def _session_argv(self, python: str) -> list | None:
        """The command line of one session on the host running the clock loop, or None where this connection
        cannot give one: the local connection's shell, or ssh's own command line for the connection
        (ControlMaster shared, so no new login); another connection, or a password to type, gets None."""
        remote = f"exec {shlex.quote(python)} -c {shlex.quote(_clock.PYTHON_LOOP)}"
        conn = self._connection
        if conn.transport in ("local", "ansible.builtin.local"):
            return ["/bin/sh", "-c", remote]
        if conn.transport not in ("ssh", "ansible.builtin.ssh") or not hasattr(conn, "_build_command"):
            return None
        if conn.get_option("password") or getattr(conn._play_context, "password", None):
            return None
        try:
            return conn._build_command(conn.get_option("ssh_executable"), "ssh", conn.host, remote)
        except Exception:  # noqa: BLE001  (ssh's private API moved: exchanges a command each)
            return None

    def _session_exchanges(self, argv: list, count: int) -> list[tuple[int, int, int]] | None:
        """``count`` exchanges in one session of the clock loop; None when the session did not answer."""
        try:  # its own process group: a session that does not end is killed whole
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        except OSError:
            return None
        lines = Lines(proc.stdout.fileno(), errors="replace")
        try:
            ready = time.monotonic() + SESSION_TIMEOUT_S  # a login banner or an rc file's words come first
            while (line := lines.next(ready - time.monotonic())) is not None and line.strip() != _clock.READY:
                pass
            if line is None:
                return None
            exchanges = []
            for _ in range(count):
                sent = time.time_ns()
                proc.stdin.write(b"\n")
                proc.stdin.flush()
                line = lines.next(SESSION_TIMEOUT_S)
                received = time.time_ns()
                host = _clock.host_ns(line or "")
                if host is None:
                    return None
                exchanges.append((sent, host, received))
            return exchanges
        except OSError:
            return None
        finally:
            for stream in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    stream.close()
            try:  # the loop ends at the end of its input; one that does not is killed
                proc.wait(timeout=END_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        got = self._task.args.get("exchanges")
        count = DEFAULT_EXCHANGES if got is None else got
        digits = isinstance(count, str) and count.strip().isascii() and count.strip().isdigit()
        if digits or (isinstance(count, float) and count.is_integer()):
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100:
            raise AnsibleActionFail(f"lab_clock: exchanges must be a whole number from 1 to 100, got {got!r}")
        python = host_python(
            self._task.args.get("python"), {**task_vars, **self._templar.template(
                {k: task_vars.get(k) for k in ("ansible_python_interpreter", "ansible_facts")})}
        )  # fmt: skip
        # the first exchange is a command of its own: it opens the connection (and ssh's ControlMaster)
        command = _clock.DATE_CLOCK
        sent, received, host, said = self._exchange(command)
        if host is None:  # BSD/macOS date: no %N
            command = f"{shlex.quote(python)} {_clock.PYTHON_CLOCK}"
            sent, received, host, said = self._exchange(command)
            if host is None:
                raise AnsibleActionFail(
                    f"lab_clock: the host printed no clock in ns for `{_clock.DATE_CLOCK}` or `{command}`: "
                    f"{said.strip()[-300:] or 'nothing'}"
                )
        argv = self._session_argv(python)
        exchanges = self._session_exchanges(argv, count) if argv else None
        method = "one session"
        if exchanges is None:
            method = "a command each"
            exchanges = [(sent, host, received)]
            for _ in range(count - 1):
                sent, received, host, said = self._exchange(command)
                if host is None:
                    raise AnsibleActionFail(
                        f"lab_clock: `{command}` printed no clock: {said.strip()[-300:] or 'nothing'}"
                    )
                exchanges.append((sent, host, received))
        offset = _clock.best_exchange(exchanges)
        tracking = self._low_level_execute_command(
            f"command -v chronyc >/dev/null 2>&1 && {_clock.CHRONY_TRACKING}"
        )
        chrony = None
        chrony_why = "chronyc is not on the host, or chronyd did not answer"
        if tracking.get("rc") == 0:
            try:
                chrony = _clock.chrony_bound(tracking.get("stdout", ""))
                chrony_why = chrony["why"]
            except ValueError as exc:
                chrony_why = str(exc)
        return {
            **result,
            "changed": False,
            **offset,
            "method": method,
            "command": command,
            "controller_clock": "CLOCK_REALTIME",
            "chrony": chrony,
            "chrony_why": chrony_why,
        }
