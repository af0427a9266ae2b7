"""Drive a playbook with ansible-runner and follow each host from its events.

The controller learns what each host is doing, and where a host failed, from
ansible-runner's event stream (runner_on_start, runner_on_ok,
runner_on_failed, runner_on_unreachable), not by parsing terminal output.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from disklab import ansible_env, ownership, processes, room
from disklab.progress import Progress
from disklab_host.common import result as result_line

REPO = Path(__file__).resolve().parents[2]


def ansible_home() -> Path:
    """The collection root: ansible.cfg, galaxy.yml, playbooks/, roles/, plugins/ and inventory/.

    An installed package carries the collection as package data in
    ``disklab/ansible_collections/disklab/lab/`` (setup.py copies it there when
    the wheel is built); a checkout, or an editable install, uses the checkout's
    own top directory, which is the collection's root.
    """
    packaged = Path(str(importlib.resources.files("disklab"))) / "ansible_collections" / "disklab" / "lab"
    return packaged if (packaged / "ansible.cfg").is_file() else REPO


def collections_root() -> Path:
    """The directory holding ``ansible_collections/disklab/lab`` (:func:`ansible_home`), first on Ansible's
    collections path under `disklab run`: the installed package's own directory, or in a checkout the
    ``playbooks/collections`` beside the playbooks (a link there to the checkout's top)."""
    home = ansible_home()
    return REPO / "playbooks" / "collections" if home == REPO else home.parents[2]


def ansible_path(*parts: str) -> Path:
    """A path under :func:`ansible_home` (``ansible_path("playbooks", "site.yml")``)."""
    return ansible_home().joinpath(*parts)


@dataclass
class HostOutcome:
    """What one host did in one playbook run."""

    host: str
    status: str = "ok"  # ok | partial (steps failed, results stored) | failed | unreachable | interrupted
    task: str | None = None  # the task that failed, or the last one started
    message: str | None = None
    role: str | None = None
    failed_steps: dict[str, str] = field(default_factory=dict)  # step -> its error, for partial
    stop_report: dict | None = None  # what `disklab_host stop` said on this host (after an interrupt)


@dataclass
class PlaybookRun:
    """The outcome of one ansible-runner invocation."""

    rc: int
    status: str
    hosts: dict[str, HostOutcome] = field(default_factory=dict)
    output_tail: str = ""  # the end of Ansible's own output, for errors no host event carries
    artifacts: Path | None = None  # ansible-runner's kept artifacts of this playbook (stdout, job_events/)
    fetching: bool = False  # the play set FETCHING_FACT: its tags fetch results (False for --tags provision)


def _failure_message(res: dict) -> str:
    """The most useful one-line reason from a failed task's result (loop items included)."""
    errors = res.get("argument_errors")
    if errors:
        return "; ".join(str(e) for e in errors)[:1000]
    items = [i for i in res.get("results", []) if isinstance(i, dict) and i.get("failed")]
    if items:
        return "; ".join(_failure_message(i) for i in items)[:1000]
    keys = ("msg", "stderr", "module_stderr", "stdout")
    if res.get("msg") == "non-zero return code":
        keys = ("stderr", "stdout", "msg")  # a command's own words say more than its status
    for key in keys:
        value = res.get(key)
        if isinstance(value, str) and value.strip():
            stripped = (raw.strip() for raw in value.splitlines())
            lines = [ln for ln in stripped if ln and not result_line.SSH_CLOSED.match(ln)]
            if lines:
                return lines[-1][:500] if key != "msg" else value.strip()[:1000]
    return "failed (no message)"


# The fact site.yml and audit.yml set, in a task with the fetch's tags, when a run's tags fetch results (or
# facts): a run without it (--tags provision, --tags audit, --skip-tags fetch) is ok with no results file.
FETCHING_FACT = "__disklab_fetching"

# The line the lab_run role's poll prints: ``disklab-status <host clock, Unix s> <status.json's line>``.
STATUS_MARK = "disklab-status "


def parse_status(stdout: str) -> tuple[float | None, dict] | None:
    """(host clock, status) from a lab poll's output, or None when it carries no status yet."""
    for line in (stdout or "").splitlines():
        line = line.strip()
        if not line.startswith(STATUS_MARK):
            continue
        clock, _, doc = line[len(STATUS_MARK) :].partition(" ")
        try:
            status = json.loads(doc)
            host_now = float(clock)
        except ValueError:
            return None
        return (host_now, status) if isinstance(status, dict) else None
    return None


# A line of a limit file that Ansible would read as a pattern rather than as the name it is: a leading
# "!" (exclude) or "&" (intersect), "~" (a regex), or a glob or subscript character anywhere.
_PATTERN_LIKE = re.compile(r"^[!&~]|[*?\[]")


def limit_lines(hosts: list[str]) -> str:
    """An Ansible limit file (``--limit @FILE``) that selects exactly ``hosts``, and no other host.

    Ansible reads such a file one pattern a line, never split at commas or colons, and takes a line that
    is a host's name as that host (ansible.inventory.manager: subset, _evaluate_patterns). A name that
    looks like a pattern (:data:`_PATTERN_LIKE`) is written as the regex that matches only itself,
    ``~^NAME$``. Raises ValueError naming a host no line can name: one with a line break, or with a
    space or tab at either end (Ansible strips each line).
    """
    out = []
    for host in hosts:
        if not host or host != host.strip() or "\n" in host or "\r" in host:
            raise ValueError(
                f"host {host!r} cannot be named in an Ansible limit (a line break, or a space at an end of "
                "its name): rename it in the inventory"
            )
        out.append(f"~^{re.escape(host)}$" if _PATTERN_LIKE.search(host) else host)
    return "".join(f"{line}\n" for line in out)


def _limit_option(limit: str | list[str] | None, private: Path) -> str | None:
    """ansible-runner's ``limit``: a pattern as it is, or a list of exact host names as ``@FILE`` (written
    under ``private``, a directory whose path Ansible cannot split: disklab's own temporary one)."""
    if limit is None or isinstance(limit, str):
        return limit
    path = private / "disklab-limit"
    if re.search(r"[\s,:\[\]]", str(path)):  # Ansible splits a --limit there, "@" or not
        raise ValueError(
            f"the limit file {path} has a comma, colon, bracket or space in its path: set TMPDIR"
        )
    path.write_text(limit_lines(limit), encoding="utf-8")
    return f"@{path}"


class EventTracker:
    """Folds ansible-runner events into one HostOutcome per host and feeds the progress view."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.hosts: dict[str, HostOutcome] = {}
        self.fetching = False  # FETCHING_FACT was set

    def _host(self, name: str) -> HostOutcome:
        if name not in self.hosts:
            self.hosts[name] = HostOutcome(host=name)
        return self.hosts[name]

    def __call__(self, event: dict) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        name = data.get("host") or data.get("remote_addr")
        if not name or not (kind.startswith("runner_on_") or kind == "runner_retry"):
            return True
        host = self._host(name)
        task = data.get("task") or host.task
        if kind == "runner_on_ok" and FETCHING_FACT in ((data.get("res") or {}).get("ansible_facts") or {}):
            self.fetching = True
        if kind == "runner_on_start" and host.status == "ok":
            host.task, host.role = task, data.get("role")
            self.progress.update(name, task, "running")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            host.status, host.task, host.role = "failed", task, data.get("role")
            host.message = _failure_message(data.get("res", {}))
            self.progress.update(name, task, "failed")
        elif kind in ("runner_retry", "runner_on_ok") and STATUS_MARK in str(
            data.get("res", {}).get("stdout")
        ):
            polled = parse_status(data["res"]["stdout"])
            if polled is not None:
                self.progress.step(name, polled[1], polled[0])
        elif kind == "runner_on_ok" and str(task).startswith("stop |") and "stdout" in data.get("res", {}):
            host.stop_report = result_line.parse(data["res"]["stdout"])  # the stop command's result line
        elif kind == "runner_on_unreachable":
            host.status, host.task = "unreachable", task
            host.message = _failure_message(data.get("res", {}))
            self.progress.update(name, task, "unreachable")
        return True


def run_playbook(
    playbook: str,
    inventory: Path,
    extravars: dict,
    *,
    limit: str | list[str] | None = None,
    forks: int | None = None,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
    artifact_dir: Path | None = None,
    cmdline: list[str] | None = None,
    ansible: ansible_env.AnsibleEnv | None = None,
    passwords: dict[str, str] | None = None,
    owner_file: Path | None = None,
    private_in: Path | None = None,
) -> PlaybookRun:
    """Run ``playbooks/<playbook>`` against ``inventory`` and return each host's outcome.

    ``limit`` is an Ansible --limit pattern, or a list of host names, each meaning only that host
    (:func:`limit_lines`, as ``--retry-failed`` passes them).
    ``forks`` defaults to ansible.cfg's (the one place it is set): Ansible never
    uses more forks than there are hosts, so every host up to that cap runs in
    parallel. ansible-runner's working files (the extra vars among them) go to a
    private directory that is removed afterwards: ``.runner-*`` in
    ``private_in`` (the run's staging directory, so that a controller killed
    outright leaves it where the next start removes it with the rest of the
    run: disklab.ownership), else ``disklab-runner-*`` in the temp directory.
    ``cancel`` is polled while the playbook runs; when it returns True, every
    process this one started for the playbook ends (:func:`processes.end_children`: SIGTERM, which
    ansible-playbook passes to its workers and each worker to its task's
    processes, pip under a provisioning task included; SIGKILL after
    ``processes.GRACE_S``), then ansible-runner stops (status "canceled").
    Left alone, ansible-runner would SIGKILL ansible-playbook's process group,
    which holds none of its workers (each leads a session of its own), so a
    task's processes ran on. On a remote host the ssh session of a task ends
    with its ssh client; its command, on the pty Ansible asks for (``-tt``),
    gets SIGHUP from the host's kernel.
    With ``artifact_dir``, ansible-runner's artifacts (stdout, job_events/,
    status, rc) are kept in ``<artifact_dir>/<playbook name>/``. ``cmdline``
    holds extra ansible-playbook options (--check, --tags, -u ...). ``ansible``
    is the configuration it runs with (disklab.ansible_env; built here when
    not given); ``passwords`` answers Ansible's prompts (-K, --ask-vault-pass):
    {prompt regex: answer}. With ``owner_file`` (the run's owner.record,
    disklab.ownership), ansible-playbook is started through the launcher that
    ends it when this process dies and adds its pid to that file.
    """
    import ansible_runner  # imported here: it is slow, and `disklab report` never needs it

    progress = progress or Progress()
    tracker = EventTracker(progress)
    bindir = str(Path(sys.executable).parent)
    ansible = ansible or ansible_env.build(ansible_path("ansible.cfg"), collections_root())
    env = {
        **ansible.env,
        "DISKLAB_CWD": os.getcwd(),  # inventory/local.yml keeps this machine's lab under ./.lab
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
    }
    where = {"dir": private_in, "prefix": ".runner-"} if private_in else {"prefix": "disklab-runner-"}
    stopped: list[bool] = []

    with tempfile.TemporaryDirectory(**where) as private:
        if owner_file is not None:  # ansible-playbook through the launcher: it dies with this process
            real = shutil.which("ansible-playbook", path=env["PATH"]) or "ansible-playbook"
            launcher = ownership.launcher(Path(private) / "launcher", real)
            env["PATH"] = str(launcher.parent) + os.pathsep + env["PATH"]
            env[ownership.OWNER_ENV] = str(owner_file)
        # Ansible's output goes under artifact_dir: when that filesystem fills up or turns read-only while
        # the hosts work, ansible-playbook's event writes fail, and it can wait forever on a dead worker.
        # ansible-runner polls the cancel callback; this one stops the run then (and on the caller's cancel).
        kept = _kept_without_room(playbook, inventory, extravars, artifact_dir)
        reports = Path(extravars.get("disklab_reports") or artifact_dir or private)
        no_room: list[int] = []

        def cancelled() -> bool:
            """The caller's cancel, or no room for Ansible's output: either ends every process this one
            started (processes.end_children), once; ansible-runner asks again until they have gone."""
            asked = cancel is not None and cancel()
            code = None if asked or not artifact_dir else room.cannot_write(Path(artifact_dir))
            if code:
                no_room.append(code)
            if not (asked or code):
                return False
            if not stopped:
                stopped.append(True)
                processes.end_children(spared=before)  # not what this process ran before the playbook
            return True

        before = processes.child_ids()
        with progress, room.guard(reports, kept):
            r = ansible_runner.run(
                private_data_dir=private,
                project_dir=os.getcwd(),  # ansible-playbook runs where the user is, as if they had run it
                playbook=str(ansible_path("playbooks", playbook)),
                inventory=str(Path(inventory).resolve()),
                extravars=extravars,
                envvars=env,
                limit=_limit_option(limit, Path(private)),
                forks=forks,
                quiet=True,
                event_handler=tracker,
                suppress_env_files=True,
                fact_cache_type="",  # leave the user's fact cache alone (ansible-runner would set jsonfile)
                passwords=passwords or {},
                cancel_callback=cancelled,
                **_artifact_options(artifact_dir, playbook),
                cmdline=" ".join(shlex.quote(a) for a in cmdline) if cmdline else None,
            )
        if no_room:
            raise room.NoRoom(f"{room.describe(reports, no_room[0])}: {kept}")
        stats = r.stats or {}
        try:
            lines = [ln for ln in r.stdout.read().splitlines() if ln.strip()]
        except (OSError, ValueError, AttributeError):
            lines = []
        tail = "\n".join(lines[-12:])
    for name in set().union(*(stats.get(k, {}) for k in ("ok", "failures", "dark", "skipped", "processed"))):
        host = tracker._host(name)
        if name in stats.get("dark", {}) and host.status == "ok":
            host.status = "unreachable"
        elif name in stats.get("failures", {}) and host.status == "ok":
            host.status = "failed"
        elif (
            host.status == "failed"
            and name not in stats.get("failures", {})
            and name in stats.get("rescued", {})
        ):
            # every failure of this host was rescued by its block (a together round keeps why): it ran on
            host.status, host.task, host.message, host.role = "ok", None, None, None
    kept = Path(artifact_dir) / Path(playbook).stem if artifact_dir else None
    return PlaybookRun(
        rc=r.rc,
        status=r.status,
        hosts=tracker.hosts,
        output_tail=tail,
        artifacts=kept,
        fetching=tracker.fetching,
    )


def _kept_without_room(playbook: str, inventory: Path, extravars: dict, artifact_dir: Path | None) -> str:
    """What is kept when ansible-runner cannot write Ansible's output (the reports directory filled up, or
    went read-only, while the hosts worked): the lab on the hosts runs on, detached, and keeps its results."""
    run_id = extravars.get("disklab_run_id", "RUN")
    if playbook == "site.yml":
        then = (
            "a lab started on the hosts runs on there and keeps its results: once there is room, "
            f"`disklab run -i {inventory} --fetch {run_id}` fetches and stores them"
        )
    else:
        then = "run it again once there is room"
    return (
        f"Ansible's output could not be written under {artifact_dir}, and ansible-playbook stops with "
        f"disklab; {then}; every stored file is as it was"
    )


def _artifact_options(artifact_dir: Path | None, playbook: str) -> dict:
    """ansible-runner options that keep its artifacts under ``artifact_dir/<playbook stem>``."""
    if artifact_dir is None:
        return {}
    Path(artifact_dir).mkdir(parents=True, exist_ok=True)
    return {"artifact_dir": str(artifact_dir), "ident": Path(playbook).stem, "rotate_artifacts": 0}
