"""The lab venv's provisioning (disklab_host.provision): the torch build per host, the refusals before
any download, when a venv is kept, rebuilt or left alone, and one real provisioning run.

The decision table uses injected host facts (HostFacts), not this machine: macOS and GPU hosts cannot
run here. The slow test provisions a real venv from a base Python that has no pip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from disklab_host.common import result as result_line
from disklab_host.loadlab import loaders
from disklab_host.provision import command, errors, hostfacts, install, torchindex, venvrecord, venvstate
from disklab_host.provision import loaders as pvloaders

REPO = Path(__file__).resolve().parents[1]
PINS = ["torch==2.13.0", "safetensors==0.8.0", "numpy==2.4.6"]

LINUX = hostfacts.HostFacts("Linux", "x86_64", nvidia_gpu=False, python_version=(3, 12))
LINUX_GPU = hostfacts.HostFacts("Linux", "x86_64", nvidia_gpu=True, python_version=(3, 12))
SPARK = hostfacts.HostFacts("Linux", "aarch64", nvidia_gpu=True, python_version=(3, 12))
MAC_ARM = hostfacts.HostFacts(
    "Darwin", "arm64", nvidia_gpu=False, python_version=(3, 13), macos_version=(15, 6)
)
MAC_INTEL = hostfacts.HostFacts("Darwin", "x86_64", nvidia_gpu=False, python_version=(3, 12))


def _refusal(facts, setting="auto", pins=PINS, require_cuda=False, tmp_path=None) -> str:
    """The Refused message for a host, checked to come before the venv directory exists."""
    venv = (tmp_path or Path("/nonexistent-disklab")) / "venv"
    with pytest.raises(errors.Refused) as info:
        command.provision(venv, pins, setting, require_cuda=require_cuda, facts=facts)
    assert not venv.exists()
    return str(info.value)


# --- the torch build -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "setting", "index"),
    [
        (LINUX, "auto", torchindex.CPU_INDEX),
        (LINUX_GPU, "auto", torchindex.CUDA_INDEX),
        (SPARK, "auto", torchindex.CUDA_INDEX),
        (MAC_ARM, "auto", None),
        (LINUX_GPU, "cpu", torchindex.CPU_INDEX),
        (LINUX, "cuda", torchindex.CUDA_INDEX),
        (LINUX_GPU, "pypi", None),
        (MAC_ARM, "cpu", torchindex.CPU_INDEX),
        (LINUX, "https://mirror.example/whl/cu130", "https://mirror.example/whl/cu130"),
        (LINUX, "http://10.0.0.2/torch", "http://10.0.0.2/torch"),
        (SPARK, "file:///srv/wheels/simple", "file:///srv/wheels/simple"),
    ],
)
def test_the_torch_index_follows_the_setting_and_the_host(facts, setting, index):
    assert torchindex.decide_index(setting, facts) == index
    hostfacts.check_host(facts, hostfacts.parse_pins(PINS), setting, index, require_cuda=False)  # not refused


def test_one_cuda_build_for_every_gpu_host():
    assert torchindex.CUDA_INDEX == "https://download.pytorch.org/whl/cu130"
    assert torchindex.decide_index("auto", LINUX_GPU) == torchindex.decide_index("auto", SPARK)


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "", "ftp://mirror/whl", "cu130"])
def test_a_bad_index_value_is_refused_naming_the_setting(bad, tmp_path):
    msg = _refusal(LINUX, bad, tmp_path=tmp_path)
    assert msg.startswith("lab_venv_torch_index must be one of auto, cpu, cuda, pypi") and repr(bad) in msg


# --- refusals before any download ------------------------------------------------------------------


def test_an_intel_mac_is_refused_with_what_to_do(tmp_path):
    msg = _refusal(MAC_INTEL, tmp_path=tmp_path)
    assert "Intel Mac (Darwin x86_64)" in msg and "after torch 2.2.2" in msg
    assert "torch==2.13.0 cannot be installed" in msg and "leave the host out" in msg
    # torch 2.2.2 still has Intel Mac wheels: that pin is not refused
    hostfacts.check_host(MAC_INTEL, hostfacts.parse_pins(["torch==2.2.2"]), "auto", None, require_cuda=False)


@pytest.mark.parametrize("setting", ["cuda", torchindex.CUDA_INDEX])
def test_cuda_on_macos_is_refused(setting, tmp_path):
    msg = _refusal(MAC_ARM, setting, tmp_path=tmp_path)
    assert "lab_venv_torch_index" in msg and "no CUDA build for macOS" in msg


def test_macos_before_14_is_refused_naming_its_version_before_any_download(monkeypatch, tmp_path):
    """This host's facts as collect_host reads them on an Apple silicon Mac with macOS 13 (platform's
    answers injected: there is no Mac here): torch 2.13's wheels are macosx_14_0_arm64, so it is refused
    before any download, naming the host's macOS and the requirement (--check: nothing is installed)."""
    monkeypatch.setattr(hostfacts.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(hostfacts.platform, "machine", lambda: "arm64")
    monkeypatch.setattr(hostfacts.platform, "mac_ver", lambda: ("13.6.7", ("", "", ""), "arm64"))
    venv = tmp_path / "venv"
    with pytest.raises(errors.Refused) as info:
        command.provision(venv, PINS, check=True)
    msg = str(info.value)
    assert "macOS 13.6.7" in msg and "macOS 14.0 or later" in msg and "macosx_14_0_arm64" in msg
    assert not venv.exists()


@pytest.mark.parametrize(
    ("macos", "pins", "ok"),
    [
        ((14, 0), PINS, True),
        ((15, 6), PINS, True),
        ((13, 7, 1), PINS, False),
        ((13, 7, 1), ["torch==2.11.0"], True),  # before 2.12: not checked (pip answers for it)
        (None, PINS, False),  # unread: refused rather than guessed
    ],
)
def test_the_macos_needed_by_the_pinned_torch(macos, pins, ok, tmp_path):
    facts = hostfacts.HostFacts(
        "Darwin", "arm64", nvidia_gpu=False, python_version=(3, 13), macos_version=macos
    )
    if ok:
        hostfacts.check_host(facts, hostfacts.parse_pins(pins), "auto", None, require_cuda=False)
        return
    msg = _refusal(facts, pins=pins, tmp_path=tmp_path)
    assert "macOS 14.0 or later" in msg
    assert ("macOS 13.7.1" in msg) if macos else ("could not be read" in msg)


@pytest.mark.parametrize(
    ("python", "ok"), [((3, 9), False), ((3, 10), True), ((3, 14), True), ((3, 15), False)]
)
def test_a_python_outside_the_pinned_torchs_wheels_is_refused(python, ok, tmp_path):
    facts = hostfacts.HostFacts("Linux", "x86_64", nvidia_gpu=False, python_version=python)
    if ok:
        hostfacts.check_host(
            facts, hostfacts.parse_pins(PINS), "auto", torchindex.CPU_INDEX, require_cuda=False
        )
        return
    msg = _refusal(facts, tmp_path=tmp_path)
    assert "torch==2.13.0 has wheels for CPython 3.10 to 3.14" in msg
    assert f"Python is {python[0]}.{python[1]}" in msg and "lab_venv_python" in msg


def test_require_cuda_where_the_build_has_none_is_refused_before_any_download(tmp_path):
    assert "no NVIDIA GPU" in _refusal(LINUX, require_cuda=True, tmp_path=tmp_path)
    assert "chose the CPU build" in _refusal(LINUX_GPU, "cpu", require_cuda=True, tmp_path=tmp_path)
    assert "macOS has no CUDA" in _refusal(MAC_ARM, require_cuda=True, tmp_path=tmp_path)


@pytest.mark.parametrize(
    ("pins", "named"),
    [
        (["torch>=2.13", "numpy==2.4.6"], "pins NAME==VERSION, got 'torch>=2.13'"),
        (["safetensors==0.8.0", "numpy==2.4.6"], "must pin torch"),
    ],
)
def test_pins_must_be_exact_and_include_torch(pins, named, tmp_path):
    msg = _refusal(LINUX, pins=pins, tmp_path=tmp_path)
    assert msg.startswith("lab_venv_packages") and named in msg


def test_a_torch_release_outside_the_table_is_not_checked():
    facts = hostfacts.HostFacts("Linux", "x86_64", nvidia_gpu=False, python_version=(3, 7))
    hostfacts.check_host(
        facts, hostfacts.parse_pins(["torch==9.9.9"]), "auto", torchindex.CPU_INDEX, require_cuda=False
    )
    assert "2.13.0" in hostfacts.TORCH_PYTHONS


# --- the GPU, from the driver ----------------------------------------------------------------------


def test_an_nvidia_gpu_is_found_in_proc_or_with_nvidia_smi(tmp_path):
    proc = tmp_path / "proc"
    assert not hostfacts.nvidia_gpu(proc, nvidia_smi=str(tmp_path / "missing"))
    (proc / "driver" / "nvidia" / "gpus").mkdir(parents=True)
    assert not hostfacts.nvidia_gpu(proc, nvidia_smi=str(tmp_path / "missing"))  # driver loaded, no GPU
    (proc / "driver" / "nvidia" / "gpus" / "000f:01:00.0").mkdir()
    assert hostfacts.nvidia_gpu(proc, nvidia_smi=str(tmp_path / "missing"))

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA GB10 (UUID: GPU-5a1f)'\n")
    smi.chmod(0o755)
    assert hostfacts.nvidia_gpu(tmp_path / "empty", nvidia_smi=str(smi))
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate'\nexit 9\n")
    assert not hostfacts.nvidia_gpu(tmp_path / "empty", nvidia_smi=str(smi))


# --- keep, rebuild, or leave alone -----------------------------------------------------------------


def test_a_directory_disklab_did_not_make_is_never_deleted(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "thesis.tex").write_text("years of work")
    msg = _refusal_main(venv)
    assert "is not a venv made by disklab" in msg and "not deleted" in msg
    assert (venv / "thesis.tex").read_text() == "years of work"


def _refusal_main(venv: Path, *extra: str) -> str:
    """main()'s refusal: exit 2, ok false on stdout and the same error on stderr (check mode and real)."""
    for mode in (["--check"], []):
        cp = _cli(venv, "--torch-index", "cpu", *mode, *extra)
        assert cp.returncode == 2, cp.stderr
        out = result_line.parse(cp.stdout)
        assert out["ok"] is False and cp.stderr.strip() == f"disklab provision refused: {out['error']}"
    return out["error"]


def _cli(venv: Path, *args: str, python: str = sys.executable, timeout: int = 900):
    """``python -m disklab_host provision --venv VENV --pin ...`` as the role runs it (the zipapp's entry)."""
    pins = [f"--pin={p}" for p in PINS]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    argv = [python, "-m", "disklab_host", "provision", "--venv", str(venv), *pins, *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


def test_plan_rebuilds_a_venv_without_record_or_with_other_settings(tmp_path):
    venv = tmp_path / "venv"
    want = venvrecord.wanted_record(PINS, torchindex.CUDA_INDEX, [])
    pins = hostfacts.parse_pins(PINS)
    assert venvrecord.plan(venv, want, pins)[0] == "create"
    venv.mkdir()
    assert venvrecord.plan(venv, want, pins)[:2] == ("create", f"{venv} is an empty directory")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    action, reason, _ = venvrecord.plan(venv, want, pins)
    assert action == "rebuild" and "no disklab-venv.json" in reason
    # a GPU host whose venv got the CPU build
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps({**want, "torch_index": torchindex.CPU_INDEX}))
    action, reason, _ = venvrecord.plan(venv, want, pins)
    assert (
        action == "rebuild" and f"torch_index {torchindex.CPU_INDEX!r} -> {torchindex.CUDA_INDEX!r}" in reason
    )
    # the record matches, but there is no python that imports the pins
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(want))
    action, reason, _ = venvrecord.plan(venv, want, pins)
    assert action == "rebuild" and "its python does not run" in reason


def test_only_the_pip_arguments_that_may_change_what_is_installed_count():
    args = ["--retries", "0", "--find-links=/w", "--no-compile", "-q", "--timeout=5", "--index-url", "X"]
    assert venvrecord.content_pip_args(args) == ["--find-links=/w", "--index-url", "X"]
    assert (
        venvrecord.content_pip_args(None) == []
        and venvrecord.content_pip_args(["--retries=0", "-qq", "-vvv"]) == []
    )
    # the value of an option that takes one is a value, whatever it looks like
    assert venvrecord.content_pip_args(["--global-option", "--quiet"]) == ["--global-option", "--quiet"]
    assert venvrecord.content_pip_args(["--constraint", "--retries", "-q"]) == ["--constraint", "--retries"]
    assert venvrecord.content_pip_args(["--timeout", "-1", "--no-binary", ":all:"]) == [
        "--no-binary",
        ":all:",
    ]


def test_plan_keeps_a_venv_across_pip_transport_options_and_extends_it_with_added_loaders(
    tmp_path, monkeypatch
):
    """A venv made with --no-compile --retries 0 and one loader, whose Python imports the pins (the probe is
    stood in for: what it reads is tested with real venvs in test_a_real_venv_from_a_python_without_pip_...
    and tests/test_loaders.py, which also installs added loaders into a real kept venv)."""
    venv = tmp_path / "venv"
    venv.mkdir()
    made = venvrecord.wanted_record(
        PINS, torchindex.CPU_INDEX, ["--no-compile", "--retries", "0"], ["model_streamer"]
    )
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(made))
    found = {
        "from": "probed_now",
        "result": {"dists": {"torch": "2.13.0", "safetensors": "0.8.0", "numpy": "2.4.6"}},
    }
    monkeypatch.setattr(venvstate, "probe_or_recorded", lambda v, r: (found, "test"))
    pins = hostfacts.parse_pins(PINS)

    def plan(pip_args, loaders):
        return venvrecord.plan(
            venv, venvrecord.wanted_record(PINS, torchindex.CPU_INDEX, pip_args, loaders), pins
        )

    action, reason, _ = plan(["--timeout=5"], ["model_streamer"])
    assert (
        action == "keep"
        and "pip's transport options differ" in reason
        and "not which packages it installs" in reason
    )
    action, reason, _ = plan(["--find-links=/w"], ["model_streamer"])  # may change what pip installs
    assert action == "rebuild" and "pip_args" in reason
    action, reason, _ = plan([], ["model_streamer", "tensorizer"])
    assert action == "extend" and reason.endswith("only the loader(s) tensorizer are added, into it"), reason
    action, reason, _ = plan(["--find-links=/w"], ["model_streamer", "tensorizer"])  # added, and more
    assert action == "rebuild" and "pip_args" in reason and "loaders" not in reason
    for names in (["tensorizer"], []):  # one removed: the venv would hold more than its record says
        assert plan([], names)[0] == "rebuild"
    repinned = {**made, "loaders": {"model_streamer": ["runai-model-streamer==0.0.1"]}}
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(repinned))
    action, reason, _ = plan([], ["model_streamer", "tensorizer"])
    assert action == "rebuild" and "loaders" in reason
    found["result"]["dists"]["numpy"] = "2.0.0"  # extendable, but the venv no longer holds the pins
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(made))
    action, reason, _ = plan([], ["model_streamer", "tensorizer"])
    assert action == "rebuild" and "numpy 2.0.0 (pinned 2.4.6)" in reason


def test_extend_adds_loaders_retries_failed_ones_rechecks_the_rest_and_refuses_a_moved_pin(
    tmp_path, monkeypatch
):
    """What extend installs, imports and writes, with pip, the import and the probe stood in for (their
    real behaviour: tests/test_loaders.py, which extends a real venv with every loader)."""
    venv = tmp_path / "venv"
    venv.mkdir()
    pins_of = {n: list(loaders.BY_NAME[n].pins) for n in loaders.NAMES}
    ok = {
        n: {"status": "ok", "version": pins_of[n][0].split("==")[1], "pins": pins_of[n]}
        for n in loaders.NAMES
    }
    failed = {"status": "not_run", "reason": "pip could not install fastsafetensors==0.5.0: ERROR: (test)"}
    made = {
        **venvrecord.wanted_record(PINS, torchindex.CPU_INDEX, [], ["model_streamer", "fastsafetensors"]),
        "loader_results": {
            "model_streamer": ok["model_streamer"],
            "fastsafetensors": {**failed, "pins": pins_of["fastsafetensors"]},
        },
    }
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(made))
    calls = []
    monkeypatch.setattr(
        pvloaders, "install_loader", lambda v, name, args, **kw: calls.append(("pip", name, args)) or ok[name]
    )
    monkeypatch.setattr(loaders, "import_check", lambda name, *a, **k: calls.append(("import", name)) or {
        key: ok[name][key] for key in ("status", "version")})  # fmt: skip
    dists = {"torch": "2.13.0", "safetensors": "0.8.0", "numpy": "2.4.6"}
    dists |= {pin.split("==")[0]: pin.split("==")[1] for n in loaders.NAMES for pin in pins_of[n]}
    monkeypatch.setattr(
        venvstate,
        "probe",
        lambda v: {"from": "probed_now", "result": {"dists": dict(dists)}, "fingerprint": {}},
    )
    want = venvrecord.wanted_record(
        PINS, torchindex.CPU_INDEX, ["--no-compile"], ["model_streamer", "fastsafetensors", "tensorizer"]
    )

    results, retried, found = pvloaders.extend(venv, want, hostfacts.parse_pins(PINS), ["--no-compile"])
    # the added loader and the one pip could not install get pip; then the loader installed before is imported
    # again, in the venv those installs changed
    assert calls == [("pip", "tensorizer", ["--no-compile"]), ("pip", "fastsafetensors", ["--no-compile"]),
                     ("import", "model_streamer")]  # fmt: skip
    assert retried == ["fastsafetensors"] and list(results) == [
        "model_streamer",
        "fastsafetensors",
        "tensorizer",
    ]
    assert all(r["status"] == "ok" for r in results.values()) and found["from"] == "probed_now"
    record = json.loads((venv / venvrecord.RECORD_NAME).read_text())
    assert record["loaders"] == want["loaders"] and record["loader_results"] == results
    assert record["pip_args"] == [] and record["probe"]["result"]["dists"] == dists  # made with, probed now
    # what the next run plans for this record: the same settings keep it
    monkeypatch.setattr(venvstate, "probe_or_recorded", lambda v, r: (found, "test"))
    assert venvrecord.plan(venv, want, hostfacts.parse_pins(PINS))[0] == "keep"

    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(made))
    dists["humanize"] = "4.0.0"  # the added loader's install moved a pin of a loader installed before
    with pytest.raises(errors.Failed, match=r"into .*: it holds humanize 4\.0\.0 \(pinned 4\.17\.0\)"):
        pvloaders.extend(venv, want, hostfacts.parse_pins(PINS), [])
    assert (
        json.loads((venv / venvrecord.RECORD_NAME).read_text()) == made
    )  # the next run sees the venv as it is


def test_a_kept_venv_must_hold_every_package_its_loaders_locks_installed(tmp_path, monkeypatch):
    """A loader from its lock installs its pins and their dependencies at the lock's versions: a kept venv
    in which one of those dependencies moved (a user's pip install) is rebuilt, naming it; the lock of a
    loader pip could not install asks for nothing."""
    venv = tmp_path / "venv"
    venv.mkdir()
    streamer = list(loaders.BY_NAME["model_streamer"].pins)
    want = venvrecord.wanted_record(PINS, torchindex.CPU_INDEX, [], ["model_streamer", "tensorizer"])
    results = {
        "model_streamer": {"status": "ok", "version": streamer[0].split("==")[1], "pins": streamer},
        "tensorizer": {"status": "not_run", "reason": "pip could not install tensorizer: (test)"},
    }
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps({**want, "loader_results": results}))
    dists = {"torch": "2.13.0", "safetensors": "0.8.0", "numpy": "2.4.6"}
    dists |= {pin.split("==")[0]: pin.split("==")[1] for pin in streamer}
    locked = {  # what each loader's lock installs (a made-up dependency of each)
        "model_streamer": {**dict(p.split("==") for p in streamer), "boto3-stub": "1.0.0"},
        "tensorizer": {"redis-stub": "5.0.0"},
    }
    probed = {"from": "probed_now", "result": {"dists": dists}, "fingerprint": {}}
    monkeypatch.setattr(venvstate, "probe_or_recorded", lambda v, r: (probed, "test"))
    pins = hostfacts.parse_pins(PINS)
    dists["boto3-stub"] = "1.0.0"
    assert venvrecord.plan(venv, want, pins, locked)[0] == "keep"  # tensorizer's lock asks for nothing
    dists["boto3-stub"] = "1.2.0"
    action, reason, _ = venvrecord.plan(venv, want, pins, locked)
    assert action == "rebuild" and reason.endswith("it holds boto3-stub 1.2.0 (pinned 1.0.0)")
    assert venvrecord.plan(venv, want, pins)[0] == "keep"  # without the locks' packages it was not seen


def test_check_mode_changes_nothing_on_a_fresh_host(tmp_path):
    venv = tmp_path / "lab" / "venv"
    cp = _cli(venv, "--torch-index", "cpu", "--check")
    assert cp.returncode == 0, cp.stderr
    out = result_line.parse(cp.stdout)
    assert out["ok"] and out["changed"] and out["action"] == "would_create" and out["versions"] is None
    assert out["torch_index"] == torchindex.CPU_INDEX
    assert not (tmp_path / "lab").exists()


def test_removal_keeps_pyvenv_cfg_until_last(tmp_path):
    venv = tmp_path / "venv"
    (venv / "lib" / "python3" / "site-packages").mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / venvrecord.RECORD_NAME).write_text("{}")
    install.remove_venv(venv)
    assert not venv.exists() and Path(sys.executable).exists()


def test_versions_match_the_way_pip_reads_a_pin():
    assert venvrecord._matches("2.13.0+cpu", "2.13.0") and venvrecord._matches("2.13.0", "2.13.0")
    assert not venvrecord._matches("2.13.0+cpu", "2.13.0+cu130") and not venvrecord._matches(
        "2.12.1", "2.13.0"
    )
    assert not venvrecord._matches(None, "2.13.0")


# --- one real run ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_venv_from_a_python_without_pip_is_created_kept_and_rebuilt(tmp_path):
    """From a base made with ``/usr/bin/python3 -m venv --without-pip`` (no pip, no packaging): the CPU
    build from its index, then a second run that changes nothing, then a new index that rebuilds.

    Every run passes pip ``--no-compile`` (lab_venv_pip_args): byte-compiling torch's files is two thirds
    of pip's time here (38 s against 14 s for torch alone) and none of what this test checks; it also shows
    that the extra pip arguments reach pip and the record."""
    base = tmp_path / "base"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(base)], check=True, timeout=120)
    base_py = str(base / "bin" / "python")
    assert subprocess.run([base_py, "-c", "import pip"], capture_output=True).returncode != 0
    venv = tmp_path / "lab" / "venv"

    nc = "--pip-arg=--no-compile"
    first = _cli(venv, "--torch-index", "cpu", nc, python=base_py)
    assert first.returncode == 0, first.stderr
    out = result_line.parse(first.stdout)
    assert (out["ok"], out["changed"], out["action"]) == (True, True, "created"), out
    assert out["torch_index"] == torchindex.CPU_INDEX and out["python"] == str(venv / "bin" / "python")
    assert out["lock"]["locked"] and out["lock"]["name"] == "linux-x86_64-cpu-py3.11"  # /usr/bin/python3 here
    v = out["versions"]
    assert v["torch"].split("+")[0] == "2.13.0" and v["safetensors"] == "0.8.0" and v["numpy"] == "2.4.6"
    assert v["torch_cuda"] is None and v["cuda_available"] is False and v["mps_available"] is False
    record = json.loads((venv / venvrecord.RECORD_NAME).read_text())
    assert record["base_python"] == base_py and record["pins"] == PINS
    assert record["torch_index"] == torchindex.CPU_INDEX and record["pip_args"] == ["--no-compile"]
    bare_env = {k: val for k, val in os.environ.items() if k != "PYTHONPATH"}
    imports = subprocess.run(
        [out["python"], "-c", "import torch, safetensors.torch, numpy; print(torch.ones(3).sum().item())"],
        capture_output=True, text=True, timeout=300, env=bare_env,
    )  # fmt: skip
    assert imports.returncode == 0 and imports.stdout.strip() == "3.0", imports.stderr

    again = result_line.parse(_cli(venv, "--torch-index", "cpu", nc, python=base_py).stdout)
    assert (again["changed"], again["action"]) == (False, "kept"), again
    assert again["versions"] == v

    # PyPI's Linux torch is the CUDA build, whose lock pulls the nvidia wheels (GiBs); here pip's find-links
    # has the CPU wheel at the pin, so these two runs install the pins alone (lab_venv_lock: never)
    unlocked = [nc, "--lock=never"]
    would = result_line.parse(
        _cli(venv, "--torch-index", "pypi", *unlocked, "--check", python=base_py).stdout
    )
    assert (would["changed"], would["action"]) == (True, "would_rebuild")
    assert f"torch_index {torchindex.CPU_INDEX!r} -> None" in would["reason"]
    assert json.loads((venv / venvrecord.RECORD_NAME).read_text()) == record  # --check changed nothing

    rebuilt = _cli(venv, "--torch-index", "pypi", *unlocked, python=base_py)
    assert rebuilt.returncode == 0, rebuilt.stderr
    out = result_line.parse(rebuilt.stdout)
    assert (out["changed"], out["action"], out["torch_index"]) == (True, "rebuilt", "pypi"), out
    assert json.loads((venv / venvrecord.RECORD_NAME).read_text())["torch_index"] is None
    assert out["versions"]["torch"].split("+")[0] == "2.13.0"
    assert out["lock"] == {"locked": False, "name": None, "sha256": None, "why": "lab_venv_lock is never"}


# --- the role that runs it -------------------------------------------------------------------------


def test_the_role_declares_each_default_and_passes_each_setting():
    role = REPO / "roles" / "lab_venv"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options), set(defaults) ^ set(options)
    assert defaults["lab_venv_torch_index"] == "auto" and defaults["lab_venv_pip_args"] == []
    assert defaults["lab_venv_packages"] == PINS
    args = (role / "vars" / "main.yml").read_text()
    for flag, setting in [
        ("--venv=", "lab_venv_root"), ("--torch-index=", "lab_venv_torch_index"),
        ("--pin=", "lab_venv_packages"), ("--pip-arg=", "lab_venv_pip_args"),
        ("--require-cuda", "lab_venv_require_cuda"), ("--lock=", "lab_venv_lock"),
    ]:  # fmt: skip
        assert flag in args and setting in args, flag
    tasks = (role / "tasks" / "main.yml").read_text()
    assert "ansible.builtin.pip" not in tasks and "provision --check" in tasks
    for gv in (*(REPO / "inventory" / "group_vars").glob("*.yml"), REPO / "inventory" / "example-fleet.yml"):
        assert "lab_venv_pip_extra_args" not in gv.read_text(), gv


# pip's own output for a dependency no wheel directory holds (a wheelhouse downloaded by a Python 3.11.7 for
# a host whose Python is 3.11.2, where redis needs async-timeout), and for a conflict; the reason a loader is
# not_run with must be the line that names the failure, not pip's closing pointer to its docs.
NO_DISTRIBUTION = """\
INFO: pip is looking at multiple versions of tensorizer to determine which version is compatible.
ERROR: Could not find a version that satisfies the requirement async-timeout>=4.0.3; \
python_full_version < "3.11.3" (from redis) (from versions: none)
ERROR: No matching distribution found for async-timeout>=4.0.3; python_full_version < "3.11.3"
"""
CONFLICT = """\
ERROR: Cannot install tensorizer==2.12.1 because these package versions have conflicting dependencies.

The conflict is caused by:
    tensorizer 2.12.1 depends on protobuf>=3.19.5
    The user requested protobuf==3.0.0

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


@pytest.mark.parametrize(
    ("output", "words"),
    [
        (
            NO_DISTRIBUTION,
            'ERROR: No matching distribution found for async-timeout>=4.0.3; python_full_version < "3.11.3"',
        ),
        (
            CONFLICT,
            "ERROR: Cannot install tensorizer==2.12.1 because these package versions have conflicting"
            " dependencies.",
        ),
        (
            "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/\n",
            "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/",
        ),
        (
            "Error: Command '['python', '-m', 'ensurepip']' returned non-zero exit status 1.\n",
            "Error: Command '['python', '-m', 'ensurepip']' returned non-zero exit status 1.",
        ),
    ],
    ids=["no-distribution", "conflict", "pointer-alone", "no-error-line"],
)
def test_a_failed_pip_is_reported_by_the_line_that_names_the_failure(output, words, tmp_path):
    script = tmp_path / "fake_pip.py"
    script.write_text(f"import sys\nsys.stderr.write({output!r})\nsys.exit(1)\n")
    with pytest.raises(errors.Failed) as exc:
        install.run([sys.executable, str(script)], "installing the loader tensorizer")
    assert exc.value.last == words
    assert str(exc.value).endswith(f": {words}")
