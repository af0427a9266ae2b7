# The documentation of the action plugin plugins/action/lab_run_fetch.py, which does all the work on the
# controller (an action-only plugin's documentation lives in a module file of the same name, as Ansible's
# own fetch has it).

DOCUMENTATION = r"""
---
module: lab_run_fetch
short_description: Bring one file from the host to the controller in a single transfer
description:
  - Fetches O(src) from the host to O(dest) on the controller with one file transfer of the connection,
    without running a module on the host first (M(ansible.builtin.fetch) runs the stat module for a checksum).
  - The file lands under a temporary name beside O(dest) and is renamed into place, so O(dest) is never
    half-written. An empty O(src) fails.
  - disklab uses it for each host's results JSON, which the lab runner writes atomically and the controller
    validates against its schema before storing it.
version_added: 0.2.0
author: disklab developers (@disklab)
options:
  src:
    description: Path of the file on the host; a leading C(~) is the login user's home there.
    type: str
    required: true
  dest:
    description: Path on the controller; its directory is made.
    type: path
    required: true
attributes:
  check_mode:
    description: Not supported; disklab skips the fetch under --check.
    support: none
  diff_mode:
    description: Not supported.
    support: none
  platform:
    description: Any host Ansible reaches with a connection that can fetch files.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Fetch the results JSON to the controller
  disklab.lab.lab_run_fetch:
    src: ~/.disklab/runs/20261203T000000Z/results.json
    dest: /tmp/incoming/host1.json
"""

RETURN = r"""
src:
  description: The path on the host, with its C(~) expanded.
  returned: success
  type: str
dest:
  description: The path on the controller.
  returned: success
  type: str
size:
  description: The size of the fetched file in bytes.
  returned: success
  type: int
"""
