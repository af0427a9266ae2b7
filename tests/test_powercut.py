"""The power-cut step on real recordings: strace, real files, real torch and safetensors loads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from disklab import report
from disklab.sections import powercut as section_mod
from disklab_host import registry
from disklab_host.checkpoint import saver
from disklab_host.common.units import MIB
from disklab_host.powercut import check as pc_check
from disklab_host.powercut import recipes as pc_recipes
from disklab_host.powercut import record as pc_record
from disklab_host.powercut import simulate as powercut
from disklab_host.powercut import states as pc_states
from disklab_host.steps import powercut as powercut_step

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(pc_record.find_strace() is None, reason="strace is not installed")


@pytest.fixture(scope="module")
def step_run(tmp_path_factory) -> tuple[dict, dict]:
    """The quick-profile step, once for the module (every recipe recorded for real), and what it recorded of
    each recipe: ``{spec: (Recording, the real files its saves left)}``, kept as simulate.record returned
    them (the step removes its files once a recipe is judged)."""
    recorded = {}
    real_record = powercut.record

    def record(spec, fmt, base, state_mib, **limits):
        rec, facts = real_record(spec, fmt, base, state_mib, **limits)
        recorded[spec] = (rec, pc_record.snapshot(base / "ckpt_dir")[0])
        return rec, facts

    cfg = {"sizes": registry.resolve("quick"), "system": "Linux"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(powercut, "record", record)  # the real record, its result kept
        section = powercut_step.run(cfg, tmp_path_factory.mktemp("powercut"))
    return section, recorded


@pytest.fixture(scope="module")
def section(step_run) -> dict:
    return step_run[0]


def _recipe(section: dict, name: str) -> dict:
    return next(r for r in section["recipes"] if r["name"] == name)


def _verdicts(section: dict, name: str) -> tuple[str, str]:
    m = _recipe(section, name)["models"]
    return m["process_kill"]["verdict"], m["power_cut"]["verdict"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, expected",
    [
        ("naive", ("unsafe", "unsafe")),
        ("rename_no_fsync", ("safe", "unsafe")),
        ("no_dir_fsync", ("safe", "rolled_back")),
        ("atomic", ("safe", "safe")),
        ("fsync_before_flush", ("safe", "unsafe")),
    ],
)
def test_lesson_verdicts_from_real_recordings(section, name, expected):
    assert _verdicts(section, name) == expected
    assert _recipe(section, name)["agrees_with_lesson"] is True


@pytest.mark.slow
def test_shipped_recipes_pass_well_within_the_default_limits(section):
    """The lab step calls analyse with the defaults; every recipe must fit them with room to spare."""
    for r in section["recipes"]:
        rec = r["recording"]
        assert rec["written_bytes"] < powercut.DEFAULT_MAX_WRITE_MIB * MIB / 4, r["name"]
        assert 0 < rec["save_s"] < powercut.DEFAULT_TIMEOUT_S / 4, r["name"]


@pytest.mark.slow
def test_no_dir_fsync_is_never_corrupt_and_rolls_back_only_after_return(section):
    pc = _recipe(section, "no_dir_fsync")["models"]["power_cut"]
    assert pc["counts"]["corrupt"] == pc["counts"]["missing"] == 0
    rolled = [s for s in pc["samples"] if s[3] == "rolled_back"]
    assert rolled and all(s[1] for s in rolled)  # only once the save had returned
    assert pc["first_rolled_back"]["call"].startswith("rename")


@pytest.mark.slow
def test_break_it_1_leaves_its_tail_unsynced_and_torch_save_masks_it(section):
    """Break It 1 leaves bytes in Python's buffer at the fsync; around torch.save(f) it does not."""
    r3 = _recipe(section, "fsync_before_flush")
    assert r3["recording"]["writes_after_last_fsync"] == 1
    first = r3["models"]["power_cut"]["first_unsafe"]
    assert first["call"].startswith("rename") and first["outcome"] == "corrupt"
    r7 = _recipe(section, "fsync_before_flush_torch")
    assert r7["recording"]["writes_after_last_fsync"] == 0  # torch.save flushed f before the fsync
    assert _verdicts(section, "fsync_before_flush_torch") == ("safe", "safe")


@pytest.mark.slow
def test_unsafe_points_name_the_call_and_why(section):
    first = _recipe(section, "rename_no_fsync")["models"]["power_cut"]["first_unsafe"]
    assert first["call"].startswith("rename('ckpt.pt.tmp', 'ckpt.pt')")
    assert first["state"] in ("metadata_only",) or first["state"].startswith("torn_")
    assert "not persisted" in first["why"] and first["error"]
    naive = _recipe(section, "naive")["models"]["process_kill"]["first_unsafe"]
    assert naive["call_index"] == 0 and "O_TRUNC" in naive["call"] and naive["ckpt_bytes"] == 0


@pytest.mark.slow
def test_safetensors_verdict_follows_its_calls(section):
    r6 = _recipe(section, "safetensors")
    counts = r6["recording"]["syscall_counts"]
    synced = counts.get("fsync", 0) + counts.get("fdatasync", 0)
    assert counts.get("renameat", 0) + counts.get("rename", 0) >= 1
    assert _verdicts(section, "safetensors") == ("safe", "unsafe" if synced == 0 else "safe")


@pytest.mark.slow
def test_section_matches_schema_and_renders(section, tmp_path):
    schema = json.loads((REPO / "src/disklab/schema/experiments/powercut.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(section)
    results = {"experiments": {"powercut": section}}
    x = section_mod.build(section, results, tmp_path)
    env = report.environment()  # the real report environment (StrictUndefined, trim_blocks)
    text = env.get_template("sections/powercut.md.j2").render(section=section, view=x, results=results)
    naive_pc = _recipe(section, "naive")["models"]["power_cut"]
    assert f"| {naive_pc['counts']['corrupt']} |" in text
    assert "rename('ckpt.pt.tmp', 'ckpt.pt')" in text
    assert "simulated, not real" in text
    assert "O_WRONLY\\|O_CREAT\\|O_TRUNC" in text  # pipes escaped inside the markdown table
    assert f"{section['state_mib']} MiB" in text


@pytest.fixture(scope="module")
def atomic_recording(step_run):
    """The step's own recording of recipe:atomic (the quick profile's state), and the real files it left."""
    section, recorded = step_run
    assert section["state_mib"] == 4
    return recorded["recipe:atomic"]


@pytest.mark.slow
def test_replay_equals_the_real_files_byte_for_byte(atomic_recording):
    rec, real = atomic_recording
    final = pc_states.enumerate_states(rec.ops, len(rec.calls), rec.returned, pc_states.PROCESS_KILL)[-1]
    assert pc_states.apply_ops(rec.initial, rec.initial_inodes, rec.ops, final.applied) == real
    assert set(real) == {"ckpt.pt"} and real["ckpt.pt"] != rec.initial["ckpt.pt"]


@pytest.mark.slow
def test_fsync_that_covers_nothing_turns_atomic_unsafe(atomic_recording, tmp_path):
    """Break the model on purpose: if fsync made nothing durable, the full atomic save must fail."""
    rec, _ = atomic_recording
    broken = pc_states.Model("fsync-covers-nothing", "broken on purpose", lambda barrier, op: False)
    old, new = saver.make_state(4, powercut.OLD_STEP), saver.make_state(4, powercut.NEW_STEP)
    args = dict(ckpt="ckpt.pt", fmt="torch", old_state=old, new_state=new, scratch=tmp_path / "s", max_torn=8)
    assert pc_check.check_model(rec, pc_states.POWER_CUT, **args)["verdict"] == "safe"
    result = pc_check.check_model(rec, broken, **args)
    assert result["verdict"] == "unsafe" and result["counts"]["corrupt"] > 0


@pytest.mark.slow
def test_half_written_state_fails_like_a_real_sigkill(tmp_path):
    """Model: process-kill after the first data call of an 8 MiB naive save. Reality: SIGKILL there."""
    rec, _ = powercut.record("recipe:naive", "torch", tmp_path / "model", 8)
    data_calls = [c for c in rec.calls if any(op.kind == "write" for op in c.ops)]
    assert len(data_calls) >= 2
    half = data_calls[0]
    state = pc_states.states_at(rec.ops, half.index, False, pc_states.PROCESS_KILL)[0]
    model_file = pc_states.apply_ops(rec.initial, rec.initial_inodes, rec.ops, state.applied)["ckpt.pt"]
    everything = frozenset(range(len(rec.ops)))
    final_size = len(pc_states.apply_ops(rec.initial, rec.initial_inodes, rec.ops, everything)["ckpt.pt"])
    assert 0.3 < len(model_file) / final_size < 0.7

    # The same point for real: SIGKILL on entering the next data call to ckpt.pt (strace fault injection).
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    saver.naive_save(saver.make_state(8, powercut.OLD_STEP), real_dir / "ckpt.pt")
    nxt = data_calls[1].name
    nth = sum(1 for c in data_calls[:2] if c.name == nxt)
    child = [
        sys.executable, "-m", "disklab_host.powercut.simulate", "_traced", "--spec", "recipe:naive",
        "--dir", str(real_dir), "--ckpt", "ckpt.pt", "--state-mib", "8", "--step", str(powercut.NEW_STEP),
    ]  # fmt: skip
    cmd = [
        pc_record.find_strace(), "-f", "-qq", "-o", str(tmp_path / "kill.strace"), "-e", f"trace={nxt}",
        "-e", f"inject={nxt}:signal=KILL:when={nth}", "-P", str(real_dir / "ckpt.pt"), "--", *child,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode in (-9, 128 + 9), proc.stderr  # strace re-raises the SIGKILL
    real_file = (real_dir / "ckpt.pt").read_bytes()
    assert real_file == model_file

    old, new = saver.make_state(8, powercut.OLD_STEP), saver.make_state(8, powercut.NEW_STEP)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "ckpt.pt").write_bytes(model_file)
    modelled = pc_check.load_verdict(tmp_path / "m" / "ckpt.pt", fmt="torch", old_state=old, new_state=new)
    really = pc_check.load_verdict(real_dir / "ckpt.pt", fmt="torch", old_state=old, new_state=new)
    assert modelled == really and modelled[0] == "corrupt"


@pytest.mark.slow
def test_the_recipes_are_recorded_side_by_side_and_kept_in_their_order(section):
    assert [r["name"] for r in section["recipes"]] == [r.name for r in pc_recipes.RECIPES]
    assert section["workers"] == powercut_step.workers() >= 1
    assert section["strace_seccomp_bpf"] is pc_record.takes_seccomp_bpf(pc_record.find_strace())
    assert [powercut_step.workers(c) for c in (1, 2, 3, 64)] == [1, 2, 3, powercut_step.MAX_WORKERS]


def test_seccomp_bpf_leaves_the_trace_as_it_was(tmp_path):
    """The same program traced with and without --seccomp-bpf: the same lines, addresses aside."""
    strace = pc_record.find_strace()
    if not pc_record.takes_seccomp_bpf(strace):
        pytest.skip("this strace does not take --seccomp-bpf")
    prog = (
        "import os\nfd = os.open('f.tmp', os.O_WRONLY | os.O_CREAT, 0o644)\nos.write(fd, b'x' * 10000)\n"
        "os.fsync(fd)\nos.close(fd)\nos.rename('f.tmp', 'f')\n"
    )
    traces = []
    for seccomp in (True, False):
        trace = tmp_path / f"trace-{seccomp}.txt"
        argv = pc_record.strace_argv(strace, trace, 4096, [sys.executable, "-S", "-c", prog])
        assert "--seccomp-bpf" in argv
        if not seccomp:
            argv.remove("--seccomp-bpf")
        subprocess.run(argv, cwd=tmp_path, check=True)
        lines = trace.read_text().splitlines()
        traces.append([re.sub(r"0x[0-9a-f]{8,}", "ADDR", re.sub(r"^\d+\s+", "", ln)) for ln in lines])
    assert traces[0] == traces[1]
    assert any(ln.startswith("fsync(") for ln in traces[0]) and any("rename" in ln for ln in traces[0])


@pytest.mark.heavy
def test_a_stop_from_another_thread_kills_the_traced_process(tmp_path):
    """Limits.stop set while a traced process runs: KeyboardInterrupt within a second, the process gone."""
    pidfile = tmp_path / "pid"
    argv = ["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"]
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pc_record.run_traced(
            argv, cwd=tmp_path, trace_file=tmp_path / "t.txt", string_limit_bytes=4096,
            limits=pc_record.Limits(timeout_s=60, stop=stop),
        )  # fmt: skip
    assert time.monotonic() - start < 10
    pid = int(pidfile.read_text())
    # the sleep was killed with its group: gone, or a zombie its reaper has not collected yet
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail(f"the traced process {pid} outlived the stop")


def test_step_not_run_without_strace(monkeypatch, workbench):
    monkeypatch.setenv("PATH", str(workbench))  # a PATH with no strace on it
    out = powercut_step.run({"sizes": registry.resolve("quick"), "system": "Linux"}, workbench)
    assert out == {
        "status": "not_run",
        "reason": "not available (no strace): strace is not installed on this host",
    }
    mac = powercut_step.run({"sizes": registry.resolve("quick"), "system": "Darwin"}, workbench)
    assert mac["status"] == "not_run" and mac["reason"].startswith("not available (no strace)")


def test_section_builder_tolerates_not_run(tmp_path):
    assert section_mod.build({"status": "not_run", "reason": "x"}, {}, tmp_path) == {"ok": False}
    assert pc_recipes.recipe_named("atomic").number == 5
    with pytest.raises(ValueError, match="recipe must be one of"):
        pc_recipes.recipe_named("nope")
