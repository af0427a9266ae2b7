"""A non-root login (docs/fleet.md, "Logging in without root"): the lab runner, run for real as another user
(nobody, through setpriv) on a workbench that user owns, runs every step that needs no root; the realfs step
that needs root is not_run with the reason, a cold eviction needs no root (fadvise_dontneed), drop_caches
through a sudo that asks for a password is refused with sudo's own words, and the host is ok, not failed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import TINY_SIZES
from disklab import ship, store
from disklab.runner import HostOutcome
from disklab_host.common import result as result_line

NOBODY = 65534
RUN_ID = "20261202T120000Z"
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("unshare") is None,
    reason="needs root, setpriv and unshare to run a command as another user",
)

# In a private mount namespace: a home that only root may enter (pyenv's under /root) is covered by a
# traversable tmpfs holding only the Python's own tree, so the other user can run this interpreter.
_AS_USER = f"""set -e
py_root="$1"; shift
if [ -n "$py_root" ]; then
  keep=$(mktemp -d); mount --bind "$py_root" "$keep"
  top=/$(echo "$py_root" | cut -d/ -f2)
  mount -t tmpfs -o mode=0755 tmpfs "$top"
  mkdir -p "$py_root"; mount --bind "$keep" "$py_root"
fi
exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups --inh-caps=-all "$@"
"""


def _python_root() -> str:
    """The top of the interpreter's tree when another user cannot reach it (e.g. /root/.pyenv), else ''."""
    real = Path(sys.executable).resolve()
    for parent in real.parents:
        if parent.parent == Path("/") and not os.stat(parent).st_mode & 0o001:
            return str(real.parents[len(real.parents) - 3])  # e.g. /root/.pyenv
    return ""


def _as_nobody(argv: list[str], tmp: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "TMPDIR": str(tmp), "LANG": "C.UTF-8"}
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", _AS_USER, "as-user", _python_root(),
         *argv],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip


@pytest.fixture
def lab_root():
    """A lab root owned by that user, under /tmp (pytest's directories are root's alone); removed after."""
    root = Path(tempfile.mkdtemp(prefix="disklab-nonroot-"))
    (root / "workbench").mkdir()
    ship.build(root / "disklab_host.pyz")
    for p in [root, *root.rglob("*")]:
        os.chown(p, NOBODY, NOBODY)
    yield root
    shutil.rmtree(root)


def test_the_lab_runs_as_a_non_root_user_with_root_only_parts_not_run(tmp_path, lab_root):
    py, pyz, wb = sys.executable, str(lab_root / "disklab_host.pyz"), lab_root / "workbench"
    run = lab_root / "runs" / RUN_ID
    audit = _as_nobody([py, pyz, "audit", "--workbench", str(wb), "--out", str(run / "host.json")], lab_root)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    sizes = {k.removeprefix("lab_run_"): v for k, v in TINY_SIZES.items()}
    cfg = {"run_id": RUN_ID, "host": "nonroot", "profile": "quick", "workbench": str(wb),
           "workbench_create": False, "steps": ["fsync_bench", "realfs", "ceiling"],
           "settings": {**sizes, "realfs": True},
           "become_allowed": True, "lab_root": str(lab_root)}  # fmt: skip
    pre = _as_nobody([py, pyz, "preflight", "--config-json", json.dumps(cfg)], lab_root)
    assert pre.returncode == 0 and result_line.parse(pre.stdout)["ok"], pre.stdout + pre.stderr
    lab = _as_nobody([py, pyz, "lab", "--config-json", json.dumps(cfg), "--facts", str(run / "host.json"),
                      "--out", str(run / "results.json")], lab_root)  # fmt: skip
    assert lab.returncode == 0, lab.stdout + lab.stderr
    assert result_line.parse(lab.stdout)["failed_steps"] == []
    results = run / "results.json"
    assert results.stat().st_uid == NOBODY
    doc = json.loads(results.read_text())
    ex = doc["experiments"]
    assert ex["fsync_bench"]["status"] == "ok"
    assert ex["realfs"]["status"] == "not_run" and "root" in ex["realfs"]["reason"]
    assert ex["ceiling"]["status"] == "ok"
    assert {r["eviction_method"] for r in ex["ceiling"]["cold_runs"]} == {
        "fadvise_dontneed"
    }  # no root needed
    assert all(r["proven"] for r in ex["ceiling"]["cold_runs"])
    # the controller: a host whose only missing part needed root is ok, not partial or failed
    reports = tmp_path / "reports"
    store.incoming_dir(reports, RUN_ID).mkdir(parents=True)
    shutil.copy(results, store.incoming_dir(reports, RUN_ID) / "nonroot.json")
    assert store.store_fetched(reports, RUN_ID, "runs", {"nonroot": HostOutcome(host="nonroot")}) == {
        "nonroot": "ok"
    }


def test_drop_caches_through_a_sudo_that_wants_a_password_is_refused_in_sudos_words(tmp_path, lab_root):
    if shutil.which("sudo") is None:
        pytest.skip("sudo is not installed")
    probe = (
        "import json, sys\n"
        "from disklab_host.cache import pagecache\n"
        "p = sys.argv[1]\n"
        "open(p, 'wb').write(b'x' * 65536)\n"
        "print(json.dumps(pagecache.evict(p, ['drop_caches'], become_allowed=True)))\n"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    proc = _as_nobody([sys.executable, "-c", f"import sys; sys.path.insert(0, {src!r}); exec({probe!r})",
                       str(lab_root / "workbench" / "f.bin")], lab_root)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    (attempt,) = rec["attempts"]
    assert rec["method"] is None and attempt["ok"] is False
    assert attempt["error"].startswith("PermissionError: drop_caches needs root and `sudo -n tee")
    assert "password" in attempt["error"] and "fadvise_dontneed needs no root" in attempt["error"]
