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
(store what was fetched and render the reports), the same code ``disklab run`` uses. This module
parses the command line and runs each command; a run itself (Ansible, ownership, the fetch and the store)
is disklab.orchestrate's.

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

from disklab import __version__, console, export, orchestrate, room, store
from disklab.runner import ansible_path
from disklab.usage import UsageError
from disklab_host import registry

DEFAULT_INVENTORY = ansible_path("inventory", "local.yml")
# Under the current directory, never inside the installed package; DISKLAB_REPORTS names another (an AWX job's
# working directory is discarded when the job ends: docs/fleet.md).
DEFAULT_REPORTS = Path(os.environ.get("DISKLAB_REPORTS") or "reports")


def cmd_report(args) -> int:
    from disklab import report

    reports = Path(args.reports)
    if not reports.is_dir():
        raise UsageError(f"no reports directory at {reports}: run `disklab run` or `disklab audit` first")
    kept = "no stored file changed, and each report file is the old one or the new one"
    with room.guard(reports, kept):
        written, failed = report.render_all(reports, force=args.force)
    n = sum(1 for p in written if p.name == "report.md")
    print(f"rendered {n} host report{'' if n == 1 else 's'} and the index under {reports}")
    for error in failed:
        print(f"disklab report: {console.text(error)}", file=sys.stderr)
    return 1 if failed else 0


def cmd_doctor(args) -> int:
    """Run the audit, then print each audited host's quiet-host checks (audit/quiet.py) with their advice."""
    from disklab import hostnames, stored

    rc = orchestrate.playbook_started(args, "audit.yml", "audits")
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
    run.set_defaults(func=lambda a: orchestrate.playbook_started(a, "site.yml", "runs"))

    audit = command(
        "audit",
        help="facts only: filesystem, mount, device and writeback settings per host",
        epilog=_PASSTHROUGH_EPILOG,
    )
    audit.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY), help="default: this machine only")
    _add_ansible_options(audit)
    audit.set_defaults(func=lambda a: orchestrate.playbook_started(a, "audit.yml", "audits"))

    tog = command(
        "together",
        help="a together run: every host, a client of one shared filesystem, loads the model cold at one "
        "common start, for N = 1, 2, 4, ... hosts (the cold-start storm); stores it and renders together.md",
        epilog=_PASSTHROUGH_EPILOG,
    )
    tog.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY), help="default: this machine only")
    _add_ansible_options(tog)
    tog.set_defaults(func=lambda a: orchestrate.playbook_started(a, "together.yml", "together"))

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
    begin.add_argument("--kind", choices=("runs", "audits", "together"), default="runs")
    begin.add_argument("--inventory", default=str(DEFAULT_INVENTORY))
    begin.set_defaults(func=orchestrate.playbook_begin)
    st = command(
        "playbook-store", description="(run by the playbooks under plain ansible-playbook) store and render"
    )
    st.add_argument("--run-id", required=True)
    st.add_argument("--kind", choices=("runs", "audits", "together"), required=True)
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
    st.set_defaults(func=orchestrate.playbook_store)

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
        orchestrate.move_legacy_dirs(Path(args.reports))
        return args.func(args)
    except UsageError as exc:
        print(f"disklab: {console.text(exc)}", file=sys.stderr)
        return 2
    except room.NoRoom as exc:  # the reports directory is full or read-only: said in one line
        print(f"disklab {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
