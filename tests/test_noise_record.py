"""The noise and time split every timed sample records, on this host for real and on macOS through doubles.

Linux reads are real (/proc/pressure, /proc/stat, /proc/self/task/*/schedstat); the macOS path, which
cannot run here, gets injected host_statistics readings and says in each record that it was not run on a
Mac. Delay accounting is switched through a fake /proc/sys under tmp_path, never this host's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import pytest

from disklab import figures, noise, stored
from disklab_host.audit import collect, quiet
from disklab_host.common import noise as host_noise
from disklab_host.common import sampling, stats, timesplit
from disklab_host.steps import big_write, fsync_bench, write_buffering
from disklab_host.steps import load as load_step

REPO = Path(__file__).resolve().parent.parent


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _burn(cpu_s: float) -> None:
    """Use ``cpu_s`` of this thread's CPU time, however long a busy machine makes that take, mostly with the
    GIL released (hashlib lets it go for large buffers), so that threads burn side by side."""
    block = bytes(1 << 20)
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        hashlib.sha256(block).digest()


def test_a_real_interval_records_pressure_cpu_swap_and_runnable_here():
    probe = host_noise.Probe()
    before = probe.begin()
    _spin(0.05)
    rec = probe.end(before)
    assert rec["interval_s"] >= 0.05
    assert set(rec["pressure"]) >= {"cpu_some_s", "io_some_s", "io_full_s", "memory_some_s", "memory_full_s"}
    assert rec["cpu"]["cpu_time_s"] >= 0 and "steal_s" in rec["cpu"] and rec["cpu"]["tick_s"] > 0
    assert set(rec["runnable"]) == {"begin", "end"} and rec["runnable"]["end"] >= 1
    assert set(rec["swap"]) == {"in_pages", "out_pages"}
    assert host_noise.Probe(enabled=False).end(None) is None


def test_what_cannot_be_read_says_why_and_never_reads_as_zero(tmp_path):
    rec = host_noise.Probe(root=tmp_path).end(host_noise.Probe(root=tmp_path).begin())
    assert "unavailable" in rec["pressure"] and "CONFIG_PSI" in rec["pressure"]["unavailable"]
    assert "unavailable" in rec["cpu"] and "unavailable" in rec["swap"]


def test_the_macos_path_reads_host_statistics_and_says_it_never_ran_on_a_mac():
    readings = iter(
        [
            {"ticks": {"user": 100, "system": 50, "idle": 800, "nice": 0}, "swap": {"in": 7, "out": 3}},
            {"ticks": {"user": 130, "system": 60, "idle": 860, "nice": 0}, "swap": {"in": 9, "out": 3}},
        ]
    )
    probe = host_noise.Probe(system="Darwin", mach=lambda: next(readings))
    rec = probe.end(probe.begin())
    assert rec["pressure"] == {"unavailable": host_noise.NO_PRESSURE_MACOS}
    assert rec["cpu"]["cpu_time_s"] == pytest.approx(100 * probe.tick_s)
    assert rec["cpu"]["busy_s"] == pytest.approx(40 * probe.tick_s) and "steal_s" not in rec["cpu"]
    assert rec["swap"] == {"in_pages": 2, "out_pages": 0}
    assert "unavailable" in rec["runnable"] and rec["validation"] == host_noise.MACOS_VALIDATION


def test_the_time_split_counts_cpu_and_sleep_for_real():
    clock = timesplit.ProcessClock()
    a = clock.read()
    t0 = time.perf_counter()
    _burn(0.2)
    time.sleep(0.2)
    wall = time.perf_counter() - t0
    split = clock.split(a, clock.read(), wall)
    assert split["user_s"] + split["system_s"] >= 0.19
    assert split["rest_s"] >= 0.15  # the sleep: neither CPU, nor I/O, nor a wait for a CPU
    assert isinstance(split["waiting_s"], float) and split["threads"] >= 1
    assert "overlap_s" not in split  # one thread: its parts fit in its wall time


def test_threads_are_summed_and_their_overlap_is_kept_apart():
    clock = timesplit.ProcessClock()
    a = clock.read()
    t0 = time.perf_counter()
    burnt, release = threading.Barrier(3), threading.Event()

    def worker():
        _burn(0.3)
        burnt.wait()
        release.wait()  # alive at the read below: a thread that ended takes its waiting time with it

    workers = [threading.Thread(target=worker) for _ in range(2)]
    for w in workers:
        w.start()
    _burn(0.3)
    burnt.wait()
    split = clock.split(a, clock.read(), time.perf_counter() - t0)
    release.set()
    for w in workers:
        w.join()
    counted = split["user_s"] + split["system_s"] + split["waiting_s"]
    assert split["threads"] >= 3
    assert counted > split["wall_s"]  # three threads burning on two CPUs: more thread-time than wall time
    assert split["rest_s"] == 0.0 and split["overlap_s"] == pytest.approx(counted - split["wall_s"], abs=0.05)


def _fake_proc(root: Path, delayacct: str | None, blkio: int, wait_ns: int = 0) -> None:
    task = root / "proc/self/task/1"
    task.mkdir(parents=True, exist_ok=True)
    (task / "schedstat").write_text(f"1000 {wait_ns} 3\n")
    fields = ["S"] + ["0"] * 38 + [str(blkio)] + ["0"] * 10  # field 42 is the 40th after the comm's ")"
    (task / "stat").write_text("1 (python) " + " ".join(fields) + "\n")
    if delayacct is not None:
        (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
        (root / "proc/sys/kernel/task_delayacct").write_text(delayacct + "\n")


def test_blocked_io_comes_from_delay_accounting_only_while_it_is_on(tmp_path):
    clock = timesplit.ProcessClock(root=tmp_path)
    _fake_proc(tmp_path, "1", blkio=10, wait_ns=0)
    a = clock.read()
    _fake_proc(tmp_path, "1", blkio=35, wait_ns=20_000_000)
    split = clock.split(a, clock.read(), 1.0)
    assert split["blocked_io_s"] == pytest.approx(25 * clock.tick_s) and split["waiting_s"] == pytest.approx(
        0.02
    )
    _fake_proc(tmp_path, "0", blkio=35)
    off = clock.split(clock.read(), clock.read(), 1.0)
    assert off["blocked_io_s"] == {"unavailable": timesplit.NO_DELAYACCT}


def test_macos_records_cpu_only_and_says_so():
    clock = timesplit.ProcessClock(system="Darwin")
    split = clock.split(clock.read(), clock.read(), 0.1)
    assert split["waiting_s"] == split["blocked_io_s"] == {"unavailable": timesplit.NOT_ON_MACOS}
    assert split["validation"] == timesplit.MACOS_VALIDATION


def test_the_lab_turns_delay_accounting_on_for_its_run_and_puts_it_back(tmp_path):
    _fake_proc(tmp_path, "0", blkio=0)
    rec = timesplit.delay_accounting_on(False, "Linux", tmp_path)  # as root here: no become needed
    assert rec["state"] == "turned_on" and rec["previous"] == 0
    assert (tmp_path / "proc/sys/kernel/task_delayacct").read_text().strip() == "1"
    back = timesplit.delay_accounting_restore(rec, False, tmp_path)
    assert (
        back["restored"] is True and (tmp_path / "proc/sys/kernel/task_delayacct").read_text().strip() == "0"
    )
    _fake_proc(tmp_path, "1", blkio=0)
    kept = timesplit.delay_accounting_on(False, "Linux", tmp_path)
    assert kept["state"] == "already_on" and timesplit.delay_accounting_restore(kept, False, tmp_path) == kept
    assert timesplit.delay_accounting_on(False, "Darwin")["state"] == "not_applicable"


def test_a_run_killed_while_it_held_delay_accounting_on_is_set_back_by_the_next(tmp_path):
    switch, mark = (
        tmp_path / "proc/sys/kernel/task_delayacct",
        tmp_path / "labroot" / timesplit.DELAYACCT_MARK,
    )
    mark.parent.mkdir()
    _fake_proc(tmp_path, "0", blkio=0)
    killed = timesplit.delay_accounting_on(False, "Linux", tmp_path, mark=mark)
    assert killed["state"] == "turned_on" and mark.is_file() and switch.read_text().strip() == "1"
    # killed here: never restored. The next run in the same lab root finds the switch at 1 and the mark
    nxt = timesplit.delay_accounting_on(False, "Linux", tmp_path, mark=mark)
    assert nxt["state"] == "turned_on" and nxt["previous"] == 0 and "killed" in nxt["why"]
    back = timesplit.delay_accounting_restore(nxt, False, tmp_path)
    assert back["restored"] is True and "mark" not in back
    assert switch.read_text().strip() == "0" and not mark.exists()
    # at 1 with no mark, someone else's: left as it is
    _fake_proc(tmp_path, "1", blkio=0)
    theirs = timesplit.delay_accounting_on(False, "Linux", tmp_path, mark=mark)
    assert (
        theirs["state"] == "already_on"
        and timesplit.delay_accounting_restore(theirs, False, tmp_path) == theirs
    )
    assert switch.read_text().strip() == "1"


def test_an_interval_switched_off_says_each_record_was_not_recorded(tmp_path):
    off = sampling.Interval(tmp_path, enabled=False)
    recs = off.end(off.begin(), "x")
    assert all("unavailable" in recs[k] for k in ("io_record", "noise", "time_split"))
    on = sampling.Interval(tmp_path)
    recs = on.end(on.begin(), "one interval")
    assert recs["io_record"]["interval"] == "one interval" and "interval_s" in recs["noise"]
    assert recs["time_split"]["wall_s"] >= 0


# --- the steps' rounds ---------------------------------------------------------------------------------


def test_fsync_rounds_take_turns_and_cover_every_measured_block(tmp_path):
    sec = fsync_bench.run(
        {"sizes": {"fsync_blocks": 25, "fsync_block_bytes": 4096}, "system": "Linux"}, tmp_path
    )
    assert stats.round_sizes(25) == [3, 3, 3, 3, 3, 2, 2, 2, 2, 2] and sec["rounds"] == 10
    ran = [m for m in fsync_bench.MODE_ORDER if sec["modes"][m]["status"] == "ok"]
    assert sec["round_order"][0] == ran and sec["round_order"][1] == ran[1:] + ran[:1]
    for mode in ran:
        m = sec["modes"][mode]
        assert [r["first"] for r in m["rounds"]] == [0, 3, 6, 9, 12, 15, 17, 19, 21, 23]
        assert sum(r["count"] for r in m["rounds"]) == len(m["samples_ns"]) == 25
        assert all("interval_s" in r["noise"] and "user_s" in r["time_split"] for r in m["rounds"])
        writes = sum(r["io_record"]["process"]["write_bytes"] for r in m["rounds"])
        assert m["io_record"]["process"]["write_bytes"] == writes and m["io_record"]["intervals"] == 10
    fig = figures.by_key(figures.extract({"experiments": {"fsync_bench": sec}}))[
        "experiments.fsync_bench.modes.fsync.samples_ns"
    ]
    assert fig.unit_kind == "batches" and len(fig.units) == 10 and fig.measure == "durable_sync"
    assert fig.flags is not None and len(fig.flags) == 10
    assert list(tmp_path.iterdir()) == []


def test_write_and_big_write_repeats_are_rounds_of_one_with_their_noise(tmp_path):
    wb = write_buffering.run({"sizes": {"write_buffering_calls": 2000}}, tmp_path)
    for mode in wb["modes"].values():
        assert [r["count"] for r in mode["rounds"]] == [1] * write_buffering.REPEATS
        assert len(mode["per_call_samples_ns"]) == write_buffering.REPEATS and "io_records" not in mode
    bw = big_write.run({"sizes": {"big_write_mib": 1}, "system": "Linux"}, tmp_path)
    assert [r["first"] for r in bw["rounds"]] == list(range(big_write.REPEATS))
    f = figures.by_key(figures.extract({"experiments": {"big_write": bw}}))[
        "experiments.big_write.write_samples_s"
    ]
    assert f.unit_kind == "samples" and f.flags is not None and f.measure == "time"


def test_a_run_from_before_version_6_reads_as_not_recorded_not_quiet():
    doc = json.loads((REPO / "tests/fixtures/stored/v1/oldhost/runs/20261130T090000Z.json").read_text())
    doc = stored.upgrade(doc, "results")
    assert doc["noise_context"] == {"unavailable": stored.NOISE_NOT_RECORDED}
    found = [f for f in figures.extract(doc) if f.kind == figures.SAMPLES]
    assert found and all(f.flags is None for f in found)
    assert all("not recorded" in (f.noise_summary or "") for f in found)
    fsync = doc["experiments"].get("fsync_bench") or {}
    for mode in (fsync.get("modes") or {}).values() if fsync.get("status") == "ok" else []:
        if mode.get("status") == "ok":
            assert mode["rounds_from"] == stored.FSYNC_ROUNDS_UPGRADED
            assert sum(r["count"] for r in mode["rounds"]) == len(mode["samples_ns"])


# --- adaptive load repeats ----------------------------------------------------------------------------


def _fake_one(spread: dict):
    import random

    rng = random.Random(5)

    def one(rep, cell, state):
        t = rng.gauss(1.0, spread[cell["method"]])
        stages = {"all_touched": {"status": "ok", "time_s": t}}
        return {"file": cell["file"], "method": cell["method"], "populate": None, "repeat": rep,
                "cache_state_requested": state, "cache_state": state, "stages": stages,
                "stage_order": ["all_touched"]}  # fmt: skip

    return one


PLAN = [
    {"file": "big_pt", "method": "torch.load", "populate": None},
    {"file": "big_safetensors", "method": "load_file", "populate": None},
]


def test_adaptive_repeats_stop_each_cell_once_its_median_is_known():
    cfg = {"sizes": {"load_repeats_max": 12, "load_budget_s": 600}, "profile": "full"}
    samples, rec = load_step.measure_adaptive(
        _fake_one({"torch.load": 0.005, "load_file": 0.3}), PLAN, cfg, 3
    )
    by = {(c["method"], c["cache_state"]): c for c in rec["cells"]}
    assert by[("torch.load", "cold")]["n"] == 6 and by[("torch.load", "cold")]["settled"]  # 6 is the fewest
    assert by[("load_file", "cold")]["n"] == 12 and not by[("load_file", "cold")]["settled"]
    assert rec["stopped"] == "cap" and rec["rounds"] == 12 and len(samples) == 2 * 6 + 2 * 12
    # a tight fleet settles before the cap; a budget of nothing stops after the minimum rounds
    _, tight = load_step.measure_adaptive(_fake_one({"torch.load": 0.005, "load_file": 0.005}), PLAN, cfg, 3)
    assert tight["stopped"] == "settled" and tight["rounds"] == 6
    cfg["sizes"]["load_budget_s"] = 1e-9
    _, spent = load_step.measure_adaptive(_fake_one({"torch.load": 0.3, "load_file": 0.3}), PLAN, cfg, 3)
    assert spent["stopped"] == "budget" and spent["rounds"] == 3


# --- the quiet-host checks ----------------------------------------------------------------------------


def _linux_root(tmp_path: Path, *, governor="powersave", no_turbo="0", swap_free_kib=1000, load="3.50"):
    cpu = tmp_path / "sys/devices/system/cpu"
    for i in range(2):
        (cpu / f"cpu{i}/cpufreq").mkdir(parents=True)
        (cpu / f"cpu{i}/cpufreq/scaling_governor").write_text(governor + "\n")
    (cpu / "intel_pstate").mkdir()
    (cpu / "intel_pstate/no_turbo").write_text(no_turbo + "\n")
    proc = tmp_path / "proc"
    (proc / "pressure").mkdir(parents=True)
    for r in ("cpu", "io", "memory"):
        some = "40.00" if r == "io" else "0.00"
        (proc / "pressure" / r).write_text(f"some avg10={some} avg60=0.00 avg300=0.00 total=1\n")
    (proc / "meminfo").write_text(f"MemTotal: 100 kB\nSwapTotal: 5000 kB\nSwapFree: {swap_free_kib} kB\n")
    (proc / "loadavg").write_text(f"{load} 1.00 1.00 2/100 1\n")
    (proc / "stat").write_text("cpu 10 0 10 100 0 0 0 0\n")
    (proc / "sys/kernel").mkdir(parents=True)
    (proc / "sys/kernel/task_delayacct").write_text("0\n")
    return tmp_path


def _spinner(root: Path, ticks: int) -> None:
    """A process under the fake root's /proc that has used ``ticks`` of CPU."""
    proc = root / "proc" / "4242"
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "stat").write_text(
        "4242 (spin) R " + " ".join(["0"] * 10) + f" {ticks} 0 " + " ".join(["0"] * 30)
    )
    (proc / "cmdline").write_bytes(b"spin\0--forever\0")


def test_the_quiet_checks_give_advice_from_what_they_read(tmp_path):
    probe = collect.Probe(system="Linux", root=_linux_root(tmp_path))
    _spinner(tmp_path, 0)
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    got = {
        c["check"]: c
        for c in quiet.collect_quiet(probe, 0.5, sleep=lambda s: _spinner(tmp_path, round(s / tick_s)))[
            "checks"
        ]
    }
    assert (
        got["busy_processes"]["state"] == "advice"
        and "spin --forever (pid 4242" in got["busy_processes"]["found"]
    )
    assert got["governor"]["state"] == "advice" and "powersave" in got["governor"]["found"]
    assert got["turbo"]["state"] == "advice" and got["swap"]["found"] == "4 MiB of swap in use"
    assert (
        got["load"]["state"] == "advice" and got["pressure"]["found"] == "stall over the last 10 s: io 40.0 %"
    )
    if os.geteuid() == 0:
        assert got["delay_accounting"]["state"] == "ok"
    quiet_root = _linux_root(
        tmp_path / "q", governor="performance", no_turbo="1", swap_free_kib=5000, load="0.1"
    )
    calm = {
        c["check"]: c["state"] for c in quiet.collect_quiet(collect.Probe(root=quiet_root), 0.0)["checks"]
    }
    assert calm["governor"] == calm["turbo"] == calm["swap"] == calm["load"] == "ok"
    # a high load average with no process busy now is work that has ended: the average is still decaying
    past = {
        c["check"]: c
        for c in quiet.collect_quiet(collect.Probe(root=_linux_root(tmp_path / "p")), 0.0)["checks"]
    }
    assert past["busy_processes"]["state"] == "ok" and past["load"]["state"] == "ok"
    assert (
        past["load"]["found"].startswith("load average 3.50 on") and "still decaying" in past["load"]["found"]
    )


def test_the_quiet_checks_on_macos_read_sysctl_and_say_what_they_do_not_check():
    said = {
        "vm.loadavg": "{ 0.10 0.20 0.30 }\n",
        "vm.swapusage": "total = 1024.00M  used = 12.50M  free = 1011.50M\n",
    }
    probe = collect.Probe(system="Darwin", run=lambda argv: said[argv[-1]])
    got = quiet.collect_quiet(probe)
    by = {c["check"]: c for c in got["checks"]}
    assert by["load"]["state"] == "ok" and by["swap"]["found"] == "12 MiB of swap in use"
    assert by["governor"] == {
        "check": "governor",
        "state": "unknown",
        "found": quiet.NOT_ON_MACOS,
        "advice": None,
    }
    assert got["validation"] == quiet.MACOS_VALIDATION


def test_doctor_prints_advice_first_then_what_was_fine():
    from disklab import cli

    busy = {
        "check": "busy_processes",
        "state": "advice",
        "found": "fio (pid 7, 90% of a CPU)",
        "advice": "stop",
    }
    calm = {"check": "swap", "state": "ok", "found": "no swap in use", "advice": None}
    text = cli.doctor_text("web1", {"window_s": 0.5, "checks": [calm, busy]})
    assert text.splitlines() == [
        "web1: 1 piece(s) of advice for steadier figures (nothing was changed)",
        "  advice  busy processes: fio (pid 7, 90% of a CPU); stop",
        "  ok      swap: no swap in use",
    ]
    assert "made no quiet-host checks" in cli.doctor_text("old", {"unavailable": "not checked"})
    assert noise.OTHER_IO_MIN_MIB_S > 0  # the bounds the report links to are constants of disklab.noise
