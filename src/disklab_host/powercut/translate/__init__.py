"""Turn strace's calls into Calls with Ops, one module per family of system calls.

Modelled: each process's file table (threads share it; a forked child starts with a copy, clone(2)), one
working directory (chdir is refused). Calls on the directory that the model cannot place (a shared writable
mmap, a renamed directory, links) are crash points with no effect, kept in ``unplaced`` with why.
"""

from .copies import Copies
from .names import Names
from .opens import Opens
from .syncs import Syncs


class Translator(Opens, Copies, Syncs, Names):
    """Every family's calls on one state (:class:`state.State`), dispatched by :meth:`State.handle`."""
