"""The ceiling step on a real file: cold after eviction (proven by residency and the device's reads), one
stream and in parallel with O_DIRECT, and warm; its settings, its refusals, and how the report reads it."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from disklab import figures, plotting, report, schemas
from disklab.sections import ceiling as section_mod
from disklab.sections import evidence
from disklab_host import registry
from disklab_host.common import sampling
from disklab_host.steps import ceiling

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "src/disklab/schema/experiments/ceiling.schema.json").read_text())
MIB = 1 << 20
# 8 MiB in 1 MiB blocks: 4 streams get 2 blocks each, so every stream reads more than one call and the
# slices meet at block edges; the proof (residency, device bytes) does not depend on the size.
SIZES = {"ceiling_mib": 8, "ceiling_streams": 4, "ceiling_block_bytes": MIB, "ceiling_direct": 1}


def _render(section: dict, x: dict) -> str:
    return (
        report.environment().get_template("sections/ceiling.md.j2").render(section=section, view=x, run=None)
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One real ceiling step on the test workbench (the module's tests read it; it takes seconds)."""
    workdir = tmp_path_factory.mktemp("ceiling")
    section = ceiling.run({"sizes": SIZES, "system": "Linux", "become_allowed": False}, workdir)
    return section, workdir


def test_ceiling_reads_cold_and_warm_and_leaves_nothing(measured):
    section, workdir = measured
    schemas.validator(SCHEMA).validate(json.loads(json.dumps(section)))
    assert section["file_bytes"] == 8 << 20 and len(section["cold_runs"]) == ceiling.REPEATS
    for run in section["cold_runs"]:
        assert run["eviction_method"] == "fadvise_dontneed" and run["before"]["fraction"] <= 0.01
        assert run["bytes"] == 8 << 20
        if run["device_read_bytes"] is not None:  # a workbench with a block device
            assert run["device_read_bytes"] >= run["bytes"] and run["proven"]
    for run in section["warm_runs"]:
        assert run["verified"] and run["before"]["fraction"] >= 0.99
        assert run["io"]["process"]["read_bytes"] == 0  # served by the page cache
    assert section["cold_mib_s"]["n"] == ceiling.REPEATS and section["warm_mib_s"]["n"] == ceiling.REPEATS
    assert [p.name for p in workdir.iterdir()] == ["cold_copies"]
    drawn = []
    with pytest.MonkeyPatch.context() as mp:  # the picture is drawn from the run table's own reads
        mp.setattr(plotting, "draw_once", lambda path, data, draw, *code: drawn.append(data))
        x = section_mod.build(section, {"experiments": {"ceiling": section}, "facts": {}}, workdir)
    assert x["ok"] and x["cold"]["median"] == section["cold_mib_s"]["median"] and len(x["runs"]) == 9
    assert x["plot"] == f"{workdir.name}/ceiling_runs.png"
    assert sorted(map(tuple, drawn[0])) == sorted((r["kind"], r["mib_s"], r["good"]) for r in x["runs"])


def test_the_parallel_ceiling_reads_the_whole_file_direct_in_streams_and_proves_it_cold(measured):
    section, _ = measured
    par = section["parallel"]
    assert par["status"] == "ok", par
    assert (par["streams"], par["block_bytes"], par["direct_io"]) == (4, MIB, "O_DIRECT")
    assert len(par["cold_runs"]) == ceiling.REPEATS
    for run in par["cold_runs"]:
        assert run["bytes"] == 8 << 20 and run["streams_used"] == 4
        assert run["before"]["fraction"] <= 0.01
        assert run["after"]["fraction"] <= 0.01  # O_DIRECT bypassed the page cache: nothing left behind
        assert run["io"]["process"]["read_bytes"] >= 8 << 20  # the storage layer fetched every byte
        assert run["io"]["faults"]["minor"] < 64  # buffers touched before the clock: no fault per page
        if run["device_read_bytes"] is not None:
            assert run["device_read_bytes"] >= run["bytes"] and run["proven"]
    if all(r["proven"] for r in par["cold_runs"]):
        assert par["cold_mib_s"]["n"] == ceiling.REPEATS


def test_the_slices_cover_the_file_once_in_whole_blocks():
    assert ceiling.slices(8 * MIB, 4, MIB) == [(0, 2 * MIB), (2 * MIB, 4 * MIB), (4 * MIB, 6 * MIB),
                                             (6 * MIB, 8 * MIB)]  # fmt: skip
    # 5 blocks over 4 streams: 2 blocks a slice, so 3 slices, the last one block short
    assert ceiling.slices(5 * MIB, 4, MIB) == [(0, 2 * MIB), (2 * MIB, 4 * MIB), (4 * MIB, 5 * MIB)]
    assert ceiling.slices(MIB, 8, MIB) == [(0, MIB)]


def test_a_filesystem_that_refuses_o_direct_leaves_the_parallel_ceiling_not_run(tmp_path, monkeypatch):
    # tmpfs on this machine's kernel (6.18) accepts O_DIRECT, so the refusal is injected: EINVAL from
    # open(2) with O_DIRECT, as tmpfs and some FUSE filesystems answer.
    real_open = os.open

    def refusing_open(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", refusing_open)
    sizes = {**SIZES, "ceiling_mib": 2}  # 2 MiB: only the not_run path and the single stream matter here
    section = ceiling.run({"sizes": sizes, "system": "Linux", "become_allowed": False}, tmp_path)
    schemas.validator(SCHEMA).validate(json.loads(json.dumps(section)))
    par = section["parallel"]
    assert par["status"] == "not_run" and "refused O_DIRECT (EINVAL" in par["reason"]
    assert "single-stream ceiling was measured" in par["reason"] and par["streams"] == 4
    assert section["cold_mib_s"]["n"] == ceiling.REPEATS  # the single stream still measured
    x = section_mod.build(section, {"experiments": {"ceiling": section}, "facts": {}}, tmp_path)
    md = _render(section, x)
    assert "| cold ceiling, parallel (4 streams of 1.00 MiB O_DIRECT reads) | n/a (not run: the " in md


def test_a_file_of_fewer_blocks_than_streams_says_how_many_streams_read_it(tmp_path):
    # 4 MiB in 4 MiB blocks (the test fleet's tiny size with the default block): one slice, one stream
    sizes = {**SIZES, "ceiling_mib": 4, "ceiling_block_bytes": 4 * MIB}
    section = ceiling.run({"sizes": sizes, "system": "Linux", "become_allowed": False}, tmp_path)
    assert {r["streams_used"] for r in section["parallel"]["cold_runs"]} == {1}
    x = section_mod.build(section, {"experiments": {"ceiling": section}, "facts": {}}, tmp_path)
    assert "In blocks of 4.00 MiB this file made only 1 slice(s), so only 1 stream(s) read it" in _render(
        section, x
    )


def test_a_parallel_read_that_fails_costs_the_single_stream_nothing(tmp_path, monkeypatch):
    def failing(*a, **k):
        raise OSError(errno.EIO, "Input/output error")  # a fault we cannot cause: injected

    monkeypatch.setattr(ceiling, "parallel_read", failing)
    sizes = {**SIZES, "ceiling_mib": 2}  # 2 MiB: the failure path only
    section = ceiling.run({"sizes": sizes, "system": "Linux", "become_allowed": False}, tmp_path)
    schemas.validator(SCHEMA).validate(json.loads(json.dumps(section)))
    assert section["parallel"]["status"] == "failed" and "Input/output error" in section["parallel"]["error"]
    assert section["cold_mib_s"]["n"] == ceiling.REPEATS and section["warm_mib_s"]["n"] == ceiling.REPEATS
    assert evidence.ceiling({"experiments": {"ceiling": section}})["parallel_why"].startswith(
        "failed: OSError"
    )


def test_a_read_refused_after_open_is_a_refusal_too(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"\0" * MIB)

    def refusing_preadv(fd, bufs, off):
        raise OSError(errno.EINVAL, "Invalid argument")  # some FUSE filesystems open, then refuse the read

    monkeypatch.setattr(os, "preadv", refusing_preadv)
    with pytest.raises(ceiling.DirectRefused, match="a read with direct I/O"):
        ceiling.probe_direct(path, "Linux", True, MIB)


class FakeFcntl:
    """fcntl for the macOS path on Linux: records each call, sets nothing."""

    F_NOCACHE = 48

    def __init__(self):
        self.calls = []

    def fcntl(self, fd, cmd, arg):
        self.calls.append((cmd, arg))
        return 0


def test_the_macos_path_opens_without_o_direct_and_sets_f_nocache(tmp_path, monkeypatch):
    """Run on Linux with fcntl replaced: not run on a real Mac (MACOS_NOTE says so in the results)."""
    path = tmp_path / "f"
    path.write_bytes(os.urandom(2 * MIB))
    flags = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, f, *a: flags.append(f) or real_open(p, f, *a))
    fake = FakeFcntl()
    fd, mode = ceiling.open_for_parallel(path, "Darwin", True, fake)
    try:
        read = ceiling.parallel_read(path, fd, 2, MIB, sampling.Interval(str(tmp_path)))
    finally:
        os.close(fd)
    assert mode == "F_NOCACHE" and fake.calls == [(48, 1)] and not flags[0] & os.O_DIRECT
    assert read["bytes"] == 2 * MIB and read["streams_used"] == 2
    # a Python built without os.preadv reads with os.pread and a copy
    monkeypatch.delattr(os, "preadv")
    buf = ceiling.mmap.mmap(-1, MIB)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert ceiling.pread_into(fd, buf, MIB) == MIB and buf[:] == path.read_bytes()[MIB:]
    finally:
        os.close(fd)
    assert "not on a real Mac" in ceiling.MACOS_NOTE


def test_bad_parallel_settings_are_refused_naming_the_setting(tmp_path):
    with pytest.raises(ValueError, match="lab_run_ceiling_block_bytes must be an integer >= 4096 and a"):
        registry.resolve("quick", {"ceiling_block_bytes": 1000})
    with pytest.raises(
        ValueError, match=r"lab_run_ceiling_block_bytes must be at most .*lab_run_ceiling_mib"
    ):
        registry.resolve("quick", {"ceiling_mib": 1, "ceiling_block_bytes": 2 * MIB})
    with pytest.raises(ValueError, match="lab_run_ceiling_direct must be an integer 0 or 1, got 2"):
        registry.resolve("quick", {"ceiling_direct": 2})
    with pytest.raises(ValueError, match="lab_run_ceiling_streams must be an integer > 0, got 0"):
        ceiling.run({"sizes": {**SIZES, "ceiling_streams": 0}, "system": "Linux"}, tmp_path)
    assert list(tmp_path.iterdir()) == []  # refused before any file was written


def test_a_bad_size_is_refused_naming_the_setting(workbench):
    with pytest.raises(ValueError, match="lab_run_ceiling_mib"):
        ceiling.run({"sizes": {"ceiling_mib": 0}, "system": "Linux"}, workbench)


def test_no_proven_cold_run_leaves_the_cold_ceiling_unavailable():
    runs = [{"mib_s": 900.0, "proven": False}]
    assert "no cold run of 1" in ceiling._ceiling(runs, "proven", "cold")["unavailable"]


def _fixed(measured) -> dict:
    """The measured section with round medians, so the rendered figures are known: each run's rate and the
    spread over them set as the step would have written them (the figures are the runs' rates)."""
    section = json.loads(json.dumps(measured[0]))
    for runs, rates in ((section["cold_runs"], (380.0, 400.0, 420.0)),
                        (section["parallel"]["cold_runs"], (900.0, 1000.0, 1100.0))):  # fmt: skip
        for run, rate in zip(runs, rates, strict=True):
            run.update({"mib_s": rate, "proven": True})
    section["cold_mib_s"] = {"n": 3, "median": 400.0, "min": 380.0, "max": 420.0}
    section["parallel"]["cold_mib_s"] = {"n": 3, "median": 1000.0, "min": 900.0, "max": 1100.0}
    return section


def test_the_report_names_the_parallel_settings_and_what_the_proof_means(measured, tmp_path):
    section = _fixed(measured)
    x = section_mod.build(section, {"experiments": {"ceiling": section}, "facts": {}}, tmp_path)
    assert x["parallel"]["over_single"] == pytest.approx(2.5)
    md = _render(section, x)
    assert "| cold ceiling, parallel (4 streams of 1.00 MiB O_DIRECT reads) | 1,000 MiB/s |" in md
    assert "a queue depth of 4" in md and "With O_DIRECT the page cache is bypassed" in md
    assert "Parallel over one stream, cold: 2.5×: what a loader that reads in parallel with direct I/O" in md
    assert md.count("| parallel |") == ceiling.REPEATS  # each parallel run, with its residency after
    assert "cache below this OS unless it also beats this.\n\n![Each read of this host's ceilings" in md
    assert "with the median of those counted](" in md and ".png)\n\n| run |" in md


def test_the_parallel_ceiling_is_a_figure_of_its_own_for_compare_export_and_history(measured):
    section = _fixed(measured)
    got = figures.by_key(figures.extract({"experiments": {"ceiling": section}}))
    par = got["experiments.ceiling.parallel.cold_mib_s"]
    assert (
        par.median == 1000.0
        and par.cache == "cold"
        and par.name == "ceiling · cold parallel direct read · rate"
    )
    assert got["experiments.ceiling.cold_mib_s"].median == 400.0  # the single stream keeps its own key
    section["parallel"] = {"status": "not_run", "reason": "refused", "streams": 4, "block_bytes": MIB,
                           "direct_io": "O_DIRECT", "partitioning": ceiling.PARTITIONING}  # fmt: skip
    got = figures.by_key(figures.extract({"experiments": {"ceiling": section}}))
    assert "experiments.ceiling.parallel.cold_mib_s" not in got
    ceil = evidence.ceiling({"experiments": {"ceiling": section}})
    assert ceil["parallel"] is None and ceil["parallel_why"] == "not run: refused"
