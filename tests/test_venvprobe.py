"""One venv probe (disklab_host.venvprobe), kept in the venv's record and trusted while nothing changed.

The venv here is a fake: its ``bin/python`` is a shell script that counts its runs in a file and prints
a recorded probe result, so each test sees exactly when provision or the audit started the venv's
Python (the real probe imports torch, which takes seconds).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from disklab_host import lock as locklib
from disklab_host import venvprobe
from disklab_host.audit import collect as audit
from disklab_host.common.fsio import atomic_write_json
from disklab_host.provision import command, hostfacts, torchindex, venvrecord, venvstate

PINS = ["torch==2.13.0", "safetensors==0.8.0", "numpy==2.4.6"]
RESULT = {
    "python": "3.11.2",
    "python_executable": "/lab/venv/bin/python",
    "io_default_buffer_size_bytes": 8192,
    "dists": locklib.load("linux-x86_64-cpu-py3.11").packages,  # a venv provision made from the CPU lock
    "torch": "2.13.0+cpu",
    "safetensors": "0.8.0",
    "numpy": "2.4.6",
    "torch_cuda_available": False,
    "torch_version_cuda": {"unavailable": "CPU-only torch build: torch.version.cuda is None"},
    "torch_mps_available": False,
}
HOST = hostfacts.HostFacts(system="Linux", machine="x86_64", nvidia_gpu=False, python_version=(3, 11))


def fake_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv whose python prints RESULT and appends a line to the returned counter file per run."""
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    for dist in ("torch-2.13.0+cpu", "safetensors-0.8.0", "numpy-2.4.6"):
        (site / f"{dist}.dist-info").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    counter = tmp_path / "probes"
    result = tmp_path / "result.json"
    result.write_text(json.dumps(RESULT))
    py = venv / "bin" / "python"
    py.parent.mkdir()
    py.write_text(f"#!/bin/sh\necho probe >> '{counter}'\ncat '{result}'\n")
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return venv, counter


def probes(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def want() -> dict:
    """The record of a venv provision made on HOST with the CPU build: from its hash lock."""
    lock, _ = locklib.choose(
        "auto",
        HOST.system,
        HOST.machine,
        HOST.python_version,
        torchindex.CPU_INDEX,
        hostfacts.parse_pins(PINS),
    )
    return venvrecord.wanted_record(PINS, torchindex.CPU_INDEX, [], lock=lock)


def provisioned(tmp_path: Path) -> tuple[Path, Path]:
    """A fake venv with a record as provision writes it after an install: the wanted settings and a probe."""
    venv, counter = fake_venv(tmp_path)
    found = venvstate.probe(venv)
    atomic_write_json(
        venv / venvrecord.RECORD_NAME, {**want(), venvprobe.PROBE_KEY: venvstate.record_entry(found)}
    )
    assert probes(counter) == 1
    return venv, counter


def test_a_kept_venv_is_not_probed_again_while_nothing_changed(tmp_path):
    venv, counter = provisioned(tmp_path)
    out = command.provision(venv, PINS, "cpu", facts=HOST)
    assert (out["action"], out["changed"]) == ("kept", False)
    assert out["versions_source"]["from"] == "venv_record"
    assert out["versions_source"]["probed_utc"] == venvrecord.read_record(venv)["probe"]["probed_utc"]
    assert "versions from its record" in out["reason"]
    assert out["versions"]["torch"] == "2.13.0+cpu" and out["versions"]["torch_cuda"] is None
    assert probes(counter) == 1


def test_an_extra_dist_info_makes_provision_probe_again_and_keep_the_new_probe(tmp_path):
    venv, counter = provisioned(tmp_path)
    (venv / "lib" / "python3.11" / "site-packages" / "extra-1.0.dist-info").mkdir()
    action, reason, found = venvrecord.plan(venv, want(), hostfacts.parse_pins(PINS))
    assert action == "keep" and found["from"] == "probed_now" and probes(counter) == 2
    assert "extra-1.0.dist-info" in reason
    checked = command.provision(venv, PINS, "cpu", check=True, facts=HOST)  # --check probes, stores nothing
    assert checked["versions_source"]["from"] == "probed_now" and probes(counter) == 3
    out = command.provision(venv, PINS, "cpu", facts=HOST)
    assert out["versions_source"]["from"] == "probed_now" and probes(counter) == 4
    record = venvrecord.read_record(venv)
    assert "python3.11/extra-1.0.dist-info" in record["probe"]["fingerprint"]["dists"]
    assert record["pins"] == PINS  # the settings the venv was made from are kept
    again = command.provision(venv, PINS, "cpu", facts=HOST)
    assert again["versions_source"]["from"] == "venv_record" and probes(counter) == 4


def test_a_record_without_a_probe_is_probed(tmp_path):
    venv, counter = fake_venv(tmp_path)
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(want()))  # a record from before the probe was kept
    out = command.provision(venv, PINS, "cpu", facts=HOST)
    assert out["versions_source"]["from"] == "probed_now" and probes(counter) == 1
    assert venvrecord.read_record(venv)["probe"]["result"] == RESULT


def test_a_recorded_probe_with_a_wrong_pin_rebuilds_only_after_probing(tmp_path):
    """The recorded probe is trusted for what it says; a pin it does not show is a rebuild."""
    venv, counter = provisioned(tmp_path)
    action, reason, _ = venvrecord.plan(venv, want(), hostfacts.parse_pins(["torch==2.13.0", "numpy==2.5.0"]))
    assert action == "rebuild" and "numpy 2.4.6 (pinned 2.5.0)" in reason and probes(counter) == 1


def refusing_run(argv: list[str]) -> str:
    raise AssertionError(f"the audit started {argv[0]} although the venv's record holds a valid probe")


def test_the_audit_reuses_the_recorded_probe_and_says_so(tmp_path):
    venv, counter = provisioned(tmp_path)
    versions, source = audit.collect_versions(audit.Probe(run=refusing_run), str(venv / "bin" / "python"))
    assert versions["torch"] == "2.13.0+cpu" and versions["io_default_buffer_size_bytes"] == 8192
    assert source["from"] == "venv_record" and source["record"] == str(venv / venvrecord.RECORD_NAME)
    assert source["probed_utc"] == venvrecord.read_record(venv)["probe"]["probed_utc"]
    assert probes(counter) == 1


def test_the_audit_probes_when_the_venv_changed(tmp_path):
    venv, counter = provisioned(tmp_path)
    (venv / "lib" / "python3.11" / "site-packages" / "extra-1.0.dist-info").mkdir()
    versions, source = audit.collect_versions(audit.Probe(), str(venv / "bin" / "python"))
    assert source["from"] == "probed_now" and "extra-1.0.dist-info" in source["why"]
    assert versions["numpy"] == "2.4.6" and probes(counter) == 2
    # the audit writes nothing: the record keeps the probe from before the change
    assert venvrecord.read_record(venv)["probe"]["fingerprint"] != venvprobe.fingerprint(venv)


@pytest.mark.parametrize("change", ["driver", "gpu", "cuda_visible", "binary"])
def test_the_fingerprint_follows_the_driver_the_gpus_and_the_python(tmp_path, change):
    venv, _ = fake_venv(tmp_path)
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia" / "gpus").mkdir(parents=True)
    driver = "NVRM version: NVIDIA UNIX Kernel Module  580.95.05\n"
    (proc / "driver" / "nvidia" / "version").write_text(driver)
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    entry = venvprobe.entry(RESULT, venvprobe.fingerprint(venv, proc, env))
    record = {venvprobe.PROBE_KEY: entry}
    assert venvprobe.recorded(venv, record, proc, env)[0] == entry
    if change == "driver":
        (proc / "driver" / "nvidia" / "version").unlink()  # the driver was removed
    elif change == "gpu":
        (proc / "driver" / "nvidia" / "gpus" / "0000:01:00.0").mkdir()
    elif change == "cuda_visible":
        env = {}
    else:
        (venv / "bin" / "python").write_text("#!/bin/sh\necho '{}'\n# another interpreter\n")
    kept, why = venvprobe.recorded(venv, record, proc, env)
    assert kept is None and "changed since its probe" in why
