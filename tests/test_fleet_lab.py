"""disklab end to end on the test fleet: audit, a parallel run, a host lost mid-run, retry, compare.

Real SSH hosts in network namespaces (tests/fleet/fleet.py), each with its own
workbench filesystem (host0 ext4, host1 xfs, host2 btrfs, host3 tmpfs), driven
by the disklab CLI in a fresh process, as a user would run it. One fleet and
one lab root (so one venv per host) serve the whole module. The lab venvs can
be kept across sessions by pointing DISKLAB_FLEET_LAB_ROOT at a directory
(docs/fleet.md); by default they go to a session temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml

import shared
from conftest import FLEET_TABLES, REPO, TINY_SIZES, fleet_tables, run_disklab
from disklab import compare, store, stored, units

sys.path.insert(0, str(Path(__file__).resolve().parent / "fleet"))
import fleet as fleetmod  # noqa: E402
from fleet import MIN_SIZE_MIB, WORKBENCH, Fleet  # noqa: E402

SKIP = fleetmod.skip_reason()
needs_fleet = [
    pytest.mark.fleet,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(bool(SKIP), reason=str(SKIP)),
]


def _fleet_marks(test):
    """Apply the marks and skips every test on the fleet needs."""
    for mark in reversed(needs_fleet):
        test = mark(test)
    return test


# The two lab hosts, and the steps that keep a run short but still cover fsync, a crash and the host's own
# ceiling (a 4 MiB file read cold and warm: well under a second). load and powercut take minutes at tiny
# sizes; test_fleet_profiles.py runs them on its two hosts and checks their fleet tables.
LAB_HOSTS = ("host0", "host1")  # ext4, xfs
STEPS = '["fsync_bench", "crash", "ceiling"]'
LAB_TASK = "Run the storage lab experiments on the host"  # lab_run's task name; the host is cut here
DIRTY_EXPIRE = Path("/proc/sys/vm/dirty_expire_centisecs")
TIMEOUT_S = 600
FIRST_FLEET_PAGE = "fleet-after-first-run.md"  # beside reports/: reports/fleet.md as the first run left it


def _free_fleet_id() -> int:
    """A fleet id no namespace or route here uses (test_fleet_infra.py counts down from 250)."""
    return fleetmod.free_fleet_id(200, 151)


def _lab_args() -> list[str]:
    """``-e`` settings for a short run: tiny sizes, two steps, the two lab hosts."""
    args = ["--limit", ",".join(LAB_HOSTS), "-e", f'{{"lab_run_steps": {STEPS}}}']
    for name, value in TINY_SIZES.items():
        args += ["-e", f"{name}={value}"]
    return args


def _index_row(reports: Path, host: str, table: str = "Runs") -> str:
    """The line for ``host`` in one table of reports/index.md; fails when there is not exactly one."""
    text = (reports / "index.md").read_text()
    section = text.split(f"## {table}\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith(f"| {host} |")]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Four hosts (ext4, xfs, btrfs, tmpfs) for the module; lab roots outside the state dir."""
    lab_root = Path(os.environ.get("DISKLAB_FLEET_LAB_ROOT") or tmp_path_factory.mktemp("fleetlab"))
    state_dir = Path(tempfile.mkdtemp(prefix="dlfl", dir="/tmp"))  # short: ssh's ControlPath lives here
    f = Fleet.up(4, state_dir, fleet_id=_free_fleet_id(), size_mib=MIN_SIZE_MIB, lab_root=lab_root)
    try:
        # what this module tests starts after provisioning (tests/shared.py: the run's one lab venv)
        shared.seed_fleet_hosts(tmp_path_factory, f, LAB_HOSTS)
        yield f
    finally:
        problems = f.down()
        assert [p for p in problems if not p.startswith("kept lab roots")] == []


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    """The reports directory shared by the lab runs of this module."""
    return tmp_path_factory.mktemp("fleetreports") / "reports"


@pytest.fixture(scope="module")
def first_run(fleet, reports):
    """`disklab run` of the quick lab on host0 and host1 (provisions their venvs the first time)."""
    proc = run_disklab(
        "run", "-i", str(fleet.inventory_path), *_lab_args(), reports=reports, timeout=TIMEOUT_S
    )
    if (reports / "fleet.md").exists():  # the later runs of this module render it again
        shutil.copyfile(reports / "fleet.md", reports.parent / FIRST_FLEET_PAGE)
    return proc


@pytest.fixture(scope="module")
def cut_run(fleet, reports, first_run):
    """A second run with vm.dirty_expire_centisecs changed, in which host1's sshd is stopped mid-lab.

    The CLI's live progress (one line per change on a non-terminal) says when
    host1 starts the lab task; then host1's sshd and sessions are stopped.
    dirty_expire is machine-wide: it is restored in ``finally``. Yields
    (CompletedProcess-like dict, old dirty_expire, new dirty_expire).
    """
    assert first_run.returncode == 0, first_run.stdout + first_run.stderr
    with shared.machine_lock("vm_sysctl"):  # tests/test_audit.py compares /proc/sys/vm with its facts
        old_expire = int(DIRTY_EXPIRE.read_text())
        new_expire = old_expire + 1234
        cmd = [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "run"]
        cmd += ["-i", str(fleet.inventory_path), *_lab_args()]
        stopped = threading.Event()
        try:
            DIRTY_EXPIRE.write_text(f"{new_expire}\n")
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out: list[str] = []
            reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
            reader.start()
            err = []
            for line in proc.stderr:
                err.append(line)
                if not stopped.is_set() and f"host1: running: {LAB_TASK}" in line:
                    fleet.stop_sshd("host1")
                    stopped.set()
            proc.wait(timeout=TIMEOUT_S)
            reader.join(timeout=60)
        finally:
            DIRTY_EXPIRE.write_text(f"{old_expire}\n")
            if stopped.is_set():
                fleet.start_sshd("host1")
    return {
        "rc": proc.returncode,
        "stdout": "".join(out),
        "stderr": "".join(err),
        "stopped": stopped.is_set(),
        "old_expire": old_expire,
        "new_expire": new_expire,
    }


@_fleet_marks
def test_audit_reports_each_hosts_true_filesystem_and_flags(fleet, tmp_path):
    reports = tmp_path / "reports"
    proc = run_disklab("audit", "-i", str(fleet.inventory_path), reports=reports, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for h in fleet.hosts:
        truth = fleet.ssh(h.name, f"findmnt -n -o FSTYPE -T {WORKBENCH}").stdout.strip()
        assert truth == h.fs
        audits = list((reports / h.name / "audits").glob("*.json"))
        assert len(audits) == 1
        facts = json.loads(audits[0].read_text())["facts"]
        wb = facts["workbench"]
        assert (wb["fstype"], wb["mount_point"]) == (h.fs, WORKBENCH)
        assert facts["host"]["hostname"] == fleet.host(h.name)["netns"]  # facts came from that host
        assert isinstance(facts["writeback"]["dirty_expire_centisecs"], int)
        assert wb["flags"]["tmpfs"]["state"] == ("set" if h.fs == "tmpfs" else "not_set")
        assert wb["flags"]["loop_device"]["state"] == ("set" if h.fs != "tmpfs" else "not_set")  # loop images
        if h.fs != "tmpfs":
            dev = wb["device"]
            assert dev["name"] == Path(fleet.host(h.name)["loop"]).name
            assert isinstance(dev["rotational"], bool) and isinstance(dev["read_ahead_kb"], int)
        row = _index_row(reports, h.name)
        assert f"| {h.name} | ok | {h.fs} |" in row
        audit_row = _index_row(reports, h.name, "Filesystem audit").split(" | ")
        assert audit_row[2] == h.fs
        if h.fs != "tmpfs":  # device, rotational, scheduler, read_ahead_kb from the host's sysfs
            assert audit_row[3].startswith(Path(fleet.host(h.name)["loop"]).name)
            assert audit_row[6] == str(facts["workbench"]["device"]["read_ahead_kb"])
    index = (reports / "index.md").read_text()
    assert "**host3: tmpfs.**" in index and "power loss" in index
    assert "**host0: loop device.**" in index and "**host3: loop device.**" not in index
    assert not list(reports.glob("*/runs/*.json"))  # an audit runs no experiment


@_fleet_marks
def test_one_common_start_on_four_hosts_is_kept_by_each_and_the_stated_bound_holds_the_true_spread(
    fleet, tmp_path
):
    """Issue 42, a together run's start (bench/together_part.py's run, on this module's fleet): each host's
    clock offset to the controller is measured over its SSH connection (lab_clock), and each host waits for
    one common start moved onto its own clock. The hosts share this machine's kernel clock, so the true
    offsets are 0 and the true spread of the starts is the spread of the raw starts: the bound the
    controller states must hold it."""
    sys.path.insert(0, str(REPO / "bench"))
    import together_part

    pyz = tmp_path / "disklab_host.pyz"
    subprocess.run([sys.executable, "-m", "disklab.ship", str(pyz)], check=True, cwd=REPO, timeout=120)
    # a wide margin: four SSH launches on a machine as busy as make test's must fit in it
    run = together_part.one_run(fleet.inventory_path, pyz, tmp_path / "together.json", TIMEOUT_S, 8 * 10**9)
    hosts = sorted(h.name for h in fleet.hosts)
    assert sorted(run["overshoot_ms"]) == hosts and run["late_hosts"] == {}
    assert all(0 <= ms < 8000 for ms in run["overshoot_ms"].values())  # never before its start
    for host in hosts:  # the host's clock is this machine's: 0 is within the measured offset's bound
        assert abs(run["offset_ms"][host]) <= run["round_trip_ms"][host] / 2 + 1e-6, host
    assert run["bound_held"] and run["raw_spread_ms"] <= run["spread_bound_ms"]
    assert run["corrected_spread_ms"] <= run["spread_bound_ms"]


@_fleet_marks
def test_quick_lab_on_two_hosts_writes_both_reports(fleet, reports, first_run):
    assert first_run.returncode == 0, first_run.stdout + first_run.stderr
    assert "host0: ok" in first_run.stdout and "host1: ok" in first_run.stdout
    assert "host2" not in first_run.stdout  # --limit kept the run to the two lab hosts
    for name, fs in zip(LAB_HOSTS, ("ext4", "xfs"), strict=True):
        runs = list((reports / name / "runs").glob("*.json"))
        assert len(runs) == 1
        doc = stored.read(runs[0], "results")  # schema-validated
        assert doc["host"] == name and doc["facts"]["workbench"]["fstype"] == fs
        assert sorted(doc["experiments"]) == ["ceiling", "crash", "fsync_bench"]
        assert all(s["status"] == "ok" for s in doc["experiments"].values()), doc["experiments"]
        report = (reports / name / "report.md").read_text()
        assert f"| filesystem type | **{fs}** |" in report and "fsync p50 is" in report
        row = _index_row(reports, name)
        assert f"| {name} | ok | {fs} |" in row and "2.13.0" in row and "(fsync)" in row
    # only small JSON crossed the network: no workbench file came back
    fetched = [p for p in reports.rglob("*") if p.is_file() and p.suffix == ".json"]
    assert fetched and max(p.stat().st_size for p in fetched) < 1024 * 1024
    assert not list(reports.glob(".incoming/*/*"))  # staging emptied once stored


@_fleet_marks
def test_the_first_run_renders_the_fleet_side_by_side(reports, first_run):
    """reports/fleet.md from the real two-host run: every table with both hosts as columns, real figures."""
    assert first_run.returncode == 0, first_run.stdout + first_run.stderr
    page = (reports.parent / FIRST_FLEET_PAGE).read_text()
    assert "[fleet.md](fleet.md)" in (reports / "index.md").read_text()
    tables = fleet_tables(page)
    assert tuple(tables) == FLEET_TABLES
    for title, t in tables.items():
        assert t["header"] == ["figure", *LAB_HOSTS], title
        assert t["rows"] and all(len(cells) == len(LAB_HOSTS) for cells in t["rows"].values()), (title, t)
    docs = {h: stored.read(next((reports / h / "runs").glob("*.json")), "results") for h in LAB_HOSTS}
    runs = tables["Runs side by side"]["rows"]
    assert runs["run"] == [f"`{docs[h]['run_id']}`" for h in LAB_HOSTS]
    assert runs["profile"] == ["quick", "quick"] and runs["torch"] == ["2.13.0+cpu"] * 2
    assert runs["kernel"] == [docs[h]["facts"]["host"]["kernel"] for h in LAB_HOSTS]
    # the one figure these steps give: each host's own fsync p50, with its unit and call
    (sync,) = tables["Durable sync p50"]["rows"].values()
    for h, cell in zip(LAB_HOSTS, sync, strict=True):
        p50 = docs[h]["experiments"]["fsync_bench"]["modes"]["fsync"]["latency"]["p50_us"]
        assert p50 > 0 and cell == f"{units.us_short(p50)} (fsync)", (h, cell)
        assert re.fullmatch(r"[\d.]+ (µs|ms|s) \(fsync\)", cell), cell
    assert "![Durable sync p50, one point per host](fleet-plots/durable_sync_p50.png)" in page
    assert (reports / "fleet-plots" / "durable_sync_p50.png").read_bytes().startswith(b"\x89PNG")
    # each host's own ceiling, cold and warm, as stored
    ceiling = tables["Cold ceiling"]["rows"]
    assert list(ceiling) == ["cold sequential read", "warm read", "cold parallel direct read"]
    for h, cold, warm in zip(LAB_HOSTS, ceiling["cold sequential read"], ceiling["warm read"], strict=True):
        section = docs[h]["experiments"]["ceiling"]
        assert section["status"] == "ok", section
        for cell, key in ((cold, "cold_mib_s"), (warm, "warm_mib_s")):
            assert section[key]["median"] > 0 and cell == units.mib_s(section[key]["median"]), (h, key, cell)
            assert re.fullmatch(r"[\d,]+ MiB/s", cell), cell
    for h, cell in zip(LAB_HOSTS, ceiling["cold parallel direct read"], strict=True):
        par = docs[h]["experiments"]["ceiling"]["parallel"]  # O_DIRECT on the hosts' loop mounts and tmpfs
        assert par["status"] == "ok" and cell == units.mib_s(par["cold_mib_s"]["median"]), (h, par, cell)
    # load and powercut are not among this run's steps: every cell says so, none is blank
    for stage in ("all_touched", "first_response"):
        none = {f"load cells at {stage}": ["load not measured in this run"] * 2}
        for title in (f"Cold load at {stage}", f"Warm load at {stage}", f"Peak RSS at {stage}"):
            assert tables[title]["rows"] == none, title
    assert tables["Power-cut verdicts"]["rows"] == {"recipes": ["powercut not measured in this run"] * 2}


@_fleet_marks
def test_the_live_view_shows_each_hosts_lab_step_while_it_runs(first_run):
    """The plain-line progress of the first run: each host's lab step, polled from the host while it ran."""
    assert first_run.returncode == 0, first_run.stdout + first_run.stderr
    for host in LAB_HOSTS:
        steps = re.findall(
            rf"\] {host}: running: {LAB_TASK}: step (\w+) \((\d)/3\), \d+ s in", first_run.stderr
        )
        names = ("fsync_bench", "crash", "ceiling")
        assert steps and all(name in names for name, _ in steps), first_run.stderr[-3000:]
        assert ("crash", "2") in steps  # the crash step runs for seconds: a poll always sees it
        assert re.search(
            rf"\] {host}: lab finished: fsync_bench ok [\d.]+ s, crash ok [\d.]+ s, ceiling ok [\d.]+ s",
            first_run.stderr,
        )


@_fleet_marks
def test_plain_ansible_playbook_on_two_hosts_stores_and_renders_the_reports(fleet, first_run, tmp_path):
    """Plain `ansible-playbook -i FLEET playbooks/site.yml`: it makes the run id, stores and renders."""
    assert first_run.returncode == 0  # the two venvs exist
    reports = tmp_path / "reports"
    extra = {"lab_run_steps": ["fsync_bench"], "disklab_reports": str(reports), **TINY_SIZES}  # JSON: typed
    args = ["-i", str(fleet.inventory_path), str(REPO / "playbooks" / "site.yml"),
            "--limit", ",".join(LAB_HOSTS), "-e", json.dumps(extra)]  # fmt: skip
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    playbook_cmd = str(Path(sys.executable).parent / "ansible-playbook")
    proc = subprocess.run([playbook_cmd, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    (record,) = list((reports / ".runs").glob("*.json"))
    assert stored.read(record, "run_record")["hosts"] == {"host0": "ok", "host1": "ok"}
    for name, fs in zip(LAB_HOSTS, ("ext4", "xfs"), strict=True):
        doc = stored.read(reports / name / "runs" / f"{record.stem}.json", "results")
        assert doc["host"] == name and list(doc["experiments"]) == ["fsync_bench"]
        assert f"| filesystem type | **{fs}** |" in (reports / name / "report.md").read_text()
        assert f"| {name} | ok | {fs} |" in _index_row(reports, name)


@_fleet_marks
def test_a_host_lost_mid_run_is_marked_and_the_other_keeps_its_results(reports, cut_run):
    assert cut_run["stopped"], "host1 never reached the lab task: " + cut_run["stderr"][-3000:]
    assert cut_run["rc"] == 1, cut_run["stdout"] + cut_run["stderr"]
    last = json.loads(max((reports / ".runs").glob("*.json"), key=store.run_key).read_text())
    run_id = last["run_id"]
    assert last["hosts"]["host0"] == "ok" and last["hosts"]["host1"] in ("unreachable", "failed")
    assert (
        stored.read(reports / "host0" / "runs" / f"{run_id}.json", "results")["experiments"]["crash"][
            "status"
        ]
        == "ok"
    )
    assert not (reports / "host1" / "runs" / f"{run_id}.json").exists()
    failure = json.loads((reports / "host1" / "failures" / f"{run_id}.json").read_text())
    assert failure["status"] == last["hosts"]["host1"] and failure["task"] == LAB_TASK
    assert failure["message"]
    row = _index_row(reports, "host1")
    assert f'**{failure["status"]}** at "{LAB_TASK}"' in row
    assert f"host1: {failure['status']} at '{LAB_TASK}'" in cut_run["stdout"]
    assert "ok" in _index_row(reports, "host0").split("|")[2]
    # the live progress named the host, its step and its end state
    assert f"host1: {failure['status']}: " in cut_run["stderr"]


@_fleet_marks
def test_retry_failed_reruns_only_the_lost_host(fleet, reports, cut_run):
    assert cut_run["stopped"]
    before = {h: len(list((reports / h / "runs").glob("*.json"))) for h in LAB_HOSTS}
    proc = run_disklab(
        "run",
        "-i",
        str(fleet.inventory_path),
        "--retry-failed",
        *_lab_args()[2:],
        reports=reports,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--retry-failed: re-running host1" in proc.stdout
    after = {h: len(list((reports / h / "runs").glob("*.json"))) for h in LAB_HOSTS}
    assert after == {"host0": before["host0"], "host1": before["host1"] + 1}
    assert "| host1 | ok | xfs |" in _index_row(reports, "host1")
    again = run_disklab("run", "-i", str(fleet.inventory_path), "--retry-failed", reports=reports)
    assert again.returncode == 0 and "nothing to retry" in again.stdout


@_fleet_marks
def test_compare_flags_the_changed_dirty_expire_and_keeps_identical_figures_within_noise(reports, cut_run):
    runs = sorted((reports / "host0" / "runs").glob("*.json"))
    assert len(runs) >= 2
    proc = run_disklab("compare", "host0", reports=reports)
    assert proc.returncode == 0, proc.stderr
    old, new = cut_run["old_expire"], cut_run["new_expire"]
    line = next(ln for ln in proc.stdout.splitlines() if "facts.writeback.dirty_expire_centisecs" in ln)
    assert line.split(":", 1)[1].split() == [str(old), "->", str(new)]
    cmp = compare.compare_runs(stored.read(runs[-2], "results"), stored.read(runs[-1], "results"))
    changed = {c["path"]: (c["old"], c["new"]) for c in cmp["fact_changes"]}
    assert changed["facts.writeback.dirty_expire_centisecs"] == (old, new)
    assert "facts.workbench.fstype" not in changed
    # the same run against itself: no fact changed, and no figure is called changed or disturbed; each is
    # no change, or inconclusive where its sizes cannot decide, at a ratio of exactly 1
    same = run_disklab("compare", str(runs[-1]), str(runs[-1]), reports=reports)
    assert same.returncode == 0, same.stderr
    assert "Facts that changed: 0" in same.stdout
    judged = re.search(r"Figures: (\d+) judged: 0 changed, 0 disturbed", same.stdout)
    assert judged and int(judged.group(1)) > 0, same.stdout
    as_json = run_disklab("compare", "--json", str(runs[-1]), str(runs[-1]), reports=reports)
    figures = json.loads(as_json.stdout)["figures"]
    assert figures and {f["verdict"] for f in figures} <= {"no change", "inconclusive"}, figures
    assert all(f["ratio"] == 1.0 for f in figures), [(f["name"], f["ratio"]) for f in figures]
    assert "host0" in (reports / "host0" / "report.md").read_text()
    assert "Since the previous run" in (reports / "host0" / "report.md").read_text()


@pytest.mark.heavy
def test_example_inventory_gives_each_group_its_settings():
    """inventory/example-fleet.yml with inventory/group_vars: what each kind of host gets."""
    ansible_inventory = Path(sys.executable).parent / "ansible-inventory"
    cp = subprocess.run(
        [str(ansible_inventory), "-i", str(REPO / "inventory" / "example-fleet.yml"), "--list"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    inv = json.loads(cp.stdout)
    hostvars = inv["_meta"]["hostvars"]
    groups = {g: inv[g]["hosts"] for g in ("macs", "sparks", "linux")}
    assert all(groups.values()), groups
    for host in groups["macs"]:
        hv = hostvars[host]
        assert hv["ansible_python_interpreter"] != "/usr/bin/python3"  # the stub that prompts
        assert hv["lab_run_become_allowed"] is True  # purge for cold runs
    for host in groups["sparks"]:
        hv = hostvars[host]
        assert hv["lab_venv_require_cuda"] is True
        assert hv["lab_venv_torch_index"] == "cuda"
    for host in groups["linux"] + groups["macs"]:
        assert not hostvars[host].get("lab_venv_require_cuda", False)
    # every lab_* setting in the group_vars is one a role declares (a typo would be ignored silently)
    declared = set()
    for spec in (REPO / "roles").glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            declared |= set(entry["options"])
    for gv in (REPO / "inventory" / "group_vars").glob("*.yml"):
        names = set(yaml.safe_load(gv.read_text()) or {})
        lab_names = {n for n in names if n.startswith(("lab_", "host_audit_"))}
        assert lab_names <= declared, (gv.name, lab_names - declared)
