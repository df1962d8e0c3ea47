"""Positions in a document's text as the editor counts them.

The engine reports 1-based rows and 1-based columns in code points, with lines broken at
``\\n``, ``\\r\\n`` and ``\\r`` (as libcst and editors count them; ``str.splitlines`` would
also break at form feeds and ``\\u2028``).  LSP positions are 0-based and count columns in
the encoding negotiated at initialize: UTF-16 code units unless the client offers UTF-8 or
UTF-32.
"""

from __future__ import annotations

from typing import List

from fsdp_lint.source import line_starts

UTF8 = "utf-8"
UTF16 = "utf-16"
UTF32 = "utf-32"


def _units(char: str, encoding: str) -> int:
    code = ord(char)
    if encoding == UTF8:
        return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    if encoding == UTF16:
        return 2 if code > 0xFFFF else 1
    return 1


class TextIndex:
    """Converts between character offsets into ``text`` and (line, character) pairs in
    the client's units."""

    def __init__(self, text: str, encoding: str = UTF16):
        self.text = text
        self.encoding = encoding
        self.starts: List[int] = line_starts(text)

    def _line_bounds(self, line: int):
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        body = self.text[start:end]
        return start, start + len(body.rstrip("\r\n"))

    def position(self, offset: int):
        """(line, character) of a character offset, both 0-based, character in client units."""
        offset = max(0, min(offset, len(self.text)))
        line = self._line_of(offset)
        start, _ = self._line_bounds(line)
        return line, self._count(self.text[start:offset])

    def location(self, row: int, column: int):
        """(line, character) of the engine's 1-based row and code-point column, clamped to
        the text (an error diagnostic may name a row past the end)."""
        line = max(0, min(row - 1, len(self.starts) - 1))
        start, end = self._line_bounds(line)
        offset = min(start + max(0, column - 1), end)
        return line, self._count(self.text[start:offset])

    def location_offset(self, row: int, column: int) -> int:
        """The character offset of the engine's 1-based row and code-point column."""
        row = max(1, min(row, len(self.starts)))
        return min(self.starts[row - 1] + max(0, column - 1), len(self.text))

    def offset(self, line: int, character: int) -> int:
        """The character offset of a client position; past the end of a line means its end."""
        if line >= len(self.starts):
            return len(self.text)
        start, end = self._line_bounds(max(0, line))
        units = 0
        offset = start
        while offset < end and units < character:
            units += _units(self.text[offset], self.encoding)
            offset += 1
        return offset

    def end(self):
        return self.position(len(self.text))

    def line_end_offset(self, row: int) -> int:
        """Offset just before the line break of the 1-based ``row``."""
        return self._line_bounds(row - 1)[1]

    def _count(self, chars: str) -> int:
        if self.encoding == UTF32 or chars.isascii():
            return len(chars)
        return sum(_units(char, self.encoding) for char in chars)

    def _line_of(self, offset: int) -> int:
        low, high = 0, len(self.starts) - 1
        while low < high:
            middle = (low + high + 1) // 2
            if self.starts[middle] <= offset:
                low = middle
            else:
                high = middle - 1
        return low
