"""Who owns a run until it is stored, and what a run whose owners died left behind.

Each run's staging directory (``reports/.incoming/<run_id>/``) holds
``owner.record``: the run's kind, inventory, start time and the processes that
own it, the controller (`disklab run`) and its ansible-playbook, or under
plain ``ansible-playbook`` that ansible-playbook alone. A run is live while
any of them is alive. So:

- a second `disklab run`, `disklab audit` or plain ``ansible-playbook`` on the
  same reports directory is refused while another run is live (the reports
  lock, ``<reports>/.lock``, covers the controller; this covers a controller
  killed while its ansible-playbook runs on, and a plain ansible-playbook run
  from its start, not only at its store);
- a run whose owners are all dead and whose results were never stored is
  found on the next start (:func:`leftovers`): what it fetched is stored, and
  for what it did not fetch the one command that fetches it is printed
  (`disklab run --fetch RUN_ID`); nothing stays silently in ``.incoming``.

Under `disklab run`, ansible-playbook is started through a small launcher
(:func:`launcher`) that asks Linux to send it SIGTERM when the controller dies
(``PR_SET_PDEATHSIG``) and adds its pid to ``owner.record``.

Each owner is recorded with its program and its start time, and is alive only while that pid still
runs that program and started then (a pid the kernel gave to a new process is not the owner). These
facts come from disklab.processes (psutil: /proc on Linux, sysctl and libproc on macOS); nothing here
reads /proc, so on a Mac a plain ansible-playbook run records its pid as on Linux.

A killed controller on macOS: there is no parent-death signal there, so its ansible-playbook runs on
(ansible-runner starts it ignoring SIGHUP, so neither does its terminal's hangup end it), with its
workers and the tasks they run, until the play ends. Its pid is in ``owner.record``, so the next start
on the same reports directory is refused, naming it ("run RUN_ID is still running: ansible-playbook
(pid N)"), until it has ended; then that start stores what it fetched, or names the command that
fetches it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from disklab import processes

OWNER = "owner.record"  # JSON, named so that no host's <host>.json can be it
# The environment variable naming the owner file the launcher adds ansible-playbook's pid to.
OWNER_ENV = "DISKLAB_RUN_OWNER"


def write_owner(incoming: Path, run_id: str, kind: str, inventory: Path, pids: list[int]) -> Path:
    """Write ``incoming/owner.record`` (atomically) naming the run and the processes that own it."""
    from disklab.fsio import atomic_write_text

    doc = {
        "run_id": run_id,
        "kind": kind,
        "inventory": str(Path(inventory).resolve()),
        "started_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "pids": [_entry(p) for p in pids],
    }
    path = incoming / OWNER
    atomic_write_text(path, json.dumps(doc) + "\n")
    return path


def add_owner(path: Path, pid: int) -> None:
    """Add process ``pid`` to the owners in ``path`` (the launcher, for ansible-playbook)."""
    from disklab.fsio import atomic_write_text

    doc = read_owner(path) or {}
    doc.setdefault("pids", []).append(_entry(pid))
    atomic_write_text(path, json.dumps(doc) + "\n")


def read_owner(path: Path) -> dict | None:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _entry(pid: int) -> dict:
    """An owner as ``owner.record`` names it: its pid, its program (``disklab``, ``ansible-playbook``; None
    where it cannot be read) and when it started (seconds since the epoch; None likewise)."""
    facts = processes.FACTS
    return {"pid": pid, "name": facts.program(pid), "started": facts.started(pid)}


def alive(owner: dict) -> list[dict]:
    """The owners of a run that are still alive: the same pid, running the same program, started at the
    same time (a record without a start time, from an older disklab: the same pid and program)."""
    facts = processes.FACTS
    live = []
    for entry in owner.get("pids") or []:
        pid = entry.get("pid")
        if not isinstance(pid, int) or pid <= 0:
            continue
        started = entry.get("started")
        if not facts.running(pid, started if isinstance(started, (int, float)) else None):
            continue
        if entry.get("name") and facts.program(pid) not in (None, entry["name"]):
            continue  # the pid was reused by another program
        live.append(entry)
    return live


@dataclass
class Leftover:
    """A staged run whose owners are all dead and that was never stored."""

    run_id: str
    incoming: Path
    owner: dict  # its owner.record ({} when it had none: made by an older disklab)
    fetched: list[Path]  # the host files it fetched and did not store


def live_runs(reports: Path, but: str | None = None) -> list[tuple[str, list[dict]]]:
    """(run id, live owners) of every staged run of ``reports`` with an owner still alive, except ``but``."""
    out = []
    for owner_file in sorted((reports / ".incoming").glob(f"*/{OWNER}")):
        run_id = owner_file.parent.name
        if run_id == but:
            continue
        live = alive(read_owner(owner_file) or {})
        if live:
            out.append((run_id, live))
    return out


def leftovers(reports: Path, but: str | None = None) -> list[Leftover]:
    """The staged runs of ``reports`` (except ``but``) that no live process owns."""
    out = []
    for incoming in sorted(p for p in (reports / ".incoming").glob("*") if p.is_dir()):
        if incoming.name == but:
            continue
        owner = read_owner(incoming / OWNER) or {}
        if alive(owner):
            continue
        fetched = sorted(incoming.glob("*.json"))
        out.append(Leftover(incoming.name, incoming, owner, fetched))
    return out


def describe_live(run_id: str, live: list[dict]) -> str:
    who = ", ".join(f"{e.get('name') or 'process'} (pid {e['pid']})" for e in live)
    return f"run {run_id} is still running: {who}"


def launcher(directory: Path, real: str) -> Path:
    """Write ``directory/ansible-playbook``: it execs ``real`` after asking the kernel for SIGTERM when
    its parent (the controller) dies, and adds its own pid to the run's owner file ($DISKLAB_RUN_OWNER).

    Linux only for the parent-death signal (prctl); elsewhere the launcher only records the pid, and a
    killed controller's ansible-playbook runs on until it ends (its pid in owner.record keeps the run live).
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "ansible-playbook"
    path.write_text(  # run by this interpreter, which imports disklab as this process does
        f"#!{sys.executable}\n"
        "import sys\n"
        "from disklab import ownership\n"
        f"ownership.become_owned({real!r}, sys.argv[1:])\n"
    )
    path.chmod(0o755)
    return path


def become_owned(real: str, argv: list[str]) -> None:
    """The launcher's body: parent-death signal, the pid in the owner file, then exec ansible-playbook."""
    import signal

    processes.parent_death_signal(signal.SIGTERM, os.getppid())  # Linux; see the module docstring for macOS
    owner = os.environ.get(OWNER_ENV)
    if owner:
        add_owner(Path(owner), os.getpid())
    os.execv(real, [real, *argv])


def ancestor_playbook(start: int | None = None) -> int | None:
    """The pid of the ansible-playbook that runs this process (for plain ansible-playbook runs), or None.

    A task's command runs under one of ansible-playbook's forked workers, itself an ansible-playbook
    process that exits when its task ends; the run's owner is the main process above it. So this is the
    outermost of the nearest unbroken chain of ansible-playbook ancestors (disklab.processes: each
    process's program and parent, on Linux and macOS alike).
    """
    facts = processes.FACTS
    pid = os.getppid() if start is None else start
    found = None
    for _hop in range(64):  # a chain of ancestors ends at init long before this
        if pid is None or pid <= 1:
            return found
        if facts.program(pid) == "ansible-playbook":
            found = pid
        elif found is not None:
            return found
        pid = facts.parent(pid)
    return found
