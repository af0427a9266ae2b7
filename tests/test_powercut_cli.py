"""`disklab powercut FILE.py:FUNC` on a user recipe file: exit statuses 0, 1, 2 and 130, and no torch import.

Every refusal is checked for its one line, its exit status, and that the temp
directories and the save's processes are gone (TMPDIR is a private directory).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from disklab import powercut_cli, schemas
from disklab_host.common.child import child_env
from disklab_host.powercut import record as pc_record

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "powercut"
USER = FIXTURES / "user_saves.py"
needs_strace = pytest.mark.skipif(pc_record.find_strace() is None, reason="strace is not installed")


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """TMPDIR for this test alone (this process and the check it starts), to see what is left there."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that name ``text`` (the save's child names its directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and int(pid) != os.getpid():
            found.append(cmdline)
    return found


@pytest.fixture(scope="module")
def runs() -> dict:
    """The module's `disklab powercut` runs by argument list: tests that check other lines of the same run
    (the same save, recorded for real under strace: seconds each) share one run (:func:`_main_once`)."""
    return {}


def _main_once(runs: dict, capfd, argv: list[str]) -> tuple[int, str, str]:
    """``powercut_cli.main(argv)``'s exit status, stdout and stderr; run once per ``argv`` in the module."""
    key = tuple(argv)
    if key not in runs:
        rc = powercut_cli.main(argv)
        captured = capfd.readouterr()
        runs[key] = (rc, captured.out, captured.err)
    return runs[key]


def _assert_no_verdict(captured, message: str, private_tmp: Path) -> None:
    err = captured.err.strip()
    assert message in err, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "verdict" not in captured.out
    assert list(private_tmp.iterdir()) == []  # every temp directory removed
    assert _processes_mentioning(str(private_tmp)) == []  # and the save's processes gone


@needs_strace
@pytest.mark.slow
def test_safe_user_function_exits_0(capfd, tmp_path):
    out_json = tmp_path / "result.json"
    assert powercut_cli.main([f"{USER}:good_save", "--json", str(out_json)]) == 0
    out = capfd.readouterr().out
    assert "verdict under power-cut: safe" in out
    result = json.loads(out_json.read_text())
    assert (result["kind"], result["schema_version"]) == ("powercut", 1)
    assert schemas.first_error("powercut", result) is None
    assert result["models"]["power_cut"]["counts"]["corrupt"] == 0
    assert result["models"]["power_cut"]["counts"]["new_ok"] > 0


@needs_strace
@pytest.mark.slow
def test_unsafe_user_function_exits_1_and_names_the_first_unsafe_call(capfd):
    assert powercut_cli.main([f"{USER}:bad_save", "--model", "process-kill"]) == 1
    out = capfd.readouterr().out
    assert "verdict under process-kill: unsafe" in out
    assert "first unsafe point (process-kill): after call 0: openat(" in out and "O_TRUNC" in out


@pytest.mark.parametrize(
    "spec, message",
    [
        (f"{USER.parent}/nope.py:save", "nope.py: no such file"),
        (f"{USER}:missing_fn", "has no function 'missing_fn'"),
        (f"{USER}:NOT_A_FUNCTION", "has no function 'NOT_A_FUNCTION'"),
        (
            f"{USER}:raising_save",
            "save function (step 1, the old checkpoint) raised RuntimeError: disk quota",
        ),
        ("no_colon_here.py", "must be FILE.py:FUNC"),
    ],
)
@pytest.mark.heavy
def test_bad_input_exits_2_with_one_line(capfd, spec, message):
    if "raising" in spec and pc_record.find_strace() is None:
        pytest.skip("strace is not installed")
    assert powercut_cli.main([spec]) == 2
    err = capfd.readouterr().err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_missing_strace_exits_2(capfd, monkeypatch, workbench):
    monkeypatch.setenv("PATH", str(workbench))
    assert powercut_cli.main([f"{USER}:good_save"]) == 2
    assert "strace is not installed" in capfd.readouterr().err


def test_python_without_torch_exits_2(capfd, workbench):
    if pc_record.find_strace() is None:
        pytest.skip("strace is not installed")
    assert powercut_cli.main([f"{USER}:good_save", "--python", "/usr/bin/false"]) == 2
    assert "cannot import torch" in capfd.readouterr().err


@pytest.fixture
def python_without_torch(tmp_path) -> Path:
    """A real Python with no torch: a venv of this interpreter's Python, without pip or any package."""
    venv = tmp_path / "notorch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    assert subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0
    return python


@needs_strace
def test_a_python_that_runs_the_check_but_has_no_torch_exits_2(capfd, private_tmp, python_without_torch):
    """No probe imports torch first: the check runs, the first save's child cannot import torch, and the
    controller says so in its one line, as for a --python that is no Python at all."""
    assert powercut_cli.main([f"{USER}:good_save", "--python", str(python_without_torch)]) == 2
    message = f"--python {python_without_torch} cannot import torch and safetensors"
    _assert_no_verdict(capfd.readouterr(), message, private_tmp)


@needs_strace
def test_host_side_check_without_torch_says_so_in_one_line(private_tmp, python_without_torch):
    cmd = [str(python_without_torch), "-m", "disklab_host.powercut.simulate", "check", f"{USER}:good_save"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), check=False)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert err == (
        f"disklab powercut: this Python ({python_without_torch}) cannot import torch and safetensors: "
        "ModuleNotFoundError: No module named 'torch'"
    )
    assert list(private_tmp.iterdir()) == [] and _processes_mentioning(str(private_tmp)) == []


@needs_strace
@pytest.mark.heavy
def test_without_torch_here_the_check_runs_with_the_local_lab_venv(tmp_path, python_without_torch):
    """The controller's own Python lacks torch: ./.lab/venv/bin/python runs the check (it reaches the
    save's import, which names the missing function); without that Python, one line says what to pass."""
    lab_python = tmp_path / ".lab" / "venv" / "bin" / "python"
    lab_python.parent.mkdir(parents=True)
    lab_python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')  # this venv's Python, with torch
    lab_python.chmod(0o755)
    code = "import sys; from disklab import powercut_cli; sys.exit(powercut_cli.main(sys.argv[1:]))"
    cmd = [str(python_without_torch), "-c", code, f"{USER}:missing_fn"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=tmp_path, check=False)
    assert (
        proc.returncode == 2
        and proc.stderr.strip() == f"disklab powercut: {USER} has no function 'missing_fn'"
    )
    lab_python.unlink()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "disklab powercut: no Python with torch found: pass --python PATH (the lab venv's python)"
    )


def test_controller_does_not_import_torch():
    code = "import sys; from disklab import powercut_cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("before_spec", [True, False])
def test_help_prints_usage_and_exits_0(capfd, flag, before_spec):
    argv = [flag, f"{USER}:good_save"] if before_spec else [f"{USER}:good_save", flag]
    assert powercut_cli.main(argv) == 0
    out = capfd.readouterr().out
    assert out.startswith("usage: disklab powercut") and "exit status:" in out and "--format" in out


def test_options_before_and_after_the_spec_parse_the_same():
    before = powercut_cli.parser().parse_args(
        ["--model", "process-kill", "--format", "safetensors", "m.py:f"]
    )
    after = powercut_cli.parser().parse_args(["m.py:f", "--model", "process-kill", "--format", "safetensors"])
    assert before == after
    assert (before.spec, before.model, before.format) == ("m.py:f", "process-kill", "safetensors")


def test_options_before_the_spec_reach_the_checks(capfd):
    if pc_record.find_strace() is None:
        pytest.skip("strace is not installed")
    assert powercut_cli.main(["--state-mib", "6", f"{USER}:good_save"]) == 2
    assert "--state-mib must be a positive multiple of 4, got 6" in capfd.readouterr().err


@needs_strace
@pytest.mark.parametrize(
    "argv, message",
    [
        # writes nothing: the first save already leaves no checkpoint
        ([f"{USER}:noop_save"], "first save (step 1, the old checkpoint) returned but"),
        ([f"{USER}:noop_save"], "ckpt.pt does not hold it (no file there; its directory holds nothing)"),
        # writes elsewhere: the message names what it did write
        ([f"{USER}:other_path_save"], "does not hold it (no file there; its directory holds model.pt)"),
        # torch file declared safetensors, and the reverse: suggest the other --format
        (["--format", "safetensors", f"{USER}:bad_save"], "loads as torch; pass --format torch"),
        ([f"{USER}:safetensors_save"], "loads as safetensors; pass --format safetensors"),
    ],
)
@pytest.mark.heavy
def test_save_that_does_not_leave_its_checkpoint_exits_2(capfd, runs, argv, message):
    rc, out, err = _main_once(runs, capfd, argv)  # the two lines of noop_save's refusal: one run
    assert rc == 2
    err = err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert "verdict" not in out  # no verdict table for a save that does not work uncrashed


@needs_strace
@pytest.mark.slow
@pytest.mark.parametrize("model", ["process-kill", "power-cut"])
def test_second_save_that_leaves_the_old_checkpoint_exits_2(capfd, model):
    # save_once writes step 1, then returns at once for step 2: without the after-return
    # check, process-kill would call this rolled_back (exit 0) and the log says "0 recorded calls".
    assert powercut_cli.main([f"{USER}:save_once", "--model", model]) == 2
    err = capfd.readouterr().err.strip()
    assert "the save returned but" in err and "does not hold the new checkpoint, step 2" in err
    assert err.endswith("(it holds the old checkpoint, step 1)") and len(err.splitlines()) == 1


@pytest.mark.parametrize("prefix", [[], ["--reports", "/tmp/somewhere"]])
def test_disklab_powercut_hands_every_argument_to_its_own_parser(prefix):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "disklab.cli", *prefix, "powercut", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: disklab powercut")


STEP1 = "the save function (step 1, the old checkpoint)"


@needs_strace
@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, message",
    [
        # an exit of any status, even 0, is not "safe"; os._exit(1) is not "unsafe"
        ([f"{USER}:exit_zero_save"], f"{STEP1} called sys.exit(0)"),
        ([f"{USER}:os_exit_save"], f"{STEP1} ended its process with exit status 1 before returning"),
        ([f"{USER}:interrupted_save"], f"{STEP1} raised KeyboardInterrupt"),
        ([f"{USER}:killed_save"], f"{STEP1} was killed by SIGKILL before it returned"),
        (  # it sleeps from its call on (the --timeout-s clock starts there), so half a second shows it
            [f"{USER}:hanging_save", "--timeout-s", "0.5"],
            f"{STEP1} did not return within --timeout-s 0.5; it was",
        ),
        # step 1 of hang_second_save saves 4 MiB under strace within its --timeout-s: 2 s leaves room
        (
            [f"{USER}:hang_second_save", "--timeout-s", "2"],
            "the save function (step 2, traced) did not return within --timeout-s 2; it was killed",
        ),
        # the byte limit: live (the trace passes its bound), exact (the recording), one write past -s
        (
            [f"{USER}:many_writes_save", "--max-write-mib", "8"],
            f"{STEP1} was stopped: its trace grew past 40.00 MiB, the bound for --max-write-mib 8",
        ),
        ([f"{USER}:little_more_save", "--max-write-mib", "8"], "more than --max-write-mib 8 MiB; raise"),
        (
            [f"{USER}:one_big_write_save", "--max-write-mib", "8"],
            f"{STEP1} made a single write longer than --max-write-mib 8 MiB allows",
        ),
        ([f"{FIXTURES}/exits_on_import.py:save"], "exits_on_import.py: importing it called sys.exit(0)"),
    ],
)
def test_save_that_does_not_return_gets_no_verdict(capfd, private_tmp, argv, message):
    start = time.monotonic()
    assert powercut_cli.main(argv) == 2
    _assert_no_verdict(capfd.readouterr(), message, private_tmp)
    if "--timeout-s" in argv:  # bounded: start-up (torch) and two saves, not an hour's sleep
        assert time.monotonic() - start < 2 * 300 + 60


@needs_strace
@pytest.mark.slow
@pytest.mark.parametrize("existed", [False, True])
def test_save_that_writes_outside_its_directory_is_refused_and_its_file_removed(
    capfd, private_tmp, tmp_path, monkeypatch, existed
):
    outside = tmp_path / "elsewhere" / "copy.pt"
    outside.parent.mkdir()
    if existed:  # a file that was there before the check is never removed
        outside.write_bytes(b"the user's own file")
    monkeypatch.setenv("DISKLAB_TEST_OUTSIDE", str(outside))
    assert powercut_cli.main([f"{USER}:outside_save"]) == 2
    fate = "left in place: it was there before the check" if existed else "removed"
    message = f"{STEP1} wrote outside its checkpoint directory: {outside} ({fate})"
    _assert_no_verdict(capfd.readouterr(), message, private_tmp)
    assert outside.exists() == existed


@pytest.mark.parametrize(
    "name, text, message",
    [
        (
            "save.txt",
            "def save(sd, path):\n    pass\n",
            "save.txt: not a Python file (the save function must be",
        ),
        (
            "save.py",
            "def save(sd, path)\n    pass\n",
            "save.py: cannot be imported: SyntaxError: expected ':' (line 1)",
        ),
    ],
)
def test_file_that_is_not_importable_python_exits_2(capfd, private_tmp, tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    assert powercut_cli.main([f"{tmp_path / name}:save"]) == 2
    _assert_no_verdict(capfd.readouterr(), message, private_tmp)


@needs_strace
@pytest.mark.heavy
def test_host_side_check_refuses_a_non_python_file_in_one_line(private_tmp):
    """The host-side CLI (the lab's zipapp path) checks the file itself: no traceback, exit 2."""
    cmd = [sys.executable, "-m", "disklab_host.powercut.simulate", "check", f"{FIXTURES}/not_python.txt:save"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().endswith(
        "not_python.txt: not a Python file (the save function must be FILE.py:FUNC)"
    )
    assert len(proc.stderr.strip().splitlines()) == 1 and list(private_tmp.iterdir()) == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--timeout-s", "0"], "--timeout-s must be > 0, got 0"),
        (["--max-write-mib", "4"], "--max-write-mib must be more than --state-mib 4 (a save writes the"),
        (["--state-mib", "16", "--max-write-mib", "12"], "--max-write-mib must be more than --state-mib 16"),
    ],
)
def test_bad_limits_exit_2_before_any_work(capfd, private_tmp, argv, message):
    if pc_record.find_strace() is None:
        pytest.skip("strace is not installed")
    assert powercut_cli.main([f"{USER}:good_save", *argv]) == 2
    _assert_no_verdict(capfd.readouterr(), message, private_tmp)


@needs_strace
@pytest.mark.slow
def test_ctrl_c_of_disklab_powercut_stops_the_save_and_removes_its_temp_dirs(private_tmp):
    """SIGINT to the foreground process group (what Ctrl-C does) while the traced save hangs."""
    cmd = [sys.executable, "-m", "disklab.cli", "powercut", f"{USER}:hang_second_save", "--timeout-s", "600"]
    proc = subprocess.Popen(
        cmd,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 400
    while not list(private_tmp.glob("*/trace.txt")):  # step 2 is being traced
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip() == "disklab powercut: interrupted; no verdict (the save was stopped)"
    assert "verdict under" not in out
    assert list(private_tmp.iterdir()) == []
    assert _processes_mentioning(str(private_tmp)) == []


@needs_strace
@pytest.mark.slow
def test_strace_string_limit_follows_max_write_mib(capfd, private_tmp):
    """One 10 MiB write: more than the old -s (2 x 4 MiB + 1 MiB), within --max-write-mib 16's -s."""
    assert powercut_cli.main([f"{USER}:ten_mib_write_save", "--max-write-mib", "16"]) == 0
    captured = capfd.readouterr()
    assert "verdict under power-cut: safe" in captured.out, captured.err
    assert list(private_tmp.iterdir()) == []


def test_controller_limits_are_the_host_sides():
    from disklab_host.powercut import simulate

    assert powercut_cli.DEFAULT_TIMEOUT_S == simulate.DEFAULT_TIMEOUT_S
    assert powercut_cli.DEFAULT_MAX_WRITE_MIB == simulate.DEFAULT_MAX_WRITE_MIB
    assert powercut_cli.DEFAULT_MAX_FILES == simulate.DEFAULT_MAX_FILES
    assert powercut_cli.INTERRUPTED == simulate.INTERRUPTED


@needs_strace
@pytest.mark.slow
def test_a_save_past_the_analysis_bounds_is_refused_naming_what_it_did_and_the_option(capfd, private_tmp):
    """--max-files bounds the analysis (every crash state holds every file), --analysis-timeout-s the whole
    check, --max-memory-mib its address space (RLIMIT_AS): each refusal is one line naming the option."""
    assert powercut_cli.main([f"{USER}:many_files_save", "--max-files", "50"]) == 2
    _assert_no_verdict(capfd.readouterr(), "the save left 61 files in its directory (", private_tmp)
    assert powercut_cli.main([f"{USER}:good_save", "--analysis-timeout-s", "1"]) == 2
    _assert_no_verdict(capfd.readouterr(), "the check took longer than --analysis-timeout-s 1", private_tmp)
    assert powercut_cli.main([f"{USER}:writer_left_running_save"]) == 2
    _assert_no_verdict(
        capfd.readouterr(), "the save returned while a thread or child process of it", private_tmp
    )
    assert powercut_cli.main([f"{USER}:chdir_save"]) == 2
    said = "the save changed its working directory (chdir('.') = 0, the checkpoint's own directory): "
    _assert_no_verdict(capfd.readouterr(), said, private_tmp)  # a path, not strace's \x2f\x74 escapes
    for argv, said in ((["--max-files", "0"], "--max-files must be > 0"),
                       (["--max-memory-mib", "-1"], "--max-memory-mib must be > 0")):  # fmt: skip
        assert powercut_cli.main([f"{USER}:good_save", *argv]) == 2
        assert said in capfd.readouterr().err


@needs_strace
@pytest.mark.slow
def test_the_analysis_timeout_kills_the_traced_save_too(capfd, private_tmp):
    """The traced save runs in a session of its own (strace and the save): the --analysis-timeout-s kill
    must reach it too, here while it sleeps in its call (or still imports torch), long before its own
    --timeout-s."""
    argv = [f"{USER}:hanging_save", "--timeout-s", "600", "--analysis-timeout-s", "3"]
    assert powercut_cli.main(argv) == 2
    _assert_no_verdict(capfd.readouterr(), "the check took longer than --analysis-timeout-s 3", private_tmp)


def test_the_check_runs_with_its_address_space_bounded():
    """The bound is the kernel's (RLIMIT_AS in the check's process), not a number the check reports."""
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"
    proc = subprocess.run([sys.executable, "-c", code], preexec_fn=lambda: powercut_cli._child_setup(1234),
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert int(proc.stdout) == 1234 * 1024 * 1024
    blow = "b = bytearray(2 * 1024**3)"
    proc = subprocess.run([sys.executable, "-c", blow], preexec_fn=lambda: powercut_cli._child_setup(1024),
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode != 0 and "MemoryError" in proc.stderr
