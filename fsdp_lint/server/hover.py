"""Hover on a flagged range: the rule's page as ``fsdp-lint rule CODE`` prints it (What it
does, Why is this bad?, Example, Use instead, Known problems, Fix safety, and the verifier's recorded
results), rendered by the same function (``fsdp_lint.docs.render_for_user``), the installed torch included."""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from lsprotocol import types

from fsdp_lint.docs import render_for_user
from fsdp_lint.rules import BY_CODE
from fsdp_lint.server.actions import span
from fsdp_lint.server.linting import DocumentLint
from fsdp_lint.server.lsp_diagnostics import lsp_range
from fsdp_lint.server.text_index import TextIndex


@lru_cache(maxsize=None)
def rule_page(code: str) -> Optional[str]:
    rule = BY_CODE.get(code)
    return render_for_user(rule) if rule is not None else None


def hover(lint: DocumentLint, encoding: str, line: int, character: int) -> Optional[types.Hover]:
    index = TextIndex(lint.text, encoding)
    offset = index.offset(line, character)
    pages, first = [], None
    for diagnostic in lint.diagnostics:
        begin, end = span(diagnostic, index)
        page = rule_page(diagnostic.code)
        if begin <= offset <= end and page is not None and page not in pages:
            pages.append(page)
            first = first or diagnostic
    if not pages:
        return None
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n---\n\n".join(pages)),
        range=lsp_range(first, index),
    )
