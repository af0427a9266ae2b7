"""What the write-path sections read beside their numbers: the write-cache mode, the layers, the ceiling."""

from __future__ import annotations

from disklab.sections import evidence


def facts(write_cache) -> dict:
    device = {"name": "nvme0n1", "model": "X", "rotational": False, "write_cache": write_cache, "fua": True}
    return {"facts": {"workbench": {"device": device}}}


def test_a_fast_fsync_with_a_volatile_cache_is_flagged_as_a_possible_lie_from_below():
    dev = evidence.device_facts(facts("write back"))
    assert "Possible lie from below" in evidence.fsync_reading(40.0, dev)
    assert "plausible" in evidence.fsync_reading(900.0, dev)
    through = evidence.fsync_reading(40.0, evidence.device_facts(facts("write through")))
    assert "`write through`" in through and "lie" not in through
    unknown = evidence.device_facts(facts({"unavailable": "not audited: written before facts version 4"}))
    assert "unknown (not audited" in evidence.fsync_reading(40.0, unknown)
    assert evidence.fsync_reading(None, dev) is None


def test_layer_rows_say_when_cachestat_was_missing_or_the_run_is_older():
    old = evidence.layer_rows({"unavailable": "not recorded: written before results version 3"})
    assert old == {"ok": False, "why": "not recorded: written before results version 3", "rows": []}
    missing = {"unavailable": "this kernel has no cachestat(2) (added in Linux 6.5)"}
    layers = {
        "cachestat": missing["unavailable"],
        "rows": [{"point": "after_write", "st_size_bytes": 0, "pages": missing}],
    }
    got = evidence.layer_rows(layers)
    assert not got["ok"] and "cachestat is missing here" in got["why"]
    assert got["rows"] == [
        {"label": "after `write()`", "st_size": "0 B", "dirty": "n/a", "writeback": "n/a", "cached": "n/a"}
    ]


def test_the_ceiling_is_missing_with_its_reason():
    assert evidence.ceiling({"experiments": {}})["why"] == "the ceiling step did not run in this run"
    unproven = {
        "status": "ok",
        "cold_mib_s": {"unavailable": "no cold run of 3 passed"},
        "warm_mib_s": {"unavailable": "x"},
        "parallel": {"unavailable": "a run upgraded from before the parallel ceiling"},
    }
    got = evidence.ceiling({"experiments": {"ceiling": unproven}})
    assert got["cold"] is None and got["why"] == "no cold run of 3 passed"
    assert evidence.share_of(100.0, None) == "n/a"
    assert evidence.share_of(100.0, {"median": 400.0}) == "25.0 %"
