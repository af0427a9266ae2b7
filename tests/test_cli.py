"""The command line's own surface: --help, --reports on either side of the command, shell completion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PUBLIC = ("run", "audit", "doctor", "report", "compare", "history", "runs", "export", "powercut")
INTERNAL = ("playbook-begin", "playbook-store")  # the playbooks' own, under plain ansible-playbook


def _disklab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "disklab.cli", *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


@pytest.mark.heavy
def test_help_lists_the_users_commands_and_every_exit_status():
    proc = _disklab("--help")
    assert proc.returncode == 0, proc.stderr
    assert "{" + ",".join(PUBLIC) + "}" in proc.stdout
    for name in INTERNAL:
        assert name not in proc.stdout
    statuses = proc.stdout.split("exit status:\n", 1)[1]
    for code in ("0", "1", "2", "130"):
        assert f"\n  {code} " in "\n" + statuses, statuses


@pytest.mark.heavy
def test_the_internal_commands_still_parse_for_the_playbooks():
    for name in INTERNAL:
        proc = _disklab(name, "--help")
        assert proc.returncode == 0 and "plain ansible-playbook" in proc.stdout, proc.stderr


@pytest.mark.heavy
def test_reports_is_taken_after_the_command_and_wins_there(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    proc = _disklab("report", "--reports", str(after))
    assert proc.returncode == 2 and f"no reports directory at {after}:" in proc.stderr, proc.stderr
    proc = _disklab("--reports", str(before), "report", "--reports", str(after))
    assert proc.returncode == 2 and f"no reports directory at {after}:" in proc.stderr, proc.stderr
    proc = _disklab("--reports", str(before), "report")
    assert proc.returncode == 2 and f"no reports directory at {before}:" in proc.stderr, proc.stderr
    after.mkdir()
    proc = _disklab("export", "--reports", str(after))
    assert proc.returncode == 0, proc.stderr  # an empty reports directory exports a header only


def test_bash_completion_is_valid_bash_and_offers_the_users_commands(tmp_path):
    proc = _disklab("--print-completion", "bash")
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "disklab.bash"
    script.write_text(proc.stdout)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    # what bash offers after `disklab <TAB>`, from the script's own completion function
    probe = (
        f'source {script}; COMP_WORDS=(disklab ""); COMP_CWORD=1; _shtab_disklab; echo "${{COMPREPLY[*]}}"'
    )
    offered = subprocess.run(["bash", "-c", probe], capture_output=True, text=True).stdout.split()
    assert set(PUBLIC) <= set(offered) and not set(INTERNAL) & set(offered), offered


@pytest.mark.heavy
def test_history_runs_and_compare_baseline_say_their_arguments_in_help():
    for name, words in (
        ("history", ("HOST", "FIGURE", "--json")),
        ("runs", ("HOST", "--json")),
        ("compare", ("--baseline RUN_ID",)),
    ):
        proc = _disklab(name, "--help")
        assert proc.returncode == 0 and all(w in proc.stdout for w in words), proc.stdout
        assert "--reports" in proc.stdout  # taken after the command too
