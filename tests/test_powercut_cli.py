"""`disklab powercut FILE.py:FUNC` on a user recipe file: exit statuses 0, 1 and 2, and no torch import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import pc_record
from disklab import powercut_cli

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
