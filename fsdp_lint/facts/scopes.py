"""Which bindings a name use can see: Python's scopes, approximated for one module.

- a plain name inside a function: the function's own bindings that reach the use
  (``facts.flow.reaching``); if the function binds it nowhere and it is not a parameter,
  the module's bindings (a global);
- ``self.<attr>`` inside a method: the method's own bindings that reach the use, the
  bindings in a ``def`` nested in it where that ``def`` is called before the use (its body
  runs there, not where it is written), and every binding in the class's other methods
  (any of them may have run before), unless the method's own binding overwrites them on
  every path to the use, or the other method itself calls, before it returns, a method that
  binds the attribute again in every distributed run (``_rebound_before_return``);
- a name at module level: the module's reaching bindings.
A binding made only in a single-process branch (``facts.processes``) reaches only uses in
such a branch: it does not happen in the run FSDP shards.
A function parameter has no binding here: its value comes from the caller (``Scope.param``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.conditions import class_flags_contradict
from fsdp_lint.facts.flow import exclusive, on_every_path, reaching
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Binding, CallSite, Context, FunctionInfo, ModuleFacts
from fsdp_lint.facts.processes import holds_when_sharded, in_single_process_branch


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
    if not in_single_process_branch(ctx):
        # a binding made only when the program runs in one process does not happen in the
        # run FSDP shards (``facts.processes``): ``if not dist.is_initialized(): model =
        # model.to(device); return`` before ``fully_shard(model)``
        candidates = [b for b in candidates if not in_single_process_branch(b.ctx)]
    head = dotted.split(".", 1)[0]
    if head == "self" and "." in dotted and ctx.class_def is not None:
        inherited = _inherited_methods(facts, ctx.class_def)
        return Lookup(_attribute_bindings(facts, [
            b for b in candidates if b.ctx.class_def is ctx.class_def
            or (b.ctx.function is not None and inherited.get(id(b.ctx.function)) is b.ctx.class_def)], ctx, order))
    if ctx.function is not None:
        local = [b for b in candidates if b.ctx.function is ctx.function]
        info = function_info(facts, ctx.function)
        is_param = info is not None and head in info.param_names + ((info.star_kwargs,) if info.star_kwargs else ())
        if local:
            seen = reaching(local, ctx, order)
            if seen or not is_param or head != dotted:
                return Lookup(seen)
            return Lookup([], param=head)  # a parameter used before the function rebinds it
        if is_param:
            return Lookup([], param=head if head == dotted else None)
        if any(b.ctx.function is ctx.function for b in bindings_of(facts, head)):
            return Lookup([])  # ``x.attr`` of a local ``x``: not seen
        return Lookup([b for b in candidates if b.ctx.function is None])
    module_level = [b for b in candidates if b.ctx.function is None]
    return Lookup(reaching(module_level, ctx, order))


def latest_binding(facts: ModuleFacts, dotted: str, ctx: Context, order: int, plain: bool = True,
                   kinds=("assign",)) -> Optional[Binding]:
    """The latest binding of ``dotted`` that a use at ``ctx``/``order`` may see (``lookup``:
    the function's reaching bindings, a class's for ``self.<attr>``), of one of ``kinds``
    and, with ``plain``, not one element of a tuple target; None when there is none.  The
    one place rules ask "what was this name last set to?"."""
    seen = [b for b in lookup(facts, dotted, ctx, order).bindings
            if b.kind in kinds and (not plain or b.index is None)]
    return max(seen, key=lambda b: b.order) if seen else None


def _inherited_methods(facts: ModuleFacts, class_def) -> Dict[int, object]:
    """The methods of ``class_def``'s base classes in this file (by name, through bases of
    bases) that it inherits, not overrides, or overrides and calls as ``super().name(...)``:
    id of the ``def`` -> the base class defining it.  ``self.policy.v_head = FSDP(...)`` in
    ``BasicTrainer.shard`` binds the attribute for a ``PPOTrainer(BasicTrainer)`` that does
    not define its own ``shard``, or whose ``shard`` begins with ``super().shard()``."""
    def compute(facts: ModuleFacts) -> Dict[int, object]:
        found: Dict[int, object] = {}
        extended = _super_calls(facts, class_def)
        defined = {info.name for infos in facts.functions.values() for info in infos
                   if info.class_def is class_def and info.name not in extended}
        pending, seen = [class_def], {id(class_def)}
        while pending:
            current = pending.pop(0)
            for base in current.bases:
                parent = facts.classes.get(dotted_name(base.value) or "")
                if parent is None or id(parent) in seen:
                    continue
                seen.add(id(parent))
                pending.append(parent)
                for infos in facts.functions.values():
                    for info in infos:
                        if info.class_def is parent and info.name not in defined:
                            found[id(info.node)] = parent
                extended = _super_calls(facts, parent)  # (a chain of ``super()`` calls)
                defined |= {info.name for infos in facts.functions.values() for info in infos
                            if info.class_def is parent and info.name not in extended}
        return found
    return facts.cached(("inherited_methods", id(class_def)), compute)


def _super_calls(facts: ModuleFacts, class_def) -> Set[str]:
    """The methods ``class_def``'s own methods call on ``super()`` (``super().prepare()``,
    ``super(Trainer, self).prepare()``): what the base class's method does then happens
    to the instance too."""
    found: Set[str] = set()
    for site in facts.calls:
        func = site.node.func
        if site.ctx.class_def is class_def and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) \
                and _self_or_super_method(func) is not None:
            found.add(func.attr.value)
    return found


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


def _attribute_bindings(facts: ModuleFacts, bindings: List[Binding], ctx: Context, order: int) -> List[Binding]:
    """Of a class's bindings of one ``self.<attr>``, those a use in a method may see (the
    module docstring's rule)."""
    if ctx.function is None:
        return bindings
    own = reaching([b for b in bindings if b.ctx.function is ctx.function], ctx, order)
    if any(on_every_path(b, ctx) for b in own):
        return own
    found = list(own)
    for binding in bindings:
        if binding.ctx.function is ctx.function:
            continue
        if _rebound_before_return(facts, binding, bindings, ctx.function):
            continue
        places = runs_in(facts, binding.ctx, ctx.function)
        if places is None:
            places = _method_called_at(facts, binding.ctx, ctx)
        if places is None:
            if not class_flags_contradict(binding.ctx, ctx):  # ``if self.is_fsdp:`` in both
                found.append(binding)  # another method: it may have run before
        elif any(done < order and not exclusive(place, ctx) for place, done in places):
            found.append(binding)
    return found


def _method_called_at(facts: ModuleFacts, where: Context, use: Context) -> Optional[List[Tuple[Context, int]]]:
    """Where the method holding ``where`` runs in the use's method, when that method calls it
    itself or through methods of the file that do (``self.shard()``, ``super().prepare()``
    whose body calls ``self.shard()``): the places (context, order when it has returned)
    of those calls, so code of the method counts before the use only where a call returns
    before it.  None when the use's method calls none of them (the method may have run
    before, called from elsewhere)."""
    method = where.function
    info = function_info(facts, method) if method is not None else None
    if info is None or info.class_def is None or info.parent is not None or use.function is None:
        return None
    names, callers = {info.name}, _self_calls(facts)
    for _ in range(MAX_METHOD_DEPTH):  # the methods that call one of them, and so on
        more = {caller for caller, called in callers.items() if called & names} - names
        if not more:
            break
        names |= more
    places = [(site.ctx, site.done) for site in facts.calls
              if site.ctx.function is use.function and _self_or_super_method(site.node.func) in names]
    return places or None


MAX_METHOD_DEPTH = 3


def _self_calls(facts: ModuleFacts) -> Dict[str, Set[str]]:
    """Method name -> the names it calls as ``self.m(...)`` or ``super().m(...)``."""
    def compute(facts: ModuleFacts) -> Dict[str, Set[str]]:
        found: Dict[str, Set[str]] = {}
        for site in facts.calls:
            called = _self_or_super_method(site.node.func)
            if called is not None and site.ctx.function is not None and site.ctx.class_def is not None:
                found.setdefault(site.ctx.function.name.value, set()).add(called)
        return found
    return facts.cached("self_calls", compute)


def _self_or_super_method(func) -> Optional[str]:
    """``m`` of ``self.m`` or ``super().m`` / ``super(Cls, self).m``."""
    if not isinstance(func, cst.Attribute):
        return None
    receiver = func.value
    if isinstance(receiver, cst.Name) and receiver.value == "self":
        return func.attr.value
    if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) and receiver.func.value == "super":
        return func.attr.value
    return None


def _in_every_sharded_run(ctx: Context) -> bool:
    """Code at ``ctx`` runs in every run of its function that shards: in no loop, and every
    ``if`` around it holds then (``processes.holds_when_sharded``: the rest of the method
    after ``if not dist.is_initialized(): ...; return``)."""
    return not ctx.loops and all(holds_when_sharded(g) for g in ctx.guards)


def _rebound_before_return(facts: ModuleFacts, binding: Binding, bindings: List[Binding], viewer) -> bool:
    """The method that makes ``binding`` of ``self.<attr>`` then calls, on every path after
    it and before it returns, another method of its class that binds the attribute again in
    every distributed run: ``self.model = self._load_model(path)`` then ``self._wrap()``,
    whose ``fully_shard(self.model)`` stands after an early return for the single-process
    run. Another method then sees the attribute as that one leaves it, not ``binding``
    (the method called sees ``binding`` itself, and so keeps it)."""
    method, class_def = binding.ctx.function, binding.ctx.class_def
    if method is None or class_def is None or binding.ctx.loops:
        return False
    guards = {(id(g.node), g.branch) for g in binding.ctx.guards}
    exits = [r for r in facts.returns if r.ctx.function is method and r.order > binding.order]
    for site in facts.calls:
        if site.ctx.function is not method or site.order <= binding.order or site.ctx.loops:
            continue
        func = site.node.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
            continue
        if not {(id(g.node), g.branch) for g in site.ctx.guards} <= guards:
            continue  # the call may not run where the binding did
        if any(r.order < site.order for r in exits):
            continue  # a return between them
        for info in methods_of(facts, class_def, func.attr.value):
            if info.node is viewer:
                continue
            early = [r for r in facts.returns if r.ctx.function is info.node and not in_single_process_branch(r.ctx)]
            for other in bindings:
                if other.ctx.function is info.node and _in_every_sharded_run(other.ctx) \
                        and not any(r.order < other.order for r in early):
                    return True
    return False


def calls_by_callee_name(facts: ModuleFacts) -> Dict[Tuple[bool, str], List[CallSite]]:
    """The file's call sites by (called through an attribute?, last name): ``f(...)`` under
    ``(False, "f")``, ``x.f(...)`` under ``(True, "f")``, in file order."""
    return facts.cached("calls_by_callee_name", _calls_by_callee_name)


def _calls_by_callee_name(facts: ModuleFacts) -> Dict[Tuple[bool, str], List[CallSite]]:
    found: Dict[Tuple[bool, str], List[CallSite]] = {}
    for site in facts.calls:
        func = site.node.func
        if isinstance(func, cst.Name):
            found.setdefault((False, func.value), []).append(site)
        elif isinstance(func, cst.Attribute):
            found.setdefault((True, func.attr.value), []).append(site)
    return found


def runs_in(facts: ModuleFacts, where: Context, function) -> Optional[List[Tuple[Context, int]]]:
    """Where code at ``where`` runs inside ``function``, when ``where`` is the body of a
    ``def`` nested in ``function`` (at any depth): the places (context, order when it has
    returned) of the calls of that ``def`` by name in the function it stands in, lifted
    the same way; [] when it is never called there (its body does not run in
    ``function``, as far as the file shows).  None when ``where`` is not nested in
    ``function`` (another method, module level, or ``function`` itself)."""
    inner = where.function
    if inner is None or inner is function:
        return None
    chain = []
    info = function_info(facts, inner)
    while info is not None and info.parent is not None and info.node is not function:
        chain.append(info)
        if info.parent is function:
            break
        info = function_info(facts, info.parent)
    if not chain or chain[-1].parent is not function:
        return None
    places: List[Tuple[Context, int]] = [(where, 0)]
    for info in chain:
        places = [
            (site.ctx, site.done)
            for site in calls_by_callee_name(facts).get((False, info.name), ())
            if site.ctx.function is info.parent
        ]
        if not places:
            return []
    return places


def runs_before(facts: ModuleFacts, first: Context, first_done: int, then: Context, then_order: int) -> bool:
    """Code at ``first`` (returning at order ``first_done``) has run when ``then`` starts,
    in one call of ``then``'s function: it comes earlier in evaluation order (a call's
    arguments before the call) and not in an arm exclusive with ``then``; code in a ``def``
    nested in that function counts where the ``def`` is called.  Code of another function
    may have run before (True: nothing is known)."""
    if first.function is then.function:
        return first_done < then_order and not exclusive(first, then)
    places = runs_in(facts, first, then.function)
    if places is None:
        return True
    return any(done < then_order and not exclusive(place, then) for place, done in places)
