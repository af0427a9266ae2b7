"""Persistence models and crash-state enumeration (pc_states), and the strace parser, without strace."""

from __future__ import annotations

from pathlib import Path

import pytest

from disklab_host.powercut import record as pc_record
from disklab_host.powercut import trace
from disklab_host.powercut.states import (
    POWER_CUT,
    PROCESS_KILL,
    Model,
    Op,
    apply_ops,
    enumerate_states,
    states_at,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "powercut"
OLD = {"ckpt": b"OLD-CHECKPOINT"}
INODES = {"ckpt": 0}


def _rename_recipe(fsync_file: bool, fsync_dir: bool) -> list[Op]:
    """create tmp, two writes, [fsync tmp], rename over ckpt, [fsync dir]: one op per call."""
    ops = [
        Op(0, "create", ino=1, path="tmp"),
        Op(1, "write", ino=1, offset=0, data=b"NEW-"),
        Op(2, "write", ino=1, offset=4, data=b"CHECKPOINT"),
    ]
    if fsync_file:
        ops.append(Op(len(ops), "fsync", ino=1))
    ops.append(Op(len(ops), "rename", path="tmp", dst="ckpt"))
    if fsync_dir:
        ops.append(Op(len(ops), "dirsync", path="."))
    return ops


def _ckpts(ops: list[Op], point: int, model: Model) -> dict[str, bytes | None]:
    return {
        st.name: apply_ops(OLD, INODES, ops, st.applied).get("ckpt")
        for st in states_at(ops, point, False, model)
    }


def test_process_kill_has_one_state_with_every_call():
    ops = _rename_recipe(False, False)
    states = states_at(ops, 4 - 1, False, PROCESS_KILL)
    assert [s.name for s in states] == ["all"]
    assert apply_ops(OLD, INODES, ops, states[0].applied)["ckpt"] == b"NEW-CHECKPOINT"


def test_rename_without_fsync_can_leave_an_empty_or_torn_file():
    ops = _rename_recipe(False, False)
    got = _ckpts(ops, 3, POWER_CUT)
    assert got["none"] == b"OLD-CHECKPOINT"
    assert got["all"] == b"NEW-CHECKPOINT"
    assert got["metadata_only"] == b""  # the rename reached the disk before the data
    assert got["torn_1"] == b"NEW-"
    assert got["data_only"] == b"OLD-CHECKPOINT"


def test_full_atomic_leaves_only_old_or_new():
    ops = _rename_recipe(True, True)
    for point in range(len(ops)):
        assert set(_ckpts(ops, point, POWER_CUT).values()) <= {b"OLD-CHECKPOINT", b"NEW-CHECKPOINT"}
    assert set(_ckpts(ops, len(ops) - 1, POWER_CUT).values()) == {b"NEW-CHECKPOINT"}


def test_no_dir_fsync_can_roll_back_but_never_tear():
    ops = _rename_recipe(True, False)
    got = _ckpts(ops, len(ops) - 1, POWER_CUT)
    assert set(got.values()) == {b"OLD-CHECKPOINT", b"NEW-CHECKPOINT"}


def test_fsync_of_one_file_does_not_cover_another():
    ops = [
        Op(0, "write", ino=0, offset=0, data=b"X"),
        Op(1, "create", ino=1, path="other"),
        Op(2, "fsync", ino=1),
    ]
    assert {s.name for s in states_at(ops, 2, False, POWER_CUT)} >= {"none", "all"}
    assert _ckpts(ops, 2, POWER_CUT)["none"] == b"OLD-CHECKPOINT"


def test_torn_states_are_bounded():
    ops = [Op(i, "write", ino=0, offset=i, data=b"x") for i in range(200)]
    states = states_at(ops, 199, False, POWER_CUT, max_torn=8)
    assert len([s for s in states if s.name.startswith("torn_")]) == 8
    with pytest.raises(ValueError, match="max_torn must be >= 1"):
        states_at(ops, 199, False, POWER_CUT, max_torn=0)


def test_returned_point_is_added_once():
    ops = _rename_recipe(True, True)
    states = enumerate_states(ops, len(ops), True, PROCESS_KILL)
    assert len(states) == len(ops) + 1
    assert [s.returned for s in states].count(True) == 1


def test_bad_op_kind_names_the_rule():
    with pytest.raises(ValueError, match="Op.kind"):
        Op(0, "chmod")


def test_parser_joins_resumed_calls_and_tracks_offsets():
    lines = (FIXTURES / "resumed.strace").read_text().splitlines()
    rec = pc_record.parse_trace(lines, root=Path("/w"), cwd=Path("/w"), initial={}, initial_dirs={"."})
    assert [c.name for c in rec.calls] == ["openat", "writev", "write", "fsync", "close"]
    assert rec.returned
    final = apply_ops(rec.initial, rec.initial_inodes, rec.ops, frozenset(range(len(rec.ops))))
    assert final == {"ckpt": b"aZc"}  # writev "abc", lseek to 1, write "Z"; stdout ignored


def test_parser_refuses_a_truncated_string():
    line = '7  write(3, "\\x61\\x62"..., 4096) = 4096'
    with pytest.raises(trace.RecordError, match="-s"):
        trace.string_arg(trace.parse_lines([line])[0][2][1])


def test_parser_splits_arguments_at_top_level_commas_only():
    args = 'AT_FDCWD, "\\x2c\\x5b", [{iov_base="\\x61", iov_len=1}, {iov_base="", iov_len=0}], 2'
    assert trace.split_args(args) == [
        "AT_FDCWD", '"\\x2c\\x5b"', '[{iov_base="\\x61", iov_len=1}, {iov_base="", iov_len=0}]', "2",
    ]  # fmt: skip
    assert trace.split_args('3, "\\x61, 4') == ["3", '"\\x61, 4']  # an unclosed quote runs to the end
    assert trace.split_args("") == []


def test_parser_reads_strings_as_xnn_bytes_and_nothing_else():
    big = bytes(range(256)) * 4096  # 1 MiB: a saved tensor's write, read in well under a second
    line = f'7  write(3, "{trace.hex_text(big)}", {len(big)}) = {len(big)}'
    assert trace.string_arg(trace.parse_lines([line])[0][2][1]) == big
    for bad in ('"\\x6"', '"\\x6g"', '"a\\x61"', '"\\y61"', '"\\x61 "', "3"):
        with pytest.raises(trace.RecordError):
            trace.string_arg(bad)


def test_parser_without_begin_marker_says_so():
    with pytest.raises(trace.RecordError, match="begin marker"):
        pc_record.parse_trace([], root=Path("/w"), cwd=Path("/w"), initial={}, initial_dirs={"."})
