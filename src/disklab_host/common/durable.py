"""The durable sync call on each OS, and the fcntl syncs macOS adds to fsync.

On Linux ``os.fsync`` (fsync(2)) writes the file's dirty pages to the drive
and, on normal filesystem setups, sends the drive a cache flush, so it is the
durable call. On macOS plain fsync stops at the drive's write cache (Apple's
fsync(2) man page); only ``fcntl(fd, F_FULLFSYNC)`` asks the drive to flush
that cache to flash (fcntl(2)), so F_FULLFSYNC is the durable call there.
``F_BARRIERFSYNC`` (fcntl command 85) orders writes without making them
durable. This module holds those facts once, for every step that syncs
(fsync_bench, big_write): :func:`durable_sync` gives the call, :class:`FcntlSync`
runs an fcntl sync with its fallback rule. The fcntl paths have been run only
against a test double on Linux, not on real macOS hardware
(:data:`NOT_ON_REAL_HARDWARE`). Standard library only.
"""

from __future__ import annotations

import errno
import os

try:
    import fcntl
except ImportError:  # not a Unix host
    fcntl = None

# errnos with which an fcntl sync says "this volume cannot do it" (macOS fcntl(2)).
REFUSAL_ERRNOS = {errno.ENOTTY, errno.ENOTSUP, errno.EOPNOTSUPP}
# F_BARRIERFSYNC in macOS <sys/fcntl.h>; Python's fcntl module does not name it on every version.
F_BARRIERFSYNC_DARWIN = 85
NOT_ON_REAL_HARDWARE = (
    "not yet validated on real macOS hardware: before this run, disklab's fcntl path had been run only "
    "against a test double on Linux"
)
# The name a result records for each durable call (fsync_bench's "call" names the same calls).
FSYNC_CALL = "fsync"
FULLFSYNC_CALL = "fcntl F_FULLFSYNC"
DURABLE_CALLS = (FSYNC_CALL, FULLFSYNC_CALL)


def fullfsync_command(system: str, fcntl_mod) -> tuple[int, str] | None:
    """(F_FULLFSYNC's fcntl command, where the number came from), or None when this host has none.

    Python's fcntl module names F_FULLFSYNC on macOS only.
    """
    if fcntl_mod is not None and hasattr(fcntl_mod, "F_FULLFSYNC"):
        return fcntl_mod.F_FULLFSYNC, "fcntl.F_FULLFSYNC"
    return None


def barrierfsync_command(system: str, fcntl_mod) -> tuple[int, str] | None:
    """(F_BARRIERFSYNC's fcntl command, where the number came from), or None when this host has none.

    ``fcntl.F_BARRIERFSYNC`` when the module has it; else 85 on Darwin, the
    value in macOS <sys/fcntl.h> (the module lacks the name on older Pythons);
    else None: it is a macOS call.
    """
    if fcntl_mod is None:
        return None
    if hasattr(fcntl_mod, "F_BARRIERFSYNC"):
        return fcntl_mod.F_BARRIERFSYNC, "fcntl.F_BARRIERFSYNC"
    if system == "Darwin":
        return F_BARRIERFSYNC_DARWIN, "85, its value in macOS <sys/fcntl.h>: this fcntl module lacks the name"
    return None


def errno_name(code: int | None) -> str:
    """errno's symbolic name (``"EIO"``), its number as text when unknown, ``"none"`` without one."""
    if code is None:
        return "none"
    return errno.errorcode.get(code, str(code))


class FcntlSync:
    """``fcntl(fd, command)``, falling back to ``os.fsync`` after the first error.

    Any OSError from the fcntl call is recorded in ``fallback`` (``{"to",
    "errno" (its name, e.g. "ENOTTY"), "error" (the message), "after_calls",
    "kind": "refusal" | "error"}``; kind is refusal for the errnos in
    REFUSAL_ERRNOS) and that call and every later one use ``os.fsync``; the
    fcntl call is never retried (the lesson, Break It 3, fsyncgate). An error
    from ``os.fsync`` propagates. ``fcntl_mod`` is injectable for tests.
    ``call`` is the name a result records, e.g. ``"fcntl F_FULLFSYNC"``.
    """

    def __init__(self, fcntl_mod, name: str, command: int, source: str | None = None) -> None:
        self._fcntl = fcntl_mod
        self.name = name
        self.call = f"fcntl {name}"
        self.command = command
        self.source = source
        self.calls = 0
        self.fallback: dict | None = None

    def __call__(self, fd: int) -> None:
        if self.fallback is None:
            try:
                self._fcntl.fcntl(fd, self.command)
                self.calls += 1
                return
            except OSError as exc:
                self.fallback = {
                    "to": "os.fsync",
                    "errno": errno_name(exc.errno),
                    "error": str(exc),
                    "after_calls": self.calls,
                    "kind": "refusal" if exc.errno in REFUSAL_ERRNOS else "error",
                }
        os.fsync(fd)


class Fsync:
    """``os.fsync(fd)`` (fsync(2)) with :class:`FcntlSync`'s attributes: the durable call off macOS.

    ``fallback`` is always None; an error from ``os.fsync`` propagates (a failed
    fsync is never retried).
    """

    name = "fsync"
    call = FSYNC_CALL

    def __init__(self) -> None:
        self.calls = 0
        self.fallback: dict | None = None

    def __call__(self, fd: int) -> None:
        os.fsync(fd)
        self.calls += 1


def plain_fsync_is_durable(system: str) -> bool:
    """Whether plain fsync reaches stable storage on ``system``: False on Darwin, True elsewhere.

    Source: Apple's fsync(2) man page (macOS fsync stops at the drive's cache);
    Linux fsync(2). An OS disklab does not know keeps fsync as its durable call.
    """
    return system != "Darwin"


def durable_sync(system: str, fcntl_mod=fcntl) -> Fsync | FcntlSync:
    """The sync call that makes a file's data durable on ``system``, as a callable(fd).

    Darwin: :class:`FcntlSync` running F_FULLFSYNC (its fallback to ``os.fsync``
    is recorded, never hidden); any other OS: :class:`Fsync`. Raises ValueError
    on Darwin when ``fcntl_mod`` has no F_FULLFSYNC, since plain fsync is not
    durable there and must not stand in for it silently.
    """
    if plain_fsync_is_durable(system):
        return Fsync()
    found = fullfsync_command(system, fcntl_mod)
    if found is None:
        raise ValueError(
            f"fcntl has no F_FULLFSYNC on {system}: the durable call there is fcntl(fd, F_FULLFSYNC), "
            "and plain fsync stops at the drive's cache"
        )
    return FcntlSync(fcntl_mod, "F_FULLFSYNC", found[0], found[1])
