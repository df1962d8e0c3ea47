"""Suppression comments: ``# noqa``, ``# noqa: FSD001, summon-in-training-loop`` on any
line of the flagged statement, and ``# fsdp-lint: noqa`` on a line of its own for a file.

Only real comments count (found with the tokenizer), never text inside strings.
"""

from __future__ import annotations

import io
import re
import tokenize
from typing import Dict, FrozenSet, Optional

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[\w\-]+(?:[,\s]+[\w\-]+)*))?", re.I)
_FILE_NOQA = re.compile(r"^\s*#\s*fsdp-lint\s*:\s*noqa\s*$", re.I)

ALL = frozenset({"*"})


def _comments(text: str) -> Dict[int, str]:
    comments: Dict[int, str] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # libcst accepted what the tokenizer rejects: fall back to a line scan.
        for row, line in enumerate(re.split(r"\r\n|\r|\n", text), start=1):
            if "#" in line:
                comments[row] = line[line.index("#"):]
    return comments


class Suppressions:
    def __init__(self, text: str):
        self._rows: Dict[int, FrozenSet[str]] = {}
        self.whole_file = False
        if "noqa" not in text.lower():
            return
        for row, comment in _comments(text).items():
            if _FILE_NOQA.match(comment):
                self.whole_file = True
                continue
            match = _NOQA.search(comment)
            if not match:
                continue
            codes = match.group("codes")
            if codes:
                self._rows[row] = frozenset(c.upper() for c in re.split(r"[,\s]+", codes) if c)
            else:
                self._rows[row] = ALL

    def marks_any(self, first_row: int, last_row: int) -> bool:
        """A suppression comment (for any code) sits on one of these rows: a fix never edits
        such a line, even for a rule the comment does not name (``# noqa: FSD001`` says how
        the user wants that call left)."""
        return self.whole_file or any(row in self._rows for row in range(first_row, last_row + 1))

    def suppresses(self, code: str, name: str, first_row: int, last_row: int) -> bool:
        if self.whole_file:
            return True
        for row in range(first_row, last_row + 1):
            codes: Optional[FrozenSet[str]] = self._rows.get(row)
            if codes is None:
                continue
            if codes is ALL or code.upper() in codes or name.upper() in codes:
                return True
        return False
