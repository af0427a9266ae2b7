"""Entry point of the shipped zipapp: ``python disklab_host.pyz COMMAND [ARGS]``.

Commands: ``lab`` (the lab runner), ``preflight``, ``audit``, ``powercut`` (the
simulator's command line), ``provision`` (the lab venv), ``stop`` (end a running
lab), ``together-start`` (wait for a together run's common start), ``together-prepare`` and
``together-load`` (a cold-start storm's shared files and one host's load in it), ``together-burst-*``
(a checkpoint burst's prepare, save, commit, read-back and clear), ``together-server-check`` and
``together-server-evict`` (a storage server's part). Each is a function
``main(argv)`` of its module (``module:function`` names another).
The archive's own path goes first on PYTHONPATH for every child process.
"""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {
    "lab": "disklab_host.lab",
    "preflight": "disklab_host.preflight",
    "audit": "disklab_host.audit.collect",
    "powercut": "disklab_host.powercut.simulate",
    "provision": "disklab_host.provision.command",
    "stop": "disklab_host.stop",
    "together-start": "disklab_host.together.start",
    "together-prepare": "disklab_host.together.load:main_prepare",
    "together-load": "disklab_host.together.load:main_load",
    "together-burst-prepare": "disklab_host.together.burst:main_prepare",
    "together-burst-save": "disklab_host.together.burst:main_save",
    "together-burst-commit": "disklab_host.together.burst:main_commit",
    "together-burst-read": "disklab_host.together.burst:main_read",
    "together-burst-clear": "disklab_host.together.burst:main_clear",
    "together-server-check": "disklab_host.together.server:main_check",
    "together-server-evict": "disklab_host.together.server:main_evict",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: disklab_host {{{','.join(COMMANDS)}}} [ARGS]", file=sys.stderr)
        return 2
    from disklab_host.common.child import child_env

    os.environ.update(child_env())
    os.umask(0o022)
    module, _, function = COMMANDS[argv[0]].partition(":")
    return getattr(importlib.import_module(module), function or "main")(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
