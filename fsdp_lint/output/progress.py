"""Progress of a long run on a terminal: ``N/TOTAL files`` on standard error, redrawn in
place, only when that stream is a terminal (nothing when it is piped or redirected), only
once the run has lasted ``delay`` seconds (short runs never flicker), and erased before the
report is printed."""

from __future__ import annotations

import time
from typing import Callable, Optional, TextIO

CLEAR = "\r\x1b[K"


class Progress:
    def __init__(
        self, total: int, stream: TextIO, delay: float = 0.5, interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total = total
        self.stream = stream
        self.delay = delay
        self.interval = interval
        self.clock = clock
        self.started = clock()
        self.drawn_at: Optional[float] = None
        try:
            self.enabled = total > 1 and stream.isatty()
        except (AttributeError, ValueError, OSError):
            self.enabled = False

    def update(self, done: int) -> None:
        """``done`` files of ``total`` are answered."""
        if not self.enabled:
            return
        now = self.clock()
        if now - self.started < self.delay:
            return
        if self.drawn_at is not None and now - self.drawn_at < self.interval and done < self.total:
            return
        self.stream.write(f"{CLEAR}{done}/{self.total} files checked")
        self.stream.flush()
        self.drawn_at = now

    def finish(self) -> None:
        """Erase the line, when one was drawn."""
        if self.drawn_at is not None:
            self.stream.write(CLEAR)
            self.stream.flush()
            self.drawn_at = None
