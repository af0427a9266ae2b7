# The documentation of the action plugin plugins/action/lab_clock.py, which does all the work on the
# controller (an action-only plugin's documentation lives in a module file of the same name).

DOCUMENTATION = r"""
---
module: lab_clock
short_description: Measure the host clock's offset to the controller's over the host's own connection
description:
  - Makes O(exchanges) NTP-style exchanges over the host's Ansible connection. Each reads the controller's
    clock, has the host print its clock in ns, and reads the controller's clock again. The host read its
    clock inside that round trip, so the offset is known within half of it.
  - Keeps the exchange with the smallest round trip, as NTP's clock filter does.
  - The exchanges run in one session of the host's Python, a line each way (over the local connection, or
    ssh sharing the connection's ControlMaster), so the login shell's start is outside every round trip.
    Another connection, a connection password, or a session that does not answer gets a shell command per
    exchange, C(date +%s%N) (the host's Python where date has no C(%N), as on BSD and macOS).
  - Where C(chronyc) answers on the host, reads C(chronyc -n -c tracking) and returns chronyd's own bound on
    the host clock's error (|system time| + root dispersion + root delay / 2).
  - With it every host can be given one common start on its own clock, the controller's start plus the
    host's offset, for the host package's C(together-start --at NS) to wait for (bench/together_start.yml).
version_added: 0.3.0
author: disklab developers (@disklab)
options:
  exchanges:
    description: How many exchanges the offset is taken from (1 to 100). In one session they come after a
      first exchange that opens the connection; with a command each, that first one is one of them.
    type: int
    default: 9
  python:
    description:
      - The host's Python, for the session and for a host whose date has no C(%N). By default its
        ansible_python_interpreter where that names one (not an C(auto) value), else the interpreter
        Ansible discovered on the host, else C(python3).
    type: str
attributes:
  check_mode:
    description: Reads clocks only; runs the same in check mode.
    support: full
  diff_mode:
    description: Not supported.
    support: none
  platform:
    description: Any POSIX host Ansible reaches.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Measure each host's clock offset to the controller
  disklab.lab.lab_clock:
    exchanges: 9
  register: __clock
"""

RETURN = r"""
offset_ns:
  description: The host's clock minus the controller's, in ns, from the exchange with the smallest round trip.
  returned: success
  type: int
round_trip_ns:
  description: That exchange's round trip on the controller's clock, in ns.
  returned: success
  type: int
uncertainty_ns:
  description: The bound on the offset's error, half that round trip, in ns.
  returned: success
  type: int
exchanges:
  description: How many exchanges the offset was taken from.
  returned: success
  type: int
round_trips_ns:
  description: Every exchange's round trip in ns, in order.
  returned: success
  type: list
  elements: int
method:
  description: How the exchanges ran, C(one session) or C(a command each).
  returned: success
  type: str
command:
  description: The shell command that read the host's clock in the first exchange (and in each, for
    C(a command each)).
  returned: success
  type: str
controller_clock:
  description: The controller clock the offset is to (CLOCK_REALTIME).
  returned: success
  type: str
chrony:
  description: chronyd's state and bound (bound_ns, synchronised, reference, stratum, system_time_s,
    root_delay_s, root_dispersion_s, leap_status), or null where chronyc did not answer.
  returned: success
  type: dict
chrony_why:
  description: Why there is no chrony bound, or an empty string.
  returned: success
  type: str
"""
