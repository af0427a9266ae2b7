"""The id of each heading of a report page, the same in its markdown and in its HTML twin.

A link inside the reports (``[fsync_bench](#fsync-the-cost-of-durability)`` in a host report,
``linuxbox/report.md#fsync-the-cost-of-durability`` from the index) targets a heading by the id that
GitHub, GitLab and VS Code give it from its text: lowercased, punctuation and symbols dropped, each space a
``-`` (:func:`slug`), and a repeated id numbered ``-1``, ``-2`` in page order. The HTML twin
(disklab.htmlpage) gives every heading that same id with mdit-py-plugins' ``anchors_plugin`` and
:func:`slug`. So the markdown holds no anchor of its own: no raw ``<a id>`` (markdown-it renders raw HTML
as text, and many viewers drop it) and no ``{#id}`` attribute (a plain viewer shows it as text).

A step's section is linked by :func:`section`: the id of its heading, which is the first line of its
template (``templates/sections/NAME.md.j2``, docs/contributing.md) whether the step ran, failed, was not
run or is in no stored run (the host report writes the same heading for each). A heading is an id only
once its text is fixed: a section template's first line is a plain ``## `` heading, without Jinja.
"""

from __future__ import annotations

import functools
import importlib.resources
import unicodedata

import markdown_it

from disklab.markup import md
from disklab_host import registry

# Unicode categories a heading's id keeps: letters, marks and numbers; "-", "_" and " " (made "-") too.
_KEPT = ("L", "M", "N")
# Parses a heading's inline markdown as disklab.htmlpage does (CommonMark, raw HTML off).
_INLINE = markdown_it.MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})


class TemplateHeadingError(ValueError):
    """A section template whose first line is not a plain ``## `` heading (no id can be derived from it)."""


def slug(text: str) -> str:
    """The id of a heading whose text is ``text`` (its characters, markup taken away), as GitHub writes it:
    ``"fsync: the cost of durability"`` -> ``fsync-the-cost-of-durability``."""
    kept = (ch for ch in text.strip().lower() if ch in "-_ " or unicodedata.category(ch).startswith(_KEPT))
    return "".join(kept).replace(" ", "-")


def heading_text(markdown: str) -> str:
    """The text of an inline markdown heading as anchors_plugin reads it: its text and code spans, with
    escapes and entities undone (``fsync\\_bench`` -> ``fsync_bench``)."""
    (inline,) = _INLINE.parseInline(markdown)
    return "".join(t.content for t in inline.children or () if t.type in ("text", "code_inline"))


@functools.cache
def _template_heading(name: str) -> str | None:
    """The heading of ``templates/sections/NAME.md.j2`` (its first line, less ``## ``), or None without a
    template. Raises TemplateHeadingError for a first line that is not a plain ``## `` heading."""
    template = importlib.resources.files("disklab") / "templates" / "sections" / f"{name}.md.j2"
    if not template.is_file():
        return None
    first = template.read_text(encoding="utf-8").split("\n", 1)[0]
    if not first.startswith("## ") or "{" in first:
        raise TemplateHeadingError(
            f"templates/sections/{name}.md.j2: its first line must be a plain '## ' heading without Jinja "
            f"(its section's id is derived from it), got {first!r}"
        )
    return first[3:].strip()


def section_heading(name: str) -> str:
    """The heading of step ``name``'s section in the host report, as inline markdown: its template's first
    line for a step of the registry with a template, else the name itself, escaped (a name from a host)."""
    heading = _template_heading(name) if name in registry.STEP_NAMES else None
    return heading if heading is not None else md(name)


def section(name: str) -> str:
    """The id of step ``name``'s section in the host report (``fsync-the-cost-of-durability``)."""
    return slug(heading_text(section_heading(name)))
