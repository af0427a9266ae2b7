"""The fleet as an organisation's hosts, and the user's world that describes them.

One small fleet (tests/fleet/README.md, "Organisations' hosts" and "The user's
world") with one host of each new profile:

- host0, ``bastion`` (ext4): reachable only through the jump host;
- host1, ``sudo-password`` (xfs): the login is ``dlab``, whose sudo asks for a password;
- host2, ``noisy`` (btrfs): a banner on stdout for every SSH command, a warning from its python.

From ``<state>/user`` as cwd, plain Ansible reaches every host with the
settings found only there (ansible.cfg, its ssh_config, the vault). Nothing
here provisions a lab venv, so the module takes seconds.
"""

from __future__ import annotations

import configparser
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

import shared
from disklab_host.common import result as result_line

sys.path.insert(0, str(Path(__file__).resolve().parent / "fleet"))
import fleet as fleetmod  # noqa: E402
from fleet import LOGIN_USER, MIN_SIZE_MIB, NOISY_BANNER, NOISY_PYTHON_WARNING, WORKBENCH, Fleet  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ANSIBLE = REPO / ".venv-test" / "bin" / "ansible"
ANSIBLE_VAULT = REPO / ".venv-test" / "bin" / "ansible-vault"
SKIP = fleetmod.skip_reason(sudo=True) or (None if ANSIBLE_VAULT.exists() else f"no {ANSIBLE_VAULT}")
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(bool(SKIP), reason=str(SKIP)),
]

BASTION, SUDO, NOISY = "host0", "host1", "host2"
PROFILES = {BASTION: "bastion", SUDO: "sudo-password", NOISY: "noisy"}
# What may be in the user's inventory: no connection setting.
INVENTORY_KEYS = {"ansible_host", "ansible_python_interpreter"}
INVENTORY_PREFIXES = ("disklab_", "lab_", "fleet_")


def _free_fleet_id() -> int:
    """A fleet id no namespace or route here uses (lab: 200..151, profiles: 220..206, infra: 250..201,
    bench: 230..249)."""
    return fleetmod.free_fleet_id(150, 131)


def _env(**extra: str) -> dict:
    """The environment of a user's shell: none of the ANSIBLE_* settings that tests elsewhere set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return {**env, **extra}


def _ansible(fleet: Fleet, *args: str, cwd: Path | None = None, env: dict | None = None, stdin: str = ""):
    """``ansible`` (ad hoc) from ``cwd`` (default: the user's world), without a terminal."""
    return subprocess.run(
        [str(ANSIBLE), *args],
        cwd=cwd or fleet.user_dir,
        env=env or _env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        start_new_session=True,  # no controlling terminal: -K reads the password from stdin
    )


def _tree(tree: Path) -> dict[str, dict]:
    """Each host's result that ``ansible --tree`` left, by host name."""
    return {p.name: json.loads(p.read_text()) for p in tree.iterdir()}


def _user_ssh(fleet: Fleet, name: str, command: str) -> subprocess.CompletedProcess:
    """/usr/bin/ssh to host ``name`` with nothing but the user's ssh_config."""
    cmd = ["/usr/bin/ssh", "-F", str(fleet.user_dir / "ssh_config"), fleet.host(name)["address"], command]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def fleet():
    state_dir = Path(tempfile.mkdtemp(prefix="dluw", dir="/tmp"))  # short: ssh's ControlPath lives here
    f = Fleet.up(
        3, state_dir, fleet_id=_free_fleet_id(), size_mib=MIN_SIZE_MIB, profiles=list(PROFILES.values())
    )
    try:
        assert {h.name: h.profile for h in f.hosts} == PROFILES
        yield f
    finally:
        assert f.down() == []  # a no-op after test_down_leaves_nothing_behind


def test_the_user_world_holds_the_settings_and_the_inventory_none(fleet):
    udir = fleet.user_dir
    assert sorted(str(p.relative_to(udir)) for p in udir.rglob("*") if p.is_file()) == [
        "ansible.cfg",
        "group_vars/fleet/vault.yml",
        "inventory.yml",
        "ssh_config",
        "vault-pass",
    ]
    assert fleet.vault_password_file.stat().st_mode & 0o777 == 0o600
    hosts = yaml.safe_load((udir / "inventory.yml").read_text())["all"]["children"]["fleet"]["hosts"]
    assert sorted(hosts) == sorted(PROFILES)
    for name, hv in hosts.items():
        extra = {k for k in hv if k not in INVENTORY_KEYS and not k.startswith(INVENTORY_PREFIXES)}
        assert extra == set(), (name, extra)
        assert hv["ansible_host"] == fleet.host(name)["address"]
        assert hv["ansible_python_interpreter"] == fleet.host(name)["python"]
    assert hosts[SUDO]["disklab_root"] == f"/home/{LOGIN_USER}/lab"
    cfg = configparser.ConfigParser()
    cfg.read(udir / "ansible.cfg")
    # connection settings only (no remote_user: host0 and host2 log in as root, host1 as dlab, and
    # ssh_config says who where), nothing of disklab's
    assert {s: dict(cfg[s]) for s in cfg.sections()} == {
        "defaults": {
            "inventory": "inventory.yml",
            "private_key_file": str(fleet.key_path),
            "host_key_checking": "True",
        },
        "ssh_connection": {"ssh_args": f"-F {udir / 'ssh_config'}", "pipelining": "True"},
    }
    ssh_config = (udir / "ssh_config").read_text()
    assert f"Host {fleet.host(BASTION)['address']}\n  User root\n  ProxyJump dlab-" in ssh_config
    assert f"Host {fleet.host(SUDO)['address']}\n  User {LOGIN_USER}\n" in ssh_config
    assert "ProxyJump" not in (udir / "inventory.yml").read_text()
    vault = (udir / "group_vars" / "fleet" / "vault.yml").read_text()
    assert vault.startswith("$ANSIBLE_VAULT;1.1;AES256") and fleet.sudo_password not in vault
    cp = subprocess.run(
        [str(ANSIBLE_VAULT), "view", "--vault-password-file", "vault-pass", "group_vars/fleet/vault.yml"],
        cwd=udir,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert cp.returncode == 0, cp.stderr
    assert yaml.safe_load(cp.stdout) == {
        "fleet_vault_marker": fleet.state["user"]["vault_marker"],
        "ansible_become_password": fleet.sudo_password,
    }


def test_ansible_from_the_user_dir_pings_every_host_and_reads_the_vault(fleet, tmp_path):
    args = ["all", "--vault-password-file", "vault-pass", "--tree", str(tmp_path / "ping"), "-m", "ping"]
    cp = _ansible(fleet, *args)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert {n: r["ping"] for n, r in _tree(tmp_path / "ping").items()} == dict.fromkeys(PROFILES, "pong")
    marker = ["all", "--vault-password-file", "vault-pass", "-m", "ansible.builtin.debug"]
    cp = _ansible(fleet, *marker, "-a", "var=fleet_vault_marker", "--tree", str(tmp_path / "marker"))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    got = {n: r["fleet_vault_marker"] for n, r in _tree(tmp_path / "marker").items()}
    assert got == dict.fromkeys(PROFILES, fleet.state["user"]["vault_marker"])


def test_without_the_user_cfg_no_host_answers(fleet, tmp_path):
    empty = tmp_path / "ansible.cfg"
    empty.write_text("[defaults]\n")
    cp = _ansible(fleet, "all", "-i", "inventory.yml", "--vault-password-file", "vault-pass", "-m", "ping",
                  env=_env(ANSIBLE_CONFIG=str(empty)))  # fmt: skip
    assert cp.returncode != 0
    for name in PROFILES:
        assert f"{name} | UNREACHABLE!" in cp.stdout, cp.stdout
    # even with the fleet's key and known_hosts, only the plain root host answers: the jump and
    # the login user live in the user's ssh_config alone
    env = _env(
        ANSIBLE_CONFIG=str(empty),
        ANSIBLE_PRIVATE_KEY_FILE=str(fleet.key_path),
        ANSIBLE_REMOTE_USER="root",
        ANSIBLE_SSH_ARGS=f"-F /dev/null -o UserKnownHostsFile={fleet.known_hosts} -o ConnectTimeout=5",
    )
    args = ["all", "-i", "inventory.yml", "--vault-password-file", "vault-pass", "-m", "ping"]
    cp = _ansible(fleet, *args, "--tree", str(tmp_path / "t"), env=env)
    assert cp.returncode != 0
    results = _tree(tmp_path / "t")
    assert results[NOISY]["ping"] == "pong"
    assert results[BASTION]["unreachable"] and "No route to host" in results[BASTION]["msg"]
    assert results[SUDO]["unreachable"] and "Permission denied" in results[SUDO]["msg"]


def test_the_bastion_host_is_reached_only_through_the_jump_host(fleet):
    address = fleet.host(BASTION)["address"]
    with pytest.raises(OSError) as exc, socket.create_connection((address, 22), timeout=5):
        pass
    assert exc.value.errno == errno.EHOSTUNREACH  # the unreachable route: nothing leaves this machine
    routes = subprocess.run(
        ["ip", "-4", "route", "show", "type", "unreachable"], capture_output=True, text=True
    )
    assert f"unreachable {fleet.state['inner_route']}" in routes.stdout
    netns = fleet.host(BASTION)["netns"]
    assert _user_ssh(fleet, BASTION, "hostname").stdout.strip() == netns
    assert fleet.ssh(BASTION, "hostname").stdout.strip() == netns  # fleet.py's ProxyCommand
    jump = fleet.state["bastion"]
    assert fleet.inside(BASTION, "ip -4 route").stdout.split()[0] == jump["inner_subnet"]  # no default route
    cp = subprocess.run(
        ["ip", "netns", "exec", jump["netns"], "sysctl", "-n", "net.ipv4.ip_forward"],
        capture_output=True,
        text=True,
    )
    assert cp.stdout.strip() == "0"


def test_the_fleet_inventory_still_reaches_every_host(fleet, tmp_path):
    env = _env(ANSIBLE_PIPELINING="True", ANSIBLE_HOST_KEY_CHECKING="True")
    args = ["fleet", "-i", str(fleet.inventory_path), "-m", "ping", "--tree", str(tmp_path / "p")]
    cp = _ansible(fleet, *args, cwd=tmp_path, env=env)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert {n: r["ping"] for n, r in _tree(tmp_path / "p").items()} == dict.fromkeys(PROFILES, "pong")


def test_the_sudo_host_logs_in_as_the_user_whose_sudo_wants_the_password(fleet):
    cp = _user_ssh(fleet, SUDO, f"id -un; stat -c %U ~/lab {WORKBENCH}; sudo -n true")
    assert cp.stdout.split() == [LOGIN_USER] * 3
    assert cp.returncode == 1 and "a password is required" in cp.stderr
    cp = fleet.ssh(SUDO, "true")
    assert fleet.host(SUDO)["login_user"] == LOGIN_USER and cp.returncode == 0
    root = ["/usr/bin/ssh", *fleet.ssh_args(), f"root@{fleet.host(SUDO)['address']}", "true"]
    cp = subprocess.run(root, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 255 and "Permission denied" in cp.stderr
    passwd = fleet.inside(SUDO, f"getent passwd {LOGIN_USER}").stdout.split(":")
    assert passwd[0] == LOGIN_USER and passwd[5] == f"/home/{LOGIN_USER}"
    here = subprocess.run(["getent", "passwd", LOGIN_USER], capture_output=True, text=True)
    assert here.returncode == 2  # the user exists only inside that host
    assert not Path("/etc/sudoers.d", LOGIN_USER).exists()


def test_become_on_the_sudo_host_needs_the_vaulted_or_the_typed_password(fleet, tmp_path):
    become = ["-b", "-m", "ansible.builtin.command", "-a", "id -u"]
    cp = _ansible(fleet, "all", "--vault-password-file", "vault-pass", *become, "--tree", str(tmp_path / "v"))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert {n: r["stdout"] for n, r in _tree(tmp_path / "v").items()} == dict.fromkeys(PROFILES, "0")
    cp = _ansible(
        fleet, SUDO, "--vault-password-file", "vault-pass", "-e", "ansible_become_password=wrong", *become
    )
    assert cp.returncode != 0 and "Incorrect sudo password" in cp.stdout + cp.stderr
    # without the vault: the user's ansible.cfg, an inventory copy without group_vars, another cwd
    # (an ad hoc command also reads group_vars/ beside its cwd)
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(fleet.user_dir / "inventory.yml", plain / "inventory.yml")
    env = _env(ANSIBLE_CONFIG=str(fleet.user_dir / "ansible.cfg"))
    cp = _ansible(fleet, SUDO, "-i", "inventory.yml", *become, cwd=plain, env=env)
    assert cp.returncode != 0 and "Missing sudo password" in cp.stdout + cp.stderr
    cp = _ansible(
        fleet,
        SUDO,
        "-i",
        "inventory.yml",
        "-K",
        *become,
        cwd=plain,
        env=env,
        stdin=fleet.sudo_password + "\n",
    )
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"{SUDO} | CHANGED | rc=0 >>\n0" in cp.stdout


def test_the_noisy_host_prints_its_banner_and_its_python_warns(fleet, tmp_path):
    py = fleet.host(NOISY)["python"]
    cp = _user_ssh(fleet, NOISY, f"{py} -c 'print(42)'")
    assert cp.stdout.splitlines() == [NOISY_BANNER, "42"]
    assert cp.stderr.splitlines() == [NOISY_PYTHON_WARNING]
    # a raw command runs in a terminal (ssh -tt), which merges stderr into stdout
    args = ["--vault-password-file", "vault-pass", "-m", "ansible.builtin.raw", "-a", f"{py} -c 'print(42)'"]
    cp = _ansible(fleet, NOISY, *args, "--tree", str(tmp_path / "raw"))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    lines = [ln.strip() for ln in _tree(tmp_path / "raw")[NOISY]["stdout_lines"]]
    assert NOISY_BANNER in lines and NOISY_PYTHON_WARNING in lines and "42" in lines
    # only that host is noisy: another host's shell and /usr/bin/python3 are quiet
    cp = _user_ssh(fleet, SUDO, "/usr/bin/python3 -c 'print(42)'")
    assert (cp.stdout, cp.stderr) == ("42\n", "")
    assert NOISY_BANNER not in Path("/etc/bash.bashrc").read_text()


# --- disklab itself in the user's world ---------------------------------------------------------------

DISKLAB = REPO / ".venv-test" / "bin" / "disklab"
ANSIBLE_PLAYBOOK = REPO / ".venv-test" / "bin" / "ansible-playbook"
VAULT = ("--vault-password-file", "vault-pass")
LAB_HOSTS = (BASTION, SUDO)
# A short quick lab: fsync, a crash and the ceiling at tiny sizes (conftest.TINY_SIZES); what the lab
# measures is tested elsewhere, here that it runs on these hosts at all. As JSON, so that it is a list.
LAB_STEPS = '{"lab_run_steps": ["fsync_bench", "crash", "ceiling"]}'


def _disklab(fleet: Fleet, *args: str, cwd: Path | None = None, env: dict | None = None, stdin: str = ""):
    """The disklab CLI from the user's directory (default), as a user runs it: no terminal, no ANSIBLE_*."""
    return subprocess.run(
        [str(DISKLAB), *args],
        cwd=cwd or fleet.user_dir,
        env=env or _env(PATH=f"{DISKLAB.parent}:/usr/bin:/bin:/usr/sbin:/sbin"),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=900,
        start_new_session=True,  # no controlling terminal: -K reads the password from stdin
    )


def _tiny() -> list[str]:
    """Tiny sizes, and pip without byte-compiling and without retries (conftest.PROVISION_IN_NAMESPACE):
    the sudo-password host provisions its lab venv from nothing."""
    from conftest import PROVISION_IN_NAMESPACE, TINY_SIZES

    return [
        "-e",
        json.dumps(PROVISION_IN_NAMESPACE),
        *(a for n, v in TINY_SIZES.items() for a in ("-e", f"{n}={v}")),
    ]


def _without_vault(fleet: Fleet, tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the user's inventory without its vaulted group_vars; an env with the user's ansible.cfg."""
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(fleet.user_dir / "inventory.yml", plain / "inventory.yml")
    env = _env(ANSIBLE_CONFIG=str(fleet.user_dir / "ansible.cfg"), PATH=f"{DISKLAB.parent}:/usr/bin:/bin")
    return plain, env


@pytest.fixture(scope="module")
def quick_lab(fleet, tmp_path_factory):
    """`disklab run` of a short quick lab on the bastion and the sudo-password hosts, from the user's
    directory. The sudo host provisions its lab venv from nothing, through sudo (its login has the
    machine's pip mirror, fleet.py); the bastion host's is the run's one lab venv (tests/shared.py), which
    its provisioning keeps (pip's transport options alone differ): what it tests is the jump."""
    shared.seed_fleet_hosts(tmp_path_factory, fleet, [BASTION])
    return _disklab(fleet, "run", "-i", "inventory.yml", *VAULT, "--profile", "quick",
                    "-l", ",".join(LAB_HOSTS), "-e", LAB_STEPS, *_tiny())  # fmt: skip


def test_disklab_audit_from_the_users_directory_reaches_every_host(fleet):
    proc = _disklab(fleet, "audit", "-i", "inventory.yml", *VAULT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"disklab: Ansible reads your configuration, {fleet.user_dir / 'ansible.cfg'}" in proc.stderr
    for name in PROFILES:
        assert f"{name}: ok" in proc.stdout, proc.stdout
        assert len(list((fleet.user_dir / "reports" / name / "audits").glob("*.json"))) == 1
    assert (fleet.user_dir / "reports" / "index.md").is_file()


def test_a_missing_or_wrong_vault_password_is_one_line_naming_the_file_and_nothing_is_stored(fleet, tmp_path):
    reports = fleet.user_dir / "reports"
    before = (
        sorted(str(p) for p in reports.rglob("*") if ".artifacts" not in p.parts) if reports.exists() else []
    )
    proc = _disklab(fleet, "audit", "-i", "inventory.yml")
    assert proc.returncode == 1
    assert (
        "disklab audits: no host ran: group_vars/fleet/vault.yml (the hosts of group fleet): "
        "vault-encrypted, and no vault password was given: add --vault-password-file FILE, --vault-id ID or "
        "--ask-vault-pass"
    ) in proc.stderr.splitlines()
    (tmp_path / "wrong").write_text("not the password\n")
    proc = _disklab(fleet, "audit", "-i", "inventory.yml", "--vault-password-file", str(tmp_path / "wrong"))
    assert proc.returncode == 1 and "the vault password given does not open it" in proc.stderr
    after = (
        sorted(str(p) for p in reports.rglob("*") if ".artifacts" not in p.parts) if reports.exists() else []
    )
    assert after == before  # no stored run, index or report touched


def test_plain_ansible_playbook_runs_the_collections_audit_from_the_users_directory(fleet, tmp_path):
    env = _env(ANSIBLE_COLLECTIONS_PATH=str(REPO / "playbooks" / "collections"), PWD=str(fleet.user_dir),
               ANSIBLE_SHOW_CUSTOM_STATS="1", PATH=f"{ANSIBLE_PLAYBOOK.parent}:/usr/bin:/bin")  # fmt: skip
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "disklab.lab.audit", *VAULT, "-e", f"disklab_reports={tmp_path / 'reports'}"],
        cwd=fleet.user_dir, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    for name in PROFILES:
        assert len(list((tmp_path / "reports" / name / "audits").glob("*.json"))) == 1, name
    assert (
        "disklab_run_id" in proc.stdout
    )  # set_stats printed the run's stats (ansible-playbook shows custom stats)


def test_the_quick_lab_runs_to_stored_reports_on_the_bastion_and_the_sudo_host(fleet, quick_lab):
    assert quick_lab.returncode == 0, quick_lab.stdout[-3000:] + quick_lab.stderr
    reports = fleet.user_dir / "reports"
    for name in LAB_HOSTS:
        assert f"{name}: ok" in quick_lab.stdout
        (run,) = (reports / name / "runs").glob("*.json")
        doc = json.loads(run.read_text())
        assert {k: v["status"] for k, v in doc["experiments"].items()} == dict.fromkeys(
            ["fsync_bench", "crash", "ceiling"], "ok"
        ), name
        assert (reports / name / "report.md").is_file()
    # the sudo host's vaulted password was tried in the preflight, before any work
    run_id = quick_lab.stdout.rsplit("lab run ", 1)[1].split(":")[0]
    events = (reports / ".artifacts" / run_id / "site" / "stdout").read_text()
    assert "preflight | Check that become works with the sudo password given" in events
    # the bastion host kept the run's lab venv it was given (only pip's transport options differ); the sudo
    # host made its own
    actions = {}
    for path in (reports / ".artifacts" / run_id / "site" / "job_events").glob("*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if (
            event.get("event") == "runner_on_ok"
            and data.get("task") == "Provision the lab venv with the pinned packages"
        ):
            actions[data["host"]] = result_line.parse(data["res"]["stdout"])["action"]
    assert actions == {BASTION: "kept", SUDO: "created"}, actions


def test_a_wrong_sudo_password_stops_the_host_in_one_line_before_any_work(fleet, quick_lab):
    proc = _disklab(fleet, "run", "--check", "-i", "inventory.yml", *VAULT, "-l", SUDO,
                    "-e", "ansible_become_password=wrong")  # fmt: skip
    assert proc.returncode == 1
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"{SUDO}: ")]
    assert line.startswith(
        f"{SUDO}: check failed at 'preflight | Check that become works with the sudo password given': "
    )
    assert line.endswith("Incorrect sudo password"), line  # Ansible's words ("Task failed: " before them)


def test_the_typed_sudo_password_is_asked_once_and_tried_first(fleet, quick_lab, tmp_path):
    plain, env = _without_vault(fleet, tmp_path)
    small = ["-e", LAB_STEPS, *_tiny()]  # the preflight's disk check is for these sizes (as in quick_lab)
    args = ["run", "--check", "-i", "inventory.yml", "-l", SUDO, "-K", *small]
    proc = _disklab(fleet, *args, cwd=plain, env=env, stdin=fleet.sudo_password + "\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{SUDO}: check ok" in proc.stdout
    assert (
        proc.stderr.count("BECOME password") == 1
    )  # disklab asked; Ansible's own prompt was answered for it
    proc = _disklab(fleet, *args, cwd=plain, env=env, stdin="wrong\n")
    assert proc.returncode == 1 and "Incorrect sudo password" in proc.stdout


def test_an_unreachable_jump_host_is_one_line_naming_the_host(fleet, quick_lab):
    fleet.stop_sshd(fleetmod.BASTION)
    try:
        proc = _disklab(fleet, "audit", "-i", "inventory.yml", *VAULT, "-l", BASTION)
    finally:
        fleet.start_sshd(fleetmod.BASTION)
    assert proc.returncode == 1
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"{BASTION}: ")]
    assert line.startswith(f"{BASTION}: unreachable at ") and "\n" not in line, proc.stdout
    assert "jump host" in line or "Connection closed" in line or "ProxyJump" in line or "port 22" in line, (
        line
    )


def test_down_leaves_nothing_behind(fleet):
    state = json.loads(fleet.state_path.read_text())
    nodes = [*state["hosts"].values(), state["bastion"]]
    pids = [n[k]["pid"] for n in nodes for k in ("holder", "sshd")]
    loops = {h["loop"] for h in state["hosts"].values()}
    assert fleet.down() == []
    assert not [ns for ns in fleetmod.fleet_netns() if ns.startswith(f"dlab-{state['fleet_id']}-")]
    assert not [p for p in pids if fleetmod.alive(p)]
    backing = json.loads(subprocess.run(["losetup", "-J"], capture_output=True, text=True).stdout or "{}")
    assert not [d for d in backing.get("loopdevices", []) if d["name"] in loops]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert state["bridge"] not in links and f"dlab{state['fleet_id']}" not in links
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    assert state["inner_route"] not in routes and f"10.213.{state['fleet_id']}." not in routes
    assert not fleet.state_dir.exists()
    # the user's ControlPersist masters (ssh -F <state>/user/ssh_config) end with their server
    deadline = time.monotonic() + 10
    while _processes_naming(fleet.state_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_naming(fleet.state_dir) == []


def _processes_naming(path: Path) -> list[str]:
    """The command lines of this machine's live processes (not zombies) that name ``path``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:  # it exited while we looked
            continue
        if any(str(path) in a for a in args) and fleetmod.alive(int(cmdline.parent.name)):
            found.append(" ".join(args))
    return found


def test_a_failed_up_removes_the_jump_host_and_its_route(monkeypatch):
    monkeypatch.setitem(fleetmod.MKFS, "xfs", ["false"])  # host1's mkfs fails after the jump host and host0
    state_dir = Path(tempfile.mkdtemp(prefix="dluw", dir="/tmp"))
    fid = _free_fleet_id()
    with pytest.raises(fleetmod.FleetError, match="false"):
        Fleet.up(3, state_dir, fleet_id=fid, size_mib=MIN_SIZE_MIB, profiles=list(PROFILES.values()))
    assert not [ns for ns in fleetmod.fleet_netns() if ns.startswith(f"dlab-{fid}-")]
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    assert f"10.214.{fid}." not in routes and f"10.213.{fid}." not in routes
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"dlab{fid}" not in links and f"dlab-br{fid}" not in links
    assert not state_dir.exists()
