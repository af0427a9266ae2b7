"""The cache-state proof of a load sample (loadlab.proof), part by part, on records shaped like load_one's."""

from __future__ import annotations

import pytest

from disklab_host.loadlab.proof import CACHE_STATE, cache_proof

SIZE = 64 << 20


def record(method="load_file", fraction=0.0, trust="ok", device_read=SIZE + 4096, major=12, io=True):
    io_rec = {
        "process": {"read_bytes": SIZE, "write_bytes": 0, "source": "/proc/self/io"},
        "device": {"name": "vda", "read_bytes": device_read, "written_bytes": 0},
        "faults": {"major": major, "minor": 900},
    }
    if device_read is None:
        io_rec["device"] = {"unavailable": "no block device behind the file"}
    return {
        "method": method,
        "touched_bytes": SIZE,
        "before": {"cache": {"method": "cachestat", "fraction": fraction, "trust": trust}},
        "stages": {"all_touched": {"io": io_rec if io else {"unavailable": "no I/O record: switched off"}}},
    }


def test_every_part_passing_is_cold():
    proof = cache_proof(record(), "cold")
    assert proof["verdict"] == "cold" and proof["failed"] == [] and proof["unchecked"] == []
    assert {p["status"] for p in proof["parts"].values()} == {"pass"}
    assert CACHE_STATE[proof["verdict"]] == "cold"


@pytest.mark.parametrize(
    ("kwargs", "failed"),
    [
        ({"fraction": 0.02}, ["residency"]),
        ({"trust": "unverifiable: the caller cannot write this file"}, ["residency"]),
        ({"device_read": SIZE - 1}, ["device_reads"]),
        ({"major": 0}, ["major_faults"]),
        ({"fraction": 0.5, "device_read": 0, "major": 0}, ["residency", "device_reads", "major_faults"]),
    ],
)
def test_a_failed_part_is_named_and_never_cold(kwargs, failed):
    proof = cache_proof(record(**kwargs), "cold")
    assert proof["verdict"] == "cold_unproven" and proof["failed"] == failed
    assert CACHE_STATE[proof["verdict"]] == "cold_unverified"


def test_torch_load_has_no_mapping_to_fault_on():
    proof = cache_proof(record(method="torch.load", major=0), "cold")
    assert proof["verdict"] == "cold" and proof["parts"]["major_faults"]["status"] == "not_applicable"
    mapped = cache_proof(record(method="torch.load-mmap", major=0), "cold")
    assert mapped["failed"] == ["major_faults"]


def test_a_part_that_cannot_be_checked_is_unchecked_not_failed():
    proof = cache_proof(record(device_read=None), "cold")
    assert proof["verdict"] == "cold" and proof["unchecked"] == ["device_reads"]
    off = cache_proof(record(io=False), "cold")
    assert off["unchecked"] == ["device_reads", "major_faults"]


def test_warm_needs_99_percent_resident_just_before_the_call():
    assert cache_proof(record(fraction=1.0), "warm")["verdict"] == "warm"
    low = cache_proof(record(fraction=0.98), "warm")
    assert low["verdict"] == "warm_unverified" and low["failed"] == ["residency"]
    assert CACHE_STATE["warm_unverified"] == "warm_unverified"
    with pytest.raises(ValueError, match="requested cache state"):
        cache_proof(record(), "lukewarm")


def test_a_failed_warm_check_carries_the_workbenchs_reason_and_a_passing_one_ignores_it():
    why = "this workbench drops a file's page cache at every open(2): ..."
    failed = cache_proof(record(fraction=0.0), "warm", warm_why=why)
    assert failed["verdict"] == "warm_unverified" and failed["parts"]["residency"]["why"] == why
    assert "why" not in cache_proof(record(fraction=0.0), "warm")["parts"]["residency"]
    passed = cache_proof(record(fraction=1.0), "warm", warm_why=why)
    assert passed["verdict"] == "warm" and "why" not in passed["parts"]["residency"]
