"""The ``check`` command: lint (and optionally fix) each file, collect, report, exit code.

Each file is processed independently by ``process_file`` (read once, lint or fix, write
atomically); one bad file yields a diagnostic and the run goes on with the others.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Type

from fsdp_lint.diagnostics import Diagnostic
from fsdp_lint.engine import INTERNAL_ERROR, IO_ERROR, error_diagnostic, lint_text
from fsdp_lint.fixer import fix_text
from fsdp_lint.rules.base import Rule
from fsdp_lint.source import FileChangedError, SourceError, SourceFile, decode_source, read_source, write_atomic


@dataclass
class Settings:
    rules: Sequence[Type[Rule]]
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False


@dataclass
class FileReport:
    path: str
    diagnostics: List[Diagnostic] = field(default_factory=list)
    fixed: int = 0
    diff: str = ""
    new_text: Optional[str] = None  # the fixed text (stdin mode prints it)


def _diff(path: str, old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=path, tofile=path
        )
    )


def process_source(source: SourceFile, settings: Settings, write: bool = True) -> FileReport:
    path = source.path
    report = FileReport(path)
    try:
        if not (settings.fix or settings.diff):
            report.diagnostics = lint_text(source.text, path, settings.rules).diagnostics
            return report
        outcome = fix_text(source.text, path, settings.rules, settings.unsafe_fixes)
        report.diagnostics = outcome.diagnostics
        if outcome.text == source.text:
            return report
        report.fixed = outcome.applied
        report.new_text = outcome.text
        if settings.diff:
            report.diff = _diff(path, source.text, outcome.text)
        elif write:
            try:
                write_atomic(source, outcome.text)
            except FileChangedError as exc:
                report.fixed = 0
                report.diagnostics.append(error_diagnostic(IO_ERROR, path, str(exc)))
            except OSError as exc:
                report.fixed = 0
                report.diagnostics.append(
                    error_diagnostic(IO_ERROR, path, f"cannot write fixed file: {exc.strerror or exc}")
                )
    except RecursionError:
        report.diagnostics = [
            error_diagnostic(("FSD900", "syntax-error"), path, "file too deeply nested to analyse, file not checked")
        ]
    except Exception as exc:  # noqa: BLE001 - never abort the run for one file
        report.diagnostics = [
            error_diagnostic(INTERNAL_ERROR, path, f"internal error: {type(exc).__name__}: {exc}; please report it")
        ]
    return report


def process_file(path: str, settings: Settings) -> FileReport:
    try:
        source = read_source(path)
    except SourceError as exc:
        return FileReport(path, [error_diagnostic(IO_ERROR, path, str(exc), exc.row, exc.column)])
    return process_source(source, settings)


def process_stdin(data: bytes, filename: str, settings: Settings) -> FileReport:
    try:
        source = decode_source(data, filename)
    except SourceError as exc:
        return FileReport(filename, [error_diagnostic(IO_ERROR, filename, str(exc), exc.row, exc.column)])
    return process_source(source, settings, write=False)


def exit_code(diagnostics: Sequence[Diagnostic], fixed: int, diff: bool) -> int:
    if any(d.code == INTERNAL_ERROR[0] for d in diagnostics):
        return 2
    if diagnostics:
        return 1
    if diff and fixed:
        return 1
    return 0


def display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel
