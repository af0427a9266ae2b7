"""disklab on a network filesystem: the quick lab's ceiling and load steps on an sshfs workbench, over SSH.

One fleet host with the ``netfs`` profile (tests/fleet/README.md): its workbench is sshfs (FUSE over SSH) of
a directory that the fleet's file server (its own namespaces, an ext4 on a loop device, an sshd that serves
only SFTP) exports; the mount lives in the host's own mount namespace. NFS is not tried: this machine's
kernel has no NFS client.

sshfs is mounted as a user mounts it, with no cache options, so its daemon opens files without
FOPEN_KEEP_CACHE and the kernel drops a file's page cache at every open(2). What this module checks on the
stored report of a real `disklab run`:

- the audit names the filesystem (fuse.sshfs, flagged network_or_fuse, no block device and why);
- the cold proofs pass the parts this host can check (residency, major faults for mapped loaders) and say
  in words why device reads cannot be checked (no local block device counts what sshfs fetches);
- no warm run passes, and each says why (the workbench drops the page cache at every open);
- the report says, from its own numbers, whether mmap-based loading lost to torch.load at all_touched;
- the whole report renders (issue 27's ceiling-template crash on a workbench without a block device).

Sizes: the profile's tiny sizes (TINY_SIZES) with only the ceiling and load steps: a 4 MiB ceiling file and
a one-tensor big file (32 MiB) are enough to show what the mount does to the page cache and the proofs,
which do not depend on size. The lab venv is provisioned once per lab root (DISKLAB_FLEET_LAB_ROOT keeps it
across sessions, as for test_fleet_lab.py); from nothing the module takes about 3.5 minutes, 2.2 of them
installing torch, and the two production loaders (LOADERS) add their install and their cells.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import PROVISION_IN_NAMESPACE, TINY_SIZES, run_disklab
from disklab import stored
from disklab.sections.load import netfs as load_netfs

sys.path.insert(0, str(Path(__file__).resolve().parent / "fleet"))
import fleet as fleetmod  # noqa: E402
from fleet import FILESERVER, MIN_SIZE_MIB, NETFS_FS, WORKBENCH, Fleet  # noqa: E402

SKIP = fleetmod.skip_reason(netfs=True)
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(bool(SKIP), reason=str(SKIP)),
]

HOST = "host0"
TIMEOUT_S = 900
# The steps that matter on network storage: the ceiling the load figures are read against, and the load.
STEPS = '["ceiling", "load"]'
# The opt-in production loaders (issue 27, item 3), installed by lab_venv at their pins on the host and
# measured beside the others: the sample checks below cover their rows too (neither reads through a mapping).
# The fleet's hosts reach no package index (their pip sees only this machine's local wheel directories), as
# an air-gapped host: the loaders' wheels are fetched here first, into a wheelhouse the host's pip is pointed
# at with lab_venv_pip_args, as a user of such a host would (without it each is recorded not_run with pip's
# "No matching distribution found").
LOADERS = ("model_streamer", "fastsafetensors")
LOADER_ARGS: list[str] = ["-e", json.dumps({"lab_run_load_loaders": list(LOADERS)})]


def _free_fleet_id() -> int:
    """A fleet id no namespace or route here uses (this module's range, tests/fleet/README.md: 130..121)."""
    return fleetmod.free_fleet_id(130, 121)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """One netfs host (sshfs of the file server's export); its lab root outside the state dir."""
    lab_root = Path(os.environ.get("DISKLAB_FLEET_LAB_ROOT") or tmp_path_factory.mktemp("netfslab"))
    state_dir = Path(tempfile.mkdtemp(prefix="dlnf", dir="/tmp"))  # short: ssh's ControlPath lives here
    f = Fleet.up(
        1, state_dir, fleet_id=_free_fleet_id(), size_mib=MIN_SIZE_MIB, profiles=["netfs"], lab_root=lab_root
    )
    try:
        # no seeded lab venv (tests/shared.py): this host's venv also holds the loaders, from the wheelhouse
        yield f
    finally:
        problems = f.down()
        assert [p for p in problems if not p.startswith("kept lab roots")] == []


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("netfsreports") / "reports"


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """The loaders' wheels and their dependencies (pip download here, where the index is reachable; ~10 s)."""
    from disklab_host.loadlab import loaders

    dest = tmp_path_factory.mktemp("wheelhouse")
    pins = [p for name in LOADERS for p in loaders.BY_NAME[name].pins]
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(dest), *pins, "torch==2.13.0"]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return dest


@pytest.fixture(scope="module")
def lab(fleet, reports, wheelhouse):
    """`disklab run` of the ceiling and load steps at tiny sizes on the netfs host; its stored results."""
    pip_args = json.dumps(
        {"lab_venv_pip_args": [f"--find-links={wheelhouse}", *PROVISION_IN_NAMESPACE["lab_venv_pip_args"]]}
    )
    args = ["-e", f'{{"lab_run_steps": {STEPS}}}', *LOADER_ARGS, "-e", pip_args]
    for name, value in TINY_SIZES.items():
        args += ["-e", f"{name}={value}"]
    proc = run_disklab("run", "-i", str(fleet.inventory_path), *args, reports=reports, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"{HOST}: ok" in proc.stdout, proc.stdout[-4000:]
    (run,) = (reports / HOST / "runs").glob("*.json")
    return stored.read(run, "results")  # schema-validated


def test_the_workbench_is_sshfs_of_the_file_servers_export_in_the_hosts_namespace_only(fleet):
    h = fleet.host(HOST)
    cp = fleet.ssh(HOST, f"findmnt -n -o FSTYPE,SOURCE -T {WORKBENCH}")
    assert cp.stdout.split() == [NETFS_FS, h["export"]], cp.stdout + cp.stderr
    assert h["export"] == f"root@{fleet.state['fileserver']['address']}:{WORKBENCH}/{HOST}"
    assert fleet.ssh(HOST, f"echo {HOST} > {WORKBENCH}/owner").returncode == 0
    on_server = fleet.inside(FILESERVER, f"cat {WORKBENCH}/{HOST}/owner; findmnt -n -o FSTYPE -T {WORKBENCH}")
    assert on_server.stdout.split() == [HOST, "ext4"]  # the bytes live on the server's own filesystem
    assert not (Path(WORKBENCH) / "owner").exists()  # the root namespace sees neither mount
    root_fs = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "-T", WORKBENCH], capture_output=True, text=True
    )
    assert root_fs.stdout.strip() not in (NETFS_FS, "")
    # the file server serves SFTP only: a shell command is refused
    cmd = ["/usr/bin/ssh", *fleet.ssh_args(), f"root@{fleet.state['fileserver']['address']}", "echo shell"]
    shell = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert "shell" not in shell.stdout
    # stopping the host's sshd ends its logins, not the sshfs that serves its workbench
    fleet.stop_sshd(HOST)
    try:
        assert fleet.inside(HOST, f"cat {WORKBENCH}/owner").stdout.strip() == HOST
    finally:
        fleet.start_sshd(HOST)


def test_the_audit_names_the_network_filesystem_and_why_there_is_no_device(lab):
    wb = lab["facts"]["workbench"]
    assert wb["fstype"] == NETFS_FS
    assert wb["flags"]["network_or_fuse"]["state"] == "set"
    assert wb["flags"]["loop_device"]["state"] == "not_set" and wb["flags"]["tmpfs"]["state"] == "not_set"
    why = f"{NETFS_FS} is a network filesystem: its files are on a server, with no local block device"
    assert wb["device"] == {"unavailable": why}


def test_cold_proofs_check_what_they_can_and_say_why_device_reads_cannot(lab):
    section = lab["experiments"]["load"]
    cold = [s for s in section["samples"] if s["cache_state_requested"] == "cold"]
    assert cold and {s["cache_state"] for s in cold} == {"cold"}, [s["cache_proof"] for s in cold]
    for s in cold:
        p = s["cache_proof"]
        assert p["unchecked"] == ["device_reads"] and p["failed"] == [], p
        assert p["parts"]["residency"]["status"] == "pass"
        why = p["parts"]["device_reads"]["why"]
        assert (
            f"it is on {NETFS_FS}, a network filesystem, whose reads go to its daemon or server from root@"
            in why
        )
        assert "no device counter on this host sees them" in why
        mapped = s["method"] in ("torch.load-mmap", "load_file", "one-tensor", "load_file+willneed")
        assert p["parts"]["major_faults"]["status"] == ("pass" if mapped else "not_applicable"), (
            s["method"],
            p,
        )


def test_the_production_loaders_ran_on_the_network_filesystem_and_say_how_they_read(lab, reports):
    section = lab["experiments"]["load"]
    assert section["loaders"]["requested"] == list(LOADERS)
    report = (reports / HOST / "report.md").read_text()
    assert "### Production loaders (`lab_run_load_loaders`)" in report
    for name in LOADERS:
        rec = section["loaders"]["loaders"][name]
        assert rec["status"] == "ok", rec
        states = {s["cache_state_requested"] for s in section["samples"] if s["method"] == name}
        assert states == {"cold", "warm"}
        for stage in ("first_response", "all_touched"):  # a loader populates the big model, as load_file does
            assert f"| {name} → module (assign), big_safetensors | cold | {stage} |" in report, stage
        assert f"(`{name}`): installed {rec['version']}." in report
    # fastsafetensors' own policy reads a network filesystem buffered, not with O_DIRECT
    fst = section["loaders"]["loaders"]["fastsafetensors"]["observed"]
    assert [o["page_cache"] for o in fst] == ["used"] and f"buffered on {NETFS_FS}" in fst[0]["how"]
    streamer = section["loaders"]["loaders"]["model_streamer"]["observed"]
    assert streamer and all(o["source"].startswith("the streamer's own log line") for o in streamer)
    if any(o["page_cache"] == "bypassed" for o in streamer):  # O_DIRECT through FUSE: no device to ask either
        assert "and no device counter on this host could show where the bytes came from" in report


def test_no_warm_run_passes_and_each_says_the_workbench_drops_the_cache_at_open(lab):
    section = lab["experiments"]["load"]
    page_cache = section["workbench_page_cache"]
    assert page_cache["keeps_cache"] is False and page_cache["after_read_fraction"] >= 0.9
    assert page_cache["after_reopen_fraction"] < 0.1
    assert page_cache["why"].startswith("this workbench drops a file's page cache at every open(2)")
    warm = [s for s in section["samples"] if s["cache_state_requested"] == "warm"]
    assert warm and {s["cache_state"] for s in warm} == {"warm_unverified"}
    assert all(s["cache_proof"]["parts"]["residency"]["why"] == page_cache["why"] for s in warm)
    assert section["n_warm_unverified"] == len(warm)


def test_no_probe_empties_what_a_mapped_load_read(lab):
    """sshfs empties a file's page cache at every open(2): a probe that opened the file at a stop event
    found 0 % and made the mapped load read it all again. The probes hold the descriptor opened before the
    call, so what the forward pass and the touch mapped in is still resident when they look."""
    section = lab["experiments"]["load"]
    mapped = [
        s for s in section["samples"] if s["method"] == "torch.load-mmap" and s["cache_state"] == "cold"
    ]
    assert mapped
    for s in mapped:
        assert s["residency_probe"] == "held"
        for stage in ("first_response", "all_touched"):
            assert s["stages"][stage]["resident_fraction"] > 0.9, (stage, s["stages"][stage])


def test_the_report_renders_whole_and_says_whether_mmap_lost_from_its_own_numbers(lab, reports, tmp_path):
    report = (reports / HOST / "report.md").read_text()
    assert (reports / HOST / "report.html").exists()
    assert f"| filesystem type | **{NETFS_FS}** |" in report
    assert "> **Flag: network or fuse.**" in report
    # the ceiling section rendered on a workbench with no block device (issue 27's template crash)
    assert "## This host's ceilings: one file read cold (one stream, and in parallel) and warm" in report
    assert "| cold ceiling, one stream (8 MiB buffered reads) |" in report
    assert "### Mapped against eager loading on this network filesystem" in report
    verdict = load_netfs.network_mmap(lab["experiments"]["load"], lab)
    assert verdict["fstype"] == NETFS_FS and len(verdict["lines"]) == 2
    for line in verdict["lines"]:
        assert line.startswith("cold, all_touched: "), line  # both pairs had a proven cold figure
        assert f"- {line}" in report
    assert "> **Warning.** This workbench drops a file's page cache at every open(2)" in report
    # no device rate on sshfs: the whole-file cold loads are read against the ceilings by their file rate
    assert "‡ No device counter on this host sees these reads, so the share is of the file rate" in report
    assert (
        f"device reads unchecked (no block device behind {WORKBENCH}/load/big.pt: it is on {NETFS_FS}"
        in report
    )
