"""The savers' pieces on hand-made input: the judge, the mechanisms, the names, the recorder's per-process
file tables, the kill plan and the command line's refusals. tests/test_savers.py runs the savers for real.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from disklab import powercut_cli
from disklab_host.powercut import record as pc_record
from disklab_host.powercut.states import Op, apply_ops
from disklab_host.savers import judge, kill, mechanism, model, registry


def _h(text: str) -> str:
    return '"' + "".join(f"\\x{b:02x}" for b in text.encode()) + '"'


# --- the judge --------------------------------------------------------------------------------------


def _states():
    return model.state(1, 1), model.state(1, 2)


def test_a_load_of_either_state_alone_is_that_state():
    old, new = _states()
    assert judge.compare(dict(new), old, new)["outcome"] == "new_ok"
    assert judge.compare(dict(old), old, new)["outcome"] == "old_ok"


def test_whole_tensors_of_both_states_are_mixed_not_corrupt():
    old, new = _states()
    names = list(new)
    found = {**new, names[0]: old[names[0]]}
    got = judge.compare(found, old, new)
    assert got["outcome"] == "mixed"
    assert got["old"] == [names[0]] and names[1] in got["new"]
    assert "of the earlier state" in judge.describe(got)


def test_rows_of_one_tensor_from_two_ranks_are_mixed():
    """DCP's Shard(0): rank 0 wrote the new rows, rank 1's rows are still the earlier step's."""
    old, new = _states()
    name = "lm_head.weight"
    half = new[name].shape[0] // 2
    torn = torch.cat([new[name][:half], old[name][half:]])
    got = judge.compare({**new, name: torn}, old, new)
    assert got["outcome"] == "mixed" and got["both"] == [name]
    assert "part new, part earlier" in judge.describe(got)


def test_a_value_of_neither_state_is_corrupt_though_it_loads():
    old, new = _states()
    name = "model.norm.weight"
    zeroed = new[name].clone()
    zeroed[0] = 0.0
    got = judge.compare({**new, name: zeroed}, old, new)
    assert got["outcome"] == "corrupt" and got["neither"] == [name]
    assert judge.compare({k: v for k, v in new.items() if k != name}, old, new)["outcome"] == "corrupt"


def test_a_load_that_raises_is_judged_not_raised():
    old, new = _states()

    def no_dir():
        raise FileNotFoundError("no directory new")

    def broken():
        raise RuntimeError("PytorchStreamReader failed reading zip archive\nmore")

    assert judge.judge_load(no_dir, old, new)["outcome"] == "missing"
    got = judge.judge_load(broken, old, new)
    assert got["outcome"] == "corrupt" and got["error"].startswith("RuntimeError: PytorchStreamReader")


def test_the_model_is_llama_shaped_and_seeded():
    assert model.layers_for(1) == 1 and model.layers_for(8) == 2
    a, b = model.state(1, 1), model.state(1, 1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    other = model.state(1, 2)
    assert all(not torch.eq(a[k], other[k]).any() for k in a)  # every element tells its step
    assert set(a) == set(model.shapes(1)) and "model.layers.0.self_attn.q_proj.weight" in a
    assert model.state_bytes(1) == sum(t.numel() * 4 for t in a.values())


# --- names ------------------------------------------------------------------------------------------


def test_saver_names_and_rank_counts_are_refused_naming_the_known_ones():
    assert registry.parse("dcp").ranks == 2 and registry.parse("dcp:4").label == "dcp:4"
    assert registry.parse("transformers").ranks is None
    with pytest.raises(
        ValueError, match=r"lab_run_savers: unknown saver 'deepspeed'; known: dcp, transformers"
    ):
        registry.parse("deepspeed")
    with pytest.raises(ValueError, match="dcp takes 2 or 4 ranks"):
        registry.parse("dcp:3")
    with pytest.raises(ValueError, match="takes no rank count"):
        registry.parse("transformers:2")
    with pytest.raises(ValueError, match="must be a list"):
        registry.check_settings({"savers": 3})
    # -e 'lab_run_savers=[dcp,transformers]' is a string to Ansible; its type: list splits it at commas
    for given in ("[dcp,transformers]", ["[dcp", "transformers]"], "dcp, transformers"):
        assert [s.label for s in registry.check_settings({"savers": given})] == ["dcp:2", "transformers"]
    assert [s.label for s in registry.check_settings({"savers": ["dcp", "dcp:2", "lightning"]})] == [
        "dcp:2", "lightning"]  # fmt: skip


# --- mechanisms -------------------------------------------------------------------------------------


def test_dcps_metadata_dance_is_named_from_its_calls():
    """The calls of dcp.save over an earlier checkpoint: shards rewritten in place, .metadata removed before
    .metadata.tmp is renamed over it, and no directory fsync."""
    initial = {"ckpt/.metadata": b"m", "ckpt/__0_0.distcp": b"s0"}
    ops = [
        Op(0, "truncate", ino=1, size=0),
        Op(1, "write", ino=1, data=b"S0"),
        Op(2, "fsync", ino=1),
        Op(3, "create", ino=2, path="ckpt/.metadata.tmp"),
        Op(4, "fsync", ino=2),
        Op(5, "write", ino=2, data=b"M"),
        Op(6, "unlink", path="ckpt/.metadata"),
        Op(7, "rename", path="ckpt/.metadata.tmp", dst="ckpt/.metadata"),
    ]
    found = mechanism.find(ops, initial, "ckpt")
    kinds = [m["kind"] for m in found]
    assert kinds == ["remove_before_rename", "in_place_rewrite", "data_after_fsync", "no_dir_fsync"]
    assert "ckpt/.metadata is removed before ckpt/.metadata.tmp is renamed over it" in found[0]["text"]
    assert "ckpt/__0_0.distcp held the earlier checkpoint" in found[1]["text"]
    assert "ckpt/.metadata is written after its last fsync" in found[2]["text"]
    assert (
        "the rename of ckpt/.metadata.tmp to ckpt/.metadata is not followed by an fsync of ckpt/"
        in found[3]["text"]
    )
    fix = mechanism.suggestion(found, {"kill": "unsafe", "power_cut": "unsafe"})
    assert "fsync ckpt/ after the save returns" in fix
    assert mechanism.suggestion(found, {"kill": "safe", "power_cut": "safe"}) is None


def test_a_save_that_fsyncs_everything_shows_no_mechanism():
    ops = [
        Op(0, "create", ino=0, path="new/a"),
        Op(1, "write", ino=0, data=b"x"),
        Op(2, "fsync", ino=0),
        Op(3, "dirsync", path="new"),
    ]
    assert mechanism.find(ops, {}, "new") == []


# --- the recorder: one file table per process -------------------------------------------------------


def test_two_ranks_with_the_same_fd_number_write_their_own_files(tmp_path):
    """Two processes of a launcher, each with its fd 9 on its own shard: a fork copies the table, so their
    writes land in their own files (one shared table put rank 1's bytes in rank 0's file)."""
    d = f"{tmp_path}/ckpt"
    lines = [
        "100 vfork() = 101",
        "100 vfork() = 102",
        f"101 openat(AT_FDCWD, {_h(f'{tmp_path}/.disklab-powercut-begin')}, O_RDONLY) = -1 ENOENT (x)",
        f"101 openat(AT_FDCWD, {_h(f'{d}/__0_0.distcp')}, O_WRONLY|O_CREAT|O_TRUNC, 0666) = 9",
        f"102 openat(AT_FDCWD, {_h(f'{d}/__1_0.distcp')}, O_WRONLY|O_CREAT|O_TRUNC, 0666) = 9",
        f"101 write(9, {_h('rank0')}, 5) = 5",
        f"102 write(9, {_h('rank1')}, 5) = 5",
        "103 write(9, " + _h("?") + ", 1) = 1",  # a thread of 101 (below): its table is 101's
        "101 close(9) = 0",
        "102 close(9) = 0",
        f"101 openat(AT_FDCWD, {_h(f'{tmp_path}/.disklab-powercut-end')}, O_RDONLY) = -1 ENOENT (x)",
    ]
    lines.insert(2, "101 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_THREAD, exit_signal=0}, 88) = 103")
    rec = pc_record.parse_trace(lines, root=tmp_path, cwd=tmp_path, initial={}, initial_dirs={".", "ckpt"})
    files = apply_ops(rec.initial, rec.initial_inodes, rec.ops, frozenset(range(len(rec.ops))))
    assert files == {"ckpt/__0_0.distcp": b"rank0?", "ckpt/__1_0.distcp": b"rank1"}
    assert pc_record.family(lines) == {101: (100, False), 102: (100, False), 103: (101, True)}


def test_a_temp_file_made_with_o_excl_outside_then_reopened_is_known(tmp_path):
    """Lightning's fsspec transaction: mkstemp (O_CREAT|O_EXCL), closed, opened again with O_TRUNC, written,
    then renamed into the checkpoint's directory."""
    tmp = f"{tmp_path}/outside-tmp"
    lines = [
        f"1 openat(AT_FDCWD, {_h(f'{tmp_path}/d/.disklab-powercut-begin')}, O_RDONLY) = -1 ENOENT (x)",
        f"1 openat(AT_FDCWD, {_h(tmp)}, O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, 0600) = 3",
        "1 close(3) = 0",
        f"1 openat(AT_FDCWD, {_h(tmp)}, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 3",
        f"1 write(3, {_h('weights')}, 7) = 7",
        "1 close(3) = 0",
        f"1 rename({_h(tmp)}, {_h(f'{tmp_path}/d/ckpt.pt')}) = 0",
        f"1 openat(AT_FDCWD, {_h(f'{tmp_path}/d/.disklab-powercut-end')}, O_RDONLY) = -1 ENOENT (x)",
    ]
    root = tmp_path / "d"
    root.mkdir()
    rec = pc_record.parse_trace(lines, root=root, cwd=root, initial={}, initial_dirs={"."})
    assert rec.unplaced == []
    assert apply_ops({}, {}, rec.ops, frozenset(range(len(rec.ops)))) == {"ckpt.pt": b"weights"}


# --- the kill plan ----------------------------------------------------------------------------------


def test_the_kill_plan_counts_each_call_in_its_own_process(tmp_path):
    target = tmp_path / "ckpt"
    shard0, shard1, meta = (f"{target}/{n}" for n in ("__0_0.distcp", "__1_0.distcp", ".metadata"))
    hx = _h  # paths and strings are hex in a -xx trace

    def fd(n: int, path: str) -> str:
        return f"{n}<" + hx(path)[1:-1] + ">"

    trace = "\n".join(
        [
            f"7 write({fd(1, '/dev/pts/0')}, {hx('log')}, 3) = 3",  # the launcher's own write: not a point
            f"8 write({fd(9, shard0)}, {hx('a' * 10)}, 10) = 10",
            f"9 write({fd(9, shard1)}, {hx('b' * 10)}, 10) = 10",
            f"8 write({fd(9, shard0)}, {hx('c' * 80)}, 80) = 80",
            f"8 unlink({hx(meta)}) = 0",
            f"8 rename({hx(meta + '.tmp')}, {hx(meta)}) = 0",
        ]
    )
    points = kill.plan(trace, tmp_path, target)
    by_why = {p.why: p for p in points}
    # -P: only calls on the directory's files count, and each process counts its own
    assert (
        by_why["10% of the bytes written"].ordinal == 1
        and by_why["10% of the bytes written"].syscall == "write"
    )
    assert by_why["50% of the bytes written"].ordinal == 2  # process 8's second write on a shard
    assert [p.syscall for p in points] == ["write", "write", "unlink", "rename"]
    assert points[0].paths == tuple(sorted([shard0, shard1, meta, meta + ".tmp"]))
    assert points[-1].text == "rename(ckpt/.metadata.tmp, ckpt/.metadata) = 0"


# --- the command line -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--saver", "deepspeed"], "unknown saver 'deepspeed'"),
        (["--saver", "dcp:3"], "dcp takes 2 or 4 ranks"),
        ([], "give either FILE.py:FUNC or --saver"),
        (["x.py:f", "--saver", "dcp"], "give either FILE.py:FUNC or --saver"),
        (["--saver", "dcp", "--real-fs", "ext4"], "--real-fs takes FILE.py:FUNC only"),
    ],
)
def test_disklab_powercut_refuses_a_bad_saver_in_one_line(argv, said, capsys):
    assert powercut_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1


def test_the_test_venvs_transformers_is_the_savers_pin():
    """One version of transformers: the saver's pin (registry) is the one the test venv installs."""
    import tomllib

    pins = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    test_pins = [p for p in pins["project"]["optional-dependencies"]["test"] if p.startswith("transformers")]
    assert test_pins == list(registry.BY_NAME["transformers"].pins)


def test_provision_refuses_an_unknown_saver_before_any_install():
    from disklab_host.provision import savers as provision_savers
    from disklab_host.provision.errors import Refused

    assert provision_savers.check_savers(["dcp:4", "transformers", "dcp"]) == ["dcp", "transformers"]
    with pytest.raises(Refused, match="lab_venv_savers: unknown saver 'deepspeed'; known: dcp"):
        provision_savers.check_savers(["deepspeed"])


def test_a_temp_file_removed_again_and_a_sync_leave_nothing_to_lose():
    ops = [
        Op(0, "create", ino=0, path="new/scratch"),
        Op(1, "write", ino=0, data=b"x"),
        Op(2, "unlink", path="new/scratch"),  # a temp file, gone before the save returns
        Op(3, "create", ino=1, path="new/a"),
        Op(4, "write", ino=1, data=b"y"),
        Op(5, "sync"),  # sync(2): the file and its directory entry
    ]
    assert mechanism.find(ops, {}, "new") == []


def test_provision_reads_every_pinned_distribution_of_a_saver(tmp_path):
    """A saver is held when every one of its pins is (the Trainer needs accelerate beside transformers);
    one whose module does not import is not_run with the import's own last line."""
    import sys

    from disklab_host.provision import savers as provision_savers

    python = Path(sys.executable)
    found = provision_savers._import(python, registry.BY_NAME["dcp"])
    assert found["status"] == "ok" and found["versions"]["torch"].startswith("2.13.0")
    ghost = registry.Saver(
        "ghost", "a saver", ("ghost==1.0",), ("disklab_no_such_module",), "ghost.save(DIR)"
    )
    missing = provision_savers._import(python, ghost)
    assert missing["status"] == "not_run" and "No module named 'disklab_no_such_module'" in missing["reason"]
