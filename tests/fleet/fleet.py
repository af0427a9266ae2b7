"""The project's own test fleet: real SSH hosts in network namespaces on this machine.

Usage (as root; needs iproute2, util-linux, openssh-server, xfsprogs, btrfs-progs; sudo and
openssl for the sudo-password profile, bsdtar for mac-like, ansible-vault for the user's vault)::

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
takes away what a real host may lack, or adds what real organisations put in
the way; see PROFILES. ``fresh``: no workbench
directory (its filesystem is mounted one level up, at ``/srv/dlab``, and the
inventory sets ``lab_run_workbench_create: true``), no lab root, no strace.
``mac-like``: BSD tar as the only tar, a standard-library-only interpreter (a
venv made ``--without-pip``) as ``ansible_python_interpreter``, and a bare
``PATH=/usr/bin:/bin`` in SSH sessions (sshd ``SetEnv``, and ``/bin/sh`` as
root's shell, so no rc file puts anything back).
``bastion``: the host sits on a second private bridge inside a jump host's
namespace (``dlab-<K>-bastion``, its own sshd, address ``10.213.<K>.2`` on the
fleet's bridge and ``10.214.<K>.1`` on the inner one), at ``10.214.<K>.<10+i>``;
the root namespace has an ``unreachable`` route for ``10.214.<K>.0/24``, so a
direct connect fails at once and never leaves this machine. Only the user's
world (below) and ``fleet.yml``'s ProxyCommand know the way.
``sudo-password``: the SSH login is the non-root user ``dlab`` (root may not
log in), made only in the host's mount namespace (copies of passwd, group,
shadow, sudoers and hosts bind-mounted over /etc's, a tmpfs over /home with the
user's home bind-mounted from ``<state>/hosts/<host>/home``); its ``sudo`` asks
for the fleet's sudo password (``state.json`` ``sudo_password``) every time.
The workbench (a fresh host's ``/srv/dlab``) and the lab root
``/home/dlab/lab`` belong to the user.
``noisy``: every SSH command's stdout starts with a banner (a copy of
/etc/bash.bashrc that echoes it first, as bash reads it even for
``ssh host cmd``), and ``ansible_python_interpreter`` is a venv (with the
machine's packages) whose ``.pth`` file writes a warning to stderr at every
start. Profiles combine with ``+`` (``fresh+mac-like``, ``bastion+noisy``), except
``noisy`` with ``mac-like``: a shell that reads no rc file cannot print a
banner. ``netfs``: the workbench is ``fuse.sshfs``, sshfs (started in the
host's holder, without cache options) of ``/srv/dlab/workbench/<host>`` on the
fleet's file server ``dlab-<K>-fileserver`` (``10.213.<K>.3``: its own loop
ext4, and an sshd that serves only SFTP); NFS is not offered, as this
machine's kernel has no NFS client. Every change lives in the host's own mount
namespace, sshd or directory (and, for ``bastion``, the jump host's namespace
and the one unreachable route; for ``netfs``, the file server's namespaces), so
no other host and not the root namespace sees it.

Every name, pid, loop device and mount is recorded in ``<state-dir>/state.json``
*before or right after* it is created, so ``down`` can undo a half-done ``up``.
``down`` ends processes by their recorded pid (checked against the recorded
start time, so a reused pid is never hit), or by the pids ``ip netns pids``
lists for a fleet namespace; it never kills by name.

The inventory ``<state-dir>/fleet.yml`` has group ``fleet`` with the connection
settings (a ``bastion`` host's include a ProxyCommand through the jump host, a
``sudo-password`` host's ``ansible_user`` is ``dlab``), ``disklab_workbench``
(and ``lab_run_workbench``), a per-host ``disklab_root`` (and the same path as
``lab_venv_root``) and ``fleet_fs`` (the filesystem type the workbench must
have, for tests), ``fleet_profile``, ``fleet_constraints`` (what the profile took
away) and ``fleet_login_user``.

The *user's world* ``<state-dir>/user/`` is the same fleet as a user's own
directory would describe it, for tests that run from there (cwd):
``ansible.cfg`` (``inventory``, ``private_key_file``, ``remote_user`` when every
host logs in as the same user, ``[ssh_connection] ssh_args = -F
<state-dir>/user/ssh_config`` and ``pipelining = True``; nothing of disklab's),
``ssh_config`` (per host its ``User``, and ``ProxyJump`` for bastion hosts; for
all the key, ``<state-dir>/known_hosts``, strict checking, and multiplexing on
``<state-dir>/uc/%C``), ``inventory.yml`` (the host vars of fleet.yml without any
connection setting) and ``group_vars/fleet/vault.yml``, encrypted with
ansible-vault under the password in ``vault-pass`` (mode 0600), holding
``fleet_vault_marker`` and, when a host has ``sudo-password``,
``ansible_become_password``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import secrets
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
# free_fleet_id's reservations: one file per fleet id, holding the pid of the process that took it.
ID_RESERVATIONS = Path("/tmp/dlab-fleet-ids")
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
    # reachable only through a jump host (ProxyJump), as hosts behind an organisation's bastion are
    "bastion": ("behind_bastion",),
    # the SSH login is a non-root user whose sudo asks for a password
    "sudo-password": ("non_root_login", "sudo_password"),
    # a login rc file that prints a banner for every command, and an interpreter that warns at start
    "noisy": ("noisy_shell", "noisy_python"),
    # the workbench is a network filesystem: sshfs (FUSE over SSH) of a directory the fleet's file server
    # exports over SFTP; NFS is not offered because this machine's kernel has no NFS client
    "netfs": ("sshfs_workbench",),
    # netfs, but every such host mounts one export, <EXPORT_ROOT>/shared: one filesystem for all, as a
    # fleet's clients share one NFS or Lustre directory (a together run's cold-start storm)
    "netfs-shared": ("sshfs_workbench", "shared_export"),
}
# Constraints that cannot hold on one host, with the reason.
CONFLICTS: dict[frozenset[str], str] = {
    frozenset({"bare_path", "noisy_shell"}): "a shell that reads no rc file (bare_path) prints no banner",
    frozenset({"sshfs_workbench", "no_workbench"}): "the sshfs mount is the workbench itself, so it exists",
    frozenset({"sshfs_workbench", "non_root_login"}): "root's sshfs mount is not the login user's to write",
    frozenset({"sshfs_workbench", "behind_bastion"}): "a bastion host has no route to the file server",
}
DEFAULT_PROFILE = "standard"
BARE_PATH = "/usr/bin:/bin"  # a non-login SSH session's PATH (macOS: /usr/bin:/bin:/usr/sbin:/sbin)
BSDTAR = "/usr/bin/bsdtar"
SUDO = "/usr/bin/sudo"
# The sudo-password host's login user, made only inside that host's mount namespace.
LOGIN_USER = "dlab"
LOGIN_HOME = f"/home/{LOGIN_USER}"
# What a noisy host prints: a banner on stdout for every SSH command, a warning on its python's stderr.
NOISY_BANNER = "dlab-fleet banner: authorised use only, sessions are logged"
NOISY_PYTHON_WARNING = "WARNING: dlab-fleet noisy python: this interpreter is deprecated"
# The jump host of bastion hosts: its name, its last octet on the fleet's bridge, its inner bridge.
BASTION = "bastion"
BASTION_OCTET = 2
INNER_BRIDGE = "dlab-inner"  # inside the bastion's netns only
INNER_SUBNET = "10.214.{fleet_id}."  # the bastion's second bridge; the root namespace routes it nowhere
# The file server of netfs hosts: its name, its last octet on the fleet's bridge, where it exports.
FILESERVER = "fileserver"
FILESERVER_OCTET = 3
EXPORT_ROOT = WORKBENCH  # in the file server's own mount namespace; <EXPORT_ROOT>/<host> is a host's export
SSHFS = "/usr/bin/sshfs"
SHARED_EXPORT = "shared"  # <EXPORT_ROOT>/shared: the one export every netfs-shared host mounts
NETFS_FS = "fuse.sshfs"  # what findmnt says of a netfs host's workbench
SSHFS_MOUNT_TIMEOUT_S = 15
# sshfs's cache options for netfs hosts: none, as a user gets who types `sshfs host:dir mnt`. sshfs 3 then
# opens files without FOPEN_KEEP_CACHE, so the kernel drops a file's page cache at every open(2);
# `-o kernel_cache` (or `auto_cache`) would keep it, `-o direct_io` would bypass it (and refuse mmap).
SSHFS_OPTIONS: tuple[str, ...] = ()
# The user's world under the state dir, and the group of both inventories.
USER_DIR = "user"
GROUP = "fleet"
REPO = Path(__file__).resolve().parents[2]
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


def missing_tools(*, mac_like: bool = False, sudo: bool = False, netfs: bool = False) -> list[str]:
    """The tools and files the fleet needs that this machine lacks (empty when it can run).

    ``mac_like`` adds BSDTAR; ``sudo`` adds what the sudo-password profile needs (sudo, and
    openssl to hash the password); ``netfs`` adds SSHFS and /dev/fuse (the netfs profile).
    """
    missing = [t for t in TOOLS if shutil.which(t) is None] + ([] if Path(SSHD).exists() else [SSHD])
    missing += [BSDTAR] if mac_like and not Path(BSDTAR).exists() else []
    missing += [p for p in (SSHFS, "/dev/fuse") if netfs and not Path(p).exists()]
    missing += [SUDO] if sudo and not Path(SUDO).exists() else []
    return missing + (["openssl"] if sudo and shutil.which("openssl") is None else [])


def skip_reason(*, mac_like: bool = False, sudo: bool = False, netfs: bool = False) -> str | None:
    """Why the fleet tests skip here (root, tools); None where they can run or ``REQUIRED_ENV`` is set."""
    if os.environ.get(REQUIRED_ENV) == "1":
        return None
    if os.geteuid() != 0:
        return "the test fleet needs root"
    missing = missing_tools(mac_like=mac_like, sudo=sudo, netfs=netfs)
    return f"missing tools for the test fleet: {missing}" if missing else None


def ansible_vault() -> str | None:
    """The ``ansible-vault`` to encrypt the user's vault with: beside this interpreter, in the repo's
    venvs, or on PATH; None when there is none (the user's world then has no vault.yml)."""
    for cand in (
        Path(sys.executable).parent / "ansible-vault",
        REPO / ".venv-test" / "bin" / "ansible-vault",
        REPO / ".venv" / "bin" / "ansible-vault",
    ):
        if cand.exists():
            return str(cand)
    return shutil.which("ansible-vault")


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


def _reserved_by_live_process(fid: int) -> bool:
    """Whether a live process reserved fleet id ``fid`` (:func:`free_fleet_id`) and has not released it."""
    try:
        pid = int((ID_RESERVATIONS / str(fid)).read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_fleet_id(top: int, bottom: int) -> int:
    """The highest fleet id in ``top`` down to ``bottom`` that no namespace or route here uses, reserved
    for this process.

    Lets several test modules, and several processes (pytest-xdist workers), run fleets side by side
    without colliding: the choice is made under an flock(2), and the id is reserved in
    :data:`ID_RESERVATIONS` under this process's pid until :meth:`Fleet.down` releases it or the process
    ends, so a second process does not take it before this one has made its namespaces.
    Raises FleetError when every id in the range is taken.
    """
    ID_RESERVATIONS.mkdir(parents=True, exist_ok=True)
    with open(ID_RESERVATIONS / ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        used = {ns.split("-")[1] for ns in fleet_netns()}
        routes = _run(["ip", "-4", "route"], check=False).stdout
        for fid in range(top, bottom - 1, -1):
            if str(fid) in used or f"10.213.{fid}." in routes or _reserved_by_live_process(fid):
                continue
            (ID_RESERVATIONS / str(fid)).write_text(str(os.getpid()))
            return fid
    raise FleetError(f"no free fleet id in {bottom}..{top}")


def release_fleet_id(fid: int) -> None:
    """Drop this process's reservation of fleet id ``fid`` (another process's is left alone)."""
    path = ID_RESERVATIONS / str(fid)
    with contextlib.suppress(OSError, ValueError):
        if int(path.read_text()) == os.getpid():
            path.unlink()


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
    for pair, why in CONFLICTS.items():
        if pair <= set(out):
            raise ValueError(f"profile {profile!r} combines constraints that conflict: {why}")
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

    @property
    def user_dir(self) -> Path:
        """The user's world: ansible.cfg, ssh_config, inventory.yml, group_vars/, vault-pass."""
        return self.state_dir / USER_DIR

    @property
    def vault_password_file(self) -> Path:
        """The password file of the user's ``group_vars/fleet/vault.yml`` (mode 0600)."""
        return self.user_dir / "vault-pass"

    @property
    def sudo_password(self) -> str | None:
        """The sudo password of every ``sudo-password`` host's login user; None when there is none."""
        return self.state.get("sudo_password")

    def _node(self, name: str) -> dict:
        """The state record of host ``name``, of the jump host BASTION, or of the file server FILESERVER."""
        if name == BASTION and self.state.get("bastion"):
            return self.state["bastion"]
        if name == FILESERVER and self.state.get("fileserver"):
            return self.state["fileserver"]
        return self.host(name)

    def fileserver_inventory_host(self) -> dict:
        """The file server as an inventory host (a fleet made with ``fileserver_shell``): root with the
        fleet's key, its host key checked against hosts/fileserver/known_hosts, Debian's Python."""
        fs = self.state["fileserver"]
        known = Path(fs["dir"]) / "known_hosts"
        args = ["-F /dev/null", "-o IdentitiesOnly=yes", f"-o UserKnownHostsFile={known}",
                "-o GlobalKnownHostsFile=/dev/null", "-o StrictHostKeyChecking=yes",
                f"-o ControlPath={self.state['control_path']}"]  # fmt: skip
        return {
            "ansible_host": fs["address"],
            "ansible_port": 22,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key_path),
            "ansible_ssh_common_args": " ".join(args),
            "ansible_python_interpreter": "/usr/bin/python3",
        }

    def ssh_args(self, name: str | None = None) -> list[str]:
        """ssh options every client uses: our key, our known_hosts, checking on, no agent, batch.

        For a ``bastion`` host ``name`` they add a ProxyCommand through the jump host (an ``ssh -W``
        with these same options: ProxyJump would not pass them on).
        """
        args = [
            "-F", "/dev/null",
            "-i", str(self.key_path),
            "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5",
        ]  # fmt: skip
        if name is not None and "behind_bastion" in self._node(name).get("constraints", ()):
            args += ["-o", self._proxy_command()]
        return args

    def _proxy_command(self) -> str:
        """``ProxyCommand=...``: an ``ssh -W`` through the jump host with ssh_args' own options."""
        jump = ["/usr/bin/ssh", *self.ssh_args(), "-W", "%h:%p", f"root@{self.state['bastion']['address']}"]
        return f"ProxyCommand={shlex.join(jump)}"

    def ssh(self, name: str, command: str, **kw) -> subprocess.CompletedProcess:
        """Run ``command`` on host ``name`` with /usr/bin/ssh as its login user (root, or LOGIN_USER on
        a ``sudo-password`` host), through the jump host for a ``bastion`` host; returns the
        CompletedProcess."""
        h = self._node(name)
        user = h.get("login_user", "root")
        cmd = ["/usr/bin/ssh", *self.ssh_args(name), f"{user}@{h['address']}", command]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)

    def inside(self, name: str, command: str, **kw) -> subprocess.CompletedProcess:
        """Run ``command`` (sh) as root inside host ``name``'s namespaces, without SSH (nsenter into its
        holder): what the host really has, whatever its profile allows a login."""
        holder = self._node(name)["holder"]
        cmd = ["nsenter", f"--target={holder['pid']}", "--mount", "--uts", "--net", "--", "sh", "-c", command]
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
        fileserver_shell: bool = False,
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
        the ``lab_root`` cache. ``fileserver_shell`` lets the fleet's key log in to the file server with a
        shell (no ForceCommand), so an inventory can name it as a storage server (fileserver_inventory_host).

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
        if "sudo_password" in constraints and missing_tools(sudo=True):
            raise FleetError(f"the sudo-password profile needs {SUDO} and openssl (apt-get install sudo)")
        if "noisy_shell" in constraints and not Path("/etc/bash.bashrc").exists():
            raise FleetError("the noisy profile needs /etc/bash.bashrc (Debian's bash reads it over SSH)")
        if "sshfs_workbench" in constraints and missing_tools(netfs=True):
            raise FleetError(f"the netfs profile needs {SSHFS} and /dev/fuse (apt-get install sshfs fuse3)")
        if state_dir.exists() and any(state_dir.iterdir()):
            raise ValueError(
                f"state_dir {state_dir} must be absent or empty (run down first if a fleet is up)"
            )
        taken = [ns for ns in fleet_netns() if ns.startswith(f"dlab-{fleet_id}-")]
        if taken:
            raise FleetError(f"fleet_id {fleet_id} is in use by namespaces {taken}; pick another --fleet-id")
        subnet = f"10.213.{fleet_id}."
        inner = INNER_SUBNET.format(fleet_id=fleet_id)
        routes = _run(["ip", "-4", "route"]).stdout
        for net in (subnet, inner) if "behind_bastion" in constraints else (subnet,):
            if net in routes:
                raise FleetError(f"subnet {net}0/24 is already routed here; pick another --fleet-id")
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
            "bastion": None,
            "inner_route": None,
            "fileserver": None,
            "fileserver_shell": bool(fileserver_shell),
        }
        if "sudo_password" in constraints:
            state["sudo_password"] = secrets.token_urlsafe(12)
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
        (self.state_dir / "uc").mkdir(mode=0o700)  # the user's world's ControlPath
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

        if any("behind_bastion" in profile_constraints(p) for p in st["profiles"][:n]):
            self._add_bastion()
        netfs = sum("sshfs_workbench" in profile_constraints(p) for p in st["profiles"][:n])
        if netfs:
            self._add_fileserver(netfs)  # its sshd runs before any host mounts from it
        for i in range(n):
            self._add_host(i)
        if st["bastion"]:
            b = st["bastion"]
            (Path(b["dir"]) / "sshd_config").write_text(self._sshd_config(b))
        self._write_known_hosts()
        self._write_inventory()
        self._write_user_world()
        for name in ([BASTION] if st["bastion"] else []) + list(st["hosts"]):
            self.start_sshd(name)

    def _add_fileserver(self, exports: int) -> None:
        """The file server of netfs hosts: a netns on the fleet's bridge (FILESERVER_OCTET) whose own mount
        namespace holds a loop-mounted ext4 (direct I/O, ``exports`` × size_mib) at EXPORT_ROOT, and whose
        sshd serves nothing but SFTP (``ForceCommand internal-sftp``) to the fleet's key. Started here,
        before the hosts, because each netfs host mounts its export while its holder sets up. Its host
        key goes to ``hosts/fileserver/known_hosts``, which the hosts' sshfs checks strictly."""
        st = self.state
        fid = st["fleet_id"]
        hdir = self.state_dir / "hosts" / FILESERVER
        hdir.mkdir(parents=True)
        image = hdir / "ext4.img"
        fs = {
            "name": FILESERVER,
            "netns": f"dlab-{fid}-{FILESERVER}",
            "veth": f"dlab{fid}f",
            "address": f"10.213.{fid}.{FILESERVER_OCTET}",
            "dir": str(hdir),
            "mount_point": EXPORT_ROOT,
            "image": str(image),
            "loop": None,
            "holder": None,
            "sshd": None,
            "mounted": False,
            "exports": {},
        }
        st["fileserver"] = fs
        self.save()
        self._add_netns(fs, st["bridge"])
        _keygen(hdir / "ssh_host_ed25519_key", FILESERVER)
        keytype, key = (hdir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        (hdir / "known_hosts").write_text(f"{fs['address']} {keytype} {key}\n")
        (hdir / "sshd_config").write_text(self._sshd_config(fs))
        with open(image, "wb") as f:
            f.truncate(exports * st["size_mib"] * 1024 * 1024)
        _run([*MKFS["ext4"], str(image)])
        fs["loop"] = _run(["losetup", "--find", "--show", "--direct-io=on", str(image)]).stdout.strip()
        self.save()
        self._start_holder(fs, [["mount", "-t", "ext4", fs["loop"], EXPORT_ROOT]])
        fs["mounted"] = True
        self.save()
        self.start_sshd(FILESERVER)

    def _sshfs_mount(self, h: dict) -> list[str]:
        """The holder's command that mounts host ``h``'s export on its workbench with sshfs: in the
        background in the foreground mode (``-f``), so its pid is known (``hosts/<host>/sshfs.pid``),
        then wait until the mount is there. sshfs gets no cache options (SSHFS_OPTIONS), as a user who
        types ``sshfs host:dir mnt`` gets none; its log is ``hosts/<host>/sshfs.log``."""
        fs = self.state["fileserver"]
        hdir = Path(h["dir"])
        export = f"{EXPORT_ROOT}/{SHARED_EXPORT if 'shared_export' in h['constraints'] else h['name']}"
        self.inside(FILESERVER, f"mkdir -p {shlex.quote(export)}").check_returncode()
        fs["exports"][h["name"]] = export
        h["export"] = f"root@{fs['address']}:{export}"
        ssh = " ".join(
            [
                "/usr/bin/ssh -F /dev/null",
                f"-i {self.key_path} -o IdentitiesOnly=yes",
                f"-o UserKnownHostsFile={Path(fs['dir']) / 'known_hosts'} -o GlobalKnownHostsFile=/dev/null",
                "-o StrictHostKeyChecking=yes -o BatchMode=yes",
            ]
        )
        target = h["mount_point"]
        argv = [SSHFS, "-f", "-o", f"ssh_command={ssh}", *SSHFS_OPTIONS, h["export"], target]
        tries = int(SSHFS_MOUNT_TIMEOUT_S * 10)
        script = (
            f"{shlex.join(argv)} >{shlex.quote(str(hdir / 'sshfs.log'))} 2>&1 </dev/null & "
            f"echo $! >{shlex.quote(str(hdir / 'sshfs.pid'))}; i=0; "
            f"while ! mountpoint -q {shlex.quote(target)}; do i=$((i+1)); "
            f"if [ $i -gt {tries} ]; then cat {shlex.quote(str(hdir / 'sshfs.log'))} >&2; exit 1; fi; "
            "sleep 0.1; done"
        )
        return ["sh", "-c", script]

    def _add_bastion(self) -> None:
        """The jump host: a netns with one leg on the fleet's bridge and an inner bridge for bastion hosts.

        The root namespace gets an ``unreachable`` route for the inner subnet (recorded, removed by
        down): without it a connect from here would follow the default route off this machine.
        """
        st = self.state
        fid = st["fleet_id"]
        inner = INNER_SUBNET.format(fleet_id=fid)
        hdir = self.state_dir / "hosts" / BASTION
        hdir.mkdir(parents=True)
        b = {
            "name": BASTION,
            "netns": f"dlab-{fid}-{BASTION}",
            "veth": f"dlab{fid}b",
            "address": f"10.213.{fid}.{BASTION_OCTET}",
            "inner_bridge": INNER_BRIDGE,
            "inner_address": f"{inner}1",
            "inner_subnet": f"{inner}0/24",
            "dir": str(hdir),
            "holder": None,
            "sshd": None,
            "targets": [],
        }
        st["bastion"] = b
        st["inner_route"] = b["inner_subnet"]  # recorded first: down tolerates a route that is absent
        self.save()
        _run(["ip", "route", "add", "unreachable", b["inner_subnet"]])
        self._add_netns(b, st["bridge"])
        nsx = ["ip", "netns", "exec", b["netns"]]
        _run([*nsx, "ip", "link", "add", INNER_BRIDGE, "type", "bridge"])
        _run([*nsx, "ip", "addr", "add", f"{b['inner_address']}/24", "dev", INNER_BRIDGE])
        _run([*nsx, "ip", "link", "set", INNER_BRIDGE, "up"])
        _run([*nsx, "sysctl", "-q", "-w", "net.ipv4.ip_forward=0"])  # it forwards SSH channels, not packets
        _keygen(hdir / "ssh_host_ed25519_key", BASTION)
        self._start_holder(b, [])

    def _add_netns(self, h: dict, bridge: str, bridge_netns: str | None = None) -> None:
        """Make ``h``'s netns and a veth pair: one end on ``bridge`` (in ``bridge_netns``, default the
        root namespace), the other renamed eth0 inside with ``h``'s address."""
        _run(["ip", "netns", "add", h["netns"]])
        _run(["ip", "link", "add", h["veth"], "type", "veth", "peer", "name", f"{h['veth']}p"])
        _run(["ip", "link", "set", f"{h['veth']}p", "netns", h["netns"]])
        if bridge_netns:
            _run(["ip", "link", "set", h["veth"], "netns", bridge_netns])
        _run(
            [
                "ip",
                *(["-n", bridge_netns] if bridge_netns else []),
                "link",
                "set",
                h["veth"],
                "master",
                bridge,
                "up",
            ]
        )
        nsx = ["ip", "netns", "exec", h["netns"]]
        _run([*nsx, "ip", "link", "set", f"{h['veth']}p", "name", "eth0"])
        _run([*nsx, "ip", "addr", "add", f"{h['address']}/24", "dev", "eth0"])
        _run([*nsx, "ip", "link", "set", "eth0", "up"])
        _run([*nsx, "ip", "link", "set", "lo", "up"])

    def _start_holder(self, h: dict, setup: list[list[str]]) -> None:
        """Start ``h``'s holder: it joins the netns, makes a private mount namespace (and a UTS one,
        for its own hostname), runs ``setup`` there, reports, then sleeps to keep them alive."""
        script = "; ".join(
            [
                'set -e; hostname "$1"',
                *(shlex.join(cmd) for cmd in setup),
                "echo mounted; exec sleep infinity >/dev/null 2>&1 </dev/null",
            ]
        )
        unshare = ["unshare", "--mount", "--uts", "--propagation", "private"]
        holder = subprocess.Popen(
            ["ip", "netns", "exec", h["netns"], *unshare, "sh", "-c", script, "holder", h["netns"]],
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
            raise FleetError(f"{h['name']}: setting up its namespaces failed: {err}")
        holder.stderr.close()
        h["holder"] = _proc(holder.pid)  # the pid stays; exec updates nothing but the name
        h["mnt_ns"] = os.readlink(f"/proc/{holder.pid}/ns/mnt")
        h["net_ns"] = os.readlink(f"/proc/{holder.pid}/ns/net")
        self.save()

    @property
    def authorized_keys(self) -> Path:
        return self.state_dir / "authorized_keys"

    def _add_host(self, i: int) -> None:
        st = self.state
        name = f"host{i}"
        profile = st.get("profiles", [DEFAULT_PROFILE] * (i + 1))[i]
        constraints = profile_constraints(profile)
        netfs = "sshfs_workbench" in constraints
        fs = NETFS_FS if netfs else FS_CYCLE[i % len(FS_CYCLE)]
        hdir = self.state_dir / "hosts" / name
        hdir.mkdir(parents=True)
        # a fresh host never reuses the lab-root cache: its lab root is new and under the state dir
        lab_root = self.state_dir / "lab" if "no_lab_root" in constraints else Path(st["lab_root"])
        behind = "behind_bastion" in constraints
        subnet = INNER_SUBNET.format(fleet_id=st["fleet_id"]) if behind else f"10.213.{st['fleet_id']}."
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
            # a bastion host's veth end sits on the inner bridge, in the bastion's netns
            "veth_netns": st["bastion"]["netns"] if behind else None,
            "address": f"{subnet}{10 + i}",
            "dir": str(hdir),
            "lab_venv_root": str(lab_root / name / "lab"),
            "python": "/usr/bin/python3",
            "login_user": "root",
            "loop": None,
            "image": None,
            "holder": None,
            "sshd": None,
            "mounted": False,
        }
        if "non_root_login" in constraints:
            # the lab root is in the user's home, which lives under the host's directory
            h["login_user"] = LOGIN_USER
            h["home"] = str(hdir / "home")
            h["lab_venv_root"] = f"{LOGIN_HOME}/lab"
        st["hosts"][name] = h
        if behind:
            st["bastion"]["targets"].append(h["address"])
        self.save()

        if behind:
            self._add_netns(h, INNER_BRIDGE, st["bastion"]["netns"])
        else:
            self._add_netns(h, st["bridge"])

        # ssh host key
        _keygen(hdir / "ssh_host_ed25519_key", name)
        (hdir / "sshd_config").write_text(self._sshd_config(h))

        # workbench: a loop device over a sparse image, tmpfs, or sshfs of the file server's export
        size = st["size_mib"]
        target = h["mount_point"]
        if netfs:
            mount = self._sshfs_mount(h)
        elif fs == "tmpfs":
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
        if "no_lab_root" not in constraints and "non_root_login" not in constraints:
            Path(h["lab_venv_root"]).mkdir(parents=True, exist_ok=True)
        self._start_holder(h, [mount, *self._constrain(h, constraints)])
        h["mounted"] = True
        if netfs:
            # sshfs and the ssh it started (sshfs forks ssh twice, so ssh's parent is init, not sshfs): the
            # only processes in the new namespaces but the holder, since no sshd runs there yet
            h["sshfs"] = _proc(int((hdir / "sshfs.pid").read_text()))
            others = ns_members(h["holder"], h["netns"]) - {h["holder"]["pid"]}
            h["sshfs_procs"] = [_proc(pid) for pid in sorted(others)]
        self.save()

    def _constrain(self, h: dict, constraints: Sequence[str]) -> list[list[str]]:
        """Prepare host ``h``'s constraints; returns the commands the holder runs in its mount namespace.

        A hidden tool is really absent there: its directory gets a read-only
        overlay whose top layer (on a tmpfs of the namespace) holds a whiteout
        (a 0/0 character device, see the kernel's overlayfs docs) for it, so
        ``ls``, ``command -v`` and shutil.which all find nothing. Files the
        other constraints need (a venv, the login user's home, copies of /etc
        files under ``etc/``) go under the host's directory on the shared root
        filesystem, and every mount happens only inside the host's private
        mount namespace: the copies are bind-mounted over /etc's, the home
        over LOGIN_HOME on a tmpfs that covers /home.
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
        if "stdlib_python" in constraints or "noisy_python" in constraints:
            h["python"] = self._make_python(h, constraints)
        user = self._make_login_user(h) if "non_root_login" in constraints else None
        etc: dict[str, str] = {}  # file in /etc -> its copy for this host
        if "bare_path" in constraints or user:
            # Debian's bash reads ~/.bashrc even for `ssh host cmd`, and root's puts pyenv and cargo
            # on PATH; a shell that reads no rc file keeps sshd's SetEnv PATH, as zsh does on a Mac.
            lines = Path("/etc/passwd").read_text().splitlines()
            if "bare_path" in constraints:
                lines = [
                    (":".join([*ln.split(":")[:6], "/bin/sh"]) if ln.startswith("root:") else ln)
                    for ln in lines
                ]
            if user:
                lines.append(f"{LOGIN_USER}:x:{user['uid']}:{user['gid']}::{LOGIN_HOME}:{user['shell']}")
            etc["passwd"] = "".join(ln + "\n" for ln in lines)
        if user:
            etc["group"] = Path("/etc/group").read_text() + f"{LOGIN_USER}:x:{user['gid']}:\n"
            etc["shadow"] = (
                Path("/etc/shadow").read_text() + f"{LOGIN_USER}:{user['hash']}:19000:0:99999:7:::\n"
            )
            hosts = Path("/etc/hosts").read_text()
            etc["hosts"] = hosts + f"127.0.1.1\t{h['netns']}\n"  # sudo looks up its own hostname
        if "sudo_password" in constraints:
            ts = hdir / "sudo-ts"
            ts.mkdir(mode=0o700)
            etc["sudoers"] = "\n".join(
                [
                    "# written by tests/fleet/fleet.py: the sudo-password host's only sudoers file",
                    "Defaults env_reset",
                    'Defaults secure_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"',
                    # every sudo asks (no cached credential), and nothing lands in the shared /run or /var
                    "Defaults timestamp_timeout=0",
                    f"Defaults timestampdir={ts}",
                    "Defaults lecture=never",
                    "Defaults !syslog",
                    "root ALL=(ALL:ALL) ALL",
                    f"{LOGIN_USER} ALL=(ALL:ALL) ALL",
                    "",
                ]
            )
        if "noisy_shell" in constraints:
            # bash sources /etc/bash.bashrc (before its interactive check returns) for every SSH command
            banner = f"echo {shlex.quote(NOISY_BANNER)}  # written by tests/fleet/fleet.py (noisy profile)\n"
            etc["bash.bashrc"] = banner + Path("/etc/bash.bashrc").read_text()
            h["banner"] = NOISY_BANNER
        if user:
            cmds.append(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "dlab-home", "/home"])
            cmds.append(["mkdir", LOGIN_HOME])
            cmds.append(["mount", "--bind", h["home"], LOGIN_HOME])
            # the user's own workbench (a fresh host's /srv/dlab, so the lab can make the workbench)
            cmds.append(["chown", f"{user['uid']}:{user['gid']}", h["mount_point"]])
        copies = hdir / "etc"
        if etc:
            copies.mkdir()
        for fname, text in sorted(etc.items()):
            copy = copies / fname
            copy.write_text(text)
            copy.chmod({"shadow": 0o600, "sudoers": 0o440}.get(fname, 0o644))
            cmds.append(["mount", "--bind", str(copy), f"/etc/{fname}"])
        self.save()
        return cmds

    def _make_python(self, h: dict, constraints: Sequence[str]) -> str:
        """A venv as ``h``'s interpreter; returns its python as the host sees it.

        ``stdlib_python``: made ``--without-pip`` and without the machine's packages;
        otherwise it sees them (``--system-site-packages``). ``noisy_python``: a ``.pth`` file
        in its site-packages imports a module there that writes NOISY_PYTHON_WARNING to stderr
        at every start (a .pth rather than a sitecustomize, which Debian's own would shadow).
        A login user's venv is in the home (``~/.python``), which the user can reach; else
        under the host's dir.
        """
        user = "non_root_login" in constraints
        venv = Path(h["home"]) / ".python" if user else Path(h["dir"]) / "python"
        venv.parent.mkdir(parents=True, exist_ok=True)
        site = [] if "stdlib_python" in constraints else ["--system-site-packages"]
        _run(["/usr/bin/python3", "-m", "venv", "--without-pip", *site, str(venv)])
        if "noisy_python" in constraints:
            (site_dir,) = venv.glob("lib/python3*/site-packages")
            # the .pth imports a module, which runs once even where site reads the dir twice (lib64 -> lib)
            (site_dir / "dlab_fleet_noisy.py").write_text(
                f"import sys\n\nsys.stderr.write({NOISY_PYTHON_WARNING + chr(10)!r})\n"
            )
            (site_dir / "dlab_fleet_noisy.pth").write_text("import dlab_fleet_noisy\n")
            h["python_warning"] = NOISY_PYTHON_WARNING
        return f"{LOGIN_HOME}/.python/bin/python3" if user else str(venv / "bin" / "python3")

    def _make_login_user(self, h: dict) -> dict:
        """The home of ``h``'s LOGIN_USER (``h["home"]``, seen in the host at LOGIN_HOME) with the
        fleet's key, the lab root (unless ``no_lab_root``) and all owned by the user; returns
        its uid, gid, shell and password hash. The password is the fleet's ``sudo_password``."""
        if any(ln.split(":")[0] == LOGIN_USER for ln in Path("/etc/passwd").read_text().splitlines()):
            raise FleetError(f"{LOGIN_USER!r} is a user of this machine already; the fleet makes its own")
        taken_u = {int(ln.split(":")[2]) for ln in Path("/etc/passwd").read_text().splitlines() if ln}
        taken_g = {int(ln.split(":")[2]) for ln in Path("/etc/group").read_text().splitlines() if ln}
        uid = next(u for u in range(2000, 60000) if u not in taken_u and u not in taken_g)
        home = Path(h["home"])
        (home / ".ssh").mkdir(parents=True, exist_ok=True)
        (home / ".ssh" / "authorized_keys").write_text(self.authorized_keys.read_text())
        if "no_lab_root" not in h["constraints"]:
            (home / "lab").mkdir()
        # The package index this machine's pip uses (root's pip.conf: a local mirror) is the login's too,
        # as an organisation configures a mirror for every user; without it the lab venv cannot be made.
        mirror = Path.home() / ".config" / "pip" / "pip.conf"
        if mirror.is_file():
            (home / ".config" / "pip").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(mirror, home / ".config" / "pip" / "pip.conf")
        home.chmod(0o700)
        for d, dirs, files in os.walk(home):
            for entry in [d, *(os.path.join(d, x) for x in dirs + files)]:
                os.lchown(entry, uid, uid)
        password = self.state.get("sudo_password") or secrets.token_urlsafe(12)
        digest = _run(["openssl", "passwd", "-6", "-stdin"], input=password).stdout.strip()
        shell = "/bin/sh" if "bare_path" in h["constraints"] else "/bin/bash"
        h["uid"] = uid
        return {"uid": uid, "gid": uid, "shell": shell, "hash": digest}

    def _sshd_config(self, h: dict) -> str:
        """sshd_config of host (or jump host) ``h``: key authentication only, on its own address.

        A ``non_root_login`` host lets only LOGIN_USER in (its key in ``~/.ssh``); the jump host
        forwards TCP only to its bastion hosts' port 22.
        """
        hdir = Path(h["dir"])
        constraints = h.get("constraints", ())
        bare = "bare_path" in constraints
        user = "non_root_login" in constraints
        jump = h["name"] == BASTION
        files = h["name"] == FILESERVER
        # the caller's torch thread count reaches the host's sessions as it reaches local processes
        # (tests/conftest.py sets it for the suite); unset, the host keeps its own default
        threads = os.environ.get("OMP_NUM_THREADS")
        session_env = [
            *([f"PATH={BARE_PATH}"] if bare else []),
            *([f"OMP_NUM_THREADS={threads}"] if threads else []),
        ]
        return "\n".join(
            [
                "# written by tests/fleet/fleet.py for one fleet host",
                f"ListenAddress {h['address']}",
                "Port 22",
                f"HostKey {hdir / 'ssh_host_ed25519_key'}",
                "PidFile none",
                # the user reads their own key: the state dir (mode 0700) is root's
                f"AuthorizedKeysFile {'.ssh/authorized_keys' if user else self.authorized_keys}",
                f"PermitRootLogin {'no' if user else 'prohibit-password'}",
                *([f"AllowUsers {LOGIN_USER}"] if user else []),
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                # the state dir sits under /tmp (mode 1777), which StrictModes refuses
                # for a key file path; the key file itself is in a mode-0700 directory
                "StrictModes no",
                f"AllowTcpForwarding {'local' if jump else 'no'}",
                *([f"PermitOpen {' '.join(f'{a}:22' for a in h['targets'])}"] if jump else []),
                "X11Forwarding no",
                "PermitTunnel no",
                "Subsystem sftp internal-sftp",
                # the file server serves files only, unless the fleet was made with fileserver_shell
                *(["ForceCommand internal-sftp"] if files and not self.state.get("fileserver_shell") else []),
                *([f"SetEnv {' '.join(session_env)}"] if session_env else []),
                "",
            ]
        )

    def _write_known_hosts(self) -> None:
        lines = []
        for h in [*self.state["hosts"].values(), *([self.state["bastion"]] if self.state["bastion"] else [])]:
            keytype, key = (Path(h["dir"]) / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            lines.append(f"{h['address']} {keytype} {key}\n")
        self.known_hosts.write_text("".join(lines))

    def _lab_vars(self, h: dict) -> dict:
        """Host ``h``'s inventory variables apart from the connection: interpreter, lab settings, facts."""
        hv = {
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
            "fleet_login_user": h.get("login_user", "root"),
        }
        if "no_workbench" in h.get("constraints", ()):
            hv["lab_run_workbench_create"] = True  # the lab must make the workbench itself
        if h.get("export"):
            hv["fleet_netfs_export"] = h["export"]  # a netfs host's workbench: sshfs of this SFTP path
        return hv

    @staticmethod
    def _yaml_inventory(header: list[str], hosts: dict[str, dict]) -> str:
        out = [*header, "all:", "  children:", f"    {GROUP}:", "      hosts:"]
        for name, hv in hosts.items():
            out.append(f"        {name}:")
            out.extend(f"          {k}: {_q(v)}" for k, v in hv.items())
        return "\n".join(out) + "\n"

    def _write_inventory(self) -> None:
        st = self.state
        common = [
            "-F /dev/null",
            "-o IdentitiesOnly=yes",
            f"-o UserKnownHostsFile={self.known_hosts}",
            "-o GlobalKnownHostsFile=/dev/null",
            "-o StrictHostKeyChecking=yes",
            f"-o ControlPath={st['control_path']}",
        ]
        hosts = {}
        for h in st["hosts"].values():
            args = list(common)
            if "behind_bastion" in h.get("constraints", ()):
                args.append(shlex.join(["-o", self._proxy_command()]))
            hosts[h["name"]] = {
                "ansible_host": h["address"],
                "ansible_port": 22,
                "ansible_user": h.get("login_user", "root"),
                "ansible_ssh_private_key_file": str(self.key_path),
                "ansible_ssh_common_args": " ".join(args),
                **self._lab_vars(h),
            }
        header = [
            "# Written by tests/fleet/fleet.py up; removed by fleet.py down.",
            "# Hosts are network namespaces on this machine (see tests/fleet/README.md).",
        ]
        self.inventory_path.write_text(self._yaml_inventory(header, hosts))

    def _write_user_world(self) -> None:
        """Write the user's world ``<state>/user/`` (see the module docstring and the README)."""
        st = self.state
        udir = self.user_dir
        udir.mkdir(mode=0o700)
        st["user"] = {"dir": str(udir), "vault": None, "vault_marker": f"fleet-vault-{secrets.token_hex(4)}"}
        self.save()
        ssh_config = udir / "ssh_config"
        users = {h.get("login_user", "root") for h in st["hosts"].values()}
        lines = [
            "# Written by tests/fleet/fleet.py up: the user's ssh config for this fleet (see ansible.cfg).",
            "# The first value ssh finds wins, so each host's block comes before Host *.",
        ]
        b = st["bastion"]
        jump_alias = f"dlab-{st['fleet_id']}-{BASTION}"
        if b:
            lines += [
                f"Host {jump_alias}",
                f"  HostName {b['address']}",
                "  User root",
                "  ControlMaster no",  # the jump carries one -W channel; the target's connection is shared
            ]
        for h in st["hosts"].values():
            lines += [f"Host {h['address']}", f"  User {h.get('login_user', 'root')}"]
            if "behind_bastion" in h.get("constraints", ()):
                lines.append(f"  ProxyJump {jump_alias}")
        lines += [
            "Host *",
            f"  IdentityFile {self.key_path}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {self.known_hosts}",
            "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes",
            "  BatchMode yes",
            "  ConnectTimeout 5",
            "  ControlMaster auto",
            "  ControlPersist 60s",
            f"  ControlPath {self.state_dir}/uc/%C",
            "",
        ]
        ssh_config.write_text("\n".join(lines))
        cfg = [
            "# Written by tests/fleet/fleet.py up: the user's own Ansible settings for this fleet.",
            "# Connection settings only; nothing of disklab's.",
            "[defaults]",
            "inventory = inventory.yml",
            f"private_key_file = {self.key_path}",
            *([f"remote_user = {users.pop()}"] if len(users) == 1 else []),  # else ssh_config's User
            "host_key_checking = True",
            "",
            "[ssh_connection]",
            f"ssh_args = -F {ssh_config}",
            "pipelining = True",
            "",
        ]
        (udir / "ansible.cfg").write_text("\n".join(cfg))
        header = [
            "# Written by tests/fleet/fleet.py up: the user's inventory; the connection settings are in",
            "# ansible.cfg and ssh_config beside it, the secrets in group_vars/fleet/vault.yml.",
        ]
        hosts = {name: {"ansible_host": h["address"], **self._lab_vars(h)} for name, h in st["hosts"].items()}
        (udir / "inventory.yml").write_text(self._yaml_inventory(header, hosts))
        pw = self.vault_password_file
        pw.touch(mode=0o600)
        pw.write_text(secrets.token_urlsafe(24) + "\n")
        secret = {"fleet_vault_marker": st["user"]["vault_marker"]}
        if self.sudo_password:
            secret["ansible_become_password"] = self.sudo_password
        vault_tool = ansible_vault()
        if vault_tool:
            vdir = udir / "group_vars" / GROUP
            vdir.mkdir(parents=True)
            plain = "".join(f"{k}: {_q(v)}\n" for k, v in secret.items())
            env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}  # no ansible.cfg here
            cmd = [
                vault_tool,
                "encrypt",
                "--vault-password-file",
                str(pw),
                "--output",
                str(vdir / "vault.yml"),
            ]
            _run(cmd, input=plain, env=env, cwd=self.state_dir)
            st["user"]["vault"] = str(vdir / "vault.yml")
        st["user"]["vault_vars"] = sorted(secret)
        self.save()

    # sshd ------------------------------------------------------------------------

    def start_sshd(self, name: str) -> int:
        """Start host ``name``'s (or the jump host BASTION's) sshd inside its namespaces; returns its
        pid once it accepts TCP.

        Raises FleetError when the host's holder is gone or sshd does not listen
        within START_TIMEOUT_S (its log is ``hosts/<name>/sshd.log``).
        """
        h = self._node(name)
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
            if self._listens(h):
                h["sshd"] = _proc(proc.pid)  # start time after exec, for the pid-reuse check
                self.save()
                return proc.pid
            time.sleep(0.05)
        raise FleetError(f"{name}: sshd did not listen on {h['address']}:22 within {START_TIMEOUT_S} s")

    def _listens(self, h: dict) -> bool:
        """Whether ``h``'s sshd accepts connections on its address, port 22.

        A bastion host cannot be reached from here, so for it the listening socket is looked
        up in its own netns's TCP table (``/proc/PID/net/tcp`` of its sshd, see proc(5)).
        """
        if "behind_bastion" not in h.get("constraints", ()):
            with contextlib.suppress(OSError), socket.create_connection((h["address"], 22), timeout=0.5):
                return True
            return False
        want = f"{int.from_bytes(socket.inet_aton(h['address']), 'little'):08X}:0016"
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{h['sshd']['pid']}/net/tcp").read_text().splitlines()[1:]:
                local, _, state = line.split()[1:4]
                if local == want and state == "0A":  # TCP_LISTEN
                    return True
        return False

    def stop_sshd(self, name: str) -> None:
        """Stop host ``name``'s sshd and end its SSH sessions (every process in its netns but the holder).

        The workbench stays mounted (the holder keeps the mount namespace), as
        on a real host whose sshd stops. Sessions are ended too, so a kept-open
        ControlPersist connection cannot hide the outage.
        """
        h = self._node(name)
        kill_recorded(h.get("sshd"))
        holder_pid = (h.get("holder") or {}).get("pid")
        # a netfs host's sshfs and its ssh serve the workbench, not a login: they stay
        keep = {r["pid"] for r in h.get("sshfs_procs", ()) if alive(r["pid"], r["start"])}
        for pid in sorted(ns_members(h.get("holder"), h["netns"])):
            if pid != holder_pid and pid not in keep:
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
            self._down_node(name, h, problems)
        if st.get("bastion"):
            self._down_node(BASTION, st["bastion"], problems)
        if st.get("fileserver"):  # after the hosts: their sshfs mounts are gone by now
            self._down_node(FILESERVER, st["fileserver"], problems)
        if st.get("inner_route"):
            _run(["ip", "route", "del", "unreachable", st["inner_route"]], check=False)
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
            release_fleet_id(st["fleet_id"])
        else:
            self.save()  # keep the record, so a second down can retry
        return problems

    def _down_node(self, name: str, h: dict, problems: list[str]) -> None:
        """down's part for one host or the jump host; appends what it could not fix to ``problems``."""
        try:
            self.stop_sshd(name)
        except Exception as exc:
            problems.append(f"{name}: stopping sshd: {exc}")
        holder = h.get("holder")
        if h.get("mounted") and holder and alive(holder["pid"], holder["start"]):
            target = h.get("mount_point", WORKBENCH)
            cp = _run(["nsenter", f"--target={holder['pid']}", "--mount", "umount", target], check=False)
            # a netfs host's sshfs unmounts itself when its server goes (the file server stopped)
            if cp.returncode != 0 and "not mounted" not in cp.stderr:
                problems.append(f"{name}: umount {target}: {cp.stderr.strip()}")
        for rec in h.get("sshfs_procs", ()):  # a netfs host's sshfs exits at umount; ended if it has not
            try:
                kill_recorded(rec)
            except FleetError as exc:
                problems.append(f"{name}: sshfs: {exc}")
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
        _run(["ip", "link", "del", h["veth"]], check=False)  # where it is still in the root namespace
        if h.get("veth_netns") in fleet_netns():
            _run(["ip", "-n", h["veth_netns"], "link", "del", h["veth"]], check=False)
        if h["netns"] in fleet_netns():
            cp = _run(["ip", "netns", "del", h["netns"]], check=False)
            if cp.returncode != 0:
                problems.append(f"{name}: ip netns del: {cp.stderr.strip()}")

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
        vault = "" if fleet.state["user"]["vault"] else " (no vault.yml: no ansible-vault found)"
        print(f"user's world: {fleet.user_dir}{vault}")
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
