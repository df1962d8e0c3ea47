"""Positions of reported nodes, computed only when a rule reports something.

libcst's PositionProvider costs more than the parse itself (measured: 5.5 ms against 1.2
ms for a 40-line file, 40 s against 23 s for a 5 MB one): it splits every token with a
regular expression and builds a CodeRange per node, behind a metadata visitor pass.  Here
one code-generation pass counts characters only and records each node's start and end
offset (the syntactic span for statements, as PositionProvider has it); since libcst
reproduces the text exactly, offsets map to rows and columns through the line starts.
Measured 0.7 ms for the same 40-line file.  If libcst's code-generation internals ever
change, the metadata provider is used instead.
"""

from __future__ import annotations

import bisect
from typing import Dict, List, Tuple

from fsdp_lint.lazy_libcst import cst
from fsdp_lint.source import line_starts

# The node types rules report and hoisted spans refer to, filled on first use
# (``recorded_types``); other nodes are not recorded (a lookup in this set is cheaper than
# recording 600,000 spans for 2,000 small files).
_RECORDED: frozenset = frozenset()
_STATE_CLASS = None  # ``_OffsetCounting`` over libcst's ``CodegenState``, made on first use


def recorded_types() -> frozenset:
    """The node types whose spans the offset pass records (the statements, suites, calls,
    decorators, ``else``/``finally``/``except`` clauses and the module)."""
    global _RECORDED
    if not _RECORDED:
        types = {cst.Call, cst.Decorator, cst.Module, cst.Else, cst.Finally, cst.ExceptHandler}
        bases = (cst.BaseStatement, cst.BaseSmallStatement, cst.BaseSuite)
        for name in dir(cst):
            value = getattr(cst, name)
            if isinstance(value, type) and issubclass(value, bases):
                types.add(value)
        _RECORDED = frozenset(types)
    return _RECORDED


class _OffsetCounting:
    """What the offset pass changes in libcst's ``CodegenState``: characters are counted, not
    kept, and the recorded nodes' spans are noted.  ``_offset_state`` puts it in front of
    ``CodegenState`` on first use, so that importing this module does not import libcst."""

    def __init__(self, module: cst.Module):
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.offset = 0
        self.spans: Dict[int, Tuple[int, int]] = {}
        self._starts: List[int] = []

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.offset += len(token)

    def add_token(self, value: str) -> None:
        self.offset += len(value)

    def before_codegen(self, node) -> None:
        if type(node) in _RECORDED:
            self._starts.append(self.offset)

    def after_codegen(self, node) -> None:
        if type(node) in _RECORDED:
            start = self._starts.pop()
            if id(node) not in self.spans:  # a syntactic span recorded inside wins
                self.spans[id(node)] = (start, self.offset)

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        return _Syntactic(self, node, start_node, end_node)


def _offset_state(module: cst.Module) -> _OffsetCounting:
    """A fresh code-generation state for ``module`` that counts offsets."""
    global _STATE_CLASS
    if _STATE_CLASS is None:
        recorded_types()
        _STATE_CLASS = type("_OffsetState", (_OffsetCounting, cst._nodes.internal.CodegenState), {})
    return _STATE_CLASS(module)


class _Syntactic:
    """The syntactic span of a node (a plain class: libcst enters one per parenthesizable
    expression, and a generator-based context manager costs three times as much)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _OffsetCounting, node, start_node, end_node):
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = self.state.offset

    def __exit__(self, *exc) -> None:
        spans = self.state.spans
        start, end = self.start, self.state.offset
        if self.start_node is not None and id(self.start_node) in spans:
            start = spans[id(self.start_node)][0]
        if self.end_node is not None and id(self.end_node) in spans:
            end = spans[id(self.end_node)][1]
        spans[id(self.node)] = (start, end)


# The last module's top-level statements: statement id -> (the statement, its length, the
# spans of its nodes relative to its start).  The language server's incremental parse keeps
# the unchanged statements' nodes from one keystroke to the next, so only the statements an
# edit touched are generated again; the entry holds its statement, so an id is never reused.
_LAST_STATEMENTS: Dict[int, Tuple[object, int, Dict[int, Tuple[int, int]]]] = {}


def _module_spans(module: cst.Module) -> Dict[int, Tuple[int, int]]:
    """Every recorded node's (start, end) offset: ``Module._codegen_impl`` statement by
    statement, reusing the statements of the previous call that are the very same nodes."""
    global _LAST_STATEMENTS
    state = _offset_state(module)
    spans = state.spans
    state.before_codegen(module)
    for line in module.header:
        line._codegen(state)
    kept: Dict[int, Tuple[object, int, Dict[int, Tuple[int, int]]]] = {}
    for statement in module.body:
        entry = _LAST_STATEMENTS.get(id(statement))
        if entry is None or entry[0] is not statement:
            alone = _offset_state(module)
            statement._codegen(alone)
            entry = (statement, alone.offset, alone.spans)
        kept[id(statement)] = entry
        base = state.offset
        for key, (start, end) in entry[2].items():
            spans[key] = (start + base, end + base)
        state.offset += entry[1]
    for line in module.footer:
        line._codegen(state)
    if module.has_trailing_newline and state.offset == 0:
        state.add_token(state.default_newline)
    state.after_codegen(module)
    _LAST_STATEMENTS = kept
    return spans


class Positions:
    """``positions(node) -> CodeRange`` (1-based lines, 0-based columns, as libcst's)."""

    def __init__(self, module: cst.Module, line_starts: List[int], piece=None):
        """``piece``: the ``slicing.Slice`` that ``module`` was parsed from (None: the whole
        text); offsets in it are mapped to the file's, so rows and columns are the file's."""
        self._module = module
        self._line_starts = line_starts
        self._spans = None
        self._fallback = None
        self._piece = piece

    def offsets(self, node) -> Tuple[int, int]:
        if self._spans is None:
            try:
                self._spans = _module_spans(self._module)
            except Exception:  # noqa: BLE001 - libcst internals changed: use the public provider
                self._spans = {}
        span = self._spans.get(id(node))
        if span is None:
            rng = self._provider()[node]
            span = self._offset(rng.start), self._offset(rng.end)
        piece = self._piece
        if piece is None:
            return span
        return piece.to_original(span[0]), piece.to_original(span[1], end=True)

    def __call__(self, node) -> cst.metadata.CodeRange:
        start, end = self.offsets(node)
        return cst.metadata.CodeRange(self.position(start), self.position(end))

    def position(self, offset: int) -> cst.metadata.CodePosition:
        """The row (1-based) and column (0-based) of a character offset in the text."""
        row = bisect.bisect_right(self._line_starts, offset)
        return cst.metadata.CodePosition(row, offset - self._line_starts[row - 1])

    def _offset(self, position: cst.metadata.CodePosition) -> int:
        """The offset of a position of the parsed text (the slice's, when there is one)."""
        starts = self._line_starts if self._piece is None else self._piece_starts()
        return starts[position.line - 1] + position.column

    def _piece_starts(self) -> List[int]:
        if getattr(self, "_piece_line_starts", None) is None:
            self._piece_line_starts = line_starts(self._piece.text)
        return self._piece_line_starts

    def _provider(self):
        if self._fallback is None:
            wrapper = cst.MetadataWrapper(self._module, unsafe_skip_copy=True)
            self._fallback = wrapper.resolve(cst.metadata.PositionProvider)
        return self._fallback
