"""A together run, stored: what playbooks/together.yml sent to the controller, with each host's outcome.

The playbook's last task writes ``together.json`` into the run's staging directory: the clients (the play's
hosts, in order), the settings, the storage-server group, each client's audited workbench and RAM, each
host's cold-start storm rounds and its part in the checkpoint burst (roles/together). :func:`store` adds
what Ansible said of each host (ok, failed, unreachable, with the task and its message), states the storage
server's page cache, and writes it once as ``reports/.together/<run_id>.json`` (disklab.stored:
schema-checked, atomic, never over an earlier file). disklab.togetherpage renders the newest one. A run in
which some hosts failed says which host failed where; one in which no host ran a round is not stored
(Ansible's output and the command's lines say why).
"""

from __future__ import annotations

import json
from pathlib import Path

from disklab import stored
from disklab.runner import HostOutcome

DIR = ".together"  # under the reports directory: one file per together run, named by its run id
INCOMING = "together.json"  # what the playbook writes into the run's staging directory
SERVERS_GROUP = "disklab_storage_servers"


def path(reports: Path, run_id: str) -> Path:
    return Path(reports) / DIR / f"{run_id}.json"


def runs(reports: Path) -> list[Path]:
    """Every stored together run, oldest first (run ids sort by time)."""
    d = Path(reports) / DIR
    return sorted(d.glob("*.json")) if d.is_dir() else []


def storage_server(
    servers: list[str], evictions: list[dict] | None = None, methods: list[str] | None = None
) -> dict:
    """The file server's page cache, as far as this run knows it.

    No host of the storage-server group: each client's own page cache was emptied and proven before each
    load, the server's was neither emptied nor looked at, so a round may have been served from the server's
    memory: ``unknown``. With servers named, each round and the burst's read-back had every server empty its
    page cache of the files once every client was ready (roles/together/tasks/server_evict.yml), each with
    its residency after (``evictions``: {n, method} or {burst}, and per server its exit status, result
    and last line, and the servers not asked because they did not answer, ``unasked``; each start once, in
    the run's order of ``methods``): ``cold`` when every server proved every file at most 1 % resident every
    time, ``not_cold`` naming where it did not, ``unknown`` when no start reached the servers."""
    if not servers:
        return {
            "state": "unknown",
            "why": (
                f"no host of the inventory's {SERVERS_GROUP} group, so the file server's page cache was "
                "neither emptied nor read: after a file's first read the server may have served it from "
                "its memory"
            ),
            "servers": [],
        }
    named = ", ".join(servers)
    several = any(int(e.get("repeat") or 1) > 1 for e in evictions or [])  # rounds repeated: say which
    done = [_eviction(e, several) for e in _in_order(evictions or [], methods or [])]
    if not done:
        return {"state": "unknown", "servers": list(servers), "evictions": [],
                "why": f"the {SERVERS_GROUP} group names {named}, but no start reached them"}  # fmt: skip
    bad = [f"{d['what']} on {h}: {why}" for d in done for h, why in d["not_cold"].items()]
    worst = max((f for d in done for f in d["fraction_after"].values()), default=0.0)
    held = max((f for d in done for f in d["fraction_before"].values()), default=0.0)
    if bad:
        why = f"{named} did not prove every file cold before every start: " + "; ".join(bad)
        state = "not_cold"
    else:
        why = (
            f"{named} emptied its page cache of each start's files once every client was ready, just "
            f"before the start: up to {100 * held:.1f} % of a file was resident before, at most "
            f"{100 * worst:.1f} % after (mincore)"
        )
        state = "cold"
    return {"state": state, "why": why, "servers": list(servers), "evictions": done}


def _in_order(evictions: list[dict], methods: list[str]) -> list[dict]:
    """Each start's evictions once, in the page's order (N, then the method's place in ``methods``, then the
    repeat; the burst's read-back last): a run_once fact may reach the controller from several hosts."""
    seen: dict[tuple, dict] = {}
    for e in evictions:
        key = (
            ("burst", e["burst"])
            if e.get("burst")
            else (int(e.get("n") or 0), str(e.get("method")), int(e.get("repeat") or 1))
        )
        seen.setdefault(key, e)
    place = {m: i for i, m in enumerate(methods)}

    def order(key: tuple) -> tuple:
        return (1, 0, 0, 0) if key[0] == "burst" else (0, key[0], place.get(key[1], len(place)), key[2])

    return [seen[k] for k in sorted(seen, key=order)]


def _eviction(e: dict, several: bool = False) -> dict:
    """One start's server evictions as stored: what it was for (its repeat named when ``several``), each
    server's most resident file before and after, and each server that did not prove its files cold, with
    why."""
    what = "the burst's read-back" if e.get("burst") else f"N = {e.get('n')}, {e.get('method')}"
    if several and not e.get("burst"):
        what += f", repeat {e.get('repeat') or 1}"
    fraction, before, not_cold = {}, {}, {}
    for host, rc in (e.get("rc") or {}).items():
        result = (e.get("result") or {}).get(host) or {}
        files = result.get("files") or []
        if rc == 0 and files:
            fraction[host] = max(f["fraction_after"] or 0.0 for f in files)
            before[host] = max(f.get("fraction_before") or 0.0 for f in files)
        untrusted = sorted({str(f.get("trust")) for f in files if f.get("trust") != "ok"})
        if result.get("absent"):  # the writer never made the round's file: no client loaded it
            continue
        if host in (e.get("unasked") or []):
            not_cold[host] = "its SSH port did not answer from the controller, so it was not asked"
        elif rc != 0:
            not_cold[host] = (e.get("why") or {}).get(host) or f"exit status {rc}"
        elif not files:
            not_cold[host] = "no file to empty"
        elif untrusted:
            not_cold[host] = f"its residency cannot be trusted there ({', '.join(untrusted)})"
        elif not result.get("cold"):
            not_cold[host] = f"{100 * fraction[host]:.1f} % resident after"
    return {"what": what, "fraction_before": before, "fraction_after": fraction, "not_cold": not_cold}


def store(
    reports: Path, run_id: str, inventory: Path, outcomes: dict[str, HostOutcome], staging: Path
) -> dict:
    """Store the together run ``run_id`` from ``staging``/together.json and ``outcomes``; host -> status.

    A host that ran the storm and loaded in no round, one at least having failed, is ``partial``. Without
    together.json (the play stopped before it wrote it: every host failed, or --check) nothing is stored and
    the status is Ansible's alone; so it is when no host ran a round (the run was refused, or every host
    failed before the storm): a run with no round is not stored, so the Together page keeps the newest run
    that has one.
    Raises stored.StoredFileError when what the playbook sent is not a together run. ``staging`` is left as
    it is: the caller removes it once stored (disklab.orchestrate), and keeps it when this raises.
    """
    sent_path = staging / INCOMING
    status = {h: o.status for h, o in sorted(outcomes.items())}
    if not sent_path.is_file():
        return status
    sent = json.loads(sent_path.read_text(encoding="utf-8"))
    records = {
        host: [{**r, "n": int(r["n"]), "repeat": int(r.get("repeat") or 1)} for r in recs]
        for host, recs in (sent.get("records") or {}).items()
    }
    if not any(records.values()):  # refused, or every host failed before the storm: no round to keep
        return status
    ns = [int(n) for n in (sent.get("settings") or {}).get("ns") or []]
    in_a_round = set(sent["clients"][: max(ns, default=0)])  # the first N clients run each round of N
    hosts = {}
    for host in sent["clients"]:
        outcome = outcomes.get(host) or HostOutcome(host=host)
        mine = records.get(host) or []
        state, task, message = outcome.status, outcome.task, outcome.message
        failed = [r["failed"] for r in mine if "failed" in r]
        if state == "ok" and failed and not any("sample" in r for r in mine):  # the rest: loaders not run
            state, task, message = "partial", "The cold-start storm", failed[-1]
        elif state == "ok" and not mine and host in in_a_round:  # plain ansible-playbook: no outcomes known
            state, task, message = "failed", "The cold-start storm", "ran no round: Ansible's output says why"
        hosts[host] = {"status": state, "task": task if state != "ok" else None,
                       "message": message if state != "ok" else None}  # fmt: skip
        status[host] = state
    doc = {
        "run_id": run_id,
        "inventory": str(Path(inventory).resolve()),
        "clients": list(sent["clients"]),
        "hosts": hosts,
        "settings": {
            **sent["settings"],
            "ns": [int(n) for n in sent["settings"].get("ns") or []],
            "burst_mib": _burst_mib(sent["settings"]),
        },
        "storage_server": storage_server(
            list(sent.get("storage_servers") or []),
            sent.get("server_evictions"),
            list((sent.get("settings") or {}).get("methods") or []),
        ),
        "workbench": {h: _workbench(w) for h, w in (sent.get("workbench") or {}).items()},
        "records": records,
        "ram_bytes": {h: r if isinstance(r, int) else None for h, r in (sent.get("ram_bytes") or {}).items()},
        "burst": _burst(sent),
    }
    stored.write(path(reports, run_id), "together", doc)
    return dict(sorted(status.items()))


def _burst_mib(settings: dict) -> int | None:
    """The burst's shard MiB as sent; None when no burst ran (the role sends none, which an older Ansible
    renders as an empty string)."""
    mib = settings.get("burst_mib")
    return None if mib in (None, "") else int(mib)


def _burst(sent: dict) -> dict | None:
    """The checkpoint burst as sent (roles/together's burst.yml): None when it was not run (together_burst
    false); else the commit ({"sample"}, {"failed"}, or None when no commit was tried because a save failed)
    and each host's {"save", "read"} that it ran."""
    if _burst_mib(sent.get("settings") or {}) is None:
        return None
    burst = sent.get("burst") or {}
    hosts = {h: r for h, r in (burst.get("hosts") or {}).items() if r}
    return {"commit": burst.get("commit"), "hosts": hosts}


def _workbench(w: dict | None) -> dict | None:
    """The audit's workbench, as much as the Together page states: filesystem, source, mount, network."""
    if not isinstance(w, dict):
        return None
    network = ((w.get("flags") or {}).get("network_or_fuse") or {}).get("state")
    return {
        "path": w.get("requested_path"),
        "fstype": w.get("fstype"),
        "source": w.get("source"),
        "mount_point": w.get("mount_point"),
        "network": network == "set",
    }
