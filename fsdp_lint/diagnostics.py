"""The data that flows out of the engine: findings, fixes, text edits, positions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

SAFE = "safe"
UNSAFE = "unsafe"


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
