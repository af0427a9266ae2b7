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
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

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
        "pids": [{"pid": p, "name": _name(p)} for p in pids],
    }
    path = incoming / OWNER
    atomic_write_text(path, json.dumps(doc) + "\n")
    return path


def add_owner(path: Path, pid: int) -> None:
    """Add process ``pid`` to the owners in ``path`` (the launcher, for ansible-playbook)."""
    from disklab.fsio import atomic_write_text

    doc = read_owner(path) or {}
    doc.setdefault("pids", []).append({"pid": pid, "name": _name(pid)})
    atomic_write_text(path, json.dumps(doc) + "\n")


def read_owner(path: Path) -> dict | None:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _name(pid: int) -> str | None:
    """The program a pid runs (``disklab``, ``ansible-playbook``), from /proc; None where /proc is absent."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    words = [Path(a.decode(errors="replace")).name for a in argv[:3] if a]
    for word in words:
        if word.startswith("ansible-playbook"):
            return "ansible-playbook"
    return words[0] if words else None


def alive(owner: dict) -> list[dict]:
    """The owners of a run that are still alive: the same pid, running the same program."""
    live = []
    for entry in owner.get("pids") or []:
        pid = entry.get("pid")
        if not isinstance(pid, int) or pid <= 0:
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass  # alive, another user's
        if _zombie(pid):
            continue
        if entry.get("name") and _name(pid) not in (None, entry["name"]):
            continue  # the pid was reused by another program
        live.append(entry)
    return live


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


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

    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:  # the controller died before the signal was asked for
            sys.exit(143)
    owner = os.environ.get(OWNER_ENV)
    if owner:
        add_owner(Path(owner), os.getpid())
    os.execv(real, [real, *argv])


def ancestor_playbook(start: int | None = None) -> int | None:
    """The pid of the ansible-playbook that runs this process (for plain ansible-playbook runs), or None.

    A task's command runs under one of ansible-playbook's forked workers, itself an ansible-playbook
    process that exits when its task ends; the run's owner is the main process above it. So this is the
    outermost of the nearest unbroken chain of ansible-playbook ancestors.
    """
    pid = os.getppid() if start is None else start
    found = None
    for _hop in range(64):  # a chain of ancestors ends at init long before this
        if pid <= 1:
            return found
        if _name(pid) == "ansible-playbook":
            found = pid
        elif found is not None:
            return found
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return found
        pid = int(stat.rsplit(")", 1)[-1].split()[1])
    return found
