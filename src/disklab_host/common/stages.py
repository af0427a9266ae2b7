"""The load lab's readiness stages: the one list, in the order one load process reaches them.

Every stage is timed from one start point, the moment just before the load call
(loadlab/load_one.py), to its stop event (the terms of DESIGN.md):

- ``loader_return``: the load call returned;
- ``module_populated``: a constructed DecoderLM holds the weights;
- ``device_placed``: the module is on the GPU and the backend synchronized (only where a device is);
- ``first_response``: one forward pass of a fixed prompt produced its next-token id on the host;
- ``all_touched``: every byte of the loaded tensors read once on the host.

``all_touched`` comes last on purpose: touching every byte first would make every
page resident before the first response, and the residency read at
``first_response`` would say nothing about what the forward pass itself needed.
The host (steps/load.py, load_one.py), the report (disklab.sections.load,
disklab.figures, disklab.fleet, disklab.answers) and the schema
(schema/experiments/load.schema.json, whose ``stage_name`` enum tests/test_stored.py
checks against this list) read the stages from here. Standard library only.
"""

from __future__ import annotations

STAGES: tuple[str, ...] = (
    "loader_return",
    "module_populated",
    "device_placed",
    "first_response",
    "all_touched",
)
# The stage whose I/O record the cold proof reads (loadlab/proof.py): the last, so it covers every read.
LAST = STAGES[-1]
# What each stop event is, in words the report uses.
MEANING: dict[str, str] = {
    "loader_return": "the load call returned",
    "module_populated": "a constructed DecoderLM holds the weights",
    "device_placed": "on the GPU and synchronized",
    "first_response": "one forward pass of a fixed short prompt produced its next-token id on the host",
    "all_touched": "every tensor summed once on the host",
}

# Load methods that return part of the state dict (loadlab/load_one.py): no module can hold it, so they
# stop at loader_return, device_placed and all_touched. Every other method yields the whole state dict,
# and its big-file and user-model cells populate a module and run the first response (steps/load.py).
PARTIAL_METHODS: tuple[str, ...] = ("one-tensor",)
