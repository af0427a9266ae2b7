"""Ctrl-C and SIGTERM as one clean stop: the first raises KeyboardInterrupt, later ones are ignored.

Used by the power-cut check on both sides (``disklab powercut`` and the host's
``simulate check``), so that the cleanup after the first signal is not cut short.
"""

from __future__ import annotations

import contextlib
import signal
import threading


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interrupt_once(signals: tuple[signal.Signals, ...]):
    """Within the block, the first of ``signals`` raises KeyboardInterrupt; later ones are ignored.

    The previous handlers are restored on exit. Outside the main thread it does nothing.
    """
    if not in_main_thread():
        yield
        return

    def handler(signum, frame):
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
