"""HTML beside the markdown: each rendered ``.md`` page also as a self-contained ``.html`` page.

``reports/index.md``, ``reports/fleet.md`` and each ``reports/<host>/report.md`` get an ``.html`` twin,
built from the rendered markdown by markdown-it-py (CommonMark with tables) and written atomically beside
it (disklab.fsio). The pages read offline: no script, no font, no stylesheet or image from elsewhere; one
small embedded stylesheet, and the plots through the markdown's own relative PNG paths.

What the rule is, in order:

- **No markup from a host.** markdown-it runs with ``html=False``: a ``<tag>`` in the markdown is text,
  never an element. Every host string was already escaped by disklab.markup (``&``, ``<``, ``>`` as
  entities, the markdown punctuation with backslashes), so it is shown as its characters. So the markdown
  holds no raw HTML of its own either: each heading's id comes from its text (disklab.anchors, the id
  GitHub and other viewers give it), and the in-page links of both pages target those ids.
- **Links stay inside the reports.** markdown-it refuses ``javascript:``, ``vbscript:``, ``file:`` and
  ``data:`` links (but ``data:image/...`` images). On top of that, a link whose target is relative and ends
  in ``.md`` points to its ``.html`` twin (the markdown pages keep linking to ``.md``); an image whose
  source is not a relative path is shown as its alt text, so no page fetches anything from a network.
- **A Content-Security-Policy** in each page allows no script at all, images only from the page's own
  place (and ``data:``), and only the embedded style: a script that slipped through would not run.
"""

from __future__ import annotations

import html
import urllib.parse
from pathlib import Path

import markdown_it
import mdit_py_plugins
from markdown_it.token import Token
from mdit_py_plugins.anchors import anchors_plugin

from disklab import anchors
from disklab.fsio import atomic_write_text

# The policy every page carries (a <meta> tag: file:// pages have no headers). 'self' and file: cover the
# page's own directory opened from disk or from a web server; no script-src means no script.
CSP = (
    "default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'"
)

# Readable tables and plots that fit the window; system fonts only.
CSS = """\
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; line-height: 1.45;
       max-width: 1400px; margin: 1.5em auto; padding: 0 1.5em; color: #1b1b1b; background: #fff;
       overflow-wrap: break-word; }
nav { font-size: 0.9em; margin-bottom: 1em; padding-bottom: 0.5em; border-bottom: 1px solid #ddd; }
nav a { margin-right: 1.2em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 1.8em; border-bottom: 1px solid #eee; }
h3 { font-size: 1.1em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
tr:nth-child(even) td { background: #fafafa; }
code { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.92em;
       background: #f3f3f3; padding: 0 0.2em; }
pre { background: #f3f3f3; padding: 0.6em; overflow-x: auto; }
pre code { padding: 0; }
img { max-width: 100%; height: auto; }
blockquote { margin: 0.8em 0; padding: 0.2em 1em; border-left: 4px solid #d0a000; background: #fffbea; }
"""


def _parser() -> markdown_it.MarkdownIt:
    """CommonMark with tables; raw HTML off (a tag is text), no linkify, no typographer; every heading gets
    the id a markdown viewer gives it (mdit-py-plugins' anchors_plugin with disklab.anchors.slug), so the
    markdown's in-page links reach the same headings here."""
    md = markdown_it.MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    return md.enable("table").use(anchors_plugin, min_level=1, max_level=6, slug_func=anchors.slug)


_MD = _parser()


def _relative(url: str) -> bool:
    """A path relative to the page: no scheme, no host, not absolute, not a bare fragment."""
    parts = urllib.parse.urlsplit(url)
    return not (parts.scheme or parts.netloc or url.startswith(("/", "\\", "#")))


def html_target(url: str) -> str:
    """A relative link to a ``.md`` page as the link to its ``.html`` twin (the fragment kept); any
    other target as it is. ``a/report.md#x`` -> ``a/report.html#x``."""
    parts = urllib.parse.urlsplit(url)
    if _relative(url) and parts.path.endswith(".md"):
        return urllib.parse.urlunsplit(parts._replace(path=parts.path[: -len(".md")] + ".html"))
    return url


def _walk(tokens: list[Token]):
    for token in tokens:
        yield token
        if token.children:
            yield from _walk(token.children)


def _plain(token: Token | None) -> str:
    """The text of an inline token (its text and code), without markup; "" for None."""
    if token is None:
        return ""
    return "".join(t.content for t in _walk(token.children or []) if t.type in ("text", "code_inline"))


def body(markdown: str) -> tuple[str, str]:
    """(the page's HTML body, its title: the text of its first heading), from rendered markdown."""
    tokens = _MD.parse(markdown)
    shown_as: dict[str, str] = {}  # a link whose text is its own target (``[fleet.md](fleet.md)``)
    for token in _walk(tokens):
        if token.type == "link_open":
            href = str(token.attrGet("href") or "")
            token.attrSet("href", html_target(href))
            shown_as = {href: html_target(href)}
        elif token.type == "text" and token.content in shown_as:
            token.content = shown_as[token.content]  # ... names the page it now links to
        elif token.type == "link_close":
            shown_as = {}
        elif token.type == "image" and not _relative(str(token.attrGet("src") or "")):
            token.type, token.tag, token.attrs = "text", "", {}
            token.content = token.content or "(image left out: not a relative path)"
            token.children = None
    title = next((_plain(tokens[i + 1]) for i, t in enumerate(tokens) if t.type == "heading_open"), "")
    return _MD.renderer.render(tokens, _MD.options, {}), title


def page(markdown: str, nav: list[tuple[str, str]] = ()) -> str:
    """A whole HTML document from rendered markdown, with a ``nav`` bar of (text, relative href) links.

    ``nav`` is the caller's own text and targets, never a host's: both are escaped all the same.
    """
    content, title = body(markdown)
    links = "".join(
        f'<a href="{html.escape(href, quote=True)}">{html.escape(text)}</a>' for text, href in nav
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(CSP, quote=True)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>{html.escape(title or 'disklab')}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n"
        + (f"<nav>{links}</nav>\n" if links else "")
        + f"<main>\n{content}</main>\n</body>\n</html>\n"
    )


def html_path(md_path: Path) -> Path:
    """``x/report.md`` -> ``x/report.html``: where a markdown page's HTML twin goes."""
    return Path(md_path).with_suffix(".html")


def write(md_path: Path, markdown: str, nav: list[tuple[str, str]] = ()) -> Path:
    """Write the HTML twin of the markdown page ``md_path`` (whose text is ``markdown``) atomically beside
    it; return its path."""
    return atomic_write_text(html_path(md_path), page(markdown, nav))


# The navigation bar of each kind of page (relative to the page; the host report sits one level down).
HOST_NAV = [
    ("fleet index", "../index.html"),
    ("fleet side by side", "../fleet.html"),
    ("markdown", "report.md"),
]
INDEX_NAV = [("fleet side by side", "fleet.html"), ("markdown", "index.md")]
FLEET_NAV = [("fleet index", "index.html"), ("markdown", "fleet.md")]
STATISTICS_NAV = [
    ("fleet index", "index.html"),
    ("fleet side by side", "fleet.html"),
    ("markdown", "statistics.md"),
]


def version() -> str:
    """markdown-it-py's and mdit-py-plugins' versions: part of the renderer stamp, since another version may
    render otherwise."""
    plugins = getattr(mdit_py_plugins, "__version__", "unknown")
    return f"{getattr(markdown_it, '__version__', 'unknown')}, mdit-py-plugins {plugins}"
