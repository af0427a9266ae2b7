"""Preflight refusals on the real filesystem: each names its setting, before any work."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from disklab_host import preflight
from disklab_host.common import result as result_line


def _cfg(workbench, **kw):
    cfg = {
        "profile": "quick",
        "steps": ["fsync_bench", "big_write"],
        "workbench": str(workbench),
        "settings": {},
    }
    cfg.update(kw)
    return cfg


def test_accepts_a_writable_workbench_and_reports_the_space(workbench):
    verdict = preflight.preflight(_cfg(workbench))
    assert verdict["ok"] is True
    assert verdict["needed_bytes"] == 64 * 2**20  # big_write_mib of the quick profile
    assert verdict["free_bytes"] > verdict["needed_bytes"]


def test_refuses_an_unknown_profile(workbench):
    with pytest.raises(ValueError, match="lab_run_profile must be one of"):
        preflight.preflight(_cfg(workbench, profile="fast"))


@pytest.mark.parametrize("value", [0, -3])
def test_refuses_zero_and_negative_sizes_naming_the_setting(workbench, value):
    with pytest.raises(ValueError, match=rf"lab_run_fsync_blocks must be an integer > 0, got {value}"):
        preflight.preflight(_cfg(workbench, settings={"fsync_blocks": value}))


def test_refuses_a_missing_workbench_unless_creation_is_allowed(tmp_path):
    missing = tmp_path / "nope" / "wb"
    with pytest.raises(preflight.Refused, match="lab_run_workbench .* does not exist"):
        preflight.preflight(_cfg(missing))
    assert not missing.exists()
    preflight.preflight(_cfg(missing, workbench_create=True))
    assert missing.is_dir()


@pytest.mark.root
def test_refuses_a_read_only_workbench(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=True)
    try:
        with pytest.raises(preflight.Refused, match="is not writable"):
            preflight.preflight(_cfg(ro))
    finally:
        subprocess.run(["umount", str(ro)], check=True)


@pytest.mark.root
def test_refuses_too_little_free_disk_with_the_numbers(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    try:
        with pytest.raises(preflight.Refused) as info:
            preflight.preflight(_cfg(small))
    finally:
        subprocess.run(["umount", str(small)], check=True)
    msg = str(info.value)
    assert "the quick profile needs 64 MiB" in msg and "MiB free" in msg and "lab_run_workbench" in msg
    free_mib = int(msg.split("MiB free")[0].rsplit(",", 1)[-1].strip().replace(",", ""))
    assert free_mib <= 8


def test_check_mode_measures_a_workbench_not_made_yet_through_its_nearest_parent(tmp_path):
    """--check runs the disk check too (issue 26, finding 4): on the parent, creating nothing."""
    missing = tmp_path / "a" / "b" / "wb"
    verdict = preflight.preflight(_cfg(missing, workbench_create=True), dry_run=True)
    assert not (tmp_path / "a").exists()
    assert verdict["would_create_workbench"] is True and verdict["measured_path"] == str(tmp_path)
    assert verdict["needed_bytes"] == 64 * 2**20 and verdict["free_bytes"] > 0
    with pytest.raises(preflight.Refused, match="does not exist"):  # not allowed: refused in both modes
        preflight.preflight(_cfg(missing), dry_run=True)


def test_check_mode_refuses_a_workbench_that_cannot_be_created_as_the_real_run_does(tmp_path):
    (tmp_path / "file").write_text("x")
    cfg = _cfg(tmp_path / "file" / "wb", workbench_create=True)
    with pytest.raises(preflight.Refused) as dry:
        preflight.preflight(cfg, dry_run=True)
    with pytest.raises(preflight.Refused) as real:
        preflight.preflight(cfg)
    assert str(dry.value) == str(real.value) and "cannot create lab_run_workbench" in str(dry.value)


def test_cli_prints_json_and_exits_2_when_refused(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(_cfg(tmp_path / "missing")))
    proc = subprocess.run(
        [sys.executable, "-m", "disklab_host.preflight", "--config", str(cfg)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    out = result_line.parse(proc.stdout)
    assert out["ok"] is False and "lab_run_workbench" in out["error"]


def test_cli_refuses_the_retired_big_tensors_setting_in_one_line_before_any_work(tmp_path):
    wb = tmp_path / "not-made-yet"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(_cfg(wb, workbench_create=True, settings={"load_big_tensors": 8})))
    proc = subprocess.run(
        [sys.executable, "-m", "disklab_host.preflight", "--config", str(cfg)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and not wb.exists()  # refused before the workbench was made
    out = result_line.parse(proc.stdout)
    assert out["ok"] is False and "set lab_run_load_big_mib" in out["error"]
    assert proc.stderr.count("\n") == 1 and "lab_run_load_big_tensors is no longer a setting" in proc.stderr


def test_a_step_whose_setting_is_off_needs_no_disk(workbench):
    """realfs runs only with lab_run_realfs: true; off (the default), preflight counts nothing for it."""
    steps = ["realfs", "write_buffering"]
    off = preflight.preflight(_cfg(workbench, steps=steps))
    assert off["per_step_bytes"]["realfs"] == 0
    on = preflight.preflight(_cfg(workbench, steps=steps, settings={"realfs": True}))
    assert on["per_step_bytes"]["realfs"] >= 320 * 2**20
    assert on["needed_bytes"] > off["needed_bytes"]


def _run_zipapp(pyz, *args):
    """The host package as Ansible's script module runs it: the shipped zipapp, the host's Python."""
    return subprocess.run([sys.executable, str(pyz), "preflight", *args], capture_output=True, text=True)


def test_stage_to_copies_the_running_zipapp_only_after_the_checks_pass(tmp_path, workbench):
    """The lab_run role's one preflight run: check, then stage itself as LAB_ROOT/disklab_host.pyz."""
    from disklab import ship

    sent = tmp_path / "sent" / "whatever-name.pyz"  # the script module's temporary copy, any name
    ship.build(sent)
    root = tmp_path / "fresh" / "lab"  # nothing made in advance: neither the root nor its parent
    missing = json.dumps(_cfg(tmp_path / "missing"))
    refused = _run_zipapp(sent, "--config-json", missing, "--stage-to", str(root))
    assert refused.returncode == 2 and "lab_run_workbench" in result_line.parse(refused.stdout)["error"]
    assert not (tmp_path / "fresh").exists()  # a refused host gets nothing

    ok = _run_zipapp(sent, "--config-json", json.dumps(_cfg(workbench)), "--apply", "--stage-to", str(root))
    assert ok.returncode == 0, ok.stderr
    staged = root / "disklab_host.pyz"
    assert result_line.parse(ok.stdout)["stage"] == {"path": str(staged), "staged": True}
    assert staged.read_bytes() == sent.read_bytes()
    assert oct(root.stat().st_mode & 0o777) == "0o755" and oct(staged.stat().st_mode & 0o777) == "0o644"

    again = _run_zipapp(sent, "--config-json", json.dumps(_cfg(workbench)), "--stage-to", str(root))
    assert result_line.parse(again.stdout)["stage"]["staged"] is False  # the same bytes: left as they are

    dry = _run_zipapp(sent, "--config-json", json.dumps(_cfg(workbench)), "--check-mode", "--stage-to", "x")
    assert dry.returncode == 2 and "--check-mode creates nothing" in dry.stderr


def test_stage_to_from_a_source_tree_is_refused_naming_the_setting(tmp_path, workbench):
    proc = subprocess.run(
        [sys.executable, "-m", "disklab_host", "preflight", "--config-json", json.dumps(_cfg(workbench)),
         "--stage-to", str(tmp_path / "lab")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "lab_run_root" in result_line.parse(proc.stdout)["error"] and "not from a zipapp" in proc.stderr
    assert not (tmp_path / "lab").exists()


def _special(tmp_path, kind: str) -> tuple[str, str]:
    """A real FIFO, socket or device for lab_run_load_model (or a model directory holding one), or a path
    or repo id that names nothing on this host: the setting, and what the refusal calls it."""
    if kind == "missing":
        path = tmp_path / "nowhere" / "model.safetensors"
        return str(path), f"{path}: no such file or directory on this host, and not an ORG/NAME repo id"
    if kind == "repo":  # HF_HUB_CACHE is an empty directory (the test sets it)
        return "acme/never-fetched", "acme/never-fetched: not in the Hugging Face cache on this host"
    if kind == "device":
        return "/dev/zero", "/dev/zero is a character device"
    if kind == "socket":
        path = tmp_path / "s"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()  # the socket file stays
        return str(path), f"{path} is a socket"
    fifo = tmp_path / "model" / "model.safetensors" if kind == "dir" else tmp_path / "model.safetensors"
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    if kind == "dir":
        (tmp_path / "model" / "config.json").write_text("{}")
        return str(fifo.parent), f"the directory {fifo.parent} holds model.safetensors, a FIFO (named pipe)"
    return str(fifo), f"{fifo} is a FIFO (named pipe)"


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "dir", "missing", "repo"])
def test_a_model_that_is_missing_or_not_regular_files_is_refused_in_one_line_before_any_work(
    tmp_path, kind, monkeypatch
):
    """Before: a FIFO hung the load step at its open(), /dev/zero ran the lab with the step not measured,
    and a path or repo id naming nothing failed the load step only after the steps before it had run.
    Now the preflight refuses, naming the setting, the path and what it is."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / "hub").mkdir()
    setting, said = _special(tmp_path, kind)
    wb = tmp_path / "not-made-yet"
    cfg = _cfg(wb, workbench_create=True, steps=["load"], settings={"load_model": setting})
    proc = subprocess.run(
        [sys.executable, "-m", "disklab_host.preflight", "--config-json", json.dumps(cfg)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and not wb.exists(), proc.stdout + proc.stderr  # refused before the workbench
    assert proc.stderr.count("\n") == 1 and f"lab_run_load_model: {said}" in proc.stderr, proc.stderr
    assert result_line.parse(proc.stdout)["error"].startswith(f"lab_run_load_model: {said}")
    # the load step's own check refuses it the same way, without opening it (a child: a FIFO's open blocks)
    check = "import sys; from disklab_host.loadlab import usermodel; usermodel.resolve(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-c", check, setting], capture_output=True, text=True, timeout=60)
    assert f"UserModelError: lab_run_load_model: {said}" in proc.stderr, proc.stderr
    # a run without the load step does not read the setting
    preflight.preflight(_cfg(wb, workbench_create=True, settings={"load_model": setting}))
