"""Action ``lab_run_fetch``: bring one file from the host to the controller in a single transfer.

ansible.builtin.fetch first runs the stat module on the host (a Python start there, about half a
second on every host) to learn the file's checksum. The results JSON needs none of that: the lab
runner writes it atomically before it writes exit.json, and the controller validates it against the
results schema before it stores anything. The file lands under a temporary name beside ``dest`` and is
renamed into place, so ``dest`` is never half-written.

Options: ``src`` (path on the host), ``dest`` (path on the controller; its directory is made).
"""

from __future__ import annotations

import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False  # it copies nothing to the host
    _VALID_ARGS = frozenset(("src", "dest"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        missing = [k for k in ("src", "dest") if not args.get(k)]
        if missing:
            raise AnsibleActionFail(f"lab_run_fetch needs {' and '.join(missing)}")
        dest = os.path.abspath(os.path.expanduser(str(args["dest"])))
        src = self._remote_expand_user(str(args["src"]))  # a ~ is the host's home (one shell echo, no module)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, part = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".fetch-", suffix=".part")
        os.close(fd)
        try:
            self._connection.fetch_file(src, part)
            size = os.path.getsize(part)
            if size == 0:
                raise AnsibleActionFail(f"{src} on the host is empty")
            os.replace(part, dest)
        except AnsibleActionFail:
            raise
        except Exception as exc:  # the connection's own error, in words
            raise AnsibleActionFail(f"could not fetch {src}: {exc}") from exc
        finally:
            if os.path.exists(part):
                os.unlink(part)
        return {**result, "changed": True, "src": src, "dest": dest, "size": size}
