"""The crash lab on the real filesystem: real saves, real SIGKILLs, real torch.load and safetensors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from disklab_host.checkpoint import saver
from disklab_host.steps import crash

STATE_MIB = 16
OLD, NEW = crash.OLD_STEP, crash.OLD_STEP + 1


@pytest.fixture(scope="module")
def server():
    with crash.SaverServer(STATE_MIB) as srv:
        yield srv


@pytest.fixture(scope="module")
def states():
    return {s: saver.make_state(STATE_MIB, s) for s in (OLD, NEW)}


def _progress_run(server, mode, workbench, states, points):
    return crash.run_mode(
        server, mode, workbench, states=states, progress_points=points, delays_fn=lambda s: [], repeats=1
    )


@pytest.mark.heavy
def test_naive_killed_at_half_fails_to_load_with_the_zip_error(server, states, workbench):
    m = _progress_run(server, "naive", workbench, states, (0.5,))
    (k,) = m["kills"]
    assert k["killed"] and not k["save_completed"]
    assert k["outcome"] == "corrupt"
    assert k["error_kind"] == "zip_central_directory"
    assert k["error"].startswith("RuntimeError:") and "central directory" in k["error"]
    (final,) = [f for f in k["files"] if f["name"] == "ckpt.pt"]
    assert 0.5 * m["full_bytes"] <= final["size_bytes"] < m["full_bytes"]
    # stopped at the exit of the first write that took the file past half, exactly where the plan said
    assert k["kill_method"] == "strace_stop" and k["attempts"] == 1
    assert final["size_bytes"] == k["stopped_at"]["planned_bytes"]
    assert k["new_written_bytes"] == min(final["size_bytes"], final["allocated_bytes"])


@pytest.mark.heavy
def test_atomic_leaves_a_loadable_checkpoint_at_every_point(server, states, workbench):
    m = _progress_run(server, "atomic", workbench, states, crash.PROGRESS_POINTS)
    assert len(m["kills"]) == 3
    for k in m["kills"]:
        assert k["killed"]
        assert k["outcome"] in ("old_ok", "new_ok"), k
        assert k["step"] in (OLD, NEW)
        # whatever temp the kill left, recover removed exactly that
        assert [r["name"] for r in k["recovered"]] == k["stray_temp_files"]
        assert set(k["stray_temp_files"]) <= {"ckpt.pt.tmp"}
    assert not (workbench / "atomic").exists()  # run_mode cleans up


@pytest.mark.heavy
def test_fsync_before_flush_passes_every_kill_test(server, states, workbench):
    m = _progress_run(server, "fsync_before_flush", workbench, states, crash.PROGRESS_POINTS)
    assert [k["outcome"] in ("old_ok", "new_ok") for k in m["kills"]] == [True] * 3


def test_safetensors_kill_leaves_old_file_and_a_sparse_hidden_temp(server, states, workbench):
    m = _progress_run(server, "safetensors", workbench, states, (0.5,))
    (k,) = m["kills"]
    assert k["outcome"] == "old_ok" and k["step"] == OLD  # rename never happened
    (tmp,) = [f for f in k["files"] if f["temp"]]
    assert saver.SAFETENSORS_TEMP_RE.fullmatch(tmp["name"])
    # safetensors 0.8.0 ftruncates to the full size before writing: size says complete, blocks do not
    assert tmp["size_bytes"] == m["full_bytes"]
    # stopped after the write that took it past half: about half is allocated, the rest is a hole
    assert k["kill_method"] == "strace_stop"
    assert k["stopped_at"]["planned_bytes"] <= tmp["allocated_bytes"] < tmp["size_bytes"]
    assert 0.5 <= k["progress_at_kill_fraction"] < 0.99
    assert k["recovered"] == [{"name": tmp["name"], "size_bytes": tmp["size_bytes"]}]


def _decoys(d: Path) -> set[str]:
    names = {"ckpt.pt.tmp.bak", "other.pt.tmp", "ckpt.pt.old", ".tmpABCDEFG", ".tmp12345", "notes.txt"}
    for n in names:
        (d / n).write_bytes(b"keep me")
    return names


def test_recover_removes_the_killed_atomic_temp_and_nothing_else(server, states, workbench):
    path = workbench / "ckpt.pt"
    saver.atomic_save(states[OLD], path)
    decoys = _decoys(workbench)
    res = server.save("atomic", path, NEW, kill_at=0.5, full_bytes=path.stat().st_size)
    assert res["exit_code"] == -9
    assert saver.temp_path(path).exists()
    removed = saver.recover(path)
    assert [r["name"] for r in removed] == ["ckpt.pt.tmp"]
    assert removed[0]["size_bytes"] > 0
    assert {p.name for p in workbench.iterdir()} == decoys | {"ckpt.pt"}
    assert crash.classify(path, fmt="pt", old_step=OLD, new_step=NEW)["outcome"] == "old_ok"


def test_recover_removes_the_safetensors_hidden_temp_only_for_that_format(server, states, workbench):
    path = workbench / "ckpt.safetensors"
    saver.safetensors_save(states[OLD], path)
    decoys = _decoys(workbench)
    server.save("safetensors", path, NEW, kill_at=0.5, full_bytes=path.stat().st_size)
    hidden = [p.name for p in workbench.iterdir() if saver.SAFETENSORS_TEMP_RE.fullmatch(p.name)]
    assert len(hidden) == 1
    assert saver.recover(path, fmt="pt") == []  # the pt pattern never touches it
    assert [r["name"] for r in saver.recover(path, fmt="safetensors")] == hidden
    assert {p.name for p in workbench.iterdir()} == decoys | {"ckpt.safetensors"}


def test_classify_tells_missing_wrong_step_and_wrong_values(states, workbench):
    path = workbench / "ckpt.pt"
    assert crash.classify(path, fmt="pt", old_step=OLD, new_step=NEW)["outcome"] == "missing"
    torch.save(saver.make_state(4, 7), path)
    v = crash.classify(path, fmt="pt", old_step=OLD, new_step=NEW)
    assert (v["outcome"], v["step"]) == ("unexpected_step", 7)
    other = saver.make_state(STATE_MIB, OLD, seed=5)  # right step, other values
    torch.save(other, path)
    assert crash.classify(path, fmt="pt", old_step=OLD, new_step=NEW)["outcome"] == "old_ok"
    v = crash.classify(path, fmt="pt", old_step=OLD, new_step=NEW, states=states)
    assert (v["outcome"], v["error_kind"]) == ("corrupt", "values")


def test_classify_reports_a_truncated_safetensors_file(states, workbench):
    path = workbench / "ckpt.safetensors"
    saver.safetensors_save(states[NEW], path)
    assert (
        crash.classify(path, fmt="safetensors", old_step=OLD, new_step=NEW, states=states)["outcome"]
        == "new_ok"
    )
    os.truncate(path, path.stat().st_size // 2)
    v = crash.classify(path, fmt="safetensors", old_step=OLD, new_step=NEW)
    assert v["outcome"] == "corrupt" and v["step"] is None
    assert v["error"] and ":" in v["error"]
    with pytest.raises(ValueError, match="fmt must be"):
        crash.classify(path, fmt="zip", old_step=OLD, new_step=NEW)


def test_time_kill_records_its_delay_and_the_bytes_on_disk(server, states, workbench):
    m = crash.run_mode(
        server, "naive", workbench, states=states, progress_points=(), delays_fn=lambda s: [s / 2], repeats=2
    )
    assert len(m["kills"]) == 2
    for k in m["kills"]:
        assert k["kill_by"] == "time" and k["kill_after_s"] >= k["kill_point"]
        assert 0 <= k["new_written_bytes"] <= m["full_bytes"]
        if k["outcome"] == "corrupt":
            assert k["new_written_bytes"] < m["full_bytes"]


def test_time_delays_spread_inside_the_save_and_refuse_bad_settings():
    d = crash.time_delays(0.2, 4)
    assert d == sorted(d) and d[0] > 0 and d[-1] < 0.2 and len(d) == 4
    with pytest.raises(ValueError, match="crash_time_points must be > 0"):
        crash.time_delays(0.2, 0)


@pytest.mark.heavy
def test_saver_script_single_save_prints_ready_and_saves(workbench):
    path = workbench / "ckpt.pt"
    (workbench / "ckpt.pt.tmp").write_bytes(b"left by a killed save")
    out = subprocess.run(
        [sys.executable, "-m", crash.SAVER_MODULE, "atomic", str(path), "--step", "7", "--state-mib", "4"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0] == 'recovered [{"name": "ckpt.pt.tmp", "size_bytes": 21}]'
    assert out[1].startswith("ready ") and out[2].startswith("saved ")
    assert crash.classify(path, fmt="pt", old_step=6, new_step=7)["outcome"] == "new_ok"


def test_make_state_and_savers_refuse_bad_input(workbench):
    with pytest.raises(ValueError, match="state_mib must be a positive multiple of 4"):
        saver.make_state(6, 1)
    with pytest.raises(ValueError, match="mode must be one of"):
        saver.save_with_recovery("rsync", {}, workbench / "x.pt")
    with pytest.raises(ValueError, match="fmt must be"):
        saver.recover(workbench / "x.pt", fmt="zip")


@pytest.mark.heavy
def test_progress_kills_land_at_the_planned_write_beside_a_cpu_hog(states, workbench):
    """Two busy processes share the cores; every progress kill still stops at its planned write.

    A server of its own, planning both modes beside the hogs; they start once it serves (its start, a
    Python importing torch, is not what is tested, and would only keep them burning longer)."""
    with crash.SaverServer(STATE_MIB) as srv:
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            for mode in ("naive", "atomic"):
                m = _progress_run(srv, mode, workbench, states, crash.PROGRESS_POINTS)
                for k in m["kills"]:
                    assert k["kill_method"] == "strace_stop" and not k["save_completed"], k
                    written = k["progress_at_kill_fraction"] * m["full_bytes"]
                    assert written == k["stopped_at"]["planned_bytes"] >= k["kill_point"] * m["full_bytes"]
        finally:
            for h in hogs:
                h.kill()
                h.wait()


@pytest.mark.heavy
def test_without_strace_progress_kills_watch_the_file_and_say_so(states, workbench, monkeypatch):
    monkeypatch.setattr(crash.killpoint, "unusable", lambda: "strace is not installed")
    with crash.SaverServer(STATE_MIB) as srv:
        m = _progress_run(srv, "atomic", workbench, states, (0.5,))
        assert srv.stop_unusable == "strace is not installed"
    (k,) = m["kills"]
    assert k["kill_method"] == "poll" and k["stopped_at"] is None
    assert k["outcome"] in ("old_ok", "new_ok")


@pytest.mark.heavy
def test_a_tracer_that_cannot_attach_falls_back_to_watching(states, workbench, monkeypatch):
    """strace refused (as ptrace is in some containers): the waiting saver is released and watched."""
    monkeypatch.setattr(crash.killpoint, "record_args", lambda out: ["--no-such-strace-option"])
    with crash.SaverServer(STATE_MIB) as srv:
        m = _progress_run(srv, "naive", workbench, states, (0.5,))
        assert srv.stop_unusable and "could not attach" in srv.stop_unusable
    (k,) = m["kills"]
    assert k["kill_method"] == "poll"


@pytest.mark.heavy
def test_the_stop_point_is_the_first_write_that_reaches_the_target():
    trace = "\n".join(
        [
            '41 openat(AT_FDCWD</wb>, "/wb/ckpt.pt.tmp", O_WRONLY|O_CREAT) = 3</wb/ckpt.pt.tmp>',
            '41 write(1<pipe:[7]>, "x", 1) = 1',
            '41 write(3</wb/ckpt.pt.tmp>, "PK"..., 100) = 100',
            "41 writev(3</wb/ckpt.pt.tmp>, [...], 2) = 400",
            '41 write(3</wb/ckpt.pt.tmp>, "PK"..., 500) = 500',
            "41 fsync(3</wb/ckpt.pt.tmp>) = 0",
        ]
    )
    plan = crash.killpoint.parse_plan(trace, 41, lambda p: p == "/wb/ckpt.pt.tmp")
    # the write to stdout counts among the saver's write calls, so the file's first write is write #2
    assert [(p.syscall, p.ordinal, p.planned_bytes) for p in plan.points] == [
        ("write", 2, 100),
        ("writev", 1, 500),
        ("write", 3, 1000),
    ]
    assert plan.stop_for(100).ordinal == 2 and plan.stop_for(101).syscall == "writev"
    assert plan.stop_for(5000) == plan.points[-1]
    other_thread = trace.replace("41 writev", "42 writev")
    with pytest.raises(crash.killpoint.KillpointError, match="thread 42"):
        crash.killpoint.parse_plan(other_thread, 41, lambda p: p == "/wb/ckpt.pt.tmp")
