"""The load section's verdict on a network filesystem: did mmap-based loading lose to an eager read here?

Fixture results only (test_load_section's synthetic samples, passed through the host-side summariser): the
verdict is computed from the section's own medians and the audit's flag, so each sentence can be checked
exactly. tests/test_fleet_netfs.py checks the same block on a real sshfs workbench.
"""

from __future__ import annotations

from disklab.sections import load as section_mod
from disklab.sections.load import netfs as load_netfs
from disklab.sections.load import residency as load_residency
from disklab_host.cache import pagecache
from disklab_host.steps import load
from test_load_section import SIX, check_section, cold_section, load_template, make_section


def _results(section: dict, fstype: str = "fuse.sshfs", state: str = "set") -> dict:
    flag = (
        {"state": state, "why": "on a network or FUSE filesystem ..."} if state == "set" else {"state": state}
    )
    facts = {"workbench": {"fstype": fstype, "flags": {"network_or_fuse": flag}}}
    return {"experiments": {"load": section}, "facts": facts}


def _render(section: dict, results: dict, tmp_path) -> str:
    check_section(section)
    x = section_mod.build(section, results, tmp_path / "plots")
    return load_template().render(section=section, view=x, results=results)


def test_no_verdict_when_the_audit_does_not_flag_a_network_filesystem():
    section = make_section()
    assert load_netfs.network_mmap(section, _results(section, "ext4", "not_set")) is None
    assert load_netfs.network_mmap(section, {"experiments": {"load": section}}) is None  # no facts


def test_mapped_loading_that_lost_says_by_how_much_and_by_which_test():
    # six samples a side, cold at all_touched: torch.load 1.0 s, torch.load-mmap 1.8 s, load_file 2.0 s
    section = make_section(scales=SIX)
    got = load_netfs.network_mmap(section, _results(section))
    assert got["fstype"] == "fuse.sshfs"
    assert [line.split(" (")[0] for line in got["lines"]] == [
        "cold, all_touched: torch.load-mmap lost: it took 1.8× torch.load's time",
        "cold, all_touched: load_file lost: it took 2.0× torch.load's time",
    ]
    assert "(1.800 s against 1.000 s, medians; changed: 1.80× slower (95 % interval" in got["lines"][0]
    assert "exact Mann–Whitney, n = 6 a side" in got["lines"][0]


def test_a_loss_within_the_minimum_effect_and_a_win_are_told_apart():
    section = cold_section(
        {
            "torch.load": [0.50 * k for k in SIX],
            "torch.load-mmap": [0.52 * k for k in SIX],  # 4 % slower: within ±10 %
            "load_file": [0.25 * k for k in SIX],
        }
    )
    lines = load_netfs.network_mmap(section, _results(section))["lines"]
    assert lines[0].startswith("cold, all_touched: torch.load-mmap did not lose: it took 1.0× torch.load's")
    assert "no change beyond ±10 %" in lines[0]
    assert lines[1].startswith("cold, all_touched: load_file did not lose: it took 0.5× torch.load's time")
    assert "changed: 0.50× faster" in lines[1]


def test_the_quick_profiles_three_runs_give_the_ratio_but_call_no_loss():
    section = make_section()  # three samples a side
    line = load_netfs.network_mmap(section, _results(section))["lines"][0]
    assert line.startswith(
        "cold, all_touched: torch.load-mmap took 1.8× torch.load's time (1.800 s against 1.000 s, medians), "
        "but whether it lost could not be decided (inconclusive: n = 3 a side cannot decide"
    )
    assert "`lab_run_load_repeats` sets the samples" in line


def test_a_missing_proven_cold_figure_is_said_not_guessed():
    section = make_section(scales=SIX)
    section["cells"] = [
        c for c in section["cells"] if not (c["method"] == "torch.load-mmap" and c["cache_state"] == "cold")
    ]
    lines = load_netfs.network_mmap(section, _results(section))["lines"]
    assert (
        lines[0]
        == "torch.load-mmap: no proven cold figure of torch.load-mmap at all_touched, so no comparison."
    )
    assert lines[1].startswith("cold, all_touched: load_file lost")


def test_the_block_and_the_page_cache_warning_are_rendered(tmp_path):
    section = make_section(scales=SIX)
    why = pagecache.OPEN_DROPS_CACHE.format(after_read="100.0 %", after_reopen="0.0 %", method="cachestat")
    section["workbench_page_cache"] = {
        "keeps_cache": False,
        "after_read_fraction": 1.0,
        "after_reopen_fraction": 0.0,
        "method": "cachestat",
        "why": why,
    }
    # one warm sample found the file gone at its call, as every warm sample does on such a workbench
    warm = next(s for s in section["samples"] if s["cache_state"] == "warm")
    warm["cache_state"] = warm["cache_proof"]["verdict"] = "warm_unverified"
    section["n_warm_unverified"] = 1
    section["cells"] = load.summarise(section["samples"])
    md = _render(section, _results(section), tmp_path)
    assert "### Mapped against eager loading on this network filesystem" in md
    assert "The workbench is fuse.sshfs, which the audit flags as a network or FUSE filesystem" in md
    assert "- cold, all_touched: torch.load-mmap lost: it took 1.8× torch.load's time" in md
    assert (
        "> **Warning.** This workbench drops a file's page cache at every open(2): 100.0 % of the file" in md
    )
    assert "(the workbench dropped it, as the warning above says)" in md
    # this disklab's probes hold their descriptor: the warning says so, and the verdict has no caveat
    assert "they open nothing while the clock runs and empty nothing a loader read" in md
    assert "overstate the loss" not in md
    # a sample that failed before its probes records none: the others' held probes still speak for the run
    del section["samples"][0]["residency_probe"]
    md = _render(section, _results(section), tmp_path)
    assert "they open nothing while the clock runs" in md and "overstate the loss" not in md
    # a stored run from before (its probes opened the file at each stop event, as stored.upgrade says):
    # the old warning, and the verdict says its mapped figures include the reads those probes caused
    for s in section["samples"]:
        s["residency_probe"] = "opened"
    md = _render(section, _results(section), tmp_path)
    assert "a mapped load reads again, after its loader_return probe, the pages it had read before it" in md
    assert "- In this run disklab's own probe opened the file at each stop event" in md
    assert "so their figures after loader_return overstate the loss" in md
    plain = _render(make_section(), _results(make_section(), "ext4", "not_set"), tmp_path)
    assert "Mapped against eager loading" not in plain and "drops a file's page cache" not in plain


def test_without_a_device_counter_a_whole_cold_load_is_read_against_the_ceilings_by_its_file_rate():
    """sshfs has no block device: no device rate, so a cold load that touched the whole file (each byte
    fetched while the clock ran) gets its share of both ceilings from its file rate, marked ‡; one-tensor,
    which read a quarter of the file, gets none."""
    section = make_section()
    for cell in section["cells"]:
        st = cell["stages"].get("all_touched") or {}
        st.pop("device_read_mib_s", None)
        st.pop("device_read_bytes", None)
    spread = {"n": 3, "median": 100.0, "min": 90.0, "max": 110.0}
    ceiling = {
        "status": "ok",
        "cold_mib_s": spread,
        "warm_mib_s": {**spread, "median": 1000.0},
        "parallel": {"status": "ok", "cold_mib_s": {**spread, "median": 200.0}, "streams": 4,
                     "block_bytes": 4 << 20, "direct_io": True},
    }  # fmt: skip
    results = _results(section)
    results["experiments"]["ceiling"] = ceiling
    got = load_residency.proof_rows(section, results)
    assert got["share_by_file"] is True
    rows = {r["what"]: r for r in got["rows"] if r["cache_state"] == "cold"}
    whole = next(r for w, r in rows.items() if w.startswith("torch.load,"))
    rate = whole["file_mib_s"]
    assert whole["device_mib_s"] is None and whole["share_by_file"]
    assert whole["share"] == f"{100 * rate / 100.0:.1f} % ‡"
    assert whole["share_parallel"] == f"{100 * rate / 200.0:.1f} % ‡"
    one = next(r for w, r in rows.items() if w.startswith("one-tensor"))
    assert one["share"] == "n/a" and not one["share_by_file"]
