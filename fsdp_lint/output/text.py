"""``path:row:col: FSD001 [*] message`` (``[*]``: a safe fix exists), as ruff prints."""

from __future__ import annotations

from typing import List

from fsdp_lint.diagnostics import SAFE, Diagnostic


def line(d: Diagnostic) -> str:
    marker = " [*]" if d.fix is not None and d.fix.applicability == SAFE else ""
    cell = f"cell {d.cell}:" if d.cell is not None else ""  # ruff's notebook form
    return f"{d.filename}:{cell}{d.location.row}:{d.location.column}: {d.code}{marker} {d.message}"


def render(diagnostics: List[Diagnostic], **_context) -> str:
    return "".join(line(d) + "\n" for d in diagnostics)
