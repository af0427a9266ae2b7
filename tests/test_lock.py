"""The lab venv's hash locks: the locks in the repo, which one a host gets, pip's refusal of a file with
another hash, and a real venv installed from the CPU lock with --require-hashes; the extras' locks (the
production loaders'): how `make locks` makes them (a fake uv), which one a loader gets, and its install."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from disklab import locks as lockgen
from disklab.compare import compare_runs, render_compare_text
from disklab_host import lock as locklib
from disklab_host.audit import collect
from disklab_host.loadlab import loaders as loaderlib
from disklab_host.provision import command, errors, hostfacts, install, torchindex, venvrecord, venvstate
from disklab_host.provision import loaders as pvloaders

REPO = Path(__file__).resolve().parents[1]
PINS = yaml.safe_load((REPO / "roles" / "lab_venv" / "defaults" / "main.yml").read_text())[
    "lab_venv_packages"
]
PARSED = hostfacts.parse_pins(PINS)
CPU_LOCK = "linux-x86_64-cpu-py3.11"
LOCKS_DIR = REPO / "src" / "disklab_host" / "locks"
FIXTURES = REPO / "tests" / "fixtures" / "compare"

# pip 23.2's words (the venv's own pip here) for a lock whose filelock hashes are not the file's.
PIP_MISMATCH = """\
Collecting filelock==4.3.2 (from -r /tmp/lock_bad.txt (line 4))
  Downloading filelock-4.3.2-py3-none-any.whl (244 kB)
ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package \
versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have \
tampered with them.
    filelock==4.3.2 from https://files.pythonhosted.org/packages/d7/4f/filelock-4.3.2-py3-none-any.whl \
(from -r /tmp/lock_bad.txt (line 4)):
        Expected sha256 0000000000000000000000000000000000000000000000000000000000000000
        Expected     or 1111111111111111111111111111111111111111111111111111111111111111
             Got        02a8801bc6b2a80921bf3d7895c63084d53bae2a3c86783adce5ae2b89a1825b
"""


# --- the locks in the repo -------------------------------------------------------------------------


def test_every_lock_the_generator_makes_is_in_the_repo_from_the_roles_pins_with_every_file_hashed():
    made = locklib.names()
    assert made == sorted(f"{p}-py{v}" for p, versions in lockgen.LOCKS.items() for v in versions)
    assert set(lockgen.LOCKS) == set(locklib.PLATFORMS) == set(lockgen.UV_PLATFORM)
    for name in made:
        lock = locklib.load(name)
        assert lock.pins == PARSED, name
        assert {k: lock.packages[k].split("+")[0] for k in PARSED} == PARSED, name
        assert {"filelock", "sympy", "typing-extensions"} <= set(lock.packages), name
        blocks = [b for b in lock.text.split("\n") if b and not b.startswith((" ", "#"))]
        assert len(blocks) == len(lock.packages) and all(b.endswith("\\") for b in blocks), name
    assert locklib.load(CPU_LOCK).packages["torch"] == "2.13.0+cpu"
    assert "nvidia-cublas" in locklib.load("linux-aarch64-cuda-py3.12").packages
    assert "nvidia-cublas" not in locklib.load("macos-arm64-py3.12").packages


# Where `make locks` found no wheel (uv's words, printed when the locks were made): these have no lock.
NO_WHEEL = {
    (loader, base)
    for loader in ("model_streamer", "fastsafetensors", "instanttensor")
    for base in ("macos-arm64-py3.11", "macos-arm64-py3.12")
}


def test_every_loader_lock_in_the_repo_extends_its_base_lock_by_its_sha256_with_only_what_it_lacks():
    assert tuple(lockgen.extras()) == locklib.EXTRA_GROUPS
    loaders = lockgen.extras()["loaders"]
    assert set(loaders) == {spec.name for spec in loaderlib.LOADERS}
    files = {p.relative_to(REPO / "src/disklab_host/locks").as_posix() for p in LOCKS_DIR.rglob("*/*/*.txt")}
    made = {
        f"loaders/{n}/{base}.txt" for n in loaders for base in locklib.names() if (n, base) not in NO_WHEEL
    }
    assert files == made  # nothing stale: every file is a known loader's on a lock of the repo
    for name, pins in loaders.items():
        for base_name in locklib.extra_names("loaders", name):
            base, lock = locklib.load(base_name), locklib.load(f"loaders/{name}/{base_name}")
            assert lock.extends == (base_name, base.sha256), (name, base_name)
            assert lock.pins == {locklib.canonical(p.split("==")[0]): p.split("==")[1] for p in pins}
            assert lock.packages and not set(lock.packages) & set(base.packages), (name, base_name)
            assert set(lock.pins) <= set(lock.packages) and lock.extra_index is None
            blocks = locklib.requirements(lock.text)
            assert all("--hash=sha256:" in b for b in blocks.values()) and len(blocks) == len(lock.packages)
            chosen, why = locklib.choose_extra("auto", base, "loaders", name, lock.pins)
            assert chosen == lock and f"the lock loaders/{name}/{base_name}: " in why


def test_the_generator_asks_uv_for_hashes_for_each_platform_and_the_cpu_build_from_its_sources(tmp_path):
    reqs = tmp_path / "in"
    argv = lockgen.uv_argv("uv", "linux-x86_64-cpu", "3.11", reqs, [locklib.CPU_INDEX])
    assert argv[argv.index("--python-platform") + 1] == "x86_64-manylinux_2_28"
    assert "--generate-hashes" in argv and argv[-2:] == ["--extra-index-url", locklib.CPU_INDEX]
    mirror = lockgen.uv_argv("uv", "linux-x86_64-cpu", "3.11", reqs, [str(tmp_path)], "file:///mirror")
    assert mirror[-6:] == ["--find-links", str(tmp_path), "--index-url", "file:///mirror",
                           "--index-strategy", "unsafe-best-match"]  # fmt: skip
    spark = lockgen.uv_argv("uv", "linux-aarch64-cuda", "3.12", reqs, [str(tmp_path)], "file:///mirror")
    assert "--find-links" not in spark and "--index-url" not in spark and "aarch64-manylinux_2_28" in spark
    head = lockgen.header("linux-x86_64-cpu", "3.11", PINS, [str(tmp_path), "PyPI"])
    assert locklib.parse(head).pins == PARSED and f"# Resolved from: {tmp_path}, PyPI" in head


def test_make_locks_is_one_command_from_the_test_venv():
    makefile = (REPO / "Makefile").read_text()
    assert "\nlocks: $(TEST_VENV)/.installed\n\t$(TEST_VENV)/bin/python -m disklab.locks" in makefile
    assert any(dep.startswith("uv==") for dep in _test_extras())


def _test_extras() -> list[str]:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]


# --- which lock a host gets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "machine", "python", "index", "name"),
    [
        ("Linux", "x86_64", (3, 11), locklib.CPU_INDEX, CPU_LOCK),
        ("Linux", "x86_64", (3, 11), locklib.CPU_INDEX + "/", CPU_LOCK),  # the same index, written with a /
        ("Linux", "x86_64", (3, 12), locklib.CUDA_INDEX, "linux-x86_64-cuda-py3.12"),
        ("Linux", "x86_64", (3, 11), None, "linux-x86_64-cuda-py3.11"),  # PyPI's Linux torch: CUDA 13.0
        ("Linux", "aarch64", (3, 12), locklib.CUDA_INDEX, "linux-aarch64-cuda-py3.12"),
        ("Darwin", "arm64", (3, 12), None, "macos-arm64-py3.12"),
    ],
)
def test_each_platform_and_torch_build_gets_its_lock(system, machine, python, index, name):
    lock, why = locklib.choose("auto", system, machine, python, index, PARSED)
    assert lock is not None and lock.name == name and name in why
    assert locklib.choose("required", system, machine, python, index, PARSED)[0] == lock
    assert locklib.choose("never", system, machine, python, index, PARSED) == (None, "lab_venv_lock is never")


@pytest.mark.parametrize(
    ("system", "machine", "python", "index", "pins", "words"),
    [
        ("Linux", "x86_64", (3, 11), "https://m.example/whl", PARSED, "lab_venv_torch_index is the index"),
        ("Linux", "x86_64", (3, 12), locklib.CPU_INDEX, PARSED, "no lock linux-x86_64-cpu-py3.12 for this "),
        ("Linux", "aarch64", (3, 12), locklib.CPU_INDEX, PARSED, "no lock is made for Linux aarch64"),
        ("Linux", "x86_64", (3, 11), None, {**PARSED, "torch": "2.12.0"}, "make the locks again with `make"),
    ],
)  # fmt: skip
def test_a_host_without_a_lock_gets_the_pins_alone_and_one_line_why(
    system, machine, python, index, pins, words
):
    lock, why = locklib.choose("auto", system, machine, python, index, pins)
    assert lock is None and words in why and "\n" not in why


def test_lab_venv_lock_required_refuses_a_host_without_one_and_a_bad_value_before_any_download(tmp_path):
    host = hostfacts.HostFacts("Linux", "x86_64", nvidia_gpu=False, python_version=(3, 11))
    venv = tmp_path / "venv"
    with pytest.raises(
        errors.Refused, match=r"lab_venv_lock is required but lab_venv_torch_index is the index URL"
    ):
        command.provision(venv, PINS, "https://mirror.example/whl", facts=host, lock_setting="required")
    with pytest.raises(
        errors.Refused, match=r"lab_venv_lock must be one of auto, required, never, got 'off'"
    ):
        command.provision(venv, PINS, "cpu", facts=host, lock_setting="off")
    assert not venv.exists()


def test_check_mode_says_which_lock_and_an_explicit_index_url_works_unlocked(tmp_path):
    host = hostfacts.HostFacts("Linux", "x86_64", nvidia_gpu=False, python_version=(3, 11))
    out = command.provision(tmp_path / "venv", PINS, "cpu", check=True, facts=host)
    assert out["lock"]["locked"] and out["lock"]["name"] == CPU_LOCK
    assert out["lock"]["sha256"] == locklib.load(CPU_LOCK).sha256
    url = command.provision(tmp_path / "venv", PINS, "https://mirror.example/whl", check=True, facts=host)
    assert url["lock"]["locked"] is False and "lab_venv_torch_index is the index URL" in url["lock"]["why"]
    assert url["torch_index"] == "https://mirror.example/whl" and url["action"] == "would_create"


def test_a_venv_made_before_locks_is_rebuilt_from_its_lock_and_an_unlocked_one_kept_as_it_was():
    host = hostfacts.HostFacts("Linux", "x86_64", nvidia_gpu=False, python_version=(3, 11))
    lock, _ = locklib.choose(
        "auto", host.system, host.machine, host.python_version, torchindex.CPU_INDEX, PARSED
    )
    assert venvrecord.wanted_record(PINS, torchindex.CPU_INDEX, [], lock=lock)["lock"] == {
        "name": CPU_LOCK,
        "sha256": lock.sha256,
    }
    assert venvrecord.wanted_record(PINS, "https://mirror.example/whl", [])["lock"] is None


def test_a_kept_venv_that_no_longer_holds_its_locks_versions_is_rebuilt(tmp_path, monkeypatch):
    """A locked venv whose filelock moved after provisioning (a pip install by hand) is rebuilt: it must
    hold every package of its lock, not only the pins."""
    host = hostfacts.HostFacts("Linux", "x86_64", nvidia_gpu=False, python_version=(3, 11))
    lock = locklib.load(CPU_LOCK)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    moved = {**lock.packages, "filelock": "99.0"}
    found = {"result": {"dists": moved, "torch": "2.13.0+cpu", "safetensors": "0.8.0", "numpy": "2.4.6"}}
    monkeypatch.setattr(
        venvstate, "probe_or_recorded", lambda venv, record: ({**found, "from": "probed_now"}, "probed")
    )
    want = venvrecord.wanted_record(PINS, torchindex.CPU_INDEX, [], lock=lock)
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(want))
    out = command.provision(venv, PINS, "cpu", check=True, facts=host)
    assert (
        out["action"] == "would_rebuild"
        and f"filelock 99.0 (pinned {lock.packages['filelock']})" in out["reason"]
    )
    found["result"]["dists"] = lock.packages
    assert command.provision(venv, PINS, "cpu", check=True, facts=host)["action"] == "would_keep"


# --- pip's refusal --------------------------------------------------------------------------------


def test_a_file_with_another_hash_is_refused_in_one_line_naming_the_package():
    line = locklib.hash_refusal(PIP_MISMATCH, CPU_LOCK)
    assert "\n" not in line
    assert line.startswith(
        "the index served filelock==4.3.2 (filelock-4.3.2-py3-none-any.whl from files.pytho"
    )
    assert "sha256 02a8801bc6b2a80921bf3d7895c63084d53bae2a3c86783adce5ae2b89a1825b" in line
    assert f"the lock {CPU_LOCK} does not list" in line
    assert locklib.hash_refusal("ERROR: No matching distribution found for torch==2.13.0", CPU_LOCK) is None


def test_torch_alone_comes_from_the_cpu_index_and_the_whole_lock_from_pips_own(tmp_path):
    lock = locklib.load(CPU_LOCK)
    first, second = locklib.commands(["pip", "install"], tmp_path, lock, ["--no-compile"])
    assert first[-4:] == [
        "--index-url",
        locklib.CPU_INDEX,
        "-r",
        str(tmp_path / f"{locklib.COPY_NAME}.torch"),
    ]
    assert (
        (tmp_path / f"{locklib.COPY_NAME}.torch").read_text().startswith("torch==2.13.0+cpu \\\n    --hash=")
    )
    assert second == ["pip", "install", "--require-hashes", "--no-deps", "-r",
                      str(tmp_path / locklib.COPY_NAME), "--no-compile"]  # fmt: skip
    assert (tmp_path / locklib.COPY_NAME).read_text() == lock.text
    spark = locklib.commands(["pip"], tmp_path, locklib.load("linux-aarch64-cuda-py3.12"), [])
    assert len(spark) == 1 and "--index-url" not in spark[0]


@pytest.mark.slow
def test_pip_refuses_a_file_the_lock_does_not_list_naming_the_package(tmp_path):
    """A real pip, a real venv: the CPU lock with filelock's hashes replaced is refused at filelock, in one
    line naming it, before anything is installed."""
    real = locklib.load(CPU_LOCK)
    start = real.text.index("\nfilelock==") + 1
    end = re.search(r"\n(?! )", real.text[start:]).start() + start
    assert re.search(r"sha256:[0-9a-f]{64}", real.text[start:end])
    text = real.text[:start] + re.sub(r"[0-9a-f]{64}", "0" * 64, real.text[start:end]) + real.text[end:]
    # the CUDA platform's commands: one pip install of the whole lock, no CPU index to wait on
    bad = dataclasses.replace(real, text=text, platform="linux-x86_64-cuda")
    venv = tmp_path / "venv"
    with pytest.raises(errors.Refused) as info:
        install.install(venv, PINS, "2.13.0", None, [], bad)
    msg = str(info.value)
    filelock = f"filelock=={real.packages['filelock']}"
    assert msg.startswith(f"the index served {filelock} (filelock-") and "\n" not in msg
    assert f"the lock {CPU_LOCK} does not list" in msg
    assert not list(venv.glob("lib/python*/site-packages/torch"))


@pytest.mark.slow
def test_a_real_venv_from_the_cpu_lock_holds_exactly_the_lock_and_records_it(tmp_path):
    """provision as the role runs it, on this host (Linux x86_64, CPython 3.11, no GPU): the CPU lock,
    installed with --require-hashes; the venv holds every package of the lock at its version, and the
    audit's facts carry the lock's digest and every package."""
    if sys.version_info[:2] != (3, 11) or hostfacts.collect_host().machine != "x86_64":
        pytest.skip("the CPU lock is made for Linux x86_64 and CPython 3.11")
    venv = tmp_path / "venv"
    argv = [sys.executable, "-m", "disklab_host", "provision", f"--venv={venv}", "--torch-index=cpu",
            "--lock=required", "--pip-arg=--no-compile", *[f"--pin={p}" for p in PINS]]  # fmt: skip
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    cp = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800, check=False)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    out = json.loads(cp.stdout.splitlines()[-1].split(" ", 1)[1])
    lock = locklib.load(CPU_LOCK)
    assert out["lock"] == {"locked": True, "name": CPU_LOCK, "sha256": lock.sha256, "why": out["lock"]["why"]}
    assert out["torch_index"] == torchindex.CPU_INDEX and (venv / locklib.COPY_NAME).read_text() == lock.text
    versions, _ = collect.collect_versions(collect.Probe(), str(venv / "bin" / "python"))
    installed = {k: v for k, v in versions["packages"].items() if k != "pip"}
    assert installed == lock.packages
    assert versions["lock"] == out["lock"]


# --- what is recorded, and compare -----------------------------------------------------------------


def test_the_audit_reads_the_lock_from_the_venvs_record(tmp_path):
    (tmp_path / "disklab-venv.json").write_text(
        json.dumps({"lock": None, "lock_why": "lab_venv_lock is never"})
    )
    assert collect.venv_lock(tmp_path) == {"locked": False, "name": None, "sha256": None,
                                          "why": "lab_venv_lock is never"}  # fmt: skip
    (tmp_path / "disklab-venv.json").write_text(json.dumps({"pins": PINS}))
    assert "before disklab installed from hash locks" in collect.venv_lock(tmp_path)["why"]
    assert "unavailable" in collect.venv_lock(tmp_path / "none")


def test_compare_names_a_transitive_package_that_moved():
    old = json.loads((FIXTURES / "old.json").read_text())
    new = copy.deepcopy(json.loads((FIXTURES / "new.json").read_text()))
    old = copy.deepcopy(old)
    packages = {"filelock": "4.3.2", "sympy": "1.14.0", "torch": "2.13.0+cpu"}
    old["facts"]["versions"]["packages"] = packages
    new["facts"]["versions"]["packages"] = {**packages, "filelock": "4.3.3"}
    cmp = compare_runs(old, new)
    moved = [c for c in cmp["fact_changes"] if c["path"].startswith("facts.versions.packages.")]
    assert moved == [{"path": "facts.versions.packages.filelock", "old": "4.3.2", "new": "4.3.3"}]
    assert "  facts.versions.packages.filelock: 4.3.2 -> 4.3.3" in render_compare_text(cmp).splitlines()


def test_packages_first_recorded_in_the_newer_run_are_one_line_recorded_in_one_run_only():
    old = json.loads((FIXTURES / "old.json").read_text())
    new = copy.deepcopy(json.loads((FIXTURES / "new.json").read_text()))
    old["facts"]["versions"]["packages"] = {"unavailable": "not recorded: written before facts version 7"}
    new["facts"]["versions"]["packages"] = {"filelock": "4.3.2", "sympy": "1.14.0", "torch": "2.13.0+cpu"}
    cmp = compare_runs(old, new)
    assert not [c for c in cmp["fact_changes"] if "packages" in c["path"]]  # the older format predates it
    changes = [c for c in cmp["facts_recorded_in_one"] if "packages" in c["path"]]
    assert changes == [
        {
            "path": "facts.versions.packages",
            "old": {"unavailable": "not recorded: written before facts version 7"},
            "new": "recorded (3 values)",
        }
    ]


# --- the extras' locks: how `make locks` makes them -------------------------------------------------

# A stand-in for uv: it copies its argv and the constraints it was given into LOG, then answers as uv does
# for the extra named in its requirements (the words are uv 0.13's).
FAKE_UV = """\
import json, sys
argv = sys.argv[1:]
reqs = open(argv[2]).read()
held = open(argv[argv.index("--constraint") + 1]).read()
with open({log!r}, "a") as log:
    log.write(json.dumps({{"argv": argv, "reqs": reqs, "constraints": held}}) + "\\n")
if "alpha==" in reqs:  # the base lock's packages at its versions, the extra and what it needs
    print(held.replace("\\n", " \\\\\\n    --hash=sha256:" + "e" * 64 + "\\n"), end="")
    for name, digit in (("alpha==1.0", "a"), ("tiny==0.1", "b")):
        print(name + " \\\\\\n    --hash=sha256:" + digit * 64)
elif "beta==" in reqs:
    sys.exit("error: No solution found when resolving dependencies\\n  cause: Because beta==2.0 has no "
             "wheels with a matching platform tag (e.g., `macosx_14_0_arm64`) and you require beta==2.0, we "
             "can conclude that your requirements are unsatisfiable.")
elif "gamma==" in reqs:
    print("error: Request failed after 3 retries\\n  cause: tcp connect error", file=sys.stderr)
    sys.exit(2)
elif "delta==" in reqs:  # a base package at another version: never written
    print(held.replace("filelock==", "filelock==9.9\\nfilelock-old==") + "delta==1.0")
else:
    sys.exit("error: No solution found when resolving dependencies\\n  cause: Because eps==1.0 depends "
             "on numpy<2 and you require numpy==2.4.6, we can conclude that your requirements are "
             "unsatisfiable.")
"""


def test_make_locks_writes_each_extras_lock_on_its_base_and_says_why_one_is_not_made(
    tmp_path, monkeypatch, capsys
):
    log, uv = tmp_path / "uv.log", tmp_path / "uv"
    uv.write_text(f"#!{sys.executable}\n" + FAKE_UV.format(log=str(log)))
    uv.chmod(0o755)
    out_dir = tmp_path / "locks"
    monkeypatch.setattr(lockgen, "OUT_DIR", out_dir)
    extras = {n: [f"{n}==1.0"] for n in ("alpha", "beta", "gamma", "delta", "eps")}
    monkeypatch.setattr(lockgen, "extras", lambda: {"loaders": extras})
    old = {n: out_dir / "loaders" / n / f"{CPU_LOCK}.txt" for n in extras}
    for name in ("beta", "gamma"):
        old[name].parent.mkdir(parents=True)
        old[name].write_text("an older lock\n")
    argv = ["--extras-only", "--only", CPU_LOCK, "--uv", str(uv), "--cpu-source", "/opt/wheels"]
    assert lockgen.main([*argv, "--cpu-index-url", "file:///mirror"]) == 1
    said, err = capsys.readouterr()
    base = locklib.load(CPU_LOCK)

    alpha = old["alpha"].read_text()
    assert locklib.parse(alpha) == locklib.Parsed(
        {"alpha": "1.0"}, {"alpha": "1.0", "tiny": "0.1"}, (CPU_LOCK, base.sha256)
    )
    assert (
        "# Resolved from: PyPI, /opt/wheels, file:///mirror\n" in alpha and "sha256:" + "e" * 64 not in alpha
    )
    assert f"loaders/alpha/{CPU_LOCK}: 2 packages beside {CPU_LOCK}" in said.splitlines()
    # no wheel for the platform: no lock (the older one removed), one line, no failure
    assert not old["beta"].exists()
    assert (
        f"loaders/beta/{CPU_LOCK}: no lock, no wheel for this platform and CPython: Because beta==2.0 has "
        in said
    )
    # uv out of reach, a base package moved, a conflict with the base lock: failures, the older lock stays
    assert (
        old["gamma"].read_text() == "an older lock\n"
        and not old["delta"].exists()
        and not old["eps"].exists()
    )
    lines = err.splitlines()
    assert f"loaders/gamma/{CPU_LOCK}: not made, the old lock stays: cause: tcp connect error" in lines
    assert (
        f"loaders/delta/{CPU_LOCK}: not made, the old lock stays: uv moved packages of the base lock "
        f"{CPU_LOCK}: filelock {base.packages['filelock']} -> 9.9" in lines
    )
    assert any(ln.startswith(f"loaders/eps/{CPU_LOCK}: not made") and "numpy<2" in ln for ln in lines)
    assert lines[-1].startswith("make locks: 3 lock(s) not made: loaders/gamma/")

    call = json.loads(log.read_text().splitlines()[0])
    assert call["reqs"].splitlines() == [*PINS, "alpha==1.0"]
    assert call["constraints"].splitlines() == [f"{k}=={v}" for k, v in base.packages.items()]
    got = call["argv"]
    assert (
        got[got.index("--only-binary") + 1] == ":all:" and got[got.index("--find-links") + 1] == "/opt/wheels"
    )
    # the mirror beside PyPI, not in its place: the loaders are published on PyPI
    mirror = ["--extra-index-url", "file:///mirror", "--index-strategy", "unsafe-best-match"]
    assert "--index-url" not in got and got[-4:] == mirror

    # a base lock made from other pins than the role's: no extra's lock is made on it
    monkeypatch.setattr(lockgen, "role_pins", lambda: ["torch==2.12.0"])
    assert lockgen.main(argv) == 1
    assert f"{CPU_LOCK}: no extra's lock made, it was made from other pins" in capsys.readouterr().err


# --- which lock a loader gets, and its install ------------------------------------------------------

STREAMER = {"runai-model-streamer": "0.17.1", "humanize": "4.17.0"}
STREAMER_LOCK = f"loaders/model_streamer/{CPU_LOCK}"


def test_a_loader_gets_its_lock_only_on_a_venv_from_exactly_the_base_lock_it_extends():
    base = locklib.load(CPU_LOCK)
    lock, why = locklib.choose_extra("auto", base, "loaders", "model_streamer", STREAMER)
    assert lock.name == STREAMER_LOCK and why.startswith(f"the lock {STREAMER_LOCK}: 2 packages beside ")
    assert locklib.choose_extra("never", base, "loaders", "model_streamer", STREAMER) == (
        None,
        "lab_venv_lock is never",
    )
    assert locklib.choose_extra("auto", None, "loaders", "model_streamer", STREAMER)[1] == (
        "the venv is not installed from a lock"
    )
    _, why = locklib.choose_extra("auto", base, "loaders", "model_streamer", {**STREAMER, "humanize": "4.0"})
    assert f"the lock {STREAMER_LOCK} was made from humanize==4.17.0 runai-model-streamer==0.17.1, " in why
    assert "model_streamer pins humanize==4.0 runai-model-streamer==0.17.1; make the locks again" in why
    other = dataclasses.replace(base, sha256="0" * 64)  # the base lock made again since: a stale loader lock
    assert locklib.choose_extra("auto", other, "loaders", "model_streamer", STREAMER)[1] == (
        f"the lock {STREAMER_LOCK} extends {CPU_LOCK} sha256 {base.sha256[:12]}, not the venv's lock "
        f"{CPU_LOCK} (sha256 000000000000); make the locks again with `make locks`"
    )
    mac = locklib.load("macos-arm64-py3.12")
    lock, why = locklib.choose_extra("auto", mac, "loaders", "model_streamer", STREAMER)
    assert lock is None and why.startswith("no lock loaders/model_streamer/macos-arm64-py3.12 (`make locks`")
    assert "made for: linux-aarch64-cuda-py3.12, linux-x86_64-cpu-py3.11" in why


def _refusing_run(argv, what):
    raise AssertionError(f"ran {argv} ({what}) before the refusal")


def test_lab_venv_lock_required_refuses_a_loader_without_a_lock_before_any_download(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "run", _refusing_run)
    mac = hostfacts.HostFacts(
        "Darwin", "arm64", nvidia_gpu=False, python_version=(3, 12), macos_version=(15, 0)
    )
    venv = tmp_path / "venv"
    for check in (True, False):
        with pytest.raises(errors.Refused) as info:
            command.provision(venv, PINS, facts=mac, loader_names=["tensorizer", "model_streamer"],
                         lock_setting="required", check=check)  # fmt: skip
        msg = str(info.value)
        assert msg.startswith(
            "lab_venv_lock is required but the loader model_streamer has no lock for macos-arm64-py3.12: "
            "no lock loaders/model_streamer/macos-arm64-py3.12 ("
        ) and msg.endswith("; set lab_venv_lock: auto to install it from its pins alone, or leave it out of "
                           "lab_run_load_loaders")  # fmt: skip
        assert "\n" not in msg and not venv.exists()
    out = command.provision(
        venv, PINS, facts=mac, loader_names=["model_streamer", "tensorizer"], check=True
    )  # auto: its pins
    assert out["action"] == "would_create" and out["lock"]["locked"]
    # and --check says which loader would be installed from its pins alone, and why
    streamer, tensorizer = out["loader_locks"]["model_streamer"], out["loader_locks"]["tensorizer"]
    assert not streamer["locked"] and streamer["why"].startswith(
        "no lock loaders/model_streamer/macos-arm64-py3.12"
    )
    assert tensorizer["locked"] and tensorizer["name"] == "loaders/tensorizer/macos-arm64-py3.12"


def test_a_locked_loader_is_installed_from_its_lock_with_hashes_and_its_record_names_the_file(
    tmp_path, monkeypatch
):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = []
    monkeypatch.setattr(install, "run", lambda argv, what: calls.append(argv))
    monkeypatch.setattr(
        loaderlib, "import_check", lambda name, *a, **k: {"status": "ok", "version": "0.17.1"}
    )
    locks = pvloaders.loader_locks("auto", locklib.load(CPU_LOCK), ["model_streamer"])
    lock, why = locks["model_streamer"]
    got = pvloaders.install_loader(venv, "model_streamer", ["--no-compile"], locked=locks["model_streamer"])
    copy = venv / "disklab-lock-loaders-model_streamer.txt"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    assert calls == [[*pip, "--require-hashes", "--no-deps", "-r", str(copy), "--no-compile"]]
    assert copy.read_text() == lock.text
    pins = ["runai-model-streamer==0.17.1", "humanize==4.17.0"]
    entry = {"locked": True, "name": STREAMER_LOCK, "sha256": lock.sha256, "why": why}
    assert got == {"status": "ok", "version": "0.17.1", "pins": pins, "lock": entry}
    # auto, where the venv's lock has no lock of the loader: its pins alone, and why
    calls.clear()
    unlocked = pvloaders.loader_locks("auto", locklib.load("macos-arm64-py3.12"), ["model_streamer"])
    got = pvloaders.install_loader(venv, "model_streamer", [], locked=unlocked["model_streamer"])
    assert calls == [[*pip, *pins]] and got["lock"]["locked"] is False
    assert got["lock"]["why"].startswith("no lock loaders/model_streamer/macos-arm64-py3.12")


# pip's words (as PIP_MISMATCH) for a loader's lock whose humanize hashes are not the file's.
LOADER_MISMATCH = PIP_MISMATCH.replace("filelock-4.3.2", "humanize-4.17.0").replace(
    "filelock==4.3.2", "humanize==4.17.0"
)


def test_a_loader_file_with_another_hash_is_refused_in_one_line_naming_the_package(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    venv.mkdir()

    def pip(argv, what):
        raise errors.Failed(f"{what} failed (exit 1)", "ERROR: THESE PACKAGES DO NOT MATCH", LOADER_MISMATCH)

    monkeypatch.setattr(install, "run", pip)
    locks = pvloaders.loader_locks("auto", locklib.load(CPU_LOCK), ["model_streamer"])
    with pytest.raises(errors.Refused) as info:
        pvloaders.install_loader(venv, "model_streamer", [], locked=locks["model_streamer"])
    msg = str(info.value)
    assert msg.startswith("the index served humanize==4.17.0 (humanize-4.17.0-py3-none-any.whl from files.py")
    assert f"a hash the lock {STREAMER_LOCK} does not list: refused" in msg and "\n" not in msg
    # any other failure of a locked install is the loader's alone: not_run, and the rest goes on
    monkeypatch.setattr(
        install, "run", lambda argv, what: (_ for _ in ()).throw(errors.Failed("x", "ERROR: gone"))
    )
    got = pvloaders.install_loader(venv, "model_streamer", [], locked=locks["model_streamer"])
    assert got["status"] == "not_run" and got["reason"].endswith(": ERROR: gone") and got["lock"]["locked"]


def test_a_venv_whose_loaders_came_without_their_locks_is_rebuilt_and_a_locked_one_kept_or_extended(
    tmp_path, monkeypatch
):
    """The loaders' locks are part of what the venv is made from: a venv whose model_streamer was installed
    from its pins (before its lock existed) is rebuilt from it; one made from it is kept, and extended by a
    loader added; with every loader locked, a kept venv must also hold the venv's lock's versions."""
    host = hostfacts.HostFacts("Linux", "x86_64", nvidia_gpu=False, python_version=(3, 11))
    base = locklib.load(CPU_LOCK)
    venv = tmp_path / "venv"
    venv.mkdir()
    dists = {**base.packages, **STREAMER}
    found = {"result": {"dists": dists, "torch": "2.13.0+cpu", "safetensors": "0.8.0", "numpy": "2.4.6"}}
    monkeypatch.setattr(
        venvstate, "probe_or_recorded", lambda v, r: ({**found, "from": "probed_now"}, "probed")
    )
    before = venvrecord.wanted_record(PINS, torchindex.CPU_INDEX, [], ["model_streamer"], lock=base)
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(before))

    def check(*names):
        return command.provision(venv, PINS, "cpu", check=True, facts=host, loader_names=list(names))

    out = check("model_streamer")
    assert out["action"] == "would_rebuild" and out["reason"].startswith(
        "the venv was made from other settings: loader_locks None -> {'model_streamer': {'name': "
        f"'{STREAMER_LOCK}', 'sha256': '"
    )
    locks = {n: x for n, (x, _) in pvloaders.loader_locks("auto", base, ["model_streamer"]).items()}
    made = venvrecord.wanted_record(
        PINS, torchindex.CPU_INDEX, [], ["model_streamer"], lock=base, loader_locks=locks
    )
    (venv / venvrecord.RECORD_NAME).write_text(json.dumps(made))
    assert check("model_streamer")["action"] == "would_keep"
    assert check("model_streamer", "tensorizer")["action"] == "would_extend"
    dists["filelock"] = "99.0"
    out = check("model_streamer")
    assert out["action"] == "would_rebuild" and "filelock 99.0 (pinned " in out["reason"]


def test_compare_names_a_package_a_loader_lock_brought_that_moved():
    """The facts' packages are every distribution of the venv (the venv probe), so a dependency a loader's
    lock installed (not the loader, not in the venv's lock) is named by compare when it moves."""
    lock = locklib.load(f"loaders/fastsafetensors/{CPU_LOCK}")
    dep = next(n for n in sorted(lock.packages) if n not in lock.pins)
    old = json.loads((FIXTURES / "old.json").read_text())
    new = copy.deepcopy(json.loads((FIXTURES / "new.json").read_text()))
    packages = {**locklib.load(CPU_LOCK).packages, **lock.packages}
    old["facts"]["versions"]["packages"] = packages
    new["facts"]["versions"]["packages"] = {**packages, dep: "0.0.1"}
    cmp = compare_runs(old, new)
    moved = [c for c in cmp["fact_changes"] if c["path"].startswith("facts.versions.packages.")]
    assert moved == [{"path": f"facts.versions.packages.{dep}", "old": lock.packages[dep], "new": "0.0.1"}]
    assert f"  facts.versions.packages.{dep}: {lock.packages[dep]} -> 0.0.1" in render_compare_text(cmp)
