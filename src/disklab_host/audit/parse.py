"""Pure parsers for the host audit: command output text in, plain values out.

Every function here takes the text a command printed (or a file held) and
returns dicts, lists, strings and ints. None of them runs anything, so tests
feed them recorded output from hosts we cannot run (macOS, DGX Spark). Each
raises ValueError naming the command when the text is not in the expected
format; the collectors in audit.py turn that into an ``unavailable`` fact.

Standard library only: the audit runs with the host's system Python.
"""

from __future__ import annotations

import json
import plistlib
import re

from ..common.units import KIB, MIB


def parse_key_value(text: str, sep: str = "=") -> dict[str, str]:
    """``KEY<sep>VALUE`` lines (os-release, sw_vers, sysctl) to a dict of stripped strings.

    Double quotes around a value are removed (os-release(5) quoting). Lines
    without ``sep`` and ``#`` comments are skipped; the first occurrence of a
    key wins.
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#") or sep not in line:
            continue
        key, value = line.split(sep, 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out.setdefault(key.strip(), value)
    return out


def parse_os_release(text: str) -> str:
    """PRETTY_NAME from /etc/os-release (os-release(5)), e.g. "Ubuntu 24.04.3 LTS".

    Raises ValueError when the file has no PRETTY_NAME.
    """
    pretty = parse_key_value(text).get("PRETTY_NAME")
    if not pretty:
        raise ValueError("/etc/os-release has no PRETTY_NAME")
    return pretty


def parse_sw_vers(text: str) -> str:
    """``sw_vers`` output to "macOS 15.6 (24G84)". Raises ValueError without ProductVersion."""
    kv = parse_key_value(text, ":")
    if "ProductVersion" not in kv:
        raise ValueError("sw_vers printed no ProductVersion")
    name = f"{kv.get('ProductName', 'macOS')} {kv['ProductVersion']}"
    return f"{name} ({kv['BuildVersion']})" if kv.get("BuildVersion") else name


def parse_uname_nrm(text: str) -> dict[str, str]:
    """``uname -n -r -m`` (one line: nodename, release, machine) to a dict.

    uname(1) prints the fields in that fixed order whatever the flag order.
    Raises ValueError unless the line has exactly three fields.
    """
    fields = text.split()
    if len(fields) != 3:
        raise ValueError(f"uname -n -r -m: expected 3 fields, got {text.strip()!r}")
    return {"hostname": fields[0], "kernel": fields[1], "architecture": fields[2]}


def parse_cpuinfo_model(text: str) -> str | None:
    """The first "model name" in /proc/cpuinfo, or None.

    On aarch64 (DGX Spark's Grace cores) the kernel prints no "model name" at
    all, only "CPU implementer"/"CPU part" codes; the caller then asks lscpu.
    """
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return None


def parse_lscpu_models(text: str) -> list[str]:
    """Every distinct "Model name" in ``lscpu`` output, in order.

    A big.LITTLE chip lists one per core cluster (DGX Spark: Cortex-X925 and
    Cortex-A725). Empty list when there is none.
    """
    models: list[str] = []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key.strip() == "Model name" and value and value != "-" and value not in models:
            models.append(value)
    return models


def parse_meminfo_total_bytes(text: str) -> int:
    """MemTotal from /proc/meminfo in bytes (the file says "kB"; proc(5): it means KiB).

    Raises ValueError when MemTotal is missing.
    """
    m = re.search(r"^MemTotal:\s+(\d+)\s+kB", text, re.MULTILINE)
    if not m:
        raise ValueError("/proc/meminfo has no MemTotal line")
    return int(m.group(1)) * KIB


def parse_df_t(text: str) -> dict[str, str]:
    """GNU ``df -T PATH`` output to {source, fstype, mount_point}.

    Columns: Filesystem, Type, 1K-blocks, Used, Available, Use%, Mounted on.
    A long source name may wrap onto its own line, so all lines after the
    header are joined. Raises ValueError on any other shape.
    """
    lines = text.strip().splitlines()
    if len(lines) < 2 or not lines[0].startswith("Filesystem"):
        raise ValueError(f"df -T: unexpected output {text.strip()[:120]!r}")
    fields = " ".join(lines[1:]).split()
    if len(fields) < 7 or not fields[5].endswith("%"):
        raise ValueError(f"df -T: unexpected row {' '.join(fields)!r}")
    return {"source": fields[0], "fstype": fields[1], "mount_point": " ".join(fields[6:])}


def parse_findmnt_json(text: str) -> dict:
    """``findmnt -J -T PATH -o TARGET,SOURCE,FSTYPE,OPTIONS`` to one mount.

    Returns {mount_point, source, fstype, options: [str]}. A bind or btrfs
    subvolume source such as "/dev/sda2[/@home]" keeps its "[...]" here; see
    :func:`source_device`. Raises ValueError when no filesystem is listed.
    """
    try:
        mounts = json.loads(text)["filesystems"]
        fs = mounts[0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"findmnt -J: unexpected output ({exc})") from exc
    options = fs.get("options") or ""
    return {
        "mount_point": fs["target"],
        "source": fs["source"],
        "fstype": fs["fstype"],
        "options": [o for o in options.split(",") if o],
    }


def source_device(source: str) -> str:
    """A mount source without a "[/subdir]" suffix: "/dev/sda2[/@home]" -> "/dev/sda2"."""
    return re.sub(r"\[.*\]$", "", source)


def parse_scheduler(text: str) -> dict:
    """/sys/block/X/queue/scheduler to {active, available}.

    The kernel marks the active I/O scheduler in [brackets], e.g.
    "none [mq-deadline] kyber bfq" (Documentation/block/switching-sched.rst).
    A device with a single choice may print it bare ("none").
    Raises ValueError when no scheduler can be told active.
    """
    names = text.split()
    active = [n[1:-1] for n in names if n.startswith("[") and n.endswith("]")]
    available = [n.strip("[]") for n in names]
    if len(active) == 1:
        return {"active": active[0], "available": available}
    if not active and len(available) == 1:
        return {"active": available[0], "available": available}
    raise ValueError(f"scheduler: cannot tell the active one in {text.strip()!r}")


def parse_nvidia_smi_csv(text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader,nounits``.

    One dict per GPU: name, driver_version, memory_total_bytes. With nounits,
    memory.total is in MiB (nvidia-smi(1)). A value nvidia-smi cannot report
    ("[N/A]", "Not Supported") becomes an ``unavailable`` fact rather than 0.
    Raises ValueError when a line does not have three fields or there is none.
    """
    gpus = []
    for line in text.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3:
            raise ValueError(f"nvidia-smi csv: expected 3 fields, got {line!r}")
        name, driver, mem = fields
        if mem.isdigit():
            mem_fact: int | dict = int(mem) * MIB
        else:
            mem_fact = {"unavailable": f"nvidia-smi reports memory.total as {mem!r}"}
        gpus.append({"name": name, "driver_version": driver, "memory_total_bytes": mem_fact})
    if not gpus:
        raise ValueError("nvidia-smi listed no GPU")
    return gpus


def parse_darwin_df(text: str) -> dict[str, str]:
    """macOS ``df PATH`` to {source, mount_point}.

    BSD df prints 512-blocks, Used, Available, Capacity and, on macOS, also
    iused, ifree and %iused before "Mounted on". Raises ValueError otherwise.
    """
    pattern = r"^(?P<src>\S+)\s+(?:\d+\s+){3}\d+%\s+(?:\d+\s+\d+\s+\d+%\s+)?(?P<mnt>/.*)$"
    for line in text.strip().splitlines()[1:]:
        m = re.match(pattern, line.strip())
        if m:
            return {"source": m.group("src"), "mount_point": m.group("mnt")}
    raise ValueError(f"df: unexpected output {text.strip()[:160]!r}")


def parse_darwin_mount(text: str) -> list[dict]:
    """macOS ``mount`` lines to [{source, mount_point, fstype, options}].

    Format: "/dev/disk3s1s1 on / (apfs, sealed, local, read-only, journaled)";
    the first word in parentheses is the filesystem type, the rest are options.
    """
    mounts = []
    for line in text.splitlines():
        m = re.match(r"^(?P<src>.+?) on (?P<mnt>.+) \((?P<opts>[^()]*)\)\s*$", line)
        if not m:
            continue
        opts = [o.strip() for o in m.group("opts").split(",") if o.strip()]
        mounts.append(
            {
                "source": m.group("src"),
                "mount_point": m.group("mnt"),
                "fstype": opts[0] if opts else "",
                "options": opts[1:],
            }
        )
    return mounts


def parse_diskutil_plist(text: str) -> dict:
    """``diskutil info -plist DEVICE`` (an XML property list) to a dict.

    Raises ValueError when the text is not a property list.
    """
    try:
        info = plistlib.loads(text.encode())
    except Exception as exc:  # plistlib raises several types for bad input
        raise ValueError(f"diskutil info -plist: not a property list ({exc})") from exc
    if not isinstance(info, dict):
        raise ValueError("diskutil info -plist: top level is not a dict")
    return info


def parse_vm_stat(text: str) -> dict[str, int]:
    """macOS ``vm_stat`` to {page_size_bytes, pages_free, pages_active, ...}.

    The header says "(page size of 16384 bytes)"; each following line is
    "Pages free:  12345." Keys become snake_case ("Pages wired down" ->
    "pages_wired_down"). Raises ValueError without the page size header.
    """
    m = re.search(r"page size of (\d+) bytes", text)
    if not m:
        raise ValueError("vm_stat: no page size in the header")
    out = {"page_size_bytes": int(m.group(1))}
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(":")
        value = value.strip().rstrip(".")
        if value.isdigit():
            out[re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")] = int(value)
    return out
