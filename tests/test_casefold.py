"""Host names that differ only in case, on a case-insensitive filesystem (issue 40, item 1).

macOS keeps a reports directory on a case-insensitive filesystem by default, and a Mac is a likely
controller. The older rule named ``Web1`` and ``web1`` ``reports/Web1`` and ``reports/web1``: one
directory there, and one host's results were lost. These tests mount a real case-insensitive,
case-preserving filesystem (tests/casefold_fs.py, FUSE through mfusepy; this kernel has no casefold ext4)
and run the real store, `disklab report` and the move of an older reports directory on it. Without FUSE
they skip, saying why; under DISKLAB_FLEET_REQUIRED=1 (.ci/run installs fuse3, and mfusepy is a test
dependency) they fail instead. The rule's own property, that case variants differ in any case, is tested
without FUSE in tests/test_hostile_names.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_disklab
from disklab import hostnames, store, stored
from disklab.runner import HostOutcome
from test_stored import _results

CASEFOLD_FS = Path(__file__).with_name("casefold_fs.py")
FUSERMOUNT = "fusermount3"
# .ci/run installs fuse3 and the test extras (mfusepy): there a missing piece fails these tests.
REQUIRED_ENV = "DISKLAB_FLEET_REQUIRED"
MOUNT_TIMEOUT_S = 20

pytestmark = pytest.mark.heavy


def _unavailable() -> str | None:
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed (pip install -e '.[test]')"
    if not Path("/dev/fuse").exists() or shutil.which(FUSERMOUNT) is None:
        return "FUSE is not available here (/dev/fuse and fusermount3: apt-get install fuse3)"
    return None


def _skip_or_fail(why: str) -> None:
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(
            f"{why}, and {REQUIRED_ENV}=1: .ci/run installs it, so the case-insensitive tests must run"
        )
    pytest.skip(why)


@pytest.fixture
def casefold_dir(tmp_path):
    """An empty directory on a case-insensitive, case-preserving filesystem (tests/casefold_fs.py)."""
    why = _unavailable()
    if why:
        _skip_or_fail(why)
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    log = tmp_path / "casefold_fs.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(CASEFOLD_FS), str(backing), str(mnt)], stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + MOUNT_TIMEOUT_S
    while not os.path.ismount(mnt):
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            _skip_or_fail(f"the FUSE filesystem did not mount: {log.read_text(errors='replace')[-500:]}")
        time.sleep(0.05)
    try:
        (mnt / "Probe").mkdir()  # what makes these tests mean anything: a name found whatever its case
        assert (mnt / "probe").is_dir() and os.listdir(mnt) == ["Probe"]
        (mnt / "Probe").rmdir()
        yield mnt
    finally:
        subprocess.run([FUSERMOUNT, "-u", str(mnt)], check=False, capture_output=True)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stage(reports: Path, run_id: str, doc: dict) -> None:
    """A host's fetched results, where the playbooks' fetch puts them (disklab.lab.host_file)."""
    staging = store.incoming_dir(reports, run_id)
    staging.mkdir(parents=True, exist_ok=True)
    (staging / f"{hostnames.encode(doc['host'])}.json").write_text(json.dumps(doc))


def _sums(root: Path) -> dict[str, str]:
    """The sha256 of every stored run, audit and failure under ``root``, by its kind and file name."""
    out = {}
    for kind in store.KINDS:
        for path in root.glob(f"*/{kind}/*.json"):
            out[f"{path.parent.parent.name}/{kind}/{path.name}"] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
    return out


def _rows(index: str) -> list[str]:
    return [ln.split(" | ")[0][2:] for ln in index.splitlines() if ln.startswith("| ") and "report.md)" in ln]


def test_names_differing_only_in_case_keep_their_own_directories_and_runs(casefold_dir):
    reports = casefold_dir / "reports"
    run_id = "20261204T100000Z"
    hosts = ("Web1", "web1", "WEB1")
    # the older rule's names are one directory here: what lost a host's results
    (reports / hostnames.legacy_encode("Web1")).mkdir(parents=True)
    assert all((reports / hostnames.legacy_encode(h)).is_dir() for h in hosts)
    (reports / hostnames.legacy_encode("Web1")).rmdir()
    for n, host in enumerate(hosts):
        doc = _results(host=host, run_id=run_id)
        doc["experiments"]["fsync_bench"]["reason"] = f"measured on {host} ({n})"
        _stage(reports, run_id, doc)
    status = store.store_fetched(reports, run_id, "runs", {h: HostOutcome(host=h) for h in hosts})
    assert status == {h: "ok" for h in hosts}
    assert (
        sorted(os.listdir(reports))
        == sorted(hostnames.encode(h) for h in hosts)
        == ["WEB1%u7", "Web1%u4", "web1"]
    )
    for n, host in enumerate(hosts):
        (run,) = store.files(hostnames.host_dir(reports, host), "runs")
        doc = stored.read(run, "results", host=host)
        assert doc["experiments"]["fsync_bench"]["reason"] == f"measured on {host} ({n})"
    proc = run_disklab("report", reports=reports)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rendered 3 host reports" in proc.stdout
    assert sorted(_rows((reports / "index.md").read_text())) == sorted(hosts)


def test_an_older_directory_that_held_both_hosts_is_sorted_out_by_the_host_each_file_names(casefold_dir):
    """The state the older rule left here: ``reports/Web1`` holds Web1's runs and, under the same name,
    web1's (its failure record, and the run whose staged file web1's fetch wrote over Web1's), and DGX's
    directory is named without its case suffix. `disklab report` moves each host's files to its name now,
    loses and replaces none, and the index has every host again."""
    reports = casefold_dir / "reports"
    old = reports / "Web1"
    stored.write(
        old / "runs" / "20261201T100000Z.json", "results", _results(host="Web1", run_id="20261201T100000Z")
    )
    stored.write(
        old / "runs" / "20261202T100000Z.json", "results", _results(host="web1", run_id="20261202T100000Z")
    )
    stored.write(
        reports / "web1" / "runs" / "20261203T100000Z.json",
        "results",
        _results(host="web1", run_id="20261203T100000Z"),
    )  # fmt: skip  (the same directory here)
    stored.write(
        reports / "DGX" / "runs" / "20261201T100000Z.json",
        "results",
        _results(host="DGX", run_id="20261201T100000Z"),
    )
    assert sorted(os.listdir(reports)) == ["DGX", "Web1"]  # web1's went into Web1/, as the older rule did
    before = sorted(_sums(reports).values())
    proc = run_disklab("report", reports=reports)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        f"moved the stored files of host 'DGX' from {reports / 'DGX'} to {reports / 'DGX%u7'}" in proc.stderr
    )
    assert f"moved {old / 'runs' / '20261201T100000Z.json'} to {reports / 'Web1%u4' / 'runs'}" in proc.stderr
    assert f"renamed {old} to {reports / 'web1'}" in proc.stderr
    assert sorted(p.name for p in reports.iterdir() if p.is_dir()) == ["DGX%u7", "Web1%u4", "web1"]
    assert sorted(_sums(reports).values()) == before  # every stored file, byte for byte
    for host in ("DGX", "Web1", "web1"):
        for run in store.files(hostnames.host_dir(reports, host), "runs"):
            assert stored.read(run, "results")["host"] == host
    assert [p.stem for p in store.files(reports / "web1", "runs")] == ["20261202T100000Z", "20261203T100000Z"]
    assert sorted(_rows((reports / "index.md").read_text())) == ["DGX", "Web1", "web1"]
    again = run_disklab("report", reports=reports)  # nothing left to move: said once
    assert again.returncode == 0 and "moved" not in again.stderr and "renamed" not in again.stderr
