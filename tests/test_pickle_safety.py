"""pickle_safety: a crafted checkpoint, the installed torch.load's refusal, the marker, the report.

The step runs for real (real torch.save file, real torch.load in a child
process). Hand-edited sections stand in only for what this torch cannot do:
a version whose default lets the payload run.
"""

from __future__ import annotations

import copy
import inspect
import json
import pickle
import zipfile
from pathlib import Path

import jinja2
import pytest
import torch
from jsonschema import Draft202012Validator

from disklab import markup
from disklab.sections import pickle_safety as section_mod
from disklab.units import FILTERS
from disklab_host.steps import pickle_safety

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "src" / "disklab" / "schema" / "experiments" / "pickle_safety.schema.json"
OPEN_NAMES = {"io.open", "builtins.open", "__builtin__.open"}


def _validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _render(section: dict) -> tuple[dict, str]:
    x = section_mod.build(section, {"host": "h1"}, Path("plots"))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(REPO / "src" / "disklab" / "templates")),
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(FILTERS)
    env.filters.update(markup.FILTERS)  # the report's escaping (disklab.report.environment)
    text = env.get_template("sections/pickle_safety.md.j2").render(
        section=section, view=x, results={"host": "h1"}
    )
    return x, text


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> tuple[dict, Path]:
    """One real run of the step, with the runner's step_wall_s added."""
    wd = tmp_path_factory.mktemp("pickle_wb")
    section = pickle_safety.run({}, wd)
    section["step_wall_s"] = 1.0
    return section, wd


@pytest.mark.heavy
def test_torch_load_refuses_and_the_marker_is_absent(result):
    s, wd = result
    assert s["status"] == "ok" and s["torch_version"] == torch.__version__
    assert s["refused"] is True
    assert s["error_type"] == "UnpicklingError"
    assert s["payload_callable"] in s["error_message"]
    assert s["error_detail"].startswith("Unsupported global: GLOBAL")
    assert "\x1b[" not in s["error_message"]
    assert s["marker_created"] is False
    assert not (wd / pickle_safety.MARKER).exists()


def test_the_crafted_file_is_really_malicious(result):
    s, wd = result
    assert s["payload_callable"] in OPEN_NAMES
    assert s["payload_args"] == [s["marker_path"], "a"]
    assert s["payload_callable"] in s["pickle_globals"] and s["pickle_reduce_ops"] >= 1
    assert s["torch_unsafe_globals"] == [s["payload_callable"]]
    # the control, allowed only that one call, did create the marker (then removed it)
    assert s["control_marker_created"] is True
    assert s["control_calls"] == [[s["marker_path"], "a"]]
    # a real torch.save zip, not a hand-made look-alike
    with zipfile.ZipFile(wd / pickle_safety.CRAFTED) as z:
        assert {"archive/data.pkl", "archive/byteorder", "archive/version"} <= set(z.namelist())


def test_weights_only_default_is_read_from_the_installed_torch(result):
    s, _ = result
    sig_default = inspect.signature(torch.load).parameters["weights_only"].default
    assert s["weights_only_default"] is True  # torch >= 2.6 (installed: 2.13)
    assert repr(sig_default) in s["weights_only_default_source"]
    assert s["env_overrides"] == {n: None for n in pickle_safety.ENV_OVERRIDES} or s["env_override_active"]


def test_weights_only_default_of_an_older_signature(monkeypatch):
    """torch < 2.6 spelled its default, False, in the signature; we cannot install one here."""
    old_default = False

    def old_load(f, map_location=None, pickle_module=None, *, weights_only=old_default, mmap=None, **kw):
        raise AssertionError("never called")

    monkeypatch.setattr(pickle_safety.torch, "load", old_load)
    value, source = pickle_safety.weights_only_default()
    assert value is False and "defaults to False" in source


def test_scan_reads_opcodes_without_running_them(tmp_path):
    marker = tmp_path / "m"
    pickle_safety.craft(tmp_path / "c.pt", marker)
    data = zipfile.ZipFile(tmp_path / "c.pt").read(pickle_safety.pickle_member(tmp_path / "c.pt"))
    scan = pickle_safety.scan_pickle(data)
    assert not marker.exists()
    assert {"callable": "io.open", "args": [str(marker), "a"]} in scan["calls"]
    assert "torch._utils._rebuild_tensor_v2" in scan["globals"]
    # protocol 4 names callables with STACK_GLOBAL; the scan still pairs the REDUCE with its args
    proto4 = pickle.dumps({"k": pickle_safety.MarkerPayload(marker)}, protocol=4)
    assert pickle_safety.scan_pickle(proto4)["calls"] == [{"callable": "io.open", "args": [str(marker), "a"]}]
    assert not marker.exists()


@pytest.mark.heavy
def test_an_env_override_on_the_host_is_recorded_and_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    s = pickle_safety.run({}, tmp_path)
    assert s["env_override_active"] == "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
    assert s["env_overrides"]["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1"
    assert s["refused"] is True and s["marker_created"] is False
    x, text = _render(s)
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" in x["env_line"] and x["env_line"] in text


def test_section_validates_and_schema_catches_drift(result):
    s, _ = result
    v = _validator()
    assert not list(v.iter_errors(s))
    broken = copy.deepcopy(s)
    del broken["refused"]
    assert list(v.iter_errors(broken))
    wrong_type = dict(s, marker_created="no")
    assert list(v.iter_errors(wrong_type))
    assert list(v.iter_errors({"status": "not_run"}))  # a not_run needs its reason
    assert not list(v.iter_errors({"status": "not_run", "reason": "x", "step_wall_s": 0.0}))
    assert not list(v.iter_errors({"status": "failed", "error": "RuntimeError: x", "traceback": "..."}))


def test_report_states_the_refusal_from_the_hosts_numbers(result):
    s, _ = result
    x, text = _render(s)
    assert x["safe"] is True
    assert x["verdict"] == (
        f"torch {torch.__version__} refused the crafted checkpoint with UnpicklingError; "
        "the marker file was not created, so the payload did not run."
    )
    assert x["verdict"] in text
    assert "UnpicklingError" in text and s["payload_callable"] in text
    assert f"{s['pickle_reduce_ops']} REDUCE opcodes" in text
    assert "created the marker" in x["proof_line"]
    assert "| refused | yes |" in text and "| marker created by torch.load | no |" in text


def test_report_when_the_payload_ran():
    """A torch whose default loads pickles unrestricted (e.g. < 2.6): cannot happen with 2.13."""
    s = {
        "status": "ok",
        "torch_version": "2.5.1",
        "weights_only_default": False,
        "weights_only_default_source": "inspect.signature(torch.load): weights_only defaults to False",
        "env_overrides": {n: None for n in pickle_safety.ENV_OVERRIDES},
        "env_override_active": None,
        "crafted_path": "/wb/crafted.pt",
        "crafted_size_bytes": 1641,
        "crafted_members": ["archive/data.pkl"],
        "pickle_member": "archive/data.pkl",
        "pickle_globals": ["io.open"],
        "pickle_reduce_ops": 1,
        "payload_callable": "io.open",
        "payload_args": ["/wb/MARKER_payload_ran", "a"],
        "payload_found_by": "pickletools.genops (static; nothing executed)",
        "torch_unsafe_globals": ["io.open"],
        "load_call": "torch.load(path)",
        "refused": False,
        "error_type": None,
        "error_module": None,
        "error_message": None,
        "error_detail": None,
        "load_wall_s": 1.5,
        "marker_path": "/wb/MARKER_payload_ran",
        "marker_created": True,
        "control_method": "x",
        "control_calls": [["/wb/MARKER_payload_ran", "a"]],
        "control_marker_created": True,
        "control_wall_s": 0.1,
    }
    assert not list(_validator().iter_errors(s))
    x, text = _render(s)
    assert x["safe"] is False
    assert "torch 2.5.1 loaded the crafted checkpoint" in x["verdict"] and "marker file was created" in text
    assert "| refused | no |" in text and "Full" not in text


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"status": "not_run", "reason": "no torch in the venv"}, "did not run: no torch in the venv"),
        ({"status": "failed", "error": "RuntimeError: exited 1", "traceback": "tb"}, "failed: RuntimeError"),
    ],
)
def test_report_of_a_step_that_did_not_finish(section, expected):
    x, text = _render(section)
    assert x["safe"] is None and expected in x["verdict"] and expected in text
