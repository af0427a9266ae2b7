"""A run is one owned thing: locked, interruptible, truthful in its status, robust to damaged files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_disklab, write_local_inventory
from disklab import ownership, processes, report, store, stored
from disklab.runner import HostOutcome
from disklab_host import lab, preflight, registry, stop
from disklab_host.common import result as result_line
from disklab_host.common.lock import LockHeld, RunLock, holder_of

HOLD = "import sys, time; from disklab_host.common.lock import RunLock\n" \
       "with RunLock(sys.argv[1], 'R-HOLDER', what='the lab root X'):\n" \
       "    print('held', flush=True); time.sleep(60)\n"  # fmt: skip


def _holder(path: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_is_refused_naming_the_holder_and_a_dead_holders_lock_is_taken_over(tmp_path):
    path = tmp_path / "lab.lock"
    proc = _holder(path)
    try:
        with (
            pytest.raises(
                LockHeld, match=r"the lab root Y is in use by run R-HOLDER \(pid \d+ on .*started .* UTC\)"
            ),
            RunLock(path, "R-SECOND", what="the lab root Y"),
        ):
            pass
        assert holder_of(path)["run_id"] == "R-HOLDER"
    finally:
        proc.kill()
        proc.wait()
    # SIGKILL left the holder's record behind, but the kernel dropped its flock
    assert json.loads(path.read_text())["run_id"] == "R-HOLDER" and holder_of(path) is None
    with RunLock(path, "R-THIRD", what="the lab root Y") as lock:
        assert "took over the stale lock of run R-HOLDER" in lock.took_over
        assert "no longer running" in lock.took_over
    with RunLock(path, "R-FOURTH", what="the lab root Y") as lock:
        assert lock.took_over is None  # a cleanly ended run leaves no stale lock


def _config(tmp_path: Path, steps: list[str], **settings) -> Path:
    wb = tmp_path / "root" / "workbench"
    wb.mkdir(parents=True, exist_ok=True)
    cfg = {"run_id": "20261201T000000Z", "host": "h", "profile": "quick", "workbench": str(wb),
           "lab_root": str(tmp_path / "root"), "steps": steps, "settings": settings,
           "system": "Linux"}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "host.json").write_text("{}")
    return tmp_path / "config.json"


def _lab(tmp_path: Path, config: Path, **kw) -> subprocess.Popen:
    argv = [
        "--config",
        str(config),
        "--facts",
        str(tmp_path / "host.json"),
        "--out",
        str(tmp_path / "r.json"),
    ]
    return subprocess.Popen([sys.executable, "-m", "disklab_host", "lab", *argv], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)  # fmt: skip


def test_the_lab_runner_refuses_a_lab_root_in_use(tmp_path):
    config = _config(tmp_path, ["write_buffering"], write_buffering_calls=100)
    holder = _holder(tmp_path / "root" / lab.LOCK_NAME)
    try:
        proc = _lab(tmp_path, config)
        out, err = proc.communicate(timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == lab.EXIT_LOCKED
    assert "refused: the lab root" in err and "is in use by run R-HOLDER" in err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.heavy
def test_stop_ends_the_runner_and_its_step_cleans_up_and_writes_nothing(tmp_path):
    # 20,000 blocks keep the step running for seconds (four modes of as many syncs), and each mode's random
    # data is one os.urandom call of 80 MiB. The runner's SIGTERM handler runs only between Python bytecodes,
    # so it waits for that call: at 200,000 blocks (800 MiB, about 3 s alone, 8 s beside four busy loops on
    # this 2-core machine) a busy `make test` pushed it past the 20 s grace, and stop had to SIGKILL.
    config = _config(tmp_path, ["fsync_bench", "big_write"], fsync_blocks=20_000, big_write_mib=1)
    proc = _lab(tmp_path, config)
    lock_path = tmp_path / "root" / lab.LOCK_NAME
    deadline = time.monotonic() + 60
    step_dir = tmp_path / "root" / "workbench" / "fsync_bench"
    # the runner names the step in its lock a moment before the step makes its directory: wait for both
    while (holder_of(lock_path) or {}).get("step") != "fsync_bench" or not step_dir.is_dir():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
        time.sleep(0.05)
    said = stop.stop(tmp_path / "root", grace_s=20)
    out, err = proc.communicate(timeout=30)
    assert said["stopped"] and said["step"] == "fsync_bench" and not said["forced"]
    assert proc.returncode == lab.EXIT_INTERRUPTED
    assert "interrupted (SIGTERM) at step fsync_bench; no results written" in err
    assert not (tmp_path / "r.json").exists()
    assert not step_dir.exists()
    assert holder_of(lock_path) is None
    assert stop.stop(tmp_path / "root")["stopped"] is False


def test_a_failed_step_cleans_its_files_and_the_next_step_still_runs(tmp_path):
    config = _config(tmp_path, ["big_write", "write_buffering"], write_buffering_calls=100, big_write_mib=1)
    step_dir = tmp_path / "root" / "workbench" / "big_write"
    (step_dir / "big_write.bin").mkdir(parents=True)  # a directory where the step writes its file: EISDIR
    (step_dir / "partial.bin").write_bytes(b"x" * 4096)
    proc = _lab(tmp_path, config)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["experiments"]["big_write"]["status"] == "failed"
    assert "IsADirectoryError" in doc["experiments"]["big_write"]["error"]
    assert doc["experiments"]["write_buffering"]["status"] == "ok"
    assert not step_dir.exists()  # its partial files are gone
    assert result_line.parse(out)["failed_steps"] == ["big_write"]


def _results_doc(**experiments) -> dict:
    from disklab_host.audit import collect
    from disklab_host.common.formats import stamp

    doc = {"run_id": "20261201T000000Z", "host": "h1", "profile": "quick", "sizes": {},
           "started_utc": "x", "finished_utc": "y", "lab_code": {"unavailable": "test"},
           "facts": collect.collect_all("/tmp", None), "experiments": experiments}  # fmt: skip
    return stamp("results", doc)


def test_store_marks_a_host_with_failed_steps_partial_and_retry_picks_it(tmp_path):
    reports = tmp_path / "reports"
    run_id = "20261201T000000Z"
    incoming = store.incoming_dir(reports, run_id)
    incoming.mkdir(parents=True)
    doc = _results_doc(
        big_write={
            "status": "failed",
            "step_wall_s": 0.1,
            "error": "OSError: [Errno 28] No space left on device",
        },
        fsync_bench={"status": "not_run", "reason": "test", "step_wall_s": 0},
    )
    (incoming / "h1.json").write_text(json.dumps(doc))
    outcomes = {"h1": HostOutcome(host="h1")}
    status = store.store_fetched(reports, run_id, "runs", outcomes)
    assert status == {"h1": "partial"}
    assert "big_write (OSError: [Errno 28] No space left on device)" in outcomes["h1"].message
    assert (reports / "h1" / "runs" / f"{run_id}.json").is_file()  # the run is kept
    failure = stored.read(reports / "h1" / "failures" / f"{run_id}.json", "failure")
    assert failure["status"] == "partial" and "big_write" in failure["failed_steps"]
    inv = tmp_path / "inv.yml"
    inv.write_text("all: {hosts: {h1: {}}}\n")
    store.record_invocation(reports, run_id, "runs", inv, status)
    assert store.failed_hosts_of_last_run(reports, inv) == (run_id, ["h1"])


def test_a_run_whose_tags_fetched_nothing_stores_the_staged_facts_as_an_audit_and_no_failure(tmp_path):
    """Issue 40, item 6, in the store: without a fetch (--tags provision, audit) a host without a file is ok,
    not "no results file was fetched"; the facts site.yml stages for --tags audit are stored as the run's
    audit, and so are those a killed run of it left (stored by the next run, which cannot know its tags)."""
    from disklab_host.audit import collect

    wb = tmp_path / "wb"
    wb.mkdir()
    facts = collect.collect_all(str(wb), None)  # a real audit of this host, as the role prints it
    reports = tmp_path / "reports"
    for run_id, fetched in (("20261201T000000Z", False), ("20261201T000001Z", True)):
        incoming = store.incoming_dir(reports, run_id)
        incoming.mkdir(parents=True)
        (incoming / "h1.json").write_text(json.dumps(facts))
        outcomes = {"h1": HostOutcome(host="h1"), "h2": HostOutcome(host="h2")} if not fetched else {}
        status = store.store_fetched(reports, run_id, "runs", outcomes, fetched=fetched)
        assert status == ({"h1": "ok", "h2": "ok"} if not fetched else {"h1": "ok"}), run_id
        doc = stored.read(reports / "h1" / "audits" / f"{run_id}.json", "audit")
        assert doc["facts"]["workbench"]["requested_path"] == str(wb) and doc["run_id"] == run_id
        assert not (incoming.exists() or (reports / "h1" / "runs").exists())
    assert not list(reports.glob("*/failures/*.json"))  # h2 staged nothing, and fetched nothing: ok
    # a run that fetches results still calls a host without its file failed
    outcomes = {"h3": HostOutcome(host="h3")}
    assert store.store_fetched(reports, "20261201T000002Z", "runs", outcomes) == {"h3": "failed"}
    assert outcomes["h3"].message == "no results file was fetched from this host"


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"[]", "holds a JSON list"),
        (b"{}", "does not match the schema"),
        (b'{"file_kind": "results", "schema_version": 2, "experiments": null}', "does not match the schema"),
        # the update to version 3 meets odd shapes where it looks (crash, powercut, load) and leaves them
        (b'{"file_kind": "results", "schema_version": 2, "experiments": []}', "does not match the schema"),
        (
            b'{"file_kind": "results", "schema_version": 2, "experiments": {"crash": {"status": "ok", '
            b'"modes": {"naive": {"kills": [7]}}}, "powercut": {"recipes": [1]}, "load": {"samples": [2]}}}',
            "does not match the schema",
        ),
        (b"\xff\xfe\x00", "not UTF-8 text"),
    ],
)
def test_a_damaged_run_is_named_in_one_line_and_every_other_host_renders(tmp_path, data, said):
    reports = tmp_path / "reports"
    good = _results_doc(fsync_bench={"status": "not_run", "reason": "test", "step_wall_s": 0})
    stored.write(reports / "h1" / "runs" / "20261201T000000Z.json", "results", good)
    bad = reports / "h2" / "runs" / "20261201T000000Z.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(data)
    before = bad.read_bytes()
    written, errors = report.render_all(reports, force=True)
    assert len(errors) == 1 and str(bad) in errors[0] and said in errors[0] and "\n" not in errors[0]
    assert (reports / "h1" / "report.md").is_file() and "| h1 |" in (reports / "index.md").read_text()
    assert bad.read_bytes() == before
    proc = run_disklab("compare", str(reports / "h1/runs/20261201T000000Z.json"), str(bad), reports=reports)
    assert proc.returncode == 2 and str(bad) in proc.stderr and "Traceback" not in proc.stderr


def test_a_damaged_failure_file_and_run_record_are_named_not_raised(tmp_path):
    reports = tmp_path / "reports"
    (reports / "h3" / "failures").mkdir(parents=True)
    (reports / "h3" / "failures" / "20261201T000000Z.json").write_text("[]")
    (reports / ".runs").mkdir()
    (reports / ".runs" / "20261201T000000Z.json").write_text("{not json")
    written, errors = report.render_all(reports, force=True)
    assert any("h3" in e and "holds a JSON list" in e for e in errors)
    assert "| h3 | ok" not in (reports / "index.md").read_text()  # never shown as ok
    inv = tmp_path / "inv.yml"
    inv.write_text("all: {hosts: {h3: {}}}\n")
    proc = run_disklab("run", "-i", str(inv), "--retry-failed", reports=reports)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "skipped an unreadable run record" in proc.stderr and "not JSON" in proc.stderr


@pytest.mark.heavy
def test_bad_extra_values_and_a_broken_inventory_get_one_line(tmp_path):
    inv = write_local_inventory(tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb")
    # (-e lab_run_steps=[load is the string '[load' to ansible-playbook, refused by the role's argument spec)
    proc = run_disklab("run", "-i", str(inv), "-e", "{lab_run_steps: [load}", reports=tmp_path / "r")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.startswith("disklab: -e {lab_run_steps: [load}: ") and "YAML" in proc.stderr
    )  # Ansible's
    assert len(proc.stderr.splitlines()) == 1 and not (tmp_path / "r").exists()
    broken = tmp_path / "broken.yml"
    broken.write_text("all:\n  hosts:\n    a: {x: 1\n  vars: {}\n")
    proc = run_disklab("audit", "-i", str(broken), reports=tmp_path / "r")
    assert proc.returncode == 2 and f"inventory {broken} is not valid YAML at line" in proc.stderr
    assert "ini" not in proc.stderr


def test_preflight_counts_only_weights_its_manifest_vouches_for(tmp_path):
    load = tmp_path / "load"
    load.mkdir()
    sparse = load / "big.safetensors"
    with sparse.open("wb") as f:
        f.truncate(2 << 30)  # a 2 GiB sparse leftover
    sizes = registry.profile_sizes("quick")
    assert preflight.reusable_weights_bytes(load, sizes) == 0  # no manifest: nothing is reused
    manifest = {"recipe": {"big_mib": sizes["load_big_mib"], "small_config": "tiny"},
                "files": {"big_safetensors": {"path": str(sparse), "size_bytes": 2 << 30}}}  # fmt: skip
    (load / preflight.LOAD_MANIFEST).write_text(json.dumps(manifest))
    assert preflight.reusable_weights_bytes(load, sizes) == 0  # listed, but sparse: not real weights
    real = load / "small.pt"
    real.write_bytes(os.urandom(4096))
    manifest["files"]["small_pt"] = {"path": str(real), "size_bytes": 4096}
    (load / preflight.LOAD_MANIFEST).write_text(json.dumps(manifest))
    assert preflight.reusable_weights_bytes(load, sizes) == 4096
    assert preflight.reusable_weights_bytes(load, {**sizes, "load_big_mib": 300}) == 0  # other sizes


@pytest.mark.slow
def test_every_steps_data_is_made_at_the_full_profiles_sizes():
    """The full profile's sizes through the size-dependent code that broke before (big_write at 512 MiB)."""
    from disklab_host.checkpoint import saver
    from disklab_host.steps import big_write

    full = registry.profile_sizes("full")
    data = big_write.make_data(full["big_write_mib"] << 20)
    assert len(data) == full["big_write_mib"] << 20 and data[:64] != data[64:128]
    del data
    state = saver.make_state(full["crash_state_mib"], 1)
    assert (
        sum(t.numel() * t.element_size() for k, t in state.items() if k != "step")
        == full["crash_state_mib"] << 20
    )
    del state
    assert len(saver.make_state(full["powercut_state_mib"], 1)) == full["powercut_state_mib"] // 4 + 1
    assert registry.resolve("full") == full
    assert set(registry.needed_bytes(full, list(registry.STEP_NAMES))) == set(registry.STEP_NAMES)


@pytest.mark.slow
def test_ctrl_c_stops_the_whole_run_and_stores_nothing(tmp_path, lab_root):
    """SIGINT to a running `disklab run`: every lab process ends, nothing is stored, exit 130."""
    workbench = tmp_path / "wb"
    workbench.mkdir()
    reports = tmp_path / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", lab_root, workbench,
                                lab_run_steps=["fsync_bench"], lab_run_fsync_blocks=400_000)  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "run", "-i", str(inv)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lock_path = lab_root / lab.LOCK_NAME
    deadline = time.monotonic() + 600
    while (holder_of(lock_path) or {}).get("step") != "fsync_bench":
        assert time.monotonic() < deadline and proc.poll() is None, "the lab never started"
        time.sleep(0.2)
    runner_pid = holder_of(lock_path)["pid"]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, out + err
    assert "interrupted at step fsync_bench on localhost" in out
    assert holder_of(lock_path) is None
    with pytest.raises(ProcessLookupError):
        os.kill(runner_pid, 0)
    assert not list(reports.glob("localhost/runs/*.json")) and not (reports / ".incoming").exists()
    assert not (workbench / "fsync_bench").exists()
    record = stored.read(next((reports / ".runs").glob("*.json")), "run_record")
    assert record["hosts"] == {"localhost": "interrupted"}


@pytest.mark.slow
def test_check_mode_on_a_fresh_host_changes_nothing_and_a_failure_names_its_kept_output(tmp_path):
    root, workbench, reports = tmp_path / "fresh-root", tmp_path / "fresh-root" / "wb", tmp_path / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", root, workbench, lab_run_workbench_create=True)
    proc = run_disklab("run", "-i", str(inv), "--check", reports=reports)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "localhost: check ok" in proc.stdout and "nothing changed, measured or stored" in proc.stdout
    assert not root.exists() and not list(reports.glob("localhost/*/*.json"))
    kept = next(reports.glob(".artifacts/*/site/stdout"))
    assert kept.stat().st_size > 0 and list(kept.parent.glob("job_events/*.json"))
    bad = write_local_inventory(tmp_path / "bad.yml", root, workbench, lab_run_fsync_blocks=-3)
    proc = run_disklab("run", "-i", str(bad), reports=reports)
    assert proc.returncode == 1 and "Ansible's full output and events of this run:" in proc.stdout
    assert "lab_run_fsync_blocks must be an integer > 0, got -3" in proc.stdout


def test_a_truncated_older_run_is_named_and_the_latest_still_renders(tmp_path):
    reports = tmp_path / "reports"
    good = _results_doc(fsync_bench={"status": "not_run", "reason": "test", "step_wall_s": 0})
    good["run_id"] = "20261201T120000Z"  # a stored run's file is named by its run id
    stored.write(reports / "h1" / "runs" / "20261201T120000Z.json", "results", good)
    older = reports / "h1" / "runs" / "20261201T110000Z.json"
    older.write_text('{"file_kind": "results", "schema_version": 2, "run_id": "2026')
    written, errors = report.render_all(reports, force=True)
    assert errors == []
    text = (reports / "h1" / "report.md").read_text()
    assert "Earlier stored runs that cannot be read" in text and str(older) in text and "not JSON" in text
    assert "## Since the previous run" not in text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "misspelled"),
    [("run", "disklab_workbnch"), ("audit", "disklab_workbnch"), ("audit", "host_audit_workbnch")],
)
def test_a_misspelled_setting_is_refused_by_run_and_by_audit(tmp_path, command, misspelled):
    """The audit (and doctor, which runs it) refuses a misspelled name as the lab does: before, it audited
    the default workbench and said nothing."""
    inv = write_local_inventory(tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb",
                                **{misspelled: str(tmp_path / "elsewhere")})  # fmt: skip
    proc = run_disklab(command, "-i", str(inv), reports=tmp_path / "reports")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"unknown setting(s) {misspelled}" in proc.stdout
    assert not (tmp_path / "root").exists() and not (tmp_path / "wb").exists()  # refused before any work


@pytest.mark.slow
def test_steps_given_as_name_equals_a_comma_list_reach_the_host_as_a_list(tmp_path):
    """-e lab_run_steps=fsync_bench,crash is a string to Ansible; the argument spec's type list splits it at
    its commas, and so must what the host gets (the preflight refused steps 'f', 's', 'y', ...)."""
    inv = write_local_inventory(
        tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb", lab_run_workbench_create=True
    )
    proc = run_disklab("run", "-i", str(inv), "--check", "-e", "lab_run_steps=fsync_bench,crash",
                       reports=tmp_path / "reports")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "localhost: check ok" in proc.stdout


@pytest.mark.heavy
def test_a_plain_playbook_owns_its_run_after_its_begin_task_ends(tmp_path):
    # Ansible runs each task in a forked worker (also named ansible-playbook) that exits when the task
    # ends: the run's owner must be the main ansible-playbook, or the run looks dead seconds after it began
    reports = tmp_path / "reports"
    inv = write_local_inventory(tmp_path / "inv.yml", tmp_path / "root", tmp_path / "wb")
    begin = [sys.executable, "-m", "disklab.cli", "--reports", str(reports), "playbook-begin"]
    begin += ["--inventory", str(inv)]
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "begin", "command": {"argv": begin, "chdir": str(REPO)}},
        {"name": "the lab", "command": "sleep 30"},
    ]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    playbook = subprocess.Popen(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(tmp_path / "play.yml")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list(reports.glob(f".incoming/*/{ownership.OWNER}")) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(5)  # the begin task's worker has exited by now; the play is in its sleep
        assert playbook.poll() is None, playbook.stdout.read()
        live = ownership.live_runs(reports)
        assert len(live) == 1 and [e["pid"] for e in live[0][1]] == [playbook.pid], live
        proc = run_disklab("run", "-i", str(inv), "--tags", "never", reports=reports, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert (
            f"refused: run {live[0][0]} is still running: ansible-playbook (pid {playbook.pid})"
            in proc.stderr
        )
    finally:
        playbook.kill()
        playbook.wait()


# A task whose command leaves a child running, as the lab venv's provisioning task runs pip.
TREE_PLAY = """\
- name: A task with a child process
  hosts: all
  gather_facts: false
  tasks:
    - name: Start a child that runs on, then wait for it
      ansible.builtin.raw: "sleep 300 & echo $! > {pidfile}; wait"
"""


@pytest.mark.heavy
def test_an_interrupt_ends_every_process_the_playbook_started_and_leaves_no_private_dir(tmp_path):
    """Before: ansible-runner SIGKILLed ansible-playbook's process group alone; its worker (a session of its
    own) and the task's child ran on (pip, for 30 s after a Ctrl-C during a venv rebuild)."""
    import psutil

    from disklab.progress import Progress
    from disklab.runner import run_playbook

    pidfile = tmp_path / "child.pid"
    play = tmp_path / "tree.yml"
    play.write_text(TREE_PLAY.format(pidfile=pidfile))
    inv = tmp_path / "inv.yml"
    inv.write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))  # fmt: skip
    staging = tmp_path / "staging"
    staging.mkdir()
    below: dict[psutil.Process, str] = {}  # every process below the controller at the interrupt: its name

    def interrupted() -> bool:  # Ctrl-C, once the task's child runs
        if not pidfile.is_file() or not pidfile.read_text().strip():
            return False
        if not below:
            below.update(
                {p: processes.FACTS.program(p.pid) for p in psutil.Process().children(recursive=True)}
            )
        return True

    # a process the caller started before the playbook (a test fleet's sshd, say) is not the playbook's
    bystander = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        run = run_playbook(str(play), inv, {}, progress=Progress(live=False), cancel=interrupted,
                           artifact_dir=tmp_path / "artifacts", private_in=staging)  # fmt: skip
        assert bystander.poll() is None, "the interrupt ended a process the playbook did not start"
    finally:
        bystander.kill()
        bystander.wait()
    below = {p: name for p, name in below.items() if p.pid != bystander.pid}
    assert run.status == "canceled"
    child = int(pidfile.read_text())
    names = {p.pid: name for p, name in below.items()}
    assert names.get(child) == "sleep" and "ansible-playbook" in names.values(), names  # below the controller
    deadline = time.monotonic() + 3  # ended when run_playbook returns; an orphan's zombie is reaped by init
    while left := [p for p in below if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]:
        assert time.monotonic() < deadline, [(p.pid, below[p]) for p in left]
        time.sleep(0.1)
    assert list(staging.iterdir()) == []  # ansible-runner's private directory went with the run


# A controller that runs TREE_PLAY as `disklab run` does: through the launcher, which adds
# ansible-playbook's pid to the owner file and asks for its parent-death signal.
CONTROLLER = """\
import sys
from pathlib import Path
from disklab.progress import Progress
from disklab.runner import run_playbook
play, inv, owner = sys.argv[1:4]
run_playbook(play, Path(inv), {}, progress=Progress(live=False), owner_file=Path(owner),
             private_in=Path(owner).parent)
"""


@pytest.mark.heavy
def test_a_sigkilled_controller_takes_every_process_of_its_playbook_with_it(tmp_path):
    """Linux: the launcher's parent-death signal (SIGTERM) reaches ansible-playbook, which passes it to its
    workers, each to its task's processes. The private directory stays in the staging directory."""
    import psutil

    pidfile = tmp_path / "child.pid"
    play = tmp_path / "tree.yml"
    play.write_text(TREE_PLAY.format(pidfile=pidfile))
    inv = tmp_path / "inv.yml"
    inv.write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))  # fmt: skip
    staging = tmp_path / "staging"
    staging.mkdir()
    owner = ownership.write_owner(staging, "20261201T000000Z", "runs", inv, [])
    proc = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(play), str(inv), str(owner)], cwd=REPO)
    deadline = time.monotonic() + 120
    while not pidfile.is_file() or not pidfile.read_text().strip():
        assert proc.poll() is None and time.monotonic() < deadline, "the task never started"
        time.sleep(0.1)
    below = psutil.Process(proc.pid).children(recursive=True)
    assert int(pidfile.read_text()) in [p.pid for p in below]
    proc.kill()
    proc.wait()
    gone, alive = psutil.wait_procs(below, timeout=10)
    for left in alive:  # ended by pid, so a failure here leaves nothing behind
        left.kill()
    assert not alive, [(p.pid, processes.FACTS.program(p.pid)) for p in alive]
    assert [p.name.startswith(".runner-") for p in staging.iterdir() if p.is_dir()] == [True]
