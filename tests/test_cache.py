"""Page cache control on the real filesystem: mincore residency, eviction, warming, coldcopy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from disklab_host.cache import coldcopy
from disklab_host.cache import pagecache as cache

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20


def write_file(path: Path, nbytes: int) -> Path:
    """Random bytes, fsynced, so every page is clean and in the page cache."""
    with open(path, "wb") as f:
        f.write(os.urandom(nbytes))
        f.flush()
        os.fsync(f.fileno())
    return path


def fincore_bytes(path: Path) -> int:
    """util-linux fincore's count of resident bytes (whole pages)."""
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[0])


needs_fincore = pytest.mark.skipif(shutil.which("fincore") is None, reason="util-linux fincore not installed")


@needs_fincore
def test_evict_then_warm_agrees_with_fincore(workbench):
    path = write_file(workbench / "data.bin", 8 * MIB)
    assert cache.residency(path)["fraction"] > 0.99  # just written: in the page cache

    ev = cache.evict(path, ["fadvise_dontneed"], become_allowed=False)
    cold = cache.residency(path)
    assert ev["method"] == "fadvise_dontneed"
    assert ev["attempts"] == [{"method": "fadvise_dontneed", "ok": True, "error": None}]
    assert cold["fraction"] <= cache.COLD_MAX_FRACTION
    assert cold["resident_bytes"] == fincore_bytes(path)

    assert cache.warm(path) == 8 * MIB
    hot = cache.residency(path)
    assert hot["resident_bytes"] == 8 * MIB == fincore_bytes(path)
    assert hot["pages_resident"] == hot["pages_total"] == 8 * MIB // PAGE
    assert hot["trust"] == "ok"


@needs_fincore
def test_partial_read_residency_is_exact(workbench):
    """Every other page read with readahead off: exactly half the pages resident."""
    path = write_file(workbench / "half.bin", 256 * PAGE)
    cache.evict(path, ["fadvise_dontneed"], become_allowed=False)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for page in range(0, 256, 2):
            os.pread(fd, 1, page * PAGE)
    finally:
        os.close(fd)
    res = cache.residency(path)
    assert res["resident_bytes"] == fincore_bytes(path)
    assert res["pages_resident"] == 128
    assert res["fraction"] == pytest.approx(0.5)


def test_tail_page_counts_only_file_bytes(workbench):
    path = write_file(workbench / "tail.bin", 3 * PAGE + 100)
    cache.warm(path)
    res = cache.residency(path)
    assert res["pages_total"] == 4
    assert res["resident_bytes"] == res["size_bytes"] == 3 * PAGE + 100
    assert res["fraction"] == 1.0


def test_empty_file_has_no_pages(workbench):
    path = workbench / "empty.bin"
    path.touch()
    assert cache.residency(path) == {
        "resident_bytes": 0,
        "size_bytes": 0,
        "fraction": 0.0,
        "pages_resident": 0,
        "pages_total": 0,
        "trust": "ok",
    }


def test_missing_file_raises(workbench):
    with pytest.raises(FileNotFoundError):
        cache.residency(workbench / "nope.bin")


@pytest.mark.root
def test_drop_caches_evicts(workbench):
    """Global: this empties the page cache of the whole machine."""
    path = write_file(workbench / "drop.bin", 4 * MIB)
    ev = cache.evict(path, ["drop_caches"], become_allowed=False)
    assert ev["method"] == "drop_caches", ev
    assert cache.residency(path)["fraction"] <= cache.COLD_MAX_FRACTION


def test_falls_back_to_next_method_and_records_why(workbench):
    path = write_file(workbench / "fb.bin", 2 * MIB)
    ev = cache.evict(
        path, ["purge", "coldcopy_nocache", "fadvise_dontneed"], become_allowed=False, system="Linux"
    )
    assert ev["method"] == "fadvise_dontneed"
    assert [a["method"] for a in ev["attempts"]] == ["purge", "coldcopy_nocache", "fadvise_dontneed"]
    assert [a["ok"] for a in ev["attempts"]] == [False, False, True]
    assert "Darwin only" in ev["attempts"][0]["error"]
    assert cache.residency(path)["fraction"] <= cache.COLD_MAX_FRACTION


def test_drop_caches_refused_without_root_or_become(workbench, monkeypatch):
    # We run as root, so a non-root caller is simulated.
    path = write_file(workbench / "nr.bin", 1 * MIB)
    monkeypatch.setattr(cache.os, "geteuid", lambda: 1000)
    ev = cache.evict(path, ["drop_caches", "fadvise_dontneed"], become_allowed=False, system="Linux")
    assert "needs root" in ev["attempts"][0]["error"]
    assert ev["method"] == "fadvise_dontneed"


def test_read_only_proc_falls_back(workbench, monkeypatch):
    # A read-only /proc (a container) cannot be caused here: point the knob at a path that cannot be opened.
    path = write_file(workbench / "ro.bin", 1 * MIB)
    monkeypatch.setattr(cache, "DROP_CACHES", str(workbench / "no-such-dir" / "drop_caches"))
    ev = cache.evict(path, ["drop_caches", "fadvise_dontneed"], become_allowed=True, system="Linux")
    assert ev["attempts"][0]["ok"] is False
    assert "FileNotFoundError" in ev["attempts"][0]["error"]
    assert ev["method"] == "fadvise_dontneed"


def test_all_methods_fail_gives_none(workbench):
    path = write_file(workbench / "none.bin", 1 * MIB)
    ev = cache.evict(path, ["purge"], become_allowed=False, system="Linux")
    assert ev["method"] is None
    assert ev["fraction_after"] > cache.COLD_MAX_FRACTION  # still warm, and says so


def test_unknown_method_is_refused(workbench):
    path = write_file(workbench / "u.bin", PAGE)
    with pytest.raises(ValueError, match="eviction methods must be among"):
        cache.evict(path, ["flush_everything"], become_allowed=False)


@pytest.mark.root
def test_mincore_unverifiable_for_a_file_the_caller_cannot_write():
    """Linux 5.2+: an unprivileged caller gets 'all resident' for a file it cannot write."""
    tmpdir = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="disklab-trust-"))
    try:
        os.chmod(tmpdir, 0o755)
        path = write_file(tmpdir / "root-owned.bin", 2 * MIB)
        os.chmod(path, 0o644)
        cache.evict(path, ["fadvise_dontneed"], become_allowed=False)
        assert cache.residency(path)["fraction"] <= cache.COLD_MAX_FRACTION  # root sees the truth
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: drop to nobody, measure, report through the pipe
            try:
                os.close(r)
                os.setgid(65534)
                os.setuid(65534)
                os.write(w, json.dumps(cache.residency(path)).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            seen = json.loads(f.read())
        os.waitpid(pid, 0)
    finally:
        shutil.rmtree(tmpdir)
    assert seen["trust"].startswith("unverifiable:")
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    if (major, minor) >= (5, 2):
        assert seen["fraction"] == 1.0  # the kernel's conservative answer, not the truth


class FakeFcntl:
    """Stand-in for macOS fcntl: F_NOCACHE and F_FULLFSYNC do not exist on Linux."""

    F_NOCACHE = 48
    F_FULLFSYNC = 51

    def __init__(self):
        self.calls = []

    def fcntl(self, fd, cmd, arg=0):
        self.calls.append((fd, cmd, arg))
        return 0


def test_coldcopy_copies_with_nocache_then_fullfsync(workbench):
    src = write_file(workbench / "src.bin", 3 * MIB + 17)
    fake = FakeFcntl()
    assert coldcopy.coldcopy(src, workbench / "dst.bin", fcntl_mod=fake) == 3 * MIB + 17
    assert (workbench / "dst.bin").read_bytes() == src.read_bytes()
    cmds = [c[1] for c in fake.calls]
    assert cmds == [FakeFcntl.F_NOCACHE, FakeFcntl.F_NOCACHE, FakeFcntl.F_FULLFSYNC]
    assert fake.calls[1][0] == fake.calls[2][0]  # F_FULLFSYNC on the destination


def test_coldcopy_refuses_without_f_nocache(workbench):
    src = write_file(workbench / "s.bin", PAGE)
    with pytest.raises(OSError, match="macOS only"):
        coldcopy.coldcopy(src, workbench / "d.bin", fcntl_mod=object())
