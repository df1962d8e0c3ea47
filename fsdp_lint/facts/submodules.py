"""Which modules a module expression is part of: whose weights it holds.

``weight_holders(facts, expr, ctx, order)`` reads, where ``expr`` is used:
- an attribute or item of a module (``model.model.layers[0]``): that module and each one
  it is read from, the closest first;
- a loop variable (``for block in layers:``): what the loop iterates over, or the one name
  a call in its place reads (``enumerate(model.layers)``, ``find_blocks(model)``);
- ``getattr(model, "lm_head", None)``: an attribute of ``model``;
- a list or tuple of modules: the holders every element shares;
- a local name: the holders every value it may hold shares, ``None`` left out
  (``layers = None``, then ``if ...: layers = model.model.language_model.layers`` /
  ``elif ...: layers = model.model.layers``: ``model.model`` and ``model``).
A cast of any holder cast the expression's weights too (``dtypes.module_in_dtype``).
"""

from __future__ import annotations

from typing import List, Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Context, ModuleFacts
from fsdp_lint.facts.scopes import lookup
from fsdp_lint.facts.values import literal_string

MAX_DEPTH = 4


def weight_holders(facts: ModuleFacts, expr: Optional[cst.BaseExpression], ctx: Context, order: int,
                   depth: int = 0) -> List[str]:
    """The dotted names of the modules whose weights ``expr`` holds where it is used at
    ``ctx``/``order``, the closest first (``expr`` itself first where it has a name)."""
    if expr is None or depth > MAX_DEPTH:
        return []
    if isinstance(expr, (cst.List, cst.Tuple)):
        elements = [e.value for e in expr.elements if isinstance(e, cst.Element)]
        if not elements or len(elements) != len(expr.elements):
            return []
        each = [weight_holders(facts, e, ctx, order, depth + 1) for e in elements]
        return [name for name in each[0] if all(name in other for other in each[1:])]
    found: List[str] = []
    while True:
        inner = _getattr_receiver(facts, expr)
        if inner is not None:
            expr = inner
            continue
        if not isinstance(expr, (cst.Attribute, cst.Subscript)):
            break
        name = dotted_name(expr)
        if name is not None:
            found.append(name)
        expr = expr.value
    if isinstance(expr, cst.Name):
        found += [n for n in _name_holders(facts, expr.value, ctx, order, depth) if n not in found]
    return found


def _getattr_receiver(facts: ModuleFacts, expr) -> Optional[cst.BaseExpression]:
    """``x`` of ``getattr(x, "name")`` / ``getattr(x, "name", default)``: an attribute of ``x``
    (or the default, which is no module)."""
    if not isinstance(expr, cst.Call) or facts.qualname(expr.func) is not None:
        return None
    if dotted_name(expr.func) != "getattr" or not 2 <= len(expr.args) <= 3:
        return None
    if any(arg.star or arg.keyword is not None for arg in expr.args) or literal_string(expr.args[1].value) is None:
        return None
    return expr.args[0].value


def _name_holders(facts: ModuleFacts, name: str, ctx: Context, order: int, depth: int) -> List[str]:
    """``name``, then what the loop binding it iterates over holds, or else what every
    value its bindings give it (``None`` left out) holds in common."""
    found = [name]
    loop = _loop_over(ctx, name)
    if loop is not None:
        if isinstance(loop.iter, (cst.Name, cst.Attribute, cst.Subscript)) or _getattr_receiver(facts, loop.iter):
            held = weight_holders(facts, loop.iter, ctx, order, depth + 1)
        else:  # ``enumerate(model.layers)``, ``find_blocks(model)``: the one name it reads
            read = {n.value for n in _names_read(loop.iter)}
            held = weight_holders(facts, cst.Name(read.pop()), ctx, order, depth + 1) if len(read) == 1 else []
        return found + [n for n in held if n != name]
    seen = lookup(facts, name, ctx, order)
    bound = [b for b in seen.bindings if not _is_none(b.value)]
    if seen.param is not None or not bound or any(b.kind != "assign" or b.index is not None for b in bound):
        return found
    each = [weight_holders(facts, b.value, b.ctx, b.order, depth + 1) for b in bound]
    return found + [n for n in each[0] if n != name and all(n in other for other in each[1:])]


def _loop_over(ctx: Context, name: str) -> Optional[cst.For]:
    """The innermost ``for`` enclosing ``ctx`` whose target binds ``name`` (plain or in a
    tuple: ``for i, block in enumerate(...)``)."""
    for loop in reversed(ctx.loops):
        node = loop.node
        if not isinstance(node, cst.For):
            continue
        targets = node.target.elements if isinstance(node.target, cst.Tuple) else [node.target]
        for target in targets:
            value = target.value if isinstance(target, cst.Element) else target
            if isinstance(value, cst.Name) and value.value == name:
                return node
    return None


def _names_read(expr):
    """The bare names whose values ``expr`` reads (not the functions it calls, not attribute
    names): ``model`` in ``enumerate(model.model.layers)`` and in ``find_blocks(model)``."""
    if isinstance(expr, cst.Name):
        yield expr
    elif isinstance(expr, cst.Attribute):
        yield from _names_read(expr.value)
    elif isinstance(expr, cst.Subscript):
        yield from _names_read(expr.value)
    elif isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute):
            yield from _names_read(expr.func.value)
        for arg in expr.args:
            yield from _names_read(arg.value)


def _is_none(expr) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"
