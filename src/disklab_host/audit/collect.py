"""Host audit: the facts a lab result needs to be read correctly, as one JSON object.

Usage: python disklab_host.pyz audit --workbench PATH [--workbench-create]
       [--venv-python PATH] [--out host.json]

Collects the OS, kernel, CPU, RAM and page size; the lab venv's Python, torch,
safetensors and numpy versions; NVIDIA GPUs; the workbench's filesystem, mount
options and backing block device (rotational, I/O scheduler, read_ahead_kb);
and the kernel's writeback settings (/proc/sys/vm/dirty_*). A workbench that
does not exist yet is created with ``--workbench-create``; without it the
audit measures its nearest existing parent directory and says so
(``workbench.exists`` false, ``workbench.note``). Every fact is its
value or ``{"unavailable": reason}`` (labcommon.unavailable): a source that is
missing, unreadable or not applicable never crashes the audit, never reads as
0 and is never left out. The shape is src/disklab/schema/facts.schema.json.

Standard library only: the host_audit role runs this with the host's system
Python, before the lab venv exists. Every ``collect_*`` function takes a
:class:`Probe`, which holds the command runner and the filesystem root for
/proc, /sys and /etc; tests pass recorded output through it.

Linux paths run for real in the tests. The macOS (Darwin) and DGX Spark
(aarch64 + NVIDIA GB10) paths have only been run against recorded command
output in tests/fixtures/audit, not yet on real hardware; the JSON says so in
``caveats``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import venvprobe
from ..common.facts import is_unavailable, unavailable

# Version of the facts object's shape; the controller's facts.schema.json pins it.
from ..common.formats import stamp
from ..common.fsio import atomic_write_json
from ..common.fstypes import RAM_TYPES, is_fuse, is_network
from ..common.result import emit as emit_result
from . import parse as ap
from . import quiet

NO_VENV = "no lab venv on this host yet"
NOT_ON_MACOS = "not exposed on macOS"
WRITEBACK_KEYS = (
    "dirty_expire_centisecs",
    "dirty_writeback_centisecs",
    "dirty_ratio",
    "dirty_background_ratio",
    "dirty_bytes",
    "dirty_background_bytes",
)
# An NVMe namespace's PCI device (/sys/block/nvmeXnY/device/device) shows its link in these files.
PCIE_LINK_KEYS = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
FLAG_WHY = {
    "tmpfs": "tmpfs lives in RAM: nothing here survives a power loss, so fsync proves no durability",
    "network_or_fuse": "on a network or FUSE filesystem, fsync means what the server or daemon makes "
    "of it, not what the local drive does",
    "loop_device": "a loop device can double-cache: pages sit in the page cache once for the loop "
    "filesystem and again for the backing file in the outer filesystem, unless the loop device uses "
    "direct I/O (device.loop_direct_io)",
    "cpu_only_torch_on_gpu_host": "a CPU-only torch on a GPU host cannot reach the device_placed "
    "readiness stage, so every GPU load figure would be missing",
}

Runner = Callable[[list[str]], str]


class CommandFailed(RuntimeError):
    """A command ran but exited non-zero; the message holds its exit code and stderr."""


def run_command(argv: list[str], timeout_s: float = 120) -> str:
    """Run ``argv`` without a shell and return its stdout.

    Raises FileNotFoundError when the program is absent, CommandFailed on a
    non-zero exit, subprocess.TimeoutExpired after ``timeout_s`` seconds.
    """
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()
        raise CommandFailed(f"{' '.join(argv)} exited {proc.returncode}: {err[-1] if err else ''}")
    return proc.stdout


@dataclass(frozen=True)
class Probe:
    """Where facts come from: this host by default, recorded output in tests.

    ``system`` is "Linux" or "Darwin" (platform.system()); ``root`` prefixes
    /proc, /sys, /dev and /etc paths; ``run`` runs a command and returns its
    stdout; ``sysconf`` is os.sysconf.
    """

    system: str = field(default_factory=platform.system)
    root: Path = Path("/")
    run: Runner = run_command
    sysconf: Callable[[str], int] = os.sysconf

    def path(self, abs_path: str) -> Path:
        """``abs_path`` (e.g. "/proc/meminfo") under :attr:`root`."""
        return self.root / abs_path.lstrip("/")

    def read(self, abs_path: str) -> str:
        """Text of ``abs_path`` under :attr:`root`; raises OSError when unreadable."""
        return self.path(abs_path).read_text()


def attempt(what: str, fn: Callable[[], object]) -> object:
    """``fn()``, or ``unavailable`` naming ``what`` and the error when it fails."""
    try:
        return fn()
    except FileNotFoundError as exc:
        return unavailable(f"{what}: not found ({exc.filename or exc})")
    except (OSError, ValueError, KeyError, CommandFailed, subprocess.TimeoutExpired) as exc:
        return unavailable(f"{what}: {type(exc).__name__}: {exc}")


def flag(value: object, name: str) -> dict:
    """A flag in three states: ``{"state": "set" | "not_set" | "unknown", "why": ..., "reason": ...}``.

    ``value`` is True (set), False (not set) or an ``unavailable`` fact
    (unknown: the fact the flag depends on could not be read; its reason
    becomes ``reason``, which only an unknown flag has). ``why`` is what the
    flag means, from :data:`FLAG_WHY`. Raises ValueError for any other value,
    or a name that is not in FLAG_WHY.
    """
    if name not in FLAG_WHY:
        raise ValueError(f"flag name must be one of {sorted(FLAG_WHY)}, got {name!r}")
    if value is True or value is False:
        return {"state": "set" if value else "not_set", "why": FLAG_WHY[name]}
    if is_unavailable(value):
        return {"state": "unknown", "why": FLAG_WHY[name], "reason": value["unavailable"]}
    raise ValueError(f"flag {name} must be True, False or an unavailable fact, got {value!r}")


def _pick(fact: object, key: str) -> object:
    """``fact[key]`` when ``fact`` is a dict of values, else the same unavailable fact."""
    return fact if is_unavailable(fact) else fact[key]


# --- host -----------------------------------------------------------------


def _darwin_sysctl(probe: Probe) -> object:
    """``sysctl hw.memsize hw.pagesize machdep.cpu.brand_string`` as a dict, or unavailable."""
    argv = ["sysctl", "hw.memsize", "hw.pagesize", "machdep.cpu.brand_string"]
    return attempt("sysctl", lambda: ap.parse_key_value(probe.run(argv), ":"))


def _sysctl_fact(sysctl: object, key: str, convert: Callable[[str], object]) -> object:
    if is_unavailable(sysctl):
        return sysctl
    if key not in sysctl:
        return unavailable(f"sysctl printed no {key}")
    return attempt(f"sysctl {key}", lambda: convert(sysctl[key]))


def _linux_cpu_model(probe: Probe) -> tuple[object, str]:
    """(model, source): /proc/cpuinfo "model name", else lscpu "Model name" (aarch64)."""
    cpuinfo = attempt("/proc/cpuinfo", lambda: ap.parse_cpuinfo_model(probe.read("/proc/cpuinfo")))
    if isinstance(cpuinfo, str):
        return cpuinfo, "/proc/cpuinfo"
    models = attempt("lscpu", lambda: ap.parse_lscpu_models(probe.run(["lscpu"])))
    if isinstance(models, list) and models:
        return ", ".join(models), "lscpu"
    lscpu_why = models["unavailable"] if is_unavailable(models) else "lscpu printed no 'Model name'"
    return unavailable(f"/proc/cpuinfo has no 'model name' (usual on aarch64) and {lscpu_why}"), "none"


def collect_host(probe: Probe) -> dict:
    """hostname, os, kernel, architecture, cpu_model, ram_bytes, page_size_bytes, system.

    Linux: /etc/os-release PRETTY_NAME, /proc/cpuinfo (or lscpu on aarch64),
    /proc/meminfo MemTotal, os.sysconf("SC_PAGE_SIZE"). macOS: sw_vers and
    sysctl hw.memsize, hw.pagesize (16 KiB on Apple silicon) and
    machdep.cpu.brand_string. uname -n -r -m on both.
    """
    uname = attempt("uname", lambda: ap.parse_uname_nrm(probe.run(["uname", "-n", "-r", "-m"])))
    out: dict = {key: _pick(uname, key) for key in ("hostname", "kernel", "architecture")}
    out["system"] = probe.system
    if probe.system == "Linux":
        out["os"] = attempt("/etc/os-release", lambda: ap.parse_os_release(probe.read("/etc/os-release")))
        out["cpu_model"], out["cpu_model_source"] = _linux_cpu_model(probe)
        out["ram_bytes"] = attempt(
            "/proc/meminfo", lambda: ap.parse_meminfo_total_bytes(probe.read("/proc/meminfo"))
        )
        out["page_size_bytes"] = attempt("sysconf", lambda: int(probe.sysconf("SC_PAGE_SIZE")))
    elif probe.system == "Darwin":
        out["os"] = attempt("sw_vers", lambda: ap.parse_sw_vers(probe.run(["sw_vers"])))
        sysctl = _darwin_sysctl(probe)
        out["cpu_model"] = _sysctl_fact(sysctl, "machdep.cpu.brand_string", str)
        out["cpu_model_source"] = "sysctl machdep.cpu.brand_string"
        out["ram_bytes"] = _sysctl_fact(sysctl, "hw.memsize", int)
        out["page_size_bytes"] = _sysctl_fact(sysctl, "hw.pagesize", int)
    else:
        why = unavailable(f"the audit does not support {probe.system}")
        out.update(os=why, cpu_model=why, cpu_model_source="none", ram_bytes=why, page_size_bytes=why)
    return out


def collect_memory(probe: Probe) -> dict:
    """macOS ``vm_stat`` page counts (pages, not bytes) with the page size; Linux: not collected.

    Linux memory totals come from /proc/meminfo in collect_host; vm_stat is
    macOS's only view of free/active pages.
    """
    if probe.system != "Darwin":
        return {"vm_stat": unavailable("vm_stat is macOS only; Linux uses /proc/meminfo (host.ram_bytes)")}
    return {"vm_stat": attempt("vm_stat", lambda: ap.parse_vm_stat(probe.run(["vm_stat"])))}


# --- versions -------------------------------------------------------------

VERSION_KEYS = (
    "python",
    "python_executable",
    "io_default_buffer_size_bytes",
    "torch",
    "safetensors",
    "numpy",
    "torch_cuda_available",
    "torch_version_cuda",
    "torch_mps_available",
)


def collect_versions(probe: Probe, venv_python: str | None) -> tuple[dict, dict]:
    """``(versions, source)``: the versions seen by the lab venv's Python, and where they came from.

    Keys of versions: VERSION_KEYS. ``io_default_buffer_size_bytes`` is io.DEFAULT_BUFFER_SIZE
    (Python's write buffer, the lesson's first layer). They come from the probe provision kept in the
    venv's record (disklab_host.venvprobe) while nothing that could change them has changed since it
    ran, else from running the same probe now in a subprocess. ``source`` is ``{"from": "venv_record"
    | "probed_now" | "no_venv", "probed_utc", "record", "why"}``. Without ``venv_python``, python is
    the audit's own interpreter and the rest are unavailable.
    """
    if venv_python is None:
        out = {key: unavailable(NO_VENV) for key in (*VERSION_KEYS, "packages", "lock")}
        out.update(python=platform.python_version(), python_executable=sys.executable)
        return out, {"from": "no_venv", "probed_utc": None, "record": None, "why": NO_VENV}
    venv = Path(venv_python).parent.parent
    kept, why = venvprobe.recorded(venv, proc=probe.path("/proc"))
    if kept is not None:
        got: object = kept["result"]
        source = {"from": "venv_record", "probed_utc": kept.get("probed_utc"),
                  "record": str(venv / venvprobe.RECORD_NAME), "why": why}  # fmt: skip
    else:
        source = {"from": "probed_now", "probed_utc": venvprobe.utc_now(), "record": None, "why": why}
        got = attempt(
            f"lab venv python {venv_python}",
            lambda: json.loads(probe.run([venv_python, "-c", venvprobe.SCRIPT])),
        )
    if is_unavailable(got):
        return {key: got for key in (*VERSION_KEYS, "packages", "lock")}, source
    missing = {key: unavailable(f"the venv probe did not report {key}") for key in VERSION_KEYS}
    out = {key: got.get(key, missing[key]) for key in VERSION_KEYS}
    dists = got.get("dists")
    out["packages"] = (
        dict(sorted(dists.items()))
        if isinstance(dists, dict)
        else unavailable("the venv probe listed no dists")
    )
    return {**out, "lock": venv_lock(venv)}, source


def venv_lock(venv: Path) -> dict:
    """The hash lock the venv was installed from, as its record says (disklab_host.lock.entry)."""
    record = venvprobe.read_record(venv)
    if record is None:
        return unavailable(f"no readable {venvprobe.RECORD_NAME} in {venv}")
    if "lock" not in record:
        why = "the venv was made before disklab installed from hash locks"
        return {"locked": False, "name": None, "sha256": None, "why": why}
    lock = record["lock"] or {}
    why = str(record.get("lock_why") or "no lock recorded")
    return {"locked": bool(lock), "name": lock.get("name"), "sha256": lock.get("sha256"), "why": why}


# --- gpu ------------------------------------------------------------------


def collect_gpu(probe: Probe, versions: dict) -> dict:
    """NVIDIA GPUs from nvidia-smi, and the ``cpu_only_torch_on_gpu_host`` flag.

    ``gpus`` is a list of {name, driver_version, memory_total_bytes}. The flag
    (see :func:`flag`) is set when a GPU is listed but
    torch.cuda.is_available() is false, and not_set when there is no NVIDIA
    driver. It is unknown when nvidia-smi exists but fails (a GPU may be
    there) or the venv's torch is unknown (e.g. no lab venv yet).
    """
    if probe.system == "Darwin":
        gpus: object = unavailable("no NVIDIA GPU on macOS; torch reaches Apple GPUs through MPS")
    else:
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total"]
        argv = [*query, "--format=csv,noheader,nounits"]
        try:
            gpus = ap.parse_nvidia_smi_csv(probe.run(argv))
        except FileNotFoundError:
            gpus = unavailable("nvidia-smi not found: no NVIDIA GPU driver")
        except (OSError, ValueError, CommandFailed, subprocess.TimeoutExpired) as exc:
            gpus = unavailable(f"nvidia-smi failed: {exc}")
    cuda = versions.get("torch_cuda_available")
    if is_unavailable(gpus) and gpus["unavailable"].startswith("nvidia-smi failed"):
        cpu_only: object = unavailable("cannot tell whether a GPU is present: " + gpus["unavailable"])
    elif is_unavailable(gpus):
        cpu_only = False
    elif isinstance(cuda, bool):
        cpu_only = not cuda
    else:
        why = cuda["unavailable"] if is_unavailable(cuda) else repr(cuda)
        cpu_only = unavailable(f"GPU present but torch.cuda.is_available() unknown: {why}")
    return {"gpus": gpus, "cpu_only_torch_on_gpu_host": flag(cpu_only, "cpu_only_torch_on_gpu_host")}


# --- workbench ------------------------------------------------------------


def _no_block_device_reason(fstype: str) -> str | None:
    if fstype in RAM_TYPES:
        return f"{fstype} is RAM-backed: no block device"
    if is_network(fstype):
        return f"{fstype} is a network filesystem: its files are on a server, with no local block device"
    if is_fuse(fstype):
        return f"{fstype} is a FUSE filesystem: its daemon serves the files, with no local block device"
    if fstype == "overlay":
        return "overlay merges other directories: no single block device"
    return None


def _linux_block_name(probe: Probe, source: str, workbench: str) -> str:
    """The /sys/class/block name behind a mount source; st_dev as a fallback on the real root."""
    dev = ap.source_device(source)
    if dev.startswith("/dev/"):
        name = Path(os.path.realpath(probe.path(dev))).name  # /dev/mapper/vg-lv -> dm-0
        if probe.path(f"/sys/class/block/{name}").exists():
            return name
    if probe.root == Path("/"):
        st = os.stat(workbench)
        link = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
        if link.exists():
            return Path(os.path.realpath(link)).name
    raise ValueError(f"no /sys/class/block entry for mount source {source!r}")


def durability_facts(probe: Probe, disk: str) -> dict:
    """The device facts that bound durability and a cold read, from /sys/block/<disk> (sysfs-block(5)).

    ``model`` and ``vendor`` (device/model, device/vendor: SCSI/SATA and NVMe
    give a model, virtio only a PCI vendor id), ``write_cache`` (queue/
    write_cache: "write back" means a volatile cache the kernel flushes on
    fsync, "write through" none), ``fua`` (queue/fua: the device takes
    forced-unit-access writes), and for NVMe ``pcie_link`` (the PCI device's
    current and max link speed and width). Each is unavailable with its reason
    when /sys does not show it.
    """
    base = f"/sys/block/{disk}"

    def text(rel: str) -> object:
        return attempt(rel, lambda: probe.read(f"{base}/{rel}").strip())

    out = {
        "model": text("device/model"),
        "vendor": text("device/vendor"),
        "write_cache": text("queue/write_cache"),
        "fua": attempt("queue/fua", lambda: probe.read(f"{base}/queue/fua").strip() == "1"),
    }
    if disk.startswith("nvme"):
        link = {k: text(f"device/device/{k}") for k in PCIE_LINK_KEYS}
        out["pcie_link"] = link
    else:
        out["pcie_link"] = unavailable(f"{disk} is not an NVMe device: no PCIe link in /sys for it")
    return out


def collect_block_device(probe: Probe, source: str, workbench: str) -> dict:
    """The Linux block device behind ``source``, read from /sys (sysfs-block(5)).

    Keys: name (e.g. nvme0n1p2), disk (its parent, nvme0n1), partition (bool),
    rotational (bool), scheduler {active, available}, read_ahead_kb (KiB),
    model, vendor, write_cache, fua and pcie_link (:func:`durability_facts`),
    dm {name, slaves} for device-mapper, loop_backing_file for loop devices.
    Raises ValueError when no sysfs entry matches the source.
    """
    name = _linux_block_name(probe, source, workbench)
    entry = probe.path(f"/sys/class/block/{name}")
    partition = (entry / "partition").exists()
    disk = Path(os.path.realpath(entry)).parent.name if partition else name
    base = f"/sys/block/{disk}"
    out = {"name": name, "disk": disk, "partition": partition}
    out["rotational"] = attempt(
        "rotational", lambda: int(probe.read(f"{base}/queue/rotational").strip()) == 1
    )
    out["scheduler"] = attempt("scheduler", lambda: ap.parse_scheduler(probe.read(f"{base}/queue/scheduler")))
    out["read_ahead_kb"] = attempt("read_ahead_kb", lambda: int(probe.read(f"{base}/queue/read_ahead_kb")))
    out.update(durability_facts(probe, disk))
    if probe.path(f"{base}/dm").is_dir():
        slaves = attempt("dm slaves", lambda: sorted(os.listdir(probe.path(f"{base}/slaves"))))
        out["dm"] = {
            "name": attempt("dm name", lambda: probe.read(f"{base}/dm/name").strip()),
            "slaves": slaves,
        }
    else:
        out["dm"] = unavailable(f"{disk} is not a device-mapper device")
    if probe.path(f"{base}/loop").is_dir():
        out["loop_backing_file"] = attempt(
            "loop backing_file", lambda: probe.read(f"{base}/loop/backing_file").strip()
        )
        out["loop_direct_io"] = attempt("loop dio", lambda: probe.read(f"{base}/loop/dio").strip() == "1")
    else:
        out["loop_backing_file"] = unavailable(f"{disk} is not a loop device")
        out["loop_direct_io"] = unavailable(f"{disk} is not a loop device")
    return out


def _linux_workbench(probe: Probe, workbench: str) -> dict:
    df_cmd = ["df", "-T", workbench]
    fm_cmd = ["findmnt", "-J", "-T", workbench, "-o", "TARGET,SOURCE,FSTYPE,OPTIONS"]
    df = attempt("df -T", lambda: {**ap.parse_df_t(probe.run(df_cmd)), "command": " ".join(df_cmd)})
    fm = attempt("findmnt", lambda: {**ap.parse_findmnt_json(probe.run(fm_cmd)), "command": " ".join(fm_cmd)})
    best, src = (fm, "findmnt") if not is_unavailable(fm) else (df, "df -T")
    out = {
        "fstype": _pick(best, "fstype"),
        "mount_point": _pick(best, "mount_point"),
        "source": _pick(best, "source"),
        "mount_options": _pick(fm, "options"),
        "fact_source": src if not is_unavailable(best) else "none",
        "df": df,
        "findmnt": fm,
    }
    fstype = out["fstype"]
    if is_unavailable(fstype):
        out["device"] = unavailable("filesystem type unknown: " + fstype["unavailable"])
    elif _no_block_device_reason(fstype):
        out["device"] = unavailable(_no_block_device_reason(fstype))
    else:
        out["device"] = attempt("block device", lambda: collect_block_device(probe, out["source"], workbench))
    return out


def _darwin_device(probe: Probe, source: str) -> dict:
    info = ap.parse_diskutil_plist(probe.run(["diskutil", "info", "-plist", source]))
    solid = info.get("SolidState")
    return {
        "name": source.removeprefix("/dev/"),
        "disk": info.get("ParentWholeDisk", unavailable("diskutil gave no ParentWholeDisk")),
        "partition": not info.get("WholeDisk", False),
        "rotational": (not solid) if isinstance(solid, bool) else unavailable("diskutil gave no SolidState"),
        "scheduler": unavailable(NOT_ON_MACOS),
        "read_ahead_kb": unavailable(NOT_ON_MACOS),
        "dm": unavailable("device-mapper is Linux only"),
        "loop_backing_file": unavailable(NOT_ON_MACOS),
        "loop_direct_io": unavailable(NOT_ON_MACOS),
        "diskutil_filesystem_type": info.get(
            "FilesystemType", unavailable("diskutil gave no FilesystemType")
        ),
        "bus_protocol": info.get("BusProtocol", unavailable("diskutil gave no BusProtocol")),
        "model": info.get("MediaName", unavailable("diskutil gave no MediaName")),
        "vendor": unavailable("diskutil gives no vendor apart from MediaName"),
        "write_cache": unavailable(
            "macOS shows no block-layer write-cache mode; fsync there stops at the drive's cache and only "
            "F_FULLFSYNC asks for a flush"
        ),
        "fua": unavailable(NOT_ON_MACOS),
        "pcie_link": unavailable(
            "the PCIe link is in system_profiler on macOS, which the audit does not read"
        ),
    }


def _darwin_workbench(probe: Probe, workbench: str) -> dict:
    df = attempt(
        "df", lambda: {**ap.parse_darwin_df(probe.run(["df", workbench])), "command": f"df {workbench}"}
    )
    mounts = attempt("mount", lambda: ap.parse_darwin_mount(probe.run(["mount"])))
    mount: object = unavailable("df gave no mount point") if is_unavailable(df) else mounts
    if not is_unavailable(df) and not is_unavailable(mounts):
        hits = [m for m in mounts if m["mount_point"] == df["mount_point"]]
        mount = hits[-1] if hits else unavailable(f"mount lists nothing on {df['mount_point']}")
    out = {
        "fstype": _pick(mount, "fstype"),
        "mount_point": _pick(df, "mount_point"),
        "source": _pick(df, "source"),
        "mount_options": _pick(mount, "options"),
        "fact_source": "mount" if not is_unavailable(mount) else "none",
        "df": df,
        "findmnt": unavailable("findmnt is Linux only; macOS uses mount"),
    }
    fstype, source = out["fstype"], out["source"]
    if is_unavailable(fstype):
        out["device"] = unavailable("filesystem type unknown: " + fstype["unavailable"])
    elif _no_block_device_reason(fstype) or not str(source).startswith("/dev/"):
        out["device"] = unavailable(_no_block_device_reason(fstype) or f"{source} is not a /dev device")
    else:
        out["device"] = attempt("diskutil info", lambda: _darwin_device(probe, source))
    return out


def _is_loop(device: dict) -> bool:
    """A Linux loop device (loopN) or a macOS disk image (diskutil BusProtocol "Disk Image")."""
    disk = device["disk"]
    return (isinstance(disk, str) and disk.startswith("loop")) or device.get("bus_protocol") == "Disk Image"


def locate_workbench(workbench: str, create: bool = False) -> dict:
    """Where the audit looks for ``workbench`` on this host, creating it first when ``create``.

    Returns {requested_path, audited_path, exists, created, note}: the
    workbench as an absolute path (symlinks in its existing part resolved),
    the directory whose filesystem is audited, whether the workbench exists
    (after any creation), whether this call created it (with its parents),
    and a sentence when the audited directory is not the workbench (else
    None). A missing workbench, not created, is audited through its nearest
    existing parent directory: the filesystem it would be created on.

    Raises ValueError when the workbench, or the nearest existing part of its
    path, is not a directory, or when it cannot be created.
    """
    requested = Path(os.path.abspath(os.path.expanduser(workbench))).resolve()
    created = False
    if create and not requested.exists():
        try:
            requested.mkdir(parents=True)
        except OSError as exc:
            why = exc.strerror or exc
            raise ValueError(f"cannot create the workbench {str(requested)!r}: {why}") from None
        created = True
    if requested.is_dir():
        return {
            "requested_path": str(requested),
            "audited_path": str(requested),
            "exists": True,
            "created": created,
            "note": None,
        }
    if requested.exists():
        raise ValueError(f"workbench {str(requested)!r} exists and is not a directory")
    parent = requested.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(
            f"workbench {str(requested)!r} cannot be created: {str(parent)!r} in its path is not a directory"
        )
    return {
        "requested_path": str(requested),
        "audited_path": str(parent),
        "exists": False,
        "created": False,
        "note": f"the workbench {requested} does not exist yet, so the filesystem, mount and device shown "
        f"are those of its nearest existing parent directory, {parent}, where it would be created",
    }


def existing_workbench(workbench: str) -> dict:
    """The :func:`locate_workbench` answer for a workbench taken to exist, unchecked (recorded hosts)."""
    return {
        "requested_path": workbench,
        "audited_path": workbench,
        "exists": True,
        "created": False,
        "note": None,
    }


def collect_workbench(probe: Probe, workbench: str, location: dict | None = None) -> dict:
    """Filesystem, mount and block device of ``workbench``, with flags.

    ``location`` is :func:`locate_workbench`'s answer (default: the workbench
    exists, see :func:`existing_workbench`); its keys come first in the
    result, and every fact below is of its ``audited_path``. Linux: ``df -T``
    and ``findmnt -J`` (both kept, each with its command; findmnt wins where
    both give a fact), then /sys/class/block. macOS: ``df`` for the mount
    point, ``mount`` for the type and options, ``diskutil info -plist`` for
    SolidState. ``flags`` holds tmpfs, network_or_fuse and loop_device, each
    a :func:`flag` (set, not_set, or unknown with its reason).
    """
    location = location or existing_workbench(workbench)
    audited = location["audited_path"]
    if probe.system == "Linux":
        out = _linux_workbench(probe, audited)
    elif probe.system == "Darwin":
        out = _darwin_workbench(probe, audited)
    else:
        why = unavailable(f"the audit does not support {probe.system}")
        out = dict.fromkeys(
            ("fstype", "mount_point", "source", "mount_options", "df", "findmnt", "device"), why
        )
        out["fact_source"] = "none"
    out = {**location, **out}
    fstype, device = out["fstype"], out["device"]
    if is_unavailable(fstype):
        ram = net = fstype
    else:
        ram = fstype in RAM_TYPES
        net = is_network(fstype) or is_fuse(fstype)
    loop = device if is_unavailable(device) else _is_loop(device)
    if ram is True or net is True:  # no block device at all, so not a loop device either
        loop = False
    out["flags"] = {
        "tmpfs": flag(ram, "tmpfs"),
        "network_or_fuse": flag(net, "network_or_fuse"),
        "loop_device": flag(loop, "loop_device"),
    }
    return out


# --- writeback ------------------------------------------------------------


def collect_writeback(probe: Probe) -> dict:
    """vm.dirty_* writeback settings from /proc/sys/vm (ints; proc(5) gives each unit).

    dirty_*_centisecs are in 1/100 s, dirty_*_ratio in percent of available
    memory, dirty_*bytes in bytes (0 means the ratio applies). macOS: each is
    unavailable, XNU has none of them.
    """
    if probe.system != "Linux":
        why = f"not applicable on {'macOS' if probe.system == 'Darwin' else probe.system}: "
        why += (
            "XNU has no /proc/sys/vm dirty_* writeback settings" if probe.system == "Darwin" else "no /proc"
        )
        return {key: unavailable(why) for key in WRITEBACK_KEYS}
    return {
        key: attempt(f"/proc/sys/vm/{key}", lambda key=key: int(probe.read(f"/proc/sys/vm/{key}")))
        for key in WRITEBACK_KEYS
    }


# --- all ------------------------------------------------------------------


def _caveats(probe: Probe, host: dict, gpu: dict) -> list[str]:
    """Plain statements of which facts came from code paths not yet run on real hardware."""
    notes = []
    if probe.system == "Darwin":
        notes.append("disklab's macOS audit has been tested only on recorded output, not yet on a real Mac")
    if host.get("cpu_model_source") == "lscpu":
        notes.append(
            "the lscpu CPU model path (aarch64, e.g. DGX Spark) has been tested only on recorded output"
        )
    if isinstance(gpu["gpus"], list):
        notes.append("the nvidia-smi parser has been tested only on recorded output, not yet on a real GPU")
    return notes


def collect_all(
    workbench: str,
    venv_python: str | None,
    probe: Probe | None = None,
    *,
    create: bool = False,
    location: dict | None = None,
) -> dict:
    """Every fact about this host and ``workbench`` as one JSON-able dict.

    Top-level keys: file_kind, schema_version (disklab_host.common.formats),
    collected_utc, audit_python, host, versions, versions_source (see
    :func:`collect_versions`), gpu, workbench, writeback, memory, quiet (how
    quiet the host is for measuring: audit.quiet's pyperf-style checks),
    caveats.
    With the real probe (``probe`` None) the workbench is located on this
    host by :func:`locate_workbench` (created when ``create``; a missing one
    is audited through its nearest existing parent) and ValueError is
    raised as it says. A recorded probe takes ``location`` as given, by
    default a workbench that exists.
    """
    real = probe is None
    if probe is None:
        probe = Probe()
        location = location or locate_workbench(workbench, create)
    location = location or existing_workbench(workbench)
    host = collect_host(probe)
    versions, versions_source = collect_versions(probe, venv_python)
    gpu = collect_gpu(probe, versions)
    return stamp(
        "facts",
        {
            "collected_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "audit_python": platform.python_version(),
            "host": host,
            "versions": versions,
            "versions_source": versions_source,
            "gpu": gpu,
            "workbench": collect_workbench(probe, location["requested_path"], location),
            "writeback": collect_writeback(probe),
            "memory": collect_memory(probe),
            # a recorded probe has no processes to watch: no window to wait out
            "quiet": quiet.collect_quiet(probe, quiet.WINDOW_S if real else 0.0),
            "caveats": _caveats(probe, host, gpu),
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workbench", required=True, help="directory where the lab writes")
    parser.add_argument(
        "--workbench-create",
        action="store_true",
        help="create the workbench (and its parents) when missing, then audit it; without this a missing "
        "workbench is audited through its nearest existing parent, and the facts say so",
    )
    parser.add_argument("--venv-python", help="the lab venv's python; ignored while it does not exist yet")
    parser.add_argument("--out", type=Path, help="write the JSON here (atomically) as well as print it")
    args = parser.parse_args(argv)
    venv = os.path.expanduser(args.venv_python) if args.venv_python else None
    try:
        facts = collect_all(
            args.workbench, venv if venv and os.path.exists(venv) else None, create=args.workbench_create
        )
    except ValueError as exc:
        print(f"disklab audit: {exc}", file=sys.stderr)
        return 2
    if args.out:
        out = args.out.expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out, facts)
    emit_result(facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
