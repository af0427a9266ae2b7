"""The test fleet itself: real sshd hosts in network namespaces, each with its own workbench fs.

These tests create real namespaces, loop devices and sshd processes (root),
ssh into them with /usr/bin/ssh and Ansible, and check that ``down`` leaves
nothing behind. The fast checks at the top need neither root nor sshd.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent / "fleet"))
import fleet as fleetmod  # noqa: E402
from fleet import BARE_PATH, FRESH_MOUNT, FS_CYCLE, MIN_SIZE_MIB, WORKBENCH, Fleet, FleetError  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ANSIBLE = REPO / ".venv-test" / "bin" / "ansible"
FLEET_PY = REPO / "tests" / "fleet" / "fleet.py"
SKIP = fleetmod.skip_reason()
MAC_SKIP = fleetmod.skip_reason(mac_like=True)
needs_fleet = [pytest.mark.fleet, pytest.mark.root, pytest.mark.skipif(bool(SKIP), reason=str(SKIP))]


def _free_fleet_id() -> int:
    """A fleet id from the top of the range that no namespace here uses (the CLI default is 0)."""
    return fleetmod.free_fleet_id(250, 201)


def _short_state_dir() -> Path:
    """A state dir short enough for ssh's ControlPath (pytest's tmp_path is too long)."""
    return Path(tempfile.mkdtemp(prefix="dlf", dir="/tmp"))


def _mounts_of(sources: set[str]) -> list[str]:
    """Every mountinfo line, in any process's mount namespace, whose source is in ``sources``."""
    hits = []
    for mi in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            text = mi.read_text()
        except OSError:  # the process exited while we looked
            continue
        for line in text.splitlines():
            source = line.split(" - ", 1)[1].split()[1]
            if source in sources:
                hits.append(f"{mi}: {line}")
    return hits


# -- no root needed ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"n": 0}, "n must be"),
        ({"n": 2, "fleet_id": 256}, "fleet_id must be"),
        ({"n": 2, "size_mib": MIN_SIZE_MIB - 1}, "size_mib must be"),
        ({"n": 2, "state_dir": Path("/tmp/" + "x" * 80)}, "state_dir must be short"),
        ({"n": 2, "profiles": ["fresh", "macos"]}, "unknown host profile 'macos'"),
        ({"n": 2, "profiles": ["fresh+nope"]}, "unknown host profile 'nope'"),
        ({"n": 1, "profiles": ["fresh", "mac-like"]}, "profiles must be a list of at most n=1"),
        ({"n": 2, "profiles": "fresh"}, "profiles must be a list"),
        ({"n": 1, "profiles": ["noisy+mac-like"]}, "conflict: a shell that reads no rc file"),
        ({"n": 1, "profiles": ["netfs+fresh"]}, "conflict: the sshfs mount is the workbench itself"),
        ({"n": 1, "profiles": ["netfs+sudo-password"]}, "conflict: root's sshfs mount is not the login"),
        ({"n": 1, "profiles": ["bastion+netfs"]}, "conflict: a bastion host has no route to the file server"),
    ],
)
def test_up_refuses_bad_settings_naming_them(kwargs, setting):
    kwargs.setdefault("state_dir", Path("/tmp/dlf-never-created"))
    with pytest.raises(ValueError, match=setting):
        Fleet.up(**kwargs)
    assert not Path("/tmp/dlf-never-created").exists()


def test_profiles_combine_their_constraints_in_order():
    assert fleetmod.profile_constraints("standard") == ()
    assert fleetmod.profile_constraints("fresh+mac-like") == (
        *fleetmod.PROFILES["fresh"],
        *fleetmod.PROFILES["mac-like"],
    )
    assert fleetmod.profile_constraints("fresh+bastion+sudo-password+noisy") == (
        "no_workbench", "no_lab_root", "no_strace", "behind_bastion", "non_root_login", "sudo_password",
        "noisy_shell", "noisy_python",
    )  # fmt: skip


def test_kill_recorded_checks_the_start_time_against_pid_reuse():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        rec = fleetmod._proc(proc.pid)
        assert fleetmod.alive(proc.pid, rec["start"])
        fleetmod.kill_recorded({"pid": proc.pid, "start": rec["start"] + 1})  # "another" process
        assert proc.poll() is None, "a pid whose start time differs must not be killed"
        fleetmod.kill_recorded(rec)
        assert not fleetmod.alive(proc.pid, rec["start"])
        with pytest.raises(ProcessLookupError):  # gone and reaped, not a zombie
            os.kill(proc.pid, 0)
    finally:
        proc.kill()
        proc.wait()


def test_a_missing_tool_skips_with_its_name_unless_ci_requires_the_fleet(monkeypatch):
    monkeypatch.setattr(fleetmod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(fleetmod, "TOOLS", ("ip", "no-such-tool-for-the-fleet"))
    monkeypatch.setattr(fleetmod, "BSDTAR", "/nonexistent/bsdtar")
    monkeypatch.delenv(fleetmod.REQUIRED_ENV, raising=False)
    assert "no-such-tool-for-the-fleet" in fleetmod.skip_reason()
    assert "/nonexistent/bsdtar" not in fleetmod.skip_reason()
    assert "/nonexistent/bsdtar" in fleetmod.skip_reason(mac_like=True)
    monkeypatch.setenv(fleetmod.REQUIRED_ENV, "1")  # .ci/run: the tests run and fail on the missing tool
    assert fleetmod.skip_reason(mac_like=True) is None


def test_down_of_an_absent_fleet_is_a_no_op(tmp_path):
    cp = subprocess.run(
        [sys.executable, str(FLEET_PY), "down", "--state-dir", str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert cp.returncode == 0, cp.stderr
    assert "nothing to do" in cp.stdout


# -- the real fleet ----------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet():
    """Four hosts (ext4, xfs, btrfs, tmpfs), torn down after the module."""
    f = Fleet.up(4, _short_state_dir(), fleet_id=_free_fleet_id(), size_mib=MIN_SIZE_MIB)
    try:
        yield f
    finally:
        assert f.down() == []


class TestFleet:
    pytestmark = needs_fleet

    def test_each_host_has_its_own_workbench_filesystem(self, fleet):
        assert [h.fs for h in fleet.hosts] == list(FS_CYCLE)
        statf = {"ext4": "ext2/ext3", "xfs": "xfs", "btrfs": "btrfs", "tmpfs": "tmpfs"}  # stat(1) names
        for h in fleet.hosts:
            cp = fleet.ssh(h.name, f"findmnt -n -o FSTYPE,TARGET -T {WORKBENCH}; stat -f -c %T {WORKBENCH}")
            assert cp.returncode == 0, cp.stderr
            fstype, target, stat_type = cp.stdout.split()
            assert (fstype, target, stat_type) == (h.fs, WORKBENCH, statf[h.fs])

    def test_inventory_matches_the_hosts(self, fleet):
        inv = yaml.safe_load(fleet.inventory_path.read_text())
        hosts = inv["all"]["children"]["fleet"]["hosts"]
        assert sorted(hosts) == [h.name for h in fleet.hosts]
        for h in fleet.hosts:
            hv = hosts[h.name]
            assert hv["ansible_host"] == h.address and hv["fleet_fs"] == h.fs
            assert hv["ansible_user"] == "root" and hv["ansible_python_interpreter"] == "/usr/bin/python3"
            assert hv["lab_run_workbench"] == WORKBENCH
            assert "StrictHostKeyChecking=yes" in hv["ansible_ssh_common_args"]
            assert f"ControlPath={fleet.state_dir}/cp/" in hv["ansible_ssh_common_args"]
            loop = fleet.host(h.name)["loop"]
            dio = (
                bool(loop)
                and subprocess.run(
                    ["losetup", "-n", "-O", "DIO", loop], capture_output=True, text=True
                ).stdout.strip()
                == "1"
            )
            assert hv["fleet_loop_direct_io"] is dio and (h.fs != "tmpfs") == bool(loop)
        roots = [hosts[h.name]["lab_venv_root"] for h in fleet.hosts]
        assert len(set(roots)) == len(roots), "each host needs its own lab root on the shared root fs"

    def test_a_workbench_mount_is_seen_only_inside_its_host(self, fleet):
        names = [h.name for h in fleet.hosts]
        for name in names:
            cp = fleet.ssh(name, f"echo {name} > {WORKBENCH}/owner && hostname")
            assert cp.returncode == 0, cp.stderr
            assert cp.stdout.strip() == fleet.host(name)["netns"]
        for name in names:
            cp = fleet.ssh(name, f"cat {WORKBENCH}/owner")
            assert cp.stdout.strip() == name  # not overwritten by another host
        root_target = subprocess.run(
            ["findmnt", "-n", "-o", "TARGET", "-T", WORKBENCH], capture_output=True, text=True
        ).stdout.strip()
        assert root_target != WORKBENCH, "a host's workbench mount leaked into the root namespace"
        assert not (Path(WORKBENCH) / "owner").exists()

    def test_hosts_reach_only_the_private_subnet(self, fleet):
        h = fleet.hosts[0]
        cp = fleet.ssh(h.name, "ip -4 route")
        assert cp.returncode == 0, cp.stderr
        routes = cp.stdout.strip().splitlines()
        assert routes == [
            f"{h.address.rsplit('.', 1)[0]}.0/24 dev eth0 proto kernel scope link src {h.address}"
        ]

    def test_a_wrong_known_hosts_entry_makes_ssh_fail(self, fleet, tmp_path):
        a, b = fleet.hosts[0], fleet.hosts[1]
        good = fleet.known_hosts.read_text().splitlines()
        b_key = next(line for line in good if line.startswith(b.address + " ")).split(" ", 1)[1]
        wrong = tmp_path / "known_hosts"
        wrong.write_text(f"{a.address} {b_key}\n")  # host a listed with host b's key
        args = [x.replace(str(fleet.known_hosts), str(wrong)) for x in fleet.ssh_args()]
        assert f"UserKnownHostsFile={wrong}" in args
        cp = subprocess.run(
            ["/usr/bin/ssh", *args, f"root@{a.address}", "true"], capture_output=True, text=True, timeout=60
        )
        assert cp.returncode == 255
        assert "Host key verification failed" in cp.stderr
        assert fleet.ssh(a.name, "true").returncode == 0  # the generated file is right

    def test_ansible_reaches_every_host_through_the_inventory(self, fleet, tmp_path):
        env = dict(os.environ, ANSIBLE_PIPELINING="True", ANSIBLE_HOST_KEY_CHECKING="True")
        env["ANSIBLE_LOCAL_TEMP"] = str(fleet.state_dir / "ansible-local")

        def adhoc(tree: str, *module_args: str) -> dict:
            """Run an ad-hoc module; ``--tree`` leaves each host's result as JSON in a file."""
            cmd = [str(ANSIBLE), "fleet", "-i", str(fleet.inventory_path), "--tree", str(tmp_path / tree)]
            cp = subprocess.run([*cmd, *module_args], capture_output=True, text=True, env=env)
            assert cp.returncode == 0, cp.stdout + cp.stderr
            return {p.name: json.loads(p.read_text()) for p in (tmp_path / tree).iterdir()}

        pings = adhoc("ping", "-m", "ansible.builtin.ping")
        assert {name: r["ping"] for name, r in pings.items()} == {h.name: "pong" for h in fleet.hosts}
        probe = "findmnt -n -o FSTYPE -T {{ lab_run_workbench }}"
        fstypes = adhoc("probe", "-m", "ansible.builtin.command", "-a", probe)
        assert {name: r["stdout"] for name, r in fstypes.items()} == {h.name: h.fs for h in fleet.hosts}

    def test_an_interrupt_ends_a_remote_tasks_command_with_its_ssh_session(self, fleet, tmp_path):
        """disklab.runner ends ansible-playbook's worker and its ssh client; the task's command on the host,
        on the pty Ansible asks for (-tt), gets SIGHUP and ends with its child (as pip under the
        provisioning task would)."""
        import psutil

        from disklab.progress import Progress
        from disklab.runner import run_playbook
        from test_run_ownership import TREE_PLAY

        pidfile = tmp_path / "child.pid"  # /tmp is the hosts' too
        play = tmp_path / "tree.yml"
        play.write_text(TREE_PLAY.format(pidfile=pidfile))
        stopped = []

        def interrupted() -> bool:
            if not pidfile.is_file() or not pidfile.read_text().strip():
                return False
            if not stopped:
                stopped.append(psutil.Process(int(pidfile.read_text())))
            return True

        run = run_playbook(str(play), fleet.inventory_path, {}, limit="host0", progress=Progress(live=False),
                           cancel=interrupted, artifact_dir=tmp_path / "artifacts")  # fmt: skip
        assert run.status == "canceled" and stopped, run.output_tail
        child = stopped[0]  # the host's `sleep`, in its network namespace (the same pids)
        assert child.name() == "sleep" or not child.is_running()
        gone, alive = psutil.wait_procs([child], timeout=10)
        for left in alive:
            left.kill()
        assert not alive, "the remote task's child ran on after its ssh session ended"

    def test_stop_sshd_makes_the_host_unreachable_and_start_brings_it_back(self, fleet):
        h = fleet.host("host1")
        assert fleet.ssh("host1", f"echo kept > {WORKBENCH}/kept").returncode == 0
        old = h["sshd"]["pid"]
        cli = [sys.executable, str(FLEET_PY), "--state-dir", str(fleet.state_dir)]
        subprocess.run([*cli, "stop-sshd", "host1"], check=True, capture_output=True)
        assert not fleetmod.alive(old)
        cp = fleet.ssh("host1", "true")
        assert cp.returncode == 255 and "refused" in cp.stderr
        assert fleet.ssh("host0", "true").returncode == 0  # the others are untouched
        subprocess.run([*cli, "start-sshd", "host1"], check=True, capture_output=True)
        fleet.state = Fleet.load(fleet.state_dir).state  # the CLI recorded the new pid
        assert fleet.host("host1")["sshd"]["pid"] != old
        cp = fleet.ssh("host1", f"cat {WORKBENCH}/kept; findmnt -n -o FSTYPE -T {WORKBENCH}")
        assert cp.stdout.split() == ["kept", "xfs"]  # the mount outlived sshd


@pytest.fixture(scope="module")
def profiled():
    """host0 ``fresh`` (ext4) and host1 ``mac-like`` (xfs), torn down after the module."""
    f = Fleet.up(
        2,
        _short_state_dir(),
        fleet_id=_free_fleet_id(),
        size_mib=MIN_SIZE_MIB,
        profiles=["fresh", "mac-like"],
    )
    try:
        yield f
    finally:
        loops = {h["loop"] for h in f.state["hosts"].values()}
        assert f.down() == []
        assert _mounts_of(loops) == []  # the fresh host's /srv/dlab mount went too


class TestProfiles:
    """The profiles really take away what they say, and only inside their own host."""

    pytestmark = [
        pytest.mark.fleet,
        pytest.mark.root,
        pytest.mark.skipif(bool(MAC_SKIP), reason=str(MAC_SKIP)),
    ]

    def test_the_fresh_host_has_no_workbench_no_lab_root_and_no_strace(self, profiled):
        h = profiled.host("host0")
        assert (h["profile"], h["fs"], h["mount_point"]) == ("fresh", "ext4", FRESH_MOUNT)
        cp = profiled.ssh(
            "host0", f"test -e {WORKBENCH}; echo $?; findmnt -n -o FSTYPE,TARGET -T {FRESH_MOUNT}"
        )
        assert cp.stdout.split() == ["1", "ext4", FRESH_MOUNT]  # absent, and its parent is the loop ext4
        cp = profiled.ssh("host0", "command -v strace; echo rc=$?; ls /usr/bin/strace")
        assert cp.stdout.split() == ["rc=1"] and "No such file" in cp.stderr
        which = profiled.ssh("host0", "/usr/bin/python3 -c 'import shutil; print(shutil.which(\"strace\"))'")
        assert which.stdout.strip() == "None"
        assert not Path(h["lab_venv_root"]).exists()  # no lab root, so no venv
        hv = yaml.safe_load(profiled.inventory_path.read_text())["all"]["children"]["fleet"]["hosts"]["host0"]
        assert hv["lab_run_workbench_create"] is True and hv["fleet_profile"] == "fresh"
        assert hv["disklab_workbench"] == WORKBENCH

    def test_the_mac_like_host_has_bsdtar_a_stdlib_python_and_a_bare_path(self, profiled):
        h = profiled.host("host1")
        hv = yaml.safe_load(profiled.inventory_path.read_text())["all"]["children"]["fleet"]["hosts"]["host1"]
        py = hv["ansible_python_interpreter"]
        assert py == h["python"] != "/usr/bin/python3"
        cp = profiled.ssh("host1", "echo $PATH; tar --version | head -n 1; command -v gtar || echo no-gtar")
        path, tar, gtar = cp.stdout.splitlines()
        assert path == BARE_PATH and tar.startswith("bsdtar ") and gtar == "no-gtar"
        for module in ("packaging", "pip", "setuptools"):
            cp = profiled.ssh("host1", f"{py} -c 'import {module}'")
            assert cp.returncode == 1 and f"No module named '{module}'" in cp.stderr, (module, cp.stderr)
        cp = profiled.ssh("host1", f"{py} -c 'import json, venv, zipfile, ensurepip; print(\"stdlib\")'")
        assert cp.stdout.strip() == "stdlib", cp.stderr
        cp = profiled.ssh("host1", f"findmnt -n -o FSTYPE,TARGET -T {WORKBENCH}")
        assert cp.stdout.split() == ["xfs", WORKBENCH]

    def test_the_constraints_stay_inside_their_host(self, profiled):
        fresh = profiled.ssh("host0", "tar --version | head -n 1; echo $PATH").stdout.splitlines()
        assert fresh[0].startswith("tar (GNU tar)") and fresh[1] != BARE_PATH
        here_strace = shutil.which("strace")
        if here_strace:  # the machine has strace: the root namespace and the mac-like host still see it
            assert profiled.ssh("host1", "command -v strace").stdout.strip() == here_strace
        root_tar = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout
        assert root_tar.startswith("tar (GNU tar)")
        assert not Path(WORKBENCH, "owner").exists() and Path(FRESH_MOUNT).is_dir()
        shell = "getent passwd root | cut -d: -f7"
        here_shell = subprocess.run(["sh", "-c", shell], capture_output=True, text=True).stdout.strip()
        assert profiled.ssh("host0", shell).stdout.strip() == here_shell
        assert profiled.ssh("host1", shell).stdout.strip() == "/bin/sh"  # no bashrc to undo the bare PATH


@pytest.mark.fleet
@pytest.mark.root
@pytest.mark.skipif(bool(SKIP), reason=str(SKIP))
def test_down_leaves_nothing_even_with_busy_sessions():
    f = Fleet.up(4, _short_state_dir(), fleet_id=_free_fleet_id(), size_mib=MIN_SIZE_MIB)
    state = json.loads(f.state_path.read_text())
    hosts = state["hosts"].values()
    pids = [h[k]["pid"] for h in hosts for k in ("holder", "sshd")]
    loops = {h["loop"] for h in hosts if h["loop"]}
    sources = loops | {h["netns"] for h in hosts if h["fs"] == "tmpfs"}  # a tmpfs's source is its netns name
    assert len(loops) == 3 and len(_mounts_of(sources)) >= 4
    # sessions that keep the workbench busy on host0 and host3, and host3's netns name deleted by hand
    alive_opts = ["-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=3"]
    busy = [
        subprocess.Popen(
            # keepalives: host3's netns vanishes with its last process, so no FIN may reach us
            ["/usr/bin/ssh", *f.ssh_args(), *alive_opts, f"root@{h.address}", f"cd {WORKBENCH} && sleep 300"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for h in (f.hosts[0], f.hosts[3])
    ]
    try:
        for name in ("host0", "host3"):  # once these answer, the busy sessions above are likely in place too
            assert f.ssh(name, f"test -d {WORKBENCH}").returncode == 0
        subprocess.run(["ip", "netns", "del", state["hosts"]["host3"]["netns"]], check=True)
        assert f.down() == []
        assert [b.wait(timeout=30) for b in busy] == [255, 255]  # their sessions were ended
    finally:
        for b in busy:
            if b.poll() is None:
                b.kill()
                b.wait()
    prefix = f"dlab-{state['fleet_id']}-"
    assert not [ns for ns in fleetmod.fleet_netns() if ns.startswith(prefix)]
    assert not [p for p in pids if fleetmod.alive(p)]
    assert _mounts_of(sources) == []
    backing = json.loads(subprocess.run(["losetup", "-J"], capture_output=True, text=True).stdout or "{}")
    assert not [d for d in backing.get("loopdevices", []) if str(d["back-file"]).startswith(str(f.state_dir))]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert state["bridge"] not in links and f"dlab{state['fleet_id']}h" not in links
    assert not f.state_dir.exists()
    assert f.down() == []  # a second down is harmless


@pytest.mark.fleet
@pytest.mark.root
@pytest.mark.skipif(bool(SKIP), reason=str(SKIP))
def test_a_failed_up_removes_what_it_had_made(monkeypatch):
    monkeypatch.setitem(fleetmod.MKFS, "btrfs", ["false"])  # host2's mkfs fails after host0 and host1 exist
    state_dir = _short_state_dir()
    fid = _free_fleet_id()
    with pytest.raises(FleetError, match="false"):
        Fleet.up(3, state_dir, fleet_id=fid, size_mib=MIN_SIZE_MIB)
    assert not [ns for ns in fleetmod.fleet_netns() if ns.startswith(f"dlab-{fid}-")]
    assert not state_dir.exists()
    backing = json.loads(subprocess.run(["losetup", "-J"], capture_output=True, text=True).stdout or "{}")
    assert not [d for d in backing.get("loopdevices", []) if str(d["back-file"]).startswith(str(state_dir))]
