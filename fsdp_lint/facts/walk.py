"""A fast pre-order walk over a libcst tree.

libcst's own visitor rebuilds every node it passes (``_visit_and_replace_children``),
which costs about 14x a plain walk over the dataclass fields (measured: 14.3 s against
1.0 s on a 5 MB module).  This walk reads the fields directly, skips the fields that only
hold whitespace and punctuation, and lets handlers decide how a node's children are
visited (to run code between them: a loop body, a with body) through an explicit stack,
so deep nesting never meets Python's recursion limit.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Tuple

from fsdp_lint.lazy_libcst import cst

_NO_CHILDREN = frozenset(
    {
        "whitespace", "lpar", "rpar", "leading_lines", "lines_after_decorators", "header", "footer",
        "comma", "semicolon", "equal", "colon", "dot", "operator", "newline", "indent",
        "trailing_whitespace", "asynchronous", "first_line", "empty_lines", "last_line",
        "default_newline", "default_indent", "encoding", "star", "star_tok", "arrow",
    }
)
_FIELDS: Dict[type, Tuple[str, ...]] = {}


def child_fields(cls: type) -> Tuple[str, ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in _NO_CHILDREN and not f.name.startswith("whitespace")
        )
        _FIELDS[cls] = fields
    return fields


class Exit:
    """An action on the stack: run when the walk comes back past it."""

    __slots__ = ("action",)

    def __init__(self, action: Callable[[], None]):
        self.action = action


# type -> 1 (a node), 2 (a list or tuple that may hold nodes), 0 (anything else): a dict
# lookup instead of ``isinstance(value, cst.CSTNode)``, which goes through the ABC machinery
_KIND: Dict[type, int] = {}


def _kind(cls: type) -> int:
    kind = _KIND.get(cls)
    if kind is None:
        kind = _KIND[cls] = 1 if issubclass(cls, cst.CSTNode) else 2 if issubclass(cls, (list, tuple)) else 0
    return kind


def push_children(node: cst.CSTNode, stack: List[object], fields=None) -> None:
    """Schedule ``node``'s children (in source order) on ``stack``."""
    pending = []
    kinds = _KIND
    for name in fields if fields is not None else child_fields(type(node)):
        value = getattr(node, name)
        kind = kinds.get(type(value))
        if kind is None:
            kind = _kind(type(value))
        if kind == 1:
            pending.append(value)
        elif kind == 2:
            for item in value:
                if (kinds.get(type(item)) or _kind(type(item))) == 1:
                    pending.append(item)
    stack.extend(reversed(pending))


def descendants(root: cst.CSTNode):
    """``root`` and every node below it (the fields ``push_children`` reads), in pre-order."""
    stack: List[object] = [root]
    while stack:
        node = stack.pop()
        yield node
        push_children(node, stack)


def walk(root: cst.CSTNode, handlers: Dict[type, Callable[[cst.CSTNode, List[object]], None]]) -> None:
    """Pre-order walk; a handler for a node's type schedules that node's children itself."""
    stack: List[object] = [root]
    while stack:
        item = stack.pop()
        if type(item) is Exit:
            item.action()
            continue
        handler = handlers.get(type(item))
        if handler is None:
            push_children(item, stack)
        else:
            handler(item, stack)
