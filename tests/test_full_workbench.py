"""The workbench the figures come from: a full one is named as such, and its own facts travel with them.

Issue 26, findings 4 (a full disk is not named; --check passed what the real run refused) and 3 (figures
read against the facts of another filesystem). Real small filesystems: a loop-mounted ext4 that a step
fills, and a tmpfs as lab_run_workbench beside the audited disklab_workbench.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from disklab import report, stored
from disklab_host import lab, preflight, registry
from disklab_host.audit import collect as audit
from disklab_host.common.units import MIB
from disklab_host.registry import Step

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a loop device or a tmpfs")
NO_SPACE = re.compile(
    r"no space left on the workbench (\S+): ([\d,.]+) MiB free, the step needs ([\d,.]+) MiB"
)


@contextlib.contextmanager
def small_ext4(tmp_path: Path, size_mib: int = 40):
    """A real ext4 of ``size_mib`` MiB on a loop device, mounted under ``tmp_path``; ended on exit."""
    if not shutil.which("mkfs.ext4"):
        pytest.skip("mkfs.ext4 not installed")
    img, mnt = tmp_path / "disk.img", tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", str(size_mib * MIB), str(img)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-m", "0", str(img)], check=True, capture_output=True)
    losetup = ["losetup", "--find", "--show", str(img)]
    dev = subprocess.run(losetup, check=True, capture_output=True, text=True).stdout.strip()
    try:
        subprocess.run(["mount", dev, str(mnt)], check=True)
        try:
            yield mnt
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)  # may already be auto-cleared


@contextlib.contextmanager
def tmpfs(path: Path, size_mib: int):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _run_lab(tmp_path: Path, workbench: Path, steps: list[str], settings: dict, facts: dict | None = None):
    """lab.main as the role runs it (config, host.json, results.json); returns the results document."""
    cfg = {"run_id": "20261203T070000Z", "host": "h", "profile": "quick", "workbench": str(workbench),
           "lab_root": str(tmp_path / "root"), "steps": steps, "settings": settings}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "host.json").write_text(json.dumps(facts or {}))
    out = tmp_path / "run" / "results.json"
    out.parent.mkdir(exist_ok=True)
    assert lab.main(["--config", str(tmp_path / "config.json"), "--facts", str(tmp_path / "host.json"),
                     "--out", str(out)]) == 0  # fmt: skip
    return json.loads(out.read_text())


# --- finding 4: a full workbench is named -------------------------------------------------------


@pytest.mark.root
@ROOT
def test_a_step_that_fills_the_workbench_says_so_with_free_and_needed(tmp_path):
    """big_write of 64 MiB on a 40 MiB ext4: ENOSPC, recorded as a full workbench with both numbers."""
    with small_ext4(tmp_path) as wb:
        doc = _run_lab(tmp_path, wb, ["big_write", "write_buffering"], {"write_buffering_calls": 200})
        free_after = shutil.disk_usage(wb).free
    section = doc["experiments"]["big_write"]
    assert section["status"] == "failed"
    found = NO_SPACE.fullmatch(section["error"])
    assert found, section["error"]
    assert found[1] == str(wb)
    free_mib, needed_mib = (float(found[i].replace(",", "")) for i in (2, 3))
    assert 0 <= free_mib < 40 and needed_mib == 64.0  # registry.needed_bytes: big_write_mib of quick
    assert "No space left on device" in section["error_raised"]
    assert free_after > 30 * MIB  # the failed step's files were removed afterwards
    assert doc["experiments"]["write_buffering"]["status"] == "ok"  # the next step still ran


@pytest.mark.root
@ROOT
def test_torchs_short_write_on_a_full_workbench_is_named_as_a_full_workbench(tmp_path, monkeypatch):
    """torch.save on a full disk raises inline_container's 'unexpected pos', not ENOSPC: still named."""
    pytest.importorskip("torch")
    (tmp_path / "torch_step.py").write_text(
        "import torch\n"
        "def run(cfg, workdir):\n"
        "    n = cfg['sizes']['torch_fill_mib'] * 2**20 // 4\n"
        "    torch.save({'w': torch.ones(n, dtype=torch.float32)}, workdir / 'state.pt')\n"
        "    return {'status': 'ok'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fill = Step(name="torch_fill", title="a torch.save larger than the workbench",
                sizes=(registry.Size("torch_fill_mib", 64, 64, "MiB", "size of the saved tensor"),),
                needs_torch=True, platforms=registry.PLATFORMS, module="torch_step",
                needed_bytes=lambda s: s["torch_fill_mib"] * MIB)  # fmt: skip
    steps = (*registry.STEPS, fill)
    monkeypatch.setattr(registry, "STEPS", steps)
    monkeypatch.setattr(registry, "BY_NAME", {s.name: s for s in steps})
    monkeypatch.setattr(registry, "STEP_NAMES", tuple(s.name for s in steps))
    monkeypatch.setattr(registry, "SIZES", {z.name: z for s in steps for z in s.sizes})
    with small_ext4(tmp_path) as wb:
        doc = _run_lab(tmp_path, wb, ["torch_fill"], {})
    section = doc["experiments"]["torch_fill"]
    assert section["status"] == "failed"
    assert NO_SPACE.fullmatch(section["error"]), section["error"]
    assert "the step needs 64.0 MiB" in section["error"]
    assert "No space left on device" not in section["error_raised"]  # torch's own words, kept apart
    assert any(words in section["error_raised"] for words in lab.TORCH_SHORT_WRITE)


def test_torchs_words_with_room_to_spare_are_left_as_they_are(tmp_path):
    """The same torch error on a workbench with more free space than the step needs is not a full disk."""
    exc = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 67113472 vs 67113360")
    assert lab.no_space_error(exc, tmp_path, needed_bytes=1) is None
    assert lab.no_space_error(exc, tmp_path, needed_bytes=2**62) is not None
    chained = RuntimeError("saving failed")
    chained.__cause__ = OSError(28, "No space left on device")
    assert "no space left on the workbench" in lab.no_space_error(chained, tmp_path, needed_bytes=1)
    quoted = RuntimeError("saver.py atomic: OSError: [Errno 28] No space left on device")  # a child's
    assert "no space left on the workbench" in lab.no_space_error(quoted, tmp_path, needed_bytes=1)
    assert lab.no_space_error(ValueError("state_mib must be > 0"), tmp_path, needed_bytes=2**62) is None


def _cfg(workbench: Path, **kw) -> dict:
    return {"profile": "quick", "steps": ["fsync_bench", "big_write"], "workbench": str(workbench),
            "settings": {}, **kw}  # fmt: skip


@pytest.mark.root
@ROOT
def test_check_mode_refuses_a_too_small_workbench_as_the_real_run_does(tmp_path):
    """A workbench not made yet on a 40 MiB ext4 (the issue's /tmp/small/wb): --check measured nothing."""
    with small_ext4(tmp_path) as small:
        wb = small / "wb"
        cfg = _cfg(wb, workbench_create=True)
        with pytest.raises(preflight.Refused) as dry:
            preflight.preflight(cfg, dry_run=True)
        assert not wb.exists()  # --check creates nothing
        with pytest.raises(preflight.Refused) as real:
            preflight.preflight(cfg)
        assert wb.is_dir()
    assert str(dry.value) == str(real.value)
    assert "not enough free disk on the workbench" in str(dry.value) and str(wb) in str(dry.value)
    assert "the quick profile needs 64 MiB" in str(dry.value)


@pytest.mark.root
@ROOT
def test_check_mode_through_the_cli_refuses_and_creates_nothing(tmp_path):
    """preflight --check-mode, as the lab_run role runs it under --check: exit 2, the real run's words."""
    with tmpfs(tmp_path / "small", 8) as small:
        wb = small / "a" / "wb"
        cfg = json.dumps(_cfg(wb, workbench_create=True))
        argv = [sys.executable, "-m", "disklab_host", "preflight", "--config-json", cfg]
        dry = subprocess.run([*argv, "--check-mode"], capture_output=True, text=True)
        assert not (small / "a").exists()
        real = subprocess.run([*argv, "--apply"], capture_output=True, text=True)
    assert dry.returncode == real.returncode == 2
    assert dry.stderr == real.stderr and "not enough free disk" in dry.stderr


# --- finding 3: the run's own workbench facts -----------------------------------------------------


@pytest.mark.root
@ROOT
def test_the_run_records_the_facts_of_its_own_workbench_and_the_report_names_the_split(tmp_path):
    """lab_run_workbench on a tmpfs, the audit's facts of disklab_workbench elsewhere: the results carry
    the tmpfs, and the rendered report says the two name different filesystems."""
    audited = tmp_path / "default_workbench"
    audited.mkdir()
    facts = audit.collect_all(str(audited), None)  # what host_audit recorded of disklab_workbench
    with tmpfs(tmp_path / "mnt", 16) as mnt:
        wb = mnt / "wb"
        wb.mkdir()
        doc = _run_lab(tmp_path, wb, ["write_buffering"], {"write_buffering_calls": 200}, facts=facts)
    run_wb = doc["workbench"]
    assert run_wb["requested_path"] == str(wb) and run_wb["fstype"] == "tmpfs"
    assert run_wb["mount_point"] == str(mnt) and run_wb["flags"]["tmpfs"]["state"] == "set"
    assert doc["facts"]["workbench"]["requested_path"] == str(audited)  # the audit's, kept as it was
    assert doc["facts"]["workbench"]["fstype"] != "tmpfs"

    reports = tmp_path / "reports"
    stored.write(reports / "h" / "runs" / f"{doc['run_id']}.json", "results", doc)
    report.render_all(reports)
    text = (reports / "h" / "report.md").read_text()
    assert "name different filesystems" in text
    assert f"the run measured `{wb}` (tmpfs from tmpfs on {mnt})" in text
    assert f"the audit describes `{audited}`" in text
    fs_table = text.split("## Filesystem of the workbench")[1].split("## Writeback")[0]
    assert "**tmpfs**" in fs_table and "recorded by the lab runner itself" in fs_table
    assert "Flag: tmpfs" in fs_table  # the figures are read against the run's tmpfs
