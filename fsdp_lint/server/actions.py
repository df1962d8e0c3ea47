"""Code actions for a document's findings.

- one quick fix per finding that has a fix: the engine's own edit; a safe fix is marked
  preferred (editors apply it with their "auto fix" key), an unsafe one says so in its title;
- "Suppress with noqa": adds ``# noqa: CODE`` to the flagged line (or extends the line's
  ``# noqa: ...`` list), checked with the engine's own suppression reader before it is offered;
- ``source.fixAll.fsdp-lint``: every safe fix in the file at once, through ``fixer.fix_text``
  (the same loop as ``fsdp-lint check --fix``; unsafe fixes too where ``unsafe-fixes`` is on),
  sent as one text edit per changed region, never one edit over the lines between fixes.
  Its edit is computed on ``codeAction/resolve`` when the client can resolve edits, so
  moving the cursor does not re-lint the file.
"""

from __future__ import annotations

import difflib
import re
from typing import List, Optional, Sequence

from lsprotocol import types

from fsdp_lint.diagnostics import SAFE, Diagnostic
from fsdp_lint.fixer import applicable, fix_text
from fsdp_lint.noqa import Suppressions
from fsdp_lint.server.linting import DocumentLint
from fsdp_lint.server.lsp_diagnostics import to_lsp
from fsdp_lint.server.text_index import TextIndex

FIX_ALL_KIND = "source.fixAll.fsdp-lint"
KINDS = (types.CodeActionKind.QuickFix, FIX_ALL_KIND)
_NOQA_CODES = re.compile(r"#\s*noqa:\s*[\w\-]+(?:[ \t]*,[ \t]*[\w\-]+)*", re.I)


def wanted(kind: str, only: Optional[Sequence[str]]) -> bool:
    """LSP's kind filter is hierarchical: ``source.fixAll`` asks for ``source.fixAll.fsdp-lint``."""
    if not only:
        return True
    return any(kind == want or kind.startswith(f"{want}.") for want in only)


def span(diagnostic: Diagnostic, index: TextIndex):
    """The finding's (start, end) character offsets."""
    start, end = diagnostic.location, diagnostic.end_location
    return index.location_offset(start.row, start.column), index.location_offset(end.row, end.column)


def _text_edit(index: TextIndex, start: int, end: int, content: str) -> types.TextEdit:
    return types.TextEdit(
        range=types.Range(types.Position(*index.position(start)), types.Position(*index.position(end))),
        new_text=content,
    )


def workspace_edit(
    uri: str, version: Optional[int], edits: List[types.TextEdit], versioned: bool
) -> types.WorkspaceEdit:
    if versioned:
        identifier = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=identifier, edits=edits)])
    return types.WorkspaceEdit(changes={uri: edits})


def noqa_edit(lint: DocumentLint, diagnostic: Diagnostic) -> Optional[tuple]:
    """(offset, offset, text) that suppresses ``diagnostic``, or None when no line of its
    statement can carry the comment (every candidate ends inside a string, say)."""
    text = lint.text
    index = TextIndex(text)
    first, last = diagnostic.statement_rows
    if not first:
        first = last = diagnostic.location.row
    for row in dict.fromkeys((diagnostic.location.row, first, last)):
        if not 1 <= row <= len(index.starts):
            continue
        start, end = index.starts[row - 1], index.line_end_offset(row)
        line = text[start:end]
        if line.rstrip().endswith("\\"):
            continue  # a comment cannot follow a line continuation
        existing = _NOQA_CODES.search(line)
        if existing:
            edit = (start + existing.end(), start + existing.end(), f", {diagnostic.code}")
        else:
            stripped = len(line.rstrip(" \t"))
            edit = (start + stripped, end, f"  # noqa: {diagnostic.code}")
        new_text = text[: edit[0]] + edit[2] + text[edit[1]:]
        if Suppressions(new_text).suppresses(diagnostic.code, diagnostic.name, first, last):
            return edit
    return None


def _quick_fixes(
    lint: DocumentLint, index: TextIndex, diagnostic: Diagnostic, versioned: bool
) -> List[types.CodeAction]:
    actions = []
    lsp_diagnostic = to_lsp(diagnostic, index)
    fix = diagnostic.fix
    if fix is not None:
        safe = fix.applicability == SAFE
        title = f"{fix.message} ({diagnostic.code})"
        if not safe:
            title = f"Unsafe fix: {fix.message} ({diagnostic.code}; review the change)"
        edits = [_text_edit(index, e.start_offset, e.end_offset, e.content) for e in fix.edits]
        actions.append(
            types.CodeAction(
                title=title,
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[lsp_diagnostic],
                is_preferred=safe,
                edit=workspace_edit(lint.uri, lint.version, edits, versioned),
            )
        )
    if not diagnostic.code.startswith("FSD9"):
        noqa = noqa_edit(lint, diagnostic)
        if noqa is not None:
            actions.append(
                types.CodeAction(
                    title=f"Suppress {diagnostic.code} with `# noqa: {diagnostic.code}`",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[lsp_diagnostic],
                    edit=workspace_edit(lint.uri, lint.version, [_text_edit(index, *noqa)], versioned),
                )
            )
    return actions


def fix_all_title(unsafe: bool) -> str:
    if unsafe:
        return "Fix all fsdp-lint findings (safe and unsafe fixes)"
    return "Fix all safe fsdp-lint fixes in this file"


def fix_all_edit(lint: DocumentLint, encoding: str, versioned: bool) -> Optional[types.WorkspaceEdit]:
    """One text edit per changed region (each fix's own characters), or None when nothing
    changes.  One edit over the whole span from the first fix to the last would replace
    every line between them: the editor's undo, cursor and other extensions' marks would
    see the untouched lines rewritten."""
    outcome = fix_text(
        lint.text, lint.path, lint.rules, lint.unsafe, launch=lint.launch, unused_noqa=lint.unused_noqa,
        project=lint.project,
    )
    old, new = lint.text, outcome.text
    if old == new:
        return None
    index = TextIndex(old, encoding)
    edits = [_text_edit(index, start, end, content) for start, end, content in changed_regions(old, new)]
    return workspace_edit(lint.uri, lint.version, edits, versioned)


def changed_regions(old: str, new: str) -> List[tuple]:
    """(start, end, replacement) in ``old``'s character offsets, one per run of changed
    lines, each trimmed to the characters that differ; applying them all gives ``new``."""
    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    old_starts = [0]
    for line in old_lines:
        old_starts.append(old_starts[-1] + len(line))
    new_starts = [0]
    for line in new_lines:
        new_starts.append(new_starts[-1] + len(line))
    regions = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        a, b = old[old_starts[i1]:old_starts[i2]], new[new_starts[j1]:new_starts[j2]]
        prefix = 0
        limit = min(len(a), len(b))
        while prefix < limit and a[prefix] == b[prefix]:
            prefix += 1
        suffix = 0
        while suffix < limit - prefix and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]:
            suffix += 1
        regions.append((old_starts[i1] + prefix, old_starts[i2] - suffix, b[prefix: len(b) - suffix]))
    return regions


def code_actions(
    lint: DocumentLint,
    encoding: str,
    start: tuple,
    end: tuple,
    only: Optional[Sequence[str]],
    versioned: bool,
    resolve_edits: bool,
) -> List[types.CodeAction]:
    """The actions for the (line, character) range ``start``-``end`` of the document."""
    index = TextIndex(lint.text, encoding)
    actions: List[types.CodeAction] = []
    if wanted(types.CodeActionKind.QuickFix, only):
        low, high = index.offset(*start), index.offset(*end)
        for diagnostic in lint.diagnostics:
            begin, finish = span(diagnostic, index)
            if begin <= high and low <= finish:
                actions.extend(_quick_fixes(lint, index, diagnostic, versioned))
    if wanted(FIX_ALL_KIND, only) and any(applicable(d, lint.unsafe) for d in lint.diagnostics):
        action = types.CodeAction(title=fix_all_title(lint.unsafe), kind=FIX_ALL_KIND,
                                  data={"uri": lint.uri, "version": lint.version})
        if not resolve_edits:
            action.edit = fix_all_edit(lint, encoding, versioned)
            if action.edit is None:
                return actions
        actions.append(action)
    return actions
