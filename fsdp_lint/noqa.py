"""Suppression comments: ``# noqa``, ``# noqa: FSD001, summon-in-training-loop`` on any
line of the flagged statement, and ``# fsdp-lint: noqa`` on a line of its own for a file.

Only real comments count (found with the tokenizer), never text inside strings.

Also the text side of ``--add-noqa`` (``add_noqa``: a ``# noqa: FSDxxx`` at the end of a
line of each flagged statement, merged into a noqa comment already there) and of the
opt-in unused-noqa check (``Directive``: where a comment's codes stand, so a fix can drop
the unused ones).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[\w\-]+(?:[,\s]+[\w\-]+)*))?", re.I)
_FILE_NOQA = re.compile(r"^\s*#\s*fsdp-lint\s*:\s*noqa\s*$", re.I)
# what a code in a noqa list looks like (flake8's and ruff's ``ABC123``) or a rule name
# (kebab-case): the list ends at the first word that is neither (free text after it)
_CODE_LIKE = re.compile(r"^(?:[A-Za-z]+[0-9]+|[a-z][a-z0-9]*(?:-[a-z0-9]+)+)$")
_WORD = re.compile(r"[\w\-]+")
_NEWLINE = re.compile(r"\r\n|\r|\n")

ALL = frozenset({"*"})


def _comments(text: str) -> Dict[int, Tuple[int, str]]:
    """Row -> (column, comment text) of each comment."""
    comments: Dict[int, Tuple[int, str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = (token.start[1], token.string)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # libcst accepted what the tokenizer rejects: fall back to a line scan.
        comments = {}
        for row, line in enumerate(_NEWLINE.split(text), start=1):
            if "#" in line:
                comments[row] = (line.index("#"), line[line.index("#"):])
    return comments


@dataclass(frozen=True)
class Directive:
    """A ``# noqa: CODES`` comment: its row, the columns (0-based, in the line) of the
    directive and of its code list, and the codes as written."""

    row: int
    start: int  # the directive's '#'
    end: int  # just after the code list
    codes_start: int
    codes: Tuple[str, ...]  # the code-like words, as written (free text after them excluded)
    tail: str  # the rest of the comment after the code list


def _directive(row: int, column: int, comment: str) -> Optional[Directive]:
    match = _NOQA.search(comment)
    if not match or not match.group("codes"):
        return None
    base = column + match.start("codes")
    codes: List[str] = []
    end = match.start("codes")
    for word in _WORD.finditer(match.group("codes")):
        if not _CODE_LIKE.match(word.group()):
            break
        codes.append(word.group())
        end = match.start("codes") + word.end()
    if not codes:
        return None
    return Directive(row, column + match.start(), column + end, base, tuple(codes), comment[end:])


class Suppressions:
    def __init__(self, text: str):
        self._rows: Dict[int, FrozenSet[str]] = {}
        self.directives: Dict[int, Directive] = {}
        self.whole_file = False
        self.used: Set[Tuple[int, str]] = set()  # (row, CODE as written, upper-cased) that suppressed a finding
        if "noqa" not in text.lower():
            return
        for row, (column, comment) in _comments(text).items():
            if _FILE_NOQA.match(comment):
                self.whole_file = True
                continue
            match = _NOQA.search(comment)
            if not match:
                continue
            codes = match.group("codes")
            if codes:
                self._rows[row] = frozenset(c.upper() for c in re.split(r"[,\s]+", codes) if c)
                directive = _directive(row, column, comment)
                if directive is not None:
                    self.directives[row] = directive
            else:
                self._rows[row] = ALL

    def marks_any(self, first_row: int, last_row: int) -> bool:
        """A suppression comment (for any code) sits on one of these rows: a fix never edits
        such a line, even for a rule the comment does not name (``# noqa: FSD001`` says how
        the user wants that call left)."""
        return self.whole_file or any(row in self._rows for row in range(first_row, last_row + 1))

    def suppresses(self, code: str, name: str, first_row: int, last_row: int) -> bool:
        """Whether a comment suppresses the finding; every code of a comment on these rows
        that names it counts as used (``used``)."""
        if self.whole_file:
            return True
        found = False
        for row in range(first_row, last_row + 1):
            codes: Optional[FrozenSet[str]] = self._rows.get(row)
            if codes is None:
                continue
            if codes is ALL:
                found = True
                continue
            for key in (code.upper(), name.upper()):
                if key in codes:
                    self.used.add((row, key))
                    found = True
        return found


def _line_spans(text: str) -> List[Tuple[int, int]]:
    """(start offset, end offset before the newline) of each line."""
    spans = []
    pos = 0
    for match in _NEWLINE.finditer(text):
        spans.append((pos, match.start()))
        pos = match.end()
    spans.append((pos, len(text)))
    return spans


def _closed_rows(text: str) -> Optional[Set[int]]:
    """Rows whose end is the end of a logical or physical line outside any string: a
    comment may be appended there (not inside a multi-line string, not after a ``\\``
    continuation).  None when the tokenizer rejects the text."""
    inside: Set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING or getattr(tokenize, "FSTRING_MIDDLE", -1) == token.type:
                for row in range(token.start[0], token.end[0]):
                    inside.add(row)  # the string goes on past this row's end
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    rows = set()
    for row, (start, end) in enumerate(_line_spans(text), start=1):
        if row in inside or text[start:end].rstrip().endswith("\\"):
            continue
        rows.add(row)
    return rows


def add_noqa(text: str, findings: Iterable[Tuple[str, int, int, int]]) -> Tuple[str, int]:
    """``text`` with a ``# noqa: CODE`` for each finding ``(code, row, first_row,
    last_row)``: merged into a noqa code list already on one of the statement's rows, else
    appended to the finding's row (or the first row of the statement where a comment can
    go).  Existing codes are kept; a code already listed is not added again.  Returns the
    new text and how many rows got a directive or a code."""
    wanted: Dict[int, List[str]] = {}
    suppressions = Suppressions(text)
    closed = _closed_rows(text)
    if closed is None:
        return text, 0
    comments = _comments(text)
    for code, row, first, last in findings:
        rows = [r for r in range(first, last + 1) if r in suppressions.directives]
        if not rows:
            candidates = [row] + [r for r in range(first, last + 1) if r != row]
            rows = [r for r in candidates if r in closed]
        if not rows:
            continue
        target = rows[0]
        codes = wanted.setdefault(target, [])
        if code not in codes:
            codes.append(code)
    spans = _line_spans(text)
    edits: List[Tuple[int, int, str]] = []
    changed = 0
    for row, codes in wanted.items():
        start, end = spans[row - 1]
        directive = suppressions.directives.get(row)
        if directive is not None:
            have = {c.upper() for c in directive.codes}
            new = [c for c in codes if c.upper() not in have]
            if not new:
                continue
            edits.append((start + directive.end, start + directive.end, ", " + ", ".join(new)))
        else:
            line = text[start:end]
            if row in comments and _NOQA.search(comments[row][1]):
                continue  # a bare noqa: it suppresses everything already
            stripped = line.rstrip()
            edits.append((start + len(stripped), end, f"  # noqa: {', '.join(codes)}"))
        changed += 1
    for begin, finish, content in sorted(edits, reverse=True):
        text = text[:begin] + content + text[finish:]
    return text, changed


def without_codes(directive: Directive, drop: Sequence[str]) -> Optional[Tuple[int, int, str]]:
    """The edit (columns in the directive's row, replacement) that removes ``drop`` from
    the directive's code list; the whole directive when no code is left and nothing
    follows it.  None where that would leave free text after an empty list."""
    dropped = {c.upper() for c in drop}
    kept = [c for c in directive.codes if c.upper() not in dropped]
    if kept:
        return directive.codes_start, directive.end, ", ".join(kept)
    if directive.tail.strip():
        return None
    return directive.start, directive.end, ""
