"""YAML a user wrote, read within bounds: its size, its nodes with every alias expanded, its nesting.

``yaml.safe_load`` builds a file's aliases as shared references, so a "billion laughs" file of a few
hundred bytes loads quickly into a small graph, and then whatever walks it (a repr in an error message, a
copy, a render) expands it: a predictions file with one in a prediction's ``value`` took ``disklab report``
to 9.9 GB in 120 s with no output (issue 40, item 2). :func:`load` counts while PyYAML composes the file,
before any Python object is built:

* the file's size is checked before it is read (:class:`Bounds` ``max_bytes``);
* every node counts once each time it is used: an alias counts as every node of what it refers to, so the
  count is the size of the file with its aliases written out (``max_nodes``); an alias inside the node it
  refers to (a loop) is refused;
* a node deeper than ``max_depth`` is refused, before PyYAML's composer (which recurses once per level)
  could reach Python's recursion limit.

The bounds stop composing at the first node past them, so what is refused costs at most ``max_nodes``
nodes of work and the file's own size in memory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Bounds:
    """What one kind of file may hold: ``max_bytes`` (its size), ``max_nodes`` (nodes, each alias
    counted at every use) and ``max_depth`` (levels of nesting; the top-level node is level 1)."""

    max_bytes: int
    max_nodes: int
    max_depth: int


class BoundError(ValueError):
    """A file past one of its :class:`Bounds` (or with an alias loop). The message is one line without the
    file's name: ``at line N: WHAT; the bound is ...`` (the caller names the file)."""


def _line(mark) -> str:
    return f"at line {mark.line + 1}: " if mark is not None else ""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, counting nodes and depth as it composes (see the module docstring)."""

    def __init__(self, stream, bounds: Bounds) -> None:
        super().__init__(stream)
        self._bounds = bounds
        self._nodes = 0
        self._depth = 0
        # id(node) -> its nodes with aliases expanded; absent while the node is being composed
        self._sizes: dict[int, int] = {}

    def _count(self, n: int, mark) -> None:
        self._nodes += n
        if self._nodes > self._bounds.max_nodes:
            raise BoundError(
                f"{_line(mark)}more than {self._bounds.max_nodes:,} YAML nodes, each alias counted at "
                f"every use (an alias bomb?); the bound is {self._bounds.max_nodes:,} nodes"
            )

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:  # an undefined alias is PyYAML's own error
                size = self._sizes.get(id(target))
                if size is None:
                    raise BoundError(
                        f"{_line(event.start_mark)}alias *{event.anchor} is inside the node it refers to "
                        "(a loop); an alias must refer to a node that ends before it"
                    )
                self._count(size, event.start_mark)
            return super().compose_node(parent, index)
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > self._bounds.max_depth:
            raise BoundError(
                f"{_line(mark)}nested more than {self._bounds.max_depth} levels deep; the bound is "
                f"{self._bounds.max_depth} levels"
            )
        before = self._nodes
        self._count(1, mark)
        node = super().compose_node(parent, index)
        self._sizes[id(node)] = self._nodes - before
        self._depth -= 1
        return node


_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def open_regular(path: Path):
    """``path`` opened for reading in binary, refused (BoundError) unless it is a regular file: a FIFO or a
    device would block the read, or never end it. Opened without blocking and checked on the open file,
    so nothing can swap it between the check and the read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BoundError(f"not a regular file but {_KINDS.get(stat.S_IFMT(mode), 'a special file')}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_text(path: Path, bounds: Bounds) -> str:
    """The file's text, read only when it is a regular file of at most ``bounds.max_bytes`` (checked
    before reading, and again on what was read, should it have grown). Raises BoundError past the bound
    or for a file that is not a regular one, and OSError or UnicodeDecodeError as reading does."""
    limit = bounds.max_bytes
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b""
    size = max(size, len(data))
    if size > limit:
        raise BoundError(f"{size:,} bytes; the bound is {limit:,} bytes ({limit / 2**20:g} MiB)")
    return data.decode("utf-8")


def load(text: str, bounds: Bounds) -> object:
    """``yaml.safe_load(text)`` within ``bounds`` (nodes and depth; the size is :func:`read_text`'s).
    Raises BoundError past a bound, yaml.YAMLError for what is not YAML."""
    loader = _BoundedLoader(text, bounds)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
