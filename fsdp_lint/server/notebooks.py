"""Notebook documents (LSP 3.17 ``notebookDocument/*``): a notebook's Python code cells are
linted as one text (``fsdp_lint.notebook``: the same cell map as the command line), and each
finding is published on its cell's document, with its range (and the rows its message
names) in that cell.  Quick fixes are offered on a cell; their edits go to the cells they
touch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from lsprotocol import types

from fsdp_lint.fixer import applicable
from fsdp_lint.notebook import Cell, cell_of, cell_rows, code_cell, join, message_in_cells
from fsdp_lint.server.linting import DocumentLint
from fsdp_lint.server.lsp_diagnostics import config_error_diagnostic, to_lsp
from fsdp_lint.server.text_index import TextIndex

SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[types.NotebookDocumentFilterWithCells(cells=[types.NotebookCellLanguage(language="python")])],
    save=True,
)


@dataclass
class NotebookLint:
    """One lint of a notebook: the joined text's lint and which cell document is which cell."""

    lint: DocumentLint
    cells: List[Tuple[str, Cell]]  # (cell document URI, cell) of the Python code cells, in order
    markers: List[Tuple[int, int]] = field(default_factory=list)

    def cell_uri(self, index: Optional[int]) -> Optional[str]:
        for uri, cell in self.cells:
            if cell.index == index:
                return uri
        return None


def code_cells(notebook: types.NotebookDocument, text_of, language_of) -> List[Tuple[str, Cell]]:
    """The notebook's Python code cells: (document URI, cell), numbered as listed (from 1)."""
    out = []
    for position, cell in enumerate(notebook.cells):
        if cell.kind != types.NotebookCellKind.Code:
            continue
        language = language_of(cell.document)
        if language and language.lower() != "python":
            continue
        out.append((cell.document, code_cell(position + 1, text_of(cell.document))))
    return out


def joined(cells: List[Tuple[str, Cell]]) -> str:
    return join([cell for _, cell in cells])


def _shift(position: types.Position, lines: int) -> types.Position:
    return types.Position(max(0, position.line - lines), position.character)


def _place(d_row: int, markers) -> Tuple[Optional[int], int]:
    cell, row = cell_of(d_row, markers)
    return cell, d_row - row  # the cell, and how many rows of the joined text precede its first row


def cell_diagnostics(nb: NotebookLint, encoding: str) -> Dict[str, List[types.Diagnostic]]:
    """Each cell document's diagnostics (every code cell present, empty when clean)."""
    out: Dict[str, List[types.Diagnostic]] = {uri: [] for uri, _ in nb.cells}
    if not nb.cells:
        return out
    if nb.lint.config_error:
        out[nb.cells[0][0]] = [config_error_diagnostic(nb.lint.config_error)]
        return out
    index = TextIndex(nb.lint.text, encoding)
    for d in nb.lint.diagnostics:
        cell, shift = _place(d.location.row, nb.markers)
        uri = nb.cell_uri(cell) or nb.cells[0][0]
        lsp = to_lsp(d, index)
        if cell is not None:
            lsp.range = types.Range(_shift(lsp.range.start, shift), _shift(lsp.range.end, shift))
        lsp.message = message_in_cells(lsp.message, nb.markers)
        out[uri].append(lsp)
    return out


def _edit(nb: NotebookLint, index: TextIndex, edit) -> Optional[Tuple[str, types.TextEdit]]:
    cell, shift = _place(edit.location.row, nb.markers)
    end_cell, _ = _place(edit.end_location.row, nb.markers)
    uri = nb.cell_uri(cell)
    if uri is None or end_cell != cell:
        return None
    start = index.location(edit.location.row, edit.location.column)
    end = index.location(edit.end_location.row, edit.end_location.column)
    rng = types.Range(types.Position(start[0] - shift, start[1]), types.Position(end[0] - shift, end[1]))
    return uri, types.TextEdit(range=rng, new_text=edit.content)


def quick_fixes(nb: NotebookLint, cell_uri: str, start: tuple, end: tuple, encoding: str) -> List[types.CodeAction]:
    """Quick fixes for the findings of ``cell_uri`` whose range meets ``start``-``end``
    (cell lines and characters)."""
    index = TextIndex(nb.lint.text, encoding)
    actions = []
    for d, lsp in zip(nb.lint.diagnostics, cell_diagnostics_flat(nb, encoding)):
        uri, rng = lsp
        if uri != cell_uri or d.fix is None:
            continue
        if (rng.end.line, rng.end.character) < start or end < (rng.start.line, rng.start.character):
            continue
        if not applicable(d, True):
            continue
        changes: Dict[str, List[types.TextEdit]] = {}
        for edit in d.fix.edits:
            placed = _edit(nb, index, edit)
            if placed is None:
                changes = {}
                break
            changes.setdefault(placed[0], []).append(placed[1])
        if not changes:
            continue
        unsafe = "" if d.fix.applicability == "safe" else " (unsafe)"
        actions.append(
            types.CodeAction(
                title=f"{d.fix.message} ({d.code}){unsafe}", kind=types.CodeActionKind.QuickFix,
                diagnostics=None, is_preferred=d.fix.applicability == "safe",
                edit=types.WorkspaceEdit(changes=changes),
            )
        )
    return actions


def cell_diagnostics_flat(nb: NotebookLint, encoding: str) -> List[Tuple[Optional[str], types.Range]]:
    """(cell URI, cell range) of each finding, in the lint's order."""
    index = TextIndex(nb.lint.text, encoding)
    out = []
    for d in nb.lint.diagnostics:
        cell, shift = _place(d.location.row, nb.markers)
        rng = to_lsp(d, index).range
        out.append((nb.cell_uri(cell), types.Range(_shift(rng.start, shift), _shift(rng.end, shift))))
    return out


def markers_of(text: str):
    return cell_rows(text)

