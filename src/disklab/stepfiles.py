"""The step lists Ansible reads, written from the registry, and what a new step still lacks.

Ansible reads tags and argument specs as YAML before any Python runs, so the step names and sizes stand in
YAML too. This module writes them there from :data:`disklab_host.registry.STEPS`, the one place a step is
named by hand (``python -m disklab.stepfiles``, ``make steps``):

- the step tags (``measure`` and one tag per step) of the tasks that run a step, in ``playbooks/site.yml``
  and ``roles/lab_run/tasks/main.yml``: in every flow list of tags holding ``measure``, what follows it
  (the tags before it, such as ``provision``, are kept);
- ``roles/lab_run/defaults/main.yml``: ``lab_run_steps``, and each size's null line under its comment;
- ``roles/lab_run/meta/argument_specs.yml``: the choices of ``lab_run_steps``, and one option per size.

:func:`problems` names what differs: each of those files that ``make steps`` would change, and each file
written by hand for a step (its module, report section, template, schema, and its row in
docs/experiments.md) that is missing, or left from a step the registry no longer has.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from disklab_host import registry
from disklab_host.registry import Step

SITE = "playbooks/site.yml"
LAB_RUN_TASKS = "roles/lab_run/tasks/main.yml"
DEFAULTS = "roles/lab_run/defaults/main.yml"
SPECS = "roles/lab_run/meta/argument_specs.yml"
EXPERIMENTS_DOC = "docs/experiments.md"
WRITTEN = (SITE, LAB_RUN_TASKS, DEFAULTS, SPECS)
# What each step has, written by hand: (path, what it is); module is left out for a step whose module is
# not disklab_host.steps.NAME.
BY_HAND = (
    ("src/disklab_host/steps/{}.py", "module with run(cfg, workdir)"),
    ("src/disklab/sections/{}.py", "report section with build()"),
    ("src/disklab/templates/sections/{}.md.j2", "report template"),
    ("src/disklab/schema/experiments/{}.schema.json", "JSON Schema"),
)
# The modules of src/disklab/sections that are no step's section: what several sections read.
SECTION_HELPERS = ("evidence", "layers")
WIDTH = 120  # a generated flow list wraps under its first item past this column
TODO = "`make steps` writes it from disklab_host.registry"

# A flow list of tags, `tags: [a, b]` or `tags: &name [a, b]`, on one line or more.
_TAGS = re.compile(r"(?P<head>tags: (?:&\w+ )?\[)(?P<body>[^\]]*)\]")
_TAG_NAME = re.compile(r"[\w.-]+")  # a tag, a step or a size: a list item that is anything else is no item
_STEPS_DEFAULT = re.compile(r"^(?P<head>lab_run_steps: \[)(?P<body>[^\]]*)\]", re.M)
_STEPS_CHOICES = re.compile(
    r"^      lab_run_steps:\n(?:        .*\n)*?        (?P<head>choices: \[)(?P<body>[^\]]*)\]", re.M
)
# The defaults' sizes follow this line to the end of the file; the specs' follow their mark up to the next
# entry point (a line indented less than an option).
DEFAULTS_SIZES_AFTER = "# null keeps the profile's value; set one to override it for this host or group.\n"
SPECS_SIZES_MARK = "      # Sizes, one option each: written by `make steps` from disklab_host.registry.\n"
_SPECS_SIZES_END = re.compile(r"^ {0,5}\S", re.M)
_SPEC_SIZE = re.compile(r"^      lab_run_(\w+):$", re.M)
_DEFAULT_SIZE = re.compile(r"^lab_run_(\w+): null$", re.M)
# docs/experiments.md's table of steps: its header, its rows (up to the first line that is no row).
DOC_TABLE = "| step | what it measures |\n"
_DOC_TABLE_END = re.compile(r"^(?!\|)", re.M)
_DOC_ROW = re.compile(r"^\| `(\w+)` \|", re.M)


def _items(body: str) -> list[str]:
    return [item.strip() for item in body.split(",") if item.strip()]


def _flow(head: str, items: list[str], column: int) -> str:
    """``head`` (ending in ``[``) and ``items`` as a YAML flow list that starts at ``column``, wrapped under
    its first item where a line would pass WIDTH."""
    lines, line, at = [], head + items[0], column  # at: the column the line starts at
    for item in items[1:]:
        if at + len(line) + len(", ") + len(item) + len("]") > WIDTH:
            lines.append(line + ",")
            line, at = " " * (column + len(head)) + item, 0
        else:
            line += ", " + item
    return "\n".join([*lines, line + "]"])


def _column(text: str, at: int) -> int:
    return at - (text.rfind("\n", 0, at) + 1)


def _swap(pattern: re.Pattern, text: str, items) -> str:
    """``text`` with each flow list ``pattern`` finds given ``items(old_items)`` (None: left as it is)."""

    def one(m: re.Match) -> str:
        old = _items(m["body"])
        bad = next((item for item in old if not _TAG_NAME.fullmatch(item)), None)
        if bad is not None:
            raise ValueError(
                f"line {_line(text, m.start())}: a list that does not close where it should (it runs on "
                f"into {bad[:60]!r}): fix its ] by hand, then run make steps again"
            )
        new = items(old)
        if new is None:
            return m[0]
        start = m.start("head")
        return m[0][: start - m.start()] + _flow(m["head"], new, _column(text, start))

    return pattern.sub(one, text)


def _step_tags(names: list[str]):
    def items(old: list[str]) -> list[str] | None:
        return old[: old.index("measure") + 1] + names if "measure" in old else None

    return items


def _defaults(text: str, steps: tuple[Step, ...]) -> str:
    names = [s.name for s in steps]
    text = _swap(_STEPS_DEFAULT, text, lambda old: names)
    head, mark, _ = text.partition(DEFAULTS_SIZES_AFTER)
    if not mark:
        raise ValueError(f"has no line {DEFAULTS_SIZES_AFTER.strip()!r}, after which the sizes go")
    lines = []
    for step in steps:
        lines += [f"# {step.name}"] if step.sizes else []
        for size in step.sizes:
            lines += [f"# {size.describe()}", f"lab_run_{size.name}: null"]
    return head + mark + "".join(line + "\n" for line in lines)


def _specs(text: str, steps: tuple[Step, ...]) -> str:
    names = [s.name for s in steps]
    text = _swap(_STEPS_CHOICES, text, lambda old: names)
    start = text.find(SPECS_SIZES_MARK)
    if start < 0:
        raise ValueError(f"has no line {SPECS_SIZES_MARK.strip()!r}, after which the sizes go")
    start += len(SPECS_SIZES_MARK)
    end = _SPECS_SIZES_END.search(text, start)
    end = end.start() if end else len(text)
    options = []
    for size in (z for s in steps for z in s.sizes):
        description = json.dumps(f"Size (null keeps the profile's): {size.describe()}", ensure_ascii=False)
        options.append(
            f"      lab_run_{size.name}:\n        type: int\n        required: false\n"
            f"        description: {description}\n"
        )
    return text[:start] + "".join(options) + text[end:]


def render(root: Path, steps: tuple[Step, ...] | None = None) -> dict[str, str]:
    """Each file of :data:`WRITTEN` under ``root`` as ``make steps`` writes it from ``steps`` (the
    registry's by default). Raises ValueError naming a file whose mark for the sizes is gone, or a list
    of tags or steps that does not close where it should (nothing is then written)."""
    steps = registry.STEPS if steps is None else steps
    names = [s.name for s in steps]
    text = {path: (root / path).read_text(encoding="utf-8") for path in WRITTEN}
    make = {
        SITE: lambda: _swap(_TAGS, text[SITE], _step_tags(names)),
        LAB_RUN_TASKS: lambda: _swap(_TAGS, text[LAB_RUN_TASKS], _step_tags(names)),
        DEFAULTS: lambda: _defaults(text[DEFAULTS], steps),
        SPECS: lambda: _specs(text[SPECS], steps),
    }
    out = {}
    for path, written in make.items():
        try:
            out[path] = written()
        except ValueError as e:
            raise ValueError(f"{path} {e}") from None
    return out


def write(root: Path, steps: tuple[Step, ...] | None = None) -> list[str]:
    """Rewrite the files of :data:`WRITTEN` that differ from :func:`render`; the paths rewritten."""
    changed = []
    for path, text in render(root, steps).items():
        if (root / path).read_text(encoding="utf-8") != text:
            (root / path).write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def _differ(where: str, what: str, have: list[str], want: list[str]) -> list[str]:
    """One line for each way ``have`` differs from ``want``: names missing, names extra, or the order."""
    out = []
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    if missing:
        out.append(f"{where}, {what}: missing {missing}")
    if extra:
        out.append(f"{where}, {what}: {extra} not in the registry")
    if not missing and not extra and have != want:
        out.append(f"{where}, {what}: not in the registry's order {want}")
    return out


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def _written_problems(root: Path, steps: tuple[Step, ...]) -> list[str]:
    names = [s.name for s in steps]
    sizes = [z.name for s in steps for z in s.sizes]
    out = []
    for path, want in render(root, steps).items():
        text = (root / path).read_text(encoding="utf-8")
        if text == want:
            continue
        found = []
        if path in (SITE, LAB_RUN_TASKS):
            for m in _TAGS.finditer(text):
                old = _items(m["body"])
                if "measure" in old:
                    found += _differ(
                        f"{path} line {_line(text, m.start())}",
                        "the step tags",
                        old[old.index("measure") + 1 :],
                        names,
                    )
        else:
            steps_list = _STEPS_DEFAULT if path == DEFAULTS else _STEPS_CHOICES
            for m in steps_list.finditer(text):
                found += _differ(
                    f"{path} line {_line(text, m.start('head'))}", "lab_run_steps", _items(m["body"]), names
                )
            pattern, after = (
                (_DEFAULT_SIZE, DEFAULTS_SIZES_AFTER) if path == DEFAULTS else (_SPEC_SIZE, SPECS_SIZES_MARK)
            )
            block = text[text.find(after) :] if after in text else ""
            found += _differ(path, "the sizes", pattern.findall(block), sizes)
        out += [f"{line} ({TODO})" for line in found] or [f"{path}: differs from the registry ({TODO})"]
    return out


def _by_hand_problems(root: Path, steps: tuple[Step, ...]) -> list[str]:
    names = [s.name for s in steps]
    out = []
    for step in steps:
        for pattern, what in BY_HAND:
            if (
                pattern.startswith("src/disklab_host/steps/")
                and step.module != f"disklab_host.steps.{step.name}"
            ):
                continue
            path = root / pattern.format(step.name)
            package = path.with_suffix("") / "__init__.py"  # a big section is a package (sections/load/)
            if not (path.is_file() or (pattern.startswith("src/disklab/sections/") and package.is_file())):
                out.append(f"{pattern.format(step.name)}: missing (step {step.name!r}'s {what})")
    leftovers = (
        ("src/disklab_host/steps", "*.py", ".py"),
        ("src/disklab/templates/sections", "[!_]*.md.j2", ".md.j2"),
        ("src/disklab/schema/experiments", "*.schema.json", ".schema.json"),
    )
    for folder, glob, suffix in leftovers:
        for path in sorted((root / folder).glob(glob)):
            name = path.name.removesuffix(suffix)
            if name != "__init__" and name not in names:
                out.append(f"{folder}/{path.name}: step {name!r} is not in the registry")
    sections = root / "src/disklab/sections"
    for path in sorted(sections.iterdir()):
        name = path.name.removesuffix(".py")
        is_section = path.suffix == ".py" or (path / "__init__.py").is_file()
        if is_section and name not in (*names, "__init__", *SECTION_HELPERS):
            out.append(
                f"src/disklab/sections/{path.name}: step {name!r} is not in the registry (a module every "
                "section reads belongs in stepfiles.SECTION_HELPERS)"
            )
    doc = (root / EXPERIMENTS_DOC).read_text(encoding="utf-8")
    table = doc.find(DOC_TABLE)
    if table < 0:
        return [*out, f"{EXPERIMENTS_DOC}: no table of steps (a line {DOC_TABLE.strip()!r})"]
    rows = _DOC_TABLE_END.split(doc[table + len(DOC_TABLE) :], maxsplit=1)[0]
    out += _differ(EXPERIMENTS_DOC, "the table of steps", _DOC_ROW.findall(rows), names)
    return out


def problems(root: Path, steps: tuple[Step, ...] | None = None) -> list[str]:
    """One line for each place under ``root`` that disagrees with ``steps`` (the registry's by default),
    naming the file: what ``make steps`` would write differently, then what a step lacks by hand."""
    steps = registry.STEPS if steps is None else steps
    return _written_problems(root, steps) + _by_hand_problems(root, steps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m disklab.stepfiles", description=__doc__.splitlines()[0])
    p.add_argument("root", nargs="?", default=".", type=Path, help="the checkout (default: .)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    args = p.parse_args(argv)
    try:
        if not args.check:
            for path in write(args.root):
                print(f"wrote {path}")
        found = problems(args.root)
    except ValueError as e:  # a file the generator cannot read safely: nothing was written
        print(f"make steps refused: {e}", file=sys.stderr)
        return 2
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
