"""The I/O record, cachestat and the counted layers, on real files of the real filesystem."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from disklab_host.cache import layers
from disklab_host.cache import pagecache as cache
from disklab_host.common import iorecord

MIB = 1 << 20
HAS_CACHESTAT = cache.cachestat_unavailable_reason() is None


def write_file(path: Path, nbytes: int) -> Path:
    with open(path, "wb") as f:
        f.write(os.urandom(nbytes))
        f.flush()
        os.fsync(f.fileno())
    return path


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_parsers():
    assert iorecord.parse_proc_io("rchar: 1\nread_bytes: 4096\nwrite_bytes: 8192\n") == {
        "read_bytes": 4096,
        "write_bytes": 8192,
    }
    with pytest.raises(ValueError, match="write_bytes"):
        iorecord.parse_proc_io("read_bytes: 1\n")
    line = "  228695    97277 156757696   686674   224163  1237478 379674946  3416648 0 1 2"
    assert iorecord.parse_block_stat(line) == {"sectors_read": 156757696, "sectors_written": 379674946}
    with pytest.raises(ValueError, match="7 fields"):
        iorecord.parse_block_stat("1 2 3")


def _device_or_skip(path: Path) -> dict:
    dev = iorecord.device_of(path)
    if "unavailable" in dev:
        pytest.skip(f"the test workbench has no block device: {dev['unavailable']}")
    return dev


def test_a_cold_read_is_delivered_by_the_device_and_a_warm_one_is_not(workbench):
    path = write_file(workbench / "f.bin", 8 * MIB)
    dev = _device_or_skip(path)
    assert Path(dev["stat_path"]).is_file() and dev["name"] in dev["stat_path"]
    rec = iorecord.Recorder(path)
    evict(path)
    before = rec.begin()
    with open(path, "rb", buffering=0) as f:
        while f.read(MIB):
            pass
    cold = rec.end(before, "cold read")
    assert cold["interval"] == "cold read"
    assert cold["process"]["read_bytes"] >= 8 * MIB  # this process caused every byte to be fetched
    assert cold["device"]["read_bytes"] >= 8 * MIB  # and the device delivered them (device-wide: >=)
    assert cold["device"]["read_bytes"] == cold["device"]["sectors_read"] * 512
    before = rec.begin()
    with open(path, "rb", buffering=0) as f:
        while f.read(MIB):
            pass
    warm = rec.end(before)
    # None of the file came from storage. /proc/self/io counts every read this process causes, its own
    # code pages faulted back in included (68 KiB was seen beside a CPU hog, after other tests had dropped
    # the caches), so the bound is far below the file's 8 MiB, not zero.
    assert warm["process"]["read_bytes"] < MIB


def test_a_mapped_cold_read_takes_major_faults(workbench):
    import mmap

    path = write_file(workbench / "m.bin", 4 * MIB)
    rec = iorecord.Recorder(path)
    evict(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
        mm.madvise(mmap.MADV_RANDOM)  # one fault per page, no readahead to hide them
        before = rec.begin()
        total = sum(mm[i] for i in range(0, len(mm), os.sysconf("SC_PAGE_SIZE")))
        got = rec.end(before)
    assert total >= 0
    assert got["faults"]["major"] > 0


def test_no_block_device_is_unavailable_with_its_reason(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    dev = iorecord.device_of(shm)
    assert "unavailable" in dev and "no block device" in dev["unavailable"]
    rec = iorecord.Recorder(shm).end(iorecord.Recorder(shm).begin())
    assert rec["device"] == dev and isinstance(rec["process"]["read_bytes"], int)


def test_device_found_through_the_mount_source_when_st_dev_has_no_sys_entry(tmp_path):
    """btrfs's anonymous st_dev: the mount's source (/dev/mapper/x -> dm-0) names the device."""
    root = tmp_path / "root"
    (root / "sys/class/block/dm-0").mkdir(parents=True)
    (root / "sys/class/block/dm-0/stat").write_text("1 2 30 4 5 6 70 8\n")
    (root / "dev/mapper").mkdir(parents=True)
    (root / "dev/dm-0").write_text("")
    os.symlink("../dm-0", root / "dev/mapper/vg-lv")
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text(
        f"22 1 0:40 / / rw - ext4 /dev/vda rw\n30 22 0:41 / {tmp_path} rw - btrfs /dev/mapper/vg-lv rw\n"
    )
    dev = iorecord.device_of(tmp_path, system="Linux", root=root)
    assert dev["name"] == "dm-0" and "mount source /dev/mapper/vg-lv" in dev["found_by"]


class _RU:
    def __init__(self, n):
        self.ru_majflt, self.ru_minflt, self.ru_inblock, self.ru_oublock = n, 10 * n, 100 * n, 1000 * n


def test_macos_path_uses_getrusage_and_proc_pid_rusage_and_says_what_is_missing(tmp_path):
    """Injected platform and doubles: the macOS path has not run on real Mac hardware."""
    counters = iter([{"read_bytes": 100, "write_bytes": 5}, {"read_bytes": 4196, "write_bytes": 5}])
    ru = iter([_RU(1), _RU(3)])
    rec = iorecord.Recorder(
        tmp_path, system="Darwin", rusage_fn=lambda: next(counters), getrusage=lambda who: next(ru)
    )
    got = rec.end(rec.begin())
    assert got["process"] == {
        "read_bytes": 4096,
        "write_bytes": 0,
        "source": "proc_pid_rusage(RUSAGE_INFO_V2) ri_diskio_bytes*",
    }
    assert got["faults"]["major"] == 2 and got["faults"]["minor"] == 20
    assert got["blocks"]["in"] == 200 and got["blocks"]["out"] == 2000
    assert "IOKit" in got["device"]["unavailable"]
    assert "not on real Mac hardware" in got["validation"]
    unreachable = iorecord.Recorder(tmp_path, system="Darwin", rusage_fn={"unavailable": "libproc not found"})
    assert unreachable.end(unreachable.begin())["process"] == {"unavailable": "libproc not found"}


def test_switched_off_it_reads_nothing(tmp_path):
    rec = iorecord.Recorder(tmp_path, enabled=False, getrusage=lambda who: pytest.fail("read"))
    assert rec.begin() is None and rec.end(None) is None
    assert resource.RUSAGE_SELF is not None


@pytest.mark.skipif(not HAS_CACHESTAT, reason=cache.cachestat_unavailable_reason() or "")
def test_cachestat_counts_dirty_pages_until_fsync_and_residency_after_eviction(workbench):
    path = workbench / "d.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, os.urandom(MIB))
        dirty = cache.cachestat(path)
        os.fsync(fd)
        clean = cache.cachestat(path)
    finally:
        os.close(fd)
    assert dirty["pages_dirty"] + dirty["pages_writeback"] == MIB // os.sysconf("SC_PAGE_SIZE")
    assert clean["pages_dirty"] == clean["pages_writeback"] == 0 and clean["fraction"] == 1.0
    evict(path)
    state = cache.cache_state(path)
    assert state["method"] == "cachestat" and state["fraction"] <= cache.COLD_MAX_FRACTION
    assert state["cachestat_unavailable"] is None
    assert abs(state["fraction"] - cache.residency(path)["fraction"]) < 0.01  # agrees with mincore


def test_cache_state_falls_back_to_mincore_and_says_why(workbench, monkeypatch):
    path = write_file(workbench / "fb.bin", MIB)
    monkeypatch.setattr(cache, "cachestat_unavailable_reason", lambda: "this kernel has no cachestat(2)")
    state = cache.cache_state(path)
    assert state["method"] == "mincore" and state["fraction"] > 0.99
    assert state["cachestat_unavailable"] == "this kernel has no cachestat(2)"
    assert "unavailable" in state["dirty_bytes"]
    counted = layers.write_flush_fsync(workbench / "l.bin", b"x" * 100)
    assert counted["cachestat"] == "this kernel has no cachestat(2)"
    assert [r["st_size_bytes"] for r in counted["rows"]] == [0, 100, 100]


@pytest.mark.skipif(not HAS_CACHESTAT, reason=cache.cachestat_unavailable_reason() or "")
def test_layers_show_the_buffer_the_dirty_pages_and_the_sync(workbench):
    small = layers.write_flush_fsync(workbench / "s.bin", b"x" * 4000)
    after_write, after_flush, after_fsync = (r["pages"] for r in small["rows"])
    assert [r["point"] for r in small["rows"]] == list(layers.POINTS)
    assert small["rows"][0]["st_size_bytes"] == 0 and after_write["dirty_pages"] == 0  # in Python's buffer
    assert after_flush["dirty_pages"] + after_flush["writeback_pages"] == 1  # in the page cache
    assert after_fsync["dirty_pages"] == after_fsync["writeback_pages"] == 0  # on the device
    assert not (workbench / "s.bin").exists()
    big = layers.write_flush_fsync(workbench / "b.bin", os.urandom(4 * MIB))
    first = big["rows"][0]
    assert first["st_size_bytes"] == 4 * MIB  # larger than the buffer: write() went straight to write(2)
    assert first["pages"]["dirty_pages"] + first["pages"]["writeback_pages"] > 0


@pytest.mark.parametrize(
    ("fstype", "source", "says"),
    [
        (
            "fuse.sshfs",
            "root@10.213.3.3:/export/host0",
            "it is on fuse.sshfs, a network filesystem, whose reads go to its daemon or server from "
            "root@10.213.3.3:/export/host0, not to a local block device, so no device counter on this host "
            "sees them",
        ),
        (
            "nfs4",
            "srv:/models",
            "it is on nfs4, a network filesystem, whose reads go to its daemon or server from",
        ),
        (
            "fuse.gocryptfs",
            "/home/u/cipher",
            "it is on fuse.gocryptfs, a FUSE filesystem, whose reads go to its daemon",
        ),
        ("tmpfs", "tmpfs", "it is on tmpfs, which lives in RAM: nothing is read from a device"),
        ("overlay", "overlay", "its mount source is 'overlay' (overlay) (tmpfs, overlay, network and FUSE"),
    ],
)
def test_no_device_reason_is_said_in_the_filesystems_words(tmp_path, fstype, source, says):
    """A mount with no /sys entry (mountinfo injected: this machine has no NFS client, and sshfs is checked
    for real in tests/test_fleet_netfs.py)."""
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text(
        f"22 1 0:40 / / rw - ext4 /dev/vda rw\n30 22 0:77 / {tmp_path} rw - {fstype} {source} rw\n"
    )
    dev = iorecord.device_of(tmp_path, system="Linux", root=root)
    assert dev["unavailable"].startswith(f"no block device behind {tmp_path}: ")
    assert says in dev["unavailable"], dev
