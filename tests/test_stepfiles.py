"""One list of steps: the registry. The YAML that lists steps is written from it (make steps), the files a
step needs by hand are checked against it, and a dummy step is added by touching exactly the files
docs/contributing.md lists; leaving one out is named."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from disklab import stepfiles
from disklab_host import registry
from test_registry import role_disagreements

DUMMY_ENTRY = """    Step(
        name="dummy",
        title="writes a few bytes",
        sizes=(Size("dummy_bytes", 10, 20, "bytes", "bytes the dummy step writes"),),
        needs_torch=False,
        platforms=PLATFORMS,
        needed_bytes=lambda s: s["dummy_bytes"],
    ),
"""
MAKE_STEPS = "make steps"


def contributing_list() -> dict[str, str]:
    """docs/contributing.md's list of the files a new step touches: path (NAME as written) -> who writes it
    ("you" or "make steps"), from the first fenced block of its "Adding a step" section."""
    text = (REPO / "docs" / "contributing.md").read_text()
    section = text[text.index("## Adding a step\n") :]
    section = section[: section.index("\n## ")]
    block = re.search(r"^```\n(.*?)^```$", section, re.M | re.S)
    assert block, "docs/contributing.md: 'Adding a step' has no fenced list of files"
    listed = {}
    for line in block[1].splitlines():
        path, who = re.match(r"(\S+)\s+(you|make steps):", line).groups()
        listed[path] = who
    return listed


def _copy_checkout(to: Path) -> None:
    """The checkout's files that list or hold steps, under ``to``, in the same places."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in ("src", "roles", "playbooks", "docs"):
        shutil.copytree(REPO / folder, to / folder, ignore=ignore, symlinks=True)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _write_registry_entry(root: Path) -> tuple:
    """The dummy's entry written into the copy's registry.py, and the steps it makes (that same text,
    evaluated in the registry's namespace)."""
    path = root / "src/disklab_host/registry.py"
    text = path.read_text()
    end = "\n)\n\nBY_NAME"
    assert text.count(end) == 1, "registry.py: STEPS no longer ends as the dummy test expects"
    path.write_text(text.replace(end, "\n" + DUMMY_ENTRY.rstrip("\n") + end))
    return (*registry.STEPS, eval(DUMMY_ENTRY.strip().rstrip(","), vars(registry)))  # the text written above


def _add_doc_row(text: str) -> str:
    """The dummy's row after the table's last row (the dummy runs last)."""
    rows = list(re.finditer(r"^\| `\w+` \|.*\n", text, re.M))
    return text[: rows[-1].end()] + "| `dummy` | a few bytes |\n" + text[rows[-1].end() :]


# How the dummy step writes each file docs/contributing.md says a new step writes by hand.
BY_HAND = {
    "src/disklab_host/steps/NAME.py": lambda p: p.write_text(
        "def run(cfg, workdir):\n    return {'status': 'ok', 'written_bytes': cfg['sizes']['dummy_bytes']}\n"
    ),
    "src/disklab/schema/experiments/NAME.schema.json": lambda p: p.write_text(
        json.dumps(
            {"type": "object", "required": ["status"], "properties": {"written_bytes": {"type": "integer"}}}
        )
    ),
    "src/disklab/sections/NAME.py": lambda p: p.write_text(
        "def build(section, results, plot_dir):\n    return {'bytes': section['written_bytes']}\n"
    ),
    "src/disklab/templates/sections/NAME.md.j2": lambda p: p.write_text(
        '## A dummy step\n\n{% include "sections/_run.md.j2" %}\nIt wrote {{ x.bytes }} bytes.\n'
    ),
    "docs/experiments.md": lambda p: p.write_text(_add_doc_row(p.read_text())),
}


def _add_dummy(root: Path, leave_out: str | None = None) -> tuple:
    """Add the dummy step under ``root`` as docs/contributing.md says, leaving out the file ``leave_out``
    (or `make steps`); the steps, with the dummy."""
    steps = registry.STEPS
    listed = contributing_list()
    for path, who in listed.items():
        if who == "you" and path != leave_out:
            if path == "src/disklab_host/registry.py":
                steps = _write_registry_entry(root)
            else:
                assert path in BY_HAND, (
                    f"docs/contributing.md lists {path}, which the dummy step does not write"
                )
                BY_HAND[path](root / path.replace("NAME", "dummy"))
    if leave_out != MAKE_STEPS:
        stepfiles.write(root, steps)
    return steps


def test_the_checkout_agrees_with_the_registry_and_make_steps_changes_nothing():
    assert stepfiles.problems(REPO) == []
    assert all((REPO / path).read_text() == text for path, text in stepfiles.render(REPO).items())


def test_a_new_step_touches_only_the_files_docs_contributing_names(tmp_path):
    _copy_checkout(tmp_path)
    before = _files(tmp_path)
    steps = _add_dummy(tmp_path)
    assert steps[-1].name == "dummy" and steps[-1].sizes[0].name == "dummy_bytes"
    assert stepfiles.problems(tmp_path, steps) == []
    after = _files(tmp_path)
    touched = {p for p in after if before.get(p) != after[p]} | (set(before) - set(after))
    assert touched == {p.replace("NAME", "dummy") for p in contributing_list()}
    # what make steps wrote is what Ansible reads: the role agrees, and --tags dummy reaches every phase
    assert role_disagreements(steps, tmp_path / "roles" / "lab_run") == []
    site = yaml.safe_load((tmp_path / stepfiles.SITE).read_text())
    tagged = [t for t in site[1]["tasks"][0]["block"] if "measure" in (t.get("tags") or [])]
    assert len(tagged) == 3 and all("dummy" in t["tags"] for t in tagged), tagged  # provision, audit, lab
    role_tasks = yaml.safe_load((tmp_path / stepfiles.LAB_RUN_TASKS).read_text())
    assert all(t["tags"][-2:] == ["pickle_safety", "dummy"] for t in role_tasks)


@pytest.mark.parametrize(
    "left_out",
    [
        "src/disklab/schema/experiments/NAME.schema.json",
        "src/disklab/templates/sections/NAME.md.j2",
        "docs/experiments.md",
        MAKE_STEPS,
    ],
)
def test_a_file_left_out_of_a_new_step_is_named(tmp_path, left_out):
    _copy_checkout(tmp_path)
    steps = _add_dummy(tmp_path, leave_out=left_out)
    found = stepfiles.problems(tmp_path, steps)
    if left_out == MAKE_STEPS:
        named = {line.split(" ", 1)[0].rstrip(":,") for line in found}
        assert named == set(stepfiles.WRITTEN), found
        assert all("missing ['dummy" in line and "make steps" in line for line in found), found
    else:
        assert found and all(line.startswith(left_out.replace("NAME", "dummy")) for line in found), found
        assert "dummy" in found[0]


def test_a_step_the_registry_no_longer_has_is_named_in_every_file():
    steps = tuple(s for s in registry.STEPS if s.name != "big_write")
    found = stepfiles.problems(REPO, steps)
    left = (
        "src/disklab_host/steps/big_write.py",
        "src/disklab/sections/big_write.py",
        stepfiles.EXPERIMENTS_DOC,
    )
    for path in (*stepfiles.WRITTEN, *left):
        assert any(line.startswith(path) and "big_write" in line for line in found), (path, found)
    assert not [line for line in found if "evidence" in line or "layers.py" in line]  # helpers, no sections


def test_a_tags_list_that_does_not_close_is_refused_and_nothing_is_written(tmp_path, capsys):
    """A list missing its ] would run on to the next one: make steps would rewrite the tasks between."""
    _copy_checkout(tmp_path)
    site = tmp_path / stepfiles.SITE
    text = site.read_text()
    at = text.index("pickle_safety]")
    site.write_text(text[:at] + "pickle_safety" + text[at + len("pickle_safety]") :])
    before = _files(tmp_path)
    assert stepfiles.main([str(tmp_path)]) == 2
    assert _files(tmp_path) == before
    err = capsys.readouterr().err
    assert err.startswith(f"make steps refused: {stepfiles.SITE} line ") and "fix its ] by hand" in err
    assert stepfiles.main([str(tmp_path), "--check"]) == 2
