"""Optimizers built from a module's parameters, aliases of a module, and uses of an optimizer.

An optimizer is a call whose parameter argument (the first positional one, or ``params=``)
holds ``M.parameters()`` / ``M.named_parameters()`` (also inside lists, dicts and
comprehensions) and whose callee is a ``torch.optim`` class (any alias, also held in a
variable: ``optimizer_cls = torch.optim.AdamW``, or chosen by name:
``getattr(torch.optim, config.optimizer)``), a class whose name says optimizer
(``FusedAdam``, ``Adam8bit``, ``Lion``, ...), or a name that says so (``optimizer_cls``,
``self.optim_class``).  ``M.configure_optimizers(...)``, and a call of a function or method of this file that
returns an optimizer it builds from ``self.parameters()``, ``self.model.parameters()`` or a
parameter's ``.parameters()``, build one from the caller's module too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.dataflow import sources, written_value
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts
from fsdp_lint.facts.values import literal_bool
from fsdp_lint.facts.scopes import argument_for, function_info, latest_binding, methods_of, module_functions
from fsdp_lint.facts.walk import push_children

OPTIMIZER_NAME = re.compile(r"(Adam|AdamW|SGD|Adagrad|Adadelta|Adamax|RMSprop|Rprop|Lion|Lamb|LAMB|Adafactor)\w*$")
_PARAMETER_CALLS = frozenset({"parameters", "named_parameters"})
OPTIMIZER_FACTORY_METHODS = frozenset({"configure_optimizers"})


@dataclass(eq=False)
class OptimizerSite:
    site: CallSite
    owner: cst.BaseExpression  # the module whose parameters it holds
    target: Optional[str]  # the name it is bound to

    @property
    def module(self) -> Optional[str]:
        return dotted_name(self.owner)


def _parameters_owner(expr: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The receiver of the first ``X.parameters()`` call inside ``expr``."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value in _PARAMETER_CALLS and dotted_name(node.func.value) is not None:
                return node.func.value
        push_children(node, stack)
    return None


def _owner_through_names(facts: ModuleFacts, site: CallSite, expr) -> Optional[cst.BaseExpression]:
    """``_parameters_owner`` of what the names inside ``expr`` were last bound to in the same
    function before ``site``: param groups built first (``decay = [p for n, p in
    model.named_parameters() if p.dim() >= 2]``; ``AdamW([{"params": decay}])``)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            latest = latest_binding(facts, node.value, site.ctx, site.order, kinds=("assign", "for", "with"))
            if latest is not None and latest.ctx.function is site.ctx.function and not _builds_optimizer_call(facts, latest.value):
                owner = _parameters_owner(latest.value)
                if owner is not None:
                    return owner
        push_children(node, stack)
    return None


def _builds_optimizer_call(facts: ModuleFacts, value) -> bool:
    """``value`` is itself an optimizer's construction: a name bound to it holds an
    optimizer, not parameters (``LambdaLR(opt, ...)``, ``get_scheduler(opt)``)."""
    site = facts.call_site(value)
    return site is not None and (_named_optimizer(facts, site) or _holds_optimizer_class(facts, site))


def _named_optimizer(facts: ModuleFacts, site: CallSite) -> bool:
    """The callee says optimizer: a ``torch.optim`` class or an optimizer-like name."""
    qualname = facts.qualname(site.node.func) or ""
    name = site.attr or ""
    if qualname.startswith(torch_api.OPTIMIZER_WRAPPER_MODULES):
        return False  # a scheduler or an SWA wrapper takes an optimizer
    if qualname.startswith(torch_api.OPTIMIZER_PACKAGE + ".") and name[:1].isupper():
        return True
    return optimizer_like_name(name)


def optimizer_like_name(name: str) -> bool:
    """A callee's last name that says optimizer: ``AdamW``, ``Lion8bit``, ``build_optimizer``
    (the screen reads the same words)."""
    return bool(OPTIMIZER_NAME.search(name)) or "optim" in name.lower()


def _class_by_name(facts: ModuleFacts, site: CallSite) -> bool:
    """``getattr(torch.optim, config.optimizer)(...)``: a ``torch.optim`` class chosen by
    name at run time."""
    func = site.node.func
    if not (isinstance(func, cst.Call) and facts.qualname(func.func) is None and dotted_name(func.func) == "getattr"):
        return False
    return bool(func.args) and facts.qualname(func.args[0].value) == torch_api.OPTIMIZER_PACKAGE


def _holds_optimizer_class(facts: ModuleFacts, site: CallSite) -> bool:
    """``optimizer_cls = torch.optim.AdamW``; ``optimizer_cls(...)``."""
    func = site.node.func
    if facts.qualname(func) is not None or not isinstance(func, (cst.Name, cst.Attribute)):
        return False
    for source in sources(facts, func, site.ctx, site.order).found:  # a class held in a variable
        held = facts.qualname(source.expr) or ""
        if held.startswith(torch_api.OPTIMIZER_PACKAGE + ".") and held.rsplit(".", 1)[-1][:1].isupper():
            return True
    return False


def _params_arg(call: cst.Call) -> Optional[cst.Arg]:
    return next((a for a in call.args if (a.keyword is None and not a.star) or (a.keyword and a.keyword.value == "params")), None)


def _factories(facts: ModuleFacts, found: List[OptimizerSite]) -> Dict[int, Tuple[object, str]]:
    """Functions and methods of this file that return an optimizer they build: for each,
    (its FunctionInfo, the owner as the function sees it: "self", "self.model", or a
    parameter's name)."""
    result: Dict[int, Tuple[object, str]] = {}
    built = {id(o.site.node): o for o in found}
    named = {}
    for o in found:
        if o.target is not None:
            named[(id(o.site.ctx.function), o.target)] = o
    for ret in facts.returns:
        value, function = ret.value, ret.ctx.function
        optimizer = built.get(id(value))
        if optimizer is None and value is not None:
            optimizer = named.get((id(function), dotted_name(value)))
        if optimizer is None or optimizer.module is None:
            continue
        info = function_info(facts, function)
        if info is None:
            continue
        head = optimizer.module.split(".", 1)[0]
        if (head == "self" and info.class_def is not None) or head in info.param_names:
            result[id(function)] = (info, optimizer.module)
    return result


def _owner_at_call(facts: ModuleFacts, site: CallSite, info, owner: str) -> Optional[cst.BaseExpression]:
    """The caller's expression for the factory's owner (``self.model`` -> ``trainer.model``)."""
    head, _, rest = owner.partition(".")
    if head == "self":
        func = site.node.func
        receiver = dotted_name(func.value) if isinstance(func, cst.Attribute) else None
        if receiver is None:
            return None
        return cst.parse_expression(receiver + ("." + rest if rest else ""))
    known, expr = argument_for(site.node, info, head)
    base = dotted_name(expr) if known and expr is not None else None
    if base is None:
        return None
    return cst.parse_expression(base + ("." + rest if rest else ""))


def _compute(facts: ModuleFacts) -> List[OptimizerSite]:
    targets = {id(b.value): b.target for b in facts.bindings if b.index is None}
    found: List[OptimizerSite] = []
    candidates = []
    for site in facts.calls:
        arg = _params_arg(site.node)
        by_name = _class_by_name(facts, site)
        if arg is None or arg.star or (site.attr is None and not by_name):
            candidates.append(site)
            continue
        value = arg.value
        direct = isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _PARAMETER_CALLS
        if by_name or _named_optimizer(facts, site) or (direct and _holds_optimizer_class(facts, site)):
            owner = _parameters_owner(value) or _owner_through_names(facts, site, value)
            if owner is not None:
                found.append(OptimizerSite(site, owner, targets.get(id(site.node))))
                continue
        candidates.append(site)
    factories = _factories(facts, found)
    for site in candidates:
        func = site.node.func
        if isinstance(func, cst.Attribute) and func.attr.value in OPTIMIZER_FACTORY_METHODS:
            owner = func.value
        else:
            infos = [i for i in _called(facts, site) if id(i.node) in factories]
            if len(infos) != 1:
                continue
            owner = _owner_at_call(facts, site, infos[0], factories[id(infos[0].node)][1])
        if owner is not None and dotted_name(owner) not in (None, "self"):
            found.append(OptimizerSite(site, owner, targets.get(id(site.node))))
    return found


def _called(facts: ModuleFacts, site: CallSite):
    func = site.node.func
    if isinstance(func, cst.Name) and facts.qualname(func) is None:
        return module_functions(facts, func.value)
    if isinstance(func, cst.Attribute) and dotted_name(func.value) == "self" and site.ctx.class_def is not None:
        return methods_of(facts, site.ctx.class_def, func.attr.value)
    return []


def optimizers(facts: ModuleFacts) -> List[OptimizerSite]:
    return facts.cached("optimizers", _compute)


def aliases(facts: ModuleFacts, function) -> Dict[str, str]:
    """Dotted names of ``function`` bound to one another (``self.model = model``), each
    mapped to one representative: the same module object under two names."""
    key = ("aliases", id(function))
    if key in facts._cache:
        return facts._cache[key]
    parent: Dict[str, str] = {}

    def find(name: str) -> str:
        while parent.get(name, name) != name:
            name = parent[name]
        return name

    for binding in facts.bindings:
        if binding.ctx.function is function and binding.kind == "assign" and binding.index is None:
            value = dotted_name(binding.value)
            if value is not None and facts.qualname(binding.value) is None:
                parent[find(binding.target)] = find(value)
    result = {name: find(name) for name in parent}
    facts._cache[key] = result
    return result


def _holders(facts: ModuleFacts, name: str, function, order: int) -> List[str]:
    """Names bound in ``function`` before ``order`` to a call that is handed ``name`` (a
    scheduler, a trainer or an engine holding the optimizer), while ``name`` still holds the
    value it had."""
    bound = max((b.order for b in facts.bindings if b.target == name and b.ctx.function is function and b.order < order), default=-1)
    found = []
    for binding in facts.bindings:
        if binding.ctx.function is not function or not bound < binding.order < order:
            continue
        if binding.kind != "assign" or binding.index is not None:
            continue
        value = binding.value
        if isinstance(value, cst.Call) and binding.target != name and any(dotted_name(a.value) == name for a in value.args):
            found.append(binding.target)
    return found


def _mentions(node: cst.CSTNode, name: str) -> bool:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, (cst.Name, cst.Attribute)) and dotted_name(item) == name:
            return True
        push_children(item, stack)
    return False


def used_after(facts: ModuleFacts, name: str, function, order: int, _depth: int = 0) -> bool:
    """Whether ``name`` is used after ``order`` in ``function`` (``name.step()``, ``f(name)``,
    ``return model, name``, ``self.opt = name``), also through an object it was handed to
    before ``order`` and that is used after it (``trainer = Trainer(model, optimizer)`` then
    ``trainer.step()``).  An attribute (``self.optimizer``) outlives the function: it is
    used later by whoever holds the object."""
    if "." in name:
        return True
    if _depth < 2 and any(used_after(facts, holder, function, order, _depth + 1) for holder in _holders(facts, name, function, order)):
        return True
    rebinds = [b.order for b in facts.bindings if b.target == name and b.ctx.function is function and b.order > order]
    until = min(rebinds, default=None)  # a new value bound to the name ends the old one's life

    def live(ctx, at: int) -> bool:
        if ctx.function is not function:
            return "." in name
        return at > order and (until is None or at < until)

    for site in facts.calls:
        if not live(site.ctx, site.order):
            continue
        callee = dotted_name(site.node.func) or ""
        if callee.startswith(name + ".") or any(dotted_name(a.value) == name for a in site.node.args):
            return True
    for ret in facts.returns:
        if ret.value is not None and live(ret.ctx, ret.order) and _mentions(ret.value, name):
            return True
    for binding in facts.bindings:
        if binding.target != name and live(binding.ctx, binding.order) and _mentions(binding.value, name):
            return True
    return False


def may_hold_parameters_of(facts: ModuleFacts, name: str, function) -> bool:
    """Whether an optimizer may hold the parameters of the module ``name`` of ``function``.
    False only when the function builds optimizers, the parameters of every one of them come
    from a module this file names, and none is ``name``, one of its parts or a module holding
    it (aliases followed): ``optimizer = AdamW(model.parameters())`` beside a frozen
    ``ref_model``.  A function that builds no optimizer, or a call there that says optimizer
    and whose parameters this file cannot follow (``create_optimizer(model)``), may hand the
    module to one."""
    held = [o for o in optimizers(facts) if o.site.ctx.function is function]
    resolved = {id(o.site.node) for o in held}
    if not held or any(o.module is None for o in held):
        return True
    if any(s.ctx.function is function and id(s.node) not in resolved and _named_optimizer(facts, s) for s in facts.calls):
        return True
    same = aliases(facts, function)
    target = same.get(name, name)
    for optimizer in held:
        owner = same.get(optimizer.module, optimizer.module)
        if owner == target or owner.startswith(target + ".") or target.startswith(owner + "."):
            return True
    return False


_PARAMETER_LISTS = frozenset({"parameters", "named_parameters"})


def frozen_modules(facts: ModuleFacts, function, order: int) -> frozenset:
    """The modules (dotted names) every parameter of which ``function`` freezes before
    ``order``: ``for _, p in model.named_parameters(): p.requires_grad = False`` (or
    ``p.requires_grad_(False)``; a loop over ``model.parameters()`` alike) with nothing
    under an ``if`` in between, or ``model.requires_grad_(False)``.  No optimizer updates
    such parameters (a LoRA base model, a frozen encoder).  Empty when the function turns
    ``requires_grad`` back on anywhere (``p.requires_grad = True``,
    ``m.requires_grad_()``): which parameters train again is not read."""
    def compute(f: ModuleFacts) -> Dict[int, list]:
        found: Dict[int, list] = {}
        thawed = set()
        for write in f.mutations:
            for target in write.targets:
                if isinstance(target, cst.Attribute) and target.attr.value == "requires_grad":
                    value = written_value(write, target)
                    if literal_bool(value) is False:
                        module = _loop_module(write.ctx, target.value)
                        if module is not None:
                            found.setdefault(id(write.ctx.function), []).append((write.order, module))
                            continue
                    thawed.add(id(write.ctx.function))
        for site in f.calls:
            if site.attr != "requires_grad_" or not isinstance(site.node.func, cst.Attribute):
                continue
            first = next((a for a in site.node.args if a.keyword is None or a.keyword.value == "requires_grad"), None)
            if first is None or literal_bool(first.value) is not False:
                thawed.add(id(site.ctx.function))
                continue
            receiver = site.node.func.value
            module = _loop_module(site.ctx, receiver)
            if module is None and not site.ctx.guards:
                module = dotted_name(receiver)
            if module is not None:
                found.setdefault(id(site.ctx.function), []).append((site.order, module))
        return {key: value for key, value in found.items() if key not in thawed}

    by_function = facts.cached("frozen_modules", compute)
    return frozenset(module for at, module in by_function.get(id(function), ()) if at < order)


def _loop_module(ctx, parameter: cst.BaseExpression) -> Optional[str]:
    """``m`` when ``parameter`` is the parameter a ``for`` over ``m.parameters()`` /
    ``m.named_parameters()`` binds, and it is written on every iteration (no ``if`` inside
    the loop), with no ``if`` around the loop either."""
    if not isinstance(parameter, cst.Name) or not ctx.loops or ctx.guards:
        return None
    loop = ctx.loops[-1].node
    if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call):
        return None
    func = loop.iter.func
    if not (isinstance(func, cst.Attribute) and func.attr.value in _PARAMETER_LISTS):
        return None
    target = loop.target
    last = target.elements[-1].value if isinstance(target, (cst.Tuple, cst.List)) and target.elements else target
    if not (isinstance(last, cst.Name) and last.value == parameter.value):
        return None
    return dotted_name(func.value)


def may_train_parameters_of(facts: ModuleFacts, name: str, function, order: int) -> bool:
    """Whether an optimizer may update the parameters of the module ``name`` of
    ``function`` after ``order``: one may hold them (``may_hold_parameters_of``) and the
    function has not frozen them before (``frozen_modules``: the module or one holding it,
    aliases followed)."""
    if not may_hold_parameters_of(facts, name, function):
        return False
    same = aliases(facts, function)
    target = same.get(name, name)
    for module in frozen_modules(facts, function, order):
        owner = same.get(module, module)
        if target == owner or target.startswith(owner + "."):
            return False
    return True
