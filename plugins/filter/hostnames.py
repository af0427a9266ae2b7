"""Filters ``disklab.lab.host_file`` and ``host_file_refusal``: a host's name as the file name the
controller's store reads, and why a name makes none.

The fetched results and facts land in ``<incoming>/<run_id>/<name>.json``; the name is the host's name
through disklab_host.common.hostnames' one rule (``../x`` becomes ``%2E.%2Fx``, ``Web1`` ``Web1%u4``), so
no inventory name can point a fetch outside the staging directory, and the store finds each host by the
same rule. The playbooks' first tasks refuse a name the rule refuses (longer than its limit) before any
work, with ``host_file_refusal`` ('' for a name it takes)::

    dest: "{{ lab_run_incoming_dir }}/{{ inventory_hostname | disklab.lab.host_file }}.json"
    fail_msg: "{{ inventory_hostname | disklab.lab.host_file_refusal }}"

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


def host_file_refusal(host) -> str:
    """Why ``host`` makes no file name (the rule's ValueError, naming the host and the limit), or ''."""
    try:
        _hostnames.encode(str(host))
    except ValueError as exc:
        return f"{exc}: its reports directory cannot be named; give the host a shorter inventory name"
    return ""


class FilterModule:
    def filters(self):
        return {"host_file": host_file, "host_file_refusal": host_file_refusal}
