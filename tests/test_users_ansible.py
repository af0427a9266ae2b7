"""The user's own Ansible configuration under `disklab run`/`audit` (disklab.ansible_env), and the options
passed on to ansible-playbook (disklab.passthrough). No host: these read configuration and command lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from conftest import REPO
from disklab import ansible_env, passthrough
from disklab.runner import collections_root

DISKLAB_CFG = REPO / "ansible.cfg"


def _build(tmp_path: Path, monkeypatch, cfg: str | None = None, **environ: str) -> ansible_env.AnsibleEnv:
    """ansible_env.build from ``tmp_path`` as cwd, ``cfg`` its ./ansible.cfg, and only ``environ`` set."""
    if cfg is not None:
        (tmp_path / "ansible.cfg").write_text(cfg)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return ansible_env.build(
        DISKLAB_CFG, collections_root(), {"HOME": str(home), "PATH": "/usr/bin", **environ}
    )


@pytest.mark.heavy
def test_without_a_users_configuration_ansible_reads_disklabs(tmp_path, monkeypatch):
    got = _build(tmp_path, monkeypatch)
    assert got.config_file is None and got.env["ANSIBLE_CONFIG"] == str(DISKLAB_CFG)
    assert got.notes == []
    assert got.env["ANSIBLE_FORKS"] == "32" and got.env["ANSIBLE_PIPELINING"] == "True"
    assert got.env["ANSIBLE_HOST_KEY_CHECKING"] == "True"  # ansible-runner would set False when it is unset
    first, *rest = got.env["ANSIBLE_COLLECTIONS_PATH"].split(":")
    assert Path(first) == REPO / "playbooks" / "collections"
    assert (Path(first) / "ansible_collections" / "disklab" / "lab" / "galaxy.yml").is_file()
    assert str(tmp_path / "home" / ".ansible" / "collections") in rest  # Ansible's default path kept after it


def test_the_users_ansible_cfg_stays_in_force_and_each_difference_is_one_line(tmp_path, monkeypatch):
    cfg = (
        "[defaults]\nforks = 5\nremote_user = alice\nprivate_key_file = keys/id\n"
        "callback_plugins = /opt/ara/cb\nstdout_callback = minimal\n"
        "[ssh_connection]\npipelining = False\nssh_args = -F ssh_config\n"
    )
    got = _build(tmp_path, monkeypatch, cfg)
    assert got.config_file == tmp_path / "ansible.cfg" and got.env["ANSIBLE_CONFIG"] == str(
        tmp_path / "ansible.cfg"
    )
    # nothing the user set is replaced by an environment variable (which would beat the file)
    for name in ("ANSIBLE_FORKS", "ANSIBLE_PIPELINING", "ANSIBLE_REMOTE_USER", "ANSIBLE_PRIVATE_KEY_FILE",
                 "ANSIBLE_SSH_ARGS", "ANSIBLE_STDOUT_CALLBACK"):  # fmt: skip
        assert name not in got.env, name
    # what the user left unset gets disklab's value
    assert got.env["ANSIBLE_SSH_RETRIES"] == "3" and got.env["ANSIBLE_PYTHON_INTERPRETER"] == "auto_silent"
    # ansible-runner would replace an ini's callback_plugins with its own directory: passed on
    assert got.env["ANSIBLE_CALLBACK_PLUGINS"] == "/opt/ara/cb"
    notes = "\n".join(got.notes)
    assert f"[defaults] forks = 5 from {tmp_path / 'ansible.cfg'} is used, not disklab's 32" in notes
    assert "[ssh_connection] pipelining = False" in notes and "not disklab's True" in notes
    assert "stdout_callback = minimal from" in notes and "awx_display wraps it" in notes  # kept, not replaced
    assert "internal_poll_interval can be set only in an ansible.cfg" in notes
    assert len(got.notes) == 4, got.notes  # one line each, and none for the settings that agree


def test_reading_the_configuration_makes_no_directory_anywhere(tmp_path, monkeypatch):
    # Ansible's temp-dir settings make a directory (and a new one inside it) when read; read without
    # ANSIBLE_HOME, the default's template was made literally in the current directory
    # ('{{ ANSIBLE_HOME ~ "/tmp" }}'), on every disklab run.
    got = _build(tmp_path, monkeypatch, "[defaults]\nlocal_tmp = mytmp\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ansible.cfg", "home"]
    assert list((tmp_path / "home").iterdir()) == []
    assert "ANSIBLE_LOCAL_TEMP" not in got.env  # the user's own local_tmp stays in force
    assert any("local_tmp = " in n and "mytmp" in n for n in got.notes), got.notes


def test_ansible_config_and_ansible_variables_of_the_environment_win(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere.cfg"
    elsewhere.write_text("[defaults]\nforks = 7\n")
    got = _build(
        tmp_path,
        monkeypatch,
        "[defaults]\nforks = 5\n",
        ANSIBLE_CONFIG=str(elsewhere),
        ANSIBLE_SSH_RETRIES="9",
    )
    assert got.config_file == elsewhere  # Ansible's order: ANSIBLE_CONFIG before ./ansible.cfg
    assert "ANSIBLE_SSH_RETRIES" not in got.env  # the user's own variable is left as it is
    assert any("retries = 9 from your environment (ANSIBLE_SSH_RETRIES)" in n for n in got.notes), got.notes
    assert any("forks = 7 from " + str(elsewhere) in n for n in got.notes), got.notes


def test_run_from_the_checkout_reads_disklabs_own_file_without_a_line(monkeypatch):
    monkeypatch.chdir(REPO)
    got = ansible_env.build(DISKLAB_CFG, collections_root(), {"HOME": "/nonexistent", "PATH": "/usr/bin"})
    assert got.config_file is None and got.notes == []


def _args(**kw) -> Namespace:
    base = dict(check=False, limit=None, extra=None, user=None, private_key=None, vault_id=None,
                vault_password_file=None, become=False, forks=None, tags=None, skip_tags=None, verbose=0,
                ask_become_pass=False, ask_vault_pass=False)  # fmt: skip
    return Namespace(**{**base, **kw})


def test_named_options_and_everything_after_the_double_dash_reach_ansible_playbook(tmp_path):
    extra = tmp_path / "extra.yml"
    extra.write_text("lab_run_profile: quick\n")
    opts = passthrough.build(
        _args(extra=[f"@{extra}", "lab_run_steps=crash", '{"lab_run_realfs": false}'], private_key="~/k",
              vault_id=["prod@prompt"], vault_password_file=["vp"], tags="crash", forks=4, verbose=2),
        ["--become-user", "lab", "--ssh-common-args=-o ConnectTimeout=5", "-l", "host1", "-C"],
    )  # fmt: skip
    # what Ansible makes of them (NAME=VALUE is a string, as ansible-playbook -e gives it), each passed on
    assert opts.variables == {"lab_run_profile": "quick", "lab_run_steps": "crash", "lab_run_realfs": False}
    assert opts.connect[:6] == ["-e", f"@{extra.resolve()}", "-e", "lab_run_steps=crash",
                                "-e", '{"lab_run_realfs": false}']  # fmt: skip
    assert opts.extravars == {}  # disklab adds nothing of its own here
    assert "--private-key" in opts.connect and str(Path("~/k").expanduser().resolve()) in opts.connect
    assert opts.connect[opts.connect.index("--vault-id") + 1] == "prod@prompt"
    at = opts.connect.index("--become-user")
    assert opts.connect[at : at + 3] == ["--become-user", "lab", "--ssh-common-args=-o ConnectTimeout=5"]
    assert opts.limit == "host1" and opts.check and opts.select == ["--tags", "crash", "--check"]
    assert "-vv" in opts.connect and opts.connect[opts.connect.index("--forks") :][:2] == ["--forks", "4"]


@pytest.mark.parametrize(
    ("kw", "rest", "says"),
    [
        ({}, ["-i", "other.yml"], "use disklab's -i INVENTORY"),
        ({}, ["--inventory=other.yml"], "use disklab's -i INVENTORY"),
        ({"limit": "host0"}, ["--limit", "host1"], "`-- --limit host1` and disklab's --limit host0"),
        ({}, ["-e", "disklab_run_id=X"], "sets disklab_run_id, which disklab sets for every run"),
        ({"extra": ['{"disklab_reports": "/x"}']}, [], "use disklab's --reports DIR"),
        ({}, ["--list-hosts"], "plain ansible-playbook"),
        ({}, ["--step"], "plain ansible-playbook"),
        ({"extra": ["novalue"]}, [], "-e expects NAME=VALUE, @FILE or a JSON mapping"),
        ({"extra": ["@/nonexistent/vars.yml"]}, [], "/nonexistent/vars.yml does not exist"),
        ({"forks": 0}, [], "--forks must be >= 1, got 0"),
        # a bracketed NAME=VALUE of disklab's is a string to Ansible: refused with the JSON that gives a list
        (
            {"extra": ["lab_run_steps=[fsync_bench,crash]"]},
            [],
            """give it as JSON: -e '{"lab_run_steps": ["fsync_bench", "crash"]}'""",
        ),
        ({"extra": ["lab_run_load_loader_knobs={a:1}"]}, [], "not a mapping; give it as JSON: -e"),
    ],
)
def test_an_option_that_conflicts_with_disklabs_is_refused_naming_both(kw, rest, says):
    with pytest.raises(passthrough.PassthroughError, match=None) as err:
        passthrough.build(_args(**kw), rest)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_vaulted_extra_vars_file_is_passed_unread(tmp_path):
    vaulted = tmp_path / "secret.yml"
    vaulted.write_text("$ANSIBLE_VAULT;1.1;AES256\n6162\n")
    opts = passthrough.build(_args(extra=[f"@{vaulted}"]), [])
    assert opts.connect == ["-e", f"@{vaulted.resolve()}"] and opts.variables == opts.extravars == {}
    # run without its password, Ansible stops before any host: the one line names that -e file
    from disklab import diagnose

    inventory = tmp_path / "inv.yml"
    inventory.write_text("all: {hosts: {h: {}}}\n")
    said = diagnose.no_host_ran("ERROR! Attempting to decrypt but no vault secrets found", inventory,
                                [f"@{vaulted.resolve()}", "@" + str(inventory)])  # fmt: skip
    assert said == (
        f"-e @{vaulted.resolve()}: vault-encrypted, and no vault password was given: add "
        "--vault-password-file FILE, --vault-id ID or --ask-vault-pass"
    )


# Every form of -e (issue 40, item 4), each as one ansible-playbook command line gives it, in order.
_EXTRA_FORMS = {
    "several NAME=VALUE in one": ["t_profile=full t_realfs=true"],
    "a number is a string": ["t_blocks=100"],
    "quoted values": ["t_a='hello world' t_b=\"x=y\" t_c=' padded '"],
    "a YAML file": ["@vars.yml"],
    "a JSON file": ["@vars.json"],
    "inline JSON": ['{"t_blocks": 100, "t_steps": ["crash"], "t_realfs": false}'],
    "inline YAML": ["{t_blocks: 100, t_steps: [crash], t_realfs: no, t_s: '08'}"],
    "later ones win": ["t_a=1", '{"t_a": 2, "t_b": 3}', "@vars.yml", "t_b=x"],
}

# Prints every t_* variable of the play as JSON into $T_OUT: what ansible-playbook made of its -e.
_SHOW_VARS = """
- name: Show the extra vars
  hosts: localhost
  gather_facts: false
  connection: local
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    __names: "{{ query('ansible.builtin.varnames', '^t_') }}"
  tasks:
    - name: Write them as JSON
      ansible.builtin.copy:
        dest: "{{ lookup('ansible.builtin.env', 'T_OUT') }}"
        content: "{{ dict(__names | zip(query('ansible.builtin.vars', *__names))) | to_json }}"
        mode: "0644"
"""


@pytest.mark.slow
def test_every_form_of_extra_vars_means_what_it_means_to_ansible_playbook(tmp_path, monkeypatch):
    """The real ansible-playbook, given each -e as a user would, against disklab's reading of the same
    words: the same variables and types, and disklab passes the words on as they were (an @FILE made
    absolute). Before, NAME=VALUE was read as YAML: '100' was an integer, and 'a=1 b=2' one variable."""
    (tmp_path / "vars.yml").write_text("t_n: 8\nt_l: [a, b]\nt_d: {k: v}\nt_s: '08'\nt_b: yes\n")
    (tmp_path / "vars.json").write_text('{"t_n": 8, "t_l": ["a"], "t_none": null}')
    (tmp_path / "show.yml").write_text(_SHOW_VARS)
    (tmp_path / "empty.cfg").write_text("")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ANSIBLE_CONFIG": str(tmp_path / "empty.cfg")}
    bindir = Path(sys.executable).parent
    started = {}
    for name, values in _EXTRA_FORMS.items():
        out = tmp_path / f"{len(started)}.json"
        argv = [str(bindir / "ansible-playbook"), "-i", "localhost,", "show.yml"]
        for value in values:
            argv += ["-e", value]
        proc = subprocess.Popen(argv, cwd=tmp_path, env={**env, "T_OUT": str(out)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        started[name] = (proc, out)
    monkeypatch.chdir(tmp_path)
    for name, (proc, out) in started.items():
        said = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, f"{name}: {said}"
        ansible = json.loads(out.read_text())
        opts = passthrough.build(_args(extra=_EXTRA_FORMS[name]), [])
        assert json.loads(json.dumps(opts.variables)) == ansible, name
        words = [f"@{tmp_path / v[1:]}" if v.startswith("@") else v for v in _EXTRA_FORMS[name]]
        assert opts.connect == [w for v in words for w in ("-e", v)], name
    # the issue's two examples, as ansible-playbook has them
    issue = json.loads(started["several NAME=VALUE in one"][1].read_text())
    assert issue == {"t_profile": "full", "t_realfs": "true"}
    assert json.loads(started["a number is a string"][1].read_text()) == {"t_blocks": "100"}


def test_a_setting_given_as_a_string_reaches_the_host_in_the_type_its_argument_spec_declares():
    """-e lab_run_fsync_blocks=100 is '100' to Ansible (above); the lab_run role's config template passes
    each setting through disklab.lab.spec_typed with the role's own argument spec, so the host gets 100
    (its registry refused '100': "must be an integer > 0, got '100'") and true for 'true' (the realfs step
    read 'true' as off)."""
    import importlib.util

    import yaml

    path = REPO / "plugins" / "filter" / "spec_typed.py"
    module_spec = importlib.util.spec_from_file_location("spec_typed", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    specs = yaml.safe_load((REPO / "roles" / "lab_run" / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    given = {"lab_run_fsync_blocks": "100", "lab_run_realfs": "true", "lab_run_become_allowed": "no",
             "lab_run_load_loaders": "tensorizer", "lab_run_profile": "full", "lab_run_crash_repeats": 2,
             "lab_run_ceiling_mib": "lots", "lab_run_not_in_the_spec": "7"}  # fmt: skip
    assert module.spec_typed(given, options) == {
        "lab_run_fsync_blocks": 100,
        "lab_run_realfs": True,
        "lab_run_become_allowed": False,
        "lab_run_load_loaders": ["tensorizer"],
        "lab_run_profile": "full",
        "lab_run_crash_repeats": 2,
        "lab_run_ceiling_mib": "lots",  # not an int: left for the spec's validation, which refuses it
        "lab_run_not_in_the_spec": "7",
    }
    template = (REPO / "roles" / "lab_run" / "templates" / "config.json.j2").read_text()
    assert "disklab.lab.spec_typed(spec.argument_specs.main.options)" in template


def test_the_become_and_vault_prompts_are_asked_once_before_any_host():
    asked = []
    opts = passthrough.build(_args(ask_become_pass=True), ["--ask-vault-pass"])
    answers = opts.prompts(ask=lambda prompt: asked.append(prompt) or f"pw for {prompt}")
    assert asked == ["BECOME password: ", "Vault password: "]
    assert answers == {passthrough.BECOME_PROMPT: "pw for BECOME password: ",
                       passthrough.VAULT_PROMPT: "pw for Vault password: "}  # fmt: skip
    assert "--ask-become-pass" in opts.connect and "--ask-vault-pass" in opts.connect
    assert opts.extravars["lab_run_check_become"] is True  # the preflight tries the password first


def test_the_cli_refuses_a_conflict_in_one_line_before_any_work(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "disklab.cli", "--reports", str(tmp_path / "reports"),
         "audit", "--", "-i", "x.yml"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == "disklab: `-- -i`: disklab sets this itself; use disklab's -i INVENTORY\n"
    assert not (tmp_path / "reports").exists()  # refused before anything was made


def test_help_names_the_common_ansible_options():
    out = subprocess.run([sys.executable, "-m", "disklab.cli", "run", "--help"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    for option in ("-K, --ask-become-pass", "--vault-id", "--vault-password-file", "--private-key", "@FILE",
                   "-l LIMIT, --limit LIMIT", "after --"):  # fmt: skip
        assert option in out, option


@pytest.mark.slow
def test_ara_records_each_run_named_and_labelled_with_its_run_id(tmp_path):
    """ARA enabled the way its docs say (callback_plugins in the user's ansible.cfg), offline client and
    sqlite: `disklab audit` runs on localhost and ARA holds the playbook by disklab's name and labels."""
    import sqlite3

    from ara.setup import callback_plugins

    (tmp_path / "ansible.cfg").write_text(f"[defaults]\ncallback_plugins = {callback_plugins}\n")
    (tmp_path / "inv.yml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: /usr/bin/python3\n      disklab_root: {tmp_path / 'root'}\n"
        "      lab_run_workbench_create: true\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "ARA_"))}
    env.update(ARA_API_CLIENT="offline", ARA_BASE_DIR=str(tmp_path / "ara"), PWD=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "disklab.cli", "audit", "-i", "inv.yml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = proc.stdout.rsplit("audit ", 1)[1].split(":")[0]
    db = sqlite3.connect(tmp_path / "ara" / "ansible.sqlite")
    ((playbook_id, name),) = db.execute("select id, name from playbooks").fetchall()
    assert name == f"disklab audit {run_id}"
    labels = {n for (n,) in db.execute(
        "select l.name from labels l join playbooks_labels pl on pl.label_id = l.id where pl.playbook_id = ?",
        (playbook_id,))}  # fmt: skip
    assert {"disklab", "kind:audits", f"run:{run_id}"} <= labels


@pytest.mark.heavy
def test_the_reports_directory_comes_from_disklab_reports_when_no_option_names_one(tmp_path):
    """DISKLAB_REPORTS (an AWX job's mounted volume, say) is the default reports directory; --reports wins."""
    env = {**os.environ, "DISKLAB_REPORTS": str(tmp_path / "kept")}
    proc = subprocess.run([sys.executable, "-m", "disklab.cli", "report"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and f"no reports directory at {tmp_path / 'kept'}" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "disklab.cli", "--reports", "other", "report"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "no reports directory at other" in proc.stderr
