"""Filter ``disklab.lab.host_file``: a host's name as the file name the controller's store reads.

The fetched results and facts land in ``<incoming>/<run_id>/<name>.json``; the name is the host's name
through disklab_host.common.hostnames' one rule (``../x`` becomes ``%2E.%2Fx``), so no inventory name can
point a fetch outside the staging directory, and the store finds each host by the same rule::

    dest: "{{ lab_run_incoming_dir }}/{{ inventory_hostname | disklab.lab.host_file }}.json"
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

try:
    from disklab_host.common import hostnames as _hostnames
except ImportError:
    # The collection on its own (ansible-galaxy install), or beside an older disklab_host that has no
    # hostnames module: the collection's own src/ holds it, and it imports only the standard library.
    _path = Path(__file__).resolve().parents[2] / "src" / "disklab_host" / "common" / "hostnames.py"
    _spec = importlib.util.spec_from_file_location("_disklab_lab_hostnames", _path)
    _hostnames = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_hostnames)


def host_file(host) -> str:
    """The encoded name of ``host`` (disklab_host.common.hostnames.encode)."""
    return _hostnames.encode(str(host))


class FilterModule:
    def filters(self):
        return {"host_file": host_file}
