"""Re-parsing only the top-level statements an edit touched.

libcst parses a 1,000-line file in tens of milliseconds, most of a lint's time.  An edit
while typing changes one statement or a few; the others are the very nodes of the last
parse.  ``ParseCache.parse(text)`` finds the changed characters (common prefix and
suffix with the last text), widens them to whole top-level statements (and one statement
on either side, so an indented line typed after a block joins it as a full parse would
have it), parses that chunk alone with the module's own settings (indentation, newline),
and splices the new statements between the unchanged ones.

The result has the same code as the text, statement for statement; which node owns a
comment line between two statements may differ from a full parse (a comment that was the
chunk's last line joins the next statement's leading lines), and no rule reads that.
Anything outside the simple case parses the whole text instead: the module header or footer
changed, a ``__future__`` import, a chunk that does not end with a newline or does not parse
(a full parse then raises the error the engine reports), no trailing newline.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import List, Optional

from fsdp_lint.lazy_libcst import cst


def _common_prefix(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    low, high = 0, limit
    while low < high:  # compare halves: str equality runs at C speed
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _common_suffix(a: str, b: str, limit: int) -> int:
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        if a[len(a) - middle:] == b[len(b) - middle:]:
            low = middle
        else:
            high = middle - 1
    return low


def _lines_length(module, lines) -> int:
    """Characters of a header's or footer's lines at module level."""
    return sum(len(module.code_for_node(line)) for line in lines)


class ParseCache:
    """The last parse of one document and where its top-level statements start."""

    def __init__(self) -> None:
        self.text: Optional[str] = None
        self.module = None
        self.starts: List[int] = []  # offset of each top-level statement (its leading lines included)
        self.end = 0  # where the footer starts
        self.spliced = 0  # how many parses reused statements (for tests and curiosity)

    def clear(self) -> None:
        self.text, self.module, self.starts = None, None, []

    def parse(self, text: str):
        """The module of ``text``, as ``libcst.parse_module`` gives it (and raising what it raises)."""
        module = None
        if self.module is not None:
            try:
                module = self._splice(text)
            except Exception:  # noqa: BLE001 - any surprise: the full parse below decides
                module = None
        if module is None:
            self.clear()
            module = cst.parse_module(text)
            self._index(module, text)
        else:
            self.spliced += 1
        self.text, self.module = text, module
        return module

    # -- internals --------------------------------------------------------------------
    def _index(self, module, text: str) -> None:
        """Statement offsets from one code generation of each statement; a module whose
        pieces do not add up to the text is never spliced."""
        if not module.has_trailing_newline or not module.body:
            self.starts = []
            return
        header, footer = _lines_length(module, module.header), _lines_length(module, module.footer)
        starts, offset = [], header
        for statement in module.body:
            starts.append(offset)
            offset += len(module.code_for_node(statement))
        if offset + footer != len(text):
            self.starts = []
            return
        self.starts, self.end = starts, offset

    def _splice(self, text: str):
        old, module, starts = self.text, self.module, self.starts
        if not starts:
            return None
        if text == old:
            return module
        prefix = _common_prefix(old, text)
        suffix = _common_suffix(old, text, min(len(old), len(text)) - prefix)
        changed_end = len(old) - suffix  # the edit replaced old[prefix:changed_end]
        if prefix <= starts[0] or changed_end >= self.end:
            return None  # the header, the first statement's start or the footer changed
        first = max(0, bisect_right(starts, prefix - 1) - 2)  # the touched statement and the one before
        last = bisect_right(starts, changed_end) - 1  # the statement the edit's end touches
        if last == len(starts) - 1 and module.footer:
            return None
        delta = len(text) - len(old)
        chunk_start = starts[first]
        old_chunk_end = starts[last + 1] if last + 1 < len(starts) else self.end
        chunk = text[chunk_start:old_chunk_end + delta]
        if not chunk.endswith(("\n", "\r")) or "__future__" in chunk or "__future__" in old[chunk_start:old_chunk_end]:
            return None
        parsed = cst.parse_module(chunk, config=module.config_for_parsing)
        if not parsed.body or not parsed.has_trailing_newline:
            return None
        body = list(parsed.body)
        if parsed.header:
            body[0] = body[0].with_changes(leading_lines=[*parsed.header, *body[0].leading_lines])
        new_starts = starts[:first]
        offset = chunk_start
        for statement in body:
            new_starts.append(offset)
            offset += len(module.code_for_node(statement))
        trailing = _lines_length(module, parsed.footer)
        if offset + trailing != old_chunk_end + delta:
            return None  # the chunk's pieces do not add up to its text
        tail = list(module.body[last + 1:])
        footer, end = module.footer, self.end + delta
        if tail:
            # lines after the chunk's last statement lead into the next one, as in a full parse
            if parsed.footer:
                tail[0] = tail[0].with_changes(leading_lines=[*parsed.footer, *tail[0].leading_lines])
            new_starts.append(offset)
            new_starts.extend(start + delta for start in starts[last + 2:])
        else:
            footer, end = parsed.footer, offset
        self.starts, self.end = new_starts, end
        return module.with_changes(body=[*module.body[:first], *body, *tail], footer=footer)
