"""Page cache control on the real filesystem: mincore residency, eviction, warming, coldcopy."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from disklab_host.cache import coldcopy
from disklab_host.cache import pagecache as cache

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20
REPO = Path(__file__).resolve().parent.parent


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
    assert ev["attempts"] == [
        {
            "method": "fadvise_dontneed",
            "ok": True,
            "error": None,
            "fraction_after": ev["fraction_after"],
            "residency_path": str(path),
            "residency_trust": "ok",
        }
    ]
    assert ev["timed_path"] == str(path)  # in place: the original is the file to time
    assert ev["fraction_after"] <= cache.COLD_MAX_FRACTION
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
@pytest.mark.drops_page_cache
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
    # residency after each attempt: warm after the two refusals, cold after the method that worked
    fractions = [a["fraction_after"] for a in ev["attempts"]]
    assert fractions[0] > 0.99 and fractions[1] > 0.99 and fractions[2] <= cache.COLD_MAX_FRACTION
    assert {a["residency_path"] for a in ev["attempts"]} == {str(path)}


def test_drop_caches_refused_without_root_or_become(workbench, monkeypatch):
    # We run as root, so a non-root caller is simulated.
    path = write_file(workbench / "nr.bin", 1 * MIB)
    monkeypatch.setattr(cache.os, "geteuid", lambda: 1000)
    ev = cache.evict(path, ["drop_caches", "fadvise_dontneed"], become_allowed=False, system="Linux")
    assert "needs root" in ev["attempts"][0]["error"]
    assert ev["attempts"][0]["fraction_after"] > 0.99  # refused before it ran: still warm
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
    assert ev["timed_path"] == str(path)


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


# the documented eviction order


def _documented_order() -> dict[str, tuple[str, ...]]:
    """The per-OS table under "## Making a file cold" in docs/fleet.md: OS -> methods in order."""
    text = (REPO / "docs" / "fleet.md").read_text()
    section = text.split("## Making a file cold", 1)[1].split("\n## ", 1)[0]
    order = {}
    for line in section.splitlines():
        m = re.match(r"\| (\w+) \| (`.*`) \|$", line)
        if m:
            order[m.group(1)] = tuple(re.findall(r"`(\w+)`", m.group(2)))
    return order


def test_default_methods_follow_the_documented_order():
    documented = _documented_order()
    assert documented, "docs/fleet.md has no eviction order table"
    assert documented == {system: tuple(m) for system, m in cache.DEFAULT_METHODS.items()}


def test_evict_tries_the_default_order_when_none_is_named(workbench, monkeypatch):
    path = write_file(workbench / "d.bin", PAGE)
    monkeypatch.setattr(cache.os, "geteuid", lambda: 1000)  # purge is refused without root or become
    ev = cache.evict(path, become_allowed=False, system="Darwin")  # no scratch_dir: the copy is refused
    assert [a["method"] for a in ev["attempts"]] == list(cache.DEFAULT_METHODS["Darwin"])
    assert ev["method"] is None


# copying methods never change the user's file


class DarwinLikeFcntl(FakeFcntl):
    """macOS fcntl on Linux: F_FULLFSYNC on an F_NOCACHE fd flushes it and drops its pages."""

    def __init__(self, nocache_works: bool = True):
        super().__init__()
        self.nocache_works, self.nocache = nocache_works, set()

    def fcntl(self, fd, cmd, arg=0):
        super().fcntl(fd, cmd, arg)
        if cmd == self.F_NOCACHE:
            self.nocache.add(fd)
        elif cmd == self.F_FULLFSYNC:
            os.fsync(fd)
            if self.nocache_works and fd in self.nocache:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return 0


def _fingerprint(path: Path) -> tuple:
    """What must not change about a user's file: link or not, its target, the bytes, inode and mtime."""
    st = os.stat(path)
    target = os.readlink(path) if path.is_symlink() else None
    return path.is_symlink(), target, path.read_bytes(), st.st_ino, st.st_mtime_ns, st.st_size


@pytest.fixture
def hf_snapshot(workbench) -> Path:
    """A Hugging Face cache layout: the snapshot's file is a relative symlink to a blob."""
    blobs, snap = workbench / "hub" / "blobs", workbench / "hub" / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    write_file(blobs / "9f86d08", 2 * MIB + 5)
    (snap / "model.safetensors").symlink_to("../../blobs/9f86d08")
    return snap / "model.safetensors"


def test_coldcopy_writes_the_cold_copy_to_scratch_and_times_it(workbench, hf_snapshot):
    scratch = workbench / "scratch"
    scratch.mkdir()
    before, blob_before = _fingerprint(hf_snapshot), _fingerprint(hf_snapshot.resolve())
    ev = cache.evict(
        hf_snapshot,
        ["coldcopy_nocache"],
        become_allowed=False,
        system="Darwin",
        scratch_dir=scratch,
        fcntl_mod=DarwinLikeFcntl(),
    )
    copy = scratch / "model.safetensors.coldcopy"
    assert ev["method"] == "coldcopy_nocache", ev
    assert ev["timed_path"] == str(copy)
    assert ev["attempts"][0]["residency_path"] == str(copy)
    assert ev["attempts"][0]["fraction_after"] == ev["fraction_after"] <= cache.COLD_MAX_FRACTION
    assert cache.residency(copy)["fraction"] <= cache.COLD_MAX_FRACTION
    assert not copy.is_symlink() and copy.read_bytes() == hf_snapshot.read_bytes()
    # the snapshot is still a symlink to the same blob, and the blob is untouched
    assert _fingerprint(hf_snapshot) == before and _fingerprint(hf_snapshot.resolve()) == blob_before
    assert sorted(p.name for p in hf_snapshot.parent.iterdir()) == ["model.safetensors"]


def test_a_warm_cold_copy_is_recorded_deleted_and_the_original_timed(workbench):
    # F_NOCACHE that does not work (here: a stand-in that only records it): the copy ends warm
    path = write_file(workbench / "w.bin", 1 * MIB)
    scratch = workbench / "scratch"
    scratch.mkdir()
    before = _fingerprint(path)
    ev = cache.evict(
        path,
        ["coldcopy_nocache"],
        become_allowed=False,
        system="Darwin",
        scratch_dir=scratch,
        fcntl_mod=DarwinLikeFcntl(nocache_works=False),
    )
    (attempt,) = ev["attempts"]
    assert attempt["ok"] is False and "still resident after coldcopy_nocache" in attempt["error"]
    assert attempt["residency_path"] == str(scratch / "w.bin.coldcopy")
    assert attempt["fraction_after"] > 0.99  # the evidence: the copy did not end cold
    assert ev["method"] is None and ev["timed_path"] == str(path)
    assert list(scratch.iterdir()) == []
    assert _fingerprint(path) == before


def test_copying_method_without_scratch_dir_is_refused(workbench, hf_snapshot):
    before, blob_before = _fingerprint(hf_snapshot), _fingerprint(hf_snapshot.resolve())
    ev = cache.evict(
        hf_snapshot, ["coldcopy_nocache"], become_allowed=False, system="Darwin", fcntl_mod=DarwinLikeFcntl()
    )
    (attempt,) = ev["attempts"]
    assert attempt["ok"] is False and "needs scratch_dir" in attempt["error"]
    assert attempt["residency_path"] == str(hf_snapshot) and attempt["fraction_after"] > 0.99
    assert ev["method"] is None and ev["timed_path"] == str(hf_snapshot)
    assert _fingerprint(hf_snapshot) == before and _fingerprint(hf_snapshot.resolve()) == blob_before
    assert sorted(p.name for p in hf_snapshot.parent.iterdir()) == ["model.safetensors"]


def test_cold_copy_that_would_be_the_original_is_refused(workbench):
    # a hard link to the original already sits where the copy would go: writing there would empty it
    path = write_file(workbench / "h.bin", PAGE * 3)
    scratch = workbench / "scratch"
    scratch.mkdir()
    os.link(path, cache.cold_copy_path(path, scratch))
    before = _fingerprint(path)
    ev = cache.evict(
        path,
        ["coldcopy_nocache"],
        become_allowed=False,
        system="Darwin",
        scratch_dir=scratch,
        fcntl_mod=DarwinLikeFcntl(),
    )
    assert ev["method"] is None and "would be the original file itself" in ev["attempts"][0]["error"]
    assert _fingerprint(path) == before


def test_coldcopy_refuses_to_truncate_its_source(workbench):
    src = write_file(workbench / "s.bin", PAGE + 1)
    data = src.read_bytes()
    (workbench / "alias").symlink_to(src)
    with pytest.raises(ValueError, match="would truncate the source"):
        coldcopy.coldcopy(src, workbench / "alias", fcntl_mod=FakeFcntl())
    (workbench / "elsewhere").symlink_to(workbench / "other.bin")
    with pytest.raises(OSError) as exc:  # never written through a symlink
        coldcopy.coldcopy(src, workbench / "elsewhere", fcntl_mod=FakeFcntl())
    assert exc.value.errno == errno.ELOOP
    assert src.read_bytes() == data and not (workbench / "other.bin").exists()


def test_open_keeps_cache_on_a_local_filesystem_and_leaves_the_file_warm(workbench):
    f = workbench / "reopen.bin"
    f.write_bytes(os.urandom(2 * MIB))
    cache.evict(f, ["fadvise_dontneed"], become_allowed=False)
    got = cache.open_keeps_cache(f)
    assert got["keeps_cache"] is True and got["why"] is None, got
    assert got["after_read_fraction"] >= 0.99 and got["after_reopen_fraction"] >= 0.99
    assert cache.residency(f)["fraction"] >= 0.99  # the check's read warmed it


@pytest.mark.parametrize(
    ("fractions", "starts"),
    [
        ((1.0, 0.0), "this workbench drops a file's page cache at every open(2): 100.0 % of the file"),
        ((0.0, 0.0), "a read of the whole file left only 0.0 % of it in the page cache (cachestat)"),
    ],
)
def test_open_keeps_cache_says_why_when_the_mount_drops_or_bypasses_it(
    workbench, monkeypatch, fractions, starts
):
    """What FUSE does without FOPEN_KEEP_CACHE (and with direct I/O), which no local filesystem here can
    cause: the descriptor-side counts are injected; tests/test_fleet_netfs.py sees the real drop on sshfs."""
    f = workbench / "fuse-like.bin"
    f.write_bytes(b"x" * MIB)
    answers = iter([(fractions[0], "cachestat"), (fractions[1], "cachestat")])
    monkeypatch.setattr(cache, "_fd_fraction", lambda fd, size: next(answers))
    got = cache.open_keeps_cache(f)
    assert got["keeps_cache"] is False and got["why"].startswith(starts), got
    assert (got["after_read_fraction"], got["after_reopen_fraction"]) == fractions
