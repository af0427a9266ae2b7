"""Filter ``disklab.lab.host_file``: a host's name as the file name the controller's store reads.

The fetched results and facts land in ``<incoming>/<run_id>/<name>.json``; the name is the host's name
through disklab_host.common.hostnames' one rule (``../x`` becomes ``%2E.%2Fx``), so no inventory name can
point a fetch outside the staging directory, and the store finds each host by the same rule::

    dest: "{{ lab_run_incoming_dir }}/{{ inventory_hostname | disklab.lab.host_file }}.json"

The rule is the collection's own (plugins/plugin_utils/hostnames.py, a link to the host package's
src/disklab_host/common/hostnames.py, standard library only), imported by its collection name: whatever
``disklab_host`` the controller's Python path holds, this filter applies the rule of its own collection.
Its documentation is plugins/filter/host_file.yml (``ansible-doc -t filter disklab.lab.host_file``).
"""

from __future__ import annotations

from ansible_collections.disklab.lab.plugins.plugin_utils import hostnames as _hostnames


def host_file(host) -> str:
    """The encoded name of ``host`` (disklab_host.common.hostnames.encode)."""
    return _hostnames.encode(str(host))


class FilterModule:
    def filters(self):
        return {"host_file": host_file}
