"""The data that flows out of the engine: findings, fixes, text edits, positions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

SAFE = "safe"
UNSAFE = "unsafe"

# The codes of what the engine says about a file rather than about a rule's hazard: kept
# with the diagnostics that carry them, so a format renders them without the engine.
SYNTAX_ERROR = ("FSD900", "syntax-error")
INTERNAL_ERROR = ("FSD901", "internal-error")
IO_ERROR = ("FSD902", "io-error")
# opt-in (ruff's RUF100): FSD codes of a noqa comment that suppress nothing; selected only
# by its code, its name or a prefix longer than ``FSD`` (``rules.OPT_IN``)
UNUSED_NOQA = ("FSD800", "unused-noqa")
# every code above with its name, in the order formats list them
ENGINE_CODES = (SYNTAX_ERROR, INTERNAL_ERROR, IO_ERROR)


@dataclass(frozen=True, order=True)
class Location:
    """1-based row, 1-based column (ruff's JSON convention)."""

    row: int
    column: int


@dataclass(frozen=True)
class Edit:
    content: str
    location: Location
    end_location: Location
    start_offset: int  # character offsets into the decoded text
    end_offset: int


@dataclass(frozen=True)
class Fix:
    applicability: str  # SAFE or UNSAFE
    message: str
    edits: Tuple[Edit, ...]

    def applied_to(self, text: str) -> str:
        """``text`` (the decoded file the edits were made for) with this fix's edits."""
        return apply_edits(text, self.edits)


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """``text`` with non-overlapping ``edits`` applied (last first, so offsets hold)."""
    for edit in sorted(edits, key=lambda e: e.start_offset, reverse=True):
        text = text[: edit.start_offset] + edit.content + text[edit.end_offset :]
    return text


@dataclass
class Diagnostic:
    code: str
    name: str
    message: str
    filename: str
    location: Location
    end_location: Location
    fix: Optional[Fix] = None
    url: Optional[str] = None
    # rows of the flagged statement: a noqa comment on any of them suppresses the finding
    statement_rows: Tuple[int, int] = (0, 0)
    extra: dict = field(default_factory=dict)
    # a notebook's cell (1-based, as the notebook lists its cells): rows are then the cell's
    cell: Optional[int] = None

    def sort_key(self):
        return (self.filename, self.cell or 0, self.location.row, self.location.column, self.code)


def error_diagnostic(kind, filename: str, message: str, row: int = 1, column: int = 1) -> Diagnostic:
    """A diagnostic of one of the engine's own codes (``SYNTAX_ERROR``...) at ``row``."""
    code, name = kind
    loc = Location(row, column)
    return Diagnostic(code, name, message, filename, loc, loc, statement_rows=(row, row))
