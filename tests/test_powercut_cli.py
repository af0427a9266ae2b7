"""`disklab powercut FILE.py:FUNC` on a user recipe file: exit statuses 0, 1 and 2, and no torch import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from disklab import powercut_cli
from disklab_host.powercut import record as pc_record

USER = Path(__file__).resolve().parent / "fixtures" / "powercut" / "user_saves.py"
needs_strace = pytest.mark.skipif(pc_record.find_strace() is None, reason="strace is not installed")


@needs_strace
@pytest.mark.slow
def test_safe_user_function_exits_0(capfd, tmp_path):
    out_json = tmp_path / "result.json"
    assert powercut_cli.main([f"{USER}:good_save", "--json", str(out_json)]) == 0
    out = capfd.readouterr().out
    assert "verdict under power-cut: safe" in out
    result = json.loads(out_json.read_text())
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
        (f"{USER}:raising_save", "save function raised RuntimeError: disk quota exceeded"),
        ("no_colon_here.py", "must be FILE.py:FUNC"),
    ],
)
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
def test_save_that_does_not_leave_its_checkpoint_exits_2(capfd, argv, message):
    assert powercut_cli.main(argv) == 2
    captured = capfd.readouterr()
    err = captured.err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert "verdict" not in captured.out  # no verdict table for a save that does not work uncrashed


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
