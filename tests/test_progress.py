"""Live progress: the lab runner's status file, the poll's output, and the controller's view of each host."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from disklab import progress as progress_mod
from disklab.progress import Progress
from disklab.runner import EventTracker, parse_status
from disklab_host import lab
from disklab_host.common import result as result_line

LAB_TASK = "Run the storage lab experiments on the host"


class Clock:
    """A controller clock the test moves by hand (time.monotonic in disklab.progress)."""

    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _poll(host: str, host_now: float, status: dict, kind: str = "runner_retry") -> dict:
    """An ansible-runner event for one attempt of the lab poll, as the raw task prints it (over a tty)."""
    stdout = f"disklab-status {host_now:.0f} {json.dumps(status)}\r\ndisklab-job running\r\n"
    return {"event": kind, "event_data": {"host": host, "task": LAB_TASK, "res": {"stdout": stdout}}}


def _start(host: str, task: str = LAB_TASK) -> dict:
    return {"event": "runner_on_start", "event_data": {"host": host, "task": task}}


def test_each_hosts_step_place_and_a_counting_elapsed_time_come_from_its_polls(monkeypatch, capsys):
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    prog = Progress(console=Console(stderr=True, force_terminal=False), live=False)
    tracker = EventTracker(prog)
    for host in ("host0", "host1"):
        tracker(_start(host))
    running = {
        "state": "running",
        "step": "crash",
        "step_index": 4,
        "steps": 7,
        "step_started_unix": 5000.0,
        "done": [["write_buffering", "ok", 1.5], ["fsync_bench", "ok", 2.0], ["big_write", "ok", 3.0]],
    }
    tracker(_poll("host0", 5012.0, running))  # the host's clock says 12 s into the step
    tracker(_poll("host1", 7000.0, {**running, "step": "load", "step_index": 6, "step_started_unix": 6999.0}))
    rows = prog.rows
    assert Progress.what(rows["host0"]) == "crash (4/7)" and Progress.what(rows["host1"]) == "load (6/7)"
    assert Progress.elapsed_s(rows["host0"]) == 12.0
    clock.t += 30  # no poll for 30 s: the elapsed time keeps counting on the controller's clock
    assert Progress.elapsed_s(rows["host0"]) == 42.0 and Progress.elapsed_s(rows["host1"]) == 31.0
    tracker(_poll("host0", 5050.0, running))  # the same step again: no new line, elapsed from the host
    assert Progress.elapsed_s(rows["host0"]) == 50.0
    table = prog.table()
    assert [str(cell) for cell in table.columns[1]._cells] == ["crash (4/7)", "load (6/7)"]
    assert [c._cells for c in table.columns][2] == ["50 s", "31 s"]
    finished = {"state": "finished", "steps": 7, "done": [*running["done"], ["crash", "ok", 40.0]]}
    tracker(_poll("host0", 5060.0, finished, kind="runner_on_ok"))
    lines = capsys.readouterr().err.splitlines()
    step_lines = [ln for ln in lines if ": step " in ln]
    assert len(step_lines) == 2  # one per step change, per host
    assert step_lines[0].endswith(
        f"host0: running: {LAB_TASK}: step crash (4/7), 12 s in; big_write ok in 3.0 s"
    )
    assert "host1: running: " in step_lines[1] and "step load (6/7), 1 s in" in step_lines[1]
    assert lines[-1].endswith(
        "host0: lab finished: write_buffering ok 1.5 s, fsync_bench ok 2.0 s, "
        "big_write ok 3.0 s, crash ok 40.0 s"
    )


def test_a_host_name_with_a_newline_or_markup_makes_no_line_and_no_style_of_its_own(capsys):
    """Issue 40, item 8: ``"a\\nlocalhost"`` printed ``localhost: ...`` as a line of its own; ``[bold]``
    was rich markup in the live table. Both are shown as the name holds them (disklab.console)."""
    prog = Progress(console=Console(file=sys.stderr, force_terminal=False), live=False)
    tracker = EventTracker(prog)
    for host in ("a\nlocalhost", "[bold red]x[/]\x1b[2J"):
        tracker(_start(host, "Gathering Facts\rfake: ok"))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and not any(line.split("] ", 1)[1].startswith("localhost") for line in lines)
    assert lines[0].endswith("] a\\nlocalhost: running: Gathering Facts\\rfake: ok")
    assert lines[1].endswith("] [bold red]x[/]\\x1b[2J: running: Gathering Facts\\rfake: ok")
    shown = Console(file=io.StringIO(), width=200, record=True)
    shown.print(prog.table())
    table = shown.export_text()
    assert "│ [bold red]x[/]\\x1b[2J │" in table and "│ a\\nlocalhost " in table  # no style taken from it


def test_a_poll_without_a_status_and_a_failed_host_change_nothing(monkeypatch):
    monkeypatch.setattr(progress_mod.time, "monotonic", Clock())
    prog = Progress(console=Console(stderr=True, force_terminal=False), live=False)
    tracker = EventTracker(prog)
    tracker(_start("h"))
    assert parse_status("disklab-status 12 \r\ndisklab-job running") is None  # no status file yet
    assert parse_status("Shared connection to h closed.\r\n") is None
    tracker(
        {
            "event": "runner_retry",
            "event_data": {"host": "h", "task": LAB_TASK, "res": {"stdout": "disklab-status 12 \n"}},
        }
    )
    assert prog.rows["h"].step is None
    tracker({"event": "runner_on_failed", "event_data": {"host": "h", "task": LAB_TASK, "res": {"msg": "x"}}})
    tracker(
        _poll(
            "h",
            10.0,
            {"state": "running", "step": "crash", "step_index": 1, "steps": 1, "step_started_unix": 1.0},
        )
    )
    assert prog.rows["h"].state == "failed" and prog.rows["h"].step is None


def test_the_lab_runner_given_its_config_inline_makes_the_run_directory_and_keeps_config_json(tmp_path):
    """--config-json (what the lab_run role passes): the runner makes its directory and file."""
    wb = tmp_path / "root" / "workbench"
    wb.mkdir(parents=True)
    cfg = {"run_id": "R2", "host": "h", "profile": "quick", "workbench": str(wb),
           "lab_root": str(tmp_path / "root"), "steps": ["write_buffering"],
           "settings": {"write_buffering_calls": 200}, "system": "Linux"}  # fmt: skip
    (tmp_path / "host.json").write_text("{}")
    run_dir = tmp_path / "root" / "runs" / "R2"
    assert not run_dir.exists()
    argv = ["--config-json", json.dumps(cfg), "--facts", str(tmp_path / "host.json"),
            "--out", str(run_dir / "results.json")]  # fmt: skip
    lab_cmd = [sys.executable, "-m", "disklab_host", "lab"]
    proc = subprocess.run([*lab_cmd, *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run_dir / "config.json").read_text()) == cfg
    results = json.loads((run_dir / "results.json").read_text())
    assert results["experiments"]["write_buffering"]["status"] == "ok"
    assert json.loads((run_dir / lab.STATUS_NAME).read_text())["state"] == "finished"
    bad = ["--config-json", "{not json", "--facts", "x", "--out", str(tmp_path / "o" / "r.json")]
    proc = subprocess.run([*lab_cmd, *bad], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--config-json is not JSON" in proc.stderr
    assert not (tmp_path / "o").exists()  # refused before anything is written


def test_the_lab_runner_keeps_a_status_file_with_each_step_and_ends_it_finished(tmp_path):
    """disklab_host.lab for real (one fast step): the file the lab_run role polls, one line of JSON."""
    wb = tmp_path / "root" / "workbench"
    wb.mkdir(parents=True)
    cfg = {
        "run_id": "R1",
        "host": "h",
        "profile": "quick",
        "workbench": str(wb),
        "lab_root": str(tmp_path / "root"),
        "steps": ["write_buffering"],
        "settings": {"write_buffering_calls": 200},
        "system": "Linux",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "host.json").write_text("{}")
    run_dir = tmp_path / "run"
    argv = [
        "--config",
        str(tmp_path / "config.json"),
        "--facts",
        str(tmp_path / "host.json"),
        "--out",
        str(run_dir / "results.json"),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "disklab_host", "lab", *argv], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    text = (run_dir / lab.STATUS_NAME).read_text()
    assert text.count("\n") == 1  # one line: the poll prints it as is
    status = json.loads(text)
    assert status["state"] == "finished" and status["run_id"] == "R1" and status["steps"] == 1
    assert [d[:2] for d in status["done"]] == [["write_buffering", "ok"]] and status["done"][0][2] > 0
    results = json.loads((run_dir / "results.json").read_text())
    assert status["done"][0][2] == round(results["experiments"]["write_buffering"]["step_wall_s"], 3)


def test_write_status_records_the_running_step_atomically(tmp_path):
    path = tmp_path / "status.json"
    lab.write_status(
        path,
        state="running",
        run_id="R",
        step="crash",
        step_index=3,
        steps=7,
        step_started_unix=100.0,
        done=[],
    )
    doc = json.loads(path.read_text())
    assert (doc["step"], doc["step_index"], doc["steps"], doc["state"]) == ("crash", 3, 7, "running")
    assert isinstance(doc["pid"], int) and doc["updated_unix"] > 0
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temp file left behind
    host_now, polled = parse_status(f"disklab-status 130 {path.read_text()}disklab-job running\n")
    assert (host_now, polled["step"]) == (130.0, "crash")


def _collection_filters() -> dict:
    """The collection's filters (plugins/filter/result.py) by their full names, as Ansible finds them."""
    from conftest import collection_plugin

    module = collection_plugin("filter.result")
    return {f"disklab.lab.{name}": f for name, f in module.FilterModule().filters().items()}


def _role_sh(tmp_path, **ctx):
    """The lab_run role's poll command and its paths, rendered as Ansible renders them (quote, match,
    and the result-line rule that reads the start's pid: search, regex_replace, from_json)."""
    import re

    import jinja2
    import jinja2.nativetypes
    import yaml

    role = Path(__file__).resolve().parents[1] / "roles/lab_run"
    tasks = yaml.safe_load((role / "tasks/main.yml").read_text())
    role_vars = yaml.safe_load((role / "vars/main.yml").read_text())
    poll = next(t for t in tasks if t["name"] == LAB_TASK)
    env = jinja2.Environment()
    env.filters["quote"] = lambda s: "'" + str(s).replace("'", "'\"'\"'") + "'"
    env.tests["match"] = lambda s, pattern: re.match(pattern, s) is not None
    env.tests["search"] = lambda s, pattern: re.search(pattern, s) is not None
    env.filters["regex_replace"] = lambda s, pattern, repl: re.sub(pattern, repl, s)
    env.filters["from_json"] = json.loads
    env.filters.update(_collection_filters())  # disklab.lab.result and its kin, the role's result-line rule
    ctx = {"__lab_run_poll_wait_s": 1, "disklab_run_id": "run 1", **ctx}
    for name in ("__lab_run_poll_ticks_per_s", "__lab_run_sh_root", "__lab_run_sh_dir",
                 "__lab_run_sh_python"):  # fmt: skip
        value = role_vars[name]
        ctx[name] = env.from_string(value).render(**ctx) if isinstance(value, str) else value
    ctx["__lab_run_out"] = ctx["__lab_run_start"]  # the poll's own vars: the start's registered result
    native = jinja2.nativetypes.NativeEnvironment()  # the result is an object, as Ansible's template gives it
    native.filters.update(env.filters)
    native.tests.update(env.tests)
    for name in ("__lab_run_result_line", "__lab_run_result"):
        ctx[name] = native.from_string(role_vars[name]).render(**ctx)
    for name in ("__status", "__seen", "__exit", "__pid", "__running"):
        ctx[name] = env.from_string(poll["vars"][name]).render(**ctx)
    return env.from_string(poll["ansible.builtin.raw"]).render(**ctx), ctx


def test_a_lab_root_under_home_is_left_to_the_hosts_shell_to_expand(tmp_path):
    """lab_run_root's default is ~/.disklab: a quoted ~ is not expanded, so the raw tasks give it to $HOME."""
    home = tmp_path / "a home"
    _, ctx = _role_sh(tmp_path, lab_run_root="~/lab root", lab_run_python="~/lab root/venv/bin/python",
                      __lab_run_start={"stdout_lines": []})  # fmt: skip
    words = subprocess.run(
        ["sh", "-c", f"printf '%s\\n' {ctx['__lab_run_sh_dir']} {ctx['__lab_run_sh_python']}"],
        capture_output=True, text=True, check=True, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    ).stdout.splitlines()  # fmt: skip
    assert words == [f"{home}/lab root/runs/run 1", f"{home}/lab root/venv/bin/python"]
    _, plain = _role_sh(tmp_path, lab_run_root="/srv/it's", lab_run_python="/usr/bin/python3",
                        __lab_run_start={"stdout_lines": []})  # fmt: skip
    assert subprocess.run(["sh", "-c", f"printf '%s' {plain['__lab_run_sh_dir']}"], capture_output=True,
                          text=True, check=True).stdout == "/srv/it's/runs/run 1"  # fmt: skip


@pytest.mark.heavy
def test_the_poll_reads_the_status_file_and_the_runners_exit_record_with_plain_sh(tmp_path):
    """The lab_run role's poll command, run by sh as Ansible's raw module runs it, against real files."""
    runner = subprocess.Popen(["sleep", "60"])  # stands in for the detached runner: alive, then gone
    try:
        # as SSH's tty gives it: a login banner, a warning merged from stderr, then the result line
        started = {"stdout_lines": ["Welcome to the lab host", "warning: old python", "",
                                    "disklab-result " + json.dumps({"pid": runner.pid})]}  # fmt: skip
        command, ctx = _role_sh(
            tmp_path, lab_run_root=str(tmp_path / "lab root"), lab_run_python=sys.executable,
            __lab_run_start=started,
        )  # fmt: skip
        assert f"sleep {1 / ctx['__lab_run_poll_ticks_per_s']} " in command  # looks more than once a second
        assert f"kill -0 {runner.pid} " in command  # the pid comes from the start's result line
        run_dir = tmp_path / "lab root" / "runs" / "run 1"
        run_dir.mkdir(parents=True)

        def sh() -> str:
            cmd = ["sh", "-c", command]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout

        lab.write_status(run_dir / lab.STATUS_NAME, state="running", step="crash", step_index=1, steps=2,
                         step_started_unix=1.0, done=[])  # fmt: skip
        first = sh()  # the first attempt prints the status at once
        assert parse_status(first)[1]["step"] == "crash" and "disklab-job running" in first
        again = sh()  # nothing changed: it waits out its (1 s) wait, and prints the same status
        assert parse_status(again)[1]["step"] == "crash" and "disklab-job running" in again
        (run_dir / "exit.json").write_text(json.dumps({"rc": 0, "stdout": "a\nb", "stderr": ""}, indent=2))
        last = sh()
        assert "disklab-job ended" in last
        assert result_line.parse(last) == {"rc": 0, "stdout": "a\nb", "stderr": ""}  # one line, escapes kept
        (run_dir / "exit.json").unlink()
        runner.kill()
        runner.wait()
        killed = sh()  # gone without an exit record (SIGKILL, an OOM kill): said, not waited on for a week
        assert "disklab-job ended" in killed
        assert f"pid {runner.pid}) ended without writing exit.json" in result_line.parse(killed)["msg"]
    finally:
        runner.kill()


def test_a_refusal_over_ssh_is_named_by_the_refusal_not_by_sshs_closing_line(monkeypatch):
    """Over SSH a command runs on a pty: its stderr lands in stdout, and stderr holds only ssh's own line."""
    monkeypatch.setattr(progress_mod.time, "monotonic", Clock())
    tracker = EventTracker(Progress(console=Console(stderr=True, force_terminal=False), live=False))
    refusal = (
        "disklab preflight refused: not enough free disk on the workbench '/srv/dlab/workbench' "
        "(lab_run_workbench, or disklab_workbench): the quick profile needs 384 MiB, 252 MiB free."
    )
    res = {  # the shape of a real refusal on a test-fleet host (tests/fleet), stdout shortened
        "msg": "non-zero return code",
        "rc": 2,
        "stdout": '{"ok": false, "error": "not enough free disk"}\r\n' + refusal + "\r\n",
        "stderr": "Shared connection to 10.213.9.10 closed.\r\n",
    }
    tracker({"event": "runner_on_failed", "event_data": {"host": "h", "task": "preflight", "res": res}})
    assert tracker.hosts["h"].message == refusal
