"""Filter ``disklab.lab.spec_typed``: settings with the types their role's argument spec gives them.

``ansible-playbook -e lab_run_fsync_blocks=100`` (and ``disklab run -e``, which reads ``-e`` as
ansible-playbook does) gives the string ``'100'``, and ``-e lab_run_realfs=true`` the string ``'true'``:
every ``NAME=VALUE`` is a string. The role's argument spec (``type: int``, ``type: bool``) accepts both, as
Ansible's own type checks convert them; the host package reads the settings as JSON, so it must get what
the spec accepted, 100 and true, not the strings. This filter converts each setting the spec names with
Ansible's own ArgumentSpecValidator (the code the spec's validation runs); a setting the spec does not
name, or one it cannot convert (already refused by that validation), is left as it was::

    {% set typed = settings | disklab.lab.spec_typed(spec_options) %}

Its documentation is plugins/filter/spec_typed.yml (``ansible-doc -t filter disklab.lab.spec_typed``).
"""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

# What of an option the conversion reads: its type and its elements' (no defaults, no required, no choices:
# those are the validation's, and a default must not appear here as if the user had set it).
_TYPE_KEYS = ("type", "elements")


def spec_typed(values: dict, options: dict) -> dict:
    """``values`` with each key that ``options`` names converted to its type (see the module's docstring)."""
    named = {k: v for k, v in values.items() if k in options}
    spec = {k: {key: options[k][key] for key in _TYPE_KEYS if key in options[k]} for k in named}
    converted = ArgumentSpecValidator(spec).validate(named).validated_parameters
    return {k: converted.get(k, v) if k in named else v for k, v in values.items()}


class FilterModule:
    def filters(self):
        return {"spec_typed": spec_typed}
