"""Host names and host strings are untrusted (issue 26, findings 1 and 9).

A host's name becomes a path only through disklab.hostnames, and every string from an inventory or a host
is escaped where it lands in markdown. The hostile names go through the real store and render path
(store.store_fetched, report.render_all) on a real reports directory, and through a real `disklab audit`.
Every host with any stored file keeps its row in the index, with its latest status and where it came from.
"""

from __future__ import annotations

import copy
import json
import re
import sys

import pytest
import yaml

from conftest import run_disklab
from disklab import hostnames, markup, report, store, stored
from disklab.runner import HostOutcome
from test_fleet_figures import powercut_section
from test_report import linux_doc  # noqa: F401  (the fixture: a real run measured here, at tiny sizes)
from test_report_answers import answer, answers_block, section

HOSTILE = [
    "../../../../victim",
    "evil|<script>x</script>",
    ".hidden",
    "a/b",
    "line\nbreak",
    "bell\x07tab\tname",
    "ünïcødé-主机",
    "back\\slash",
    "100%",
    "index.md",
    "..",
    "math$\\foo$text",  # mathtext to matplotlib: the fleet plots must show it, not raise
]
FAILURE_ONLY = "gone|<script>y</script>/../x"


def _files(root):
    return {p for p in root.rglob("*") if p.is_file()}


def _cells(line: str) -> int:
    """The number of cell separators of a markdown table row: ``|`` not escaped by a backslash."""
    n, i = 0, 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        n += line[i] == "|"
        i += 1
    return n


def _tables(text: str) -> list[list[str]]:
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


def _row(index: str, host: str) -> str:
    rows = [ln for ln in index.splitlines() if ln.startswith(f"| {markup.md(host)} | ")]
    assert rows, f"no index row for {host!r}"
    return rows[0]


# --- the one rule --------------------------------------------------------------------------------


@pytest.mark.parametrize("host", [*HOSTILE, "web-01", "%2E", "A", "a", "x" * 60])
def test_a_host_name_maps_to_one_safe_path_component_and_back(host):
    name = hostnames.encode(host)
    assert hostnames.decode(name) == host
    assert "/" not in name and "\\" not in name and "\0" not in name
    assert not name.startswith(".") and name.lower() not in hostnames.RESERVED
    assert all(c.isascii() and (c.isalnum() or c in "-_.%") for c in name)
    assert hostnames.host_dir("/r", host).parent.as_posix() == "/r"


def test_encoded_names_are_unique_and_plain_names_stay_as_they_are():
    names = [*HOSTILE, FAILURE_ONLY, "web-01", "%2E", "A", "a", "a%2Fb", "%2Ehidden"]
    assert len({hostnames.encode(h) for h in names}) == len(names)
    assert hostnames.encode("web-01.lab_2") == "web-01.lab_2"


def test_the_reports_directorys_own_names_are_reserved():
    from disklab import fleet

    own = {fleet.FLEET_PAGE, fleet.PLOT_DIR, "index.md", "index.html", "fleet.html"}  # and the HTML twins
    assert own <= set(hostnames.RESERVED)


CASE_VARIANTS = ["Web1", "web1", "WEB1", "wEb1", "index.md", "Index.md", "INDEX.MD", ".Hidden", ".hidden",
                 "a/B", "a/b", "Ünï", "ünï", "DGX-Spark-01", "dgx-spark-01", "x%41", "x%61",
                 "Web1%u4"]  # fmt: skip


def test_names_that_differ_only_in_case_differ_in_any_case():
    """On a case-insensitive filesystem (macOS's default) two names that differ only in case are one
    directory: the rule's names must differ there too (tests/test_casefold.py runs it on one)."""
    names = [hostnames.encode(h) for h in CASE_VARIANTS]
    assert len({n.casefold() for n in names}) == len(CASE_VARIANTS)
    assert hostnames.encode("Web1") == "Web1%u4" and hostnames.encode("web1") == "web1"
    assert hostnames.encode("DGX-Spark-01") == "DGX-Spark-01%uf0"  # D G X S: 1111, then p a r k: 0000
    for host, name in zip(CASE_VARIANTS, names, strict=True):
        assert hostnames.decode(name) == host
        assert host.lower() != host or hostnames.legacy_encode(host) == name  # lower case: as it was


@pytest.mark.parametrize(
    ("name", "why"),
    [("Web1", "case suffix is missing"), ("Web1%u5", "case suffix is missing or wrong"), ("web1%u0", "wrong"),
     ("Web1%u04", "wrong"), ("%57eb1", "not canonical"), ("Web1%U4", "2 hex digits"),
     ("%u", "names no host")],
)  # fmt: skip
def test_a_name_without_its_case_suffix_is_no_hosts_but_the_older_rule_reads_it(name, why):
    with pytest.raises(ValueError, match=why):
        hostnames.decode(name)
    if name == "Web1":
        assert hostnames.legacy_decode("Web1") == "Web1" and hostnames.legacy_encode("Web1") == "Web1"


@pytest.mark.parametrize("bad", ["", None])
def test_an_empty_host_name_is_refused(bad):
    with pytest.raises(ValueError, match="non-empty string"):
        hostnames.encode(bad)


@pytest.mark.parametrize("name", [".hidden", "a b", "%2e", "%41", "index.md", "..", "%FF", "a/b"])
def test_a_name_the_rule_never_makes_is_no_host(name):
    with pytest.raises(ValueError, match="not an encoded host name"):
        hostnames.decode(name)


def test_markdown_escaping_leaves_no_markup_and_no_extra_cell():
    text = markup.md("a|b <script>x</script> [l](http://x) *s* `c` \\| new\nline &amp;")
    assert "<" not in text and ">" not in text and "\n" not in text
    assert _cells(f"| {text} |") == 2
    assert "&amp;amp;" in text  # the host's own entity is shown, not interpreted
    assert markup.code("/srv/wb") == "`/srv/wb`" and not markup.code("a`|b").startswith("`")
    assert markup.link("%2E.%2Fvictim/report.md") == "%252E.%252Fvictim/report.md"


# --- the real store and render path ----------------------------------------------------------------


def _hostile_doc(doc: dict, host: str, run_id: str, fail_fsync: bool = True) -> dict:
    doc = copy.deepcopy(doc)
    doc["host"], doc["run_id"] = host, run_id
    wb = doc["facts"]["workbench"]
    wb["mount_options"] = ["rw", "evil|<script>m</script>", "x\ny"]
    if isinstance(wb.get("device"), dict) and "unavailable" not in wb["device"]:
        wb["device"]["model"] = "<script>model</script>|"
        wb["device"]["name"] = "sda|<b>"
    doc["facts"]["host"]["kernel"] = "6.1|<script>k</script>"
    fs = doc["experiments"]["fsync_bench"]
    doc["experiments"]["fsync_bench"] = (
        fs
        if not fail_fsync
        else {
            "status": "failed",
            "error": "boom|<script>e</script>\n| x | y |",
            "step_wall_s": fs.get("step_wall_s", 0.1),
        }
    )
    return doc


def _stage(reports, run_id: str, host: str, doc: dict) -> None:
    staging = store.incoming_dir(reports, run_id)
    staging.mkdir(parents=True, exist_ok=True)
    (staging / f"{hostnames.encode(host)}.json").write_text(json.dumps(doc))


@pytest.mark.heavy
def test_hostile_names_and_strings_stay_inside_the_reports_dir_and_out_of_the_markup(tmp_path, linux_doc):  # noqa: F811
    reports = tmp_path / "deep" / "a" / "b" / "reports"  # ../../../../victim from here is tmp_path/victim
    reports.mkdir(parents=True)
    (tmp_path / "victim.json").write_text("precious")
    before = _files(tmp_path)
    run_id = "20261129T100000Z"
    outcomes = {}
    for i, host in enumerate(HOSTILE):  # half of them with a durable sync figure: the fleet plot names them
        _stage(reports, run_id, host, _hostile_doc(linux_doc, host, run_id, fail_fsync=i % 2 == 0))
        outcomes[host] = HostOutcome(host=host)
    # a fetched file that names another host than its (encoded) file name's is refused, naming both
    _stage(reports, run_id, "plain", {**_hostile_doc(linux_doc, "../../../../redirect", run_id)})
    outcomes["plain"] = HostOutcome(host="plain")
    failed = HostOutcome(host=FAILURE_ONLY, status="unreachable", task="Gathering Facts")
    failed.message = "ssh: connect | <script>z</script>\nrefused"
    outcomes[FAILURE_ONLY] = failed
    status = store.store_fetched(reports, run_id, "runs", outcomes)
    assert status[FAILURE_ONLY] == "unreachable" and status["plain"] == "failed"
    refused = stored.read(store.files(hostnames.host_dir(reports, "plain"), "failures")[0], "failure")
    assert "of host '../../../../redirect', found among the files of host 'plain'" in refused["message"]
    assert (store.incoming_dir(reports, run_id) / "plain.json").is_file()  # kept as it came, not stored
    assert status["math$\\foo$text"] == "ok"
    written, errors = report.render_all(reports, force=True)
    assert errors == []
    assert (reports / "fleet-plots").is_dir() and any((reports / "fleet-plots").glob("*.png"))

    # nothing outside the reports directory was written, nor changed
    assert {p for p in _files(tmp_path) if reports not in p.parents} == before
    assert (tmp_path / "victim.json").read_text() == "precious"
    assert not (tmp_path / "victim").exists() and not (tmp_path / "deep" / "redirect").exists()
    # each host has exactly one directory, named by the rule, and keeps its own name inside
    all_hosts = {*HOSTILE, "plain", FAILURE_ONLY}
    dirs = [p for p in reports.iterdir() if p.is_dir() and (p / "failures").is_dir() or (p / "runs").is_dir()]
    assert sorted(p.name for p in dirs) == sorted(hostnames.encode(h) for h in all_hosts)
    assert set(store.hosts(reports)) == all_hosts
    for host in HOSTILE:
        runs = store.files(hostnames.host_dir(reports, host), "runs")
        assert len(runs) == 1 and stored.read(runs[0], "results")["host"] == host
    # no markup survives, and no cell is split, in any page
    pages = [p for p in reports.rglob("*.md") if p.is_file()]
    assert len([p for p in pages if p.name == "report.md"]) == len(all_hosts)
    for page in pages:
        text = page.read_text()
        assert "<script" not in text and "<b>" not in text, page
        for table in _tables(text):
            assert len({_cells(line) for line in table}) == 1, (page, table)
    # the HTML twins: every page parsed, no element, handler or URL from a host (tests/test_report_html.py)
    from test_report_html import check_page

    html_pages = [p for p in reports.rglob("*.html") if p.is_file()]
    assert len(html_pages) == len(pages) and all(p.with_suffix(".md").is_file() for p in html_pages)
    for page in html_pages:
        check_page(page, reports)
    index = (reports / "index.md").read_text()
    for host in all_hosts:
        row = _row(index, host)
        assert f"]({markup.link(hostnames.encode(host) + '/report.md')})" in row
        assert (reports / hostnames.encode(host) / "report.md").is_file()
    assert "**unreachable** at" in _row(index, FAILURE_ONLY)
    assert "| failure record `20261129T100000Z` |" in _row(index, FAILURE_ONLY)
    heading = (
        (reports / hostnames.encode("evil|<script>x</script>") / "report.md").read_text().splitlines()[0]
    )
    assert heading == "# disklab report: evil\\|&lt;script&gt;x&lt;/script&gt;"


def test_the_answers_at_the_top_escape_every_host_string(tmp_path, linux_doc):  # noqa: F811
    host = "evil|<script>x</script>"
    doc = _hostile_doc(linux_doc, host, "20261129T100000Z", fail_fsync=False)
    device = "sda|<b>\nx"
    wb = copy.deepcopy(doc["facts"]["workbench"])
    if not isinstance(wb.get("device"), dict) or "unavailable" in wb["device"]:
        wb["device"] = {"name": device, "disk": "sda", "partition": False, "rotational": False,
                        "scheduler": {"unavailable": "test"}, "read_ahead_kb": 128}  # fmt: skip
    wb["device"].update(name=device, write_cache="write back")
    doc["workbench"] = wb  # the run's own workbench facts (results 4): what the answers read
    doc["facts"]["versions"]["torch"] = "2.0|<script>t</script>"
    pc = powercut_section()
    pc["recipes"][0]["title"] = "naive | <script>r</script> [x](http://e)"
    doc["experiments"]["powercut"] = pc
    doc["experiments"]["crash"] = {
        "status": "failed",
        "error": "boom|<script>c</script>\n| x |",
        "step_wall_s": 0.1,
    }
    doc["experiments"]["load"] = {"status": "not_run", "reason": "no <b>torch</b>|here", "step_wall_s": 0.0}
    reports = tmp_path / "reports"
    stored.write(hostnames.host_dir(reports, host) / "runs" / "20261129T100000Z.json", "results", doc)
    _, errors = report.render_all(reports)
    assert errors == []
    text = (hostnames.host_dir(reports, host) / "report.md").read_text()
    lines = answers_block(text)
    block = "\n".join(lines)
    assert "<script" not in block and "<b>" not in block and "](http" not in block
    assert all(line.startswith("- [") for line in lines)  # no host string started a line of its own
    assert markup.md(device) in answer(lines, "A durable sync")
    assert markup.md(pc["recipes"][0]["title"]) in answer(lines, "A power cut")
    assert markup.md("boom|<script>c</script>\n| x |") in answer(lines, "A kill during a save")
    assert markup.md("no <b>torch</b>|here") in answer(lines, "Loading weights")
    run_line = section(text, "fsync_bench").splitlines()[2]
    assert (
        run_line.startswith("From run `20261129T100000Z`") and markup.md("6.1|<script>k</script>") in run_line
    )
    assert markup.md("2.0|<script>t</script>") in run_line and "<script" not in text


def test_a_fetched_file_whose_name_the_rule_never_makes_is_left_alone(tmp_path, linux_doc):  # noqa: F811
    reports = tmp_path / "reports"
    staging = store.incoming_dir(reports, "20261129T100000Z")
    staging.mkdir(parents=True)
    (staging / ".hidden.json").write_text(json.dumps(linux_doc))
    assert store.store_fetched(reports, "20261129T100000Z", "runs", {}) == {}
    assert (staging / ".hidden.json").is_file() and store.hosts(reports) == []


# --- finding 9: every host with a stored file keeps its row ---------------------------------------


def _failure(reports, host: str, run_id: str, status: str = "unreachable", kind: str = "runs") -> None:
    stored.write(
        hostnames.host_dir(reports, host) / "failures" / f"{run_id}.json",
        "failure",
        {"run_id": run_id, "run_kind": kind, "status": status, "task": "Gathering Facts", "role": None,
         "message": "ssh: connect to host: Connection refused", "failed_steps": {}},
    )  # fmt: skip


@pytest.mark.heavy
def test_every_host_with_a_stored_file_keeps_its_row_with_its_latest_status(tmp_path, linux_doc):  # noqa: F811
    reports = tmp_path / "reports"
    good = {**copy.deepcopy(linux_doc), "host": "goodbox"}
    stored.write(hostnames.host_dir(reports, "goodbox") / "runs" / "20261129T100000Z.json", "results", good)
    # a host whose only stored run is damaged, and whose last attempt was refused
    broken = hostnames.host_dir(reports, "brokenbox") / "runs" / "20261129T100000Z.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("[]")
    _failure(reports, "brokenbox", "20261129T110000Z", status="failed")
    # a host that only ever failed
    _failure(reports, "failonly", "20261129T100000Z")
    # a host that failed, then passed a newer audit: the audit clears the failure
    _failure(reports, "cameback", "20261129T100000Z")
    stored.write(
        hostnames.host_dir(reports, "cameback") / "audits" / "20261129T120000Z.json",
        "audit",
        {"run_id": "20261129T120000Z", "host": "cameback", "facts": copy.deepcopy(linux_doc["facts"])},
    )
    # a host that passed an audit, then failed: the failure is its status
    stored.write(
        hostnames.host_dir(reports, "wentaway") / "audits" / "20261129T100000Z.json",
        "audit",
        {"run_id": "20261129T100000Z", "host": "wentaway", "facts": copy.deepcopy(linux_doc["facts"])},
    )
    _failure(reports, "wentaway", "20261129T110000Z", kind="audits")
    _, errors = report.render_all(reports, force=True)
    assert len(errors) == 1 and "brokenbox" in errors[0] and str(broken) in errors[0]
    index = (reports / "index.md").read_text()
    assert "| ok |" in _row(index, "goodbox") and "| run `20261129T100000Z` |" in _row(index, "goodbox")
    row = _row(index, "brokenbox")
    assert (
        "**failed** at" in row
        and "| failure record `20261129T110000Z`; 1 newest stored file(s) unreadable |" in row
    )
    assert "**unreachable** at" in _row(index, "failonly")
    assert "| failure record `20261129T100000Z` |" in _row(index, "failonly")
    row = _row(index, "cameback")
    assert "unreachable" not in row and "| ok |" in row and "| audit `20261129T120000Z` |" in row
    assert "**unreachable** at" in _row(index, "wentaway")
    text = (reports / "brokenbox" / "report.md").read_text()
    assert str(broken) in text and "cannot be read" in text


# --- a real `disklab audit` with a hostile inventory name ----------------------------------------


@pytest.mark.slow
def test_a_real_audit_of_a_host_named_like_a_path_writes_only_inside_the_reports_dir(tmp_path):
    top = tmp_path / "top"
    reports = top / "deep" / "a" / "b" / "reports"
    reports.mkdir(parents=True)
    (top / "victim.json").write_text("precious")
    host = "../../../../victim"
    inv = tmp_path / "inv.yml"
    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "/usr/bin/python3",
        "disklab_root": str(tmp_path / "lab"),
        "disklab_workbench": str(tmp_path / "lab" / "wb"),
        "lab_run_workbench_create": True,
    }
    inv.write_text(yaml.safe_dump({"all": {"hosts": {host: host_vars}}}))
    before = _files(top)
    proc = run_disklab("audit", "-i", str(inv), reports=reports, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {p for p in _files(top) if reports not in p.parents} == before
    assert (top / "victim.json").read_text() == "precious" and not (top / "victim").exists()
    audits = store.files(hostnames.host_dir(reports, host), "audits")
    assert len(audits) == 1 and stored.read(audits[0], "audit")["host"] == host
    assert store.hosts(reports) == [host]
    index = (reports / "index.md").read_text()
    assert re.search(r"^\| \.\./\.\./\.\./\.\./victim \| ok \| .* \| audit `", index, re.M), index


# --- issue 40, item 1: an older reports directory, on a case-sensitive filesystem --------------------


def test_an_older_hosts_directory_moves_to_its_name_now_and_no_stored_file_is_lost_or_replaced(tmp_path):
    """Directories the rule before its case suffix named (``reports/Web1``) move at the next command:
    whole where that is all they hold, file by file where a file would land on one that is there (it
    stays, named). tests/test_casefold.py does the same on a case-insensitive filesystem."""
    from test_casefold import _rows, _sums
    from test_stored import _results

    reports = tmp_path / "reports"
    for host, run_id in (
        ("Web1", "20261201T100000Z"),
        ("web1", "20261201T100000Z"),
        ("DGX", "20261202T100000Z"),
    ):
        stored.write(
            reports / host / "runs" / f"{run_id}.json", "results", _results(host=host, run_id=run_id)
        )
    failure = {"run_id": "20261203T100000Z", "run_kind": "runs", "status": "unreachable",
               "task": "Gathering Facts", "role": None, "message": "ssh: connect to host: Connection refused",
               "failed_steps": {}}  # fmt: skip
    stored.write(reports / "Web1" / "failures" / "20261203T100000Z.json", "failure", failure)
    (reports / "Web1" / "report.md").write_text("# rendered by an older disklab\n")
    clash = reports / "DGX%u7" / "runs" / "20261202T100000Z.json"  # made since, by hand: never replaced
    stored.write(clash, "results", _results(host="DGX", run_id="20261202T100000Z", profile="full"))
    before = sorted(_sums(reports).values())
    proc = run_disklab("report", reports=reports)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the directory left behind is named
    assert (
        f"moved the stored files of host 'Web1' from {reports / 'Web1'} to {reports / 'Web1%u4'}"
        in proc.stderr
    )
    old = reports / "DGX" / "runs" / "20261202T100000Z.json"
    assert f"left {old} as it is: {clash} exists already" in proc.stderr
    assert f"{reports / 'DGX'}: not rendered: not a host directory disklab writes" in proc.stderr
    assert sorted(_sums(reports).values()) == before and old.is_file()  # every file, byte for byte
    assert (reports / "Web1%u4" / "report.md").is_file() and not (reports / "Web1").exists()
    assert [p.name for p in store.files(reports / "Web1%u4", "failures")] == ["20261203T100000Z.json"]
    assert store.hosts(reports) == ["DGX", "Web1", "web1"]
    assert sorted(_rows((reports / "index.md").read_text())) == ["DGX", "Web1", "web1"]


# --- issue 40, item 7: --retry-failed and names a limit cannot take ---------------------------------

LIMIT_HOSTS = ["a,b", "a", "b", "web*", "web1", "!x", "x", "&y", "y", "~z", "zz", "h[1]", "h1", "c:d", "c",
               "d", "@f", "ok.example"]  # fmt: skip


@pytest.mark.parametrize(
    "chosen", [["a,b"], ["web*"], ["!x"], ["&y"], ["~z"], ["h[1]"], ["c:d"], ["@f"], ["!x", "&y"],
               ["a,b", "web*", "ok.example"]],
)  # fmt: skip
def test_the_retry_limit_selects_exactly_the_failed_hosts_as_ansible_reads_it(tmp_path, chosen):
    """Ansible's own inventory code reads the limit file disklab passes (--limit @FILE): each failed
    host's name means that host only. Joined by commas, ``a,b`` meant hosts ``a`` and ``b``."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    from disklab import runner

    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {h: {} for h in LIMIT_HOSTS if "[" not in h}}}))
    manager = InventoryManager(loader=DataLoader(), sources=[str(inv)])
    manager.add_host("h[1]", group="all")  # a YAML inventory reads [] as a range; a dynamic one may not
    assert sorted(manager._inventory.hosts) == sorted(LIMIT_HOSTS)
    limit = tmp_path / "limit"
    limit.write_text(runner.limit_lines(chosen))
    manager.subset(f"@{limit}")
    assert sorted(h.name for h in manager.get_hosts("all")) == sorted(chosen)
    if chosen == ["a,b"]:
        manager.subset(",".join(chosen))  # what --retry-failed passed before: two other hosts
        assert sorted(h.name for h in manager.get_hosts("all")) == ["a", "b"]


@pytest.mark.parametrize("host", ["line\nbreak", " lead", "trail ", "cr\rname"])
def test_a_name_no_limit_can_take_is_refused_naming_it(host):
    from disklab import runner

    with pytest.raises(ValueError, match="cannot be named in an Ansible limit"):
        runner.limit_lines(["ok", host])


@pytest.mark.slow
def test_retry_failed_runs_the_host_named_a_comma_b_and_no_other(tmp_path):
    from disklab import store as store_mod

    reports = tmp_path / "reports"
    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "disklab_root": str(tmp_path / "root"),
        "disklab_workbench": str(tmp_path / "wb"),
        "lab_run_workbench_create": True,
    }
    inv = tmp_path / "inv.yml"
    inv.write_text(
        yaml.safe_dump({"all": {"hosts": {h: host_vars for h in ("a,b", "a", "b", "web*", "web1")}}})
    )
    status = {"a,b": "failed", "a": "ok", "b": "ok", "web*": "unreachable", "web1": "ok"}
    store_mod.record_invocation(reports, "20261201T100000Z", "runs", inv, status)
    # check mode and a tag no task has: only the always-tagged tasks run, and nothing is stored
    proc = run_disklab(
        "run", "-i", str(inv), "--retry-failed", "--check", "--tags", "no_such_tag", reports=reports
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--retry-failed: re-running 'a,b', 'web*' (failed in run 20261201T100000Z)" in proc.stdout
    ran = sorted(ln.split(": check ")[0] for ln in proc.stdout.splitlines() if ": check " in ln)
    assert ran == ["a,b", "web*"]


# --- issue 40, items 7 and 8: a name too long for a directory, a name with a newline ----------------


@pytest.mark.slow
def test_a_too_long_name_is_refused_before_any_work_and_a_newline_fakes_no_line(tmp_path):
    long_name = "n" * 230
    faker = "a\nlocalhost"
    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "disklab_root": str(tmp_path / "root"),
        "disklab_workbench": str(tmp_path / "wb"),
        "lab_run_workbench_create": True,
    }
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {long_name: host_vars, faker: host_vars}}}))
    reports = tmp_path / "reports"
    proc = run_disklab("run", "-i", str(inv), reports=reports)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not (tmp_path / "root").exists() and not (tmp_path / "wb").exists()  # nothing was done
    refusal = "encodes to 230 bytes, over the 200 allowed: its reports directory cannot be named"
    said = [ln for ln in proc.stdout.splitlines() if ln.startswith(long_name + ": failed at ")]
    assert len(said) == 1 and refusal in said[0] and "'Refuse host names that make no reports" in said[0]
    # every console line that carries the name carries it escaped, on one line
    for text in (proc.stdout, proc.stderr):
        assert not any(re.match(r"^(\[ *[0-9.]+ s\] )?localhost", ln) for ln in text.splitlines()), text
    assert any(ln.startswith("a\\nlocalhost: failed at ") for ln in proc.stdout.splitlines())
    assert "] a\\nlocalhost: running: " in proc.stderr
    index = (reports / "index.md").read_text()
    assert "Every host is ok" not in index
    row = _row(index, long_name)  # refused, and still in the index, from its run record
    assert "**failed** at" in row and "over the 200 allowed" in row and "| run record `" in row
    assert "**failed** at" in _row(index, faker)
