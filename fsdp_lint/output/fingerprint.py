"""A finding's fingerprint: its rule and the text of the flagged statement with the
whitespace folded, hashed.  It survives the statement moving to other lines (code added or
removed above it, a re-indent) and changes when the statement itself changes.  Used by
``--baseline`` and by the GitLab report (whose findings need a stable identity)."""

from __future__ import annotations

import hashlib
from typing import Dict, Optional

from fsdp_lint.diagnostics import Diagnostic
from fsdp_lint.notebook import cell_texts
from fsdp_lint.source import SourceError, line_starts, read_source


def statement_text(text: str, d: Diagnostic) -> str:
    """The flagged statement's rows (the finding's own rows when the statement's are not
    known), whitespace folded to single spaces."""
    first, last = d.statement_rows
    if not first:
        first, last = d.location.row, d.end_location.row
    starts = line_starts(text)
    first = max(1, min(first, len(starts)))
    last = max(first, min(last, len(starts)))
    end = starts[last] if last < len(starts) else len(text)
    return " ".join(text[starts[first - 1]:end].split())


def fingerprint(text: str, d: Diagnostic) -> str:
    digest = hashlib.sha256(f"{d.code}\0{statement_text(text, d)}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


class Texts:
    """The decoded text of each file a report names, read once (empty when unreadable).
    ``known`` holds texts already in memory (standard input, a notebook's joined cells)."""

    def __init__(self, known: Optional[Dict[str, str]] = None):
        self._texts: Dict[str, str] = dict(known or {})

    def __call__(self, path: str) -> str:
        if path not in self._texts:
            try:
                self._texts[path] = read_source(path).text
            except SourceError:
                self._texts[path] = ""
        return self._texts[path]

    def fingerprint(self, d: Diagnostic, path: Optional[str] = None) -> str:
        text = self(path or d.filename)
        if d.cell is not None:  # a notebook's finding: rows are its cell's
            text = dict(cell_texts(text)).get(d.cell, "")
        return fingerprint(text, d)
