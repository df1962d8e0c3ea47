"""ruff-compatible JSON: a list of findings, rows and columns 1-based."""

from __future__ import annotations

import json
from typing import List

from fsdp_lint.diagnostics import Diagnostic, Location


def _loc(loc: Location) -> dict:
    return {"row": loc.row, "column": loc.column}


def as_dict(d: Diagnostic) -> dict:
    fix = None
    if d.fix is not None:
        fix = {
            "applicability": d.fix.applicability,
            "message": d.fix.message,
            "edits": [
                {"content": e.content, "location": _loc(e.location), "end_location": _loc(e.end_location)}
                for e in d.fix.edits
            ],
        }
    return {
        "code": d.code,
        "name": d.name,
        "message": d.message,
        "filename": d.filename,
        "location": _loc(d.location),
        "end_location": _loc(d.end_location),
        "fix": fix,
        "url": d.url,
        "cell": d.cell,  # ruff's: the notebook cell (1-based) the rows belong to, null for other files
    }


def render(diagnostics: List[Diagnostic], **_context) -> str:
    return json.dumps([as_dict(d) for d in diagnostics], indent=2) + "\n"
