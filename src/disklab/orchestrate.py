"""Run a playbook for `disklab run`, `audit` and `doctor`, and store and render what came back.

The one reports directory is held (``<reports>/.lock``) while a run starts, runs and is stored; a run whose
owners died is stored or named first (disklab.ownership). The playbooks themselves call
``playbook-begin`` (a run id and its staging directory) and ``playbook-store`` (store what was fetched and
render the reports) when run by plain ``ansible-playbook``: :func:`playbook_begin` and
:func:`playbook_store`, on the same code as ``disklab run``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from disklab import console, ownership, passthrough, room, runner, ship, store, stored, togetherrun
from disklab.runner import HostOutcome, ansible_path
from disklab.usage import UsageError
from disklab_host.common.lock import LockHeld, RunLock
from disklab_host.common.result import emit as emit_result
from disklab_host.stage import ARTIFACT_NAME


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


def move_legacy_dirs(reports: Path) -> None:
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


def playbook_started(args, playbook: str, kind: str) -> int:
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
        if kind == "together":
            staging = store.incoming_dir(reports, left.run_id)
            try:
                status = togetherrun.store(reports, left.run_id, where, {}, staging)
            except stored.StoredFileError as exc:  # kept as it came, and said again at the next start
                print(f"disklab: {said}; not stored: {console.text(str(exc))}", file=sys.stderr)
                continue
            if togetherrun.path(reports, left.run_id).is_file():
                store.record_invocation(reports, left.run_id, kind, where, status)
                print(f"disklab: {said}; stored what its hosts had sent", file=sys.stderr)
            else:
                print(f"disklab: {said}, with no round run; nothing to store", file=sys.stderr)
        elif left.fetched:
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
    what = {"runs": "lab run", "audits": "audit", "stop": "stop", "together": "together run"}[kind]
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
        if kind == "together":  # one file for the whole run (disklab.togetherrun), not one per host
            try:
                status = togetherrun.store(reports, run_id, inventory, outcomes, staging)
            except stored.StoredFileError as exc:
                status = {h: o.status for h, o in sorted(outcomes.items())}
                kept = f"what the hosts sent stays in {staging}"
                return status, [f"together run {run_id} is not stored: {exc}; {kept}"]
            store.discard_incoming(reports, run_id)
        else:
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
    if kind == "together":  # one file for the run, or none when no host ran a round (disklab.togetherrun)
        stored_as = togetherrun.path(reports, run_id)
        if stored_as.is_file():
            print(f"together run {run_id}: stored as {stored_as}; its page: {reports}/together.md")
        else:
            print(f"together run {run_id}: no host ran a round, so nothing was stored")
        return
    if not fetched:  # --tags provision, --tags audit, --skip-tags fetch
        kept = [
            f"{said} of {', '.join(hosts)}"
            for said, kind_ in (("the audit's facts", "audits"), ("the failure", "failures"))
            if (hosts := [h for h in sorted(outcomes) if store.has_file(reports, h, kind_, run_id)])
        ]
        kept_said = "stored " + " and ".join(kept) if kept else "nothing to store"
        print(f"{what} {run_id}: its tags fetched no results; {kept_said}")
    print(f"{what} {run_id}: fleet index in {reports}/index.md")


def playbook_begin(args) -> int:
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


def playbook_store(args) -> int:
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
