"""The production loaders (loadlab/loaders.py): settings refused before any work, a real lab venv provisioned
with them at their pins (kept on a second run), each CPU loader giving load_file's tensors bit for bit, and
the load step measuring them beside the others while a GPU-only, a not-installed and an uninstallable loader
are recorded not_run with the reason.

One lab venv for the module (provisioning it is the slow part, a few minutes on 2 cores): the tests that
run a loader run it there, in a child process, as the lab does; nothing of a loader is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

import shared
from conftest import LAB_VENV_BASE, PROVISION_QUICKLY
from disklab import schemas
from disklab_host import lock as locklib
from disklab_host import preflight, registry
from disklab_host.common import result as result_line
from disklab_host.loadlab import loaders, proof
from disklab_host.provision import hostfacts, torchindex, venvrecord
from disklab_host.provision import loaders as pvloaders
from disklab_host.steps import load

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "src/disklab/schema/experiments/load.schema.json").read_text())
PINS = ["torch==2.13.0", "safetensors==0.8.0", "numpy==2.4.6"]
ALL = ["model_streamer", "fastsafetensors", "instanttensor", "tensorizer"]
CPU = ["model_streamer", "fastsafetensors", "tensorizer"]


# --- settings, refused before any work -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        (
            {"load_loaders": ["model_streamer", "vllm"]},
            "lab_run_load_loaders has unknown loader(s) ['vllm']; known: ",
        ),
        ({"load_loaders": "model_streamer"}, "lab_run_load_loaders must be a list of loader names"),
        ({"load_loaders": ["tensorizer", "tensorizer"]}, "names a loader more than once"),
        (
            {"load_loaders": ["model_streamer"], "load_loader_knobs": {"nope": {}}},
            "lab_run_load_loader_knobs names unknown loader 'nope'; known: ",
        ),
        (
            {"load_loaders": ["model_streamer"], "load_loader_knobs": {"tensorizer": {"num_readers": 2}}},
            "lab_run_load_loader_knobs sets knobs of 'tensorizer', which lab_run_load_loaders does not name",
        ),
        (
            {"load_loaders": ["model_streamer"], "load_loader_knobs": {"model_streamer": {"conc": 4}}},
            "lab_run_load_loader_knobs.model_streamer has unknown knob 'conc'; known: ['chunk_bytesize', ",
        ),
        (
            {"load_loaders": ["model_streamer"], "load_loader_knobs": {"model_streamer": {"concurrency": 0}}},
            "lab_run_load_loader_knobs.model_streamer.concurrency must be >= 1, got 0",
        ),
        (
            {"load_loaders": ["fastsafetensors"], "load_loader_knobs": {"fastsafetensors": {"nogds": "yes"}}},
            "lab_run_load_loader_knobs.fastsafetensors.nogds must be bool, got 'yes'",
        ),
        (
            {
                "load_loaders": ["fastsafetensors"],
                "load_loader_knobs": {"fastsafetensors": {"odirect": "maybe"}},
            },
            "lab_run_load_loader_knobs.fastsafetensors.odirect must be one of ['auto', 'on', 'off'], got "
            "'maybe'",
        ),
    ],
)
def test_bad_loader_settings_are_refused_naming_the_variable(settings, said, workbench):
    with pytest.raises(ValueError) as info:
        loaders.check_settings(settings)
    assert said in str(info.value)
    if "known: " in said:
        assert str(list(loaders.NAMES)) in str(info.value) or "['chunk_bytesize'" in str(info.value)
    cfg = {"profile": "quick", "steps": ["load"], "workbench": str(workbench), "settings": settings}
    with pytest.raises(preflight.Refused) as refused:  # before any work: the preflight refuses the same
        preflight.preflight(cfg)
    assert said in str(refused.value)


def test_good_settings_pass_and_knobs_record_their_source():
    names, knobs = loaders.check_settings(
        {
            "load_loaders": ["model_streamer", "tensorizer"],
            "load_loader_knobs": {"model_streamer": {"concurrency": 8}},
        }
    )
    assert names == ["model_streamer", "tensorizer"] and knobs == {"model_streamer": {"concurrency": 8}}
    resolved = loaders.resolve_knobs("model_streamer", knobs["model_streamer"])
    assert resolved["concurrency"] | {} == {**resolved["concurrency"], "value": 8, "source": "inventory"}
    assert (
        resolved["chunk_bytesize"]["value"] == 2097152 and resolved["chunk_bytesize"]["source"] == "default"
    )
    assert loaders.check_settings({}) == ([], {})


def test_the_roles_offer_exactly_the_table_and_pass_the_setting_to_lab_venv():
    run_spec = yaml.safe_load((REPO / "roles/lab_run/meta/argument_specs.yml").read_text())
    venv_spec = yaml.safe_load((REPO / "roles/lab_venv/meta/argument_specs.yml").read_text())
    assert run_spec["argument_specs"]["main"]["options"]["lab_run_load_loaders"]["choices"] == list(
        loaders.NAMES
    )
    assert venv_spec["argument_specs"]["main"]["options"]["lab_venv_loaders"]["choices"] == list(
        loaders.NAMES
    )
    assert (
        yaml.safe_load((REPO / "roles/lab_run/defaults/main.yml").read_text())["lab_run_load_loaders"] == []
    )
    assert yaml.safe_load((REPO / "roles/lab_venv/defaults/main.yml").read_text())["lab_venv_loaders"] == []
    assert "--loader=" in (REPO / "roles/lab_venv/vars/main.yml").read_text()
    site = (REPO / "playbooks/site.yml").read_text()
    assert 'lab_venv_loaders: "{{ lab_run_load_loaders }}"' in site


def test_every_pin_is_exact_and_says_why():
    for spec in loaders.LOADERS:
        parsed = hostfacts.parse_pins([*spec.pins, "torch==2.13.0"])
        assert locklib.canonical(spec.dist) in parsed, spec.name
        assert len(spec.pin_why) > 40 and spec.import_check, spec.name


def test_with_no_loader_set_nothing_changes():
    """The venv's record, the disk preflight counts and the cells are what they were before loaders."""
    want = venvrecord.wanted_record(PINS, torchindex.CPU_INDEX, [])
    assert "loaders" not in want and want == venvrecord.wanted_record(PINS, torchindex.CPU_INDEX, [], [])
    sizes = registry.resolve("quick")
    plain = registry.needed_bytes(sizes, ["load"])["load"]
    assert registry.needed_bytes(sizes, ["load"], {"load_loaders": []})["load"] == plain
    assert registry.needed_bytes(sizes, ["load"], {"load_loaders": ["model_streamer"]})["load"] == plain
    with_tz = registry.needed_bytes(sizes, ["load"], {"load_loaders": ["tensorizer"]})["load"]
    assert with_tz - plain == sizes["load_big_mib"] * (1 << 20) + registry.TENSORIZER_OVERHEAD_BYTES
    assert load.loader_plan({"settings": {}}) is None
    files = {
        k: {"path": f"/x/{k}", "size_bytes": 1}
        for k in ("big_pt", "big_safetensors", "small_pt", "small_safetensors")
    }
    big_model = {"config": {"vocab_size": 32000, "hidden_size": 256, "num_layers": 1, "num_heads": 4,
                            "num_kv_heads": 1, "intermediate_size": 512}}  # fmt: skip
    plan, _ = load.cell_plan({"files": files, "small_config": "tiny", "big_model": big_model})
    assert {c["method"] for c in plan} <= {
        "torch.load",
        "torch.load-mmap",
        "load_file",
        "one-tensor",
        "load_file+willneed",
    }


def test_a_loader_not_installed_in_this_venv_is_not_run_with_the_reason():
    """This test venv has no loader installed: the load step's own check says so, naming the setting."""
    got = loaders.status("model_streamer", None)
    assert got["status"] == "not_run"
    assert "runai-model-streamer is not installed in the lab venv" in got["reason"]
    assert (
        "lab_run_load_loaders" in got["reason"] and "No module named 'runai_model_streamer'" in got["reason"]
    )


def test_a_gpu_only_loader_that_is_not_installed_says_so_before_needing_cuda():
    """The import is checked first: a GPU host without the loader needs it installed, not a GPU."""
    got = loaders.status("instanttensor", None, cuda_why=lambda: None)
    assert got["status"] == "not_run" and "instanttensor is not installed in the lab venv" in got["reason"]


def test_the_streamers_log_directories_of_ended_load_processes_are_removed_and_live_ones_kept(tmp_path):
    """A load process killed before it removed its streamer log directory leaves it; the next prepare removes
    it (by the pid in its name), and keeps the directory of a load still running."""
    child = (
        "import os, sys, tempfile\n"
        "print(tempfile.mkdtemp(prefix=f'disklab-runai-{os.getpid()}-', dir=sys.argv[1]))"
    )
    made = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path)], capture_output=True, text=True, check=True
    )
    ended = Path(made.stdout.strip())
    (ended / "streamer.log").write_text("Filesystem strategy: posix\n")
    live = Path(tempfile.mkdtemp(prefix=f"disklab-runai-{os.getpid()}-", dir=tmp_path))
    other = tmp_path / "disklab-runai-notapid-x"
    other.mkdir()
    assert loaders._remove_ended_logs(tmp_path) == [ended]
    assert not ended.exists() and live.is_dir() and other.is_dir()


# --- the cache proof of a loader that bypasses the page cache ---------------------------------------------

SIZE = 64 << 20


def _record(method, state_fraction, device_read, page_cache="bypassed"):
    return {
        "method": method,
        "touched_bytes": SIZE,
        "file_size_bytes": SIZE,
        "before": {"cache": {"method": "cachestat", "fraction": state_fraction, "trust": "ok"}},
        "read_path": {
            "mapping": False,
            "page_cache": page_cache,
            "how": "io_uring_direct: O_DIRECT reads",
            "source": "log",
        },
        "stages": {
            "all_touched": {
                "io": {
                    "process": {"read_bytes": 0, "write_bytes": 0, "source": "/proc/self/io"},
                    "device": {"name": "vda", "read_bytes": device_read, "written_bytes": 0},
                    "faults": {"major": 0, "minor": 10},
                }
            }
        },
    }


def test_a_bypassing_loader_is_cold_without_faults_and_never_warm_when_the_device_delivered():
    cold = proof.cache_proof(_record("model_streamer", 0.0, SIZE + 4096), "cold")
    assert cold["verdict"] == "cold" and cold["parts"]["major_faults"]["status"] == "not_applicable"
    assert "io_uring_direct" in cold["parts"]["major_faults"]["why"] and cold["page_cache"]["bypassed"]
    warm = proof.cache_proof(_record("model_streamer", 1.0, SIZE), "warm")
    assert warm["verdict"] == "warm_unverified" and warm["failed"] == ["device_reads"]
    assert "read the device, not the page cache" in warm["parts"]["device_reads"]["why"]
    quiet = proof.cache_proof(_record("model_streamer", 1.0, 8192), "warm")
    assert quiet["verdict"] == "warm"
    buffered = proof.cache_proof(_record("tensorizer", 1.0, SIZE, page_cache="used"), "warm")
    assert (
        buffered["verdict"] == "warm"
        and "page_cache" not in buffered
        and list(buffered["parts"]) == ["residency"]
    )


# --- one real lab venv with the loaders --------------------------------------------------------------------


def _provision(venv: Path, *extra: str, loader_names=ALL, timeout: int = 1500) -> subprocess.CompletedProcess:
    """``python -m disklab_host provision`` as the lab_venv role runs it on localhost (the role's torch
    index, LAB_VENV_BASE's Python), with the loaders ``loader_names``, and pip's ``--no-compile``
    (conftest.PROVISION_QUICKLY: what pip compiles is not what these tests check)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    argv = [LAB_VENV_BASE, "-m", "disklab_host", "provision", "--venv", str(venv), "--torch-index", "auto"]
    argv += [f"--pip-arg={a}" for a in PROVISION_QUICKLY["lab_venv_pip_args"]]
    argv += [f"--pin={p}" for p in PINS] + [f"--loader={n}" for n in loader_names] + list(extra)
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def lab_venv(tmp_path_factory) -> tuple[Path, dict, dict]:
    """The run's lab venv (hard links of its template: tests/shared.py), with every loader added by
    provisioning, as a user's kept venv gets the loaders of a new ``lab_run_load_loaders``. Provisioning a
    venv from nothing with the loaders is the netfs host's (tests/test_fleet_netfs.py)."""
    venv = tmp_path_factory.mktemp("loaders") / "venv"
    shared.seed_lab_venv(tmp_path_factory, venv, LAB_VENV_BASE)
    torch_files = {p: p.stat().st_ino for p in (venv / "lib").glob("python3*/site-packages/torch/*.py")}
    first = _provision(venv)
    assert first.returncode == 0, first.stderr[-3000:]
    return venv, result_line.parse(first.stdout), torch_files


def _in_venv(
    venv: Path, script: str, *args: str, timeout: int = 900, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``script`` with the venv's Python, the host package on PYTHONPATH, as the lab runs its steps."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.mark.slow
def test_provisioning_pins_the_loaders_and_a_second_run_changes_nothing(lab_venv):
    venv, first, torch_files = lab_venv
    assert (first["action"], first["changed"]) == ("extended", True), first
    assert "only the loader(s) " + ", ".join(ALL) + " are added" in first["reason"]
    assert "pip's transport options differ ([] -> ['--no-compile'])" in first["reason"]
    # torch was not installed again: its files are the seeded venv's, the same inodes
    assert torch_files and {p: p.stat().st_ino for p in torch_files} == torch_files
    for name in ALL:
        got = first["loaders"][name]
        assert got["status"] == "ok" and got["pins"] == list(loaders.BY_NAME[name].pins), got
        assert f"{loaders.BY_NAME[name].dist}=={got['version']}" in got["pins"]
    record = json.loads((venv / venvrecord.RECORD_NAME).read_text())
    assert record["loaders"] == {n: list(loaders.BY_NAME[n].pins) for n in ALL}
    # each from its own lock on the venv's (every loader has one for Linux x86_64, CPython 3.11, CPU), with
    # --require-hashes: the venv holds each package of each lock at the lock's version
    dists = record["probe"]["result"]["dists"]
    for name in ALL:
        lock = locklib.load(f"loaders/{name}/{record['lock']['name']}")
        got = first["loaders"][name]["lock"]
        assert got == {"locked": True, "name": lock.name, "sha256": lock.sha256, "why": got["why"]}
        assert {k: dists.get(k) for k in lock.packages} == lock.packages, name
    assert record["loader_locks"] == {n: {"name": r["lock"]["name"], "sha256": r["lock"]["sha256"]}
                                      for n, r in first["loaders"].items()}  # fmt: skip
    again = _provision(venv)
    out = result_line.parse(again.stdout)
    assert (out["action"], out["changed"]) == ("kept", False), out
    assert out["loaders"] == first["loaders"]
    same = _provision(venv, "--check")
    would = result_line.parse(_provision(venv, "--check", loader_names=CPU).stdout)  # loaders removed
    assert (would["action"], would["changed"]) == ("would_rebuild", True) and "loaders" in would["reason"]
    assert result_line.parse(same.stdout)["action"] == "would_keep"
    assert json.loads((venv / venvrecord.RECORD_NAME).read_text()) == record  # --check changed nothing


@pytest.mark.slow
def test_a_kept_venv_tries_pip_again_for_a_loader_it_could_not_install(lab_venv, tmp_path):
    """The record says pip could not install tensorizer (as on a host whose wheelhouse lacked a dependency);
    the next run keeps the venv, tries that loader again and records it installed. On a hard-linked copy
    of the module's venv: the record is replaced by an atomic write, so the original is not touched."""
    venv = tmp_path / "venv"
    subprocess.run(["cp", "-al", str(lab_venv[0]), str(venv)], check=True)
    record_path = venv / venvrecord.RECORD_NAME
    record = json.loads(record_path.read_text())
    failed = {"status": "not_run", "reason": "pip could not install tensorizer==2.12.1: ERROR: (test)"}
    record[loaders.RECORD_KEY]["tensorizer"] = {**failed, "pins": list(loaders.BY_NAME["tensorizer"].pins)}
    record_path.unlink()
    record_path.write_text(json.dumps(record))
    would = result_line.parse(_provision(venv, "--check").stdout)
    assert (would["action"], would["changed"]) == ("would_keep", True), would
    assert "would try pip again for the loader(s) it could not install before: tensorizer" in would["reason"]
    cp = _provision(venv)
    out = result_line.parse(cp.stdout)
    assert (out["action"], out["changed"]) == ("kept", True), (out, cp.stderr[-2000:])
    assert (
        "tried pip again for the loader(s) it could not install before: tensorizer installed" in out["reason"]
    )
    assert out["loaders"]["tensorizer"]["status"] == "ok"
    assert json.loads(record_path.read_text())[loaders.RECORD_KEY]["tensorizer"]["status"] == "ok"
    again = result_line.parse(_provision(venv).stdout)
    assert (again["action"], again["changed"]) == ("kept", False), again


@pytest.mark.slow
def test_a_loader_pip_cannot_install_is_not_run_with_pips_last_line(lab_venv):
    venv = lab_venv[0]
    got = pvloaders.install_loader(venv, "instanttensor", [], pins=["instanttensor==0.0.0"])
    assert got["status"] == "not_run" and got["reason"].startswith(
        "pip could not install instanttensor==0.0.0: "
    )
    assert "instanttensor==0.0.0" in got["reason"].split(": ", 1)[1]  # pip's own last line names it
    assert loaders.status("instanttensor", {loaders.RECORD_KEY: {"instanttensor": got}}) == {
        "status": "not_run",
        "reason": got["reason"],
    }


BITWISE = r"""
import json, os, sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
from disklab_host.loadlab import loaders, prep
workdir = Path(sys.argv[1])
path = workdir / "m.safetensors"
g = torch.Generator().manual_seed(7)
sd = {"w.bf16": torch.randn(300, 257, generator=g).to(torch.bfloat16), "b.f32": torch.randn(31, generator=g),
      "h.f16": torch.randn(5, 3, generator=g).to(torch.float16), "i.i64": torch.arange(-5, 6),
      "u.u8": torch.arange(0, 200, dtype=torch.uint8), "s.scalar": torch.tensor(3.5),
      "z.empty": torch.zeros(0, 4)}
save_file(sd, str(path))
want = load_file(str(path))
entry = prep._describe(path, "safetensors", want)
manifest = {"files": {"big_safetensors": entry, "small_safetensors": dict(entry)}}
manifest = prep.ensure_tensorizer(manifest, workdir, True)  # tensorizer's file, as prep writes it
tz = manifest["files"]["big_tensors"]
mtime = os.stat(tz["path"]).st_mtime_ns
again = prep.ensure_tensorizer(json.loads(json.dumps(manifest)), workdir, True)
kept = again["files"]["big_tensors"] == tz and os.stat(tz["path"]).st_mtime_ns == mtime


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8).tolist()


out = {"tensorizer_kept": kept}
for name in sys.argv[2:]:
    p = tz["path"] if name == "tensorizer" else str(path)
    got = loaders.load(loaders.prepare(name, {}, [p]), [p])
    out[name] = sorted(got) == sorted(want) and all(
        got[k].dtype == want[k].dtype and got[k].shape == want[k].shape and got[k].device.type == "cpu"
        and raw(got[k]) == raw(want[k]) for k in want)
gone = prep.ensure_tensorizer(again, workdir, False)
out["tensorizer_removed"] = "big_tensors" not in gone["files"] and not (workdir / "big.tensors").exists()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_each_cpu_loader_gives_load_files_tensors_bit_for_bit(lab_venv, tmp_path):
    venv = lab_venv[0]
    tmp = tmp_path / "tmp"  # the loaders' temp directory, to see what they leave there
    tmp.mkdir()
    cp = _in_venv(venv, BITWISE, str(tmp_path), *CPU, env={"TMPDIR": str(tmp)})
    assert cp.returncode == 0, cp.stderr[-3000:]
    want = {**dict.fromkeys(CPU, True), "tensorizer_kept": True, "tensorizer_removed": True}
    assert json.loads(cp.stdout.strip().splitlines()[-1]) == want
    # the streamer's log directory is gone with its process, though nothing read it after the load
    assert not list(tmp.glob("disklab-runai-*"))


STEP = r"""
import json, sys
from pathlib import Path
from disklab_host import registry
from disklab_host.steps import load
from disklab_host.loadlab import loaders
workdir, names, record = Path(sys.argv[1]), sys.argv[2].split(","), json.loads(sys.argv[3])
sizes = registry.resolve("quick", {"load_big_mib": 32, "load_repeats": 1})
knobs = {"model_streamer": {"concurrency": 4}}
cfg = {"sizes": sizes, "system": "Linux", "become_allowed": False, "profile": "quick",
       "settings": {"load_loaders": names, "load_loader_knobs": knobs}}
from disklab_host.loadlab import prep
# The others the loaders are measured beside: load_file's cells of the big file, which read the same file
# (the checks below compare with them). Every other method's cells are measured in tests/test_load.py.
load.BIG_CELLS = tuple(c for c in load.BIG_CELLS if c[1] == "load_file")
load.SMALL_CELLS = ()
plan = load.loader_plan(cfg, {**(loaders.venv_record() or {}), **record})
usable = [n for n, r in plan["loaders"].items() if r["status"] == "ok"]
formats = tuple(sorted({loaders.BY_NAME[n].file_format for n in usable} - {"safetensors"}))
manifest = prep.prepare(cfg, workdir, formats)
section = load.measure(cfg, manifest, eviction_methods=["fadvise_dontneed"], two_workers=False,
                       loader_summary=plan)
print(json.dumps(section))
"""


@pytest.mark.slow
def test_the_load_step_measures_the_loaders_beside_the_others_and_names_what_did_not_run(lab_venv, workbench):
    """fastsafetensors as if pip had failed on this host (its outcome in the venv's record), instanttensor
    without a GPU: both not_run with the reason, while model_streamer and tensorizer run every cell."""
    venv = lab_venv[0]
    failed = {
        "status": "not_run",
        "reason": "pip could not install fastsafetensors==0.5.0: ERROR: no wheel (test)",
    }
    record = {loaders.RECORD_KEY: {"fastsafetensors": failed}}
    cp = _in_venv(venv, STEP, str(workbench), ",".join(ALL), json.dumps(record), timeout=1500)
    assert cp.returncode == 0, cp.stderr[-3000:]
    section = json.loads(cp.stdout.strip().splitlines()[-1])
    schemas.validator(SCHEMA).validate(section)
    lo = section["loaders"]["loaders"]
    assert lo["fastsafetensors"] == {**lo["fastsafetensors"], **failed}
    assert lo["instanttensor"]["status"] == "not_run" and lo["instanttensor"]["reason"].startswith(
        "needs CUDA: "
    )
    assert "torch.cuda.is_available() is False" in lo["instanttensor"]["reason"]
    assert lo["instanttensor"]["gpu_path_run"] is False
    for name in ("model_streamer", "tensorizer"):
        assert lo[name]["status"] == "ok" and lo[name]["version"] in " ".join(lo[name]["pins"])
    assert lo["model_streamer"]["knobs"]["concurrency"] == {
        **lo["model_streamer"]["knobs"]["concurrency"],
        "value": 4,
        "source": "inventory",
    }
    assert lo["tensorizer"]["knobs"]["num_readers"]["source"] == "default"
    methods = {
        (c["method"], c["file"], c["populate"], c["cache_state_requested"]) for c in section["samples"]
    }
    for name, big in (("model_streamer", "big_safetensors"), ("tensorizer", "big_tensors")):
        # a loader populates the big model, as every whole-file method does, up to first_response
        assert {(name, big, load.BIG_POPULATE, "cold"), (name, big, load.BIG_POPULATE, "warm")} <= methods
    assert not {m for m, *_ in methods} & {"fastsafetensors", "instanttensor"}
    assert section["files"]["big_tensors"]["format"] == "tensorizer"
    assert section["files"]["big_tensors"]["size_bytes"] > section["files"]["big_safetensors"]["size_bytes"]
    for s in section["samples"]:
        if s["method"] not in loaders.NAMES:
            assert "loader" not in s and "read_path" not in s
            continue
        assert s["loader"]["knobs"]["concurrency" if s["method"] == "model_streamer" else "num_readers"]
        assert s["process"]["loader_import_s"] >= 0 and s["touched_bytes"] > 0
        st = s["stages"]
        assert st["loader_return"]["time_s"] <= st["all_touched"]["time_s"]
        if s["populate"]:
            assert (
                st["loader_return"]["time_s"]
                <= st["module_populated"]["time_s"]
                <= st["all_touched"]["time_s"]
            )
        if s["cache_state_requested"] == "cold":
            assert s["cache_state"] == "cold", s["cache_proof"]
            assert s["cache_proof"]["parts"]["major_faults"]["status"] == "not_applicable"
    streamed = next(s for s in section["samples"] if s["method"] == "model_streamer")
    assert streamed["read_path"]["source"].startswith("the streamer's own log line")
    tz_warm = [
        s for s in section["samples"] if s["method"] == "tensorizer" and s["cache_state_requested"] == "warm"
    ]
    # tensorizer reads through the page cache: its warm proof is residency alone (no device-reads part, as
    # a bypassing loader's has), and it is warm exactly when that part passed. Whether it passed depends on
    # this shared machine: memory pressure from the tests beside this one can evict the file between the
    # warm-up read and the call, which the proof must then catch (test_load.py's _requested says the same).
    assert tz_warm
    for s in tz_warm:
        p = s["cache_proof"]
        assert s["read_path"]["page_cache"] == "used" and list(p["parts"]) == ["residency"], p
        assert (s["cache_state"] == "warm") == (p["parts"]["residency"]["status"] == "pass"), p
    # the same file, and the same tensors touched, as load_file's rows
    lf = next(s for s in section["samples"] if s["method"] == "load_file" and s["file"] == "big_safetensors")
    ms = next(
        s for s in section["samples"] if s["method"] == "model_streamer" and s["file"] == "big_safetensors"
    )
    assert (ms["touched_bytes"], ms["checksum"], ms["file_size_bytes"]) == (
        lf["touched_bytes"],
        lf["checksum"],
        lf["file_size_bytes"],
    )
