"""Which bindings a name use can see: Python's scopes, approximated for one module.

- a plain name inside a function: the function's own bindings that reach the use
  (``facts.flow.reaching``); if the function binds it nowhere and it is not a parameter,
  the module's bindings (a global);
- ``self.<attr>`` inside a method: every binding of ``self.<attr>`` in the methods of
  the same class (any of them may have run before);
- a name at module level: the module's reaching bindings.
A function parameter has no binding here: its value comes from the caller (``Scope.param``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from fsdp_lint.facts.flow import reaching
from fsdp_lint.facts.model import Binding, Context, FunctionInfo, ModuleFacts


@dataclass
class Lookup:
    bindings: List[Binding]
    param: Optional[str] = None  # the use names this parameter of its function (no binding seen)


def _by_target(facts: ModuleFacts) -> Dict[str, List[Binding]]:
    table: Dict[str, List[Binding]] = {}
    for binding in facts.bindings:
        table.setdefault(binding.target, []).append(binding)
    return table


def bindings_of(facts: ModuleFacts, target: str) -> List[Binding]:
    return facts.cached("bindings_by_target", _by_target).get(target, [])


def _function_infos(facts: ModuleFacts) -> Dict[int, FunctionInfo]:
    return {id(info.node): info for infos in facts.functions.values() for info in infos}


def function_info(facts: ModuleFacts, node) -> Optional[FunctionInfo]:
    return facts.cached("function_infos", _function_infos).get(id(node))


def lookup(facts: ModuleFacts, dotted: str, ctx: Context, order: int, extra=()) -> Lookup:
    """``extra``: events that act as bindings of ``dotted`` (an in-place ``fully_shard``)."""
    candidates = bindings_of(facts, dotted) + list(extra)
    head = dotted.split(".", 1)[0]
    if head == "self" and "." in dotted and ctx.class_def is not None:
        return Lookup([b for b in candidates if b.ctx.class_def is ctx.class_def])
    if ctx.function is not None:
        local = [b for b in candidates if b.ctx.function is ctx.function]
        if local:
            return Lookup(reaching(local, ctx, order))
        info = function_info(facts, ctx.function)
        if info is not None and head in info.param_names + ((info.star_kwargs,) if info.star_kwargs else ()):
            return Lookup([], param=head if head == dotted else None)
        if any(b.ctx.function is ctx.function for b in bindings_of(facts, head)):
            return Lookup([])  # ``x.attr`` of a local ``x``: not seen
        return Lookup([b for b in candidates if b.ctx.function is None])
    module_level = [b for b in candidates if b.ctx.function is None]
    return Lookup(reaching(module_level, ctx, order))


def methods_of(facts: ModuleFacts, class_def, name: str) -> List[FunctionInfo]:
    return [info for info in facts.functions.get(name, ()) if info.class_def is class_def]


def module_functions(facts: ModuleFacts, name: str) -> List[FunctionInfo]:
    """Functions named ``name`` that a call by bare name can reach (not methods)."""
    return [info for info in facts.functions.get(name, ()) if info.class_def is None]


def argument_for(call, info: FunctionInfo, param: str) -> Tuple[bool, Optional[object]]:
    """The expression ``call`` passes for ``param`` of ``info`` (bound like Python does for
    plain positional and keyword arguments; a method's ``self`` is skipped).  Returns
    (known, expression): known False when ``*args``/``**kwargs`` hide it; expression None
    when the parameter takes its default (``info``'s default expression, if any)."""
    names = list(info.param_names)
    if info.class_def is not None and names and names[0] in ("self", "cls"):
        names = names[1:]
    position = 0
    for arg in call.args:
        if arg.star:
            return False, None
        if arg.keyword is not None:
            if arg.keyword.value == param:
                return True, arg.value
            continue
        if position < len(names) and names[position] == param:
            return True, arg.value
        position += 1
    params = info.node.params
    for p in (*params.posonly_params, *params.params, *params.kwonly_params):
        if p.name.value == param:
            return True, p.default
    return True, None
