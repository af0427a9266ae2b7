"""The ansible-playbook options `disklab run` and `disklab audit` pass on, and the ones they refuse.

Every ansible-playbook option reaches Ansible: the common ones by name
(``-K``, ``--vault-id``, ``--vault-password-file``, ``--private-key``,
``-e @file``, ``-l`` ...), any other after ``--``. Refused, with one line naming
both sides, is only what would contradict what disklab itself must set: the
inventory (disklab's ``-i``), the variables that tie a run to its reports
(:data:`RESERVED`), a second ``--limit``, and the options that stop Ansible
from running the play (``--list-hosts``, ``--syntax-check`` ...) or make it
wait for a person (``--step``). Each ``-e`` reaches ansible-playbook as it was
given, in its place, and disklab reads it with Ansible's own parser
(:func:`parse_extra`), so ``disklab run -e X`` and ``ansible-playbook -e X``
mean the same variables. The prompts Ansible would show (``-K``,
``--ask-vault-pass``) are asked here, before any host is touched, and their
answers handed to ansible-runner.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping
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
    # The user's -e values go to ansible-playbook as they were given, in their order (in ``connect``);
    # ``variables`` is what Ansible makes of them (parse_extra), read for the refusals and the defaults below.
    variables: dict = field(default_factory=dict)
    extravars: dict = field(default_factory=dict)  # disklab's own additions, given after the user's -e
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
    """One ``-e`` value as ansible-playbook reads it: (its variables, the word to pass on, or None).

    Ansible's own code, in the order of ``ansible.utils.vars.load_extra_vars``
    (which reads only ansible-playbook's parsed command line, so it cannot be
    called here): ``@FILE`` is the DataLoader's YAML or JSON file (passed on as
    ``@`` and its absolute path; a vault-encrypted file is passed on unread),
    ``{...}`` and ``[...]`` are the DataLoader's YAML, and anything else is
    ``parse_kv``'s ``NAME=VALUE NAME2=VALUE2`` (every value a string, as
    ansible-playbook gives it: the roles' argument specs then give each its
    type). An empty value is nothing, as there. Refused: what ansible-playbook
    refuses, a word that is not ``NAME=VALUE`` (Ansible would make it a
    variable named ``_raw_params``), and the names in :data:`RESERVED`.
    """
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.splitter import parse_kv
    from ansible.parsing.vault import is_encrypted_file

    if not value:
        return {}, None
    loader = DataLoader()
    word = value
    try:
        if value.startswith("@"):
            path = Path(loader.path_dwim(value[1:]))
            if not path.is_file():
                raise PassthroughError(f"{where} {value}: {path} does not exist")
            word = f"@{path}"
            with open(path, "rb") as f:
                if is_encrypted_file(f):
                    return {}, word  # its names are read by ansible-playbook, with the vault's password
            doc = loader.load_from_file(str(path))
        elif value[0] in "/.":
            raise PassthroughError(f"{where} {value}: a file of variables is given as @{value}")
        elif value[0] in "[{":
            doc = loader.load(value)
        else:
            doc = parse_kv(value)
            if "_raw_params" in doc:
                raise PassthroughError(
                    f"{where} expects NAME=VALUE, @FILE or a JSON mapping, got {value!r} "
                    f"({doc['_raw_params']!r} is not NAME=VALUE)"
                )
            _refuse_bracketed(doc, where)
    except AnsibleError as exc:
        raise PassthroughError(f"{where} {value}: {_problem(exc)}") from None
    if not isinstance(doc, Mapping):
        # the type itself, not Ansible's tagged one (_AnsibleTaggedList)
        plain = next((t for t in (bool, int, float, str, list) if isinstance(doc, t)), type(doc))
        what = "nothing" if doc is None else f"a {plain.__name__}"
        raise PassthroughError(f"{where} {value}: holds {what}, not a mapping of variables")
    _refuse_reserved(doc, f"{where} {value}")
    return dict(doc), word


# The prefixes of the settings the roles declare (a list or mapping among them is typed by the role's spec).
_OWN_PREFIXES = ("lab_run_", "lab_venv_", "host_audit_", "together_", "disklab_")


def _refuse_bracketed(doc: Mapping, where: str) -> None:
    """A setting of disklab's given as NAME=[a,b] or NAME={k: v}: parse_kv makes it the string '[a,b]', which
    the role's argument spec would refuse with "Got no match for: [a, b]" (or split into '[a' and 'b]'). Say
    so here, with the form that gives a list."""
    import json

    for name, text in doc.items():
        if not (name.startswith(_OWN_PREFIXES) and isinstance(text, str)):
            continue
        text = text.strip()
        if (text[:1], text[-1:]) in (("[", "]"), ("{", "}")):
            try:
                import yaml

                typed = yaml.safe_load(text)
            except yaml.YAMLError:
                typed = None
            example = json.dumps({name: typed}) if isinstance(typed, (list, dict)) else f'{{"{name}": ...}}'
            raise PassthroughError(
                f"{where} {name}={text}: Ansible reads NAME=VALUE as a string, so {name} would be the text "
                f"{text!r}, not a {'list' if text[0] == '[' else 'mapping'}; give it as JSON: -e '{example}'"
            )


def _problem(exc) -> str:
    """An Ansible error's first line (its message; the lines after it quote the input)."""
    return (getattr(exc, "message", None) or str(exc)).strip().splitlines()[0]


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
        _take_extra(opts, value, "-e")
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


def _take_extra(opts: Options, value: str, where: str) -> None:
    """One -e value: checked (parse_extra), merged into ``opts.variables`` as Ansible merges them, and
    passed on to ansible-playbook in its place."""
    from ansible.utils.vars import combine_vars

    variables, word = parse_extra(value, where)
    opts.variables = combine_vars(opts.variables, variables)
    if word is not None:
        opts.connect += ["-e", word]


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
            _take_extra(opts, value, f"-- {flag}")
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
        if "lab_run_check_become" not in opts.variables:  # the preflight tries the password first
            opts.extravars["lab_run_check_become"] = True
    if opts.ask_vault_pass:
        opts.connect.append("--ask-vault-pass")
