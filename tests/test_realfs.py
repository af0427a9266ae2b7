"""The realfs recorder, crash states, images, cleanup registry and fsync error, on this host's kernel.

Tests that need root, loop devices, /dev/fuse and mkfs.ext4 skip with the reason elsewhere; CI runs as
root with fuse3, xfsprogs and btrfs-progs installed (.ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from disklab_host.realfs import compare, crashlab, fsync_error, images
from disklab_host.realfs.mounts import (
    FILESYSTEMS,
    Resources,
    make_image,
    missing_tools,
    mounted_source,
    syncfs,
)
from disklab_host.steps import realfs as step


def _why_no_root() -> str | None:
    if os.geteuid() != 0:
        return "needs root (loop devices, mounts, FUSE)"
    if not os.path.exists("/dev/fuse") or not os.path.exists("/dev/loop-control"):
        return "needs /dev/fuse and loop devices"
    missing = missing_tools(["ext4"])
    return f"missing {missing}" if missing else None


needs_root = pytest.mark.skipif(_why_no_root() is not None, reason=str(_why_no_root()))


def _log(tmp_path: Path, entries: list) -> Path:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def _w(off: int, pos: int = 0) -> list:
    return ["w", off, 512, pos]


def test_read_log_splits_at_the_marks_and_counts_unflushed_writes(tmp_path):
    entries = [_w(0), ["f"], _w(512), ["m", "begin"], _w(1024), ["f"], _w(1536), ["m", "end"], _w(2048),
               ["f"], ["m", "umount"], _w(4096)]  # fmt: skip
    log = images.read_log(_log(tmp_path, entries), "begin", "umount")
    assert [w.offset for w in log.before] == [0, 512]
    assert log.unflushed_before == 1  # the write at 512 came after the last flush before begin
    assert [w.offset for w in log.writes] == [1024, 1536, 2048]  # nothing after umount
    assert log.flushes == (1, 3)
    assert log.marks == {"begin": 0, "end": 2, "umount": 3}
    with pytest.raises(ValueError, match="lacks the mark"):
        images.read_log(_log(tmp_path, entries), "begin", "nowhere")


def test_crash_states_follow_the_flushes_and_say_when_they_may_come_after_the_return(tmp_path):
    # 4 writes, a flush, the save returns, 3 writes, a flush
    entries = [["m", "begin"], _w(0), _w(512), _w(1024), _w(1536), ["f"], ["m", "end"],
               _w(2048), _w(2560), _w(3072), ["f"], ["m", "umount"]]  # fmt: skip
    log = images.read_log(_log(tmp_path, entries), "begin", "umount")
    states = images.crash_states(log, returned="end", subsets=3, seed=1)
    by_writes = {s.writes: s for s in states}
    assert (
        () in by_writes and not by_writes[()].after_return
    )  # the start lasts until flush 1, before the return
    assert by_writes[(0, 1, 2, 3)].after_return  # the state at flush 1 lasts until flush 2, after the return
    assert (0, 1) in by_writes  # the prefix of the first epoch
    assert by_writes[tuple(range(7))].after_return
    assert len(by_writes) == len(states)  # listed once each
    for s in states:
        if not s.writes or max(s.writes) <= 3:
            assert set(s.writes) <= {0, 1, 2, 3}
        else:  # every state past flush 1 holds every write before it
            assert {0, 1, 2, 3} <= set(s.writes)
    assert images.crash_states(log, returned="end", subsets=3, seed=1) == states  # seeded
    assert len(states) <= 2 * (1 + 1 + 3) + 1


def test_sparse_copy_keeps_holes_and_bytes_and_writes_apply_in_order(tmp_path):
    src = tmp_path / "src.img"
    with open(src, "wb") as f:
        f.truncate(64 << 20)
        f.seek(32 << 20)
        f.write(b"x" * 8192)
    dst = tmp_path / "dst.img"
    images.sparse_copy(src, dst)
    assert dst.read_bytes() == src.read_bytes()
    assert os.stat(dst).st_blocks * 512 < 1 << 20  # the 64 MiB of holes stayed holes
    data = tmp_path / "data.bin"
    data.write_bytes(b"a" * 512 + b"b" * 512)
    images.apply_writes(dst, data, [images.Write(0, 512, 0), images.Write(256, 512, 512)])
    assert dst.read_bytes()[:1024] == b"a" * 256 + b"b" * 512 + b"\0" * 256


def test_resources_undo_everything_newest_first_even_when_one_fails():
    done = []
    res = Resources()
    res.add("a", lambda: done.append("a"))
    res.add("b", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    res.add("c", lambda: done.append("c"))
    assert res.close() == ["b: boom"]
    assert done == ["c", "a"] and res.held == []
    with pytest.raises(KeyError):
        res.release("a")


def test_compare_ranks_verdicts_and_names_the_simulator_bugs():
    cells = [
        {"fs": "ext4", "recipe": "rename_no_fsync", "simulator": "unsafe", "verdict": "rolled_back"},
        {"fs": "xfs", "recipe": "atomic", "simulator": "safe", "verdict": "unsafe"},
        {"fs": "xfs", "recipe": "naive", "simulator": "unsafe", "verdict": "unsafe"},
        {"fs": "btrfs", "recipe": "naive", "simulator": None, "verdict": "unsafe"},
    ]
    assert [compare.judge(c["simulator"], c["verdict"]) for c in cells] == [
        "kinder",
        "harsher",
        "agree",
        "unknown",
    ]
    m = compare.confusion(cells)
    assert m["xfs"]["safe"]["unsafe"] == 1 and m["xfs"]["unsafe"]["unsafe"] == 1 and "btrfs" not in m
    d = compare.disagreements(cells)
    assert [(x["fs"], x["kind"], x["simulator_bug"]) for x in d] == [
        ("ext4", "kinder", False),
        ("xfs", "harsher", True),
    ]
    assert "auto_da_alloc" in d[0]["mechanism"] and d[1]["mechanism"] is None


def test_step_is_not_run_with_the_reason_when_the_setting_is_off_or_not_linux(tmp_path, monkeypatch):
    sizes = {"realfs_filesystems": 1, "realfs_recipes": 1, "realfs_state_mib": 4, "realfs_subsets": 1,
             "realfs_max_states": 4}  # fmt: skip
    off = step.run({"sizes": sizes, "settings": {}, "system": "Linux"}, tmp_path)
    assert off["status"] == "not_run" and "lab_run_realfs is off" in off["reason"]
    mac = step.run({"sizes": sizes, "settings": {"realfs": True}, "system": "Darwin"}, tmp_path)
    assert mac["status"] == "not_run" and "not Linux" in mac["reason"]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    user = step.run({"sizes": sizes, "settings": {"realfs": True}, "system": "Linux"}, tmp_path)
    assert user["status"] == "not_run" and "root" in user["reason"]
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "mkfs.xfs" else "/bin/true")
    assert "mkfs.xfs" in missing_tools(["ext4", "xfs"])


def _ours(tmp_path: Path) -> tuple[list[str], list[str]]:
    """Loop devices over files under tmp_path, and mounts under it, that still exist."""
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True).stdout.splitlines()
    with open("/proc/self/mounts") as f:
        mounts = [line.split()[1] for line in f if str(tmp_path) in line.split()[1]]
    return [line for line in loops if str(tmp_path) in line], mounts


@needs_root
def test_recorder_logs_every_write_and_flush_and_its_replay_is_the_device(tmp_path):
    """ext4 over the recorder: 4 MiB and a syncfs reach the log; replaying it rebuilds the device."""
    start = tmp_path / "start.img"
    make_image("ext4", start)
    live = tmp_path / "live.img"
    images.sparse_copy(start, live)
    with Resources() as res:
        rec = crashlab.Recorder(live, tmp_path / "fuse", tmp_path / "w.jsonl", tmp_path / "w.bin", res)
        dev = res.loop(rec.file, direct_io=True)
        assert crashlab.loop_dio(dev)
        mnt = Path(res.mount(dev, tmp_path / "mnt", "ext4"))
        rec.mark("begin")
        (mnt / "f").write_bytes(os.urandom(4 << 20))
        syncfs(mnt)
        rec.mark("synced")
        res.release(str(mnt))
        rec.mark("umount")
        _, writes, flushes, errors = rec.ask("count").split()
        res.release(dev)
        res.release(rec.mount_name)
        assert rec.proc.wait(timeout=30) == 0
    log = images.read_log(tmp_path / "w.jsonl", "begin", "umount")
    assert int(writes) == len(log.before) + len(log.writes) and int(errors) == 0
    assert sum(w.length for w in log.writes[: log.marks["synced"]]) >= 4 << 20
    assert log.flushes and log.flushes[0] <= log.marks["synced"]  # the syncfs flushed the device
    rebuilt = tmp_path / "rebuilt.img"
    images.sparse_copy(start, rebuilt)
    images.apply_writes(rebuilt, tmp_path / "w.bin", log.before + log.writes)
    assert rebuilt.read_bytes() == live.read_bytes()
    assert _ours(tmp_path) == ([], [])


@needs_root
@pytest.mark.heavy
def test_a_failure_midway_ends_every_loop_device_mount_and_process(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("injected failure while a crash image is mounted")

    monkeypatch.setattr(crashlab.pc_check, "load_verdict", boom)
    with pytest.raises(RuntimeError, match="injected"), Resources() as res:
        saver = crashlab.SaveProcess("recipe:atomic", 4, res, tmp_path)
        procs = [saver.proc]
        crashlab.run_save(
            "ext4", "recipe:atomic", "torch", tmp_path / "w", 4, res, saver, subsets=1, max_states=3
        )
    assert res.errors == []
    assert all(p.poll() is not None for p in procs)
    assert _ours(tmp_path) == ([], [])
    assert mounted_source(tmp_path / "w" / "fuse") is None


@needs_root
def test_a_real_fsync_error_fails_the_atomic_save_and_keeps_the_old_checkpoint(tmp_path):
    with Resources() as res:
        row = fsync_error.measure("ext4", tmp_path / "fe", res)
    assert res.errors == []
    assert row["old_fsync"] == "ok" and row["first_fsync"] == "EIO"
    assert row["failed_device_writes"] > 0
    assert row["on_device_after_remount"]["new"] == 0  # the failed writeback never reached the device
    atomic = row["saves"]["atomic_save"]
    assert atomic == {
        **atomic,
        "raised": "EIO",
        "temp_left": False,
        "in_cache": "old",
        "after_remount": "old",
    }
    assert row["saves"]["error_ignoring_save"]["raised"] is None
    assert row["saves"]["error_ignoring_save"]["after_remount"] != "new"
    assert _ours(tmp_path) == ([], [])


def test_filesystem_table_names_the_tools_the_step_checks():
    assert set(FILESYSTEMS) == set(step.FS_ORDER)


def test_real_fs_option_refuses_an_unknown_filesystem_before_any_work(capsys):
    from disklab_host.powercut import record as pc_record
    from disklab_host.powercut import simulate
    from disklab_host.realfs import user

    with pytest.raises(ValueError, match="--real-fs: filesystems must be some of"):
        user.parse("ext4,zfs")
    assert user.parse(" ext4, btrfs ") == ["ext4", "btrfs"]
    if pc_record.find_strace() is None:
        pytest.skip("strace is not installed")
    assert simulate.main(["check", "recipe:atomic", "--real-fs", "zfs"]) == 2
    assert "--real-fs: filesystems must be some of" in capsys.readouterr().err
