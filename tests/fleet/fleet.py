"""The project's own test fleet: real SSH hosts in network namespaces on this machine.

Usage (as root; needs iproute2, util-linux, openssh-server, xfsprogs, btrfs-progs)::

    python tests/fleet/fleet.py up N [--state-dir DIR] [--fleet-id K] [--size-mib M] [--profiles P,P,..]
    python tests/fleet/fleet.py down [--state-dir DIR]
    python tests/fleet/fleet.py stop-sshd HOST [--state-dir DIR]
    python tests/fleet/fleet.py start-sshd HOST [--state-dir DIR]

Each host ``host<i>`` is

- a network namespace ``dlab-<K>-host<i>`` whose only interface (besides lo)
  is a veth on the private bridge ``dlab-br<K>``, address ``10.213.<K>.<10+i>/24``;
  the root namespace holds ``10.213.<K>.1``. No default route, no NAT: a host
  reaches nothing but that /24, and nothing outside this machine routes to it;
- a mount and a UTS namespace (hostname = the netns name), kept alive by a
  holder process (``sleep infinity``), in which the workbench
  ``/srv/dlab/workbench`` is a loop-mounted ext4, xfs or btrfs image, or a
  tmpfs (round-robin by host index, in that order);
- its own sshd (key authentication only, its own ed25519 host key), started with
  ``nsenter`` into the holder's mount and network namespaces, so every SSH
  session sees that host's workbench and nobody else does.

A host's *profile* (``--profiles``, one per host, by index; default ``standard``)
takes away what a real host may lack; see PROFILES. ``fresh``: no workbench
directory (its filesystem is mounted one level up, at ``/srv/dlab``, and the
inventory sets ``lab_run_workbench_create: true``), no lab root, no strace.
``mac-like``: BSD tar as the only tar, a standard-library-only interpreter (a
venv made ``--without-pip``) as ``ansible_python_interpreter``, and a bare
``PATH=/usr/bin:/bin`` in SSH sessions (sshd ``SetEnv``, and ``/bin/sh`` as
root's shell, so no rc file puts anything back). Profiles combine with ``+``
(``fresh+mac-like``). Every change lives in the host's own mount namespace or
sshd, so no other host and not the root namespace sees it.

Every name, pid, loop device and mount is recorded in ``<state-dir>/state.json``
*before or right after* it is created, so ``down`` can undo a half-done ``up``.
``down`` ends processes by their recorded pid (checked against the recorded
start time, so a reused pid is never hit), or by the pids ``ip netns pids``
lists for a fleet namespace; it never kills by name.

The inventory ``<state-dir>/fleet.yml`` has group ``fleet`` with the connection
settings, ``disklab_workbench`` (and ``lab_run_workbench``), a per-host
``disklab_root`` (and the same path as ``lab_venv_root``) and ``fleet_fs``
(the filesystem type the workbench must have, for tests), ``fleet_profile``
and ``fleet_constraints`` (what the profile took away).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_STATE_DIR = Path("/tmp/dlab-fleet")
WORKBENCH = "/srv/dlab/workbench"
# A fresh host's filesystem is mounted here, so WORKBENCH (below it) does not exist until the lab makes it.
FRESH_MOUNT = "/srv/dlab"
# Each profile is the set of constraints a host gets; "standard" is the friendly host of the first tests.
PROFILES: dict[str, tuple[str, ...]] = {
    "standard": (),
    # nothing made in advance: no workbench directory, no lab root (so no venv), no strace
    "fresh": ("no_workbench", "no_lab_root", "no_strace"),
    # what a Mac offers over SSH: bsdtar as tar, a Python with the standard library only, a bare PATH
    "mac-like": ("bsd_tar", "stdlib_python", "bare_path"),
}
DEFAULT_PROFILE = "standard"
BARE_PATH = "/usr/bin:/bin"  # a non-login SSH session's PATH (macOS: /usr/bin:/bin:/usr/sbin:/sbin)
BSDTAR = "/usr/bin/bsdtar"
# Where a hidden tool is looked for: every directory of a normal root PATH.
TOOL_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
FS_CYCLE = ("ext4", "xfs", "btrfs", "tmpfs")
MKFS = {
    "ext4": ["mkfs.ext4", "-q", "-F"],
    "xfs": ["mkfs.xfs", "-q", "-f"],
    "btrfs": ["mkfs.btrfs", "-q", "-f"],
}
# mkfs.xfs refuses images under 300 MiB (xfsprogs 6.x); the quick profile's
# load step needs ~800 MiB on the workbench (disklab_host.registry.needed_bytes).
MIN_SIZE_MIB = 300
DEFAULT_SIZE_MIB = 2048
MAX_HOSTS = 200
SSHD = "/usr/sbin/sshd"
# What the fleet needs from the OS (.ci/run installs it with apt-get; the mac-like profile adds BSDTAR).
TOOLS = ("ip", "unshare", "nsenter", "losetup", "ssh-keygen", "mkfs.ext4", "mkfs.xfs", "mkfs.btrfs")
# Set by .ci/run, which installs every tool: there a missing one fails the fleet tests, never skips them.
REQUIRED_ENV = "DISKLAB_FLEET_REQUIRED"


def missing_tools(*, mac_like: bool = False) -> list[str]:
    """The tools and files the fleet needs that this machine lacks (empty when it can run)."""
    missing = [t for t in TOOLS if shutil.which(t) is None] + ([] if Path(SSHD).exists() else [SSHD])
    return missing + ([BSDTAR] if mac_like and not Path(BSDTAR).exists() else [])


def skip_reason(*, mac_like: bool = False) -> str | None:
    """Why the fleet tests skip here (root, tools); None where they can run or ``REQUIRED_ENV`` is set."""
    if os.environ.get(REQUIRED_ENV) == "1":
        return None
    if os.geteuid() != 0:
        return "the test fleet needs root"
    missing = missing_tools(mac_like=mac_like)
    return f"missing tools for the test fleet: {missing}" if missing else None


# A unix socket path must fit in 108 bytes; ssh's %C expands to 40 hex digits.
CONTROL_PATH_MAX = 100
START_TIMEOUT_S = 15.0
KILL_GRACE_S = 3.0


class FleetError(RuntimeError):
    """A fleet operation failed; the message says which step and why."""


@dataclass
class Host:
    """One fleet host: inventory name, IPv4 address, workbench fs type, sshd pid, profile."""

    name: str
    address: str
    fs: str
    pid: int | None
    profile: str = DEFAULT_PROFILE


# -- small helpers -----------------------------------------------------------


def _run(cmd: list[str], *, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run a command, capturing text output; raise FleetError naming it on failure."""
    cp = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and cp.returncode != 0:
        raise FleetError(f"{' '.join(cmd)} exited {cp.returncode}: {cp.stderr.strip() or cp.stdout.strip()}")
    return cp


def _keygen(path: Path, comment: str) -> None:
    """A new ed25519 key pair without passphrase: ``path`` and ``path``.pub (ssh-keygen(1))."""
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), or None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # exited, only waiting for its parent to reap it
        return None
    return int(fields[19])


def alive(pid: int | None, start: int | None = None) -> bool:
    """True when ``pid`` runs (not a zombie) and, if given, started at ``start`` ticks."""
    if not pid:
        return False
    st = _start_time(pid)
    return st is not None and (start is None or st == start)


def _proc(pid: int) -> dict:
    """A pid with its start time, as recorded in the state file."""
    return {"pid": pid, "start": _start_time(pid)}


def kill_recorded(rec: dict | None) -> None:
    """SIGTERM, then SIGKILL after KILL_GRACE_S, the process ``{"pid", "start"}``.

    Does nothing when the pid is gone or now belongs to a process that started
    at another time (pid reuse). Reaps it when it is our child.
    """
    if not rec or not alive(rec["pid"], rec.get("start")):
        return
    pid = rec["pid"]
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive(pid, rec.get("start")):
            _reap(pid)  # it may have become a zombie just after the first waitpid
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        _reap(pid)
        if not alive(pid, rec.get("start")):
            _reap(pid)
            return
        time.sleep(0.05)
    raise FleetError(f"pid {pid} survived SIGKILL")


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def netns_pids(netns: str) -> list[int]:
    """Pids of the processes in network namespace ``netns`` (``ip netns pids``); [] if it is gone."""
    cp = _run(["ip", "netns", "pids", netns], check=False)
    return [int(p) for p in cp.stdout.split()] if cp.returncode == 0 else []


def ns_members(holder: dict | None, netns: str) -> set[int]:
    """Pids of every process that shares a host's network or mount namespace.

    While the holder lives it pins both namespaces, so their inode numbers
    (/proc/PID/ns/*, see namespaces(7)) identify them even after someone has
    deleted the netns name; otherwise fall back to ``ip netns pids NAME``.
    """
    pids = set(netns_pids(netns))
    if not holder or not alive(holder["pid"], holder["start"]):
        return pids
    try:
        want = {os.readlink(f"/proc/{holder['pid']}/ns/{k}") for k in ("net", "mnt")}
    except OSError:
        return pids
    for ns_dir in Path("/proc").glob("[0-9]*/ns"):
        with contextlib.suppress(OSError):
            if {os.readlink(ns_dir / "net"), os.readlink(ns_dir / "mnt")} & want:
                pids.add(int(ns_dir.parent.name))
    return pids


def fleet_netns() -> list[str]:
    """Names of every network namespace whose name starts with ``dlab-``."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("dlab-")]


def free_fleet_id(top: int, bottom: int) -> int:
    """The highest fleet id in ``top`` down to ``bottom`` that no namespace or route here uses.

    Lets several test modules run fleets side by side without colliding.
    Raises FleetError when every id in the range is taken.
    """
    used = {ns.split("-")[1] for ns in fleet_netns()}
    routes = _run(["ip", "-4", "route"], check=False).stdout
    for fid in range(top, bottom - 1, -1):
        if str(fid) not in used and f"10.213.{fid}." not in routes:
            return fid
    raise FleetError(f"no free fleet id in {bottom}..{top}")


def profile_constraints(profile: str) -> tuple[str, ...]:
    """The constraints of ``profile``: one name of PROFILES, or several joined by ``+``.

    Raises ValueError naming the known profiles for an unknown one.
    """
    if not isinstance(profile, str) or not profile:
        raise ValueError(f"a profile must be a name in {sorted(PROFILES)}, got {profile!r}")
    out: list[str] = []
    for part in profile.split("+"):
        if part not in PROFILES:
            raise ValueError(f"unknown host profile {part!r} in {profile!r}; known: {sorted(PROFILES)}")
        out += [c for c in PROFILES[part] if c not in out]
    return tuple(out)


def tool_paths(tool: str) -> list[str]:
    """The distinct real files named ``tool`` in TOOL_DIRS (symlinks and /bin -> /usr/bin resolved)."""
    found: list[str] = []
    for d in TOOL_DIRS:
        p = Path(d) / tool
        if p.exists():
            real = str(p.resolve())
            if real not in found:
                found.append(real)
    return found


def _q(value: object) -> str:
    """A YAML scalar: JSON strings and numbers are valid YAML 1.2 flow scalars."""
    return json.dumps(value)


# -- the fleet -----------------------------------------------------------------


class Fleet:
    """A fleet of SSH hosts in network namespaces, described by ``<state_dir>/state.json``.

    Build one with :meth:`up`, or :meth:`load` an existing one; end it with
    :meth:`down`. Usable as a context manager (``with Fleet.up(4, d) as f:``)
    that always calls :meth:`down`, also after an error.
    """

    def __init__(self, state_dir: Path, state: dict):
        self.state_dir = Path(state_dir)
        self.state = state

    # state file --------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def inventory_path(self) -> Path:
        """The Ansible inventory (YAML) written by :meth:`up`."""
        return self.state_dir / "fleet.yml"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def key_path(self) -> Path:
        """The client's ed25519 private key (its public half is every host's authorized key)."""
        return self.state_dir / "id_ed25519"

    @property
    def hosts(self) -> list[Host]:
        """The hosts in index order, with the sshd pid (None when it is stopped)."""
        return [
            Host(
                h["name"],
                h["address"],
                h["fs"],
                (h.get("sshd") or {}).get("pid"),
                h.get("profile", DEFAULT_PROFILE),
            )
            for h in self.state["hosts"].values()
        ]

    def host(self, name: str) -> dict:
        """The state record of host ``name``; raises KeyError naming the known hosts."""
        if name not in self.state["hosts"]:
            raise KeyError(f"no fleet host {name!r}; hosts: {sorted(self.state['hosts'])}")
        return self.state["hosts"][name]

    def save(self) -> None:
        """Write state.json atomically (temp file, fsync, rename), so a crash keeps the record."""
        tmp = self.state_path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.state, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)

    @classmethod
    def load(cls, state_dir: Path = DEFAULT_STATE_DIR) -> Fleet:
        """The fleet recorded in ``state_dir``; raises FileNotFoundError when there is none."""
        state_dir = Path(state_dir)
        return cls(state_dir, json.loads((state_dir / "state.json").read_text()))

    def ssh_args(self) -> list[str]:
        """ssh options every client uses: our key, our known_hosts, checking on, no agent, batch."""
        return [
            "-F", "/dev/null",
            "-i", str(self.key_path),
            "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5",
        ]  # fmt: skip

    def ssh(self, name: str, command: str, **kw) -> subprocess.CompletedProcess:
        """Run ``command`` on host ``name`` as root with /usr/bin/ssh; returns the CompletedProcess."""
        h = self.host(name)
        cmd = ["/usr/bin/ssh", *self.ssh_args(), f"root@{h['address']}", command]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)

    # up ------------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        n: int,
        state_dir: Path = DEFAULT_STATE_DIR,
        *,
        fleet_id: int = 0,
        size_mib: int = DEFAULT_SIZE_MIB,
        lab_root: Path | None = None,
        profiles: Sequence[str] | None = None,
    ) -> Fleet:
        """Create ``n`` hosts; returns the running Fleet.

        ``state_dir`` must not exist or be empty; it gets the keys, images, logs,
        state.json and fleet.yml. ``fleet_id`` (0..255) picks the bridge
        ``dlab-br<id>``, the subnet ``10.213.<id>.0/24`` and the namespace names,
        so two fleets can coexist. ``size_mib`` is each workbench's size in MiB
        (sparse image, or the tmpfs size limit). ``lab_root`` is where the
        per-host lab roots go (``<lab_root>/<host>/lab``); default
        ``<state_dir>/lab``, which ``down`` removes; one outside the state dir is
        kept by ``down`` (a venv cache across fleets). ``profiles`` gives host
        ``i`` the profile ``profiles[i]`` (a name of PROFILES, or several joined
        by ``+``); hosts past its end are ``standard``. A host whose profile has
        ``no_lab_root`` always gets its lab root under the state dir, never from
        the ``lab_root`` cache.

        Raises ValueError naming the setting for bad arguments, FleetError when
        a step fails; after a failure, everything created so far is torn down.
        """
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_HOSTS:
            raise ValueError(f"n must be an integer in [1, {MAX_HOSTS}], got {n!r}")
        if isinstance(fleet_id, bool) or not isinstance(fleet_id, int) or not 0 <= fleet_id <= 255:
            raise ValueError(f"fleet_id must be an integer in [0, 255], got {fleet_id!r}")
        if not isinstance(size_mib, int) or size_mib < MIN_SIZE_MIB:
            raise ValueError(
                f"size_mib must be an integer >= {MIN_SIZE_MIB} (mkfs.xfs minimum), got {size_mib!r}"
            )
        if isinstance(profiles, str) or len(profiles or []) > n:
            raise ValueError(f"profiles must be a list of at most n={n} profile names, got {profiles!r}")
        profiles = list(profiles or [])
        profiles += [DEFAULT_PROFILE] * (n - len(profiles))
        constraints = {c for p in profiles for c in profile_constraints(p)}  # ValueError names a bad one
        state_dir = Path(state_dir).absolute()
        control_path = f"{state_dir}/cp/%C"
        if len(control_path) + 40 - 2 > CONTROL_PATH_MAX:
            raise ValueError(
                f"state_dir must be short enough that the ssh ControlPath {control_path} stays "
                f"under {CONTROL_PATH_MAX} characters once %C is expanded; got {state_dir}"
            )
        if os.geteuid() != 0:
            raise FleetError("the test fleet needs root (network namespaces, mounts, loop devices)")
        if "bsd_tar" in constraints and not Path(BSDTAR).exists():
            raise FleetError(f"the mac-like profile needs {BSDTAR} (apt-get install libarchive-tools)")
        if state_dir.exists() and any(state_dir.iterdir()):
            raise ValueError(
                f"state_dir {state_dir} must be absent or empty (run down first if a fleet is up)"
            )
        taken = [ns for ns in fleet_netns() if ns.startswith(f"dlab-{fleet_id}-")]
        if taken:
            raise FleetError(f"fleet_id {fleet_id} is in use by namespaces {taken}; pick another --fleet-id")
        subnet = f"10.213.{fleet_id}."
        if subnet in _run(["ip", "-4", "route"]).stdout:
            raise FleetError(f"subnet {subnet}0/24 is already routed here; pick another --fleet-id")
        state_dir.mkdir(parents=True, exist_ok=True)
        state_dir.chmod(0o700)
        lab_root = Path(lab_root).absolute() if lab_root else state_dir / "lab"
        state = {
            "fleet_id": fleet_id,
            "bridge": f"dlab-br{fleet_id}",
            "bridge_address": f"{subnet}1",
            "created_mountpoint": False,
            "control_path": control_path,
            "lab_root": str(lab_root),
            "size_mib": size_mib,
            "profiles": profiles,
            "hosts": {},
        }
        fleet = cls(state_dir, state)
        fleet.save()
        try:
            fleet._build(n)
        except BaseException:
            fleet.down()
            raise
        return fleet

    def _build(self, n: int) -> None:
        st = self.state
        (self.state_dir / "cp").mkdir(mode=0o700)
        _keygen(self.key_path, "dlab-fleet-client")
        self.authorized_keys.write_text(self.key_path.with_suffix(".pub").read_text())
        if not Path(WORKBENCH).exists():
            st["created_mountpoint"] = True
            self.save()
        Path(WORKBENCH).mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir

        st["bridge_created"] = True  # recorded first: down tolerates a bridge that is absent
        self.save()
        _run(["ip", "link", "add", st["bridge"], "type", "bridge"])
        _run(["ip", "addr", "add", f"{st['bridge_address']}/24", "dev", st["bridge"]])
        _run(["ip", "link", "set", st["bridge"], "up"])

        for i in range(n):
            self._add_host(i)
        self._write_known_hosts()
        self._write_inventory()
        for name in st["hosts"]:
            self.start_sshd(name)

    @property
    def authorized_keys(self) -> Path:
        return self.state_dir / "authorized_keys"

    def _add_host(self, i: int) -> None:
        st = self.state
        name = f"host{i}"
        fs = FS_CYCLE[i % len(FS_CYCLE)]
        profile = st.get("profiles", [DEFAULT_PROFILE] * (i + 1))[i]
        constraints = profile_constraints(profile)
        hdir = self.state_dir / "hosts" / name
        hdir.mkdir(parents=True)
        # a fresh host never reuses the lab-root cache: its lab root is new and under the state dir
        lab_root = self.state_dir / "lab" if "no_lab_root" in constraints else Path(st["lab_root"])
        h = {
            "name": name,
            "index": i,
            "fs": fs,
            "profile": profile,
            "constraints": list(constraints),
            # where the host's filesystem is mounted; the workbench is WORKBENCH either way
            "mount_point": FRESH_MOUNT if "no_workbench" in constraints else WORKBENCH,
            "netns": f"dlab-{st['fleet_id']}-{name}",
            "veth": f"dlab{st['fleet_id']}h{i}",
            "address": f"10.213.{st['fleet_id']}.{10 + i}",
            "dir": str(hdir),
            "lab_venv_root": str(lab_root / name / "lab"),
            "python": "/usr/bin/python3",
            "loop": None,
            "image": None,
            "holder": None,
            "sshd": None,
            "mounted": False,
        }
        st["hosts"][name] = h
        self.save()

        # network: netns, veth pair (root end on the bridge, peer renamed eth0 inside)
        _run(["ip", "netns", "add", h["netns"]])
        _run(["ip", "link", "add", h["veth"], "type", "veth", "peer", "name", f"{h['veth']}p"])
        _run(["ip", "link", "set", f"{h['veth']}p", "netns", h["netns"]])
        _run(["ip", "link", "set", h["veth"], "master", st["bridge"], "up"])
        nsx = ["ip", "netns", "exec", h["netns"]]
        _run([*nsx, "ip", "link", "set", f"{h['veth']}p", "name", "eth0"])
        _run([*nsx, "ip", "addr", "add", f"{h['address']}/24", "dev", "eth0"])
        _run([*nsx, "ip", "link", "set", "eth0", "up"])
        _run([*nsx, "ip", "link", "set", "lo", "up"])

        # ssh host key
        _keygen(hdir / "ssh_host_ed25519_key", name)
        (hdir / "sshd_config").write_text(self._sshd_config(h))

        # workbench: a loop device over a sparse image, or tmpfs
        size = st["size_mib"]
        target = h["mount_point"]
        if fs == "tmpfs":
            mount = ["mount", "-t", "tmpfs", "-o", f"size={size}m,mode=0755", h["netns"], target]
        else:
            image = hdir / f"{fs}.img"
            h["image"] = str(image)
            self.save()
            with open(image, "wb") as f:
                f.truncate(size * 1024 * 1024)
            _run([*MKFS[fs], str(image)])
            # direct I/O: reads of the loop fs then reach the disk instead of the
            # backing file's page cache, so an evicted file on the workbench is cold
            loop = _run(["losetup", "--find", "--show", "--direct-io=on", str(image)]).stdout.strip()
            h["loop"] = loop
            h["loop_direct_io"] = _run(["losetup", "-n", "-O", "DIO", loop]).stdout.strip() == "1"
            self.save()
            mount = ["mount", "-t", fs, loop, target]
        if "no_lab_root" not in constraints:
            Path(h["lab_venv_root"]).mkdir(parents=True, exist_ok=True)
        setup = [mount, *self._constrain(h, constraints)]

        # the holder: joins the netns, makes a private mount namespace (and a UTS
        # one, for its own hostname), mounts the workbench there, reports, then
        # sleeps to keep the namespaces alive.
        script = "; ".join(
            [
                'set -e; hostname "$1"',
                *(shlex.join(cmd) for cmd in setup),
                "echo mounted; exec sleep infinity >/dev/null 2>&1 </dev/null",
            ]
        )
        unshare = ["unshare", "--mount", "--uts", "--propagation", "private"]
        holder = subprocess.Popen(
            [*nsx, *unshare, "sh", "-c", script, "holder", h["netns"]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        h["holder"] = _proc(holder.pid)
        self.save()
        line = holder.stdout.readline().strip()
        holder.stdout.close()
        if line != "mounted":
            err = holder.stderr.read().strip()
            holder.wait()
            raise FleetError(f"{name}: mounting the {fs} workbench failed: {err}")
        holder.stderr.close()
        h["holder"] = _proc(holder.pid)  # the pid stays; exec updates nothing but the name
        h["mounted"] = True
        h["mnt_ns"] = os.readlink(f"/proc/{holder.pid}/ns/mnt")
        h["net_ns"] = os.readlink(f"/proc/{holder.pid}/ns/net")
        self.save()

    def _constrain(self, h: dict, constraints: Sequence[str]) -> list[list[str]]:
        """Prepare host ``h``'s constraints; returns the commands the holder runs in its mount namespace.

        A hidden tool is really absent there: its directory gets a read-only
        overlay whose top layer (on a tmpfs of the namespace) holds a whiteout
        (a 0/0 character device, see the kernel's overlayfs docs) for it, so
        ``ls``, ``command -v`` and shutil.which all find nothing. Files the
        other constraints need (the standard-library venv, a passwd copy) go
        under the host's directory on the shared root filesystem, and every
        mount happens only inside the host's private mount namespace.
        """
        hdir = Path(h["dir"])
        cmds: list[list[str]] = []
        hide: dict[str, list[str]] = {}  # directory -> names to white out
        for tool in (["strace"] if "no_strace" in constraints else []) + (
            ["gtar"] if "bsd_tar" in constraints else []
        ):
            for path in tool_paths(tool):
                hide.setdefault(str(Path(path).parent), []).append(Path(path).name)
        if hide:
            layers = hdir / "hide"
            layers.mkdir()
            cmds.append(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "dlab-hide", str(layers)])
            for i, (directory, names) in enumerate(sorted(hide.items())):
                top = layers / str(i)
                cmds.append(["mkdir", str(top)])
                cmds += [["mknod", str(top / name), "c", "0", "0"] for name in names]
                opts = f"ro,lowerdir={top}:{directory}"
                cmds.append(["mount", "-t", "overlay", "-o", opts, "dlab-hide", directory])
        h["hidden_tools"] = sorted(f"{d}/{n}" for d, names in hide.items() for n in names)
        if "bsd_tar" in constraints:
            cmds += [["mount", "--bind", BSDTAR, p] for p in tool_paths("tar")]
        if "stdlib_python" in constraints:
            venv = hdir / "python"
            _run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)])
            h["python"] = str(venv / "bin" / "python3")
        if "bare_path" in constraints:
            # Debian's bash reads ~/.bashrc even for `ssh host cmd`, and root's puts pyenv and cargo
            # on PATH; a shell that reads no rc file keeps sshd's SetEnv PATH, as zsh does on a Mac.
            passwd = hdir / "passwd"
            lines = Path("/etc/passwd").read_text().splitlines()
            passwd.write_text(
                "".join(
                    (":".join([*ln.split(":")[:6], "/bin/sh"]) if ln.startswith("root:") else ln) + "\n"
                    for ln in lines
                )
            )
            passwd.chmod(0o644)
            cmds.append(["mount", "--bind", str(passwd), "/etc/passwd"])
        self.save()
        return cmds

    def _sshd_config(self, h: dict) -> str:
        hdir = Path(h["dir"])
        bare = "bare_path" in h.get("constraints", ())
        return "\n".join(
            [
                "# written by tests/fleet/fleet.py for one fleet host",
                f"ListenAddress {h['address']}",
                "Port 22",
                f"HostKey {hdir / 'ssh_host_ed25519_key'}",
                "PidFile none",
                f"AuthorizedKeysFile {self.authorized_keys}",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                # the state dir sits under /tmp (mode 1777), which StrictModes refuses
                # for a key file path; the key file itself is in a mode-0700 directory
                "StrictModes no",
                "AllowTcpForwarding no",
                "X11Forwarding no",
                "PermitTunnel no",
                "Subsystem sftp internal-sftp",
                *([f"SetEnv PATH={BARE_PATH}"] if bare else []),
                "",
            ]
        )

    def _write_known_hosts(self) -> None:
        lines = []
        for h in self.state["hosts"].values():
            keytype, key = (Path(h["dir"]) / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            lines.append(f"{h['address']} {keytype} {key}\n")
        self.known_hosts.write_text("".join(lines))

    def _write_inventory(self) -> None:
        st = self.state
        common = " ".join(
            [
                "-F /dev/null",
                "-o IdentitiesOnly=yes",
                f"-o UserKnownHostsFile={self.known_hosts}",
                "-o GlobalKnownHostsFile=/dev/null",
                "-o StrictHostKeyChecking=yes",
                f"-o ControlPath={st['control_path']}",
            ]
        )
        out = [
            "# Written by tests/fleet/fleet.py up; removed by fleet.py down.",
            "# Hosts are network namespaces on this machine (see tests/fleet/README.md).",
            "all:",
            "  children:",
            "    fleet:",
            "      hosts:",
        ]
        for h in st["hosts"].values():
            hv = {
                "ansible_host": h["address"],
                "ansible_port": 22,
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(self.key_path),
                "ansible_ssh_common_args": common,
                "ansible_python_interpreter": h.get("python", "/usr/bin/python3"),
                # the roles derive every path from these two inventory-wide settings
                "disklab_root": h["lab_venv_root"],
                "disklab_workbench": WORKBENCH,
                "lab_run_workbench": WORKBENCH,
                "lab_venv_root": h["lab_venv_root"],
                "fleet_fs": h["fs"],
                "fleet_loop_direct_io": h.get("loop_direct_io", False),
                "fleet_profile": h.get("profile", DEFAULT_PROFILE),
                "fleet_constraints": h.get("constraints", []),
            }
            if "no_workbench" in h.get("constraints", ()):
                hv["lab_run_workbench_create"] = True  # the lab must make the workbench itself
            out.append(f"        {h['name']}:")
            out.extend(f"          {k}: {_q(v)}" for k, v in hv.items())
        self.inventory_path.write_text("\n".join(out) + "\n")

    # sshd ------------------------------------------------------------------------

    def start_sshd(self, name: str) -> int:
        """Start host ``name``'s sshd inside its namespaces; returns its pid once it accepts TCP.

        Raises FleetError when the host's holder is gone or sshd does not listen
        within START_TIMEOUT_S (its log is ``hosts/<name>/sshd.log``).
        """
        h = self.host(name)
        if h.get("sshd") and alive(h["sshd"]["pid"], h["sshd"]["start"]):
            return h["sshd"]["pid"]
        holder = h.get("holder")
        if not holder or not alive(holder["pid"], holder["start"]):
            raise FleetError(f"{name}: its namespace holder is gone; run down and up again")
        log = Path(h["dir"]) / "sshd.log"
        cmd = ["nsenter", f"--target={holder['pid']}", "--mount", "--uts", "--net", "--"]
        cmd += [SSHD, "-D", "-f", str(Path(h["dir"]) / "sshd_config"), "-E", str(log)]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        h["sshd"] = _proc(proc.pid)
        self.save()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise FleetError(f"{name}: sshd exited {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection((h["address"], 22), timeout=0.5):
                h["sshd"] = _proc(proc.pid)  # start time after exec, for the pid-reuse check
                self.save()
                return proc.pid
            time.sleep(0.05)
        raise FleetError(f"{name}: sshd did not listen on {h['address']}:22 within {START_TIMEOUT_S} s")

    def stop_sshd(self, name: str) -> None:
        """Stop host ``name``'s sshd and end its SSH sessions (every process in its netns but the holder).

        The workbench stays mounted (the holder keeps the mount namespace), as
        on a real host whose sshd stops. Sessions are ended too, so a kept-open
        ControlPersist connection cannot hide the outage.
        """
        h = self.host(name)
        kill_recorded(h.get("sshd"))
        holder_pid = (h.get("holder") or {}).get("pid")
        for pid in sorted(ns_members(h.get("holder"), h["netns"])):
            if pid != holder_pid:
                kill_recorded(_proc(pid))
        h["sshd"] = None
        self.save()

    # down ------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Remove everything :meth:`up` recorded, tolerating parts that are already gone.

        Order: sshd and sessions, unmount the workbench inside its namespace,
        the holder, the loop device (only if it still backs our image), the
        netns and veth, the bridge, the mount point (when we made it and no
        other fleet remains), then the state dir. Returns the problems it could
        not fix (empty when all is clean); safe to call again.
        """
        if not self.state_path.exists():
            return []  # already down: down removes the state dir last
        problems: list[str] = []
        st = self.state
        for name, h in st["hosts"].items():
            try:
                self.stop_sshd(name)
            except Exception as exc:
                problems.append(f"{name}: stopping sshd: {exc}")
            holder = h.get("holder")
            if h.get("mounted") and holder and alive(holder["pid"], holder["start"]):
                target = h.get("mount_point", WORKBENCH)
                cp = _run(["nsenter", f"--target={holder['pid']}", "--mount", "umount", target], check=False)
                if cp.returncode != 0:
                    problems.append(f"{name}: umount {target}: {cp.stderr.strip()}")
            try:
                kill_recorded(holder)  # the last process in the mount namespace: it goes with it
            except FleetError as exc:
                problems.append(f"{name}: holder: {exc}")
            h["mounted"] = False
            if h.get("loop") and h.get("image"):
                back = _run(["losetup", "-n", "-O", "BACK-FILE", h["loop"]], check=False).stdout.strip()
                if back == h["image"]:
                    cp = _run(["losetup", "-d", h["loop"]], check=False)
                    if cp.returncode != 0:
                        problems.append(f"{name}: losetup -d {h['loop']}: {cp.stderr.strip()}")
            _run(["ip", "link", "del", h["veth"]], check=False)
            if h["netns"] in fleet_netns():
                cp = _run(["ip", "netns", "del", h["netns"]], check=False)
                if cp.returncode != 0:
                    problems.append(f"{name}: ip netns del: {cp.stderr.strip()}")
        if st.get("bridge_created"):
            _run(["ip", "link", "del", st["bridge"]], check=False)
        if st.get("created_mountpoint") and not fleet_netns():
            for d in (Path(WORKBENCH), Path(WORKBENCH).parent):
                with contextlib.suppress(OSError):
                    d.rmdir()  # only when empty
        lab_root = Path(st.get("lab_root", self.state_dir / "lab"))
        if not lab_root.is_relative_to(self.state_dir):
            problems.append(f"kept lab roots under {lab_root} (outside the state dir)")
        if not [p for p in problems if not p.startswith("kept ")]:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        else:
            self.save()  # keep the record, so a second down can retry
        return problems

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc) -> None:
        self.down()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="create N hosts")
    p_up.add_argument("n", type=int)
    p_up.add_argument(
        "--fleet-id", type=int, default=0, help="0..255: bridge dlab-br<K>, subnet 10.213.<K>.0/24"
    )
    p_up.add_argument("--size-mib", type=int, default=DEFAULT_SIZE_MIB, help="each workbench's size in MiB")
    p_up.add_argument("--lab-root", type=Path, help="per-host lab roots go to <lab-root>/<host>/lab")
    p_up.add_argument(
        "--profiles",
        type=lambda s: s.split(","),
        default=None,
        help=f"comma-separated profile of host0, host1, ... (the rest: {DEFAULT_PROFILE}); "
        f"each one of {', '.join(PROFILES)}, or several joined by +",
    )
    sub.add_parser("down", help="remove the fleet recorded in the state dir")
    for verb in ("stop-sshd", "start-sshd"):
        sub.add_parser(verb, help=f"{verb.split('-')[0]} one host's sshd").add_argument("host")
    # accept --state-dir after the subcommand too
    for p in sub.choices.values():
        p.add_argument("--state-dir", type=Path, default=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.cmd == "up":
        fleet = Fleet.up(
            args.n,
            args.state_dir,
            fleet_id=args.fleet_id,
            size_mib=args.size_mib,
            lab_root=args.lab_root,
            profiles=args.profiles,
        )
        for h in fleet.hosts:
            print(f"{h.name} {h.address} {h.fs} {h.profile} sshd pid {h.pid}")
        print(f"inventory: {fleet.inventory_path}")
        return 0
    try:
        fleet = Fleet.load(args.state_dir)
    except FileNotFoundError:
        if args.cmd == "down":
            print(f"no fleet recorded in {args.state_dir}; nothing to do")
            return 0
        print(f"no fleet recorded in {args.state_dir}", file=sys.stderr)
        return 1
    if args.cmd == "down":
        problems = fleet.down()
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if [p for p in problems if not p.startswith("kept ")] else 0
    if args.cmd == "stop-sshd":
        fleet.stop_sshd(args.host)
        print(f"{args.host}: sshd stopped")
    else:
        print(f"{args.host}: sshd pid {fleet.start_sshd(args.host)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
