"""A call's arguments as written, read the same way from a libcst tree and from an ``ast``
tree: how many positional arguments, whether ``*x``/``**x`` hide some, and each keyword
with its literal value.

Facts that a call's shape alone decides (a collective restricted to a subgroup, an FSDP
plugin that leaves ``use_orig_params`` off, a wrap given an ``auto_wrap_policy``) are
written once, over a ``CallShape``; the facts read a libcst call through ``of_cst`` and
the ``ast`` gate in front of libcst (``screen.py``) reads its call through ``of_ast``, so
both stages evaluate the same definition.
"""

from __future__ import annotations

import ast
from typing import Dict, Optional

from fsdp_lint.lazy_libcst import cst
from fsdp_lint.facts.values import UNKNOWN

__all__ = ["CallShape", "UNKNOWN", "of_ast", "of_cst"]


class CallShape:
    """``positional``: the positional arguments written, not counting ``*x`` (as
    ``values.positional_args``);
    ``star``/``double_star``: a ``*x``/``**x`` is passed; ``keywords``: keyword name ->
    the literal value given (None, a bool, a number, a str), ``UNKNOWN`` for anything else,
    in the order written."""

    __slots__ = ("positional", "star", "double_star", "keywords")

    def __init__(self, positional: int, star: bool, double_star: bool, keywords: Dict[str, object]) -> None:
        self.positional = positional
        self.star = star
        self.double_star = double_star
        self.keywords = keywords

    def passes(self, name: str, index: Optional[int] = None) -> bool:
        """The argument ``name`` is written at the call: by keyword, or by position
        (``index`` among the positional arguments)."""
        return name in self.keywords or (index is not None and self.positional > index)

    def literal(self, name: str, default: object = UNKNOWN) -> object:
        """The literal value passed as keyword ``name`` (``default`` when not passed)."""
        return self.keywords.get(name, default)

    def flag(self, name: str, default: object = UNKNOWN) -> object:
        """Keyword ``name`` read as a flag (``values.literal_bool``): True/False for the
        literals True/False and 1/0, ``UNKNOWN`` for any other value, ``default`` when
        not passed."""
        if name not in self.keywords:
            return default
        value = self.keywords[name]
        if type(value) is bool:
            return value
        if type(value) is int and value in (0, 1):
            return value == 1
        return UNKNOWN

    def __repr__(self) -> str:
        return (f"CallShape(positional={self.positional}, star={self.star}, "
                f"double_star={self.double_star}, keywords={self.keywords!r})")


# -- libcst ----------------------------------------------------------------------------------
def _cst_literal(expr) -> object:
    if isinstance(expr, cst.Name):
        return {"None": None, "True": True, "False": False}.get(expr.value, UNKNOWN)
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
        try:
            value = expr.evaluated_value
        except Exception:  # noqa: BLE001 - odd prefixes: not a plain literal
            return UNKNOWN
        return value if isinstance(value, (int, float, str)) else UNKNOWN
    if (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)
            and isinstance(expr.expression, (cst.Integer, cst.Float))):
        value = _cst_literal(expr.expression)
        return UNKNOWN if value is UNKNOWN else -value
    return UNKNOWN


def of_cst(call) -> CallShape:
    """The shape of a ``libcst.Call``."""
    positional, star, double_star = 0, False, False
    keywords: Dict[str, object] = {}
    for arg in call.args:
        if arg.star == "**":
            double_star = True
        elif arg.star:
            star = True
        elif arg.keyword is not None:
            keywords.setdefault(arg.keyword.value, _cst_literal(arg.value))
        else:
            positional += 1
    return CallShape(positional, star, double_star, keywords)


# -- ast -------------------------------------------------------------------------------------
def _ast_literal(expr) -> object:
    kind = type(expr)
    if kind is ast.Constant:
        value = expr.value
        return value if value is None or type(value) in (bool, int, float, str) else UNKNOWN
    if kind is ast.UnaryOp and type(expr.op) is ast.USub and type(expr.operand) is ast.Constant:
        value = expr.operand.value
        return -value if type(value) in (int, float) else UNKNOWN
    return UNKNOWN


def of_ast(call: ast.Call) -> CallShape:
    """The shape of an ``ast.Call``: the same as ``of_cst`` of the same text (``ast`` keeps
    the positional arguments and ``*x`` in ``args``, keywords and ``**x`` in ``keywords``)."""
    positional, star = 0, False
    for arg in call.args:
        if type(arg) is ast.Starred:
            star = True
        else:
            positional += 1
    keywords: Dict[str, object] = {}
    double_star = False
    for keyword in call.keywords:
        if keyword.arg is None:
            double_star = True
        else:
            keywords.setdefault(keyword.arg, _ast_literal(keyword.value))
    return CallShape(positional, star, double_star, keywords)
