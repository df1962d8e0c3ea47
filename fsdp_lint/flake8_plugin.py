"""flake8 plugin: a thin bridge over the same engine (lint only, no fixes).

The rules in force come from the same ``[tool.fsdp-lint]`` configuration as the CLI's (the
nearest ``pyproject.toml`` with the table above each file): select, extend-select,
ignore, per-file-ignores, target-torch-version.  flake8's own ``--select``, ``--ignore``,
``per-file-ignores`` and ``# noqa`` apply on top, and flake8 runs ``--jobs`` itself; this
class only turns the engine's findings into flake8's tuples (0-based column: flake8 adds
1).  A file libcst cannot parse yields no FSD finding (flake8 reports the syntax error
itself); an internal error in a rule is one FSD901 finding naming the rule; an invalid
configuration is one FSD902 finding that quotes the error.
"""

from __future__ import annotations

import ast
import os
from typing import Iterator, List, Tuple

from fsdp_lint import __version__
from fsdp_lint.check import Settings
from fsdp_lint.config import ConfigError
from fsdp_lint.engine import FileGate, lint_text

SKIPPED_CODES = frozenset({"FSD900", "FSD902"})  # flake8 reports syntax/decoding errors itself
_SETTINGS = None  # one per process: each pyproject.toml is read once, not once per file


def _settings():
    global _SETTINGS
    if _SETTINGS is None:
        _SETTINGS = Settings()
    return _SETTINGS


class Flake8Plugin:
    name = "fsdp-lint"
    version = __version__

    def __init__(self, tree, filename: str = "stdin", lines: List[str] = ()):
        self.tree = tree
        self.filename = filename
        self.lines = list(lines)

    def _path(self) -> str:
        """The file the configuration is looked up for (standard input: the working directory)."""
        if self.filename in ("stdin", "-", None):
            return os.path.join(os.getcwd(), "stdin.py")
        return self.filename

    def run(self) -> Iterator[Tuple[int, int, str, type]]:
        try:
            rules = _settings().rules_for(self._path())
            launch = _settings().launch_for(self._path())
            project = _settings().project_for(self._path())
        except ConfigError as exc:
            yield 1, 0, f"FSD902 invalid fsdp-lint configuration: {exc}", type(self)
            return
        text = "".join(self.lines)
        try:
            # flake8's own ``ast`` of these lines serves the screen: the file is parsed by libcst
            # only, and only when a rule can fire
            gate = FileGate(text, rules, launch, self.tree if isinstance(self.tree, ast.Module) else None, project)
            diagnostics = lint_text(text, self.filename, rules, launch=launch, gate=gate, project=project).diagnostics
        except RecursionError:
            return
        for d in diagnostics:
            if d.code in SKIPPED_CODES:
                continue
            yield d.location.row, d.location.column - 1, f"{d.code} {d.message}", type(self)
