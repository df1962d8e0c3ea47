"""The garbage collector's settings for a lint run (``fsdp-lint check``).

Parsing makes many short-lived objects (``ast`` and libcst nodes), and with CPython's
default thresholds (700, 10, 10) the collector runs so often that it took about a quarter
of a cold run's CPU time on the ML-library corpus (measured: ``docs/benchmark.md``).  A
lint run raises the first threshold, and freezes what is alive when it starts (the
imported modules), so that each full collection walks only what the run itself made.
Objects are still collected: only less often, at a cost of a few MiB of peak memory.
Only the ``fsdp-lint`` command sets this (``cli.console``); the flake8 plugin and the
language server run inside processes whose collector is not ours to tune."""

from __future__ import annotations

import gc

# the youngest generation is collected after this many allocations (CPython's default: 700)
FIRST_THRESHOLD = 20_000


def tune_for_a_run() -> None:
    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(FIRST_THRESHOLD, second, third)
