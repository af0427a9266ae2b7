"""A checkpoint burst: one host's save, commit and cold read-back on a real directory
(disklab_host.together.burst), and the figures MLPerf Storage v2.0 defines, from samples made by hand
(disklab.burst). The burst itself runs on the four-client test fleet in test_fleet_together.py."""

from __future__ import annotations

import argparse
import json
import os
import time

import pytest

from disklab import burst
from disklab_host.together import burst as host

S = 1_000_000_000
MIB = 1 << 20


def _now(delay_s: float = 0.05) -> argparse.Namespace:
    """together.start's arguments for a start ``delay_s`` from now."""
    return argparse.Namespace(at=time.time_ns() + int(delay_s * S), start_file=None, ready_timeout=60.0)


def test_each_rank_saves_its_shard_atomically_one_commits_and_each_reads_the_next_ranks_back_cold(tmp_path):
    d = tmp_path / "burst"
    (d / "shard-00009-of-00009.bin").parent.mkdir()
    (d / "shard-00009-of-00009.bin").write_bytes(b"an earlier burst's")  # removed by prepare
    prep = host.prepare(d, ranks=2, mib=1)
    assert prep["need_bytes"] == 2 * MIB and prep["removed"] == 1
    saves = [host.save(d, r, 2, 1, _now()) for r in (0, 1)]
    for r, s in enumerate(saves):
        assert (
            s["file"] == f"shard-0000{r}-of-00002.bin"
            and s["size_bytes"] == MIB
            and s["sync_call"] == "fsync"
        )
        phases = s["write_s"] + s["sync_s"] + s["rename_s"] + s["dir_fsync_s"]
        assert 0 < phases <= s["time_s"] + 1e-6 and s["together"]["started_ns"] >= s["together"]["at_ns"]
        assert (d / s["file"]).read_bytes() == host.shard_bytes(r, MIB)
    assert sorted(p.name for p in d.iterdir()) == [s["file"] for s in saves]  # no temp file left
    committed = host.commit(d, 2, 1)
    assert json.loads((d / host.MARKER).read_text())["shards"] == committed["shards"]
    got = host.read_back(d, 1, 2, 1, _now(), become_allowed=False)
    assert got["of_rank"] == 0 and got["matches"] and got["size_bytes"] == MIB
    assert got["cache_state"] == "cold" and got["residency_before"]["fraction"] <= 0.01
    assert got["eviction"] == "fadvise_dontneed"
    assert host.clear(d) == [host.MARKER, *[s["file"] for s in saves]] and list(d.iterdir()) == []


def test_a_read_back_finds_a_changed_shard_and_refuses_an_uncommitted_one(tmp_path):
    d = tmp_path / "burst"
    host.prepare(d, ranks=2, mib=1)
    host.save(d, 0, 2, 1, _now())
    with pytest.raises(ValueError, match=r"not committed: .* holds no shard-00001-of-00002\.bin"):
        host.commit(d, 2, 1)
    with pytest.raises(ValueError, match=r"holds no commit marker \(\.metadata\)"):
        host.read_back(d, 1, 2, 1, _now(), become_allowed=False)
    host.save(d, 1, 2, 1, _now())
    host.commit(d, 2, 1)
    with open(d / "shard-00000-of-00002.bin", "r+b") as f:  # one byte changed after the commit
        f.seek(MIB // 2)
        f.write(bytes([host.shard_bytes(0, MIB)[MIB // 2] ^ 1]))
        os.fsync(f.fileno())
    assert host.read_back(d, 1, 2, 1, _now(), become_allowed=False)["matches"] is False
    assert host.read_back(d, 0, 2, 1, _now(), become_allowed=False)["matches"] is True  # rank 1's is whole


def test_bad_input_is_refused_in_one_line_with_the_numbers(tmp_path, capsys):
    assert host.main_prepare(["--dir", str(tmp_path / "b"), "--ranks", "4", "--mib", str(1 << 30)]) == 2
    err = capsys.readouterr().err.strip()
    assert "MiB free, and the burst's 4 shards of 1073741824 MiB need 4294967296 MiB" in err
    assert len(err.splitlines()) == 1
    assert host.main_save(["--dir", str(tmp_path / "none"), "--rank", "0", "--ranks", "1", "--mib", "1",
                           "--at", str(time.time_ns())]) == 2  # fmt: skip
    assert "no such directory: together-burst-prepare makes it on one host first" in capsys.readouterr().err
    host.prepare(tmp_path / "b", 1, 1)
    assert host.main_save(["--dir", str(tmp_path / "b"), "--rank", "3", "--ranks", "2", "--mib", "1",
                           "--at", str(time.time_ns())]) == 2  # fmt: skip
    assert "--rank must be at least 0 and below --ranks (2), got 3" in capsys.readouterr().err


def _sample(offset_ns: int, started_ns: int, time_s: float, size: int, **more) -> dict:
    return {
        "clock": {"offset_ns": offset_ns, "uncertainty_ns": 100_000},
        "sample": {
            "together": {"at_ns": started_ns, "started_ns": started_ns, "late_ns": 0},
            "time_s": time_s,
            "size_bytes": size,
            **more,
        },
    }


def test_the_burst_gives_mlperfs_duration_and_both_throughputs_saying_which_is_which():
    """Two hosts save 64 MiB each: h0 in 1 s, h1 (clock 2 s ahead, started 1 ms later) in 4 s. MLPerf's
    duration is the longest, 4 s; the rules' throughput the least host's own, 64 MiB / 4 s = 16 MiB/s;
    DLIO's the whole 128 MiB over each host's time, the mean: (128 + 32) / 2 = 80 MiB/s."""
    t0 = 1_700_000_000 * S
    rec = {
        "commit": {"sample": {"time_s": 0.01}},
        "hosts": {
            "h0": {
                "save": _sample(0, t0, 1.0, 64 * MIB, rank=0),
                "read": _sample(
                    0, t0 + 9 * S, 0.5, 64 * MIB, rank=0, of_rank=1, matches=True, cache_state="cold"
                ),
            },
            "h1": {
                "save": _sample(2 * S, t0 + 2 * S + 1_000_000, 4.0, 64 * MIB, rank=1),
                "read": {"failed": "together-burst-read: EIO"},
            },
        },
    }
    fig = burst.figures(rec)
    save = fig["save"]
    assert save["duration_s"] == 4.0
    assert save["throughput_rules"] == pytest.approx(16 * MIB)
    assert save["throughput_dlio"] == pytest.approx(80 * MIB)
    assert save["first_done_s"] == pytest.approx(1.0) and save["last_done_s"] == pytest.approx(4.001)
    assert save["aggregate_bytes_per_s"] == pytest.approx(128 * MIB / 4.001)
    assert save["spread"]["spread_ns"] == 1_000_000 and save["spread"]["together"]
    assert fig["committed"] and fig["rank_host"] == {0: "h0", 1: "h1"}
    assert fig["read"]["hosts"] == ["h0"] and fig["failed"]["read"] == {"h1": "together-burst-read: EIO"}
    assert fig["cold"] and fig["matches"]
    rec["hosts"]["h0"]["read"]["sample"].update(matches=False, cache_state="cold_unverified")
    fig = burst.figures(rec)
    assert not fig["cold"] and fig["not_cold"] == {"h0": "cold_unverified"} and fig["mismatched"] == ["h0"]
    assert burst.figures({"commit": None, "hosts": {"h0": {"save": {"failed": "x"}}}})["save"] is None


def test_mlperfs_rule_on_caches_compares_each_clients_shard_with_three_times_its_ram():
    rule = burst.ram_rule(8 * MIB, {"h0": 16 * MIB, "h1": 2 * MIB, "h2": None})
    assert rule["under"] == ["h0"] and rule["over"] == ["h1"] and rule["unknown"] == ["h2"]
    assert rule["ratio"] == {"h0": 0.5, "h1": 4.0}


def test_a_commit_refuses_a_short_shard_and_a_read_refuses_a_marker_it_did_not_write(tmp_path):
    d = tmp_path / "burst"
    host.prepare(d, ranks=1, mib=1)
    host.save(d, 0, 1, 1, _now())
    with open(d / "shard-00000-of-00001.bin", "r+b") as f:
        f.truncate(1000)  # torn: the marker must not be written over it
    with pytest.raises(
        ValueError, match=r"not committed: not 1 MiB long: shard-00000-of-00001\.bin \(1000 bytes\)"
    ):
        host.commit(d, 1, 1)
    assert not (d / host.MARKER).exists()
    (d / host.MARKER).write_text('{"shards": 5}')
    with pytest.raises(ValueError, match=r"is not a commit marker this burst wrote"):
        host.read_back(d, 0, 1, 1, _now(), become_allowed=False)
    for bad in (lambda: host.commit(d, 0, 1), lambda: host.save(d, 0, 1, 0, _now())):
        with pytest.raises(ValueError, match=r"--(ranks|mib) must be at least 1, got 0"):
            bad()


def test_a_read_backs_cache_state_is_cold_not_cold_or_unverified_from_its_residency():
    assert host.cache_state({"fraction": 0.0, "trust": "ok"}) == "cold"
    assert host.cache_state({"fraction": 1.0, "trust": "ok"}) == "not_cold"  # the eviction did not take
    assert host.cache_state({"fraction": 0.0, "trust": "untrusted"}) == "cold_unverified"


def test_the_shared_filesystem_is_checked_and_named_from_mountinfo(tmp_path, monkeypatch):
    """A made /proc/self/mountinfo: / on ext4, /mnt/wb on fuse.sshfs from srv:/export."""
    from disklab_host.common import mounts
    from disklab_host.together import storage

    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text(
        "22 1 8:1 / / rw - ext4 /dev/vda rw\n"
        "40 22 0:50 / /mnt/wb rw,nosuid - fuse.sshfs root@srv:/export rw,user_id=0\n"
    )
    got = mounts.mount_of("/mnt/wb/disklab-together/big.pt", root, resolve=False)
    assert got == {"point": "/mnt/wb", "source": "root@srv:/export", "fstype": "fuse.sshfs"}
    assert mounts.mount_of("/tmp/x", root, resolve=False)["fstype"] == "ext4"
    monkeypatch.setattr(
        storage, "mount_of", lambda p, resolve=True: mounts.mount_of(p, root, resolve=resolve)
    )
    storage.check("/mnt/wb/disklab-together", "root@srv:/export")  # still on it: no refusal
    with pytest.raises(
        ValueError, match=r"is no longer on the shared filesystem root@srv:/export: it is on ext4"
    ):
        storage.check("/srv/wb/disklab-together", "root@srv:/export")
    lost = "together-load: torch.load failed: [Errno 107] Transport endpoint is not connected"
    assert storage.named(lost, "/mnt/wb/disklab-together", "root@srv:/export") == (
        f"{lost} (the shared filesystem fuse.sshfs from root@srv:/export, mounted at /mnt/wb, stopped "
        "answering: is its file server up?)"
    )
    eio = "together-load: x: Input/output error"
    assert storage.named(eio, "/tmp/x", "root@srv:/export") == eio  # a local disk's EIO is no server's
    assert storage.named("together-load: no such directory", "/mnt/wb/d", "root@srv:/export").endswith(
        "directory"
    )
    mount = mounts.mount_of("/mnt/wb", root, resolve=False)
    assert storage.server_dir("/mnt/wb", mount) == "/export"
    assert storage.server_dir("/dev/vda", {"point": "/", "source": "/dev/vda", "fstype": "ext4"}) is None
