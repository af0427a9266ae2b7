"""disklab on test hosts with the users' constraints: a fresh host and a mac-like host, over SSH.

The first fleet tests passed on hosts friendlier than real ones (a workbench
made in advance, strace, GNU tar, /usr/bin/python3 with packaging, root's full
PATH). Here one fleet has two hosts with profiles (tests/fleet/README.md):

- host0, ``fresh`` (ext4): no workbench directory (the ext4 is mounted at
  /srv/dlab and the workbench below it does not exist; the inventory sets
  ``lab_run_workbench_create: true``), no lab root, no venv, no strace;
- host1, ``mac-like`` (xfs): bsdtar as the only tar, a standard-library-only
  ``ansible_python_interpreter`` (a venv made ``--without-pip``), and
  ``PATH=/usr/bin:/bin`` in SSH sessions.

The audit runs first, then the quick lab at tiny sizes, both through the
disklab CLI in a fresh process. Both hosts provision their lab venv from
nothing, so this module takes a few minutes.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import FLEET_TABLES, PROVISION_IN_NAMESPACE, TINY_SIZES, fleet_tables, run_disklab
from disklab import figures, stored, units

sys.path.insert(0, str(Path(__file__).resolve().parent / "fleet"))
import fleet as fleetmod  # noqa: E402
from fleet import BARE_PATH, FRESH_MOUNT, MIN_SIZE_MIB, WORKBENCH, Fleet  # noqa: E402

SKIP = fleetmod.skip_reason(mac_like=True)
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(bool(SKIP), reason=str(SKIP)),
]

FRESH, MAC = "host0", "host1"
PROFILES = {FRESH: "fresh", MAC: "mac-like"}
FS = {FRESH: "ext4", MAC: "xfs"}
TIMEOUT_S = 900  # two lab venvs are provisioned from nothing
STRACE_HERE = shutil.which("strace")  # the machine's own strace, which only the fresh host must lack


def _free_fleet_id() -> int:
    """A fleet id no namespace or route here uses (test_fleet_lab.py: 200 down; infra: 250 down)."""
    return fleetmod.free_fleet_id(220, 206)


def _tiny_args() -> list[str]:
    args: list[str] = ["-e", json.dumps(PROVISION_IN_NAMESPACE)]  # both hosts provision from nothing
    for name, value in TINY_SIZES.items():
        args += ["-e", f"{name}={value}"]
    return args


def _index_row(reports: Path, host: str, table: str = "Runs") -> str:
    """The line for ``host`` in one table of reports/index.md; fails when there is not exactly one."""
    section = (reports / "index.md").read_text().split(f"## {table}\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith(f"| {host} |")]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.fixture(scope="module")
def fleet():
    """host0 fresh (ext4) and host1 mac-like (xfs); lab roots under the state dir, removed by down."""
    state_dir = Path(tempfile.mkdtemp(prefix="dlfp", dir="/tmp"))  # short: ssh's ControlPath lives here
    profiles = [PROFILES[FRESH], PROFILES[MAC]]
    f = Fleet.up(2, state_dir, fleet_id=_free_fleet_id(), size_mib=MIN_SIZE_MIB, profiles=profiles)
    try:
        assert {h.name: h.profile for h in f.hosts} == PROFILES
        yield f
    finally:
        assert f.down() == []


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("profilereports") / "reports"


@pytest.fixture(scope="module")
def audit(fleet, reports):
    """`disklab audit` on both hosts, before anything else touched them."""
    assert fleet.ssh(FRESH, f"test -e {WORKBENCH}").returncode == 1, "the fresh host has a workbench already"
    return run_disklab("audit", "-i", str(fleet.inventory_path), reports=reports, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def lab(fleet, reports, audit):
    """`disklab run` of the quick lab at tiny sizes on both hosts, after the audit."""
    return run_disklab(
        "run", "-i", str(fleet.inventory_path), *_tiny_args(), reports=reports, timeout=TIMEOUT_S
    )


def test_audit_passes_on_both_and_finds_the_true_filesystem(fleet, reports, audit):
    assert audit.returncode == 0, audit.stdout + audit.stderr
    for h in fleet.hosts:
        mount_point = fleet.host(h.name)["mount_point"]  # fresh: /srv/dlab, above the missing workbench
        truth = fleet.ssh(h.name, f"findmnt -n -o FSTYPE,TARGET -T {mount_point}").stdout.split()
        assert truth == [FS[h.name], mount_point]
        audits = list((reports / h.name / "audits").glob("*.json"))
        assert len(audits) == 1, audits
        facts = stored.read(audits[0], "audit")["facts"]
        wb = facts["workbench"]
        assert (wb["fstype"], wb["mount_point"]) == (FS[h.name], mount_point), wb
        assert facts["host"]["hostname"] == fleet.host(h.name)["netns"]  # the facts came from that host
        if fleet.host(h.name)["loop"]:
            assert wb["device"]["name"] == Path(fleet.host(h.name)["loop"]).name
        assert f"| {h.name} | ok | {FS[h.name]} |" in _index_row(reports, h.name)
    # an audit is facts only: the fresh host still has no lab venv
    assert not (Path(fleet.host(FRESH)["lab_venv_root"]) / "venv").exists()
    assert not list(reports.glob("*/runs/*.json"))


def test_quick_lab_passes_on_both_and_stores_and_renders_the_results(fleet, reports, lab):
    assert lab.returncode == 0, lab.stdout + lab.stderr
    for h in fleet.hosts:
        assert f"{h.name}: ok" in lab.stdout, lab.stdout
        runs = list((reports / h.name / "runs").glob("*.json"))
        assert len(runs) == 1, runs
        doc = stored.read(runs[0], "results")  # schema-validated
        assert doc["host"] == h.name and doc["facts"]["workbench"]["fstype"] == FS[h.name]
        assert doc["facts"]["host"]["hostname"] == fleet.host(h.name)["netns"]
        steps = doc["experiments"]
        # realfs is off unless lab_run_realfs is set, savers unless lab_run_savers names some; the fresh host
        # has no strace for powercut
        expect_not_run = {"realfs", "savers", "powercut"} if h.name == FRESH else {"realfs", "savers"}
        assert {s for s, r in steps.items() if r["status"] == "not_run"} == expect_not_run, steps
        assert steps["realfs"]["reason"].startswith("lab_run_realfs is off (the default)")
        assert steps["savers"]["reason"].startswith("lab_run_savers is empty (the default)")
        assert all(r["status"] == "ok" for s, r in steps.items() if s not in expect_not_run), steps
        report = (reports / h.name / "report.md").read_text()
        assert f"| filesystem type | **{FS[h.name]}** |" in report
        assert f"| {h.name} | ok | {FS[h.name]} |" in _index_row(reports, h.name)
        # the lab venv was made by the host's own Python (the mac-like one has no pip of its own)
        venv_python = Path(fleet.host(h.name)["lab_venv_root"]) / "venv" / "bin" / "python"
        assert venv_python.exists()


def test_fresh_host_gets_its_workbench_and_powercut_says_why_it_did_not_run(fleet, reports, lab):
    assert lab.returncode == 0, lab.stdout + lab.stderr
    cp = fleet.ssh(FRESH, f"test -d {WORKBENCH} && findmnt -n -o FSTYPE,TARGET -T {WORKBENCH}")
    assert cp.returncode == 0, "the lab did not create the workbench: " + cp.stderr
    assert cp.stdout.split() == ["ext4", FRESH_MOUNT]  # on the host's loop ext4, not the root fs
    doc = stored.read(next((reports / FRESH / "runs").glob("*.json")), "results")
    powercut = doc["experiments"]["powercut"]
    assert powercut["status"] == "not_run" and "strace" in powercut["reason"], powercut
    report = (reports / FRESH / "report.md").read_text()
    assert f"**Not run on this host**: {powercut['reason']}" in report


def test_the_fleet_page_puts_both_hosts_real_figures_side_by_side(fleet, reports, lab):
    """reports/fleet.md of the quick lab on both hosts: every table, hosts as columns, each host's figures."""
    assert lab.returncode == 0, lab.stdout + lab.stderr
    hosts = [FRESH, MAC]
    tables = fleet_tables((reports / "fleet.md").read_text())
    assert tuple(tables) == FLEET_TABLES
    for title, t in tables.items():
        assert t["header"] == ["figure", *hosts], title
        assert t["rows"] and all(len(cells) == len(hosts) for cells in t["rows"].values()), (title, t)
    docs = {h: stored.read(next((reports / h / "runs").glob("*.json")), "results") for h in hosts}
    (sync,) = tables["Durable sync p50"]["rows"].values()
    for h, cell in zip(hosts, sync, strict=True):
        p50 = docs[h]["experiments"]["fsync_bench"]["modes"]["fsync"]["latency"]["p50_us"]
        assert cell == f"{units.us_short(p50)} (fsync)", (h, cell)
    # every proven load cell of each host, at all_touched and first_response, as its raw samples give it
    for col, h in enumerate(hosts):
        for stage in ("all_touched", "first_response"):
            groups: dict[tuple, list[dict]] = {}
            for s in docs[h]["experiments"]["load"]["samples"]:
                at = s["stages"].get(stage) or {}
                if s["cache_state"] in ("cold", "warm") and at.get("status") == "ok":
                    key = (s["cache_state"], s["method"], s["file"], s.get("populate"))
                    groups.setdefault(key, []).append(s)
            assert {c for c, *_ in groups} == {"cold", "warm"}, (h, stage, sorted(groups))
            for (cache, method, file, populate), group in groups.items():
                label = figures.cell_name(method, file, populate)
                times = [s["stages"][stage]["time_s"] for s in group]
                shown = tables[f"{cache.capitalize()} load at {stage}"]["rows"][label][col]
                lo, hi = units.secs(min(times)), units.secs(max(times))
                mid = units.secs(statistics.median(times))
                assert shown == f"{mid} [{lo}, {hi}] (n={len(times)})", (h, stage, cache, label, shown)
                rss = [s["stages"][stage]["peak_rss_bytes"] for s in group]
                shown = tables[f"Peak RSS at {stage}"]["rows"][f"{label} · {cache}"][col]
                assert shown == units.ibytes(statistics.median(rss)), (h, stage, cache, label, shown)
        ceiling = docs[h]["experiments"]["ceiling"]
        rows = tables["Cold ceiling"]["rows"]
        assert rows["cold sequential read"][col] == units.mib_s(ceiling["cold_mib_s"]["median"])
        assert rows["warm read"][col] == units.mib_s(ceiling["warm_mib_s"]["median"])
    # the power-cut verdicts: the mac-like host's own, each recipe under each model; the fresh host says why
    verdicts = tables["Power-cut verdicts"]["rows"]
    reason = docs[FRESH]["experiments"]["powercut"]["reason"]
    assert all(cells[0] == f"powercut not run: {reason}" for cells in verdicts.values()), verdicts
    if STRACE_HERE:
        recipes = docs[MAC]["experiments"]["powercut"]["recipes"]
        expected = {}
        for r in recipes:
            for model, label in figures.POWERCUT_MODELS:
                m = r["models"][model]  # the step records both models for every recipe
                v = f"**{m['verdict']}**" if m["verdict"] == "unsafe" else m["verdict"]
                expected[f"{r['number']} {r['title']} · {label}"] = f"{v} ({m['states']} states)"
        assert {k: cells[1] for k, cells in verdicts.items()} == expected
        assert any("**unsafe**" in v for v in expected.values())  # the naive in-place save, at least


def test_nothing_leaks_between_the_hosts_or_into_the_root_namespace(fleet, reports, lab):
    assert lab.returncode == 0, lab.stdout + lab.stderr
    # each workbench is its host's own filesystem, and the root namespace sees neither
    for h in fleet.hosts:
        assert fleet.ssh(h.name, f"echo {h.name} > {WORKBENCH}/owner").returncode == 0
    for h in fleet.hosts:
        cp = fleet.ssh(h.name, f"cat {WORKBENCH}/owner; findmnt -n -o SOURCE -T {WORKBENCH}")
        assert cp.stdout.split() == [h.name, fleet.host(h.name)["loop"]]
    root_target = subprocess.run(
        ["findmnt", "-n", "-o", "TARGET", "-T", WORKBENCH], capture_output=True, text=True
    ).stdout.strip()
    assert root_target not in (WORKBENCH, FRESH_MOUNT)
    assert not (Path(WORKBENCH) / "owner").exists()
    # one host's constraints stay in that host: tar, strace, PATH
    tools = "tar --version | head -n 1; echo PATH=$PATH; command -v strace || echo no-strace"
    fresh, mac = (fleet.ssh(name, tools).stdout.splitlines() for name in (FRESH, MAC))
    assert fresh[0].startswith("tar (GNU tar)") and mac[0].startswith("bsdtar")
    assert mac[1] == f"PATH={BARE_PATH}" and fresh[1] != mac[1]
    assert fresh[2] == "no-strace"
    if STRACE_HERE:
        assert mac[2] == STRACE_HERE
        mac_doc = stored.read(next((reports / MAC / "runs").glob("*.json")), "results")
        assert mac_doc["experiments"]["powercut"]["status"] == "ok"  # strace is hidden on host0 only
    root_tar = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout
    assert root_tar.startswith("tar (GNU tar)")
    shell = "getent passwd root | cut -d: -f7"
    root_shell = subprocess.run(["sh", "-c", shell], capture_output=True, text=True).stdout.strip()
    assert fleet.ssh(FRESH, shell).stdout.strip() == root_shell
    assert fleet.ssh(MAC, shell).stdout.strip() == "/bin/sh"
    # each host's results stayed in its own lab root and were stored under its own name
    roots = {h.name: Path(fleet.host(h.name)["lab_venv_root"]) for h in fleet.hosts}
    assert roots[FRESH] != roots[MAC]
    for name, root in roots.items():
        results = list(root.glob("runs/*/results.json"))
        assert len(results) == 1, results
        assert json.loads(results[0].read_text())["host"] == name
