"""The write-path lab steps on the real filesystem: write_buffering, fsync_bench, big_write.

Sizes are tiny; assertions are about structure and physical sense, never timings.
"""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import time
import types
import zlib

import pytest

from disklab_host.common import durable
from disklab_host.steps import big_write, fsync_bench, write_buffering

BLOCKS = 12


def _ordered(lat: dict) -> bool:
    return lat["min_us"] <= lat["p50_us"] <= lat["p90_us"] <= lat["p99_us"] <= lat["max_us"]


@pytest.fixture(scope="module")
def fsync_section(tmp_path_factory):
    wd = tmp_path_factory.mktemp("fsync_bench")
    sizes = {"fsync_blocks": BLOCKS, "fsync_block_bytes": 4096}
    return fsync_bench.run({"sizes": sizes, "system": "Linux"}, wd), wd


# write_buffering


def test_write_buffering_structure_and_sense(workbench):
    s = write_buffering.run({"sizes": {"write_buffering_calls": 5000}}, workbench)
    assert s["status"] == "ok"
    for mode in ("unbuffered", "buffered"):
        m = s["modes"][mode]
        assert len(m["per_call_samples_ns"]) == write_buffering.REPEATS
        assert len(m["warmup_per_call_ns"]) == write_buffering.WARMUP_REPEATS
        spread = m["per_call_ns"]
        assert spread["min"] <= spread["median"] <= spread["max"]
        assert all(v > 0 for v in m["per_call_samples_ns"])
    # the syscall boundary: a buffered 1-byte write must be cheaper than a write(2). Compared on each mode's
    # least-disturbed sample (its minimum): on a machine whose other tests share the cores, a preemption
    # inside one 5000-call buffered sample (about 0.3 ms) can outweigh the whole effect, and only adds time
    per_call = {mode: s["modes"][mode]["per_call_ns"] for mode in ("buffered", "unbuffered")}
    assert per_call["buffered"]["min"] < per_call["unbuffered"]["min"], per_call
    assert list(workbench.iterdir()) == []


def test_buffer_facts_match_one_of_pythons_rules(workbench):
    facts = write_buffering.buffer_facts(workbench / "probe.bin")
    assert facts["default_buffer_size_bytes"] == io.DEFAULT_BUFFER_SIZE
    assert facts["st_blksize_bytes"] == os.stat(workbench).st_blksize
    rule_314 = max(min(facts["st_blksize_bytes"], 8 << 20), io.DEFAULT_BUFFER_SIZE)
    assert facts["observed_buffer_bytes"] in {facts["st_blksize_bytes"], io.DEFAULT_BUFFER_SIZE, rule_314}
    assert not (workbench / "probe.bin").exists()


def test_observed_buffer_follows_an_explicit_buffer_size(workbench, monkeypatch):
    # open() with buffering=N must be observed as N: the probe reads the flush, not a constant.
    real_open = open
    monkeypatch.setattr(write_buffering, "open", lambda p, m: real_open(p, m, buffering=12345), raising=False)
    assert write_buffering.observed_buffer_bytes(workbench / "b.bin") == 12345


def test_write_buffering_rejects_bad_calls(workbench):
    with pytest.raises(ValueError, match="write_buffering_calls must be > 0"):
        write_buffering.run({"sizes": {"write_buffering_calls": 0}}, workbench)


# fsync_bench


def test_fsync_bench_structure(fsync_section):
    s, wd = fsync_section
    assert s["status"] == "ok"
    assert s["mode_order"] == ["none", "fsync", "fdatasync", "f_fullfsync", "f_barrierfsync", "o_dsync"]
    assert list(s["modes"]) == s["mode_order"]
    assert s["blocks"] == BLOCKS and s["block_bytes"] == 4096
    for name in ("none", "fsync", "fdatasync", "o_dsync"):
        m = s["modes"][name]
        assert m["status"] == "ok", name
        assert len(m["samples_ns"]) == BLOCKS == m["latency"]["n"]
        assert len(m["warmup_samples_ns"]) == fsync_bench.WARMUP_BLOCKS
        assert _ordered(m["latency"]), m["latency"]
    for name in ("fsync", "fdatasync"):
        m = s["modes"][name]
        assert len(m["write_samples_ns"]) == BLOCKS
        # the write part is inside the write+sync sample
        assert all(w <= t for w, t in zip(m["write_samples_ns"], m["samples_ns"], strict=True))
    assert "write_samples_ns" not in s["modes"]["none"]
    assert list(wd.iterdir()) == [], "fsync_bench must delete its files"


def test_fsync_costs_at_least_a_plain_write(fsync_section):
    s, _ = fsync_section
    none = s["modes"]["none"]["latency"]["p50_us"]
    assert s["modes"]["fsync"]["latency"]["p50_us"] >= none
    assert s["modes"]["fdatasync"]["latency"]["p50_us"] >= none


@pytest.mark.parametrize(
    ("mode", "call"), [("f_fullfsync", "F_FULLFSYNC"), ("f_barrierfsync", "F_BARRIERFSYNC")]
)
def test_fcntl_syncs_unsupported_on_linux_with_reason(fsync_section, mode, call):
    s, _ = fsync_section
    m = s["modes"][mode]
    assert m == {"status": "unsupported", "reason": m["reason"]}
    assert call in m["reason"] and "macOS" in m["reason"]


@pytest.mark.parametrize("mode", ["fsync", "fdatasync"])
def test_sync_modes_call_the_real_sync_once_per_write(workbench, monkeypatch, mode):
    real, fds = getattr(os, mode), []
    monkeypatch.setattr(fsync_bench.os, mode, lambda fd: (fds.append(fd), real(fd))[1])
    m = fsync_bench.bench_mode(mode, workbench / "s.bin", BLOCKS, 4096)
    assert m["call"] == f"os.{mode}"
    assert len(fds) == BLOCKS + fsync_bench.WARMUP_BLOCKS


def test_o_dsync_mode_opens_with_o_dsync(workbench, monkeypatch):
    real_open, flags = os.open, []
    monkeypatch.setattr(
        fsync_bench.os, "open", lambda p, f, m=0o777: (flags.append(f), real_open(p, f, m))[1]
    )
    fsync_bench.bench_mode("o_dsync", workbench / "o.bin", BLOCKS, 4096)
    fsync_bench.bench_mode("none", workbench / "n.bin", BLOCKS, 4096)
    assert flags[0] & os.O_DSYNC and not flags[1] & os.O_DSYNC


class _FakeFcntl:
    """fcntl for macOS: F_FULLFSYNC exists; each call raises ``fail_errno`` after ``ok_calls`` successes.

    ``barrier_name`` adds F_BARRIERFSYNC as a module attribute, as a Python that names it would;
    without it only the raw command 85 reaches :meth:`fcntl`, as on Pythons whose module lacks it.
    """

    F_FULLFSYNC = 51  # its value in macOS <sys/fcntl.h>
    BARRIER = 85  # F_BARRIERFSYNC in macOS <sys/fcntl.h>

    def __init__(self, fail_errno: int | None, ok_calls: int = 0, *, barrier_name: bool = False):
        self.fail_errno, self.ok_calls, self.seen, self.cmds = fail_errno, ok_calls, [], []
        if barrier_name:
            self.F_BARRIERFSYNC = self.BARRIER

    def fcntl(self, fd, cmd):
        assert cmd in (self.F_FULLFSYNC, self.BARRIER)
        self.seen.append(fd)
        self.cmds.append(cmd)
        if self.fail_errno is not None and len(self.seen) > self.ok_calls:
            raise OSError(self.fail_errno, os.strerror(self.fail_errno))
        return 0


FCNTL_MODES = [("f_fullfsync", _FakeFcntl.F_FULLFSYNC), ("f_barrierfsync", _FakeFcntl.BARRIER)]


@pytest.mark.parametrize(("mode", "cmd"), FCNTL_MODES)
@pytest.mark.parametrize(
    ("err", "kind"),
    [(errno.ENOTTY, "refusal"), (errno.ENOTSUP, "refusal"), (errno.EIO, "error"), (errno.EINVAL, "error")],
)
def test_fcntl_sync_falls_back_to_fsync_on_any_errno(workbench, monkeypatch, mode, cmd, err, kind):
    fake = _FakeFcntl(err, ok_calls=2)
    real_fsync, fsyncs = os.fsync, []
    monkeypatch.setattr(fsync_bench.os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    m = fsync_bench.bench_mode(mode, workbench / "f.bin", BLOCKS, 4096, system="Darwin", fcntl_mod=fake)
    assert m["status"] == "ok"
    assert len(m["samples_ns"]) == BLOCKS
    total_calls = BLOCKS + fsync_bench.WARMUP_BLOCKS
    assert len(fake.seen) == 3 and set(fake.cmds) == {cmd}  # two successes, the failure; never again
    assert len(fsyncs) == total_calls - 2  # the failed call and every later one used os.fsync
    assert m["fallback"] == {
        "to": "os.fsync",
        "errno": errno.errorcode[err],
        "error": f"[Errno {err}] {os.strerror(err)}",
        "after_calls": 2,
        "kind": kind,
    }
    assert not (workbench / "f.bin").exists()


@pytest.mark.parametrize(("mode", "cmd"), FCNTL_MODES)
def test_fcntl_sync_without_error_records_no_fallback(workbench, mode, cmd):
    fake = _FakeFcntl(None)
    m = fsync_bench.bench_mode(mode, workbench / "f.bin", BLOCKS, 4096, system="Darwin", fcntl_mod=fake)
    assert m["status"] == "ok" and m["fallback"] is None
    assert m["call"] == f"fcntl {fsync_bench.FCNTL_MODES[mode]}"
    assert fake.cmds == [cmd] * (BLOCKS + fsync_bench.WARMUP_BLOCKS)
    assert m["fcntl_command"] == cmd
    assert "not yet validated on real macOS hardware" in m["validation"]


@pytest.mark.parametrize(
    ("system", "barrier_name", "expected"),
    [
        ("Darwin", False, (85, "macOS <sys/fcntl.h>")),  # the module lacks the name: 85 on Darwin
        ("Darwin", True, (85, "fcntl.F_BARRIERFSYNC")),
        ("Linux", False, None),
        ("Linux", True, (85, "fcntl.F_BARRIERFSYNC")),  # the module's own name always wins
    ],
)
def test_barrierfsync_command_per_platform(system, barrier_name, expected):
    got = fsync_bench.barrierfsync_command(system, _FakeFcntl(None, barrier_name=barrier_name))
    if expected is None:
        assert got is None
    else:
        assert got[0] == expected[0] and expected[1] in got[1]


def test_barrierfsync_uses_the_modules_own_number(workbench):
    fake = _FakeFcntl(None, barrier_name=True)
    fake.F_BARRIERFSYNC = fake.BARRIER = 4085  # whatever the module says, not the hard-coded 85
    path = workbench / "b.bin"
    m = fsync_bench.bench_mode("f_barrierfsync", path, 2, 4096, system="Darwin", fcntl_mod=fake)
    assert set(fake.cmds) == {4085} and m["fcntl_command"] == 4085
    assert m["fcntl_command_source"] == "fcntl.F_BARRIERFSYNC"


def test_darwin_run_measures_every_fcntl_mode(workbench):
    s = fsync_bench.run(
        {"sizes": {"fsync_blocks": 3, "fsync_block_bytes": 4096}, "system": "Darwin"},
        workbench,
        fcntl_mod=_FakeFcntl(None),
    )
    for mode, cmd in FCNTL_MODES:
        m = s["modes"][mode]
        assert m["status"] == "ok" and m["fcntl_command"] == cmd and len(m["samples_ns"]) == 3
    assert list(workbench.iterdir()) == []


def test_fsync_error_after_a_fallback_is_raised_not_hidden(workbench, monkeypatch):
    # fsyncgate: an error from os.fsync itself means the data may be lost; the step fails
    def failing_fsync(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(fsync_bench.os, "fsync", failing_fsync)
    with pytest.raises(OSError) as exc:
        fsync_bench.bench_mode(
            "f_fullfsync", workbench / "f.bin", BLOCKS, 4096, system="Darwin", fcntl_mod=_FakeFcntl(errno.EIO)
        )
    assert exc.value.errno == errno.EIO
    assert not (workbench / "f.bin").exists()


def test_fdatasync_unsupported_without_os_fdatasync(workbench, monkeypatch):
    monkeypatch.delattr(fsync_bench.os, "fdatasync")
    m = fsync_bench.bench_mode("fdatasync", workbench / "d.bin", BLOCKS, 4096, system="Darwin")
    assert m["status"] == "unsupported" and "fdatasync" in m["reason"] and "Darwin" in m["reason"]


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"fsync_blocks": -3, "fsync_block_bytes": 4096}, "fsync_blocks must be > 0, got -3"),
        ({"fsync_blocks": 10, "fsync_block_bytes": 0}, "fsync_block_bytes must be > 0, got 0"),
        ({"fsync_blocks": 2.5, "fsync_block_bytes": 4096}, "fsync_blocks must be an integer"),
    ],
)
def test_fsync_bench_rejects_bad_sizes(workbench, sizes, message):
    with pytest.raises(ValueError, match=message):
        fsync_bench.run({"sizes": sizes}, workbench)


# big_write


def test_big_write_structure_and_sense(workbench):
    s = big_write.run({"sizes": {"big_write_mib": 1}}, workbench)
    assert s["status"] == "ok"
    assert s["size_bytes"] == 1 << 20
    n = big_write.REPEATS
    assert len(s["write_samples_s"]) == len(s["fsync_samples_s"]) == len(s["write_rate_samples_mib_s"]) == n
    assert len(s["warmup_write_samples_s"]) == big_write.WARMUP_REPEATS
    assert all(c >= 1 for c in s["write_calls"])
    for w, rate in zip(s["write_samples_s"], s["write_rate_samples_mib_s"], strict=True):
        assert w > 0 and rate == pytest.approx(1 / w)
    assert all(f > 0 for f in s["fsync_samples_s"])
    for key in ("write_s", "fsync_s", "write_rate_mib_s"):
        assert s[key]["min"] <= s[key]["median"] <= s[key]["max"]
    assert list(workbench.iterdir()) == []


def test_big_write_data_is_not_compressible():
    data = big_write.make_data(1 << 20)
    assert len(data) == 1 << 20
    assert len(zlib.compress(data)) >= len(data)  # random bytes do not shrink
    assert big_write.make_data(4096, seed=1) != big_write.make_data(4096, seed=2)


def test_big_write_file_really_holds_the_data(workbench, monkeypatch):
    # catch the file just before it is deleted: the bytes on disk are the bytes given
    data, seen = big_write.make_data(256 * 1024), {}
    real_unlink = os.unlink

    def unlink(path):
        with open(path, "rb") as f:
            seen["bytes"] = f.read()
        real_unlink(path)

    monkeypatch.setattr(big_write.os, "unlink", unlink)
    big_write.write_then_fsync(workbench / "x.bin", data)
    assert seen["bytes"] == data


def test_big_write_rejects_bad_size(workbench):
    with pytest.raises(ValueError, match="big_write_mib must be > 0, got 0"):
        big_write.run({"sizes": {"big_write_mib": 0}}, workbench)


# big_write's durable call: fsync on Linux, F_FULLFSYNC after a plain fsync on macOS

# The keys big_write's section had before it recorded its durable call; Linux keeps exactly these.
BIG_WRITE_KEYS_BEFORE = {
    "status", "size_bytes", "repeats", "warmup_repeats", "warmup_write_samples_s", "warmup_fsync_samples_s",
    "data", "write_calls", "write_samples_s", "fsync_samples_s", "write_rate_samples_mib_s", "write_s",
    "fsync_s", "write_rate_mib_s", "write_io_records", "fsync_io_records", "layers",
}  # fmt: skip
# The fake F_FULLFSYNC moves the step's clock on by this much: only its interval can hold it.
TICK_S = 1000.0
REAL_FSYNC = os.fsync  # taken before any test replaces it


class _Clock:
    """time.perf_counter plus ``offset`` s, for the step's ``time`` module."""

    def __init__(self):
        self.offset = 0.0

    def perf_counter(self) -> float:
        return time.perf_counter() + self.offset


class _FullFsyncFcntl:
    """fcntl for macOS: F_FULLFSYNC runs the real os.fsync, records the call and the file behind its fd.

    Each call appends "F_FULLFSYNC" to ``events`` and moves ``clock`` on by TICK_S; ``fail_errno``
    makes every call raise instead (a volume that refuses it).
    """

    F_FULLFSYNC = 51  # its value in macOS <sys/fcntl.h>

    def __init__(self, path, events, clock=None, fail_errno=None):
        self.path, self.events, self.clock, self.fail_errno = path, events, clock, fail_errno
        self.calls = []

    def fcntl(self, fd, cmd):
        st = os.fstat(fd)
        self.calls.append(
            {"fd": fd, "cmd": cmd, "same_file": os.path.samestat(st, os.stat(self.path)), "size": st.st_size}
        )
        self.events.append("F_FULLFSYNC")
        if self.fail_errno is not None:
            raise OSError(self.fail_errno, os.strerror(self.fail_errno))
        REAL_FSYNC(fd)  # the data is really synced
        if self.clock is not None:
            self.clock.offset += TICK_S
        return 0


@pytest.fixture
def fsync_events(monkeypatch):
    """Every os.fsync from here on appends "fsync" to the list returned, then syncs for real."""
    events, real = [], os.fsync
    monkeypatch.setattr(big_write.os, "fsync", lambda fd: (events.append("fsync"), real(fd))[1])
    return events


def _darwin_run(workbench, monkeypatch, events, **fake_kw):
    clock = _Clock()
    monkeypatch.setattr(big_write, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    fake = _FullFsyncFcntl(workbench / "big_write.bin", events, clock, **fake_kw)
    cfg = {"sizes": {"big_write_mib": 1}, "system": "Darwin"}
    return big_write.run(cfg, workbench, fcntl_mod=fake), fake


def test_big_write_on_darwin_times_f_fullfsync_as_the_durable_figure(workbench, monkeypatch, fsync_events):
    s, fake = _darwin_run(workbench, monkeypatch, fsync_events)
    n = big_write.WARMUP_REPEATS + big_write.REPEATS
    # F_FULLFSYNC once per repeat (warm-up included), on the fd of the file holding all the data
    assert len(fake.calls) == n
    assert all(c["cmd"] == 51 and c["same_file"] and c["size"] == 1 << 20 for c in fake.calls)
    # plain fsync first, then F_FULLFSYNC, each repeat; the layers' own fsync last
    assert fsync_events == ["fsync", "F_FULLFSYNC"] * n + ["fsync"]
    assert s["system"] == "Darwin" and s["durable_call"] == "fcntl F_FULLFSYNC"
    # the durable figure is F_FULLFSYNC's interval (only it holds the clock's tick), plain fsync's is apart
    assert len(s["fsync_samples_s"]) == len(s["plain_fsync_samples_s"]) == big_write.REPEATS
    assert all(f >= TICK_S for f in s["fsync_samples_s"] + s["warmup_fsync_samples_s"])
    assert all(0 < p < TICK_S for p in s["plain_fsync_samples_s"] + s["warmup_plain_fsync_samples_s"])
    assert s["fsync_s"]["min"] >= TICK_S > s["plain_fsync_s"]["max"]
    assert s["plain_fsync_durable"] is False
    assert len(s["plain_fsync_io_records"]) == big_write.REPEATS
    assert s["fcntl_command"] == 51 and s["fcntl_command_source"] == "fcntl.F_FULLFSYNC"
    assert s["fallback"] is None
    assert "not yet validated on real macOS hardware" in s["validation"]
    assert list(workbench.iterdir()) == []


def test_big_write_darwin_refused_f_fullfsync_falls_back_and_says_so(workbench, monkeypatch, fsync_events):
    s, fake = _darwin_run(workbench, monkeypatch, fsync_events, fail_errno=errno.ENOTTY)
    n = big_write.WARMUP_REPEATS + big_write.REPEATS
    assert len(fake.calls) == 1  # refused once, never retried
    assert fsync_events == ["fsync", "F_FULLFSYNC", "fsync"] + ["fsync", "fsync"] * (n - 1) + ["fsync"]
    assert s["durable_call"] == "fcntl F_FULLFSYNC"
    assert s["fallback"] == {
        "to": "os.fsync",
        "errno": "ENOTTY",
        "error": f"[Errno {errno.ENOTTY}] {os.strerror(errno.ENOTTY)}",
        "after_calls": 0,
        "kind": "refusal",
    }


def test_big_write_darwin_without_f_fullfsync_fails_with_the_reason(workbench):
    cfg = {"sizes": {"big_write_mib": 1}, "system": "Darwin"}
    with pytest.raises(ValueError, match="fcntl has no F_FULLFSYNC on Darwin: the durable call there"):
        big_write.run(cfg, workbench, fcntl_mod=types.SimpleNamespace())
    assert list(workbench.iterdir()) == []


def test_big_write_on_linux_is_unchanged(workbench, fsync_events):
    # an fcntl module that has F_FULLFSYNC changes nothing on Linux: fsync is the durable call there
    fake = _FullFsyncFcntl(workbench / "big_write.bin", fsync_events)
    s = big_write.run({"sizes": {"big_write_mib": 1}, "system": "Linux"}, workbench, fcntl_mod=fake)
    assert fake.calls == []
    assert fsync_events == ["fsync"] * (big_write.WARMUP_REPEATS + big_write.REPEATS + 1)
    assert set(s) == BIG_WRITE_KEYS_BEFORE | {"system", "durable_call", "rounds"}
    assert s["system"] == "Linux" and s["durable_call"] == "fsync"
    one = big_write.write_then_fsync(workbench / "x.bin", b"x" * 4096, system="Linux", fcntl_mod=fake)
    assert set(one) == {"write_s", "fsync_s", "write_calls", "write_io", "fsync_io", "durable_call"}
    assert one["durable_call"] == "fsync" and fake.calls == []


def test_write_then_fsync_defaults_to_this_hosts_system(workbench, monkeypatch, fsync_events):
    monkeypatch.setattr(big_write.platform, "system", lambda: "Darwin")
    events = []
    fake = _FullFsyncFcntl(workbench / "x.bin", events)
    one = big_write.write_then_fsync(workbench / "x.bin", b"y" * 4096, fcntl_mod=fake)
    assert one["durable_call"] == "fcntl F_FULLFSYNC" and len(fake.calls) == 1
    assert "plain_fsync_s" in one and fsync_events == ["fsync"]


@pytest.mark.parametrize(
    ("system", "cls", "call"),
    [
        ("Linux", durable.Fsync, "fsync"),
        ("Darwin", durable.FcntlSync, "fcntl F_FULLFSYNC"),
        ("FreeBSD", durable.Fsync, "fsync"),
    ],
)
def test_durable_sync_per_platform(system, cls, call):
    got = durable.durable_sync(system, _FakeFcntl(None))
    assert type(got) is cls and got.call == call
    assert durable.plain_fsync_is_durable(system) is (system != "Darwin")


# each script runs alone and prints its JSON


@pytest.mark.parametrize(
    ("script", "args", "key"),
    [
        ("write_buffering.py", ["--calls", "500"], "modes"),
        ("fsync_bench.py", ["--blocks", "3"], "modes"),
        ("big_write.py", ["--mib", "1"], "write_samples_s"),
    ],
)
def test_script_runs_alone(workbench, script, args, key):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            f"disklab_host.steps.{script.removesuffix('.py')}",
            "--workdir",
            str(workbench),
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    section = json.loads(out.stdout)
    assert section["status"] == "ok" and key in section
    assert list(workbench.iterdir()) == []
