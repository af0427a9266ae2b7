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
own page cache is this machine's (one kernel), emptied of each round's file by the server itself. Sizes: the
smallest big model (18 MiB) and two methods, torch.load (eager reads) and torch.load-mmap (page-sized
faults), so the storm's six rounds fit in about a minute; then the checkpoint burst, 2 MiB shards from each
client, committed and read back. The storm's inventory names the fleet's file server (made with a shell for
it) in the disklab_storage_servers group, so its page cache is emptied before each start too; the last test
stops it in the middle of a run. The lab venvs are the run's one venv, seeded (tests/shared.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml

import shared
from conftest import REPO, run_disklab
from disklab import burst, stored, storm, togetherpage, togetherrun
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
BURST_MIB = 2
# The production loader of the storm (lab_run_load_loaders, set for storm_run only): every client's lab venv
# holds it (seeded with it, tests/shared.py), so every together run here sets lab_venv_loaders to it and keeps
# that venv; a run without it would rebuild the venv without the loader.
LOADER = "model_streamer"
LOADER_KNOBS = {LOADER: {"concurrency": 2}}
ROUND_METHODS = (*METHODS, LOADER)  # the storm's rounds at each N: together_methods, then the loaders
FILES = {"torch.load": "big.pt", "torch.load-mmap": "big.pt", LOADER: "big.safetensors"}
SETTINGS = {
    "together_big_mib": BIG_MIB,
    "together_methods": list(METHODS),
    "together_burst_mib": BURST_MIB,
    "lab_venv_loaders": [LOADER],
    "together_repeats": 1,
}
# The storm's rounds each run twice (its test units, disklab.storm): too few to show a slowdown, which the
# page says; the verdicts' arithmetic on rounds that do decide is tests/test_storm.py's.
REPEATS = 2


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
        fileserver_shell=True,  # the storm's inventory names it a storage server
    )
    try:
        shared.seed_fleet_hosts(tmp_path_factory, f, [*CLIENTS, OWN_DISK], loaders=(LOADER,))
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


def _with_servers(fleet, path: Path, servers: dict) -> Path:
    """The fleet's inventory with ``servers`` ({name: host vars}) as its disklab_storage_servers group."""
    inventory = yaml.safe_load(fleet.inventory_path.read_text())
    inventory["all"]["children"][togetherrun.SERVERS_GROUP] = {"hosts": servers}
    path.write_text(yaml.safe_dump(inventory))
    return path


@pytest.fixture(scope="module")
def storm_run(fleet, reports, tmp_path_factory):
    """The storm on the four clients, the fleet's file server named as their storage server: its process
    and the stored run."""
    inv = tmp_path_factory.mktemp("togetherinv") / "inventory.yml"
    _with_servers(fleet, inv, {FILESERVER: fleet.fileserver_inventory_host()})
    loaders = {"lab_run_load_loaders": [LOADER], "lab_run_load_loader_knobs": LOADER_KNOBS}
    proc = _together(inv, reports, list(CLIENTS), together_repeats=REPEATS, **loaders)
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
    order = [(n, m, k) for n in (1, 2, 4) for m in ROUND_METHODS for k in range(1, REPEATS + 1)]
    assert [(r["n"], r["method"], r["repeat"]) for r in rounds] == order
    # they ran repeat by repeat, the second in reverse order (a host's records are in the order it ran them)
    forward = [(n, m) for n in (1, 2, 4) for m in ROUND_METHODS]
    ran = [(n, m, 1) for n, m in forward] + [(n, m, 2) for n, m in reversed(forward)]
    assert [(r["n"], r["method"], r["repeat"]) for r in doc["records"]["host0"]] == ran
    for rnd in rounds:
        assert sorted(rnd["hosts"]) == list(CLIENTS[: rnd["n"]]), rnd["hosts"].keys()
        for host, rec in rnd["hosts"].items():
            assert "failed" not in rec, (host, rec)
            s = rec["sample"]
            assert s["method"] == rnd["method"] and s["path"] == f"{STORM_DIR}/{FILES[rnd['method']]}"
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
    # the file server emptied its page cache of each round's file (and of the shards before the burst's
    # read-back) once every client was ready, and proved it
    server = doc["storage_server"]
    assert server["state"] == "cold" and server["servers"] == [FILESERVER], server
    assert [e["what"] for e in server["evictions"]] == [f"N = {n}, {m}, repeat {k}" for n, m, k in order] + [
        "the burst's read-back"
    ]
    assert all(e["not_cold"] == {} and e["fraction_after"][FILESERVER] <= 0.01 for e in server["evictions"])
    # the server held the file: N = 1's torch.load-mmap round had just read it before the second repeat of
    # N = 1, torch.load, the run's last round: the eviction had work to do
    assert server["evictions"][1]["fraction_before"][FILESERVER] > 0.5, server["evictions"][1]
    assert server["why"].startswith(f"{FILESERVER} emptied its page cache of each start's files once every")


def test_the_model_files_were_written_once_by_the_first_client(fleet, storm_run):
    listing = fleet.inside(FILESERVER, f"ls {EXPORT_ROOT}/{SHARED_EXPORT}/disklab-together").stdout.split()
    assert "prep_manifest.json" in listing and "big.pt" in listing and "big.safetensors" in listing
    _, doc = storm_run
    paths = {rec["sample"]["path"] for recs in doc["records"].values() for rec in recs}
    # both methods read the one .pt, the loader the .safetensors; every host the same files
    assert paths == {f"{STORM_DIR}/big.pt", f"{STORM_DIR}/big.safetensors"}


def test_the_burst_saves_every_shard_at_once_commits_and_reads_each_back_cold_and_whole(fleet, storm_run):
    _, doc = storm_run
    b = doc["burst"]
    assert doc["settings"]["burst_mib"] == BURST_MIB and b["commit"]["sample"]["marker"] == ".metadata"
    assert [s["rank"] for s in b["commit"]["sample"]["shards"]] == [0, 1, 2, 3]
    for rank, name in enumerate(CLIENTS):
        save, read = b["hosts"][name]["save"]["sample"], b["hosts"][name]["read"]["sample"]
        assert save["rank"] == rank and save["size_bytes"] == BURST_MIB << 20 and save["sync_call"] == "fsync"
        assert read["of_rank"] == (rank + 1) % 4 and read["matches"] and read["size_bytes"] == BURST_MIB << 20
        assert read["cache_state"] == "cold", read
    fig = burst.figures(b)
    assert fig["committed"] and fig["cold"] and fig["matches"]
    for phase in burst.PHASES:
        f = fig[phase]
        assert f["hosts"] == list(CLIENTS) and f["duration_s"] == max(f["time_s"].values())
        assert f["throughput_rules"] == pytest.approx(
            min((BURST_MIB << 20) / t for t in f["time_s"].values())
        )
    ram = doc["ram_bytes"]["host0"]
    assert isinstance(ram, int) and burst.ram_rule(BURST_MIB << 20, doc["ram_bytes"])["under"] == list(
        CLIENTS
    )
    # the shards were scratch: removed at the end, the burst's directory left empty
    listing = fleet.inside(FILESERVER, f"ls -A {EXPORT_ROOT}/{SHARED_EXPORT}/disklab-together/burst")
    assert listing.returncode == 0 and listing.stdout.split() == []


def test_the_figures_give_first_and_last_done_the_aggregate_the_slowdown_and_the_doubling_n(storm_run):
    _, doc = storm_run
    fig = storm.figures(togetherpage.rounds_of(doc))
    size_of = {rec["method"]: rec["sample"]["file_size_bytes"] for rec in doc["records"]["host0"]}
    for rnd in fig["rounds"]:
        size = size_of[rnd["method"]]
        at = rnd["stages"]["all_touched"]
        times = at["time_s"]
        assert set(times) == set(CLIENTS[: rnd["n"]])
        assert 0 < at["first_done_s"] <= at["last_done_s"]
        assert at["last_done_s"] >= max(times.values())  # from the first start, which no host beat
        assert at["aggregate_bytes_per_s"] == pytest.approx(rnd["n"] * size / at["last_done_s"])
        assert "aggregate_bytes_per_s" not in rnd["stages"]["first_response"]
        ref = fig["methods"][rnd["method"]]["all_touched"]["reference_s"]
        assert at["slowdown"] == {h: pytest.approx(t / ref) for h, t in times.items()}
    for method in ROUND_METHODS:
        for stage in storm.STAGES:
            m = fig["methods"][method][stage]
            assert sorted(m["median_s"]) == [1, 2, 4] and m["rounds"] == dict.fromkeys((1, 2, 4), REPEATS)
            # two rounds a side show nothing: each N is undecided against N = 1, and no N is shown to double;
            # each side is judged on its clean rounds (a round not simultaneous on a busy machine is not)
            assert {n: (j["verdict"], j["n_old"], j["n_new"]) for n, j in m["against_one"].items()} == {
                n: ("inconclusive", m["clean"][1], m["clean"][n]) for n in (2, 4)
            }
            assert m["doubling_n"] is None
    behind = fig["mapped_behind"]["torch.load-mmap"]
    assert behind["ns"] == [1, 2, 4] and behind["at"] == [] and behind["undecided"] == [1, 2, 4]


def test_the_production_loader_loads_in_every_round_with_the_knob_the_inventory_set_and_the_page_names_it(
    storm_run, reports
):
    """lab_run_load_loaders [model_streamer] with a knob: each client's lab venv held it, so each ran it in
    every round it was in, cold, with the knob's value from the inventory; the page names the loader, its
    version on each host, how it read and the knob."""
    _, doc = storm_run
    assert doc["settings"]["methods"] == list(ROUND_METHODS) and doc["settings"]["loaders"] == [LOADER]
    mine = [(h, rec) for h in CLIENTS for rec in doc["records"][h] if rec["method"] == LOADER]
    assert len(mine) == (1 + 2 + 4) * REPEATS
    versions = set()
    for host, rec in mine:
        assert "not_run" not in rec and "failed" not in rec, (host, rec)
        assert rec["loader"]["status"] == "ok" and rec["sample"]["cache_state"] == "cold", rec["sample"]
        knob = rec["loader"]["knobs"]["concurrency"]
        assert (knob["value"], knob["source"]) == (2, "inventory")
        assert rec["sample"]["stages"]["all_touched"]["time_s"] > 0
        versions.add(rec["loader"]["version"])
    (version,) = versions
    page = (reports / "together.md").read_text()
    said = f"`{LOADER}` (Run:ai Model Streamer; {version} on host0, host1, host2, host3; read as "
    assert said in page and "; knobs the inventory set: concurrency = 2, the others at the loader's" in page
    assert f"| `{LOADER}` | all_touched | " in page
    section = (reports / "fleet.md").read_text().split("\n## Together\n", 1)[1]
    assert f"| `{LOADER}` | all_touched |" in section


def test_the_together_page_and_the_fleet_pages_together_section_state_the_run(storm_run, reports):
    _, doc = storm_run
    page = (reports / "together.md").read_text()
    assert page.startswith(f"# disklab together run `{doc['run_id']}`")
    assert f"**The file server's page cache: cold**: {FILESERVER} emptied its page cache" in page
    assert f"every client's workbench is `{NETFS_FS}` from `" in page and ", network storage" in page
    assert "| `torch.load-mmap` | all_touched | " in page
    assert f"**{REPEATS} rounds at each N cannot show a slowdown against N = 1**" in page
    assert re.search(
        r"^\| 4 \| `torch\.load` \| 1 \| (together: [0-9.]+ ms, at most|\*\*not simultaneous\*\*)", page, re.M
    )
    assert (reports / "together.png").stat().st_size > 10_000 and (reports / "together.html").is_file()
    fleet_page = (reports / "fleet.md").read_text()
    section = fleet_page.split("\n## Together\n", 1)[1]
    assert f"The newest together run, `{doc['run_id']}`" in section and "![" in section
    assert "| method | readiness stage | N = 1 | N = 2 | N = 4 | per-host time doubles at |" in section
    apart = sum(
        1 for r in storm.figures(togetherpage.rounds_of(doc))["rounds"] if not r["spread"]["together"]
    )
    assert f"Rounds not simultaneous: {apart} of 18.\nThe file server's page cache: cold." in section
    assert "[together.md](together.md)" in (reports / "index.md").read_text()
    burst_part = page.split("\n## Checkpoint burst\n", 1)[1]
    assert "- **Commit**: host0 wrote the marker once every save had ended; its own save" in burst_part
    assert (
        "- **Saved**: 4 of 4 clients.\n" in burst_part and "- **Read back**: 4 of 4 clients.\n" in burst_part
    )
    assert "every shard read was cold in its reader's page cache" in burst_part
    assert (
        "the file server's page cache: cold, emptied of the shards once every client was ready" in burst_part
    )
    assert "every byte of every shard read was the byte its writer saved" in burst_part
    assert re.search(
        r"^\| save \| (together|\*\*not simultaneous)[^|]*\| 4 of 4 \| [0-9.]+ s \| [0-9,]+ MiB/s \|",
        burst_part,
        re.M,
    )
    assert "| host1 | " in burst_part and "| rank 2 (host2) | " in burst_part
    assert (
        "Checkpoint burst (every client saving its shard at once" in section
        and "committed; 4 of 4 read back in" in section
    )


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


def test_a_storage_server_that_does_not_export_the_workbench_is_refused_naming_it(fleet, tmp_path, storm_run):
    """host4 (its own ext4 workbench) named as the clients' storage server: it has no copy of the files the
    first client wrote, so the run is refused before any round, naming it, and nothing is stored."""
    inv = _with_servers(fleet, tmp_path / "inventory.yml", {OWN_DISK: None})
    reports = tmp_path / "reports"
    proc = _together(inv, reports, ["host0", "host1"], together_ns=[2], together_burst=False)
    assert proc.returncode != 0
    said = (
        f"together-server-check: {OWN_DISK} has no {EXPORT_ROOT}/{SHARED_EXPORT}/disklab-together/"
        "prep_manifest.json: it does not export the clients' workbench"
    )
    assert said in proc.stdout, proc.stdout[-3000:]
    assert togetherrun.runs(reports) == [] and "no host ran a round, so nothing was stored" in proc.stdout


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
    # the burst: host1's save found no burst directory under its together_dir, so nothing was committed
    # over its missing shard and nothing was read back; host0 and host2 saved theirs
    b = doc["burst"]
    assert b["hosts"]["host1"]["save"]["failed"].startswith(
        f"together-burst-save: {WORKBENCH}/never-prepared/burst: no such directory"
    )
    assert [b["hosts"][h]["save"]["sample"]["rank"] for h in ("host0", "host2")] == [0, 2]
    assert b["commit"] is None and not any("read" in r for r in b["hosts"].values())
    assert "**not committed**: not every client saved its shard" in page


def test_plain_ansible_playbook_runs_the_together_run_stores_and_renders_it(fleet, storm_run, tmp_path):
    """Plain `ansible-playbook -i FLEET playbooks/together.yml`: it makes the run id, stores and renders, as
    `disklab together` does (one round, N = 2, of load_file, and no burst: together_burst false)."""
    reports = tmp_path / "reports"
    extra = {**SETTINGS, "together_ns": [2], "together_methods": ["load_file"], "together_burst": False}
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
    assert doc["settings"]["ns"] == [2] and doc["settings"]["burst_mib"] is None and doc["burst"] is None
    assert [len(doc["records"][h]) for h in CLIENTS] == [1, 1, 0, 0]
    assert re.search(
        r"^\| 2 \| `load_file` \| 1 \| (together|\*\*not simultaneous)",
        (reports / "together.md").read_text(),
        re.M,
    )


def test_together_load_refuses_a_directory_the_writer_never_prepared(tmp_path):
    with pytest.raises(ValueError, match="holds no model files of a together run"):
        together_load.read_manifest(tmp_path)


def test_hosts_that_start_late_are_named_and_their_round_is_labelled_not_simultaneous(
    fleet, tmp_path, storm_run
):
    """A 1 ms margin: the start has passed before any host reads it from its start file, so each host starts
    at once and records how late it was; the round is stored, labelled not simultaneous, naming them."""
    reports = tmp_path / "reports"
    proc = _together(fleet.inventory_path, reports, ["host0", "host1"], together_ns=[2],
                     together_methods=["load_file"], together_burst=False, together_margin_ms=1)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    (path,) = togetherrun.runs(reports)
    (rnd,) = togetherpage.rounds_of(stored.read(path, "together"))
    spread = storm.round_figures(rnd)["spread"]
    assert sorted(spread["late_hosts"]) == ["host0", "host1"] and min(spread["late_hosts"].values()) > 0
    assert not spread["together"] and spread["why"].startswith("started late: host0 by ")
    assert (
        "| 2 | `load_file` | 1 | **not simultaneous**: started late: host0 by "
        in (reports / "together.md").read_text()
    )


def test_the_file_server_stopped_in_the_middle_fails_each_later_step_naming_it_and_loses_nothing(
    fleet, reports, storm_run, tmp_path
):
    """Last in this module, as it leaves the clients without their shared filesystem: the file server's sshd
    and every session (each client's sshfs) are stopped once the first round has ended. Each later load,
    the burst and the server's eviction fail with a line naming the server and the mount; the first round
    is stored with the run, and the module's earlier run is as it was."""
    inv = _with_servers(fleet, tmp_path / "inventory.yml", {FILESERVER: fleet.fileserver_inventory_host()})
    (earlier,) = togetherrun.runs(reports)
    earlier_bytes = earlier.read_bytes()
    mine = tmp_path / "reports"
    extra = {**SETTINGS, "together_methods": ["torch.load"], "together_ns": [1, 2]}
    cmd = [sys.executable, "-m", "disklab.cli", "--reports", str(mine), "together", "-i", str(inv)]
    cmd += ["--limit", ",".join(CLIENTS), "-e", json.dumps(extra)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    watchdog = threading.Timer(TIMEOUT_S, proc.kill)
    watchdog.start()
    out, stopped = [], False
    try:
        for line in proc.stdout:
            out.append(line)
            if not stopped and "Keep this host's sample of the round" in line:
                fleet.stop_sshd(FILESERVER)  # the file server stops: its sshd and every client's session
                stopped = True
        proc.wait()
    finally:
        watchdog.cancel()
    said = "".join(out)
    assert stopped and proc.returncode != 0, said[-3000:]
    (path,) = togetherrun.runs(mine)
    doc = stored.read(path, "together")
    server = f"root@{fleet.state['fileserver']['address']}:{EXPORT_ROOT}/{SHARED_EXPORT}"
    first = doc["records"]["host0"][0]
    assert first["n"] == 1 and first["sample"]["cache_state"] == "cold"  # the round before the stop is kept
    for host in ("host0", "host1"):
        (rec,) = [r for r in doc["records"][host] if r["n"] == 2]
        assert server in rec["failed"] and "is the file server up?" in rec["failed"], rec
    assert (
        server in doc["burst"]["commit"]["failed"]
        and "is the file server up?" in doc["burst"]["commit"]["failed"]
    )
    assert doc["storage_server"]["state"] == "not_cold"
    assert f"N = 2, torch.load on {FILESERVER}: its SSH port did not answer" in doc["storage_server"]["why"]
    assert earlier.read_bytes() == earlier_bytes and togetherrun.runs(reports) == [earlier]
