"""flake8 plugin: a thin bridge over the same engine (lint only, no fixes).

flake8 selects, ignores, applies ``# noqa`` and runs ``--jobs`` itself; this class only
turns the engine's findings into flake8's tuples (0-based column: flake8 adds 1).  A file
libcst cannot parse yields no FSD finding (flake8 reports the syntax error itself); an
internal error in a rule is one FSD901 finding naming the rule.
"""

from __future__ import annotations

from typing import Iterator, List, Tuple

from fsdp_lint import __version__

SKIPPED_CODES = frozenset({"FSD900", "FSD902"})  # flake8 reports syntax/decoding errors itself


class Flake8Plugin:
    name = "fsdp-lint"
    version = __version__

    def __init__(self, tree, filename: str = "stdin", lines: List[str] = ()):
        self.filename = filename
        self.lines = list(lines)

    def run(self) -> Iterator[Tuple[int, int, str, type]]:
        from fsdp_lint.engine import lint_text
        from fsdp_lint.rules import ALL_RULES

        text = "".join(self.lines)
        try:
            diagnostics = lint_text(text, self.filename, ALL_RULES).diagnostics
        except RecursionError:
            return
        for d in diagnostics:
            if d.code in SKIPPED_CODES:
                continue
            yield d.location.row, d.location.column - 1, f"{d.code} {d.message}", type(self)
