"""Issue 42, the together run: four clients of one shared sshfs export load one model at once.

Four hosts of the ``netfs-shared`` profile (tests/fleet/README.md): each mounts the fleet file server's one
export, ``/srv/dlab/workbench/shared``, with sshfs at its workbench, so all four read the same files from the
same server; a fifth, host4, has its own ext4 workbench. ``disklab together`` (playbooks/together.yml, the
together role) prepares each client, refuses a workbench that is not the first client's shared filesystem,
then runs the cold-start storm: the first client writes the load lab's files once (together-prepare), and
for N = 1, 2 and 4 and each method the first N clients make the file cold in their own page cache and start
the load at one common start, each on its own clock (together-load, load_one.py --start-file). The run is
stored as reports/.together/<run_id>.json and rendered as together.md and the fleet page's Together section.

The hosts share this machine's kernel and clock, and the "network" is a veth pair, so the times say what two
cores and one sftp-server do with four readers, not what a real NFS or Lustre server would. The file server's
own page cache is this machine's and is not emptied here: the run states it unknown. Sizes: the smallest
big model (18 MiB) and two methods, torch.load (eager reads) and torch.load-mmap (page-sized faults), so the
storm's six rounds fit in about a minute; the lab venvs are the run's one venv, seeded (tests/shared.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

import shared
from conftest import REPO, run_disklab
from disklab import stored, storm, togetherpage, togetherrun
from disklab_host.together import load as together_load

sys.path.insert(0, str(Path(__file__).resolve().parent / "fleet"))
import fleet as fleetmod  # noqa: E402
from fleet import EXPORT_ROOT, FILESERVER, MIN_SIZE_MIB, NETFS_FS, SHARED_EXPORT, WORKBENCH, Fleet  # noqa: E402

SKIP = fleetmod.skip_reason(netfs=True)
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(bool(SKIP), reason=str(SKIP)),
]

CLIENTS = ("host0", "host1", "host2", "host3")
OWN_DISK = "host4"  # its workbench is its own ext4, not the shared export
METHODS = ("torch.load", "torch.load-mmap")
BIG_MIB = 18
STORM_DIR = f"{WORKBENCH}/disklab-together"
TIMEOUT_S = 900
SETTINGS = {"together_big_mib": BIG_MIB, "together_methods": list(METHODS)}


def _free_fleet_id() -> int:
    """A fleet id no namespace or route here uses (this module's range, tests/fleet/README.md: 120..101)."""
    return fleetmod.free_fleet_id(120, 101)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Four clients of one sshfs export and a host with its own disk; lab venvs seeded from the run's one."""
    lab_root = Path(os.environ.get("DISKLAB_FLEET_LAB_ROOT") or tmp_path_factory.mktemp("togetherlab"))
    state_dir = Path(tempfile.mkdtemp(prefix="dlto", dir="/tmp"))  # short: ssh's ControlPath lives here
    f = Fleet.up(
        len(CLIENTS) + 1,
        state_dir,
        fleet_id=_free_fleet_id(),
        size_mib=MIN_SIZE_MIB,
        profiles=["netfs-shared"] * len(CLIENTS) + ["standard"],
        lab_root=lab_root,
    )
    try:
        shared.seed_fleet_hosts(tmp_path_factory, f, [*CLIENTS, OWN_DISK])
        yield f
    finally:
        problems = f.down()
        assert [p for p in problems if not p.startswith("kept lab roots")] == []


def _together(inventory: Path, reports: Path, limit: list[str], **settings):
    """`disklab together` on ``limit``, as a user runs it; its process."""
    args = ["together", "-i", str(inventory), "--limit", ",".join(limit)]
    args += ["-e", json.dumps({**SETTINGS, **settings})]
    return run_disklab(*args, reports=reports, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("togetherreports") / "reports"


@pytest.fixture(scope="module")
def storm_run(fleet, reports):
    """The storm on the four clients: its process and the stored run."""
    proc = _together(fleet.inventory_path, reports, list(CLIENTS))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (path,) = togetherrun.runs(reports)
    return proc, stored.read(path, "together")


def test_every_client_mounts_the_one_export_and_sees_what_another_wrote(fleet):
    server = fleet.state["fileserver"]["address"]
    for name in CLIENTS:
        cp = fleet.ssh(name, f"findmnt -n -o FSTYPE,SOURCE -T {WORKBENCH}")
        assert cp.stdout.split() == [NETFS_FS, f"root@{server}:{EXPORT_ROOT}/{SHARED_EXPORT}"], cp.stdout
    assert fleet.ssh("host2", f"echo written-by-host2 > {WORKBENCH}/from-host2").returncode == 0
    assert fleet.ssh("host0", f"cat {WORKBENCH}/from-host2").stdout.strip() == "written-by-host2"
    on_server = fleet.inside(FILESERVER, f"cat {EXPORT_ROOT}/{SHARED_EXPORT}/from-host2")
    assert on_server.stdout.strip() == "written-by-host2"


def test_the_storm_runs_n_1_2_4_on_the_first_n_clients_each_cold_and_judged_simultaneous_or_not(storm_run):
    proc, doc = storm_run
    assert f"together run {doc['run_id']}: stored as " in proc.stdout
    assert doc["clients"] == list(CLIENTS)
    assert {h: r["status"] for h, r in doc["hosts"].items()} == dict.fromkeys(CLIENTS, "ok")
    rounds = togetherpage.rounds_of(doc)
    assert [(r["n"], r["method"]) for r in rounds] == [(n, m) for n in (1, 2, 4) for m in METHODS]
    for rnd in rounds:
        assert sorted(rnd["hosts"]) == list(CLIENTS[: rnd["n"]]), rnd["hosts"].keys()
        for host, rec in rnd["hosts"].items():
            assert "failed" not in rec, (host, rec)
            s = rec["sample"]
            assert s["method"] == rnd["method"] and s["path"] == f"{STORM_DIR}/big.pt"
            # cold in this client's own page cache, proven as the load lab proves it on sshfs
            assert s["cache_state"] == "cold", s["cache_proof"]
            assert s["cache_proof"]["parts"]["residency"]["status"] == "pass"
            assert s["together"]["started_ns"] >= s["together"]["at_ns"]
        fig = storm.round_figures(rnd)
        assert fig["cold"] and fig["failed"] == {}
        # one kernel clock: the raw starts' spread is the true one, and the stated bound must hold it
        raw = [rec["sample"]["together"]["started_ns"] for rec in rnd["hosts"].values()]
        assert max(raw) - min(raw) <= fig["spread"]["spread_bound_ns"], fig["spread"]
        # together exactly when that bound is within the run's (10 ms) and no host was late; how small the
        # spread is on this fleet is make bench's to measure (a busy test machine widens it)
        late = {h: r["sample"]["together"]["late_ns"] for h, r in rnd["hosts"].items()}
        assert fig["spread"]["late_hosts"] == {h: ns for h, ns in late.items() if ns > 0}
        within = fig["spread"]["spread_bound_ns"] <= 10_000_000 and not fig["spread"]["late_hosts"]
        assert fig["spread"]["together"] == within, fig["spread"]
    wb = doc["workbench"]["host2"]
    assert (
        wb["fstype"] == NETFS_FS and wb["network"] and wb["source"].endswith(f"{EXPORT_ROOT}/{SHARED_EXPORT}")
    )
    assert (
        doc["storage_server"]["state"] == "unknown"
        and "disklab_storage_servers" in doc["storage_server"]["why"]
    )


def test_the_model_files_were_written_once_by_the_first_client(fleet, storm_run):
    listing = fleet.inside(FILESERVER, f"ls {EXPORT_ROOT}/{SHARED_EXPORT}/disklab-together").stdout.split()
    assert "prep_manifest.json" in listing and "big.pt" in listing and "big.safetensors" in listing
    _, doc = storm_run
    paths = {rec["sample"]["path"] for recs in doc["records"].values() for rec in recs}
    assert paths == {f"{STORM_DIR}/big.pt"}  # both methods read the one .pt; every host the same file


def test_the_figures_give_first_and_last_done_the_aggregate_the_slowdown_and_the_doubling_n(storm_run):
    _, doc = storm_run
    fig = storm.figures(togetherpage.rounds_of(doc))
    size = doc["records"]["host0"][0]["sample"]["file_size_bytes"]
    for rnd in fig["rounds"]:
        at = rnd["stages"]["all_touched"]
        times = at["time_s"]
        assert set(times) == set(CLIENTS[: rnd["n"]])
        assert 0 < at["first_done_s"] <= at["last_done_s"]
        assert at["last_done_s"] >= max(times.values())  # from the first start, which no host beat
        assert at["aggregate_bytes_per_s"] == pytest.approx(rnd["n"] * size / at["last_done_s"])
        assert "aggregate_bytes_per_s" not in rnd["stages"]["first_response"]
        ref = fig["methods"][rnd["method"]]["all_touched"]["reference_s"]
        assert at["slowdown"] == {h: pytest.approx(t / ref) for h, t in times.items()}
    for method in METHODS:
        for stage in storm.STAGES:
            medians = fig["methods"][method][stage]["median_s"]
            assert sorted(medians) == [1, 2, 4]
            assert fig["methods"][method][stage]["doubling_n"] == storm.doubling_n(medians)
    assert set(fig["mapped_behind"]) == {"torch.load-mmap"}


def test_the_together_page_and_the_fleet_pages_together_section_state_the_run(storm_run, reports):
    _, doc = storm_run
    page = (reports / "together.md").read_text()
    assert page.startswith(f"# disklab together run `{doc['run_id']}`")
    assert (
        "**The file server's page cache: unknown**: no host of the inventory's disklab_storage_servers"
        in page
    )
    assert f"every client's workbench is `{NETFS_FS}` from `" in page and ", network storage" in page
    assert "| `torch.load-mmap` | all_touched | " in page
    assert re.search(
        r"^\| 4 \| `torch\.load` \| (together: [0-9.]+ ms, at most|\*\*not simultaneous\*\*)", page, re.M
    )
    assert (reports / "together.png").stat().st_size > 10_000 and (reports / "together.html").is_file()
    fleet_page = (reports / "fleet.md").read_text()
    section = fleet_page.split("\n## Together\n", 1)[1]
    assert f"The newest together run, `{doc['run_id']}`" in section and "![" in section
    assert "| method | readiness stage | N = 1 | N = 2 | N = 4 | per-host time doubles at |" in section
    assert "Rounds not simultaneous: 0 of 6.\nThe file server's page cache: unknown." in section
    assert "[together.md](together.md)" in (reports / "index.md").read_text()


def test_a_workbench_that_is_not_the_shared_filesystem_is_refused_naming_both_and_nothing_is_stored(
    fleet, reports, storm_run
):
    before = togetherrun.runs(reports)
    proc = _together(fleet.inventory_path, reports, ["host0", OWN_DISK])
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert f"{OWN_DISK}'s {WORKBENCH} is ext4 from /dev/loop" in out, out[-3000:]
    assert f", not a network filesystem, and host0's is {NETFS_FS} from root@" in out, out[-3000:]
    assert togetherrun.runs(reports) == before  # nothing new stored; the page still shows the storm


def test_an_unreachable_host_and_a_host_whose_loads_fail_leave_the_others_their_rounds(fleet, tmp_path):
    """host3's sshd is stopped before the run: the other three run N = 1, 2, 3. host1's together_dir (its
    own inventory variable) was never prepared: each of its loads refuses in one line, which its rounds
    keep, and host0 and host2 load at the same starts."""
    inventory = yaml.safe_load(fleet.inventory_path.read_text())
    hosts = inventory["all"]["children"][fleetmod.GROUP]["hosts"]
    hosts["host1"]["together_dir"] = f"{WORKBENCH}/never-prepared"
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump(inventory))
    reports = tmp_path / "reports"
    fleet.stop_sshd("host3")
    try:
        proc = _together(inv, reports, list(CLIENTS), together_methods=["load_file"])
    finally:
        fleet.start_sshd("host3")
    assert proc.returncode != 0, proc.stdout[-3000:]  # not every host ran every round
    (path,) = togetherrun.runs(reports)
    doc = stored.read(path, "together")
    assert doc["hosts"]["host3"]["status"] == "unreachable", doc["hosts"]
    assert "host3: unreachable" in proc.stdout
    assert doc["hosts"]["host1"]["status"] == "partial"
    refusal = (
        f"together-load: {WORKBENCH}/never-prepared: no such directory: together-prepare writes the model "
        "files there on one host first"
    )
    assert doc["hosts"]["host1"]["message"] == refusal
    rounds = togetherpage.rounds_of(doc)
    assert [r["n"] for r in rounds] == [1, 2, 3]
    for rnd in rounds:
        fig = storm.round_figures(rnd)
        assert sorted(fig["stages"]["all_touched"]["time_s"]) == [
            h for h in ("host0", "host2") if h in rnd["hosts"]
        ]
        if "host1" in rnd["hosts"]:
            assert fig["failed"] == {"host1": refusal}
    assert doc["records"].get("host3", []) == []
    page = (reports / "together.md").read_text()
    assert "host3: unreachable at " in page and "host1: partial at " in page


def test_plain_ansible_playbook_runs_the_together_run_stores_and_renders_it(fleet, storm_run, tmp_path):
    """Plain `ansible-playbook -i FLEET playbooks/together.yml`: it makes the run id, stores and renders, as
    `disklab together` does (one round, N = 2, of load_file)."""
    reports = tmp_path / "reports"
    extra = {**SETTINGS, "together_ns": [2], "together_methods": ["load_file"]}
    extra["disklab_reports"] = str(reports)
    args = ["-i", str(fleet.inventory_path), str(REPO / "playbooks" / "together.yml")]
    args += ["--limit", ",".join(CLIENTS), "-e", json.dumps(extra)]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    playbook_cmd = str(Path(sys.executable).parent / "ansible-playbook")
    proc = subprocess.run(
        [playbook_cmd, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    (path,) = togetherrun.runs(reports)
    doc = stored.read(path, "together")
    assert {h: r["status"] for h, r in doc["hosts"].items()} == dict.fromkeys(CLIENTS, "ok")
    assert doc["settings"]["ns"] == [2]
    assert [len(doc["records"][h]) for h in CLIENTS] == [1, 1, 0, 0]
    assert re.search(
        r"^\| 2 \| `load_file` \| (together|\*\*not simultaneous)",
        (reports / "together.md").read_text(),
        re.M,
    )


def test_together_load_refuses_a_directory_the_writer_never_prepared(tmp_path):
    with pytest.raises(ValueError, match="holds no model files of a together run"):
        together_load.read_manifest(tmp_path)
