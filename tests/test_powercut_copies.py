"""The recorder's copies, temp files outside and unplaced calls, on hand-written strace lines.

These are fast and exact; tests/test_powercut_saves.py records the same calls for real.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from disklab_host.powercut import record as pc_record
from disklab_host.powercut import simulate
from disklab_host.powercut.states import POWER_CUT, apply_ops, states_at
from disklab_host.powercut.trace import RecordError
from disklab_host.powercut.translate.state import filesystem_of


def _h(text: str) -> str:
    return '"' + "".join(f"\\x{b:02x}" for b in text.encode()) + '"'


def _trace(root: Path, *calls: str) -> list[str]:
    begin = f"1 openat(AT_FDCWD, {_h(f'{root}/.disklab-powercut-begin')}, O_RDONLY) = -1 ENOENT (x)"
    end = f"1 openat(AT_FDCWD, {_h(f'{root}/.disklab-powercut-end')}, O_RDONLY) = -1 ENOENT (x)"
    return [begin, *(f"1 {c}" for c in calls), end]


def _parse(root: Path, lines: list[str], initial: dict | None = None) -> pc_record.Recording:
    return pc_record.parse_trace(lines, root=root, cwd=root, initial=initial or {}, initial_dirs={"."})


def _final(rec: pc_record.Recording) -> dict[str, bytes]:
    return apply_ops(rec.initial, rec.initial_inodes, rec.ops, frozenset(range(len(rec.ops))))


def test_copies_take_the_bytes_the_source_held_at_that_moment(tmp_path):
    """A temp file in /dev/shm written, copied with sendfile, overwritten, copied with copy_file_range."""
    shm = "/dev/shm/disklab-test-copy.pt"
    lines = _trace(
        tmp_path,
        f"openat(AT_FDCWD, {_h(shm)}, O_RDWR|O_CREAT|O_TRUNC, 0666) = 3",
        f"write(3, {_h('abcdef')}, 6) = 6",
        f"openat(AT_FDCWD, {_h(f'{tmp_path}/ckpt')}, O_WRONLY|O_CREAT|O_TRUNC, 0666) = 4",
        "sendfile(4, 3, [0] => [6], 8388608) = 6",  # ckpt: abcdef, from the temp file's content now
        f"pwrite64(3, {_h('XY')}, 2, 0) = 2",  # the temp file changes after the copy
        "copy_file_range(3, [1], 4, [6], 2, 0) = 2",  # "Yc" at offset 6
        "lseek(3, 4, SEEK_SET) = 4",
        "copy_file_range(3, NULL, 4, NULL, 2, 0) = 2",  # "ef", from position 4 to ckpt's position, 6
        "close(4) = 0",
        f"unlink({_h(shm)}) = 0",
    )
    rec = _parse(tmp_path, lines)
    # an explicit offset leaves the fd's position where it was: "Yc" at 6 is overwritten by "ef"
    assert _final(rec) == {"ckpt": b"abcdefef"}
    assert rec.unplaced == [] and rec.outside == {}  # the temp file was created and removed by the save
    assert [f["path"] for f in rec.outside_files] == [shm]
    assert rec.outside_files[0]["volatile"] is True and rec.outside_files[0]["fs"] == "tmpfs"
    writes = [op for op in rec.ops if op.kind == "write"]
    assert [op.data for op in writes] == [b"abcdef", b"Yc", b"ef"] and not any(op.durable for op in writes)
    # the copies are unsynced data of ckpt: a power cut after the last one may keep none of them
    states = states_at(rec.ops, len(rec.calls) - 1, True, POWER_CUT)
    none = next(s for s in states if s.name == "none")
    assert apply_ops(rec.initial, rec.initial_inodes, rec.ops, none.applied) == {}


def test_splice_through_a_pipe_and_a_source_that_was_there_before(tmp_path):
    before = tmp_path.parent / f"{tmp_path.name}-base.bin"
    before.write_bytes(b"0123456789")  # outside the directory, there before the save, only read
    lines = _trace(
        tmp_path,
        f"openat(AT_FDCWD, {_h(str(before))}, O_RDONLY) = 3",
        "pipe2([5, 6], O_CLOEXEC) = 0",
        "splice(3, [2], 6, NULL, 4, 0) = 4",  # "2345" into the pipe
        f"write(6, {_h('!')}, 1) = 1",
        f"openat(AT_FDCWD, {_h(f'{tmp_path}/ckpt')}, O_WRONLY|O_CREAT|O_TRUNC, 0666) = 4",
        "splice(5, NULL, 4, NULL, 5, 0) = 5",
        "sendfile(4, 3, NULL, 3) = 3",  # from fd 3's own position (0: splice with an offset left it)
        "close(4) = 0",
    )
    rec = _parse(tmp_path, lines)
    assert _final(rec) == {"ckpt": b"2345!012"}
    assert rec.unplaced == []


def test_reflink_clones_replace_or_overwrite_the_destination(tmp_path):
    lines = _trace(
        tmp_path,
        f"openat(AT_FDCWD, {_h(f'{tmp_path}/a')}, O_RDWR|O_CREAT|O_TRUNC, 0666) = 3",
        f"write(3, {_h('hello')}, 5) = 5",
        f"openat(AT_FDCWD, {_h(f'{tmp_path}/b')}, O_RDWR|O_CREAT|O_TRUNC, 0666) = 4",
        f"write(4, {_h('0123456789')}, 10) = 10",
        "ioctl(4, BTRFS_IOC_CLONE or FICLONE, 3) = 0",  # b becomes a copy of a, size and all
        f"openat(AT_FDCWD, {_h(f'{tmp_path}/c')}, O_RDWR|O_CREAT|O_TRUNC, 0666) = 5",
        f"write(5, {_h('..........')}, 10) = 10",
        "ioctl(5, BTRFS_IOC_CLONE_RANGE or FICLONERANGE, "
        "{src_fd=3, src_offset=1, src_length=3, dest_offset=4}) = 0",
    )
    assert _final(_parse(tmp_path, lines)) == {"a": b"hello", "b": b"hello", "c": b"....ell..."}


def test_a_copy_from_what_the_recording_cannot_see_is_unplaced_not_refused(tmp_path):
    lines = _trace(
        tmp_path,
        f"openat(AT_FDCWD, {_h(f'{tmp_path}/ckpt')}, O_WRONLY|O_CREAT|O_TRUNC, 0666) = 4",
        "sendfile(4, 9, NULL, 100) = 100",  # fd 9: not opened in the recording (a socket, say)
        "mmap(NULL, 10, PROT_READ|PROT_WRITE, MAP_SHARED, 4, 0) = 0x7f0000000000",
        "close(4) = 0",
    )
    rec = _parse(tmp_path, lines)
    assert [(u["call_index"], u["syscall"], u["path"]) for u in rec.unplaced] == [
        (1, "sendfile", "ckpt"),
        (2, "mmap", "ckpt"),
    ]
    assert "source fd is not one the recording opened" in rec.unplaced[0]["why"]
    assert "shared writable mapping" in rec.unplaced[1]["why"]
    assert [c.ops for c in rec.calls][1:3] == [(), ()]  # crash points, with no effect in the model


def test_a_rename_exchange_swaps_the_names_and_persists_with_the_directory(tmp_path):
    initial = {"a": b"A", "b": b"B"}
    lines = _trace(
        tmp_path,
        f"renameat2(AT_FDCWD, {_h(f'{tmp_path}/a')}, AT_FDCWD, {_h(f'{tmp_path}/b')}, RENAME_EXCHANGE) = 0",
        f"openat(AT_FDCWD, {_h(f'{tmp_path}/a')}, O_WRONLY|O_APPEND) = 3",
        f"write(3, {_h('+')}, 1) = 1",  # to the file now named a: b's
    )
    rec = _parse(tmp_path, lines, initial)
    assert rec.unplaced == [] and _final(rec) == {"a": b"B+", "b": b"A"}
    none = next(s for s in states_at(rec.ops, 2, True, POWER_CUT) if s.name == "none")
    assert apply_ops(rec.initial, rec.initial_inodes, rec.ops, none.applied) == initial  # no directory fsync


def test_an_unplaced_call_is_skipped_and_later_calls_follow_the_real_names(tmp_path):
    lines = _trace(
        tmp_path,
        f"mkdir({_h(f'{tmp_path}/d')}, 0777) = 0",
        f"rename({_h(f'{tmp_path}/d')}, {_h(f'{tmp_path}/e')}) = 0",  # renaming a directory: not modelled
        f"openat(AT_FDCWD, {_h(f'{tmp_path}/e/f')}, O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3",
        f"write(3, {_h('x')}, 1) = 1",
    )
    rec = _parse(tmp_path, lines)
    assert [(u["call_index"], u["syscall"], u["path"]) for u in rec.unplaced] == [(1, "rename", "d")]
    assert "renaming the directory 'd' to 'e' is not modelled" in rec.unplaced[0]["why"]
    assert _final(rec) == {"e/f": b"x"}


def test_no_verdict_when_an_unplaced_call_changes_the_checkpoint(tmp_path):
    lines = _trace(
        tmp_path,
        f"openat(AT_FDCWD, {_h(f'{tmp_path}/ckpt.pt')}, O_RDWR|O_CREAT|O_TRUNC, 0666) = 3",
        "ftruncate(3, 4) = 0",
        "mmap(NULL, 4, PROT_READ|PROT_WRITE, MAP_SHARED, 3, 0) = 0x7f0000000000",
    )
    rec = _parse(tmp_path, lines)
    assert simulate.check_replay(rec, {"ckpt.pt": b"\0" * 4}, "ckpt.pt") == []  # the stores changed nothing
    with pytest.raises(
        RecordError, match=r"no verdict: ckpt.pt is changed by .*\(call 2 mmap ckpt.pt: stores"
    ):
        simulate.check_replay(rec, {"ckpt.pt": b"data"}, "ckpt.pt")
    assert simulate.check_replay(rec, {"ckpt.pt": b"\0" * 4, "side": b"s"}, "ckpt.pt") == ["side"]
    placed = _parse(tmp_path, lines[:3] + lines[4:])
    with pytest.raises(RecordError, match="every call was placed: a disklab bug"):
        simulate.check_replay(placed, {"ckpt.pt": b"data"}, "ckpt.pt")


def test_syncfs_of_another_filesystem_does_not_make_the_directory_durable(tmp_path):
    lines = _trace(
        tmp_path,
        f"openat(AT_FDCWD, {_h('/dev/shm')}, O_RDONLY|O_DIRECTORY) = 3",
        "syncfs(3) = 0",
        f"openat(AT_FDCWD, {_h(str(tmp_path))}, O_RDONLY|O_DIRECTORY) = 4",
        "syncfs(4) = 0",
    )
    rec = _parse(tmp_path, lines)
    assert [c.name for c in rec.calls] == ["openat", "syncfs"]  # only the directory's own filesystem
    assert [op.kind for op in rec.ops] == ["sync"]


def test_a_rename_in_from_outside_on_the_same_filesystem_keeps_the_data_durability(tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-tmp.pt"  # same filesystem, another directory
    for synced, expected in ((True, {"ckpt": b"new"}), (False, {"ckpt": b""})):
        lines = _trace(
            tmp_path,
            f"openat(AT_FDCWD, {_h(str(outside))}, O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3",
            f"write(3, {_h('new')}, 3) = 3",
            *(["fsync(3) = 0"] if synced else []),
            f"rename({_h(str(outside))}, {_h(f'{tmp_path}/ckpt')}) = 0",
            f"openat(AT_FDCWD, {_h(str(tmp_path))}, O_RDONLY|O_DIRECTORY) = 4",
            "fsync(4) = 0",
        )
        rec = _parse(tmp_path, lines)
        assert rec.outside == {} and rec.unplaced == []
        assert rec.outside_files[0]["same_fs_as_checkpoint"] is True
        end = states_at(rec.ops, len(rec.calls) - 1, True, POWER_CUT)
        worst = next(s for s in end if s.name == "none")
        files = apply_ops(rec.initial, rec.initial_inodes, rec.ops, worst.applied)
        assert files == expected, synced  # the name was fsync'd in; the bytes only if the file was


def test_filesystem_of_reads_mountinfo(tmp_path):
    info = tmp_path / "mountinfo"
    st = tmp_path.stat()
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    info.write_text(
        f"22 1 0:1 / / rw - ext4 /dev/vda rw\n30 22 {dev} / {tmp_path} rw shared:1 - btrfs /dev/loop0 rw\n"
    )
    found = filesystem_of(str(tmp_path / "gone" / "file"), mountinfo=str(info))
    assert (found["fs"], found["mount_point"], found["volatile"]) == ("btrfs", str(tmp_path), False)
    assert filesystem_of("/dev/shm/x")["volatile"] is True
