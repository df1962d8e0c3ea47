"""``full``: each finding with its source lines, a caret under the span, and the fix as a
diff with its safety (ruff's ``full`` format)."""

from __future__ import annotations

import difflib
from typing import Dict, List

from fsdp_lint.diagnostics import Diagnostic
from fsdp_lint.output.text import line as text_line
from fsdp_lint.source import SourceError, read_source


def _source(path: str, cache: Dict[str, str]) -> str:
    if path not in cache:
        try:
            cache[path] = read_source(path).text
        except SourceError:
            cache[path] = ""
    return cache[path]


def render(diagnostics: List[Diagnostic], sources: Dict[str, str] = None, **_context) -> str:
    sources = dict(sources or {})
    out = []
    for d in diagnostics:
        out.append(text_line(d))
        text = _source(d.filename, sources) if d.cell is None else ""  # a notebook cell: the line only
        lines = text.splitlines()
        if 0 < d.location.row <= len(lines):
            width = len(str(d.end_location.row))
            last = min(d.end_location.row, d.location.row + 4, len(lines))
            for row in range(d.location.row, last + 1):
                out.append(f"  {row:>{width}} | {lines[row - 1]}")
            start = d.location.column - 1
            end = d.end_location.column - 1 if d.end_location.row == d.location.row else len(lines[d.location.row - 1])
            out.append(f"  {'':>{width}} | {' ' * start}{'^' * max(1, end - start)}")
        if d.fix is not None:
            out.append(f"  = fix ({d.fix.applicability}): {d.fix.message}")
            if text:
                fixed = d.fix.applied_to(text)
                diff = difflib.unified_diff(text.splitlines(), fixed.splitlines(), lineterm="", n=1)
                out.extend("    " + line for line in list(diff)[2:])
        out.append("")
    return "\n".join(out) + ("\n" if out else "")
