"""The ansible-playbook options `disklab run` and `disklab audit` pass on, and the ones they refuse.

Every ansible-playbook option reaches Ansible: the common ones by name
(``-K``, ``--vault-id``, ``--vault-password-file``, ``--private-key``,
``-e @file``, ``-l`` ...), any other after ``--``. Refused, with one line naming
both sides, is only what would contradict what disklab itself must set: the
inventory (disklab's ``-i``), the variables that tie a run to its reports
(:data:`RESERVED`), a second ``--limit``, and the options that stop Ansible
from running the play (``--list-hosts``, ``--syntax-check`` ...) or make it
wait for a person (``--step``). The prompts Ansible would show (``-K``,
``--ask-vault-pass``) are asked here, before any host is touched, and their
answers handed to ansible-runner.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass, field
from pathlib import Path

# The variables disklab sets for every run (playbooks/site.yml lists them with disklab_root and
# disklab_workbench): what to use instead of each.
RESERVED = {
    "disklab_run_id": "disklab makes each run's id; to fetch a finished run's results use "
    "`disklab run --fetch RUN`",
    "disklab_incoming_dir": "disklab stages fetched results under the reports directory itself",
    "disklab_reports": "use disklab's --reports DIR (or DISKLAB_REPORTS)",
    "disklab_store": "disklab run stores every run itself",
}

# Options after `--` that disklab refuses: what to use instead.
_REFUSED = {
    "-i": "disklab's -i INVENTORY",
    "--inventory": "disklab's -i INVENTORY",
    "--inventory-file": "disklab's -i INVENTORY",
    "--list-hosts": "plain ansible-playbook (disklab would run nothing and store nothing)",
    "--list-tasks": "plain ansible-playbook (disklab would run nothing and store nothing)",
    "--list-tags": "plain ansible-playbook (disklab would run nothing and store nothing)",
    "--syntax-check": "plain ansible-playbook (disklab would run nothing and store nothing)",
    "--step": "plain ansible-playbook (disklab runs without asking at each task)",
}

# Ansible's prompts (ansible-playbook -K, --ask-vault-pass), as ansible-runner matches them.
BECOME_PROMPT = r"^BECOME password.*:\s*?$"
VAULT_PROMPT = r"^Vault password.*:\s*?$"


class PassthroughError(ValueError):
    """An option disklab refuses; its message is the one line the user sees."""


@dataclass
class Options:
    """What goes to ansible-playbook besides the playbook, the inventory and disklab's variables."""

    connect: list[str] = field(default_factory=list)  # for every playbook of the run, the stop playbook too
    select: list[str] = field(default_factory=list)  # --check, --tags, --skip-tags: the main playbook only
    extravars: dict = field(default_factory=dict)  # -e NAME=VALUE and -e '{...}' pairs
    check: bool = False
    limit: str | None = None
    ask_become_pass: bool = False
    ask_vault_pass: bool = False
    ansible: object = None  # the configuration ansible-playbook runs with (disklab.ansible_env.AnsibleEnv)
    passwords: dict[str, str] = field(default_factory=dict)  # the prompts' answers, {prompt regex: answer}

    def prompts(self, ask=getpass.getpass) -> dict[str, str]:
        """Ask for the passwords Ansible would prompt for; {prompt regex: answer} for ansible-runner."""
        answers = {}
        if self.ask_become_pass:
            answers[BECOME_PROMPT] = ask("BECOME password: ")
        if self.ask_vault_pass:
            answers[VAULT_PROMPT] = ask("Vault password: ")
        return answers


def parse_extra(value: str, where: str = "-e") -> tuple[dict, str | None]:
    """One ``-e`` value: ({name: value}, None), or ({}, the @file's absolute path) for ``-e @FILE``.

    ``NAME=VALUE`` values are YAML (8 is an int, [a, b] a list); a value that
    starts with ``{`` is a JSON or YAML mapping. The variables of an @FILE are
    read (unless vault-encrypted) only to refuse a reserved name.
    """
    import yaml

    if value.startswith("@"):
        path = Path(value[1:]).expanduser()
        if not path.is_file():
            raise PassthroughError(f"{where} {value}: {path} does not exist")
        text = path.read_text(encoding="utf-8", errors="replace")
        if not text.startswith("$ANSIBLE_VAULT"):
            try:
                doc = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise PassthroughError(f"{where} {value}: not valid YAML or JSON ({_problem(exc)})") from None
            if doc is not None and not isinstance(doc, dict):
                raise PassthroughError(f"{where} {value}: holds a {type(doc).__name__}, not variables")
            _refuse_reserved(doc or {}, f"{where} {value}")
        return {}, str(path.resolve())
    if value.lstrip().startswith("{"):
        try:
            doc = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise PassthroughError(f"{where} {value}: not valid JSON or YAML ({_problem(exc)})") from None
        if not isinstance(doc, dict):
            raise PassthroughError(f"{where} {value}: not a mapping of variables")
        _refuse_reserved(doc, f"{where} {value}")
        return doc, None
    name, sep, raw = value.partition("=")
    if not sep or not name:
        raise PassthroughError(f"{where} expects NAME=VALUE, @FILE or a JSON mapping, got {value!r}")
    try:
        parsed = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = _problem(exc)
        raise PassthroughError(f"{where} {name}={raw}: the value is not valid YAML ({problem})") from None
    _refuse_reserved({name: parsed}, f"{where} {name}")
    return {name: parsed}, None


def _problem(exc) -> str:
    return getattr(exc, "problem", None) or str(exc).splitlines()[0]


def _refuse_reserved(variables: dict, where: str) -> None:
    for name in variables:
        if name in RESERVED:
            raise PassthroughError(f"{where} sets {name}, which disklab sets for every run: {RESERVED[name]}")


def build(args, rest: list[str]) -> Options:
    """The Options of a `disklab run`/`audit` command line: its named options, then ``rest`` (after --)."""
    opts = Options(check=bool(args.check), limit=args.limit)
    opts.ask_become_pass = bool(getattr(args, "ask_become_pass", False))
    opts.ask_vault_pass = bool(getattr(args, "ask_vault_pass", False))
    for value in args.extra or []:
        variables, path = parse_extra(value)
        opts.extravars.update(variables)
        if path:
            opts.connect += ["-e", f"@{path}"]
    if args.user:
        opts.connect += ["--user", args.user]
    if args.private_key:
        opts.connect += ["--private-key", str(Path(args.private_key).expanduser().resolve())]
    for vault_id in args.vault_id or []:
        opts.connect += ["--vault-id", vault_id]
    for password_file in args.vault_password_file or []:
        opts.connect += ["--vault-password-file", password_file]
    if args.become:
        opts.connect.append("--become")
    if args.forks is not None:
        if args.forks < 1:
            raise PassthroughError(f"--forks must be >= 1, got {args.forks}")
        opts.connect += ["--forks", str(args.forks)]
    if opts.check:
        opts.select.append("--check")
    for flag, value in (("--tags", args.tags), ("--skip-tags", args.skip_tags)):
        if value:
            opts.select += [flag, value]
    if args.verbose:
        opts.connect.append("-" + "v" * args.verbose)
    _take_rest(opts, rest)
    return opts


def _take_rest(opts: Options, rest: list[str]) -> None:
    """The options after ``--``: refused, understood (check mode, a limit, prompts) or passed on as is."""
    i = 0
    while i < len(rest):
        word = rest[i]
        flag, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        refused = _REFUSED.get(flag) or (_REFUSED["-i"] if word.startswith("-i") and len(word) > 2 else None)
        if refused:
            raise PassthroughError(f"`-- {word}`: disklab sets this itself; use {refused}")
        takes_value = flag in ("-e", "--extra-vars", "-l", "--limit")
        value = inline if eq else (rest[i + 1] if takes_value and i + 1 < len(rest) else None)
        if takes_value and value is None:
            raise PassthroughError(f"`-- {word}` needs a value")
        step = 1 if eq or not takes_value else 2
        if flag in ("-e", "--extra-vars"):
            variables, path = parse_extra(value, where=f"-- {flag}")
            opts.extravars.update(variables)
            if path:
                opts.connect += ["-e", f"@{path}"]
        elif flag in ("-l", "--limit"):
            if opts.limit:
                raise PassthroughError(f"`-- {flag} {value}` and disklab's --limit {opts.limit}: give one")
            opts.limit = value
        elif flag in ("-C", "--check"):
            opts.check = True
            opts.select.append("--check")
        elif flag in ("-K", "--ask-become-pass"):
            opts.ask_become_pass = True
        elif flag in ("-J", "--ask-vault-pass", "--ask-vault-password"):
            opts.ask_vault_pass = True
        else:
            opts.connect.append(word)
        i += step
    if opts.ask_become_pass:
        opts.connect.append("--ask-become-pass")
        opts.extravars.setdefault("lab_run_check_become", True)  # the preflight tries the password first
    if opts.ask_vault_pass:
        opts.connect.append("--ask-vault-pass")
