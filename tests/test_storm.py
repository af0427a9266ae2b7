"""A cold-start storm's figures (disklab.storm) from rounds made by hand, the start file a host's command
waits on (disklab_host.together.start), and a together run stored and rendered from what its playbook would
send (disklab.togetherrun, disklab.togetherpage); the storm itself runs on the test fleet in
test_fleet_together.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_disklab
from disklab import report, stored, storm, stormverdicts, togetherpage, togetherrun
from disklab.runner import HostOutcome
from disklab_host.common.result import parse
from disklab_host.together import start

S = 1_000_000_000
MIB = 1024 * 1024


def _host(offset_ns: int, started_ns: int, first_s: float, all_s: float, *, late_ns: int = 0, state="cold"):
    """One host's record of a round: its clock (offset, 0.1 ms uncertainty) and its sample."""
    return {
        "clock": {"offset_ns": offset_ns, "uncertainty_ns": 100_000},
        "sample": {
            "together": {"at_ns": started_ns - late_ns, "started_ns": started_ns, "late_ns": late_ns},
            "cache_state": state,
            "file_size_bytes": 64 * MIB,
            "stages": {"first_response": {"time_s": first_s}, "all_touched": {"time_s": all_s}},
        },
    }


def test_a_round_is_timed_on_the_controllers_clock_from_its_first_start():
    """host1's clock is 5 s ahead: its start, moved back by its offset, is 1 ms after host0's. First done is
    host0's end (1 s after the first start); last done is host1's (1 ms + 3 s); the aggregate is both files
    over that."""
    t0 = 1_700_000_000 * S
    rnd = {
        "n": 2,
        "method": "torch.load",
        "hosts": {"host0": _host(0, t0, 0.5, 1.0), "host1": _host(5 * S, t0 + 5 * S + 1_000_000, 2.0, 3.0)},
    }
    fig = storm.round_figures(rnd)
    assert fig["spread"]["spread_ns"] == 1_000_000 and fig["spread"]["together"]
    at = fig["stages"]["all_touched"]
    assert at["time_s"] == {"host0": 1.0, "host1": 3.0}
    assert at["first_done_s"] == pytest.approx(1.0) and at["last_done_s"] == pytest.approx(3.001)
    assert at["aggregate_bytes_per_s"] == pytest.approx(2 * 64 * MIB / 3.001)
    assert at["median_s"] == 2.0
    assert "aggregate_bytes_per_s" not in fig["stages"]["first_response"]  # bytes read are unknown there
    assert fig["cold"] and fig["not_cold"] == {} and fig["failed"] == {}


def test_a_round_says_which_hosts_were_not_cold_started_late_or_failed():
    t0 = 1_700_000_000 * S
    rnd = {
        "n": 3,
        "method": "load_file",
        "hosts": {
            "h0": _host(0, t0, 0.5, 1.0),
            "h1": _host(0, t0 + 40_000_000, 0.5, 1.0, late_ns=40_000_000, state="cold_unverified"),
            "h2": {"failed": "together-load: load_file failed: OSError: [Errno 5] Input/output error"},
        },
    }
    fig = storm.round_figures(rnd)
    assert fig["failed"] == {"h2": "together-load: load_file failed: OSError: [Errno 5] Input/output error"}
    assert not fig["cold"] and fig["not_cold"] == {"h1": "cold_unverified"}
    assert not fig["spread"]["together"] and fig["spread"]["late_hosts"] == {"h1": 40_000_000}
    assert list(fig["stages"]["all_touched"]["time_s"]) == ["h0", "h1"] and fig["hosts"] == ["h0", "h1", "h2"]
    nobody = storm.round_figures({"n": 1, "method": "load_file", "hosts": {"h0": {"failed": "gone"}}})
    assert nobody["stages"] == {} and nobody["spread"] is None and not nobody["cold"]


def _rounds(method: str, times: dict, repeats: int = 5, state: str = "cold") -> list[dict]:
    """``repeats`` rounds of ``method`` at each N of ``times`` ({N: each host's all_touched time}), the k-th
    repeat 1 % slower than the first (no ties), every host of a round ``state``."""
    t0 = 1_700_000_000 * S
    return [
        {"n": n, "method": method, "repeat": k + 1,
         "hosts": {f"h{i}": _host(0, t0, t * (1 + k / 100) / 2, t * (1 + k / 100), state=state)
                   for i in range(n)}}
        for n, t in times.items()
        for k in range(repeats)
    ]  # fmt: skip


def test_each_n_is_judged_against_n_1_on_its_rounds_and_the_doubling_n_is_the_first_shown_twice_as_slow():
    """Five rounds at each N: torch.load is shown slower at N = 2 and 4 but never 2×; torch.load-mmap is
    shown 2.1× slower at N = 2, so it doubles there; against torch.load it is shown ahead at N = 1 and
    behind from N = 2 on. The test units are the rounds (their median host), judged as one family."""
    fig = storm.figures(
        _rounds("torch.load", {1: 1.0, 2: 1.5, 4: 1.9}) + _rounds("torch.load-mmap", {1: 0.8, 2: 1.7, 4: 4.0})
    )
    eager, mapped = fig["methods"]["torch.load"], fig["methods"]["torch.load-mmap"]
    assert eager["all_touched"]["median_s"] == {1: 1.02, 2: 1.53, 4: pytest.approx(1.938)}
    assert eager["all_touched"]["rounds"] == {1: 5, 2: 5, 4: 5}
    two = eager["all_touched"]["against_one"][2]
    assert two["verdict"] == "changed" and two["direction"] == "up" and two["units"] == "rounds"
    assert two["ratio"] == pytest.approx(1.5) and (two["n_old"], two["n_new"]) == (5, 5)
    assert eager["all_touched"]["doubling_n"] is None and eager["all_touched"]["doubling_unshown"] == []
    assert (
        stormverdicts.doubling_text(eager["all_touched"]) == "not by N = 4 (every estimated ratio under 2×)"
    )
    assert mapped["all_touched"]["doubling_n"] == 2
    assert mapped["all_touched"]["reference_s"] == pytest.approx(0.816)
    assert stormverdicts.doubling_text(mapped["all_touched"]) == "N = 2 (2.12×, 95 % interval 2.06×..2.19×)"
    four = next(
        r for r in fig["rounds"] if r["method"] == "torch.load-mmap" and r["n"] == 4 and r["repeat"] == 1
    )
    assert four["stages"]["all_touched"]["slowdown"] == {
        f"h{i}": pytest.approx(4.0 / 0.816) for i in range(4)
    }
    behind = fig["mapped_behind"]["torch.load-mmap"]
    assert (behind["at"], behind["from"], behind["ahead"], behind["ns"]) == ([2, 4], 2, [1], [1, 2, 4])
    assert stormverdicts.behind_text(behind) == (
        "falls behind `torch.load` (eager reads) from N = 2 on, shown at every N measured from there "
        "(ahead at N = 1)"
    )
    assert behind["verdicts"][2].startswith("changed: 1.13× slower (95 % interval ")


def test_one_round_at_each_n_shows_nothing_and_says_which_n_reached_twice_without_the_rounds_to_show_it():
    fig = storm.figures(
        _rounds("torch.load", {1: 1.0, 2: 2.5, 4: 3.0}, repeats=1)
        + _rounds("load_file", {1: 1.1, 2: 2.0, 4: 3.5}, repeats=1)
    )
    at = fig["methods"]["torch.load"]["all_touched"]
    assert {n: j["verdict"] for n, j in at["against_one"].items()} == {2: "inconclusive", 4: "inconclusive"}
    assert at["doubling_n"] is None and at["doubling_unshown"] == [2, 4]
    assert (
        stormverdicts.doubling_text(at)
        == "not shown by N = 4 (2.50× at N = 2, 3.00× at N = 4, estimated, not shown to be 2×)"
    )
    behind = fig["mapped_behind"]["load_file"]
    assert behind["at"] == [] and behind["undecided"] == [1, 2, 4] and behind["from"] is None
    assert stormverdicts.behind_text(behind) == (
        "is not shown behind `torch.load` (eager reads) at any N measured (N = 1, 2, 4) "
        "(undecided at N = 1, 2, 4)"
    )
    assert stormverdicts.doubling_text({"median_s": {2: 1.0}, "reference_s": None}) == "n/a (no N = 1 time)"


def test_a_round_not_proven_cold_is_a_disturbed_unit_judged_without():
    """One of five rounds at N = 2 was not proven cold (and, 10× slower, would sway a mean): the verdict is
    judged on the other four, and says so."""
    rounds = _rounds("torch.load", {1: 1.0, 2: 1.5})
    rounds[-1] = _rounds("torch.load", {2: 15.0}, repeats=1, state="cold_unverified")[0] | {"repeat": 5}
    fig = storm.figures(rounds)
    j = fig["methods"]["torch.load"]["all_touched"]["against_one"][2]
    assert j["noise"]["judged_on"] == "undisturbed" and j["n_new"] == 4
    assert j["noise"]["reasons"] == ["N = 2: 1 of 5 rounds not proven cold"]
    assert j["ratio"] == pytest.approx(1.5, rel=0.02)
    assert stormverdicts.flags(fig["rounds"][-1]) == ("not proven cold",)


def test_doubles_needs_the_whole_interval_at_2x_and_says_what_the_familys_size_asks_of_one_comparison():
    """An estimated 2.02× whose interval reaches below 2× is called slower but not shown to double. Eleven
    comparisons (four of each method against N = 1, three of mmap against eager) ask p <= 0.05 / 11 of a lone
    change, and five rounds a side give at least 2 / C(10, 5): none could be called alone."""
    fig = storm.figures(
        _rounds("torch.load", {1: 1.0, 2: 2.02, 4: 2.5})
        + _rounds("torch.load-mmap", {1: 1.0, 2: 1.2, 4: 1.3})
    )
    at = fig["methods"]["torch.load"]["all_touched"]
    two = at["against_one"][2]
    assert two["verdict"] == "changed" and two["ratio"] == pytest.approx(2.02) and two["low"] < 2
    assert (at["doubling_n"], at["doubling_unshown"]) == (4, [2])
    assert stormverdicts.doubling_text(at).endswith("; 2.02× at N = 2, not shown to be 2×")
    family = {
        "size": 11,
        "lone_p": pytest.approx(0.05 / 11),
        "short_alone": 11,
        "never": 0,
        "min_effect": 0.1,
    }
    assert fig["family"] == family
    six = storm.figures(
        _rounds("torch.load", {1: 1.0, 2: 2.02, 4: 2.5}, 6)
        + _rounds("torch.load-mmap", {1: 1.0, 2: 1.2, 4: 1.3}, 3)
    )
    # mmap's four against N = 1 (3 a side: p >= 0.1) never; its three against eager (6 and 3: p >= 2 / 84) not
    # alone; torch.load's four (6 a side) alone too
    assert (six["family"]["short_alone"], six["family"]["never"]) == (3, 4)
    assert (
        stormverdicts.doubling_text({"median_s": {1: 1.0}, "reference_s": 1.0})
        == "n/a (only N = 1 was measured)"
    )
    assert stormverdicts.doubling_text({"median_s": {}, "reference_s": None}) == "no round gave a time"


def test_a_slowdown_seen_only_with_rounds_that_were_not_clean_is_disturbed_and_says_which_rounds():
    """Three of five rounds at N = 2 were not proven cold: two clean rounds cannot decide, all five would be
    called slower, so the verdict is disturbed, naming the rounds, not a busy host; each reason is counted
    on its own."""
    rounds = _rounds("torch.load", {1: 1.0, 2: 1.5})
    for k in (2, 3, 4):  # the N = 2 rounds follow the five at N = 1
        again = _rounds("torch.load", {2: 1.5 * (1 + k / 100)}, repeats=1, state="cold_unverified")[0]
        rounds[5 + k] = again | {"repeat": k + 1}
    rounds[9]["hosts"]["h1"]["sample"]["together"]["late_ns"] = 50_000_000  # also not simultaneous
    j = storm.figures(rounds)["methods"]["torch.load"]["all_touched"]["against_one"][2]
    assert j["verdict"] == "disturbed"
    assert j["noise"]["reasons"] == ["N = 2: 3 of 5 rounds not proven cold, 1 of 5 not simultaneous"]
    assert j["ratio_all"] == pytest.approx(1.5, rel=0.01) and j["n_new"] == 2  # the clean ones: 1.48×
    assert stormverdicts.verdict_text(j) == (
        "disturbed: 1.50× with every round (N = 2: 3 of 5 rounds not proven cold, 1 of 5 not simultaneous); "
        "the clean rounds alone cannot decide"
    )


def test_the_start_file_is_read_once_ready_and_refused_when_late_or_malformed(tmp_path):
    path = tmp_path / "start"
    clock = iter(range(0, 100))

    def sleep(_):
        if not path.exists() and (tmp_path / "start.ready").exists():
            path.write_text("1234567890123456789\n")

    assert start.await_start_file(path, 10, now=lambda: next(clock), sleep=sleep) == 1234567890123456789
    assert (tmp_path / "start.ready").exists()
    path.write_text("17e18\n")
    with pytest.raises(ValueError, match=r"holds '17e18', not a start in ns"):
        start.await_start_file(path, 10)
    never = tmp_path / "never"
    with pytest.raises(TimeoutError, match=r"no start was written to .*never within 0.05 s of being ready"):
        start.await_start_file(never, 0.05)
    with pytest.raises(ValueError, match=r"cannot say ready in .*/no-dir/start.ready: No such file"):
        start.await_start_file(tmp_path / "no-dir" / "start", 1)
    (tmp_path / "a-dir").mkdir()
    with pytest.raises(ValueError, match=r"cannot read the start file .*/a-dir: Is a directory"):
        start.await_start_file(tmp_path / "a-dir", 1)
    for bad in (float("nan"), float("inf"), -5.0):
        with pytest.raises(ValueError, match="--ready-timeout must be a number of s above 0"):
            start.await_start_file(path, bad)


def test_together_start_with_a_start_file_waits_until_told_then_starts_on_time(tmp_path):
    path = tmp_path / "start"
    env_path = str(REPO / "src")
    proc = subprocess.Popen(
        [sys.executable, "-m", "disklab_host", "together-start", "--start-file", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )
    deadline = time.monotonic() + 30
    while not (tmp_path / "start.ready").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
        time.sleep(0.01)
    at = time.time_ns() + 1_000_000_000  # the waiting process polls every 5 ms; a busy machine may not run it
    (tmp_path / "start.tmp").write_text(f"{at}\n")
    (tmp_path / "start.tmp").rename(path)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    got = parse(out)
    assert got["at_ns"] == at and got["late_ns"] == 0 and got["started_ns"] >= at
    # no start file in time: one line, exit status 3
    late = subprocess.run(
        [sys.executable, "-m", "disklab_host", "together-start", "--start-file", str(tmp_path / "x")]
        + ["--ready-timeout", "0.1"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert late.returncode == 3 and late.stderr.strip().startswith("together-start: no start was written to ")
    assert Path(tmp_path / "x.ready").exists()


def _sent(
    tmp_path: Path, records: dict, clients=("h0", "h1", "h2"), ns=(1, 2, 3), burst=None, loaders=()
) -> Path:
    """A staging directory holding what playbooks/together.yml sends: together.json (``burst``: the burst's
    {"commit", "hosts"}, each client's shard 64 MiB and its RAM 1 GiB; None: no burst; ``loaders``: the
    production loaders of lab_run_load_loaders, each a method after torch.load)."""
    staging = tmp_path / "staging"
    staging.mkdir(parents=True)
    shared_wb = {"requested_path": "/wb", "fstype": "nfs4", "source": "srv:/export", "mount_point": "/wb",
                 "flags": {"network_or_fuse": {"state": "set"}}}  # fmt: skip
    sent = {
        "clients": list(clients),
        "settings": {
            "methods": ["torch.load", *loaders],
            "loaders": list(loaders),
            "ns": list(ns),
            "big_mib": 18,
            "margin_ms": 2000,
            "bound_ms": 10.0,
            "dir": "/wb/disklab-together",
            "burst_mib": 64 if burst else None,
        },  # fmt: skip
        "storage_servers": [],
        "workbench": dict.fromkeys(clients, shared_wb),
        "records": records,
        "ram_bytes": dict.fromkeys(clients, 1024 * MIB),
        "burst": burst or {"commit": None, "hosts": {}},
    }
    (staging / togetherrun.INCOMING).write_text(json.dumps(sent))
    return staging


def _rec(n: int, host_i: int, t0: int, late_ns: int = 0) -> dict:
    rec = _host(0, t0 + host_i * 1_000_000 + late_ns, 0.5 * n, 1.0 * n, late_ns=late_ns)
    rec["sample"]["together"]["clock"] = "CLOCK_REALTIME"
    return {"n": n, "method": "torch.load", **rec}


def test_a_together_run_is_stored_once_with_each_hosts_outcome_and_its_page_says_what_it_knows(tmp_path):
    """h2 failed every load (partial), h1 started late at N = 3 (not simultaneous); the server's cache is
    unknown, and the page says so; a run is never written over, and one with no round is not stored."""
    t0 = 1_700_000_000 * S
    records = {
        "h0": [_rec(1, 0, t0), _rec(2, 0, t0 + 10 * S), _rec(3, 0, t0 + 20 * S)],
        "h1": [_rec(2, 1, t0 + 10 * S), _rec(3, 1, t0 + 20 * S, late_ns=30_000_000)],
        "h2": [{"n": 3, "method": "torch.load", "failed": "together-load: torch.load failed: EIO"}],
    }
    reports = tmp_path / "reports"
    outcomes = {h: HostOutcome(host=h) for h in ("h0", "h1", "h2")}
    status = togetherrun.store(
        reports, "20261205T120000Z", tmp_path / "inv.yml", outcomes, _sent(tmp_path, records)
    )
    assert status == {"h0": "ok", "h1": "ok", "h2": "partial"}
    (path,) = togetherrun.runs(reports)
    doc = stored.read(path, "together")
    assert doc["hosts"]["h2"] == {"status": "partial", "task": "The cold-start storm",
                                  "message": "together-load: torch.load failed: EIO"}  # fmt: skip
    assert doc["storage_server"]["state"] == "unknown"
    with pytest.raises(FileExistsError):
        togetherrun.store(
            reports, "20261205T120000Z", tmp_path / "inv.yml", {}, _sent(tmp_path / "again", records)
        )
    assert (
        togetherrun.store(reports, "20261205T130000Z", tmp_path / "inv.yml", {}, _sent(tmp_path / "none", {}))
        == {}
    )
    assert togetherrun.runs(reports) == [path]

    summary, unreadable = togetherpage.render(reports, report.environment())
    assert unreadable == []
    page = (reports / "together.md").read_text()
    assert summary["run_id"] == "20261205T120000Z" and summary["ns"] == [1, 2, 3] and summary["rounds"] == 3
    assert summary["not_simultaneous"] == 1  # N = 3: h1 was late
    assert (
        "**The file server's page cache: unknown**: no host of the inventory's disklab_storage_servers"
        in page
    )
    assert "every client's workbench is `nfs4` from `srv:/export`, network storage" in page
    assert "| 3 | `torch.load` | 1 | **not simultaneous**: started late: h1 by 30.0 ms |" in page
    assert "| 3 | `torch.load` | 1 | | | failed | h2: together-load: torch.load failed: EIO |" in page
    assert 'h2: partial at "The cold-start storm": together-load: torch.load failed: EIO' in page
    # N = 1 took 1 s, N = 2 2 s (each host's time is N s here), one round each: 2× at N = 2, but not shown
    assert (
        "| `torch.load` | all_touched | 1.000 s | 2.000 s | 3.000 s (0 of 1 rounds clean) | not shown by "
        "N = 3 (2.00× at N = 2, 3.00× at N = 3, estimated, not shown to be 2×) |"
    ) in page
    assert "**1 round at each N cannot show a slowdown against N = 1**: below 4 a side no outcome" in page
    assert "| `torch.load` | all_touched | 2 | inconclusive: " in page
    assert (reports / "together.png").is_file() and (reports / "together.html").is_file()


def test_a_production_loaders_rounds_are_stored_and_rendered_with_its_version_knobs_and_where_it_did_not_run(
    tmp_path,
):
    """lab_run_load_loaders [model_streamer]: h0 ran it (its record: version, a knob the inventory set, how it
    read), h1 could not (not installed there): the round keeps h0's figures and says why h1 did not run, as
    not run, not failed; the page names the loader, its version, its knob and how it read."""
    t0 = 1_700_000_000 * S
    knobs = {"concurrency": {"value": 4, "source": "inventory"}}
    title = "Run:ai Model Streamer"
    streamer = {
        "status": "ok",
        "version": "0.17.1",
        "title": title,
        "read_path": "its threads",
        "knobs": knobs,
    }
    why = "runai-model-streamer is not installed in the lab venv (/venv)"
    ran = {**_rec(1, 0, t0 + 30 * S), "method": "model_streamer", "loader": streamer}
    ran["sample"]["read_path"] = {"how": "buffered reads", "page_cache": "used"}
    records = {
        "h0": [_rec(1, 0, t0), _rec(2, 0, t0 + 10 * S), ran,
               {**_rec(2, 0, t0 + 40 * S), "method": "model_streamer", "loader": streamer}],
        "h1": [_rec(2, 1, t0 + 10 * S),
               {"n": 2, "method": "model_streamer", "not_run": why,
                "loader": {"status": "not_run", "reason": why, "title": "Run:ai Model Streamer"}}],
    }  # fmt: skip
    reports = tmp_path / "reports"
    staging = _sent(tmp_path, records, ("h0", "h1"), (1, 2), loaders=("model_streamer",))
    assert togetherrun.store(reports, "20261205T120000Z", tmp_path / "inv.yml", {}, staging) == {
        "h0": "ok", "h1": "ok"}  # fmt: skip
    doc = stored.read(togetherrun.runs(reports)[0], "together")  # the schema takes not_run and loader
    rounds = storm.figures(togetherpage.rounds_of(doc))["rounds"]
    assert [(r["n"], r["method"]) for r in rounds] == [
        (1, "torch.load"), (1, "model_streamer"), (2, "torch.load"), (2, "model_streamer")]  # fmt: skip
    two = rounds[3]
    assert two["not_run"] == {"h1": why} and two["failed"] == {}
    assert list(two["stages"]["all_touched"]["time_s"]) == ["h0"]
    summary, _ = togetherpage.render(reports, report.environment())
    assert set(summary["methods"]) == {"torch.load", "model_streamer"}
    page = (reports / "together.md").read_text()
    assert (
        "`model_streamer` (Run:ai Model Streamer; 0.17.1 on h0; read as buffered reads (h0); "
        "knobs the inventory set: concurrency = 4, the others at the loader's defaults); **not run** on h1: "
        + why
        + "."
    ) in page
    assert f"| 2 | `model_streamer` | 1 | | | not run | h1: {why} |" in page
    assert "| 2 | `model_streamer` | 1 | together:" in page and "(**1 of 2 hosts loaded**)" in page
    assert "Hosts that did not run every round" not in page  # a loader not run is no failed host


def test_a_host_that_loaded_in_no_round_is_partial_and_its_failure_names_the_repeat(tmp_path):
    """h1 failed its torch.load round's second repeat and could not run the loader in any: it loaded in no
    round, so it is partial; h0 failed that round too and names its repeat. A round of the loader where no
    host could run it is not a round in which no host loaded."""
    t0 = 1_700_000_000 * S
    why = "runai-model-streamer is not installed in the lab venv (/venv)"
    title = "Run:ai Model Streamer"
    streamer = {"status": "not_run", "reason": why, "title": title, "read_path": "its threads", "knobs": {}}
    eio = "together-load: torch.load failed: EIO"
    records = {
        "h0": [{**_rec(1, 0, t0), "repeat": 1}, {**_rec(1, 0, t0 + 10 * S), "repeat": 2},
               {"n": 1, "method": "model_streamer", "repeat": 1, "not_run": why, "loader": streamer},
               {"n": 2, "method": "torch.load", "repeat": 2, "failed": eio}],
        "h1": [{"n": 2, "method": "torch.load", "repeat": 2, "failed": eio},
               {"n": 2, "method": "model_streamer", "repeat": 2, "not_run": why, "loader": streamer}],
    }  # fmt: skip
    staging = _sent(tmp_path, records, ("h0", "h1"), (1, 2), loaders=("model_streamer",))
    doc = json.loads((staging / togetherrun.INCOMING).read_text())
    (staging / togetherrun.INCOMING).write_text(
        json.dumps({**doc, "settings": {**doc["settings"], "repeats": 2}})
    )
    reports = tmp_path / "reports"
    assert togetherrun.store(reports, "20261205T120000Z", tmp_path / "inv.yml", {}, staging) == {
        "h0": "ok", "h1": "partial"}  # fmt: skip
    summary, _ = togetherpage.render(reports, report.environment())
    # N = 2's second torch.load round, where both failed; not the loader's, where no host could run it
    assert summary["no_host"] == 1
    page = (reports / "together.md").read_text()
    assert "; h0: N = 2, torch.load, repeat 2: together-load: torch.load failed: EIO." in page
    assert 'h1: partial at "The cold-start storm": together-load: torch.load failed: EIO' in page
    assert f"| 2 | `torch.load` | 2 | | | failed | h0: {eio}; h1: {eio} |" in page
    assert "| `model_streamer` | all_touched | n/a | n/a | no round gave a time |" in page


@pytest.mark.slow  # writes an 18 MiB model with torch (a few s)
def test_together_load_says_not_run_before_it_is_ready_for_a_loader_this_venv_lacks(tmp_path):
    """together-load of a production loader not installed here (the test venv has none) prints not_run with
    why, and the loader's record, exits 0 and never says it is ready: the round goes on without it. A method
    that is neither a load method nor a loader is refused as a usage error."""
    from disklab_host.together import load as together_load

    # tensorizer cannot run here either, so the writer makes no file in its format
    together_load.prepare(tmp_path / "files", 18, 0, ["tensorizer"])
    assert "big_tensors" not in together_load.read_manifest(tmp_path / "files")["files"]
    base = [sys.executable, "-m", "disklab_host", "together-load", "--dir", str(tmp_path / "files")]
    start = ["--start-file", str(tmp_path / "x"), "--ready-timeout", "30"]
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    cp = subprocess.run(
        [*base, "--method", "model_streamer", *start], capture_output=True, text=True, env=env
    )
    assert cp.returncode == 0, cp.stderr
    got = parse(cp.stdout)
    assert got["not_run"].startswith("runai-model-streamer is not installed in the lab venv"), got
    assert got["loader"]["status"] == "not_run" and got["loader"]["title"] == "Run:ai Model Streamer"
    assert not (tmp_path / "x.ready").exists()
    bad = subprocess.run([*base, "--method", "nosuch", *start], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "invalid choice: 'nosuch'" in bad.stderr


def _phase(host_i: int, t0: int, time_s: float, **more) -> dict:
    """One host's save or read in a burst: 64 MiB in ``time_s``, started ``host_i`` ms after ``t0``."""
    at = t0 + host_i * 1_000_000
    return {
        "clock": {"offset_ns": 0, "uncertainty_ns": 100_000},
        "sample": {"together": {"at_ns": at, "started_ns": at, "late_ns": 0, "clock": "CLOCK_REALTIME"},
                   "time_s": time_s, "size_bytes": 64 * MIB, **more},
    }  # fmt: skip


def _save(rank: int, t0: int, time_s: float) -> dict:
    phases = {"write_s": time_s / 2, "sync_s": time_s / 4, "rename_s": time_s / 8, "dir_fsync_s": time_s / 8}
    return _phase(
        rank, t0, time_s, rank=rank, file=f"shard-{rank:05d}-of-00002.bin", sync_call="fsync", **phases
    )


def _read(rank: int, t0: int, time_s: float, *, matches=True, fraction=0.0) -> dict:
    return _phase(rank, t0, time_s, rank=rank, of_rank=(rank + 1) % 2, file="f", matches=matches,
                  cache_state="cold" if fraction <= 0.01 else "not_cold",
                  residency_before={"fraction": fraction, "resident_bytes": 0, "trust": "ok"},
                  eviction="fadvise_dontneed")  # fmt: skip


def test_a_together_runs_burst_is_stored_and_rendered_with_mlperfs_figures_said_which_is_which(tmp_path):
    """h0 saves its 64 MiB in 1 s, h1 in 2 s: duration 2 s, the rules' throughput 32 MiB/s (the least
    host's own), DLIO's 96 MiB/s (128 MiB over 1 s and over 2 s, the mean). h1's read found 5 % of its
    shard resident and bytes that differ: the page says not proven cold and that the bytes differ."""
    t0 = 1_700_000_000 * S
    shots = {
        "commit": {"sample": {"marker": ".metadata", "shards": [], "time_s": 0.004}, "host": "h0"},
        "hosts": {
            "h0": {"save": _save(0, t0, 1.0), "read": _read(0, t0 + 10 * S, 0.5)},
            "h1": {
                "save": _save(1, t0, 2.0),
                "read": _read(1, t0 + 10 * S, 0.25, matches=False, fraction=0.05),
            },
        },
    }
    reports = tmp_path / "reports"
    staging = _sent(tmp_path, {"h0": [_rec(1, 0, t0)], "h1": []}, ("h0", "h1"), (1,), burst=shots)
    togetherrun.store(reports, "20261205T120000Z", tmp_path / "inv.yml", {}, staging)
    (path,) = togetherrun.runs(reports)
    doc = stored.read(path, "together")
    assert doc["burst"] == shots and doc["ram_bytes"] == {"h0": 1024 * MIB, "h1": 1024 * MIB}
    summary, _ = togetherpage.render(reports, report.environment())
    assert summary["burst"]["save"]["duration_s"] == 2.0 and summary["burst"]["committed"]
    page = (reports / "together.md").read_text().split("\n## Checkpoint burst\n", 1)[1]
    assert "| save | together: 1.00 ms, at most 1.20 ms | 2 of 2 | 2.000 s | 32 MiB/s | 96 MiB/s |" in page
    assert "| read | together: 1.00 ms, at most 1.20 ms | 2 of 2 | 0.500 s | 128 MiB/s | 384 MiB/s |" in page
    assert "its own save (write, sync, rename, directory fsync) took 0.004 s" in page
    assert "**not proven cold**: h1 not_cold" in page and "**the bytes read differ" in page
    assert "- **Commit**: h0 wrote the marker once every save had ended; its own save" in page
    assert (
        "| h1 | 2.000 s (1.000 s, 0.500 s fsync, 0.250 s, 0.250 s) | 32 MiB/s | rank 0 (h0) | 0.250 s |"
        in page
    )
    assert "Each shard is under that on h0 (6.25 % of its RAM), h1 (6.25 % of its RAM)" in page
    report.render_all(reports)  # the fleet page's Together section says the same in one sentence
    section = (reports / "fleet.md").read_text().split("\n## Together\n", 1)[1]
    saved = "2 of 2 clients saved in 2.000 s, 32 MiB/s by the rules' text, 96 MiB/s as DLIO computes it"
    assert f"{saved}; committed" in section
    assert "2 of 2 read back in 0.500 s, 128 MiB/s by the rules' text" in section
    assert "**not proven cold**, **bytes differ**." in section


def test_a_burst_whose_save_failed_is_rendered_as_not_committed_and_claims_no_read(tmp_path):
    """h1's save failed: no commit was tried, nothing read back; the page says so, and no sentence claims a
    read or a proof that did not happen."""
    t0 = 1_700_000_000 * S
    shots = {
        "commit": None,
        "hosts": {"h0": {"save": _save(0, t0, 1.0)}, "h1": {"save": {"failed": "ENOSPC"}}},
    }
    reports = tmp_path / "reports"
    staging = _sent(tmp_path, {"h0": [_rec(1, 0, t0)], "h1": []}, ("h0", "h1"), (1,), burst=shots)
    togetherrun.store(reports, "20261205T120000Z", tmp_path / "inv.yml", {}, staging)
    report.render_all(reports)
    page = (reports / "together.md").read_text().split("\n## Checkpoint burst\n", 1)[1]
    assert "- **Saved**: 1 of 2 clients (failed: h1: ENOSPC)." in page
    assert "**not committed**: not every client saved its shard" in page
    assert "| read | n/a | 0 of 0 |" in page and "Read-back cache state" not in page
    assert "this run empties each reader's own page cache" not in page
    section = (reports / "fleet.md").read_text().split("\n## Together\n", 1)[1]
    assert "1 of 2 clients saved in 1.000 s" in section and "**not committed**." in section


def test_a_client_that_ran_no_round_it_was_in_is_failed_where_ansible_said_nothing(tmp_path):
    """Plain ansible-playbook stores without Ansible's outcomes: a client in a round with no record failed."""
    t0 = 1_700_000_000 * S
    records = {"h0": [_rec(1, 0, t0), _rec(2, 0, t0 + 10 * S)], "h1": []}
    status = togetherrun.store(
        tmp_path / "r",
        "20261205T120000Z",
        tmp_path / "i",
        {},
        _sent(tmp_path, records, ("h0", "h1", "h2"), (1, 2)),
    )
    assert status == {"h0": "ok", "h1": "failed", "h2": "ok"}  # h2 is in no round of N = 1 or 2


REFUSED = [
    ({"together_ns": [0, 3]}, "together_ns [0, 3] holds 0, 3: each N must be at least 1 and at most"),
    ({"together_big_mib": 4}, "together_big_mib must be at least 18 (the smallest model the load lab makes)"),
    ({"together_metods": ["load_file"]}, "no role declares them; did you mean together_methods?"),
    ({"together_burst_mib": 0}, "together_burst_mib must be at least 1, got 0"),
]


@pytest.mark.slow  # Ansible runs the first play on localhost: a few s each
@pytest.mark.parametrize(("setting", "said"), REFUSED)
def test_disklab_together_refuses_a_bad_setting_before_any_work_naming_it(tmp_path, setting, said):
    proc = run_disklab("together", "-e", json.dumps(setting), reports=tmp_path / "reports", timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert said in proc.stdout, proc.stdout
    assert "no host ran a round, so nothing was stored" in proc.stdout
    assert togetherrun.runs(tmp_path / "reports") == []


def test_the_roles_smallest_model_is_the_load_labs():
    """roles/together/tasks/refuse.yml states the load lab's smallest model (disklab_host.registry)."""
    from disklab_host.registry import BIG_MIN_MIB

    text = (REPO / "roles" / "together" / "tasks" / "refuse.yml").read_text()
    assert f"together_big_mib | int >= {BIG_MIN_MIB}" in text and f"must be at least {BIG_MIN_MIB} (" in text


@pytest.mark.slow  # Ansible's check of the whole play on localhost: about 6 s
def test_disklab_together_check_runs_the_play_with_the_roles_defaults_and_stores_nothing(tmp_path):
    """No together setting given: the preflight reads the role's default model size (a run once failed on it
    being undefined there), and --check stops before the audit's refusal and the storm."""
    proc = run_disklab("together", "--check", reports=tmp_path / "reports", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "localhost: check ok" in proc.stdout
    assert "check mode: nothing changed, measured or stored" in proc.stdout
    assert togetherrun.runs(tmp_path / "reports") == []


def test_a_storage_server_checks_it_holds_the_clients_files_and_empties_its_page_cache_of_them(tmp_path):
    """together.server on a directory made here: the check refuses a missing or different manifest, naming
    the host; the eviction leaves each file cold and says so (a storm method's file from the manifest, or
    every file with a prefix)."""
    from disklab_host.loadlab import prep
    from disklab_host.together import server

    assert server.MANIFEST == prep.MANIFEST  # written twice: together.server must not import numpy
    manifest = {"files": {"big_pt": {"path": "/client/mount/disklab-together/big.pt"}}}
    data = json.dumps(manifest).encode()
    (tmp_path / server.MANIFEST).write_bytes(data)
    (tmp_path / "big.pt").write_bytes(b"x" * 1_000_000)
    (tmp_path / "shard-00000-of-00001.bin").write_bytes(b"y" * 500_000)
    sha = hashlib.sha256(data).hexdigest()
    assert server.check(tmp_path, sha, "fs1")["manifest_sha256"] == sha
    with pytest.raises(ValueError, match=r"on fs1 is not the file the clients wrote .* does not export"):
        server.check(tmp_path, "0" * 64, "fs1")
    with pytest.raises(ValueError, match=r"^fs2 has no .*/none/prep_manifest\.json: it does not export"):
        server.check(tmp_path / "none", sha, "fs2")
    for which in ({"method": "torch.load-mmap", "prefix": None}, {"method": None, "prefix": "shard-"}):
        server.evict(tmp_path, become_allowed=False, **which)  # whatever the write left cached
        out = server.evict(tmp_path, become_allowed=False, **which)
        assert out["cold"] and len(out["files"]) == 1 and out["files"][0]["fraction_after"] == 0.0, out
    # tensorizer's file was never made (it could not run on the writer): nothing to empty, and it says so
    assert server.evict(tmp_path, "tensorizer", None, False) == {
        "dir": str(tmp_path), "files": [], "cold": False, "absent": "big_tensors"}  # fmt: skip


def test_the_storage_servers_cache_is_cold_only_when_every_server_proved_every_start_cold():
    ok = {"files": [{"file": "big.pt", "fraction_before": 0.9, "fraction_after": 0.002, "trust": "ok"}],
          "cold": True}  # fmt: skip
    first = {"n": 1, "method": "torch.load", "rc": {"fs": 0}, "result": {"fs": ok}, "why": {"fs": ""}}
    cold = togetherrun.storage_server(["fs"], [first])
    assert cold["state"] == "cold"
    assert "up to 90.0 % of a file was resident before, at most 0.2 % after (mincore)" in cold["why"]
    failed = {
        "burst": "read",
        "rc": {"fs": 2},
        "result": {"fs": {}},
        "why": {"fs": "together-server-evict: EIO"},
    }
    bad = togetherrun.storage_server(["fs"], [first, failed])
    assert bad["state"] == "not_cold"
    assert bad["why"].endswith("the burst's read-back on fs: together-server-evict: EIO")
    gone = {"n": 2, "method": "torch.load", "rc": {"fs": 1}, "result": {"fs": {}}, "why": {"fs": "x"},
            "unasked": ["fs"]}  # fmt: skip
    assert togetherrun.storage_server(["fs"], [first, gone])["why"].endswith(
        "N = 2, torch.load on fs: its SSH port did not answer from the controller, so it was not asked"
    )
    assert togetherrun.storage_server(["fs"], [])["state"] == "unknown"
    assert togetherrun.storage_server([], None)["state"] == "unknown"
    # a loader's round whose file the writer never made: no client loaded it, so it costs the run no proof
    absent = {"n": 1, "method": "tensorizer", "rc": {"fs": 0}, "why": {"fs": ""},
              "result": {"fs": {"files": [], "cold": False, "absent": "big_tensors"}}}  # fmt: skip
    assert togetherrun.storage_server(["fs"], [first, absent])["state"] == "cold"


def test_the_servers_evictions_are_kept_once_each_in_the_runs_order():
    """A run_once fact can reach the controller from several hosts, and in any order."""
    ok = {
        "files": [{"file": "f", "fraction_before": 0.5, "fraction_after": 0.0, "trust": "ok"}],
        "cold": True,
    }

    def ev(**what):
        return {**what, "rc": {"fs": 0}, "result": {"fs": ok}, "why": {"fs": ""}}

    sent = [ev(burst="read"), ev(n=2, method="load_file"), ev(n=1, method="load_file"),
            ev(n=1, method="torch.load"), ev(n=2, method="load_file")]  # fmt: skip
    got = togetherrun.storage_server(["fs"], sent, ["torch.load", "load_file"])
    assert [e["what"] for e in got["evictions"]] == [
        "N = 1, torch.load", "N = 1, load_file", "N = 2, load_file", "the burst's read-back"
    ]  # fmt: skip
