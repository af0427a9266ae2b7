"""The HTML twin of each markdown page (issue 28, item 4): index.html, fleet.html and each report.html.

Built from the rendered markdown by disklab.htmlpage and written with it; a host string holding markup or
script is shown as text, never as an element: each page is parsed with the standard library's
html.parser, and every element, attribute and URL in it is checked.
"""

from __future__ import annotations

import copy
import html.parser
import os
import re
import urllib.parse
from pathlib import Path

import pytest

from conftest import viewer_heading_ids
from disklab import hostnames, htmlpage, report, reportcache, store
from disklab.runner import HostOutcome
from test_hostile_names import FAILURE_ONLY, _hostile_doc, _stage
from test_report import _store, linux_doc  # noqa: F401  (the fixture: a real run measured here, at tiny sizes)
from test_report_answers import full_doc  # noqa: F401  (the fixture: every step the answers read)

# Every element a page may hold: the page's own frame and what markdown-it makes of the templates' markdown.
ALLOWED_TAGS = {
    *("html", "head", "meta", "title", "style", "body", "nav", "main"),
    *("h1", "h2", "h3", "h4", "h5", "h6", "p", "a", "img", "ul", "ol", "li", "blockquote", "hr", "br"),
    *("table", "thead", "tbody", "tr", "th", "td", "code", "pre", "em", "strong"),
}
# Every attribute an element may carry, and which of them hold a URL.
ALLOWED_ATTRS = {"lang", "charset", "http-equiv", "content", "name", "href", "src", "alt", "style", "id"}
# The only id attribute: a heading's, from its text (letters, numbers, "-" and "_"; disklab.anchors).
HEADING_ID = re.compile(r"[\w-]*")
# The only style attribute: a table column's alignment (markdown-it's, from a ``|---:|`` line).
ALIGN = re.compile(r"text-align:(left|right|center)")
URL_ATTRS = {"href", "src"}
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}

EVIL = "evil|<script>x</script>"
HOSTILE_HOST = 'x"><img src=x onerror=alert(1)>'
SCRIPTY = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(2)">',
    "[click](javascript:alert(3))",
    "<a href='javascript:alert(4)'>a</a>",
    "javascript:alert(5)",
    '"><svg onload=alert(6)>',
    "&lt;script&gt;",
    "<style>body{display:none}</style>",
    "![i](http://example.invalid/x.png)",
]


class Page(html.parser.HTMLParser):
    """A parsed page: its elements (tag, attributes) in order, and its text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)


def check_page(path, reports) -> Page:
    """Parse ``path`` and assert that no element, attribute or URL in it could come from a host string:
    only the page's own tags and attributes, no script, no ``on*`` handler, no URL with a scheme (so no
    ``javascript:``) and none outside ``reports``. A link to a page is to its ``.html`` twin, but the
    navigation bar's own link to the page's markdown."""
    page = Page(path.read_text())
    tags = [tag for tag, _ in page.elements]
    assert "script" not in tags and set(tags) <= ALLOWED_TAGS, (path, set(tags) - ALLOWED_TAGS)
    assert tags.count("style") == 1 and tags.count("title") == 1, path
    for tag, attrs in page.elements:
        assert set(attrs) <= ALLOWED_ATTRS and not any(a.startswith("on") for a in attrs), (path, tag, attrs)
        assert "style" not in attrs or ALIGN.fullmatch(attrs["style"] or ""), (path, tag, attrs)
        assert "id" not in attrs or (tag in HEADINGS and HEADING_ID.fullmatch(attrs["id"] or "")), (
            tag,
            attrs,
        )
        for name in URL_ATTRS & set(attrs):
            url = attrs[name] or ""
            parts = urllib.parse.urlsplit(url)
            assert not parts.scheme and not parts.netloc and not url.startswith("/"), (path, tag, url)
            assert "javascript" not in url.lower(), (path, tag, url)
            target = (path.parent / urllib.parse.unquote(parts.path)).resolve()
            assert Path(reports).resolve() in target.parents, (path, tag, url)
        href = (attrs.get("href") or "").split("#")[0] if tag == "a" else ""
        if href.endswith(".md"):
            assert href == path.with_suffix(".md").name, (path, href)
    return page


def _text(page: Page) -> str:
    return "".join(page.text)


@pytest.mark.heavy
def test_a_host_whose_facts_hold_markup_and_script_shows_them_as_text_in_every_html_page(tmp_path, linux_doc):  # noqa: F811
    reports = tmp_path / "reports"
    run_id = "20261129T100000Z"
    doc = _hostile_doc(linux_doc, HOSTILE_HOST, run_id, fail_fsync=False)
    doc["facts"]["host"]["kernel"] = SCRIPTY[0]
    doc["facts"]["host"]["cpu_model"] = " | ".join(SCRIPTY)
    doc["facts"]["host"]["hostname"] = SCRIPTY[1]
    doc["facts"]["workbench"]["mount_options"] = SCRIPTY
    failing = _hostile_doc(linux_doc, EVIL, run_id)  # a failed step's error
    failing["experiments"]["big_write"] = {
        "status": "failed",
        "error": SCRIPTY[2] + SCRIPTY[3],
        "step_wall_s": 0.1,
    }
    for host, d in ((HOSTILE_HOST, doc), (EVIL, failing)):
        _stage(reports, run_id, host, d)
    failed = HostOutcome(host=FAILURE_ONLY, status="unreachable", task="Gathering <script>t</script>")
    failed.message = SCRIPTY[4] + " " + SCRIPTY[5]
    outcomes = {h: HostOutcome(host=h) for h in (HOSTILE_HOST, EVIL)}
    store.store_fetched(reports, run_id, "runs", {**outcomes, FAILURE_ONLY: failed})
    _, errors = report.render_all(reports, force=True)
    assert errors == []

    pages = sorted(reports.rglob("*.html"))
    assert {p.relative_to(reports).as_posix() for p in pages} == {
        "index.html",
        "fleet.html",
        "statistics.html",
        *(f"{hostnames.encode(h)}/report.html" for h in (HOSTILE_HOST, EVIL, FAILURE_ONLY)),
    }
    parsed = {p: check_page(p, reports) for p in pages}
    # the host's strings are there, as the characters they are
    host_page = _text(parsed[hostnames.host_dir(reports, HOSTILE_HOST) / "report.html"])
    assert f"disklab report: {HOSTILE_HOST}" in host_page
    for s in SCRIPTY:
        assert s in host_page, s
    assert "boom|<script>e</script>" not in host_page  # that host's fsync_bench did not fail
    evil = _text(parsed[hostnames.host_dir(reports, EVIL) / "report.html"])
    assert "boom|<script>e</script> | x | y |" in evil and SCRIPTY[2] + SCRIPTY[3] in evil
    index = parsed[reports / "index.html"]
    assert HOSTILE_HOST in _text(index) and "Gathering <script>t</script>" in _text(index)
    assert SCRIPTY[0] in _text(index)  # the kernel column
    # the index links each host's report.html, by its encoded directory name
    hrefs = [a.get("href") for tag, a in index.elements if tag == "a"]
    for host in (HOSTILE_HOST, EVIL, FAILURE_ONLY):
        href = urllib.parse.quote(hostnames.encode(host) + "/report.html", safe="/")
        assert href in hrefs, (host, hrefs)
        assert (reports / urllib.parse.unquote(href)).is_file()
    # the image a host string tried to load from the network is no element, only text
    assert not [a for tag, a in parsed[hostnames.host_dir(reports, HOSTILE_HOST) / "report.html"].elements
                if tag == "img" and "example.invalid" in (a.get("src") or "")]  # fmt: skip


@pytest.mark.heavy
def test_each_html_page_links_html_pages_and_the_markdown_keeps_linking_markdown(tmp_path, linux_doc):  # noqa: F811
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    report.render_all(reports)
    host = reports / "linuxbox"
    index_md, index_html = (reports / "index.md").read_text(), (reports / "index.html").read_text()
    assert "](linuxbox/report.md)" in index_md and "](fleet.md)" in index_md
    assert 'href="linuxbox/report.html"' in index_html and 'href="fleet.html"' in index_html
    assert "](index.md)" in (reports / "fleet.md").read_text()
    assert 'href="index.html"' in (reports / "fleet.html").read_text()
    page = check_page(host / "report.html", reports)
    hrefs = [a["href"] for tag, a in page.elements if tag == "a"]
    assert hrefs[:3] == ["../index.html", "../fleet.html", "report.md"]  # the page's own navigation
    imgs = [a["src"] for tag, a in page.elements if tag == "img"]
    assert "plots/fsync_bench_latency.png" in imgs and all((host / src).is_file() for src in imgs)
    # the first section and its table: the markdown's, as HTML
    tags = [tag for tag, _ in page.elements]
    assert tags.index("h1") < tags.index("h2") < tags.index("table")
    text = _text(page)
    assert f"filesystemtype{linux_doc['facts']['workbench']['fstype']}" in "".join(text.split())
    for p in (reports / "index.html", reports / "fleet.html"):
        check_page(p, reports)
    csp = next(a["content"] for tag, a in page.elements if tag == "meta" and a.get("http-equiv"))
    assert "default-src 'none'" in csp and "script" not in csp


def two_hosts_every_section(reports: Path, full_doc: dict) -> list[Path]:  # noqa: F811
    """linuxbox with every step the answers read, and bare, whose load step was not run and whose powercut
    step is in no stored run: sections ok, not run and absent. Returns the markdown pages, rendered."""
    _store(reports, full_doc)
    bare = copy.deepcopy(full_doc)
    bare["host"] = "bare"
    bare["experiments"]["load"] = {"status": "not_run", "reason": "no torch here", "step_wall_s": 0.0}
    del bare["experiments"]["powercut"]
    bare["lab_code"]["steps"].pop("powercut", None)
    _store(reports, bare)
    assert report.render_all(reports)[1] == []
    return [reports / "index.md", reports / "fleet.md", reports / "linuxbox" / "report.md",
            reports / "bare" / "report.md"]  # fmt: skip


@pytest.mark.heavy
def test_every_in_page_link_reaches_a_heading_in_the_markdown_and_in_the_html(tmp_path, full_doc):  # noqa: F811
    """The markdown's links reach the ids a markdown viewer gives its headings (GitHub's rule, written out
    in conftest.viewer_heading_ids apart from disklab), and the HTML twin's headings carry exactly those
    ids; no raw tag of a template shows in a page as text, and no list swallows the paragraph after it."""
    pages = two_hosts_every_section(tmp_path / "reports", full_doc)
    in_page = 0
    for md_path in pages:
        text = md_path.read_text()
        ids = [i for i, _ in viewer_heading_ids(text)]
        page = check_page(md_path.with_suffix(".html"), tmp_path / "reports")
        html_ids = [a["id"] for tag, a in page.elements if tag in HEADINGS]
        assert html_ids == ids, md_path  # every heading, in order, with a viewer's id
        for target in re.findall(r"\]\(([^)\s]*#[^)\s]+)\)", text):
            link, _, fragment = target.partition("#")
            other = (md_path.parent / urllib.parse.unquote(link)) if link else md_path
            assert fragment in [i for i, _ in viewer_heading_ids(other.read_text())], (md_path, target)
            in_page += not link
        shown = _text(page)
        assert "<a id" not in shown and "<details" not in shown and "&lt;" not in shown, md_path
        body = htmlpage.body(text)[0]
        assert not re.search(r"<li>[^\n]*\n<p>", body) and "<li>\n<p>" not in body, md_path  # no loose item
    assert in_page >= 12  # the two host reports' answers and run lists
    # a section's link reaches that section's own heading, whatever its state
    for host, step, heading in (
        ("linuxbox", "load", "## Loading weights: cold and warm, at each readiness stage"),
        ("bare", "load", "## Loading weights: cold and warm, at each readiness stage"),
        ("bare", "powercut", "## Power-cut simulator"),
    ):
        text = (tmp_path / "reports" / host / "report.md").read_text()
        assert dict(viewer_heading_ids(text))[report.anchor(step)] == heading[3:], (host, step)
        assert f"\n{heading}\n" in text
    bare = (tmp_path / "reports" / "bare" / "report.md").read_text()
    load = bare.split("\n## Loading weights: cold and warm, at each readiness stage\n", 1)[1].split("\n## ")[
        0
    ]
    assert "**Not run on this host**: no torch here" in load


@pytest.mark.heavy
def test_an_html_page_is_written_when_its_markdown_is_up_to_date_but_it_is_missing(tmp_path, linux_doc):  # noqa: F811
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    report.render_all(reports)
    host_html = reports / "linuxbox" / "report.html"
    first = host_html.read_text()
    md_mtime = (reports / "linuxbox" / "report.md").stat().st_mtime_ns
    for p in (host_html, reports / "index.html", reports / "fleet.html"):
        p.unlink()
    written, errors = report.render_all(reports)
    assert written == [reports / "index.md"] and errors == []  # the host's markdown was up to date
    assert (reports / "linuxbox" / "report.md").stat().st_mtime_ns == md_mtime
    assert host_html.read_text() == first
    assert (reports / "index.html").is_file() and (reports / "fleet.html").is_file()
    # a new run replaces both pages together
    second = copy.deepcopy(linux_doc)
    second["run_id"] = "20261129T110000Z"
    _store(reports, second)
    report.render_all(reports)
    assert "20261129T110000Z" in (reports / "linuxbox" / "report.md").read_text()
    assert "20261129T110000Z" in host_html.read_text()
    assert htmlpage.page((reports / "linuxbox" / "report.md").read_text(), htmlpage.HOST_NAV) == (
        host_html.read_text()
    )


def test_html_writes_are_atomic_and_a_failed_one_leaves_no_stamp(tmp_path, linux_doc, monkeypatch):  # noqa: F811
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    writes = []
    real = htmlpage.atomic_write_text
    monkeypatch.setattr(htmlpage, "atomic_write_text", lambda p, t: writes.append(p) or real(p, t))
    report.render_all(reports)
    assert sorted(p.name for p in writes) == ["fleet.html", "index.html", "report.html", "statistics.html"]

    def fail(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(htmlpage, "atomic_write_text", fail)
    stamp = reports / "linuxbox" / reportcache.STAMP_FILE
    stamp.unlink()
    with pytest.raises(OSError, match="No space left"):
        report.render_all(reports)
    assert not stamp.exists()  # the next render writes both pages again
    monkeypatch.setattr(htmlpage, "atomic_write_text", real)
    report.render_all(reports)
    assert stamp.is_file() and (reports / "linuxbox" / "report.html").is_file()


def test_link_targets_turn_to_html_only_for_relative_markdown_pages():
    assert htmlpage.html_target("a/report.md") == "a/report.html"
    assert htmlpage.html_target("%252E.%252Fv/report.md#x") == "%252E.%252Fv/report.html#x"
    assert htmlpage.html_target("runs/x.json") == "runs/x.json"
    assert htmlpage.html_target("https://example.org/a.md") == "https://example.org/a.md"
    assert htmlpage.html_target("/etc/a.md") == "/etc/a.md"
    body, title = htmlpage.body("# t <b>x</b>\n\n<script>y</script>\n\n![p](https://e.invalid/p.png)\n")
    assert title == "t <b>x</b>" and "<b>" not in body and "<script" not in body and "<img" not in body
    assert "&lt;script&gt;y&lt;/script&gt;" in body
    # a link named by its own target names the page it now links to; other link text stays as it is
    assert '<a href="fleet.html">fleet.html</a>' in htmlpage.body("see [fleet.md](fleet.md)")[0]
    assert '<a href="a/report.html">report.md</a>' in htmlpage.body("[report.md](a/report.md)")[0]


def test_markdown_it_is_a_declared_dependency_and_part_of_the_renderer_stamp(monkeypatch):
    import tomllib

    from conftest import REPO

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("markdown-it-py") for d in deps)
    assert "mdit-py-plugins>=0.5,<1" in deps  # anchors_plugin, whose ids the links target
    before = reportcache.renderer_stamp()
    import mdit_py_plugins

    monkeypatch.setattr(mdit_py_plugins, "__version__", "0.0-other")
    assert reportcache.renderer_stamp() != before  # another plugin may give other ids
    monkeypatch.setattr(htmlpage, "version", lambda: "0.0-other")
    assert reportcache.renderer_stamp() != before
    assert os.path.basename(htmlpage.html_path(REPO / "x" / "report.md")) == "report.html"


def test_each_step_has_one_section_id_from_a_plain_heading(tmp_path, monkeypatch):
    """Every step of the registry has a section id of its own, from its template's first line; a first
    line with Jinja in it is refused, naming the template, since no id could be derived from it."""
    from disklab import anchors
    from disklab_host import registry

    ids = {name: anchors.section(name) for name in registry.STEP_NAMES}
    assert len(set(ids.values())) == len(ids) and all(ids.values()), ids
    assert ids["fsync_bench"] == "fsync-the-cost-of-durability"
    for name, heading_id in ids.items():  # the id a markdown viewer gives the heading the report writes
        assert viewer_heading_ids("## " + anchors.section_heading(name))[0][0] == heading_id, name
    sections = tmp_path / "disklab" / "templates" / "sections"
    sections.mkdir(parents=True)
    (sections / "fsync_bench.md.j2").write_text("## fsync on {{ host }}\n")
    monkeypatch.setattr(anchors.importlib.resources, "files", lambda package: tmp_path / package)
    anchors._template_heading.cache_clear()
    try:
        with pytest.raises(anchors.TemplateHeadingError, match=r"templates/sections/fsync_bench.md.j2: its"):
            anchors.section("fsync_bench")
    finally:
        anchors._template_heading.cache_clear()
