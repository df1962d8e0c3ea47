"""Jupyter notebooks (``.ipynb``): their code cells as one Python text, and fixes written
back into the cells with the rest of the file kept byte for byte.

The Python text is the code cells in order, each under a marker comment line naming its
cell (``# <fsdp-lint cell 3>``; cells are numbered as the notebook lists them, from 1,
markdown cells included), so a row of the text maps to a cell and a row in it
(``cell_of``), and the text splits back into cells (``cell_texts``).  The engine lints it
like any file: one parse, facts across cells (a model wrapped in cell 2 and summoned in
cell 5).

IPython syntax, as ruff treats it: a line magic or shell escape (``%matplotlib inline``,
``!pip install x``, ``x = !ls``, ``%time f()``, ``obj?``) at the start of a statement (not
inside brackets, a string or a backslash continuation, where ``!=`` and ``%`` are Python) is
blanked to ``pass`` at its indentation (``x = None`` for an assignment), so it neither breaks the parse nor counts as
code; a cell under a cell magic (``%%bash``) is not Python and is blanked whole, except
``%%time``, ``%%timeit`` and ``%%capture``, whose body is Python.  Blanked lines are
restored when a fixed cell is written back; a fix that would change one is refused.

Writing: only the ``source`` value of an edited cell is replaced in the file's text, in the
layout the file already uses (a list of lines or one string, its indentation and
separators, escaped or raw non-ASCII); every other byte stays.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

SUFFIX = ".ipynb"
MARKER = re.compile(r"^# <fsdp-lint cell (\d+)>$", re.M)
_MAGIC_START = re.compile(r"^(\s*)(?:[%!]|\?\?|\?)")
_ASSIGN_MAGIC = re.compile(r"^(\s*[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*)[%!]")
_HELP_END = re.compile(r"^(\s*)[A-Za-z_][\w.]*\?{1,2}\s*$")
PYTHON_CELL_MAGICS = ("time", "timeit", "capture")


class NotebookError(ValueError):
    pass


def is_notebook(path: str) -> bool:
    return path.endswith(SUFFIX)


def _marker(cell: int) -> str:
    return f"# <fsdp-lint cell {cell}>\n"


# JSON with the spans of each cell's "source" value -------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _Spans:
    """A JSON reader that keeps where each ``cells[i].source`` value stands in the text."""

    def __init__(self, text: str):
        self.text = text
        self.sources: Dict[int, Tuple[int, int]] = {}

    def parse(self):
        value, end = self._value(_WS.match(self.text, 0).end(), ())
        if _WS.match(self.text, end).end() != len(self.text):
            raise NotebookError("extra data after the notebook's JSON")
        return value

    def _value(self, pos: int, path: tuple):
        text = self.text
        if pos >= len(text):
            raise NotebookError("the notebook's JSON ends early")
        char = text[pos]
        if char == "{":
            result = {}
            pos = _WS.match(text, pos + 1).end()
            if text.startswith("}", pos):
                return result, pos + 1
            while True:
                if not text.startswith('"', pos):
                    raise NotebookError(f"a key was expected at character {pos}")
                key, pos = json.decoder.scanstring(text, pos + 1)
                pos = _WS.match(text, pos).end()
                if not text.startswith(":", pos):
                    raise NotebookError(f"':' was expected at character {pos}")
                pos = _WS.match(text, pos + 1).end()
                start = pos
                result[key], pos = self._value(pos, path + (key,))
                if key == "source" and len(path) == 2 and path[0] == "cells":
                    self.sources[path[1]] = (start, pos)
                pos = _WS.match(text, pos).end()
                if text.startswith(",", pos):
                    pos = _WS.match(text, pos + 1).end()
                    continue
                if text.startswith("}", pos):
                    return result, pos + 1
                raise NotebookError(f"',' or '}}' was expected at character {pos}")
        if char == "[":
            result = []
            pos = _WS.match(text, pos + 1).end()
            if text.startswith("]", pos):
                return result, pos + 1
            while True:
                item, pos = self._value(pos, path + (len(result),))
                result.append(item)
                pos = _WS.match(text, pos).end()
                if text.startswith(",", pos):
                    pos = _WS.match(text, pos + 1).end()
                    continue
                if text.startswith("]", pos):
                    return result, pos + 1
                raise NotebookError(f"',' or ']' was expected at character {pos}")
        try:
            return _DECODER.raw_decode(text, pos)
        except ValueError as exc:
            raise NotebookError(f"invalid JSON: {exc}") from None


# masking IPython syntax ------------------------------------------------------------------------------


def _mask(source: str) -> Tuple[str, List[int]]:
    """The cell's text with IPython lines blanked, and the 0-based rows blanked."""
    lines = source.splitlines(keepends=True)
    masked: List[int] = []
    first = lines[0].strip() if lines else ""
    if first.startswith("%%"):
        name = first[2:].split()[0] if first[2:].split() else ""
        if name in PYTHON_CELL_MAGICS:
            end = "\n" if lines[0].endswith("\n") else ""
            lines[0] = "pass" + end
            masked.append(0)
        else:
            for row, line in enumerate(lines):
                end = "\n" if line.endswith("\n") else ""
                lines[row] = end
                masked.append(row)
            return "".join(lines), masked
    row = 0
    scan = _Scan()
    while row < len(lines):
        line = lines[row]
        body = line.rstrip("\r\n")
        end = line[len(body):]
        if row in masked:
            row += 1
            continue
        # only a line that starts a statement can be IPython syntax: not a line inside
        # brackets, a string or after a backslash (`x = (a` / `!= b)` is Python)
        logical_start = scan.at_statement_start()
        assign = _ASSIGN_MAGIC.match(body) if logical_start else None
        magic = _MAGIC_START.match(body) if logical_start else None
        help_end = _HELP_END.match(body) if logical_start else None
        if assign or magic or help_end:
            if assign:
                lines[row] = assign.group(1) + "None" + end
            else:
                lines[row] = (magic or help_end).group(1) + "pass" + end
            masked.append(row)
            # a magic continued with backslashes goes on over the next lines
            while body.endswith("\\") and row + 1 < len(lines):
                row += 1
                body = lines[row].rstrip("\r\n")
                lines[row] = lines[row][len(body):]
                masked.append(row)
        else:
            scan.feed(body)
        row += 1
    return "".join(lines), masked


class _Scan:
    """Where a line of Python leaves the reader: inside brackets, inside a triple-quoted
    string, or continued by a backslash (strings and comments skipped)."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: Optional[str] = None  # the open triple quote
        self.continued = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        comment = False
        while i < n:
            if self.quote is not None:
                if line[i] == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += 3
                    self.quote = None
                    continue
                i += 1
                continue
            char = line[i]
            if char == "#":
                comment = True
                break
            if char in "\"'":
                if line.startswith(char * 3, i):
                    self.quote = char * 3
                    i += 3
                    continue
                i += 1
                while i < n and line[i] != char:  # a one-line string
                    i += 2 if line[i] == "\\" else 1
                i += 1
                continue
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        self.continued = self.quote is None and not comment and line.rstrip().endswith("\\")


# the notebook -----------------------------------------------------------------------------------------


@dataclass
class Cell:
    index: int  # 1-based, in the notebook's list of cells
    source: str  # as in the file, joined
    python: str  # masked, ending with a newline
    masked: List[int] = field(default_factory=list)
    added_newline: bool = False


@dataclass
class Notebook:
    text: str  # the file's JSON text
    cells: List[Cell]
    spans: Dict[int, Tuple[int, int]]  # 0-based cell index -> span of its "source" value
    python_text: str

    def encode(self, new_python: str) -> str:
        """The file's JSON text with each cell whose Python text changed in
        ``new_python`` written back; NotebookError when the change cannot be mapped onto
        the cells (a cell marker moved, a blanked IPython line edited)."""
        parts = cell_texts(new_python)
        if [index for index, _ in parts] != [cell.index for cell in self.cells]:
            raise NotebookError("a fix moved a cell boundary; the notebook was not written")
        edits = []
        for cell, (_, new) in zip(self.cells, parts):
            if new == cell.python:
                continue
            source = _unmask(cell, new)
            if cell.added_newline and source.endswith("\n"):
                source = source[:-1]
            start, end = self.spans[cell.index - 1]
            edits.append((start, end, _encode_source(self.text[start:end], source)))
        text = self.text
        for start, end, value in sorted(edits, reverse=True):
            text = text[:start] + value + text[end:]
        return text


def _unmask(cell: Cell, new: str) -> str:
    """``new`` (the cell's fixed Python text) with the blanked IPython lines put back."""
    old_lines = cell.python.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    original = cell.source if cell.source.endswith("\n") or not cell.source else cell.source + "\n"
    source_lines = original.splitlines(keepends=True)
    masked = set(cell.masked)
    out: List[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes():
        if tag == "equal":
            out.extend(source_lines[i] if i in masked else old_lines[i] for i in range(i1, i2))
        elif any(i in masked for i in range(i1, i2)):
            raise NotebookError("a fix would change an IPython line; the notebook was not written")
        else:
            out.extend(new_lines[j1:j2])
    return "".join(out)


def _encode_source(old: str, source: str) -> str:
    """``source`` as a JSON value in the layout of ``old`` (the value it replaces)."""
    ascii_only = "\\u" in old and not any(ord(c) > 127 for c in old)
    if not old.startswith("["):
        return json.dumps(source, ensure_ascii=ascii_only)
    lines = source.splitlines(keepends=True)
    if not lines:
        return "[]"
    inner = old[1:-1]
    lead = re.match(r"\s*", inner).group()
    trail = re.search(r"\s*$", inner).group() if inner.strip() else ""
    if not inner.strip():  # the cell was empty: Jupyter's layout
        lead, trail = "\n", "\n"
        sep = ",\n"
    else:
        match = re.search(r'"\s*,(\s*)"', inner)
        sep = "," + (match.group(1) if match else lead)
    return "[" + lead + sep.join(json.dumps(line, ensure_ascii=ascii_only) for line in lines) + trail + "]"


def _language(data: dict) -> Optional[str]:
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    info = metadata.get("language_info")
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        return info["name"].lower()
    kernel = metadata.get("kernelspec")
    if isinstance(kernel, dict) and isinstance(kernel.get("language"), str):
        return kernel["language"].lower()
    return None


def parse(text: str) -> Notebook:
    """The notebook in ``text`` (its JSON); NotebookError when it is not one."""
    spans = _Spans(text)
    data = spans.parse()
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotebookError("not a Jupyter notebook (no list of cells)")
    cells: List[Cell] = []
    python = _language(data) in (None, "python")
    for position, raw in enumerate(data["cells"]):
        if not isinstance(raw, dict) or raw.get("cell_type") != "code" or not python:
            continue
        source = raw.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise NotebookError(f"cell {position + 1}: source is neither a string nor a list of strings")
        if position not in spans.sources:
            raise NotebookError(f"cell {position + 1}: no source")
        cells.append(code_cell(position + 1, source))
    return Notebook(text, cells, spans.sources, join(cells))


def code_cell(index: int, source: str) -> Cell:
    """A code cell (``index``: 1-based, as the notebook lists its cells) ready to join."""
    added = bool(source) and not source.endswith("\n")
    masked, rows = _mask(source + ("\n" if added else ""))
    return Cell(index, source, masked, rows, added)


def join(cells: List[Cell]) -> str:
    """The cells' Python text, each under its marker line."""
    return "".join(_marker(cell.index) + cell.python for cell in cells)


def cell_texts(python_text: str) -> List[Tuple[int, str]]:
    """(cell number, its Python text) of a joined text, in order."""
    marks = list(MARKER.finditer(python_text))
    out = []
    for n, match in enumerate(marks):
        end = marks[n + 1].start() if n + 1 < len(marks) else len(python_text)
        out.append((int(match.group(1)), python_text[match.end() + 1:end]))
    return out


def cell_rows(python_text: str) -> List[Tuple[int, int]]:
    """(row of a marker line, its cell number), rows 1-based, in order."""
    rows = []
    for match in MARKER.finditer(python_text):
        rows.append((python_text.count("\n", 0, match.start()) + 1, int(match.group(1))))
    return rows


_LINE_IN_MESSAGE = re.compile(r"\bline (\d+)\b")


def message_in_cells(message: str, markers: List[Tuple[int, int]]) -> str:
    """A message's "line 6" (a row of the joined text) as "cell 2, line 1"."""

    def in_cell(match) -> str:
        cell, row = cell_of(int(match.group(1)), markers)
        return match.group() if cell is None else f"cell {cell}, line {row}"

    return _LINE_IN_MESSAGE.sub(in_cell, message)


def cell_of(row: int, markers: List[Tuple[int, int]]) -> Tuple[Optional[int], int]:
    """The cell and the row in it of a row of the joined text (None, row: before any cell)."""
    found = (None, row)
    for marker_row, cell in markers:
        if marker_row >= row:
            break
        found = (cell, row - marker_row)
    return found
