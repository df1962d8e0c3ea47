"""Stopping a run on SIGINT (Ctrl-C) or SIGTERM: cleanly, at once, whatever the timing.

The main process turns either signal into ``Interrupted`` (a ``KeyboardInterrupt``), stops
its worker processes and exits with 128 + the signal's number (130 for Ctrl-C, 143 for
SIGTERM: what a shell reports for a process the signal killed).  Workers never handle a
signal themselves: they ignore SIGINT (Ctrl-C reaches the whole process group, and the
main process decides) and die on SIGTERM, which is how the main process stops them.

Forks happen with both signals blocked (``blocked``), so a worker that has not yet set its
own handlers cannot receive one and print a ``KeyboardInterrupt`` traceback; a file write
runs with them blocked too, so it completes or never starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_CAN_MASK = hasattr(signal, "pthread_sigmask")


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop by ``signum``."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_received: Optional[int] = None


def _handler(signum, _frame) -> None:
    global _received
    if _received is not None:
        # a second signal while the first one is being handled: stop now
        os._exit(128 + _received)
    _received = signum
    raise Interrupted(signum)


@contextlib.contextmanager
def handlers() -> Iterator[None]:
    """Within: SIGINT and SIGTERM raise ``Interrupted`` in the main thread."""
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received = None
    previous = {signum: signal.signal(signum, _handler) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def blocked() -> Iterator[None]:
    """Within: SIGINT and SIGTERM wait (they are delivered on leaving); a child forked
    here starts with them blocked."""
    if not _CAN_MASK:
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def received() -> Optional[int]:
    """The signal that stopped the last run under ``handlers``, or None."""
    return _received


def worker_signals() -> None:
    """In a worker process: ignore SIGINT, die on SIGTERM, then accept signals."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _CAN_MASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
