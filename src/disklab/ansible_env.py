"""The Ansible configuration ansible-playbook runs with under `disklab run` and `disklab audit`.

The user's configuration stays in force: the ``ansible.cfg`` Ansible itself
would read (``ANSIBLE_CONFIG``, ``./ansible.cfg``, ``~/.ansible.cfg``,
``/etc/ansible/ansible.cfg``, found by Ansible's own code) and every
``ANSIBLE_*`` variable of the environment. disklab's own ``ansible.cfg`` is
then a set of defaults: each of its settings reaches Ansible (as the setting's
environment variable) only where the user's configuration leaves that setting
at Ansible's default. Where both set it and the values differ, the user's wins
and one line says so. Without any user ``ansible.cfg``, disklab's own file is
the one Ansible reads, as under plain ``ansible-playbook`` from a checkout.

ansible-runner, which disklab drives, sets a few variables of its own
(``ANSIBLE_STDOUT_CALLBACK=awx_display``, ``ANSIBLE_RETRY_FILES_ENABLED``,
``ANSIBLE_HOST_KEY_CHECKING=False`` when unset, ``ANSIBLE_CALLBACK_PLUGINS``
over an ``ansible.cfg``'s ``callback_plugins``). Those that would silently
replace a user's setting are passed on from the user's configuration here,
and the user's stdout callback is kept: ansible-runner's ``awx_display``, whose
events disklab follows, wraps it (it writes Ansible's output in the run's
artifacts). One that Ansible cannot load (``yaml``, which ansible-core
routes to community.general, where it was removed) is refused in one line
before the run, as ansible-playbook itself stops on it.

disklab's collection (``disklab.lab``: its roles and its fetch action) is found
by putting the directory that holds it first on the collections path, before
the user's own.
"""

from __future__ import annotations

import configparser
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# disklab's values that are not in its ansible.cfg, because plain ansible-playbook from a checkout does not
# need them: a local temp directory any user can make (a HOME may be read-only), and output without colour
# codes (the end of Ansible's output is quoted in disklab's own messages).
RUNNER_DEFAULTS = {
    ("defaults", "local_tmp"): str(Path(tempfile.gettempdir()) / "disklab-ansible-local"),
    ("defaults", "nocolor"): "True",
}

# Settings ansible-runner sets itself (ansible_runner/config/_base.py), with what disklab does about each.
# The stdout callback is how disklab follows each host, so ansible-runner's must stay: it makes the user's own
# callback (ORIGINAL_STDOUT_CALLBACK) its base class, which must then load.
_RUNNER_FORCED_CALLBACK = "awx_display"

# ansible-playbook's loading of its stdout callback under ansible-runner (TaskQueueManager.load_callbacks):
# the user's callback itself (exit 3 when Ansible finds none of that name; Ansible's warning says why), then
# awx_display, which makes it its base class (ORIGINAL_STDOUT_CALLBACK), and its options (a traceback, exit
# 1, when awx_display cannot wrap it: it reads the callback's option definitions, which oneline lacks).
_CALLBACK_PROBE = """
import sys
from ansible.plugins.loader import callback_loader, init_plugin_loader
init_plugin_loader()
if callback_loader.get(sys.argv[1], class_only=True) is None:
    sys.exit(3)
wrapper = callback_loader.get("awx_display")
getattr(wrapper, "_init_callback_methods", lambda: None)()
wrapper.set_options()
"""

# Where the settings disklab's ansible.cfg names are defined: Ansible's own, the ssh connection's (pipelining,
# retries) and the default stdout callback's (result_format).
_PLUGINS = (("connection", "ssh"), ("callback", "default"))


_TEMP_TYPES = ("temppath", "tmppath", "tmp")

_SET_OTHERWISE = {("defaults", k) for k in ("inventory", "collections_path", "stdout_callback")}


class AnsibleConfigError(ValueError):
    """A setting of the user's Ansible configuration that ansible-playbook would stop on; one line."""


@dataclass
class AnsibleEnv:
    """What ansible-playbook gets: its environment variables, and the lines that say what disklab decided."""

    env: dict[str, str]
    config_file: Path | None  # the user's ansible.cfg in force, or None when Ansible reads disklab's own
    notes: list[str] = field(default_factory=list)


@dataclass
class _Setting:
    section: str
    key: str
    name: str  # the setting's name in Ansible's definitions (DEFAULT_FORKS, reconnection_retries ...)
    plugin: tuple[str, str] | None  # (type, name) for a plugin's option, None for Ansible's own
    env_name: str | None  # its environment variable, None when it can be set only in an ansible.cfg
    value: str  # disklab's value, as written in its ansible.cfg
    value_type: str | None  # Ansible's type of the setting (int, bool, path ...)


def _manager(config_file: Path | None):
    """An Ansible ConfigManager reading ``config_file`` and the environment, disklab's plugins known."""
    from ansible import constants
    from ansible.config.manager import ConfigManager
    from ansible.plugins.loader import callback_loader, connection_loader

    connection_loader.get("ssh", class_only=True)  # registers the plugin's options in constants.config
    callback_loader.get("default", class_only=True)
    manager = ConfigManager(str(config_file) if config_file else "")  # "": no file (None would search)
    if not config_file:
        manager._config_file = None  # and none is read later either (Ansible's own state without a file)
    for definition in manager._base_defs.values():  # this manager's own copy of Ansible's base.yml
        if definition.get("type") in _TEMP_TYPES:
            # Read as the path it names: Ansible's temp-dir type makes the directory and a new one inside it
            # on every read, and without ANSIBLE_HOME the default's template would be made literally, as a
            # directory named '{{ ANSIBLE_HOME ~ "' in the user's current directory.
            definition["type"] = "path"
    for ptype, pname in _PLUGINS:
        manager.initialize_plugin_configuration_definitions(
            ptype, pname, constants.config.get_configuration_definitions(ptype, pname)
        )
    return manager


def _settings(manager, values: dict[tuple[str, str], str]) -> list[_Setting]:
    """Each (section, key) of ``values`` matched to the Ansible setting an ansible.cfg line of it sets."""
    out = []
    for (section, key), value in values.items():
        for plugin in (None, *_PLUGINS):
            defs = manager.get_configuration_definitions(*(plugin or ()))
            name = next(
                (n for n, d in defs.items() if {"section": section, "key": key} in _ini_entries(d)), None
            )
            if name is not None:
                envs = [e["name"] for e in defs[name].get("env") or [] if "name" in e]
                kind = defs[name].get("type")
                kind = "path" if kind in _TEMP_TYPES else kind  # compared as a path: nothing is made
                out.append(_Setting(section, key, name, plugin, envs[0] if envs else None, value, kind))
                break
        else:
            raise ValueError(f"disklab's ansible.cfg: [{section}] {key} is not an Ansible setting")
    return out


def _ini_entries(definition: dict) -> list[dict]:
    return [{"section": i.get("section"), "key": i.get("key")} for i in definition.get("ini") or []]


def _value_and_origin(manager, setting: _Setting):
    ptype, pname = setting.plugin or (None, None)
    return manager.get_config_value_and_origin(setting.name, plugin_type=ptype, plugin_name=pname)


def disklab_values(config_file: Path) -> dict[tuple[str, str], str]:
    """disklab's ansible.cfg as {(section, key): value}, less what disklab sets another way: the
    inventory (disklab passes -i), the collections path (:func:`build` puts disklab's first) and the stdout
    callback (ansible-runner's, named when the user set one)."""
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    parser.read(config_file, encoding="utf-8")
    return {
        (section, key): value
        for section in parser.sections()
        for key, value in parser.items(section, raw=True)
        if (section, key) not in _SET_OTHERWISE
    }


def build(disklab_cfg: Path, collections_root: Path, environ: dict[str, str] | None = None) -> AnsibleEnv:
    """The environment for ansible-playbook: the user's configuration, then disklab's where it sets nothing.

    ``disklab_cfg`` is disklab's own ansible.cfg; ``collections_root`` the
    directory holding ``ansible_collections/disklab/lab``. Reads the user's
    configuration the way Ansible does, from the current directory and
    ``environ`` (default: this process's environment, which must be the one
    ansible-playbook is given).
    """
    from ansible.config.manager import ensure_type, find_ini_config_file

    environ = dict(os.environ if environ is None else environ)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environ)  # Ansible's config code reads os.environ itself
    try:
        found = find_ini_config_file()
        user_cfg = Path(found) if found else None
        if user_cfg is not None and user_cfg.resolve() == Path(disklab_cfg).resolve():
            user_cfg = None  # run from the checkout itself: Ansible reads disklab's own file
        user = _manager(user_cfg)
        values = {**disklab_values(disklab_cfg), **RUNNER_DEFAULTS}
        env: dict[str, str] = {"ANSIBLE_CONFIG": str(user_cfg or disklab_cfg)}
        notes: list[str] = []
        for setting in _settings(user, values):
            value, origin = _value_and_origin(user, setting)
            if origin == "default":
                if setting.env_name:
                    env[setting.env_name] = setting.value
                elif user_cfg is not None:
                    notes.append(
                        f"[{setting.section}] {setting.key} can be set only in an ansible.cfg, and yours "
                        f"({user_cfg}) leaves it at Ansible's default {value}; disklab's ansible.cfg uses "
                        f"{setting.value} (add it to yours to have it)"
                    )
                continue
            mine = ensure_type(setting.value, setting.value_type)
            if str(value) != str(mine):
                notes.append(
                    f"[{setting.section}] {setting.key} = {value} from {_origin(origin)} is used, not "
                    f"disklab's {mine}: disklab never replaces a setting you made"
                )
        _keep_runner_overrides(user, env, notes)
        home = {"ANSIBLE_HOME": user.get_config_value("ANSIBLE_HOME")}  # the default path is a template of it
        paths = user.get_config_value("COLLECTIONS_PATHS", variables=home) or []
        env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join([str(collections_root), *[str(p) for p in paths]])
        _check_stdout_callback(user, {**environ, **env})
        return AnsibleEnv(env=env, config_file=user_cfg, notes=notes)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _origin(origin: str) -> str:
    """Ansible's origin of a value ('env: ANSIBLE_FORKS' or a file's path) in words."""
    if origin.startswith("env: "):
        return f"your environment ({origin[5:]})"
    return origin


def _keep_runner_overrides(user, env: dict[str, str], notes: list[str]) -> None:
    """Pass on the user's settings that ansible-runner would replace, and say which one it must replace."""
    value, origin = user.get_config_value_and_origin("DEFAULT_STDOUT_CALLBACK")
    if origin != "default" and value != _RUNNER_FORCED_CALLBACK:
        notes.append(
            f"stdout_callback = {value} from {_origin(origin)} writes Ansible's output, kept in the run's "
            f"artifacts (stdout): ansible-runner's {_RUNNER_FORCED_CALLBACK} wraps it while disklab runs, "
            "and disklab follows each host from its events"
        )
    value, origin = user.get_config_value_and_origin("HOST_KEY_CHECKING")
    env.setdefault("ANSIBLE_HOST_KEY_CHECKING", str(value))  # ansible-runner would turn it off
    value, origin = user.get_config_value_and_origin("RETRY_FILES_ENABLED")
    if origin != "default" and value:
        notes.append(
            f"retry_files_enabled = True from {_origin(origin)} is turned off by ansible-runner while "
            "disklab runs (`disklab run --retry-failed` re-runs the hosts that failed)"
        )
    value, origin = user.get_config_value_and_origin("DEFAULT_CALLBACK_PLUGIN_PATH")
    if origin != "default" and not origin.startswith("env: ") and value:
        # ansible-runner puts its own directory after these; without them it would replace the ini's
        env["ANSIBLE_CALLBACK_PLUGINS"] = os.pathsep.join(str(p) for p in value)


def _check_stdout_callback(user, environ: dict[str, str]) -> None:
    """AnsibleConfigError when the user's stdout callback is one Ansible cannot load with ``environ`` (the
    environment ansible-playbook gets). awx_display would then crash ansible-playbook with a traceback
    ("NoneType takes no arguments"); plain ansible-playbook stops with "Could not load 'NAME' callback
    plugin". Asked of a child Python (Ansible's plugin loader is set up once per process, from its
    environment), only when the user set a callback."""
    import subprocess
    import sys

    from ansible_runner.utils import get_callback_dir

    value, origin = user.get_config_value_and_origin("DEFAULT_STDOUT_CALLBACK")
    if origin == "default" or value == _RUNNER_FORCED_CALLBACK:
        return
    paths = os.pathsep.join(p for p in (environ.get("ANSIBLE_CALLBACK_PLUGINS"), get_callback_dir()) if p)
    with tempfile.TemporaryDirectory(prefix="disklab-callback-") as events:  # where awx_display writes
        probe = subprocess.run(
            [sys.executable, "-c", _CALLBACK_PROBE, str(value)],
            env={
                **environ,
                "ANSIBLE_CALLBACK_PLUGINS": paths,
                "ORIGINAL_STDOUT_CALLBACK": str(value),
                "AWX_ISOLATED_DATA_DIR": events,
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if probe.returncode == 0:
        return
    said = [ln.strip() for ln in (probe.stderr + probe.stdout).splitlines() if ln.strip()]
    setting = f"stdout_callback = {value} from {_origin(origin)}"
    if probe.returncode == 3:
        errors = [ln.removeprefix("[WARNING]:").strip() for ln in said if "rror" in ln]
        why = errors[0] if errors else "no plugin of that name is on Ansible's callback or collections paths"
        raise AnsibleConfigError(
            f"{setting}: Ansible cannot load this callback plugin ({why}), and ansible-playbook stops on it "
            "too; unset it, or install what provides it (for YAML output, "
            "ANSIBLE_CALLBACK_RESULT_FORMAT=yaml with the default callback)"
        )
    why = said[-1] if said else f"exit status {probe.returncode}"  # a traceback's last line: the exception
    raise AnsibleConfigError(
        f"{setting}: ansible-runner's {_RUNNER_FORCED_CALLBACK}, which disklab follows each host through, "
        f"cannot wrap this callback ({why}); unset it for disklab, or use one that it can (default, minimal)"
    )
