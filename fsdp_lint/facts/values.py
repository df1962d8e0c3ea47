"""Reading literal values out of expressions without evaluating anything."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from fsdp_lint.lazy_libcst import cst

UNKNOWN = object()


def literal_bool(expr: Optional[cst.BaseExpression]):
    """True/False for the literals (and 1/0); UNKNOWN for anything else."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    if isinstance(expr, cst.Integer) and expr.value in ("0", "1"):
        return expr.value == "1"
    return UNKNOWN


def literal_string(expr: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(expr, cst.SimpleString):
        try:
            value = expr.evaluated_value
        except Exception:  # noqa: BLE001 - odd prefixes: not a plain literal
            return None
        return value if isinstance(value, str) else None
    return None


def literal_key(subscript: cst.Subscript) -> Optional[str]:
    """The key of ``x["key"]`` when it is one literal string; None for anything else
    (a slice, several indices, a key that is not a literal)."""
    index = subscript.slice[0].slice if len(subscript.slice) == 1 else None
    return literal_string(index.value) if isinstance(index, cst.Index) else None


def bind_arguments(
    args: Sequence[cst.Arg], params: Sequence[str]
) -> Tuple[Dict[str, cst.Arg], bool]:
    """Map call arguments to parameter names; the flag says ``*x``/``**x`` made it incomplete."""
    bound: Dict[str, cst.Arg] = {}
    opaque = False
    position = 0
    for arg in args:
        if arg.star:
            opaque = True
            continue
        if arg.keyword is not None:
            bound[arg.keyword.value] = arg
        else:
            if opaque:
                continue  # after *args the positions are unknown
            if position < len(params):
                bound[params[position]] = arg
            position += 1
    return bound, opaque


def keyword_args(call: cst.Call) -> Dict[str, cst.Arg]:
    return {a.keyword.value: a for a in call.args if a.keyword is not None}


def positional_args(call: cst.Call) -> List[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def first_positional(call: cst.Call) -> Optional[cst.Arg]:
    return next((a for a in call.args if a.keyword is None and not a.star), None)
