"""FSDP2 gradient norms: which expressions are a DTensor norm of sharded gradients.

``clip_grad_norm_``/``get_total_norm`` over the parameters of a module sharded with
``fully_shard`` (``m.parameters()``, a list or comprehension over them, a name bound to
one), and ``torch.norm(p.grad)``/``p.grad.norm()`` in a loop over such parameters, are
DTensors (``_NormPartial``, or ``Replicate()`` for the total norm from torch 2.11).
``norm_sources`` names them once per module: FSD106 reads them (a per-rank read), and the
collectives fact counts ``.full_tensor()``/``.redistribute()`` on them (a collective).
"""

from __future__ import annotations

import string
from typing import Dict, Iterator, List, Optional, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.fsdp_modules import fsdp_modules, fully_sharded, sharded_here_or_passed
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Binding, CallSite, ModuleFacts
from fsdp_lint.facts.scopes import latest_binding
from fsdp_lint.facts.values import bind_arguments

TOTAL_NORM = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.get_total_norm",
        "torch.nn.utils.clip_grad.get_total_norm",
    }
)
NORM_FUNCTIONS = frozenset({"torch.norm", "torch.linalg.norm", "torch.linalg.vector_norm"})
# methods between the norm and the read that keep it a DTensor
PASS_THROUGH = frozenset({"detach", "cpu", "float", "double", "mean", "sum", "clone", "squeeze", "to", "cuda"})
# DTensor methods that run a collective (every rank of the mesh must call them)
GATHERS = frozenset({"full_tensor", "redistribute"})
# reads of a tensor's value that give this rank's local part of a sharded DTensor
LOCAL_READS = frozenset({"item", "tolist", "to_local", "numpy"})
BUILTIN_LOCAL_READS = frozenset({"float", "int"})
# methods every DTensor has (so code on the branch of ``if not hasattr(norm, "item"):``
# never holds one: ``conditions.tested_without``)
DTENSOR_METHODS = LOCAL_READS | GATHERS | PASS_THROUGH


def norm_sources(facts: ModuleFacts) -> Tuple[Dict[int, str], Dict[str, List[Binding]]]:
    """(id of each expression that is a sharded norm -> its description, binding target ->
    the bindings of a name to one), computed once per module."""
    return facts.cached("dtensor_norm_sources", _compute)


def _compute(facts: ModuleFacts):
    modules = fsdp_modules(facts)
    sources: Dict[int, str] = {}
    named: Dict[str, List[Binding]] = {}
    if not modules.fsdp2_wraps and facts.project is None:
        return sources, named  # (with a project, other files may pass a sharded module in)
    for site in facts.calls:
        what = _norm_source(facts, site)
        if what is not None:
            sources[id(site.node)] = what
    for binding in facts.bindings:
        if id(binding.value) in sources:
            named.setdefault(binding.target, []).append(binding)
    return sources, named


def sharded_norm(facts: ModuleFacts, expr, site: CallSite) -> Optional[str]:
    """The description of the sharded norm ``expr`` is (itself, or the name it was last
    bound to before ``site``), after any ``PASS_THROUGH`` methods; None when it is not one."""
    sources, named = norm_sources(facts)
    if not sources:
        return None
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and expr.func.attr.value in PASS_THROUGH and id(expr) not in sources:
        expr = expr.func.value
    what = sources.get(id(expr))
    if what is not None:
        return what
    name = dotted_name(expr)
    if name is None or name not in named:
        return None
    return bound_source(facts, site, name, named, sources)


def sharded_parameter(facts: ModuleFacts, expr, site: CallSite) -> bool:
    """``expr`` is the loop variable of an enclosing ``for p in m.parameters()`` (or
    ``for n, p in m.named_parameters()``, a list or comprehension over them) where ``m`` is
    sharded with ``fully_shard``: a DTensor parameter."""
    name = dotted_name(expr)
    if name is None:
        return False
    modules = fsdp_modules(facts)
    if not modules.fsdp2_wraps:
        return False
    for loop in site.ctx.loops:
        node = loop.node
        if isinstance(node, cst.For) and name in _loop_names(node.target) and _from_fsdp2(facts, node.iter, site):
            return True
    return False


def sharded_module(facts: ModuleFacts, expr, site: CallSite) -> bool:
    """``expr`` names a module sharded with ``fully_shard`` in scope at ``site`` (its
    parameters are DTensors): a helper's DTensor gather over them is a collective
    (``facts.helpers``, ``needs="fsdp2"``)."""
    return fully_sharded(facts, expr, site.ctx, site.order) is not None


def _norm_source(facts, site):
    node = site.node
    qualname = facts.qualname(node.func)
    if qualname in TOTAL_NORM:
        bound, _ = bind_arguments(node.args, ("parameters",))
        first = bound.get("parameters") or bound.get("tensors")
        if first is not None and _from_fsdp2(facts, first.value, site):
            return f"the total norm from `{dotted_name(site.node.func)}`"
        return None
    target = None
    if qualname in NORM_FUNCTIONS and node.args and node.args[0].keyword is None:
        target = node.args[0].value
    elif site.attr == "norm" and isinstance(node.func, cst.Attribute) and qualname is None:
        target = node.func.value
    if not (isinstance(target, cst.Attribute) and target.attr.value == "grad"):
        return None
    param = dotted_name(target.value)
    if param is None:
        return None
    for loop in site.ctx.loops:
        loop_node = loop.node
        if not isinstance(loop_node, cst.For) or param not in _loop_names(loop_node.target):
            continue
        if _from_fsdp2(facts, loop_node.iter, site):
            return f"the norm of `{param}.grad`"
    return None

def _loop_names(target):
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {e.value.value for e in target.elements if isinstance(e.value, cst.Name)}
    return set()

def _from_fsdp2(facts, expr, site, depth=0) -> bool:
    """``m.parameters()`` / ``m.named_parameters()`` (or a comprehension or list over it,
    or a local name bound to one) where ``m`` is sharded by ``fully_shard`` in scope."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and expr.func.attr.value in ("parameters", "named_parameters"):
        return sharded_here_or_passed(facts, expr.func.value, site.ctx, site.order)
    if isinstance(expr, cst.Call) and dotted_name(expr.func) in ("list", "tuple") and expr.args:
        return _from_fsdp2(facts, expr.args[0].value, site, depth + 1)
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp)):
        loop = expr.for_in
        return _from_fsdp2(facts, loop.iter, site, depth + 1)
    name = dotted_name(expr)
    if name is not None and depth < 3:
        latest = latest_binding(facts, name, site.ctx, site.order, plain=False, kinds=("assign", "for", "with"))
        if latest is not None and (latest.ctx.function is site.ctx.function or "." in name):
            return _from_fsdp2(facts, latest.value, site, depth + 1)
    return False


def bound_source(facts, site, name, named, sources):
    """The latest binding of ``name`` before ``site`` (same function) is a norm source."""
    latest = latest_binding(facts, name, site.ctx, site.order, plain=False, kinds=("assign", "for", "with"))
    if latest is None or not (latest.ctx.function is site.ctx.function or "." in name):
        return None
    if latest not in named.get(name, ()):
        return None
    return sources[id(latest.value)]


def formatted_values(facts: ModuleFacts) -> Iterator[Tuple[CallSite, cst.BaseExpression, str]]:
    """(the call, a value it formats with a non-empty spec, the read as written: ``{:.4f}``,
    ``format(..., ".4f")``): a field of an f-string among the call's arguments
    (``logger.info(f"{norm:.4f}")``, no ``!r``/``!s`` conversion) or bound to a name (the
    binding stands for the call), ``format(value, spec)``, and a field of a literal's
    ``.format(...)`` (``"{:.4f}".format(norm)``, ``"{n:.2f}".format(n=norm)``).  A spec that
    is itself an f-string field counts (it is never empty where a read is meant).

    ``Tensor.__format__`` formats a 0-dim tensor through ``.item()`` only when its type is
    exactly ``Tensor``; a DTensor goes to ``object.__format__``, which refuses any spec:
    ``TypeError: unsupported format string passed to DTensor.__format__`` (torch/_tensor.py;
    measured on torch 2.13.0)."""
    for site in facts.calls:
        node = site.node
        func = node.func
        if isinstance(func, cst.Name) and func.value == "format" and facts.qualname(func) is None \
                and len(node.args) == 2 and not any(a.keyword or a.star for a in node.args):
            spec = node.args[1].value
            if not (isinstance(spec, cst.SimpleString) and spec.evaluated_value == ""):
                yield site, node.args[0].value, f"format(..., {facts.module.code_for_node(spec)})"
            continue
        if isinstance(func, cst.Attribute) and func.attr.value == "format" \
                and isinstance(func.value, (cst.SimpleString, cst.ConcatenatedString)):
            yield from _format_method_fields(site, func.value, node)
            continue
        for arg in node.args:
            for field in _fstring_fields(arg.value):
                yield site, field.expression, _field(facts, field)
    for binding in facts.bindings:  # ``line = f"... {norm:.4f}"``: where the binding stands
        if binding.kind == "assign":
            for field in _fstring_fields(binding.value):
                where = CallSite(binding.value, binding.ctx, binding.order)
                yield where, field.expression, _field(facts, field)


def _field(facts: ModuleFacts, field: cst.FormattedStringExpression) -> str:
    return "{:" + "".join(facts.module.code_for_node(p) for p in field.format_spec) + "}"


def _fstring_fields(expr) -> Iterator[cst.FormattedStringExpression]:
    """The fields with a format spec of the f-strings in ``expr`` (not inside a call of
    its own: that call is a site of its own)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            continue
        if isinstance(node, cst.FormattedString):
            for part in node.parts:
                if isinstance(part, cst.FormattedStringExpression) and part.format_spec and part.conversion is None:
                    yield part
            continue
        if isinstance(node, (cst.ConcatenatedString, cst.BinaryOperation)):
            stack.extend((node.left, node.right))
        elif isinstance(node, (cst.Tuple, cst.List)):
            stack.extend(e.value for e in node.elements)


def _format_method_fields(site: CallSite, literal, node: cst.Call) -> Iterator[Tuple[CallSite, cst.BaseExpression, str]]:
    text = literal.evaluated_value if isinstance(literal, cst.SimpleString) else None
    if isinstance(literal, cst.ConcatenatedString):
        parts = [literal.left, literal.right]
        if all(isinstance(p, cst.SimpleString) for p in parts):
            text = "".join(p.evaluated_value for p in parts)
    if not isinstance(text, str):
        return
    positional = [a.value for a in node.args if a.keyword is None and not a.star]
    if any(a.star for a in node.args):
        return
    keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
    auto = 0
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError:
        return
    for _, field, spec, conversion in fields:
        if field is None:
            continue
        if field == "":
            index: object = auto
            auto += 1
        elif field.isdigit():
            index = int(field)
        elif field.isidentifier():
            index = field
        else:
            continue  # ``{0.attr}``, ``{x[0]}``: a part of the argument
        value = positional[index] if isinstance(index, int) and index < len(positional) else keywords.get(index)
        if value is not None and spec and conversion is None:
            yield site, value, f"{{:{spec}}}"
