"""Tests for the host audit (disklab_host.audit: collect.py, parse.py).

Linux facts are checked for real on this machine, against other commands and
files than the ones the audit reads. macOS and DGX Spark facts come from the
recorded output in tests/fixtures/audit (see its README): those code paths
have not been run on real hardware.
"""

from __future__ import annotations

import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import pytest

import shared
from conftest import FIXTURES, REPO
from disklab_host.audit import collect as audit
from disklab_host.audit import parse as ap
from disklab_host.common import iorecord
from disklab_host.common import result as result_line
from disklab_host.common.facts import is_unavailable
from disklab_host.common.units import GIB, MIB

AUDIT_FIX = FIXTURES / "audit"
VENV_PYTHON = str(REPO / ".venv-test" / "bin" / "python")
SCHEMA = json.loads((REPO / "src" / "disklab" / "schema" / "facts.schema.json").read_text())


def validate(facts: dict) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(facts)


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


class Recorded:
    """A command runner that answers from recorded output, keyed by program; logs every argv."""

    def __init__(self, outputs: dict[str, str | BaseException]):
        self.outputs = outputs
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> str:
        self.calls.append(list(argv))
        out = self.outputs.get(argv[0])
        if out is None:
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        if isinstance(out, BaseException):
            raise out
        return out


def fix(*parts: str) -> str:
    return AUDIT_FIX.joinpath(*parts).read_text()


def fake_nvme_sysfs(root: Path, scheduler: str = "[none] mq-deadline", read_ahead_kb: int = 128) -> None:
    """sysfs for nvme0n1 with partition nvme0n1p2, laid out (with symlinks) as the kernel does."""
    disk = root / "sys/devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1"
    (disk / "nvme0n1p2").mkdir(parents=True)
    (disk / "nvme0n1p2" / "partition").write_text("2\n")
    (disk / "queue").mkdir()
    (disk / "queue/rotational").write_text("0\n")
    (disk / "queue/scheduler").write_text(scheduler + "\n")
    (disk / "queue/read_ahead_kb").write_text(f"{read_ahead_kb}\n")
    (root / "sys/class/block").mkdir(parents=True)
    (root / "sys/block").mkdir(parents=True)
    (root / "sys/class/block/nvme0n1").symlink_to(disk)
    (root / "sys/class/block/nvme0n1p2").symlink_to(disk / "nvme0n1p2")
    (root / "sys/block/nvme0n1").symlink_to(disk)


# --- real Linux host ------------------------------------------------------


@pytest.fixture(scope="module")
def real_facts(tmp_path_factory) -> tuple[Path, dict]:
    """One real audit of a workbench on this host, with the test venv as the lab venv. The module's tests
    compare it with /proc/sys/vm, so no other test may change those settings meanwhile (tests/shared.py)."""
    wb = tmp_path_factory.mktemp("audit") / "workbench"
    wb.mkdir()
    with shared.machine_lock("vm_sysctl", shared=True):
        yield wb, audit.collect_all(str(wb), VENV_PYTHON)


@pytest.mark.heavy
def test_real_filesystem_matches_df_and_findmnt(real_facts):
    wb, facts = real_facts
    w = facts["workbench"]
    assert w["fstype"] == sh("df", "--output=fstype", str(wb)).splitlines()[-1].strip()
    assert w["df"]["fstype"] == w["fstype"]
    assert w["mount_options"] == sh("findmnt", "-n", "-o", "OPTIONS", "-T", str(wb)).strip().split(",")
    assert w["mount_point"] == sh("findmnt", "-n", "-o", "TARGET", "-T", str(wb)).strip()
    assert w["fact_source"] == "findmnt"
    assert w["df"]["command"] == f"df -T {wb}"
    assert w["findmnt"]["command"].startswith("findmnt -J -T ")
    assert w["flags"]["tmpfs"] == {"state": "not_set", "why": audit.FLAG_WHY["tmpfs"]}
    assert w["flags"]["loop_device"]["state"] == "not_set"
    assert w["requested_path"] == w["audited_path"] == str(wb) and w["exists"] is True
    assert w["created"] is False and w["note"] is None


def test_real_block_device_matches_sysfs_bdi(real_facts):
    wb, facts = real_facts
    dev = facts["workbench"]["device"]
    assert not is_unavailable(dev), dev
    st = os.stat(wb)
    majmin = Path(f"/sys/class/block/{dev['name']}/dev").read_text().strip()
    if not dev["partition"]:
        assert majmin == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    # read_ahead_kb is the disk's bdi setting: the same number through /sys/class/bdi.
    disk_majmin = Path(f"/sys/class/block/{dev['disk']}/dev").read_text().strip()
    assert dev["read_ahead_kb"] == int(Path(f"/sys/class/bdi/{disk_majmin}/read_ahead_kb").read_text())
    assert dev["scheduler"]["active"] in dev["scheduler"]["available"]
    assert isinstance(dev["rotational"], bool)


def test_real_host_and_writeback_facts(real_facts):
    _, facts = real_facts
    host, wbk = facts["host"], facts["writeback"]
    assert wbk["dirty_expire_centisecs"] == int(Path("/proc/sys/vm/dirty_expire_centisecs").read_text())
    assert wbk["dirty_ratio"] == int(Path("/proc/sys/vm/dirty_ratio").read_text())
    assert host["page_size_bytes"] == os.sysconf("SC_PAGE_SIZE")
    # MemTotal and glibc's _SC_PHYS_PAGES both come from the kernel's totalram.
    assert host["ram_bytes"] == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert host["kernel"] == platform.release()
    assert host["architecture"] == platform.machine()
    assert host["system"] == "Linux"
    assert isinstance(host["cpu_model"], str) and host["cpu_model"]
    assert facts["caveats"] == []  # nothing here came from an untested path
    validate(facts)


def test_schema_is_valid_and_rejects_bad_facts(real_facts):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    facts = json.loads(json.dumps(real_facts[1]))
    facts["writeback"]["dirty_ratio"] = "20"  # a string where an int belongs
    with pytest.raises(jsonschema.ValidationError):
        validate(facts)
    facts = json.loads(json.dumps(real_facts[1]))
    facts["host"]["ram_bytes"] = {"unavailable": ""}  # a reason is required
    with pytest.raises(jsonschema.ValidationError):
        validate(facts)
    facts = json.loads(json.dumps(real_facts[1]))
    del facts["workbench"]["flags"]["tmpfs"]  # never left out
    with pytest.raises(jsonschema.ValidationError):
        validate(facts)


def test_real_venv_versions(real_facts):
    _, facts = real_facts
    v = facts["versions"]
    assert v["torch"].startswith("2.13.0")
    assert v["safetensors"] == "0.8.0"
    assert v["numpy"] == "2.4.6"
    assert v["python_executable"].startswith(str(REPO / ".venv-test"))
    assert v["io_default_buffer_size_bytes"] == io.DEFAULT_BUFFER_SIZE
    assert v["torch_cuda_available"] is False  # the test venv has the CPU torch
    assert "torch.version.cuda is None" in v["torch_version_cuda"]["unavailable"]
    # No nvidia-smi here, so a CPU-only torch is not flagged.
    assert facts["gpu"]["gpus"] == {"unavailable": "nvidia-smi not found: no NVIDIA GPU driver"}
    assert facts["gpu"]["cpu_only_torch_on_gpu_host"]["state"] == "not_set"


def test_cli_with_system_python_writes_atomic_json(workbench, tmp_path):
    """The shipped zipapp's audit runs on plain python3 (standard library only); --out equals stdout."""
    from disklab import ship

    artifact = ship.build(tmp_path / "disklab_host.pyz")
    out = workbench / "host.json"
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    proc = subprocess.run(
        [python, "-E", "-s", str(artifact), "audit", "--workbench", str(workbench), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    printed = result_line.parse(proc.stdout)
    assert json.loads(out.read_text()) == printed
    assert printed["versions"]["torch"] == {"unavailable": "no lab venv on this host yet"}
    assert (
        printed["versions"]["python"]
        == sh(python, "-c", "import platform; print(platform.python_version())").strip()
    )
    assert [p.name for p in workbench.iterdir()] == ["host.json"]  # no temp file left behind
    validate(printed)


def test_missing_workbench_is_audited_through_its_nearest_existing_parent(tmp_path):
    wb = tmp_path / "lab" / "workbench"
    facts = audit.collect_all(str(wb), None)
    w = facts["workbench"]
    assert not wb.exists() and not wb.parent.exists()  # auditing never creates it without being asked
    assert w["requested_path"] == str(wb) and w["audited_path"] == str(tmp_path)
    assert w["exists"] is False and w["created"] is False
    assert f"the workbench {wb} does not exist yet" in w["note"]
    assert f"its nearest existing parent directory, {tmp_path}," in w["note"]
    # every filesystem fact is the parent's, from the commands run on the parent
    assert w["df"]["command"] == f"df -T {tmp_path}"
    assert w["fstype"] == sh("df", "--output=fstype", str(tmp_path)).splitlines()[-1].strip()
    assert w["mount_point"] == sh("findmnt", "-n", "-o", "TARGET", "-T", str(tmp_path)).strip()
    validate(facts)


def test_workbench_create_makes_it_with_its_parents_and_audits_it(tmp_path):
    wb = tmp_path / "lab" / "workbench"
    facts = audit.collect_all(str(wb), None, create=True)
    w = facts["workbench"]
    assert wb.is_dir()
    assert w["requested_path"] == w["audited_path"] == str(wb)
    assert w["exists"] is True and w["created"] is True and w["note"] is None
    assert w["df"]["command"] == f"df -T {wb}"
    validate(facts)
    again = audit.collect_all(str(wb), None, create=True)["workbench"]
    assert again["created"] is False  # it exists now: nothing to create


def test_a_workbench_that_is_not_a_directory_is_refused(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ValueError, match=r"workbench '.*afile' exists and is not a directory"):
        audit.collect_all(str(afile), None)
    with pytest.raises(ValueError, match=r"afile' in its path is not a directory"):
        audit.collect_all(str(afile / "wb"), None)
    with pytest.raises(ValueError, match=r"cannot create the workbench '.*afile/wb': Not a directory"):
        audit.collect_all(str(afile / "wb"), None, create=True)


def test_cli_creates_the_workbench_only_when_asked_and_refuses_in_one_line(tmp_path, capsys):
    wb = tmp_path / "wb"
    assert audit.main(["--workbench", str(wb)]) == 0
    assert result_line.parse(capsys.readouterr().out)["workbench"]["exists"] is False and not wb.exists()
    assert audit.main(["--workbench", str(wb), "--workbench-create"]) == 0
    assert result_line.parse(capsys.readouterr().out)["workbench"]["created"] is True and wb.is_dir()
    (tmp_path / "afile").write_text("x")
    assert audit.main(["--workbench", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("disklab audit: workbench ") and err.count("\n") == 1 and "Traceback" not in err


def test_flag_has_three_states_and_refuses_anything_else():
    assert audit.flag(True, "tmpfs")["state"] == "set"
    assert audit.flag(False, "tmpfs") == {"state": "not_set", "why": audit.FLAG_WHY["tmpfs"]}
    unknown = audit.flag({"unavailable": "df failed"}, "tmpfs")
    assert unknown == {"state": "unknown", "why": audit.FLAG_WHY["tmpfs"], "reason": "df failed"}
    with pytest.raises(ValueError, match="flag tmpfs must be True, False or an unavailable fact, got 0"):
        audit.flag(0, "tmpfs")
    with pytest.raises(ValueError, match="flag name must be one of"):
        audit.flag(True, "tmpfss")


def test_schema_requires_a_reason_exactly_for_an_unknown_flag(real_facts):
    good = json.loads(json.dumps(real_facts[1]))
    for bad_flag in (
        {"state": "unknown", "why": "w"},  # unknown without its reason
        {"state": "set", "why": "w", "reason": "r"},  # a reason on a known flag
        {"set": True, "why": "w"},  # the version-2 shape
        {"state": "maybe", "why": "w"},
    ):
        facts = json.loads(json.dumps(good))
        facts["workbench"]["flags"]["tmpfs"] = bad_flag
        with pytest.raises(jsonschema.ValidationError):
            validate(facts)
    facts = json.loads(json.dumps(good))
    facts["workbench"]["exists"] = False  # a missing workbench needs its note
    with pytest.raises(jsonschema.ValidationError):
        validate(facts)


def test_real_tmpfs_workbench():
    wb = tempfile.mkdtemp(dir="/dev/shm", prefix="disklab-audit-")
    try:
        facts = audit.collect_all(wb, None)
    finally:
        os.rmdir(wb)
    w = facts["workbench"]
    assert w["fstype"] == "tmpfs"
    assert w["flags"]["tmpfs"]["state"] == "set"
    assert "power loss" in w["flags"]["tmpfs"]["why"]
    assert w["device"] == {"unavailable": "tmpfs is RAM-backed: no block device"}
    assert w["flags"]["loop_device"]["state"] == "not_set"
    validate(facts)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a loop device")
@pytest.mark.parametrize(
    ("fstype", "size_mib"),
    [("ext4", 64), ("btrfs", 128)],  # btrfs: st_dev is anonymous, so the mount source must resolve
)
def test_real_loop_device_workbench(tmp_path, fstype, size_mib):
    if not shutil.which(f"mkfs.{fstype}"):
        pytest.skip(f"mkfs.{fstype} not installed")
    img, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", str(size_mib * MIB), str(img)], check=True)
    subprocess.run([f"mkfs.{fstype}", "-q", str(img)], check=True, capture_output=True)
    loopdev = sh("losetup", "--find", "--show", str(img)).strip()
    mounted = False
    try:
        subprocess.run(["mount", loopdev, str(mnt)], check=True)
        mounted = True
        facts = audit.collect_all(str(mnt), None)
        (mnt / "f.bin").write_bytes(b"x" * 4096)
        io_device = iorecord.device_of(mnt / "f.bin")  # the I/O record counts the same device
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=True)
        subprocess.run(["losetup", "-d", loopdev], check=False)  # may already be auto-cleared
    w = facts["workbench"]
    assert w["fstype"] == fstype
    assert w["mount_point"] == str(mnt)
    assert w["source"] == loopdev
    assert w["device"]["disk"] == Path(loopdev).name
    assert w["device"]["loop_backing_file"] == str(img)
    assert w["flags"]["loop_device"]["state"] == "set"
    assert "double-cache" in w["flags"]["loop_device"]["why"]
    assert w["device"]["loop_direct_io"] is False  # losetup's default: buffered through the backing file
    assert io_device["name"] == w["device"]["name"] == Path(loopdev).name
    assert ("mount source" in io_device["found_by"]) == (fstype == "btrfs")
    assert w["device"]["write_cache"] in ("write back", "write through")
    assert w["device"]["pcie_link"] == {
        "unavailable": f"{w['device']['disk']} is not an NVMe device: no PCIe link in /sys for it"
    }
    validate(facts)


# --- macOS (recorded) -----------------------------------------------------


def darwin_probe(root: Path) -> audit.Probe:
    d = AUDIT_FIX / "darwin"
    run = Recorded(
        {
            "sw_vers": fix("darwin", "sw_vers.txt"),
            "uname": fix("darwin", "uname_nrm.txt"),
            "sysctl": fix("darwin", "sysctl.txt"),
            "df": fix("darwin", "df_workbench.txt"),
            "mount": fix("darwin", "mount.txt"),
            "diskutil": (d / "diskutil_info_disk3s5.plist").read_text(),
            "vm_stat": fix("darwin", "vm_stat.txt"),
        }
    )
    return audit.Probe(system="Darwin", root=root, run=run, sysconf=lambda name: 4096)


def test_darwin_fixture_facts(tmp_path):
    probe = darwin_probe(tmp_path)
    facts = audit.collect_all("/Users/lab/workbench/disk", None, probe=probe)
    host, w = facts["host"], facts["workbench"]
    assert host["os"] == "macOS 15.6 (24G84)"
    assert host["kernel"] == "24.6.0" and host["architecture"] == "arm64"
    assert host["page_size_bytes"] == 16384  # hw.pagesize, not this host's sysconf
    assert host["ram_bytes"] == 48 * GIB
    assert host["cpu_model"] == "Apple M4 Pro"
    assert w["fstype"] == "apfs"
    assert w["mount_point"] == "/System/Volumes/Data"
    assert w["source"] == "/dev/disk3s5"
    assert w["mount_options"] == ["local", "journaled", "nobrowse", "protect", "root data"]
    assert ["diskutil", "info", "-plist", "/dev/disk3s5"] in probe.run.calls
    dev = w["device"]
    assert dev["rotational"] is False and dev["diskutil_filesystem_type"] == "apfs"
    assert dev["scheduler"] == {"unavailable": "not exposed on macOS"}
    assert dev["read_ahead_kb"] == {"unavailable": "not exposed on macOS"}
    assert w["flags"]["loop_device"]["state"] == "not_set"  # BusProtocol is Apple Fabric, not Disk Image
    for key, value in facts["writeback"].items():
        assert value == {
            "unavailable": "not applicable on macOS: XNU has no /proc/sys/vm dirty_* writeback settings"
        }, key
    assert "not yet on a real Mac" in facts["caveats"][0]
    validate(facts)


def test_darwin_failed_sources_become_unavailable(tmp_path):
    probe = darwin_probe(tmp_path)
    probe.run.outputs["sysctl"] = audit.CommandFailed(
        "sysctl exited 1: unknown oid 'machdep.cpu.brand_string'"
    )
    del probe.run.outputs["diskutil"]
    facts = audit.collect_all("/Users/lab/workbench/disk", None, probe=probe)
    for key in ("cpu_model", "ram_bytes", "page_size_bytes"):
        assert "unknown oid" in facts["host"][key]["unavailable"], key
    assert facts["workbench"]["fstype"] == "apfs"  # from mount, which still worked
    assert facts["workbench"]["device"]["unavailable"].startswith("diskutil info: not found")
    loop = facts["workbench"]["flags"]["loop_device"]
    assert loop["state"] == "unknown" and loop["reason"] == facts["workbench"]["device"]["unavailable"]
    validate(facts)


def test_darwin_disk_image_is_flagged_as_loop(tmp_path):
    probe = darwin_probe(tmp_path)
    plist = probe.run.outputs["diskutil"]
    plist = plist.replace("<string>Apple Fabric</string>", "<string>Disk Image</string>")
    probe.run.outputs["diskutil"] = plist.replace(
        "<key>ParentWholeDisk</key>\n\t<string>disk3</string>\n", ""
    )
    w = audit.collect_workbench(probe, "/Users/lab/workbench/disk")
    assert w["device"]["disk"] == {"unavailable": "diskutil gave no ParentWholeDisk"}
    assert w["flags"]["loop_device"]["state"] == "set"


def test_darwin_vm_stat_parser():
    vm = ap.parse_vm_stat(fix("darwin", "vm_stat.txt"))
    assert vm["page_size_bytes"] == 16384
    assert vm["pages_free"] == 41234 and vm["pages_active"] == 876543
    assert vm["translation_faults"] == 123456789
    with pytest.raises(ValueError, match="page size"):
        ap.parse_vm_stat("Pages free: 3.\n")


def test_darwin_parsers_reject_other_formats():
    with pytest.raises(ValueError, match="df"):
        ap.parse_darwin_df("Filesystem 512-blocks\nnot a row\n")
    with pytest.raises(ValueError, match="property list"):
        ap.parse_diskutil_plist("Device Identifier: disk3s5")
    with pytest.raises(ValueError, match="ProductVersion"):
        ap.parse_sw_vers("ProductName: macOS\n")


# --- DGX Spark (recorded) -------------------------------------------------


def spark_probe(tmp_path: Path, versions_json: str | None = None) -> audit.Probe:
    root = tmp_path / "root"
    shutil.copytree(AUDIT_FIX / "spark" / "root", root)
    fake_nvme_sysfs(root)
    outputs = {
        "uname": fix("spark", "uname_nrm.txt"),
        "lscpu": fix("spark", "lscpu.txt"),
        "nvidia-smi": fix("spark", "nvidia_smi.csv"),
        "df": fix("linux", "df_T.txt"),
        "findmnt": fix("linux", "findmnt.json"),
        "/venv/bin/python": versions_json or fix("spark", "versions_cpu_torch.json"),
    }
    return audit.Probe(system="Linux", root=root, run=Recorded(outputs), sysconf=lambda name: 4096)


def test_spark_fixture_facts(tmp_path):
    probe = spark_probe(tmp_path)
    facts = audit.collect_all("/home/lab/workbench", "/venv/bin/python", probe=probe)
    host, gpu, w = facts["host"], facts["gpu"], facts["workbench"]
    assert host["architecture"] == "aarch64"
    assert host["os"] == "Ubuntu 24.04.3 LTS"
    assert host["cpu_model"] == "Cortex-X925, Cortex-A725"
    assert host["cpu_model_source"] == "lscpu"
    assert host["ram_bytes"] == 125533340 * 1024
    assert gpu["gpus"][0]["name"] == "NVIDIA GB10"
    assert gpu["gpus"][0]["driver_version"] == "580.95.05"
    assert "[N/A]" in gpu["gpus"][0]["memory_total_bytes"]["unavailable"]
    assert gpu["cpu_only_torch_on_gpu_host"]["state"] == "set"
    assert "device_placed" in gpu["cpu_only_torch_on_gpu_host"]["why"]
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"]
    assert query in probe.run.calls
    assert w["fstype"] == "ext4" and w["mount_options"] == ["rw", "relatime", "errors=remount-ro"]
    assert w["device"]["name"] == "nvme0n1p2" and w["device"]["disk"] == "nvme0n1"
    assert w["device"]["partition"] is True and w["device"]["rotational"] is False
    assert w["device"]["scheduler"] == {"active": "none", "available": ["none", "mq-deadline"]}
    assert w["device"]["read_ahead_kb"] == 128
    assert facts["writeback"]["dirty_expire_centisecs"] == 3000
    assert any("lscpu" in c for c in facts["caveats"]) and any("nvidia-smi" in c for c in facts["caveats"])
    validate(facts)


def test_spark_cuda_torch_is_not_flagged(tmp_path):
    cuda = json.loads(fix("spark", "versions_cpu_torch.json"))
    cuda.update(torch="2.13.0+cu130", torch_cuda_available=True, torch_version_cuda="13.0")
    facts = audit.collect_all(
        "/home/lab/workbench", "/venv/bin/python", probe=spark_probe(tmp_path, json.dumps(cuda))
    )
    assert facts["gpu"]["cpu_only_torch_on_gpu_host"]["state"] == "not_set"


def test_gpu_host_without_venv_flag_is_unavailable(tmp_path):
    facts = audit.collect_all("/home/lab/workbench", None, probe=spark_probe(tmp_path))
    assert facts["gpu"]["cpu_only_torch_on_gpu_host"] == {
        "state": "unknown",
        "why": audit.FLAG_WHY["cpu_only_torch_on_gpu_host"],
        "reason": "GPU present but torch.cuda.is_available() unknown: no lab venv on this host yet",
    }
    validate(facts)


def test_spark_cpuinfo_has_no_model_name():
    assert ap.parse_cpuinfo_model(fix("spark", "root", "proc", "cpuinfo")) is None
    assert ap.parse_lscpu_models(fix("spark", "lscpu.txt")) == ["Cortex-X925", "Cortex-A725"]


# --- Linux edge cases (recorded or built sysfs) ---------------------------


def test_failed_sources_become_unavailable_not_crashes(tmp_path):
    run = Recorded(
        {
            "uname": audit.CommandFailed("uname exited 1: boom"),
            "df": fix("linux", "df_T.txt"),
            "findmnt": audit.CommandFailed("findmnt exited 1: unknown option -- 'J'"),
            "nvidia-smi": audit.CommandFailed("nvidia-smi exited 9: NVIDIA-SMI has failed"),
        }
    )
    probe = audit.Probe(system="Linux", root=tmp_path, run=run, sysconf=lambda name: 4096)
    facts = audit.collect_all("/srv/wb", "/no/such/python", probe=probe)
    w = facts["workbench"]
    assert w["fstype"] == "ext4" and w["fact_source"] == "df -T"  # falls back to df
    assert "unknown option" in w["mount_options"]["unavailable"]
    assert "no /sys/class/block entry" in w["device"]["unavailable"]
    assert w["flags"]["loop_device"] == {
        "state": "unknown",
        "why": audit.FLAG_WHY["loop_device"],
        "reason": w["device"]["unavailable"],
    }
    assert "boom" in facts["host"]["hostname"]["unavailable"]
    assert "/etc/os-release" in facts["host"]["os"]["unavailable"]
    assert "lscpu" in facts["host"]["cpu_model"]["unavailable"]
    assert "/proc/sys/vm/dirty_ratio" in facts["writeback"]["dirty_ratio"]["unavailable"]
    assert "/no/such/python" in facts["versions"]["torch"]["unavailable"]
    assert facts["gpu"]["gpus"]["unavailable"].startswith("nvidia-smi failed: ")
    cpu_only = facts["gpu"]["cpu_only_torch_on_gpu_host"]
    assert cpu_only["state"] == "unknown" and "cannot tell whether a GPU is present" in cpu_only["reason"]
    validate(facts)


def test_device_mapper_source_lists_slaves(tmp_path):
    dm = tmp_path / "sys/devices/virtual/block/dm-0"
    (dm / "queue").mkdir(parents=True)
    (dm / "queue/rotational").write_text("0\n")
    (dm / "queue/scheduler").write_text("none\n")
    (dm / "queue/read_ahead_kb").write_text("4096\n")
    (dm / "dm").mkdir()
    (dm / "dm/name").write_text("ubuntu--vg-ubuntu--lv\n")
    (dm / "slaves").mkdir()
    (dm / "slaves/nvme0n1p3").touch()
    for d in ("sys/class/block", "sys/block", "dev/mapper"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "sys/class/block/dm-0").symlink_to(dm)
    (tmp_path / "sys/block/dm-0").symlink_to(dm)
    (tmp_path / "dev/dm-0").touch()
    (tmp_path / "dev/mapper/ubuntu--vg-ubuntu--lv").symlink_to("../dm-0")
    probe = audit.Probe(system="Linux", root=tmp_path, run=Recorded({}))
    dev = audit.collect_block_device(probe, "/dev/mapper/ubuntu--vg-ubuntu--lv", "/srv")
    assert dev["name"] == "dm-0" and dev["partition"] is False
    assert dev["dm"] == {"name": "ubuntu--vg-ubuntu--lv", "slaves": ["nvme0n1p3"]}
    assert dev["scheduler"] == {"active": "none", "available": ["none"]}
    assert dev["loop_backing_file"] == {"unavailable": "dm-0 is not a loop device"}


@pytest.mark.parametrize(
    ("fstype", "flag", "device_reason"),
    [
        (
            "nfs4",
            "network_or_fuse",
            "nfs4 is a network filesystem: its files are on a server, with no local block device",
        ),
        (
            "fuse.sshfs",
            "network_or_fuse",
            "fuse.sshfs is a network filesystem: its files are on a server, with no local block device",
        ),
        (
            "fuse.ntfs-3g",
            "network_or_fuse",
            "fuse.ntfs-3g is a FUSE filesystem: its daemon serves the files, with no local block device",
        ),
        ("overlay", None, "overlay merges other directories: no single block device"),
    ],
)
def test_filesystems_without_a_block_device(tmp_path, fstype, flag, device_reason):
    findmnt = {"filesystems": [{"target": "/mnt", "source": "srv:/x", "fstype": fstype, "options": "rw"}]}
    probe = audit.Probe(system="Linux", root=tmp_path, run=Recorded({"findmnt": json.dumps(findmnt)}))
    w = audit.collect_workbench(probe, "/mnt/wb")
    assert w["device"] == {"unavailable": device_reason}
    for name in ("tmpfs", "network_or_fuse"):
        assert w["flags"][name]["state"] == ("set" if name == flag else "not_set")


def test_linux_parsers():
    df = ap.parse_df_t(fix("linux", "df_T_wrapped.txt"))
    assert df == {
        "source": "/dev/mapper/ubuntu--vg-ubuntu--lv",
        "fstype": "ext4",
        "mount_point": "/srv/lab work",
    }
    fm = ap.parse_findmnt_json(fix("linux", "findmnt.json"))
    assert fm["source"] == "/dev/nvme0n1p2" and fm["options"][-1] == "errors=remount-ro"
    assert ap.source_device("/dev/nvme0n1p2[/@home]") == "/dev/nvme0n1p2"
    assert ap.parse_scheduler("none [mq-deadline] kyber bfq\n")["active"] == "mq-deadline"
    gpus = ap.parse_nvidia_smi_csv(
        "NVIDIA H100 80GB HBM3, 570.86.15, 81559\nNVIDIA H100 80GB HBM3, 570.86.15, 81559\n"
    )
    assert len(gpus) == 2 and gpus[0]["memory_total_bytes"] == 81559 * MIB
    with pytest.raises(ValueError, match="df -T"):
        ap.parse_df_t("Filesystem Type\n")
    with pytest.raises(ValueError, match="findmnt"):
        ap.parse_findmnt_json('{"filesystems": []}')
    with pytest.raises(ValueError, match="active"):
        ap.parse_scheduler("none mq-deadline")
    with pytest.raises(ValueError, match="3 fields"):
        ap.parse_nvidia_smi_csv("NVIDIA GB10, 580.95.05\n")
    with pytest.raises(ValueError, match="MemTotal"):
        ap.parse_meminfo_total_bytes("MemFree: 1 kB\n")
    with pytest.raises(ValueError, match="PRETTY_NAME"):
        ap.parse_os_release('NAME="Debian"\n')


def test_durability_facts_of_an_nvme_device_from_a_recorded_sys_tree(tmp_path):
    """A recorded /sys tree (no NVMe on this VM): model, write cache, FUA and the PCIe link."""
    base = tmp_path / "sys/block/nvme0n1"
    (base / "queue").mkdir(parents=True)
    (base / "device/device").mkdir(parents=True)
    (base / "device/model").write_text("Samsung SSD 990 PRO 2TB                 \n")
    (base / "queue/write_cache").write_text("write back\n")
    (base / "queue/fua").write_text("1\n")
    link = {"current_link_speed": "16.0 GT/s PCIe", "current_link_width": "4",
            "max_link_speed": "16.0 GT/s PCIe", "max_link_width": "4"}  # fmt: skip
    for key, value in link.items():
        (base / "device/device" / key).write_text(value + "\n")
    got = audit.durability_facts(audit.Probe(system="Linux", root=tmp_path), "nvme0n1")
    assert got["model"] == "Samsung SSD 990 PRO 2TB" and got["write_cache"] == "write back"
    assert got["fua"] is True and got["pcie_link"] == link
    assert "not found" in got["vendor"]["unavailable"]  # NVMe namespaces show no vendor file
