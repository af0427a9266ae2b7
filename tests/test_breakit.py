"""Break It 2 and 3 for real: a cross-device rename on a real second filesystem, an injected fsync error."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from disklab_host.checkpoint import breakit, saver
from disklab_host.steps import crash

OLD, NEW = crash.OLD_STEP, crash.OLD_STEP + 1


@pytest.fixture(scope="module")
def states():
    return {s: saver.make_state(8, s) for s in (OLD, NEW)}


def test_fsync_error_atomic_raises_once_and_keeps_the_old_checkpoint(states, workbench):
    out = breakit.fsync_error(workbench / "e", states[OLD], states[NEW])
    a, ig = out["atomic"], out["ignoring"]
    assert a["raised"] and "Errno 5" in a["error"]
    assert a["fsync_calls"] == 1  # never retried
    assert (a["outcome"], a["step"]) == ("old_ok", OLD)
    assert not a["temp_left"]
    # the version that swallows the error replaced the old checkpoint
    assert not ig["raised"] and ig["fsync_calls"] == 1
    assert (ig["outcome"], ig["step"]) == ("new_ok", NEW)


def test_atomic_save_never_renames_after_a_failed_fsync(states, workbench):
    path = workbench / "ckpt.pt"
    saver.atomic_save(states[OLD], path)
    before = path.stat().st_ino
    double = breakit.FailingFsync()
    with pytest.raises(OSError) as info:
        saver.atomic_save(states[NEW], path, fsync=double)
    assert info.value.errno == errno.EIO
    assert path.stat().st_ino == before
    assert not saver.temp_path(path).exists()
    assert crash.classify(path, fmt="pt", old_step=OLD, new_step=NEW, states=states)["outcome"] == "old_ok"


def _check_reproduced(out: dict, other: Path) -> None:
    assert out["status"] == "reproduced", out
    assert out["other_dir"] == str(other)
    assert out["replace_errno"] == errno.EXDEV
    assert "Invalid cross-device link" in out["replace_error"]
    assert out["other_dev"] != out["workbench_dev"]
    assert out["same_inode_after_move"] is False
    assert out["final_bytes"] == out["full_bytes"] and out["loads_after_move"]
    # the final name was seen holding less than the whole file while shutil.move copied
    assert out["move_partial_sizes_bytes"]
    assert all(0 <= s < out["full_bytes"] for s in out["move_partial_sizes_bytes"])


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this machine")
def test_cross_device_with_dev_shm(states, workbench):
    if os.stat("/dev/shm").st_dev == os.stat(workbench).st_dev:
        pytest.skip("/dev/shm is on the workbench's filesystem here")
    out = breakit.cross_device(workbench, saver.make_state(32, NEW), candidates=["/dev/shm"])
    _check_reproduced(out, Path("/dev/shm"))
    assert not (workbench / "xdev_ckpt.pt").exists()


@pytest.mark.root
def test_cross_device_on_a_tmpfs_mounted_here(states, workbench, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m", "disklab-test", str(mnt)], check=True)
    try:
        out = breakit.cross_device(workbench, saver.make_state(32, NEW), candidates=[str(mnt)])
        _check_reproduced(out, mnt)
        assert list(mnt.iterdir()) == []  # its temp dir is gone
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_cross_device_not_reproducible_without_a_second_filesystem(states, workbench):
    same = workbench / "same-fs"
    same.mkdir()
    out = breakit.cross_device(workbench, states[NEW], candidates=[str(workbench / "absent"), str(same)])
    assert out["status"] == "not_reproducible"
    assert "no writable directory on another filesystem" in out["reason"]
    assert [t["skipped"] for t in out["tried"]] == [
        "does not exist",
        "same filesystem as the workbench (same st_dev)",
    ]
    assert "replace_error" not in out


def test_candidate_dirs_follow_the_issue_order(monkeypatch):
    monkeypatch.setenv("TMPDIR", "/var/tmp/x")
    assert breakit.candidate_dirs() == ["/dev/shm", "/tmp", f"/run/user/{os.getuid()}", "/var/tmp/x"]
