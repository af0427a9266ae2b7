"""disklab's command line: run | audit | report | compare | history | runs | export | powercut.

    disklab run [-i INVENTORY] [--profile quick|full] [-l HOSTS] [--retry-failed] [ANSIBLE OPTIONS] [-- ...]
    disklab audit [-i INVENTORY] [ANSIBLE OPTIONS] [-- ...]
    disklab doctor [-i INVENTORY] [ANSIBLE OPTIONS] [-- ...]
    disklab report
    disklab compare [--json] [--all] [--min-effect KIND=SHARE] [--fail-on-change] [--baseline RUN_ID]
                    HOST | RUN_A.json RUN_B.json
    disklab history [--json] HOST [FIGURE]
    disklab runs [--json] [HOST]
    disklab export [--format csv|json|jsonl] [--out FILE] [--host HOST]
    disklab powercut MODULE.py:FUNCTION

ansible-playbook's options pass through (disklab.passthrough), and the user's
Ansible configuration stays in force (disklab.ansible_env). Reports go to
./reports (the current directory's), --reports or $DISKLAB_REPORTS. The playbooks
themselves call two more commands when run by plain ``ansible-playbook``:
``playbook-begin`` (a run id and its staging directory) and ``playbook-store``
(store what was fetched and render the reports), the same code ``disklab run`` uses.

Exit statuses: ``_EXIT_STATUSES`` below, which ``disklab --help`` prints.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

import shtab

from disklab import __version__, console, export, ownership, passthrough, room, runner, ship, store
from disklab.runner import HostOutcome, ansible_path
from disklab_host import registry
from disklab_host.common.lock import LockHeld, RunLock
from disklab_host.common.result import emit as emit_result
from disklab_host.stage import ARTIFACT_NAME

DEFAULT_INVENTORY = ansible_path("inventory", "local.yml")
# Under the current directory, never inside the installed package; DISKLAB_REPORTS names another (an AWX job's
# working directory is discarded when the job ends: docs/fleet.md).
DEFAULT_REPORTS = Path(os.environ.get("DISKLAB_REPORTS") or "reports")


class UsageError(Exception):
    """Bad input on the command line; printed as one line, exit status 2."""


def _check_inventory(inventory: Path) -> None:
    """Refuse a YAML inventory that does not parse, with the YAML error (Ansible blames its ini plugin)."""
    import yaml

    if not inventory.is_file():
        raise UsageError(f"inventory {inventory} does not exist")
    if inventory.suffix not in (".yml", ".yaml"):
        return
    try:
        yaml.safe_load(inventory.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"inventory {inventory} is not UTF-8 text: {exc.reason} at byte {exc.start}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"inventory {inventory} is not valid YAML{where}: {problem}") from None


def _playbook(args, playbook: str, kind: str) -> int:
    """Run a playbook on the inventory, store what came back, render the reports.

    One invocation at a time per reports directory (``<reports>/.lock``); a
    second is refused naming the run that holds it.
    """
    inventory = Path(args.inventory)
    _check_inventory(inventory)
    reports = Path(args.reports)
    try:
        passed = passthrough.build(args, getattr(args, "ansible_args", []))
    except passthrough.PassthroughError as exc:
        raise UsageError(str(exc)) from None
    extravars = dict(passed.extravars)
    if getattr(args, "profile", None):
        extravars["lab_run_profile"] = args.profile
    limit = passed.limit
    if getattr(args, "retry_failed", False):
        if limit:
            raise UsageError("--retry-failed chooses the hosts itself; leave out --limit")
        last = store.failed_hosts_of_last_run(reports, inventory)
        if last is None:
            raise UsageError(
                f"--retry-failed: no earlier `disklab run -i {inventory}` recorded under {reports}"
            )
        if not last[1]:
            print(f"--retry-failed: every host of run {last[0]} succeeded; nothing to retry")
            return 0
        try:  # each name as itself, never as a pattern (a limit file: disklab.runner.limit_lines)
            runner.limit_lines(last[1])
        except ValueError as exc:
            raise UsageError(f"--retry-failed: {exc}") from None
        limit = last[1]
        print(console.text(f"--retry-failed: re-running {_names(limit)} (failed in run {last[0]})"))
    fetch = getattr(args, "fetch", None)
    if fetch:
        if passed.select or getattr(args, "retry_failed", False):
            raise UsageError(
                "--fetch runs only the fetch (--tags fetch); leave out --tags, --skip-tags, --check and "
                "--retry-failed"
            )
        if not store.RUN_ID.match(fetch):
            raise UsageError(f"--fetch {fetch}: not a run id (a UTC timestamp like 20261203T061500Z)")
        if (reports / ".runs" / f"{fetch}.json").exists():
            raise UsageError(f"--fetch {fetch}: run {fetch} is stored already (reports/.runs/{fetch}.json)")
        passed.select += ["--tags", "fetch"]
    passed.ansible = _ansible_config()
    passed.passwords = passed.prompts()  # before any host is touched, as ansible-playbook would ask
    reports.mkdir(parents=True, exist_ok=True)
    run_id = fetch or store.new_run_id(reports)
    try:
        with RunLock(reports / ".lock", run_id, what=f"the reports directory {reports}") as lock:
            _refuse_a_live_run(reports)
            if lock.took_over:
                print(f"disklab: {console.text(lock.took_over)}", file=sys.stderr)
            _recover_leftovers(reports, inventory, but=run_id)
            return _run_locked(passed, playbook, kind, inventory, reports, run_id, extravars, limit)
    except LockHeld as exc:
        raise UsageError(f"refused: {exc}") from None


def _move_legacy_dirs(reports: Path) -> None:
    """Move the host directories an older disklab named without the case suffix to each host's name now
    (disklab.store.move_legacy_dirs), holding the reports directory's lock, saying each move; a run that
    holds the lock moves them itself."""
    if not store.legacy_dirs(reports):
        return
    try:
        with RunLock(reports / ".lock", "rename", what=f"the reports directory {reports}"):
            for line in store.move_legacy_dirs(reports):
                print(f"disklab: {console.text(line)}", file=sys.stderr)
    except LockHeld:
        return
    except OSError as exc:
        print(f"disklab: could not move an older host directory under {reports}: {exc}", file=sys.stderr)


def _names(limit: str | list[str]) -> str:
    """A --limit pattern as it is, or host names (--retry-failed's) each quoted where a comma or space
    would make two of one."""
    if isinstance(limit, str):
        return limit
    return ", ".join(h if h and all(c.isalnum() or c in "-_." for c in h) else repr(h) for h in limit)


def _playbook_started(args, playbook: str, kind: str) -> int:
    """:func:`_playbook`, with a write that fails for room before the hosts start said in one line
    (disklab.room; the writes after the start say what they kept themselves)."""
    with room.guard(Path(args.reports), "nothing ran on any host, and every stored file is as it was"):
        return _playbook(args, playbook, kind)


def _refuse_a_live_run(reports: Path, but: str | None = None) -> None:
    """UsageError naming another run of ``reports`` that a live process still owns (disklab.ownership)."""
    live = ownership.live_runs(reports, but=but)
    if live:
        raise UsageError(f"refused: {ownership.describe_live(*live[0])}; wait for it to finish, or stop it")


def _recover_leftovers(reports: Path, inventory: Path, but: str) -> None:
    """Store what a run whose owners died had fetched, and name the command that fetches the rest.

    Its staging directory is then gone: nothing stays silently in ``.incoming`` (disklab.ownership).
    """
    for left in ownership.leftovers(reports, but=but):
        kind = left.owner.get("kind") or "runs"
        where = Path(left.owner.get("inventory") or inventory)
        started = left.owner.get("started_utc", "?")
        said = f"run {left.run_id} (started {started} UTC) stopped before it was stored"
        if left.fetched:
            status = store.store_fetched(reports, left.run_id, kind, {})
            store.record_invocation(reports, left.run_id, kind, where, status)
            hosts = ", ".join(f"{h} {s}" for h, s in status.items())
            print(f"disklab: {said}; stored what it had fetched: {console.text(hosts)}", file=sys.stderr)
        elif kind == "runs":
            print(
                f"disklab: {said}, with nothing fetched; if its lab finished on the hosts, fetch and store "
                f"it with: disklab run -i {where} --fetch {left.run_id}",
                file=sys.stderr,
            )
        else:
            print(f"disklab: {said}, with nothing fetched; run `disklab audit` again", file=sys.stderr)
        store.discard_incoming(reports, left.run_id)


def _ansible_config():
    """The user's Ansible configuration with disklab's defaults (disklab.ansible_env), said in lines."""
    from disklab import ansible_env
    from disklab.runner import collections_root

    try:
        config = ansible_env.build(ansible_path("ansible.cfg"), collections_root())
    except ansible_env.AnsibleConfigError as exc:
        raise UsageError(str(exc)) from None
    if config.config_file:
        print(f"disklab: Ansible reads your configuration, {config.config_file}", file=sys.stderr)
    for note in config.notes:
        print(f"disklab: {note}", file=sys.stderr)
    return config


def _ara_vars(kind: str, run_id: str) -> dict:
    """ARA's name and labels of the playbook (where its callback is enabled), so that a run in ARA can be
    matched to its reports. ARA reads them as they are, untemplated, at each play's start: extra vars here
    replace the playbooks' own (which have no run id)."""
    what = {"runs": "lab run", "audits": "audit", "stop": "stop"}[kind]
    return {
        "ara_playbook_name": f"disklab {what} {run_id}",
        "ara_playbook_labels": ["disklab", f"kind:{kind}", f"run:{run_id}"],
    }


def _warm_up_render() -> None:
    """disklab.report.warm_up, importing the renderer too (an error is left for the render to report)."""
    with contextlib.suppress(Exception):
        from disklab import report

        report.warm_up()


def _run_locked(passed, playbook, kind, inventory, reports, run_id, extravars, limit) -> int:
    """The body of :func:`_playbook`, holding the reports directory's lock; ``passed`` the ansible-playbook
    options (disklab.passthrough.Options)."""
    import threading

    from disklab.progress import Progress
    from disklab.runner import run_playbook

    # While the hosts work, load what the render needs first (about a second of it, off the wall time);
    # --check renders nothing.
    warm = threading.Thread(target=_warm_up_render, name="disklab-render-warm-up", daemon=True)
    if not passed.check:
        warm.start()
    incoming = store.incoming_dir(reports, run_id)
    made = not incoming.exists()
    try:
        incoming.mkdir(parents=True, exist_ok=True)  # a new run id is unused; --fetch's may be staged already
        owner = ownership.write_owner(incoming, run_id, kind, inventory, [os.getpid()])
        ship.build(incoming / ARTIFACT_NAME)  # here, not in a playbook task: a module run less per run
    except OSError:  # no room (disklab.room): nothing of this run is left for the next one to recover
        if made:
            store.discard_incoming(reports, run_id)
        raise
    extravars.update(
        {
            "disklab_run_id": run_id,
            "disklab_incoming_dir": str(incoming.resolve()),
            "disklab_reports": str(reports.resolve()),
            "disklab_store": False,  # stored below, once; the playbook's own store task is for plain Ansible
            **_ara_vars(kind, run_id),
        }
    )
    progress = Progress()
    interrupted: list[str] = []

    def on_signal(signum, frame) -> None:
        interrupted.append(signal.Signals(signum).name)

    artifacts = reports / ".artifacts" / run_id
    before = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        run = run_playbook(
            playbook,
            inventory,
            extravars,
            limit=limit,
            progress=progress,
            cancel=lambda: bool(interrupted),
            artifact_dir=artifacts,
            cmdline=passed.connect + passed.select,
            ansible=passed.ansible,
            passwords=passed.passwords,
            owner_file=owner,
            private_in=incoming,
        )
        if interrupted:
            why = interrupted[0]
            return _stop_interrupted(reports, run_id, kind, inventory, extravars, limit, run, why, passed)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if passed.check:  # Ansible's --check: nothing was measured or fetched, so nothing is stored
        store.discard_incoming(reports, run_id)
        for host, outcome in sorted(run.hosts.items()):
            where = f" at '{outcome.task}': {outcome.message}" if outcome.status != "ok" else ""
            print(console.text(f"{host}: check {outcome.status}{where}"))
        print(f"check mode: nothing changed, measured or stored (Ansible's output: {run.artifacts}/stdout)")
        return 0 if run.hosts and all(o.status == "ok" for o in run.hosts.values()) else 1
    warm.join()  # done long before, unless the playbook ended at once
    status, failed = store_and_render(reports, run_id, kind, inventory, run.hosts, fetched=run.fetching)
    progress.finish(status)
    if not status:
        from disklab import diagnose

        words = passed.connect
        extra = [w for i, w in enumerate(words) if i and words[i - 1] == "-e" and w.startswith("@")]
        said = diagnose.no_host_ran(run.output_tail, inventory, extra)
        why = (
            f"--limit {_names(limit)} matches no host of {inventory}"
            if limit
            else "see Ansible's words below"
        )
        print(console.text(f"disklab {kind}: no host ran: {said or why}"), file=sys.stderr)
        if run.output_tail and not said:
            print(console.lines(run.output_tail), file=sys.stderr)
        return 1
    _say_stored(reports, run_id, kind, run.hosts, failed, fetched=run.fetching)
    if any(o.status != "ok" for o in run.hosts.values()):
        print(f"Ansible's full output and events of this run: {run.artifacts}/stdout, job_events/")
    return 0 if all(s == "ok" for s in status.values()) and not failed else 1


def store_and_render(
    reports: Path, run_id: str, kind: str, inventory: Path, outcomes: dict[str, HostOutcome], fetched=True
):
    """Store each host's fetched file, record the invocation and render the reports: (status, errors).

    The one path from fetched files to reports, for `disklab run`/`audit` and
    for plain ``ansible-playbook`` (``disklab playbook-store``). ``status`` is
    host -> ok | partial | failed | unreachable (empty when no host ran);
    ``errors`` are the renderer's one-line errors. ``fetched=False``: the tags
    fetched no results (store.store_fetched); the audit's facts and the failures
    are stored, and no run record, which says whose results were stored (for
    --retry-failed, and so that ``--fetch RUN`` can fetch what ``--skip-tags fetch`` left).
    """
    from disklab import report

    staging = store.incoming_dir(reports, run_id)
    unstored = _not_stored(reports, run_id)
    short = sorted(h for h, o in outcomes.items() if o.status == "failed" and room.said(o.message))
    if short:  # the fetch itself ran out of room: nothing is stored, and the results stay on the hosts
        if any(staging.glob("*.json")):
            then = unstored
        else:
            then = (
                f"once there is room, `disklab run --fetch {run_id}` fetches and stores them; every file "
                "stored before is as it was"
            )
        where = room.describe(reports, room.said(outcomes[short[0]].message))
        raise room.NoRoom(
            f"{where}: the results of {', '.join(short)} stay on the hosts, not fetched; {then}"
        )
    with room.guard(reports, unstored):
        status = store.store_fetched(reports, run_id, kind, outcomes, fetched=fetched)
        if status and fetched:
            store.record_invocation(reports, run_id, kind, inventory, status)
    if not status:
        return status, []
    not_rendered = (
        f"run {run_id} is stored, its reports are not rendered (each report file is the old one or the new "
        "one): `disklab report` renders them once there is room"
    )
    with room.guard(reports, not_rendered):
        return status, report.render_all(reports)[1]


def _not_stored(reports: Path, run_id: str) -> str:
    """What is kept when run ``run_id`` cannot be stored for room (disklab.room), and what stores it later."""
    return (
        f"run {run_id} is not stored in full: what was fetched and not stored stays in "
        f"{store.incoming_dir(reports, run_id)}, and the next `disklab run` on {reports} stores it; every "
        "file stored before is as it was"
    )


def _say_stored(
    reports: Path, run_id: str, kind: str, outcomes: dict[str, HostOutcome], failed: list[str], fetched=True
):
    for host, outcome in sorted(outcomes.items()):
        where = f" at '{outcome.task}': {outcome.message}" if outcome.status != "ok" else ""
        print(console.text(f"{host}: {outcome.status}{where}"))
    for error in failed:
        print(f"disklab report: {console.text(error)}", file=sys.stderr)
    what = "lab run" if kind == "runs" else "audit"
    if not fetched:  # --tags provision, --tags audit, --skip-tags fetch
        kept = [
            f"{said} of {', '.join(hosts)}"
            for said, kind_ in (("the audit's facts", "audits"), ("the failure", "failures"))
            if (hosts := [h for h in sorted(outcomes) if store.has_file(reports, h, kind_, run_id)])
        ]
        kept_said = "stored " + " and ".join(kept) if kept else "nothing to store"
        print(f"{what} {run_id}: its tags fetched no results; {kept_said}")
    print(f"{what} {run_id}: fleet index in {reports}/index.md")


def cmd_playbook_begin(args) -> int:
    """For plain ansible-playbook: take a run id (or use --run-id), make its staging directory, print its
    result line (disklab_host.common.result)."""
    reports = Path(args.reports).resolve()
    with room.guard(reports, "nothing ran on any host, and every stored file is as it was"):
        return _playbook_begin(args, reports)


def _playbook_begin(args, reports: Path) -> int:
    reports.mkdir(parents=True, exist_ok=True)
    try:
        with RunLock(reports / ".lock", "ansible-playbook", what=f"the reports directory {reports}"):
            _refuse_a_live_run(reports, but=args.run_id)
            run_id = args.run_id or store.new_run_id(reports)
            incoming = store.incoming_dir(reports, run_id)
            incoming.mkdir(parents=True, exist_ok=bool(args.run_id))
            # this ansible-playbook owns the run from here until its store task (disklab.ownership)
            playbook = ownership.ancestor_playbook()
            ownership.write_owner(
                incoming, run_id, args.kind, Path(args.inventory), [playbook] if playbook else []
            )
            ship.build(incoming / ARTIFACT_NAME)  # so the playbook's pack task is skipped
    except LockHeld as exc:
        raise UsageError(f"refused: {exc}") from None
    emit_result({"run_id": run_id, "incoming_dir": str(incoming), "reports": str(reports)})
    return 0


def cmd_playbook_store(args) -> int:
    """For plain ansible-playbook: store what the play fetched and render the reports (as `disklab run`)."""
    reports = Path(args.reports)
    kind = args.kind
    try:
        lock = RunLock(reports / ".lock", args.run_id, what=f"the reports directory {reports}")
        with room.guard(reports, _not_stored(reports, args.run_id)), lock:
            if args.check:
                store.discard_incoming(reports, args.run_id)
                print(f"check mode: nothing was stored for run {args.run_id}")
                return 0
            # Without a fetch (--tags provision, audit), a host without a file is no failure: only what was
            # staged (the audit's facts) is stored, and said.
            hosts = _play_hosts(args.hosts) if not args.nothing_fetched else []
            outcomes = {h: HostOutcome(host=h) for h in hosts}
            status, failed = store_and_render(
                reports, args.run_id, kind, Path(args.inventory), outcomes, fetched=not args.nothing_fetched
            )
    except LockHeld as exc:
        raise UsageError(
            f"refused: {exc}; what this run fetched stays in {store.incoming_dir(reports, args.run_id)}, "
            "and the next `disklab run` on this reports directory stores it"
        ) from None
    if not status:
        print(f"run {args.run_id}: nothing was fetched, nothing stored")
        emit_result({"run_id": args.run_id, "kind": kind, "reports": str(reports.resolve()), "hosts": {}})
        return 0
    _say_stored(reports, args.run_id, kind, outcomes, failed, fetched=not args.nothing_fetched)
    if any(o.status in ("failed", "unreachable") for o in outcomes.values()):
        print("a host without a results file failed earlier in the play: Ansible's output names the task")
    # For the playbook's set_stats (AWX and Automation Platform show them with the job)
    emit_result({"run_id": args.run_id, "kind": kind, "reports": str(reports.resolve()), "hosts": status})
    return 1 if failed else 0


def _play_hosts(value: str | None) -> list[str]:
    """playbook-store's --hosts: a JSON list of names (the playbooks' own), or comma-separated names."""
    import json

    with contextlib.suppress(ValueError):
        hosts = json.loads(value or "[]")
        if isinstance(hosts, list) and all(isinstance(h, str) for h in hosts):
            return [h for h in hosts if h]
    return [h for h in (value or "").split(",") if h]


def _stop_interrupted(reports, run_id, kind, inventory, extravars, limit, run, why: str, passed) -> int:
    """After Ctrl-C or SIGTERM: stop the lab on every host, store nothing half-made, say where each stopped.

    Every host of the run gets ``playbooks/stop.yml`` (``disklab_host stop``),
    which ends its lab runner and the runner's children; the runner removes the
    files of the step it was in. Nothing fetched is stored: the run's incoming
    directory is removed. The run record marks each host interrupted, so
    ``--retry-failed`` runs it again. The stop playbook connects as the run
    did (``passed``: its connection options, configuration and passwords).
    Returns 130.
    """
    from disklab.progress import Progress
    from disklab.runner import run_playbook

    print(f"disklab: {why}: stopping the lab on every host of run {run_id} ...", file=sys.stderr)
    stopped = run_playbook(
        "stop.yml",
        inventory,
        {**extravars, **_ara_vars("stop", run_id)},
        limit=limit,
        progress=Progress(live=False),
        artifact_dir=run.artifacts.parent,
        cmdline=passed.connect,
        ansible=passed.ansible,
        passwords=passed.passwords,
        private_in=store.incoming_dir(reports, run_id),
    ).hosts
    status = {}
    for host in sorted(set(run.hosts) | set(stopped)):
        report_ = stopped[host].stop_report if host in stopped else None
        task = run.hosts[host].task if host in run.hosts else None
        if report_ and report_.get("stopped"):
            where = f"step {report_.get('step')}" + (
                " (killed after the grace period)" if report_["forced"] else ""
            )
        else:
            where = f"task '{task}'" if task else "the start"
        print(console.text(f"interrupted at {where} on {host}"))
        status[host] = "interrupted"
    store.discard_incoming(reports, run_id)
    if status:
        store.record_invocation(reports, run_id, kind, inventory, status)
    print(f"run {run_id} interrupted: nothing from it was stored", file=sys.stderr)
    return 130


def cmd_report(args) -> int:
    from disklab import report

    reports = Path(args.reports)
    if not reports.is_dir():
        raise UsageError(f"no reports directory at {reports}: run `disklab run` or `disklab audit` first")
    kept = "no stored file changed, and each report file is the old one or the new one"
    with room.guard(reports, kept):
        written, failed = report.render_all(reports, force=args.force)
    n = len(written) - 1
    print(f"rendered {n} host report{'' if n == 1 else 's'} and the index under {reports}")
    for error in failed:
        print(f"disklab report: {console.text(error)}", file=sys.stderr)
    return 1 if failed else 0


def cmd_doctor(args) -> int:
    """Run the audit, then print each audited host's quiet-host checks (audit/quiet.py) with their advice."""
    from disklab import hostnames, stored

    rc = _playbook_started(args, "audit.yml", "audits")
    reports = Path(args.reports)
    records = sorted((reports / ".runs").glob("*.json"), key=store.run_key)
    if not records:
        return rc
    record = stored.read(records[-1], "run_record")
    for host, status in sorted(record["hosts"].items()):
        audit = hostnames.host_dir(reports, host) / "audits" / f"{record['run_id']}.json"
        if status != "ok" or not audit.is_file():
            print(console.text(f"{host}: not audited ({status}): no checks"))
            continue
        quiet = stored.read(audit, "audit", host=host)["facts"].get("quiet")
        print(console.lines(doctor_text(host, quiet)))
    return rc


def doctor_text(host: str, quiet: dict | None) -> str:
    """A host's quiet-host checks as lines: advice first, then what was fine, then what is not known."""
    if not isinstance(quiet, dict) or "checks" not in quiet:
        return f"{host}: the audit made no quiet-host checks ({(quiet or {}).get('unavailable', 'none')})"
    checks = quiet["checks"]
    advice = [c for c in checks if c["state"] == "advice"]
    lines = [f"{host}: {len(advice)} piece(s) of advice for steadier figures (nothing was changed)"]
    lines += [f"  advice  {c['check'].replace('_', ' ')}: {c['found']}; {c['advice']}" for c in advice]
    lines += [f"  ok      {c['check'].replace('_', ' ')}: {c['found']}" for c in checks if c["state"] == "ok"]
    lines += [
        f"  unknown {c['check'].replace('_', ' ')}: {c['found']}" for c in checks if c["state"] == "unknown"
    ]
    if quiet.get("validation"):
        lines.append(f"  ({quiet['validation']})")
    return "\n".join(lines)


def cmd_compare(args) -> int:
    from disklab import compare, stored, verdicts

    if len(args.targets) == 1:
        host = args.targets[0]
        host_dir = _host_dir(args, "compare", host)
        runs = store.files(host_dir, "runs")
        if args.baseline:
            old = host_dir / "runs" / f"{args.baseline}.json"
            if old not in runs:
                ids = ", ".join(p.stem for p in runs) or "none"
                raise UsageError(
                    f"compare --baseline {args.baseline}: no such run of {host}; its runs: {ids}"
                )
            if old == runs[-1]:
                raise UsageError(
                    f"compare --baseline {args.baseline}: it is {host}'s latest run; nothing newer"
                )
        elif len(runs) < 2:
            raise UsageError(
                f"compare {host}: needs two stored runs under {host_dir / 'runs'}, found {len(runs)}"
            )
        else:
            old = runs[-2]
        new = runs[-1]
    elif args.baseline:
        raise UsageError(
            "compare --baseline RUN_ID takes a HOST (its latest run against RUN_ID), not two files"
        )
    elif len(args.targets) == 2:
        old, new = (Path(t) for t in args.targets)
    else:
        raise UsageError("compare takes HOST or two run files")
    for path in (old, new):
        if not Path(path).is_file():
            raise UsageError(f"compare: run file {path} does not exist")
    try:
        owner = args.targets[0] if len(args.targets) == 1 else None  # a HOST's runs must name it
        effects = verdicts.parse_min_effects(args.min_effect or [])
        docs = [stored.read(p, "results", host=owner) for p in (old, new)]
        earlier = _earlier_runs(runs[: runs.index(old)], owner, docs[0]) if owner else None
        cmp = compare.compare_runs(*docs, effects, earlier)
    except (stored.StoredFileError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        sys.stdout.write(compare.to_json(cmp))
    else:
        print(console.lines(compare.render_compare_text(cmp, show_all=args.all)))
    changed = compare.n_changed(cmp)
    if args.fail_on_change and changed:
        print(
            f"disklab compare: {changed} figure(s) called changed (--fail-on-change; disklab.verdicts: "
            "q <= 0.05 and beyond the minimum effect; disturbed and inconclusive figures do not count)",
            file=sys.stderr,
        )
        return 1
    return 0


def _earlier_runs(paths: list[Path], host: str, old: dict) -> list[dict]:
    """The host's stored runs before the compared one that are comparable with it (disklab.compare.
    comparable), the latest of them, oldest first, for its run-to-run drift; one that cannot be read is
    left out, as history leaves it out."""
    from disklab import compare, stored, verdicts

    out: list[dict] = []
    for path in reversed(paths):
        if len(out) >= verdicts.HISTORY_MAX_RUNS - 1:
            break
        with contextlib.suppress(stored.StoredFileError):
            doc = stored.read(path, "results", host=host)
            if compare.comparable(doc, old):
                out.append(doc)
    return out[::-1]


def _host_dir(args, command: str, host: str) -> Path:
    """The host's directory under --reports (disklab.hostnames), or a UsageError for a name it refuses."""
    from disklab import hostnames

    try:
        return hostnames.host_dir(Path(args.reports), host)
    except ValueError as exc:
        raise UsageError(f"{command}: {exc}") from None


def _host_with_runs(args, command: str, host: str) -> Path:
    """The host's directory under --reports, or a UsageError when the name is refused or has no stored run."""
    host_dir = _host_dir(args, command, host)
    if not store.files(host_dir, "runs"):
        raise UsageError(f"{command} {host}: no stored runs under {host_dir / 'runs'}")
    return host_dir


def _print_listing(command: str, doc: dict, text: str) -> int:
    """Print ``text`` and a line for each run ``doc`` left out as unreadable; 1 when one was."""
    sys.stdout.write(text)
    for line in doc["unreadable"]:
        print(f"disklab {command}: left out: {console.text(line)}", file=sys.stderr)
    return 1 if doc["unreadable"] else 0


def cmd_history(args) -> int:
    from disklab import history

    host_dir = _host_with_runs(args, "history", args.host)
    try:
        hist = history.build(args.host, host_dir, args.figure)
    except history.UnknownFigure as exc:
        raise UsageError(f"history {args.host}: {exc}") from None
    return _print_listing("history", hist, history.to_json(hist) if args.json else history.render_text(hist))


def cmd_runs(args) -> int:
    from disklab import history

    reports = Path(args.reports)
    if args.host:
        _host_with_runs(args, "runs", args.host)
    elif not reports.is_dir():
        raise UsageError(f"no reports directory at {reports}: run `disklab run` first")
    listed = history.list_runs(reports, args.host)
    text = history.to_json(listed) if args.json else history.render_runs_text(listed)
    return _print_listing("runs", listed, text)


def cmd_export(args) -> int:
    from disklab.fsio import atomic_write_text

    reports = Path(args.reports)
    if not reports.is_dir():
        raise UsageError(f"no reports directory at {reports}: run `disklab run` first")
    if args.out and Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a directory; give a file name")
    try:
        rows, errors = export.collect(reports, args.host or None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    text = export.render(rows, args.format)
    if args.out:
        atomic_write_text(Path(args.out), text)
        runs = len({(r["host"], r["run_id"]) for r in rows})
        print(f"exported {len(rows)} figures of {runs} run(s) to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    for error in errors:
        print(f"disklab export: {console.text(error)}", file=sys.stderr)
    return 1 if errors else 0


def _add_ansible_options(p: argparse.ArgumentParser) -> None:
    """Options passed on to ansible-playbook (disklab.passthrough): common ones by name, others after --."""
    p.add_argument("-l", "--limit", help="only these hosts (an Ansible --limit pattern)")
    p.add_argument(
        "-e",
        "--extra",
        action="append",
        metavar="NAME=VALUE|@FILE",
        help="extra variables for every host, as ansible-playbook -e reads them: 'NAME=VALUE NAME2=VALUE2' "
        "(strings), a JSON or YAML mapping, or @FILE (may be vaulted)",
    )
    p.add_argument("--check", action="store_true", help="Ansible check mode: change nothing, measure nothing")
    p.add_argument("--tags", help="only tasks with these tags (ansible-playbook --tags)")
    p.add_argument("--skip-tags", help="skip tasks with these tags (ansible-playbook --skip-tags)")
    p.add_argument("-u", "--user", help="connect as this user (ansible-playbook -u)")
    p.add_argument("--private-key", metavar="FILE", help="SSH private key file (ansible-playbook's)")
    p.add_argument("-b", "--become", action="store_true", help="become root on every task (as -b)")
    p.add_argument(
        "-K", "--ask-become-pass", action="store_true", help="ask for the sudo password once, before any host"
    )
    p.add_argument("-J", "--ask-vault-pass", action="store_true", help="ask for the vault password once")
    p.add_argument("--vault-id", action="append", metavar="ID", help="a vault identity (repeatable)")
    p.add_argument(
        "--vault-password-file", action="append", metavar="FILE", help="a vault password file (repeatable)"
    )
    p.add_argument("--forks", type=int, help="hosts at once (default: your ansible.cfg's forks, else 32)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more of Ansible's output (-vvv)")


_PASSTHROUGH_EPILOG = (
    "Any other ansible-playbook option goes after --, as in `disklab run -i inv.yml -- --become-user lab "
    "--ssh-common-args='-o ConnectTimeout=5'`. Your ansible.cfg (ANSIBLE_CONFIG, ./ansible.cfg, "
    "~/.ansible.cfg, /etc/ansible/ansible.cfg) and ANSIBLE_* variables apply; disklab's own settings fill "
    "in only what they leave unset, and a line says where yours differ. Refused, naming both: -i after -- "
    "(use disklab's -i), a second limit, and -e of disklab_run_id, disklab_incoming_dir, disklab_reports "
    "or disklab_store."
)


_EXIT_STATUSES = """exit status:
  0    every host succeeded, every stored file rendered
  1    run, audit: a host failed, was unreachable or partial (a step, or a part of one, failed), or
       its settings were refused before any work (each host failed, naming the variable);
       report: a stored file could not be rendered (named; the others are), or the predictions file was
       not used (named, with the rule or bound it broke); compare --fail-on-change: a figure called
       changed; export, history, runs: a stored run could not be read, or lies in another host's
       directory (named; the others are shown); any command: the reports directory is full or read-only
       (one line: its free space and what was kept; no stored file changes)
  2    bad input: a refused option, -e value or inventory file, named in one line
  130  run, audit interrupted (Ctrl-C or SIGTERM): the lab is stopped on every host, nothing of it stored

shell completion: disklab --print-completion bash > ~/.local/share/bash-completion/completions/disklab
(or zsh, tcsh, fish)"""

# The commands `disklab --help` lists; playbook-begin and playbook-store are the playbooks' own (they
# run them under plain ansible-playbook) and are left out of it.
_PUBLIC_COMMANDS = ("run", "audit", "doctor", "report", "compare", "history", "runs", "export", "powercut")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="disklab",
        description="A reproducible storage lab for a fleet of hosts.",
        epilog=_EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reports_help = "reports directory (default: ./reports, or $DISKLAB_REPORTS)"
    ap.add_argument("--reports", default=str(DEFAULT_REPORTS), help=reports_help)
    ap.add_argument("--version", action="version", version=f"disklab {__version__}")
    shtab.add_argument_to(ap, ["--print-completion"], help="print a shell completion script for this shell")
    # --reports after the command too (`disklab report --reports DIR`); it wins over one given before it
    reports_after = argparse.ArgumentParser(add_help=False)
    reports_after.add_argument("--reports", default=argparse.SUPPRESS, help=reports_help)
    sub = ap.add_subparsers(dest="command", required=True, metavar="{" + ",".join(_PUBLIC_COMMANDS) + "}")

    def command(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[reports_after], **kwargs)

    run = command(
        "run",
        help="provision, audit and run the lab on every host, then render reports",
        epilog=_PASSTHROUGH_EPILOG,
    )
    run.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY), help="default: this machine only")
    run.add_argument("--profile", choices=registry.PROFILES, help="override lab_run_profile for every host")
    run.add_argument(
        "--retry-failed", action="store_true", help="re-run only the hosts that failed last time"
    )
    run.add_argument(
        "--fetch",
        metavar="RUN_ID",
        help="fetch and store the finished results of run RUN_ID from the hosts (its controller stopped)",
    )
    _add_ansible_options(run)
    run.set_defaults(func=lambda a: _playbook_started(a, "site.yml", "runs"))

    audit = command(
        "audit",
        help="facts only: filesystem, mount, device and writeback settings per host",
        epilog=_PASSTHROUGH_EPILOG,
    )
    audit.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY), help="default: this machine only")
    _add_ansible_options(audit)
    audit.set_defaults(func=lambda a: _playbook_started(a, "audit.yml", "audits"))

    doc = command(
        "doctor",
        help="how quiet each host is for measuring (the audit's pyperf-style checks, with advice): changes "
        "nothing on the hosts",
        epilog=_PASSTHROUGH_EPILOG,
    )
    doc.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY), help="default: this machine only")
    _add_ansible_options(doc)
    doc.set_defaults(func=cmd_doctor)

    rep = command("report", help="re-render the reports from stored runs, touching no host")
    rep.add_argument("--force", action="store_true", help="render every host, even those already up to date")
    rep.set_defaults(func=cmd_report)

    cmp = command("compare", help="what changed between a host's last two runs (or two run files)")
    cmp.add_argument(
        "targets",
        nargs="+",
        metavar="HOST | RUN_A.json RUN_B.json",
        help="a host under --reports (its last two runs), or two run files",
    )
    cmp.add_argument(
        "--baseline",
        metavar="RUN_ID",
        help="compare the host's latest run against this stored run of it, not the one before",
    )
    cmp.add_argument(
        "--json", action="store_true", help="print the comparison as JSON (see disklab.compare.compare_runs)"
    )
    cmp.add_argument(
        "--fail-on-change",
        action="store_true",
        help="exit 1 when any figure is called changed (the verdicts of docs/statistics.md) or a power-cut "
        "verdict changed (for CI); disturbed and inconclusive figures do not count",
    )
    cmp.add_argument(
        "--all",
        action="store_true",
        help="list every judged figure (default: changed, disturbed, and large "
        "effects the samples could not decide)",
    )
    cmp.add_argument(
        "--min-effect",
        action="append",
        metavar="KIND=SHARE",
        help="the minimum effect T of one kind of figure, e.g. durable_sync=0.5 or load_time=5%% (kinds: "
        "durable_sync, latency, load_time, time, rate, peak_rss, size); repeat for several",
    )
    cmp.set_defaults(func=cmd_compare)

    hist = command("history", help="a host's key figures (or one figure) over every stored run, oldest first")
    hist.add_argument("host", metavar="HOST", help="a host under --reports")
    hist.add_argument(
        "figure",
        nargs="?",
        metavar="FIGURE",
        help="a figure's key, or part of a key figure's key or name (default: every key figure)",
    )
    hist.add_argument("--json", action="store_true", help="print it as JSON (see disklab.history.build)")
    hist.set_defaults(func=cmd_history)

    rl = command(
        "runs", help="every stored run, one line each: host, run id, started, steps, versions, status"
    )
    rl.add_argument("host", nargs="?", metavar="HOST", help="only this host's runs")
    rl.add_argument("--json", action="store_true", help="print them as JSON (see disklab.history.list_runs)")
    rl.set_defaults(func=cmd_runs)

    exp = command("export", help="every figure of every stored run, one row per host, run and figure")
    exp.add_argument(
        "--format",
        choices=export.FORMATS,
        default="csv",
        help="csv, json (one document) or jsonl (one row per line); default: %(default)s (docs/outputs.md)",
    )
    exp.add_argument("--out", metavar="FILE", help="write here (atomically) instead of to stdout")
    exp.add_argument("--host", action="append", metavar="HOST", help="only this host (repeatable)")
    exp.set_defaults(func=cmd_export)
    begin = command(
        "playbook-begin", description="(run by the playbooks under plain ansible-playbook) a run id"
    )
    begin.add_argument("--run-id", help="use this run id (its finished results are fetched later)")
    begin.add_argument("--kind", choices=("runs", "audits"), default="runs")
    begin.add_argument("--inventory", default=str(DEFAULT_INVENTORY))
    begin.set_defaults(func=cmd_playbook_begin)
    st = command(
        "playbook-store", description="(run by the playbooks under plain ansible-playbook) store and render"
    )
    st.add_argument("--run-id", required=True)
    st.add_argument("--kind", choices=("runs", "audits"), required=True)
    st.add_argument("--inventory", required=True)
    st.add_argument(
        "--hosts",
        help="every host of the play, as a JSON list or comma-separated (one without a file failed)",
    )
    st.add_argument("--check", action="store_true", help="check mode: store nothing, remove the staging dir")
    st.add_argument(
        "--nothing-fetched",
        action="store_true",
        help="the tags skipped the fetch: store only the audit's facts",
    )
    st.set_defaults(func=cmd_playbook_store)

    # Parsed by disklab.powercut_cli itself (see main); listed here for `disklab --help`.
    sub.add_parser("powercut", help="check every crash state of your own save function (MODULE.py:FUNCTION)")
    return ap


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `disklab compare HOST | head` ends quietly
    argv = sys.argv[1:] if argv is None else argv
    if "powercut" in argv:  # its own parser owns every argument after it, --help included
        at = argv.index("powercut")
        before = argv[:at]  # only the global --reports option may come first
        reports_only = (at == 2 and before[0] == "--reports") or (
            at == 1 and before[0].startswith("--reports=")
        )
        if not before or reports_only:
            from disklab import powercut_cli

            return powercut_cli.main(argv[at + 1 :])
    rest: list[str] = []
    if "--" in argv:  # everything after it goes to ansible-playbook as it is (disklab.passthrough)
        at = argv.index("--")
        argv, rest = argv[:at], argv[at + 1 :]
    args = build_parser().parse_args(argv)
    if rest and args.command not in ("run", "audit", "doctor"):
        print(
            f"disklab {args.command}: options after -- are for `run`, `audit` and `doctor` only",
            file=sys.stderr,
        )
        return 2
    args.ansible_args = rest
    try:
        _move_legacy_dirs(Path(args.reports))
        return args.func(args)
    except UsageError as exc:
        print(f"disklab: {console.text(exc)}", file=sys.stderr)
        return 2
    except room.NoRoom as exc:  # the reports directory is full or read-only: said in one line
        print(f"disklab {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
