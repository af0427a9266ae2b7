"""The HTML reports in a real browser (issue 28, item 4): headless chromium opens report.html and index.html.

Chromium is driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``: JSON messages,
each ended by a NUL, read by chromium on fd 3 and written on fd 4), so the test reads what the page really
shows: its first section, a table, each plot's ``naturalWidth`` once the page has loaded (a PNG that did
not load has 0), the links it follows, and every request it made (only ``file:`` ones: the pages read
offline). Each opened page leaves a screenshot.

The browser test is marked ``browser``. Without chromium it skips, saying so; with DISKLAB_FLEET_REQUIRED=1
(.ci/run, which installs chromium) it fails instead.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from disklab import report
from test_report import _store, linux_doc  # noqa: F401  (the fixture: a real run measured here, at tiny sizes)
from test_report_answers import full_doc  # noqa: F401  (the fixture: every step the answers read)
from test_report_html import two_hosts_every_section

# .ci/run sets it after installing every tool, chromium among them (tests/fleet/fleet.py's REQUIRED_ENV).
REQUIRED_ENV = "DISKLAB_FLEET_REQUIRED"
# The longest one page may take to load, and the browser to start and stop.
PAGE_TIMEOUT_S = 20
WINDOW = (1200, 2000)

# What the page shows, read in the page once it has loaded.
INSPECT = """(() => {
  const box = (el) => el ? el.getBoundingClientRect() : null;
  const h2 = document.querySelector("main h2");
  const table = document.querySelector("main table");
  return {
    title: document.title,
    h1: (document.querySelector("main h1") || {}).textContent || null,
    first_section: h2 ? h2.textContent : null,
    first_section_height: h2 ? box(h2).height : 0,
    tables: document.querySelectorAll("main table").length,
    first_table_rows: table ? table.rows.length : 0,
    first_table_width: table ? box(table).width : 0,
    images: Array.from(document.images).map((img) => ({
      src: img.getAttribute("src"), complete: img.complete, natural_width: img.naturalWidth,
      shown_width: box(img).width})),
    links: Array.from(document.links).map((a) => ({href: a.getAttribute("href"), url: a.href})),
    scripts: document.scripts.length,
  };
})()"""


def chromium() -> str:
    """The chromium to run: skipped without one, failed without one where DISKLAB_FLEET_REQUIRED=1."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    why = "chromium is not installed (Debian: apt-get install --no-install-recommends chromium)"
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{why}, and {REQUIRED_ENV}=1: .ci/run installs it, so the browser tests must run")
    pytest.skip(why)


def _high(fd: int) -> int:
    """``fd`` moved to 10 or above, so that it is none of the browser's fds 3 and 4."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Browser:
    """One headless chromium, spoken to through the DevTools protocol over a pipe."""

    def __init__(self, exe: str, profile: Path):
        to_chrome_r, self._to_chrome = map(_high, os.pipe())
        self._from_chrome, from_chrome_w = map(_high, os.pipe())
        args = [
            "--headless=new",
            "--no-sandbox",  # root in CI, and in a container
            "--disable-gpu",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--mute-audio",
            "about:blank",
        ]

        # the pipe ends become the browser's fd 3 (it reads) and 4 (it writes); each end here is 10 or above,
        # so no dup2 overwrites another, and (close-on-exec) none reaches the browser under its own number
        def pipe_fds() -> None:
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [exe, *args],
            preexec_fn=pipe_fds,
            close_fds=False,  # the close would come after pipe_fds, and take 3 and 4 with it
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError(f"chromium said nothing for {PAGE_TIMEOUT_S} s")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
                raise RuntimeError(f"chromium closed its pipe (exit {self.proc.poll()}): {err[-2000:]}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, *, session: bool = True) -> dict:
        """Send one command (to the attached page unless ``session`` is False) and return its result."""
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        """The next event ``method`` of the attached page (one already received counts)."""
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == self.session:
                    return self.events.pop(i)
            self.events.append(self._read_message(deadline))

    def open_page(self) -> None:
        target = self.send(
            "Target.createTarget",
            {"url": "about:blank"},
            session=False,
        )
        attached = self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False
        )
        self.session = attached["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.send(f"{domain}.enable")
        metrics = {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False}
        self.send("Emulation.setDeviceMetricsOverride", metrics)

    def load(self, url: str) -> dict:
        """Open ``url``, wait for its load event (images included), and return what :data:`INSPECT` reads."""
        self.events = [e for e in self.events if e.get("method") != "Page.loadEventFired"]
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")
        return self.evaluate(INSPECT)

    def requests(self) -> list[str]:
        """Every URL the page asked for since it was attached."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def evaluate(self, expression: str) -> object:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close", session=False)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child, by its pid
            self.proc.wait(timeout=10)
        for fd in (self._to_chrome, self._from_chrome):
            os.close(fd)
        self.proc.stderr.close()


@pytest.fixture
def browser(tmp_path):
    exe = chromium()
    b = Browser(exe, tmp_path / "chromium-profile")
    try:
        b.open_page()
        yield b
    finally:
        b.close()


@pytest.mark.browser
@pytest.mark.heavy
def test_a_host_report_and_the_index_show_their_sections_tables_and_plots(tmp_path, linux_doc, browser):  # noqa: F811
    reports = tmp_path / "reports"
    _store(reports, linux_doc)
    report.render_all(reports)
    host_page = (reports / "linuxbox" / "report.html").resolve()

    shown = browser.load(host_page.as_uri())
    shot = browser.screenshot(tmp_path / "report-html.png")
    assert shown["title"] == "disklab report: linuxbox" and shown["h1"] == "disklab report: linuxbox"
    assert shown["first_section"] == "On this host" and shown["first_section_height"] > 0
    assert shown["tables"] >= 4 and shown["first_table_rows"] > 5 and shown["first_table_width"] > 200
    plots = {img["src"]: img for img in shown["images"]}
    assert "plots/fsync_bench_latency.png" in plots, shown["images"]
    # the page-cache layers, as pictures beside their tables (the other sections' pictures: below)
    assert {"plots/write_buffering_layers.png", "plots/big_write_layers.png"} <= set(plots), sorted(plots)
    for img in shown["images"]:  # every plot loaded (a broken image has naturalWidth 0) and fits the window
        assert img["complete"] and img["natural_width"] > 0, img
        assert 0 < img["shown_width"] <= WINDOW[0], img
    assert shown["scripts"] == 0
    hrefs = [link["href"] for link in shown["links"]]
    assert hrefs[:3] == ["../index.html", "../fleet.html", "report.md"]
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
    browser.evaluate("document.querySelector(\"img[src='plots/fsync_bench_latency.png']\").scrollIntoView()")
    browser.screenshot(tmp_path / "report-html-plot.png")  # the plot itself, on screen

    index = browser.load(next(link["url"] for link in shown["links"] if link["href"] == "../index.html"))
    browser.screenshot(tmp_path / "index-html.png")
    assert index["title"] == "disklab fleet index" and index["first_section"] == "The fleet's answers"
    assert [img["src"] for img in index["images"]][:1] == ["fleet-plots/durable_sync_p50.png"]
    assert all(img["complete"] and img["natural_width"] > 0 for img in index["images"]), index["images"]
    assert index["tables"] >= 2 and index["first_table_rows"] == 2  # the header and linuxbox
    to_report = [link["url"] for link in index["links"] if link["href"] == "linuxbox/report.html"]
    assert to_report and set(to_report) == {host_page.as_uri()}  # from the answers and the runs table
    fleet_url = next(link["url"] for link in index["links"] if link["href"] == "fleet.html")
    fleet = browser.load(fleet_url)  # the index's link to the fleet page, followed
    assert fleet["title"] == "disklab fleet, side by side" and fleet["tables"] >= 1
    assert all(img["natural_width"] > 0 for img in fleet["images"]) and fleet["images"]
    back = browser.load(to_report[0])  # and the index's link to the host report
    assert back["first_section"] == "On this host"

    # the page's Content-Security-Policy runs no script, even one that got into the page
    injected = host_page.with_name("injected.html")
    injected.write_text(
        host_page.read_text().replace("<main>", "<main><script>document.title='ran'</script>", 1)
    )
    assert browser.load(injected.as_uri())["title"] == "disklab report: linuxbox"

    asked = browser.requests()
    assert asked and all(url.startswith("file://") for url in asked), asked  # nothing from a network
    assert any(url.endswith("/plots/fsync_bench_latency.png") for url in asked)


# Every link on the page whose target has a fragment, and the text the page shows (what a reader sees).
LINKS_AND_TEXT = """(() => ({
  links: Array.from(document.links).map((a) => a.getAttribute("href")).filter((h) => h.includes("#")),
  shown: document.body.innerText,
}))()"""
# Follow the page's in-page link ``href`` by clicking it; what the page then has as its :target.
FOLLOW = """((href) => {
  window.scrollTo(0, document.body.scrollHeight);
  const a = Array.from(document.links).find((l) => l.getAttribute("href") === href);
  a.click();
  const t = document.querySelector(":target");
  return t ? {hash: location.hash, id: t.id, tag: t.tagName, text: t.textContent,
              top: t.getBoundingClientRect().top, height: window.innerHeight} : {hash: location.hash};
})"""
# What the page has as its :target once opened at a URL with a fragment.
TARGET = """(() => { const t = document.querySelector(":target");
  return t ? {id: t.id, tag: t.tagName, text: t.textContent} : null; })()"""
# Text a template's own raw HTML would show, were it rendered as text (markdown-it runs with html off).
TAG_TEXT = re.compile(r"</?(?:a|details|summary|div|span|br|b|i|p|img)\b[^>]*>|&(?:lt|gt|quot|amp);")


@pytest.mark.browser
@pytest.mark.heavy
def test_every_in_page_link_leads_to_its_heading_and_no_tag_shows_as_text(tmp_path, full_doc, browser):  # noqa: F811
    """Every link with a fragment on the index, the fleet page and both host reports, followed in the
    browser: an in-page one by clicking it, one to another page by opening it; each lands on a heading
    with that id, and the host reports' answers reach their sections. No page shows a tag as text."""
    reports = tmp_path / "reports"
    pages = [md.with_suffix(".html").resolve() for md in two_hosts_every_section(reports, full_doc)]
    followed, other_pages = 0, set()
    for page in pages:
        shown = browser.load(page.as_uri())
        assert all(img["complete"] and img["natural_width"] > 0 for img in shown["images"]), shown["images"]
        srcs = {img["src"] for img in shown["images"]}
        if page.parent.name == "linuxbox":  # every step's pictures beside their tables
            pictures = {"powercut_verdicts", "load_peak_rss", "crash_bytes", "crash_layers", "load_stages"}
            assert {f"plots/{name}.png" for name in pictures} <= srcs, srcs
        if page.name == "fleet.html":  # the power-cut verdicts, recipe by host
            assert "fleet-plots/powercut_verdicts.png" in srcs, srcs
        seen = browser.evaluate(LINKS_AND_TEXT)
        assert not TAG_TEXT.search(seen["shown"]), (page, TAG_TEXT.search(seen["shown"]))
        for href in seen["links"]:
            if not href.startswith("#"):
                other_pages.add(urllib.parse.urljoin(page.as_uri(), href))
                continue
            landed = browser.evaluate(f"({FOLLOW})({json.dumps(href)})")
            want = urllib.parse.unquote(href[1:])
            assert landed.get("id") == want, (page.name, href, landed)
            assert landed["tag"] in {"H1", "H2", "H3", "H4", "H5", "H6"}, (page.name, href, landed)
            assert -2 < landed["top"] < landed["height"], (page.name, href, landed)  # scrolled into view
            followed += 1
        if page.name == "report.html":
            answers = [h for h in seen["links"] if h.startswith("#")]
            for step, heading in (("fsync", "fsync: the cost of durability"), ("crash", "Crash: does a")):
                assert any(browser.evaluate(f"({FOLLOW})({json.dumps(h)})")["text"].startswith(heading)
                           for h in answers), (page, step)  # fmt: skip
    assert followed >= 12, followed  # linuxbox's answers alone link seven sections, bare's as many
    assert other_pages, "the index links a host report's section"
    for url in sorted(other_pages):
        browser.load("about:blank")  # so that each is a page opened anew, not a move within the last one
        browser.load(url)
        landed = browser.evaluate(TARGET)
        assert landed and landed["id"] == urllib.parse.unquote(url.split("#", 1)[1]), (url, landed)
        assert landed["tag"].startswith("H"), (url, landed)


def test_without_chromium_the_browser_test_skips_but_fails_where_it_is_required(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv(REQUIRED_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium is not installed"):
        chromium()
    monkeypatch.setenv(REQUIRED_ENV, "1")  # .ci/run
    with pytest.raises(pytest.fail.Exception, match="must run"):
        chromium()
