"""Escaping of untrusted strings for where they land in a markdown report.

Every string from an inventory or a host (host names, mount options, device model and vendor, error
messages, task names, paths) is untrusted: a ``|`` splits a table cell, a newline ends a table row,
``<script>`` is HTML to a markdown renderer, ``[x](y)`` is a link. These functions are the one rule, and
:data:`FILTERS` registers them in the report's Jinja environment (disklab.report.environment):

- ``md``: inline text anywhere (a paragraph, a list item, a heading, a table cell, link text): newlines
  and control characters become spaces; ``\\`` and the markdown punctuation ``` ` * | ``` are
  backslash-escaped, so is ``_`` except inside a word and ``(`` or ``[`` after ``]`` (no link);
  ``& < >`` become HTML entities, so no tag and no entity of the host's survives.
- ``code``: a value shown as inline code (a path, a run id): a code span when the value holds nothing a
  code span cannot carry safely (a backtick, ``|``, ``<``, ``>``, ``&``, a control character), else ``md``.
- ``link``: a link target inside the reports directory, as its path through disklab.hostnames and
  URL-quoted (``host_link`` is already the encoded directory name; it is quoted again for the URL).
- ``fact``: disklab.units.fact, escaped as ``md``.

The report issue's HTML uses the same rule (``&``, ``<``, ``>`` are already entities).
"""

from __future__ import annotations

import re
import urllib.parse

from disklab import units

# Characters that mean something in inline markdown; each is written with a backslash before it. An
# underscore inside a word (``F_FULLFSYNC``) opens no emphasis (CommonMark) and is left as it is.
_MD_PUNCT = re.compile(r"([\\`*|]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
# A bracket starts a link only as ``[text](target)`` or ``[text][ref]`` (no reference definition can be
# written inline): the character after ``]`` is escaped, and ``[Errno 5]`` reads as it is.
_LINK = re.compile(r"\]([(\[])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_CODE_UNSAFE = re.compile(r"[`|<>&\x00-\x1f\x7f\u2028\u2029]")


def md(value: object) -> str:
    """``value`` as inline markdown text that shows exactly its characters (see the module's rule)."""
    text = _CONTROL.sub(" ", str(value))
    text = "".join(_HTML.get(ch, ch) for ch in text)
    return _LINK.sub(r"]\\\1", _MD_PUNCT.sub(r"\\\1", text))


def code(value: object) -> str:
    """``value`` as an inline code span, or as escaped text (:func:`md`) when a code span cannot hold it."""
    text = str(value)
    if not text or _CODE_UNSAFE.search(text) or text != text.strip():
        return md(text)
    return f"`{text}`"


def link(target: str) -> str:
    """A relative link target: URL-quoted, each path component kept apart (``/`` stays a separator)."""
    return urllib.parse.quote(str(target), safe="/")


def fact(value: object) -> str:
    """A host fact as disklab.units.fact writes it, escaped as :func:`md`."""
    return md(units.fact(value))


FILTERS = {"md": md, "code": code, "link": link, "fact": fact}
