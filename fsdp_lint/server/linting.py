"""Linting one open document: which documents count, the file's settings, the engine.

A document is linted when it is Python source: language id ``python`` (or, without one,
a ``.py``/``.pyi``/``.pyw`` path).  Notebooks come as notebook documents (``notebooks``); a
``.ipynb`` or a notebook cell URI sent as a plain text document, and every other language,
are left alone.  The file's ``[tool.fsdp-lint]`` applies (select, ignore,
per-file-ignores, target-torch-version, exclude), found from the document's path; an
untitled document is linted with the configuration of the workspace folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import List, Optional, Type
from urllib.parse import urlparse

from fsdp_lint.check import Settings
from fsdp_lint.config import ConfigError
from fsdp_lint.diagnostics import INTERNAL_ERROR, SYNTAX_ERROR, Diagnostic, error_diagnostic
from fsdp_lint.engine import lint_text
from fsdp_lint.files import matches_any
from fsdp_lint.rules.base import Rule

PYTHON_SUFFIXES = (".py", ".pyi", ".pyw")
NOTEBOOK_SCHEMES = ("vscode-notebook-cell", "vscode-notebook")


def is_python_document(uri: str, language_id: Optional[str], path: str) -> bool:
    if urlparse(uri).scheme in NOTEBOOK_SCHEMES or path.endswith(".ipynb"):
        return False
    if language_id:
        return language_id.lower() == "python"
    return path.endswith(PYTHON_SUFFIXES)


def document_path(uri: str, fs_path: Optional[str], workspace_root: Optional[str]) -> str:
    """A file path for the configuration lookup: the file's own for ``file:`` URIs,
    otherwise the document's name inside the workspace folder."""
    if urlparse(uri).scheme == "file" and fs_path:
        return fs_path
    name = os.path.basename(urlparse(uri).path) or "untitled.py"
    return os.path.join(workspace_root or os.getcwd(), name)


@dataclass
class DocumentLint:
    """One lint of one version of a document; code actions and hover answer from it."""

    uri: str
    path: str
    version: Optional[int]
    text: str
    diagnostics: List[Diagnostic] = field(default_factory=list)
    rules: List[Type[Rule]] = field(default_factory=list)
    unsafe: bool = False
    launch: Optional[object] = None  # the project's FSDP launch of the file (``fsdp_lint.launch``)
    unused_noqa: bool = False  # the opt-in FSD800 runs on this file
    project: Optional[object] = None  # the project's helpers as the file imports them (``fsdp_lint.project``)
    config_error: Optional[str] = None
    excluded: bool = False
    generation: int = 0  # which reading of the settings it was linted with


def _excluded(path: str, settings: Settings) -> bool:
    config = settings.finder.for_file(path)
    patterns = list(config.exclude or []) + list(config.extend_exclude)
    if not patterns:
        return False
    rel = os.path.relpath(os.path.abspath(path), config.root)
    return matches_any(path if rel.startswith("..") else rel, patterns)


def lint_document(uri: str, path: str, version: Optional[int], text: str, settings: Optional[Settings],
                  settings_error: Optional[str] = None, parser=None) -> DocumentLint:
    """``parser``: the document's ``ParseCache.parse`` (re-parses only what an edit changed)."""
    result = DocumentLint(uri, path, version, text)
    if settings is None:
        result.config_error = settings_error or "no settings"
        return result
    try:
        if _excluded(path, settings):
            result.excluded = True
            return result
        result.rules = settings.rules_for(path)
        result.unsafe = settings.unsafe_for(path)
        result.launch = settings.launch_for(path)
        result.unused_noqa = settings.unused_noqa_for(path)
        result.project = settings.project_for(path)
    except ConfigError as exc:
        result.config_error = str(exc)
        return result
    try:
        result.diagnostics = lint_text(
            text, path, result.rules, parser, result.launch, unused_noqa=result.unused_noqa, project=result.project
        ).diagnostics
    except RecursionError:
        result.diagnostics = [
            error_diagnostic(SYNTAX_ERROR, path, "file too deeply nested to analyse, file not checked")
        ]
    except Exception as exc:  # noqa: BLE001 - the server outlives a bug in one rule or file
        result.diagnostics = [
            error_diagnostic(INTERNAL_ERROR, path, f"internal error: {type(exc).__name__}: {exc}; please report it")
        ]
    return result
