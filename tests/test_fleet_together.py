"""Issue 42, the cold-start storm: four clients of one shared sshfs export load one model at once.

Four hosts of the ``netfs-shared`` profile (tests/fleet/README.md): each mounts the fleet file server's one
export, ``/srv/dlab/workbench/shared``, with sshfs at its workbench, so all four read the same files from the
same server. tests/fixtures/together/storm.yml runs playbooks/tasks/together_storm.yml there: the first
client writes the load lab's files once (together-prepare), then for N = 1, 2 and 4 and each method, the
first N clients make the file cold in their own page cache and start the load at one common start, each on
its own clock (together-load, load_one.py --start-at). disklab.storm turns the rounds into the figures.

The hosts share this machine's kernel and clock, and the "network" is a veth pair, so the times say what two
cores and one sftp-server do with four readers, not what a real NFS or Lustre server would. The file server's
own page cache is this machine's and is not emptied here: its state is unknown to the clients, as the module
says. Sizes: the smallest big model (18 MiB) and two methods, torch.load (eager reads) and torch.load-mmap
(page-sized faults), so the storm's six rounds fit in about a minute; the lab venvs are the run's one venv,
seeded (tests/shared.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import shared
from conftest import REPO
from disklab import storm
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

HOSTS = ("host0", "host1", "host2", "host3")
METHODS = ("torch.load", "torch.load-mmap")
BIG_MIB = 18
STORM_DIR = f"{WORKBENCH}/storm"
MARGIN_NS = 2 * 10**9  # after every host is ready: the write of the start to each host
TIMEOUT_S = 900
PLAYBOOK = REPO / "tests" / "fixtures" / "together" / "storm.yml"


def _free_fleet_id() -> int:
    """A fleet id no namespace or route here uses (this module's range, tests/fleet/README.md: 120..101)."""
    return fleetmod.free_fleet_id(120, 101)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Four clients of one sshfs export; their lab venvs seeded from the run's one venv."""
    lab_root = Path(os.environ.get("DISKLAB_FLEET_LAB_ROOT") or tmp_path_factory.mktemp("togetherlab"))
    state_dir = Path(tempfile.mkdtemp(prefix="dlto", dir="/tmp"))  # short: ssh's ControlPath lives here
    f = Fleet.up(
        len(HOSTS),
        state_dir,
        fleet_id=_free_fleet_id(),
        size_mib=MIN_SIZE_MIB,
        profiles=["netfs-shared"] * len(HOSTS),
        lab_root=lab_root,
    )
    try:
        shared.seed_fleet_hosts(tmp_path_factory, f, list(HOSTS))
        yield f
    finally:
        problems = f.down()
        assert [p for p in problems if not p.startswith("kept lab roots")] == []


def _storm(fleet, tmp_path: Path, **extra) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the storm playbook on the fleet; its process and every host's rounds."""
    pyz = tmp_path / "disklab_host.pyz"
    if not pyz.exists():
        subprocess.run([sys.executable, "-m", "disklab.ship", str(pyz)], check=True, cwd=REPO)
    out = tmp_path / "storm.json"
    extra_vars = {
        "storm_pyz": str(pyz),
        "storm_out": str(out),
        "storm_dir": STORM_DIR,
        "disklab_storm_big_mib": BIG_MIB,
        "disklab_storm_methods": list(METHODS),
        "disklab_together_margin_ns": MARGIN_NS,
        **extra,
    }
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(fleet.inventory_path)]
    cmd += [str(PLAYBOOK), "-e", json.dumps(extra_vars)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, cwd=REPO)
    return proc, (json.loads(out.read_text()) if out.exists() else {})


@pytest.fixture(scope="module")
def storm_run(fleet, tmp_path_factory):
    proc, by_host = _storm(fleet, tmp_path_factory.mktemp("storm"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return by_host


def _rounds(by_host: dict) -> list[dict]:
    """The rounds as disklab.storm takes them: one per (N, method), with each of its hosts' records."""
    rounds: dict[tuple, dict] = {}
    for host, recs in by_host.items():
        for rec in recs:
            key = (int(rec["n"]), rec["method"])
            rnd = rounds.setdefault(key, {"n": key[0], "method": key[1], "hosts": {}})
            rnd["hosts"][host] = {k: v for k, v in rec.items() if k in ("clock", "sample", "failed")}
    return [rounds[k] for k in sorted(rounds)]


def test_every_client_mounts_the_one_export_and_sees_what_another_wrote(fleet):
    server = fleet.state["fileserver"]["address"]
    for name in HOSTS:
        cp = fleet.ssh(name, f"findmnt -n -o FSTYPE,SOURCE -T {WORKBENCH}")
        assert cp.stdout.split() == [NETFS_FS, f"root@{server}:{EXPORT_ROOT}/{SHARED_EXPORT}"], cp.stdout
    assert fleet.ssh("host2", f"echo written-by-host2 > {WORKBENCH}/from-host2").returncode == 0
    assert fleet.ssh("host0", f"cat {WORKBENCH}/from-host2").stdout.strip() == "written-by-host2"
    on_server = fleet.inside(FILESERVER, f"cat {EXPORT_ROOT}/{SHARED_EXPORT}/from-host2")
    assert on_server.stdout.strip() == "written-by-host2"


def test_the_storm_runs_n_1_2_4_on_the_first_n_clients_each_cold_and_together(storm_run):
    rounds = _rounds(storm_run)
    assert [(r["n"], r["method"]) for r in rounds] == [(n, m) for n in (1, 2, 4) for m in sorted(METHODS)]
    for rnd in rounds:
        assert sorted(rnd["hosts"]) == list(HOSTS[: rnd["n"]]), rnd["hosts"].keys()
        for host, rec in rnd["hosts"].items():
            assert "failed" not in rec, (host, rec)
            s = rec["sample"]
            assert s["method"] == rnd["method"] and s["path"].startswith(f"{STORM_DIR}/big.")
            # cold in this client's own page cache, proven as the load lab proves it on sshfs
            assert s["cache_state"] == "cold", s["cache_proof"]
            assert s["cache_proof"]["parts"]["residency"]["status"] == "pass"
            assert s["together"]["late_ns"] == 0, s["together"]
            assert s["together"]["started_ns"] >= s["together"]["at_ns"]
        fig = storm.round_figures(rnd)
        assert fig["cold"] and fig["failed"] == {}
        # one kernel clock: the raw starts' spread is the true one, and the stated bound must hold it
        raw = [rec["sample"]["together"]["started_ns"] for rec in rnd["hosts"].values()]
        assert max(raw) - min(raw) <= fig["spread"]["spread_bound_ns"], fig["spread"]
        assert fig["spread"]["together"], fig["spread"]["why"]


def test_the_model_files_were_written_once_by_the_first_client(fleet, storm_run):
    listing = fleet.inside(FILESERVER, f"ls {EXPORT_ROOT}/{SHARED_EXPORT}/storm").stdout.split()
    assert "prep_manifest.json" in listing and "big.pt" in listing and "big.safetensors" in listing
    paths = {rec["sample"]["path"] for recs in storm_run.values() for rec in recs}
    assert paths == {f"{STORM_DIR}/big.pt"}  # both methods read the one .pt; every host the same file


def test_the_figures_give_first_and_last_done_the_aggregate_the_slowdown_and_the_doubling_n(storm_run):
    fig = storm.figures(_rounds(storm_run))
    for rnd in fig["rounds"]:
        at = rnd["stages"]["all_touched"]
        times = at["time_s"]
        assert set(times) == set(HOSTS[: rnd["n"]])
        assert 0 < at["first_done_s"] <= at["last_done_s"]
        assert at["last_done_s"] >= max(times.values())  # from the first start, which no host beat
        size = storm_run["host0"][0]["sample"]["file_size_bytes"]
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


def test_a_host_whose_load_fails_records_why_and_the_others_keep_their_rounds(fleet, storm_run, tmp_path):
    """host1 is given a directory the writer never prepared: its together-load refuses in one line, which
    its round records, and host0 loads at the same start and keeps its sample."""
    proc, by_host = _storm(
        fleet,
        tmp_path,
        storm_dirs={"host1": f"{WORKBENCH}/never-prepared"},
        disklab_storm_ns=[2],
        disklab_storm_methods=["load_file"],
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (ok,) = by_host["host0"]
    assert ok["sample"]["method"] == "load_file" and ok["sample"]["cache_state"] == "cold"
    (failed,) = by_host["host1"]
    assert failed["failed"] == (
        f"together-load: {WORKBENCH}/never-prepared holds no model files of a together run "
        "(no prep_manifest.json): together-prepare writes them on one host first"
    ), failed
    fig = storm.round_figures(_rounds(by_host)[0])
    assert fig["failed"] == {"host1": failed["failed"]}
    assert list(fig["stages"]["all_touched"]["time_s"]) == ["host0"]
    assert by_host["host2"] == [] and by_host["host3"] == []  # not in the round of N = 2


def test_together_load_refuses_a_directory_the_writer_never_prepared(tmp_path):
    with pytest.raises(ValueError, match="holds no model files of a together run"):
        together_load.read_manifest(tmp_path)
