"""Which writes inside a ``summon_full_params`` block edit parameters.

A write (``facts.index`` records every one as a ``Mutation``) edits parameters when what it
writes to comes from the gathered module: the module itself (``model.fc.weight = ...``,
``model.load_state_dict(sd)``), a name bound from it without a copy (``w = model.fc.weight``,
``for p in model.parameters()``, ``for k, v in model.state_dict().items()``).  Writes to
anything else (a dict of CPU copies, a stats object, an accumulator tensor, another
module's ``.weight``/``.data`` such as an inference engine's copy) are not edits of the
gathered parameters: they survive ``writeback=False`` unchanged.  These are the edits the
file shows, for rules that flag them (FSD005 in a summon block; FSD116 between FSDP2's
``unshard()`` and ``reshard()``, ``param_edits_between``); whether a fix may drop an edit is the
wider question of ``facts.read_only_blocks``.  ``.clone()``, ``.item()``, ``.tolist()`` and unknown calls
make a copy; views (``.detach()``, ``.view()``, ``.data``, ``.to()``, ``.cpu()``, which
return the same storage when nothing moves) do not.
"""

from __future__ import annotations

from typing import FrozenSet, Iterable, List, Optional, Set

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import ModuleFacts, Mutation, WithBlock

PARAM_ATTRS = frozenset({"weight", "bias", "data", "grad"})
# Methods whose result shares storage (or yields the module's own tensors/submodules).
_SAME_STORAGE = frozenset(
    {
        "detach", "view", "view_as", "reshape", "flatten", "narrow", "select", "squeeze", "unsqueeze",
        "t", "transpose", "permute", "expand", "expand_as", "as_strided", "to", "cpu", "cuda", "contiguous",
        "float", "half", "bfloat16", "parameters", "named_parameters", "buffers", "named_buffers",
        "state_dict", "modules", "named_modules", "children", "named_children", "get_submodule",
        "get_parameter", "items", "values", "split", "chunk", "unbind", "__getitem__",
    }
)
# Builtins that keep the elements of what they are given.
_SAME_ELEMENTS = frozenset({"list", "tuple", "dict", "sorted", "reversed", "enumerate", "zip", "iter", "filter", "getattr"})


def under(dotted: str, names: FrozenSet[str]) -> bool:
    """``dotted`` is one of ``names`` or an attribute path below one (``model.fc.weight``)."""
    parts = dotted.split(".")
    return any(".".join(parts[:i]) in names for i in range(1, len(parts) + 1))


def _root(expr: cst.BaseExpression, names: FrozenSet[str], helpers: FrozenSet[str] = frozenset()) -> bool:
    """``expr`` is (a view of) something reachable from one of ``names``; ``helpers``: the
    file's functions, whose result on such an argument is taken to be part of it
    (``for n, m in lora_modules(model)``: the submodules)."""
    while True:
        dotted = dotted_name(expr)
        if dotted is not None:
            return under(dotted, names)
        if isinstance(expr, cst.Attribute):
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _SAME_STORAGE:
                expr = func.value
            elif isinstance(func, cst.Name) and func.value in _SAME_ELEMENTS and expr.args:
                return any(_root(a.value, names, helpers) for a in expr.args if not a.keyword)
            elif isinstance(func, cst.Name) and func.value in helpers and expr.args:
                return any(_root(a.value, names, helpers) for a in expr.args)
            else:
                return False
        elif isinstance(expr, (cst.Tuple, cst.List)):
            return any(_root(e.value, names, helpers) for e in expr.elements)
        else:
            return False


def _bound_part(binding) -> cst.BaseExpression:
    """What a tuple target's element is bound from, where the value shows it: ``a, b = x, y``;
    ``for (n, p), q in zip(m.named_parameters(), other.parameters())`` binds ``q`` from the
    second iterable; ``for i, p in enumerate(...)`` binds ``i`` from no tensor."""
    value, index = binding.value, binding.index
    if index is None:
        return value
    if binding.kind == "assign" and isinstance(value, (cst.Tuple, cst.List)) and index < len(value.elements):
        return value.elements[index].value
    if binding.kind == "for" and isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
        positional = [a.value for a in value.args if a.keyword is None and not a.star]
        if value.func.value == "zip" and len(positional) == len(value.args) and index < len(positional):
            return positional[index]
        if value.func.value == "enumerate" and positional:
            return positional[0] if index == 1 else cst.Integer("0")
    return value


def _tainted(facts: ModuleFacts, function, seeds: Iterable[str]) -> FrozenSet[str]:
    """The seed names plus every name of ``function`` bound from them without a copy."""
    names: Set[str] = set(seeds)
    local = [b for b in facts.bindings if b.ctx.function is function]
    helpers = frozenset(name for name, infos in facts.functions.items() if any(i.class_def is None for i in infos))
    changed = True
    while changed:
        changed = False
        frozen = frozenset(names)
        for binding in local:
            if binding.target not in names and _root(_bound_part(binding), frozen, helpers):
                names.add(binding.target)
                changed = True
    return frozenset(names)


def bound_from(facts: ModuleFacts, function, names: Iterable[str]) -> FrozenSet[str]:
    """``names`` and every name of ``function`` bound from one of them without a copy
    (``for layer in model.layers``, ``block = model.blocks[0]``): what reaches their modules."""
    return _tainted(facts, function, names)


def param_edits(facts: ModuleFacts, block: WithBlock, modules: Iterable[Optional[str]]) -> List[Mutation]:
    """The writes inside ``block`` that may edit the parameters of ``modules`` (the gathered
    modules' names; None stands for a module expression that is not a name, where any
    write may reach the module)."""
    writes = [m for m in facts.mutations if any(w is block for w in m.ctx.withs)]
    if not writes:
        return []
    modules = list(modules)
    if None in modules:
        return writes
    names = _tainted(facts, writes[0].ctx.function, modules)
    # a write whose target is unknown is assumed to edit
    return [w for w in writes if not w.targets or any(_root(t, names) for t in written(facts, w))]


def param_edits_between(facts: ModuleFacts, function, start: int, end: int, modules: Iterable[str]) -> List[Mutation]:
    """The writes of ``function`` (None: module level) that run after evaluation order
    ``start`` and before ``end`` (``Mutation.order``: source order, so a write between two
    calls of one block, FSDP2's ``m.unshard()`` ... ``m.reshard()``) and may edit the
    parameters of ``modules`` (names), by the same reading as ``param_edits``."""
    writes = [m for m in facts.mutations if m.ctx.function is function and start <= m.order < end]
    if not writes:
        return []
    names = _tainted(facts, function, modules)
    # only writes whose target is seen (a flag, unlike ``param_edits``' "may edit")
    return [w for w in writes if any(_root(t, names) for t in written(facts, w))]


def written(facts: ModuleFacts, write: Mutation) -> tuple:
    """What ``write`` changes: a method changes its receiver, not its arguments
    (``ema[n].add_(p)`` reads ``p``); a function of a module (``init.zeros_(w)``) or a bare
    function (``setattr(m, ...)``) its first argument, which ``facts.index`` records too."""
    node = write.node
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and write.targets
        and write.targets[0] is node.func.value
        and facts.qualname(node.func) is None
    ):
        return write.targets[:1]
    return write.targets
