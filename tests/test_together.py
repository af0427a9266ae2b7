"""A together run's start: each host's clock offset (the collection's lab_clock action, run by Ansible
itself), the wait for one absolute start on the host's own clock (disklab_host.together.start), and the
spread of the starts with its bound (disklab.together)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from disklab.together import HostClock, host_start_ns, spread
from disklab_host.common.result import parse
from disklab_host.together import clock, start

ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
MS = 1_000_000


class FakeClock:
    """A clock that moves by each sleep and by ``per_read_ns`` at each read; it records the sleeps."""

    def __init__(self, now_ns: int, per_read_ns: int = 10_000):
        self.now, self.per_read, self.sleeps = now_ns, per_read_ns, []

    def read(self) -> int:
        self.now += self.per_read
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += int(s * 1e9)


def test_the_wait_sleeps_in_slices_then_spins_and_never_starts_before_the_start():
    fake = FakeClock(1_000 * 10**9)
    at = fake.now + 1_700 * MS
    started, late = start.wait_until(at, clock=fake.read, sleep=fake.sleep)
    assert late == 0 and at <= started <= at + fake.per_read  # the first read at or past the start ends it
    assert fake.sleeps and max(fake.sleeps) <= start.SLEEP_SLICE_S  # the clock is read again every slice
    assert len(fake.sleeps) >= 4  # 1.7 s in slices of at most 0.5 s
    # the sleeps stop SPIN_S short of the start: the rest is spun on the clock, not left to a wake-up
    slept_until = 1_000 * 10**9 + sum(int(s * 1e9) for s in fake.sleeps)
    assert at - slept_until >= start.SPIN_S * 1e9 - len(fake.sleeps) * 2 * fake.per_read


def test_a_host_that_arrives_after_the_start_starts_at_once_and_says_how_late():
    fake = FakeClock(1_000 * 10**9)
    started, late = start.wait_until(fake.now - 5 * MS, clock=fake.read, sleep=fake.sleep)
    assert fake.sleeps == [] and late == 5 * MS + fake.per_read and started == fake.now
    with pytest.raises(ValueError, match="more than the 3600 s allowed"):
        start.wait_until(fake.now + 2 * 3600 * 10**9, clock=fake.read, sleep=fake.sleep)


def test_together_start_waits_for_the_start_on_the_real_clock_and_prints_its_result_line():
    at = time.time_ns() + 2000 * MS  # ahead of a Python start on a busy 2-core machine (300 ms was not)
    proc = subprocess.run([sys.executable, "-m", "disklab_host", "together-start", "--at", str(at)],
                          capture_output=True, text=True, timeout=30, cwd=REPO / "src")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = parse(proc.stdout)
    assert got["at_ns"] == at and got["late_ns"] == 0 and got["started_ns"] >= at
    assert got["clock"] == "CLOCK_REALTIME"
    late = subprocess.run([sys.executable, "-m", "disklab_host", "together-start", "--at", str(at)],
                          capture_output=True, text=True, timeout=30, cwd=REPO / "src")  # fmt: skip
    assert parse(late.stdout)["late_ns"] > 0  # the same start, now past
    far = subprocess.run([sys.executable, "-m", "disklab_host", "together-start", "--at", str(at + 10**13)],
                         capture_output=True, text=True, timeout=30, cwd=REPO / "src")  # fmt: skip
    # 10000 s less the time since ``at`` (the runs above; seconds on a busy machine)
    said = re.match(r"together-start: the start is (\d+) s away, more than the 3600 s allowed", far.stderr)
    assert far.returncode == 2 and said and 9900 <= int(said[1]) <= 10000, far.stderr
    past = subprocess.run([sys.executable, "-m", "disklab_host", "together-start", "--at", str(at // 10**9)],
                          capture_output=True, text=True, timeout=30, cwd=REPO / "src")  # fmt: skip
    assert past.returncode == 2 and "s past, more than the 3600 s allowed" in past.stderr  # seconds, not ns
    huge = subprocess.run([sys.executable, "-m", "disklab_host", "together-start", "--at", str(10**400)],
                          capture_output=True, text=True, timeout=30, cwd=REPO / "src")  # fmt: skip
    assert huge.returncode == 2 and len(huge.stderr.splitlines()) == 1 and " s away, more than" in huge.stderr


def test_the_offset_comes_from_the_exchange_with_the_smallest_round_trip():
    # (sent, host, received) on a host 7 ms ahead: the 2 ms exchange bounds it best
    exchanges = [
        (0, 7 * MS + 9 * MS, 20 * MS),
        (100 * MS, 107 * MS + 1 * MS, 102 * MS),
        (200 * MS, 212 * MS, 210 * MS),
    ]
    got = clock.best_exchange(exchanges)
    assert got["offset_ns"] == 108 * MS - 101 * MS == 7 * MS
    assert got["round_trip_ns"] == 2 * MS and got["uncertainty_ns"] == 1 * MS
    assert got["exchanges"] == 3 and got["round_trips_ns"] == [20 * MS, 2 * MS, 10 * MS]
    assert clock.best_exchange([(0, 5, 3)])["uncertainty_ns"] == 2  # half of an odd round trip, rounded up
    with pytest.raises(ValueError, match="came back before it was sent"):
        clock.best_exchange([(10, 5, 3)])
    with pytest.raises(ValueError, match="no clock exchange"):
        clock.best_exchange([])


def test_the_host_clock_is_read_from_the_last_line_and_a_date_without_ns_is_none():
    assert clock.host_ns("Welcome to host1\n1796495485623887510\n") == 1796495485623887510
    assert clock.host_ns("1796495485N\n") is None  # BSD and macOS date print %N as N
    assert clock.host_ns("\u00b2\n") is None and clock.host_ns("\u0661\u0662\n") is None  # digits, not ASCII
    assert clock.host_ns("") is None


# chronyc -n -c tracking's output, written here from chronyc's field order: no chrony runs on this machine,
# so these are fixtures, not a real chronyd's answer.
CHRONY_SYNCED = "C0A80001,192.168.0.1,3,1796495400.123456789,-0.000012000,0.000003,0.000020,-12.345,0.001,0.050,0.001200000,0.000400000,64.5,Normal\n"  # noqa: E501
CHRONY_UNSYNCED = "00000000,,0,0.000000000,0.000000000,0.000000,0.000000,0.000,0.000,0.000,1.000000000,1.000000000,0.0,Not synchronised\n"  # noqa: E501


def test_chronys_bound_is_its_documented_sum_and_an_unsynchronised_chronyd_gives_none():
    got = clock.chrony_bound(CHRONY_SYNCED)
    assert got["synchronised"] and got["stratum"] == 3 and got["reference"] == "192.168.0.1"
    assert got["bound_ns"] == round((0.000012 + 0.0004 + 0.0012 / 2) * 1e9) == 1_012_000
    unsynced = clock.chrony_bound(CHRONY_UNSYNCED)
    assert unsynced["bound_ns"] is None and unsynced["why"] == "chronyd is not synchronised"
    with pytest.raises(ValueError, match="not one of 14 fields"):
        clock.chrony_bound("506 Cannot talk to daemon\n")


def test_the_spread_is_taken_on_the_controllers_clock_and_judged_with_its_bound():
    clocks = {
        "a": HostClock(offset_ns=0, uncertainty_ns=1 * MS),
        "b": HostClock(offset_ns=250 * MS, uncertainty_ns=2 * MS),  # a clock 250 ms ahead
        "c": HostClock.from_action(
            {"offset_ns": -40 * MS, "uncertainty_ns": 1 * MS, "chrony": {"bound_ns": 1 * MS}}
        ),  # fmt: skip
    }
    assert clocks["c"] == HostClock(-40 * MS, 2 * MS, 1 * MS)
    at = 10**18
    assert host_start_ns(at, clocks["b"]) == at + 250 * MS
    starts = {"a": at + 1 * MS, "b": at + 250 * MS + 3 * MS, "c": at - 40 * MS}
    got = spread(starts, clocks)
    assert (got["first_host"], got["last_host"], got["spread_ns"]) == ("c", "b", 3 * MS)
    assert got["spread_bound_ns"] == (3 * MS + 2 * MS) - (0 - 2 * MS) == 7 * MS
    assert got["uncertainty_ns"] == 4 * MS and got["together"] and got["why"] == ""
    tight = spread(starts, clocks, bound_ns=5 * MS)
    assert not tight["together"]
    assert tight["why"] == (
        "the starts' spread is 3.00 ms, at most 7.00 ms with the clocks' uncertainty, more than the 5 ms "
        "allowed"
    )
    late = spread(starts, clocks, late={"a": 0, "b": 12 * MS})
    assert (
        not late["together"]
        and late["late_hosts"] == {"b": 12 * MS}
        and late["why"] == "started late: b by 12.0 ms"
    )
    with pytest.raises(ValueError, match="no clock offset for d"):
        spread({**starts, "d": at}, clocks)
    # the latest and the earliest start are two different hosts' (or the spread is 0): one host's own
    # uncertainty does not count twice
    wide = {"a": HostClock(0, 6 * MS), "b": HostClock(0, MS // 10)}
    assert spread({"a": at, "b": at}, wide)["spread_bound_ns"] == 6 * MS + MS // 10
    assert spread({"a": at}, wide)["spread_bound_ns"] == 0


def _clock_play(tmp_path: Path, date: str, *args: dict, interpreter: str = sys.executable) -> list[dict]:
    """lab_clock over the local connection, once with each of ``args`` (a failure is kept, not raised),
    with ``date`` replaced by a shell script of that body and ``interpreter`` as the clock tasks'
    ansible_python_interpreter; the results."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "date").write_text(f"#!/bin/sh\n{date}\n")
    (bin_dir / "date").chmod(0o755)
    outs = [tmp_path / f"clock{i}.json" for i in range(len(args))]
    tasks = []
    for i, (arg, out) in enumerate(zip(args, outs, strict=True)):
        clock, keep = {"exchanges": 5, **arg}, {"content": f"{{{{ r{i} | to_json }}}}", "dest": str(out)}
        tasks += [
            {"name": f"clock {i}", "disklab.lab.lab_clock": clock, "register": f"r{i}", "ignore_errors": True,
             "vars": {"ansible_python_interpreter": interpreter}},
            {"name": f"keep {i}", "ansible.builtin.copy": keep},
        ]  # fmt: skip
    play = {"hosts": "localhost", "gather_facts": False, "tasks": tasks,
            "vars": {"ansible_python_interpreter": sys.executable}}  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps([play]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}  # fmt: skip
    cp = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-c", "local", "-i", "localhost,", str(tmp_path / "play.yml")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return [json.loads(out.read_text()) for out in outs]


AHEAD_NS = 5_000_000_000


@pytest.mark.slow
def test_lab_clock_finds_a_host_clock_five_seconds_ahead_within_half_its_round_trip(tmp_path):
    """The host's date and Python read this machine's clock plus 5 s: the action's offset is 5 s within its
    bound, in one session of the host's Python (each exchange one round trip), and with a command per
    exchange where that session cannot start (here a Python that exits at once)."""
    python = tmp_path / "python-ahead"
    python.write_text(  # the clock loop (``python -c LOOP``) with time.time_ns 5 s ahead
        f"#!/bin/sh\nexec {sys.executable} -c 'import sys, time; real = time.time_ns; "
        f'time.time_ns = lambda: real() + {AHEAD_NS}; exec(sys.argv[2])\' "$@"\n'
    )
    python.chmod(0o755)
    date = f"exec {sys.executable} -c 'import time; print(time.time_ns() + {AHEAD_NS})'"
    session, each = _clock_play(tmp_path, date, {"python": str(python)}, {"python": "/bin/false"})
    assert (session["method"], each["method"]) == ("one session", "a command each")
    for got in (session, each):
        assert got["command"] == "date +%s%N" and got["exchanges"] == 5 and len(got["round_trips_ns"]) == 5
        assert (
            got["round_trip_ns"] == min(got["round_trips_ns"])
            and 2 * got["uncertainty_ns"] >= got["round_trip_ns"]
        )
        assert abs(got["offset_ns"] - AHEAD_NS) <= got["uncertainty_ns"]
        assert got["chrony"] is None and got["chrony_why"]  # no chronyc on this machine


@pytest.mark.slow
def test_lab_clock_asks_the_hosts_python_where_date_has_no_nanoseconds(tmp_path):
    """A BSD or macOS date prints %N as a literal N: the action reads the clock with the host's Python."""
    (got,) = _clock_play(tmp_path, 'echo "$(/bin/date +%s)N"', {})
    assert got["command"].startswith(f"{sys.executable} -c ") and "time.time_ns()" in got["command"]
    assert got["method"] == "one session"
    assert abs(got["offset_ns"]) <= got["uncertainty_ns"]  # the same clock as the controller's


@pytest.mark.slow
def test_lab_clock_refuses_a_bad_count_and_reads_auto_as_no_interpreter_named(tmp_path):
    """Ansible's auto values for ansible_python_interpreter name no Python: the session uses the one Ansible
    discovered, else python3, not the word "auto"; a count that is not a whole number from 1 to 100 fails
    the task, naming it."""
    date = "exec /bin/date +%s%N"
    got, zero, yes, frac = _clock_play(
        tmp_path,
        date,
        {},
        {"exchanges": 0},
        {"exchanges": True},
        {"exchanges": 9.5},
        interpreter="auto_silent",
    )
    assert got["method"] == "one session" and abs(got["offset_ns"]) <= got["uncertainty_ns"]
    for bad, shown in ((zero, "0"), (yes, "True"), (frac, "9.5")):
        assert (
            bad["failed"]
            and bad["msg"] == f"lab_clock: exchanges must be a whole number from 1 to 100, got {shown}"
        )


@pytest.mark.slow
def test_a_session_that_never_answers_falls_back_and_leaves_nothing_running(tmp_path):
    """A host Python that never starts the clock loop (here a sleep in its place): the action gives up on
    the session after SESSION_TIMEOUT_S, kills it whole (its own process group), and exchanges a command
    each."""
    marker = f"{os.getpid()}{time.time_ns() % 10**6}"
    python = tmp_path / "python-hangs"
    python.write_text(f"#!/bin/sh\nsleep 1{marker}\n")  # not exec'd: the shell and its sleep both must go
    python.chmod(0o755)
    (got,) = _clock_play(tmp_path, "exec /bin/date +%s%N", {"python": str(python)})
    assert got["method"] == "a command each" and abs(got["offset_ns"]) <= got["uncertainty_ns"]
    left = subprocess.run(["pgrep", "-f", f"sleep 1{marker}"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout


def _together_play(
    tmp_path: Path, hosts: list[str], *args: str, host_vars: dict | None = None
) -> tuple[subprocess.CompletedProcess, dict]:
    """bench/together_start.yml (playbooks/tasks/together_start.yml) on ``hosts``, each the local
    connection (with ``host_vars`` of its own), with a 3 s margin and ``args``; the play and what it kept
    (None when it kept nothing)."""
    pyz, out = tmp_path / "disklab_host.pyz", tmp_path / "together.json"
    subprocess.run([sys.executable, "-m", "disklab.ship", str(pyz)], check=True, cwd=REPO, timeout=120)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"hosts": {h: {**local, **(host_vars or {}).get(h, {})} for h in hosts}}}
    (tmp_path / "inv.json").write_text(json.dumps(inventory))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    cp = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "inv.json"), str(REPO / "bench" / "together_start.yml"),
         "-e", f"together_pyz={pyz}", "-e", "disklab_together_margin_ns=3000000000",
         "-e", f"together_out={out}", "-e", f"disklab_together_artifact={tmp_path / 'on-host.pyz'}", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return cp, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.slow
def test_hosts_beyond_ansibles_forks_still_start_on_time(tmp_path):
    """Each wait starts in the background, so a fork is not held for it: three hosts, one fork, and none
    of them late."""
    cp, kept = _together_play(tmp_path, ["a", "b", "c"], "--forks", "1")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    starts = {h: parse(text) for h, text in kept["start"].items()}
    assert sorted(starts) == ["a", "b", "c"]
    assert all(s["late_ns"] == 0 and s["started_ns"] >= s["at_ns"] for s in starts.values()), starts
    assert not list(tmp_path.glob("on-host.pyz.*"))  # each output, start and ready file is removed once read


@pytest.mark.slow
def test_a_command_that_cannot_start_fails_its_host_at_once_and_the_other_still_starts(tmp_path):
    """A host whose command cannot run (its Python is not there) ends before it is ready: the wait for
    ready ends with it, and its host fails at the read with the shell's words, not after the poll's limit;
    the other host starts on time. A host name that is no file name (a slash) names its files through the
    host-file rule, so its own files are made."""
    missing = {"disklab_together_python": str(tmp_path / "no-such-python")}
    t0 = time.monotonic()
    cp, kept = _together_play(tmp_path, ["good", "bad/name"], host_vars={"bad/name": missing})
    assert cp.returncode == 2 and time.monotonic() - t0 < 60
    read = "TASK [Read each host's start once its command has ended]"
    task = cp.stdout.split(read, 1)[1].split("TASK [", 1)[0]
    assert "fatal: [bad/name]" in task and "no-such-python" in task, task
    assert parse(kept["start"]["good"])["late_ns"] == 0 and "bad/name" not in kept["start"]
    assert not list(tmp_path.glob("on-host.pyz.*"))  # the failed host's files are removed by its read too
