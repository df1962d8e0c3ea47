"""Rank tests: code that runs on one rank only.

``if rank == 0:``, ``if dist.get_rank() == 0:``, ``if args.local_rank == 0:``,
``if self.global_rank == 0:``, ``if accelerator.is_main_process:``,
``if trainer.is_global_zero:``; ``!= 0`` puts the one-rank code in the ``else`` branch.
A rank test combined with ``and`` still restricts its body to that rank.
"""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Context, Guard

_RANK_NAME = re.compile(r"^(local_|global_|node_)?rank$")
_MAIN_FLAGS = frozenset(
    {"is_main_process", "is_local_main_process", "is_global_zero", "is_rank_zero", "is_master", "is_main"}
)
_RANK_CALLS = frozenset({"get_rank", "get_local_rank", "get_global_rank"})


def _is_rank_value(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Call):
        func = expr.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        return name in _RANK_CALLS
    dotted = dotted_name(expr)
    return dotted is not None and bool(_RANK_NAME.match(dotted.rsplit(".", 1)[-1]))


def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and expr.value == "0"


def one_rank_branch(test: cst.BaseExpression) -> Optional[str]:
    """'body' or 'orelse': the branch that runs on a single rank; None if not a rank test."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return "body" if "body" in (one_rank_branch(test.left), one_rank_branch(test.right)) else None
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = one_rank_branch(test.expression)
        return {"body": "orelse", "orelse": "body"}.get(inner) if inner else None
    dotted = dotted_name(test)
    if dotted is not None and dotted.rsplit(".", 1)[-1] in _MAIN_FLAGS:
        return "body"
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        left, right = test.left, target.comparator
        if (_is_rank_value(left) and _is_zero(right)) or (_is_zero(left) and _is_rank_value(right)):
            if isinstance(target.operator, cst.Equal):
                return "body"
            if isinstance(target.operator, cst.NotEqual):
                return "orelse"
    return None


def rank_guard(ctx: Context, min_with_depth: int = 0) -> Optional[Guard]:
    """The innermost guard that restricts ``ctx`` to one rank (nested at ``min_with_depth``+)."""
    for guard in reversed(ctx.guards):
        if guard.with_depth < min_with_depth:
            continue
        if one_rank_branch(guard.node.test) == guard.branch:
            return guard
    return None
