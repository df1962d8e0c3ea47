"""The engine's findings as LSP diagnostics.

- ``code`` the rule's code, ``codeDescription`` its documentation page, ``source`` fsdp-lint;
- severity Warning for rule findings, Error for FSD900-FSD902 (the file was not checked) and
  for a configuration error;
- tag ``Unnecessary`` where the flagged code has no effect at all (a ``summon_full_params``
  that gathers nothing), so editors grey it out; no rule flags deprecated API;
- ``data`` carries the rule's name and the fix's safety, for clients that show them.
"""

from __future__ import annotations

from typing import List

from lsprotocol import types

from fsdp_lint.diagnostics import Diagnostic
from fsdp_lint.server.linting import DocumentLint
from fsdp_lint.server.text_index import TextIndex

SOURCE = "fsdp-lint"
# rules whose flagged code does nothing: FSD011 (FSDP1 summon on an FSDP2 module: a no-op),
# FSD012 (summon_full_params called but never entered: nothing is gathered)
UNNECESSARY = frozenset({"FSD011", "FSD012"})


def lsp_range(diagnostic: Diagnostic, index: TextIndex) -> types.Range:
    start = index.location(diagnostic.location.row, diagnostic.location.column)
    end = index.location(diagnostic.end_location.row, diagnostic.end_location.column)
    return types.Range(types.Position(*start), types.Position(*max(start, end)))


def to_lsp(diagnostic: Diagnostic, index: TextIndex) -> types.Diagnostic:
    internal = diagnostic.code.startswith("FSD9")
    data = {"name": diagnostic.name}
    if diagnostic.fix is not None:
        data["fix"] = diagnostic.fix.applicability
    return types.Diagnostic(
        range=lsp_range(diagnostic, index),
        message=diagnostic.message,
        severity=types.DiagnosticSeverity.Error if internal else types.DiagnosticSeverity.Warning,
        code=diagnostic.code,
        code_description=types.CodeDescription(href=diagnostic.url) if diagnostic.url else None,
        source=SOURCE,
        tags=[types.DiagnosticTag.Unnecessary] if diagnostic.code in UNNECESSARY else None,
        data=data,
    )


def config_error_diagnostic(message: str) -> types.Diagnostic:
    start = types.Position(0, 0)
    return types.Diagnostic(
        range=types.Range(start, start),
        message=f"fsdp-lint configuration error, file not checked: {message}",
        severity=types.DiagnosticSeverity.Error,
        source=SOURCE,
    )


def document_diagnostics(lint: DocumentLint, index: TextIndex) -> List[types.Diagnostic]:
    if lint.config_error:
        return [config_error_diagnostic(lint.config_error)]
    return [to_lsp(diagnostic, index) for diagnostic in lint.diagnostics]
