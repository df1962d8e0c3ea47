"""Where a value comes from: an expression followed back to the expressions that produce it.

``sources(facts, expr, ctx, order)`` follows, within one module:
- names through the bindings that reach the use (``facts.scopes``), module constants,
  ``self.<attr>`` across the methods of a class;
- a parameter of a function into the arguments of the calls of that function seen on the
  way (a wrapper called as ``wrap(net, cpu_offload=...)``);
- calls of functions and methods defined in this file into their ``return`` values, and a
  tuple target (``model, opt = setup()``) into the matching element;
- conditional expressions into both branches; ``m.to(...)``/``m.cuda()``/``m.half()``
  (which return ``m``) into ``m``.
What it cannot follow (a parameter with no call seen, a helper from another file, a loop
variable) makes the answer incomplete: rules decide how much an incomplete answer is worth.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import List, Optional, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Binding, Context, Guard, ModuleFacts, Mutation
from fsdp_lint.facts.scopes import (
    argument_for, calls_by_callee_name, function_info, lookup, methods_of, module_functions,
)
from fsdp_lint.facts.values import literal_key, literal_string

MAX_DEPTH = 8
# Methods that return their receiver (nn.Module's fluent API).
# calls that return their first argument wrapped so that its parameters, ``state_dict`` and
# ``load_state_dict`` are the argument's own (``torch.compile(model)``: an ``OptimizedModule``
# whose state dict is ``model``'s, keys prefixed ``_orig_mod.``): what the argument is, the
# result is, for every question about its FSDP units
TRANSPARENT_WRAPPERS = frozenset({"torch.compile"})
RETURNS_SELF = frozenset(
    {"to", "cuda", "cpu", "half", "float", "bfloat16", "double", "train", "eval", "requires_grad_", "to_empty", "apply"}
)


@dataclass(frozen=True)
class Source:
    """An expression a value may come from, with where it is evaluated."""

    expr: cst.BaseExpression
    ctx: Context
    order: int
    via: Tuple[cst.Call, ...] = ()  # calls of in-file functions passed through (innermost last)


@dataclass
class Sources:
    found: List[Source] = field(default_factory=list)
    complete: bool = True  # every path was followed to an expression
    # attributes where a path stopped: nothing in the file binds them (``model.module``,
    # ``trainer.model``); ``complete`` is False then.  What such an attribute means is the
    # domain facts' question (``fsdp_modules.origins``: the inner module of a wrap)
    unbound: List[Source] = field(default_factory=list)
    # parameters where a path stopped, no call of their function passed through: (name,
    # the function's context).  What the function's callers pass for them is a domain
    # question (``facts.callers``); ``other_gaps`` says whether a path stopped elsewhere too
    open_params: List[Tuple[str, Context]] = field(default_factory=list)
    other_gaps: Optional[bool] = None  # None: every gap is another one (``not complete``)

    def __post_init__(self) -> None:
        if self.other_gaps is None:
            self.other_gaps = not self.complete

    def add(self, other: "Sources") -> None:
        self.found.extend(other.found)
        self.unbound.extend(other.unbound)
        self.open_params.extend(other.open_params)
        self.complete = self.complete and other.complete
        self.other_gaps = self.other_gaps or other.other_gaps


def called_functions(facts: ModuleFacts, call: cst.Call, ctx: Context):
    """The functions of this file ``call`` reaches: by bare name, or ``self.method(...)``."""
    func = call.func
    if isinstance(func, cst.Name):
        return module_functions(facts, func.value)
    dotted = dotted_name(func)
    if dotted is not None and dotted.count(".") == 1 and dotted.startswith("self.") and ctx.class_def is not None:
        return methods_of(facts, ctx.class_def, dotted.split(".")[1])
    return []


def _returns(facts: ModuleFacts, info, call: cst.Call, via, index, depth, extra=()) -> Sources:
    """What the function ``info`` returns, read at each ``return`` (with ``extra``: the
    events that change what a name holds there, such as an in-place ``fully_shard(model)``
    of the function's own parameter before ``return model``)."""
    result = Sources()
    returns = [r for r in facts.returns if r.ctx.function is info.node and r.value is not None]
    if not returns:
        return Sources(complete=False)
    for ret in returns:
        value = ret.value
        if index is not None:
            if isinstance(value, (cst.Tuple, cst.List)) and index < len(value.elements):
                value = value.elements[index].value
            else:
                result.add(Sources(complete=False))
                continue
        result.add(sources(facts, value, ret.ctx, ret.order, via + (call,), depth + 1, extra))
    return result


def handed_back(facts: ModuleFacts, value) -> Optional[cst.BaseExpression]:
    """The operand a call hands back as its value: the receiver of a ``RETURNS_SELF``
    method (``model.to(device)``), the first argument of a ``TRANSPARENT_WRAPPERS`` call
    (``torch.compile(model)``); None for anything else."""
    if not isinstance(value, cst.Call):
        return None
    func = value.func
    if isinstance(func, cst.Attribute) and func.attr.value in RETURNS_SELF and facts.qualname(func) is None:
        return func.value
    if facts.qualname(func) in TRANSPARENT_WRAPPERS and value.args and not value.args[0].star \
            and value.args[0].keyword is None:
        return value.args[0].value
    return None


def _on_path(binding: Binding, use: Optional[Context]) -> Context:
    """The binding's context with the tests around the use it reaches (same function): the
    value followed from there is the one that runs on the use's path.  In ``raw = model.module
    if distributed and not use_fsdp else model`` read under ``if not use_fsdp:``, the ``else``
    arm's ``model`` is the one of a run that is not distributed.  ``conditions`` reads only
    names bound once before a test, so a test true at the use says the same at the binding."""
    ctx = binding.ctx
    if use is None or use.function is not ctx.function or not use.guards:
        return ctx
    mine = {(id(g.node), g.branch) for g in ctx.guards}
    more = tuple(g for g in use.guards if (id(g.node), g.branch) not in mine)
    return replace(ctx, guards=ctx.guards + more) if more else ctx


def _from_binding(facts: ModuleFacts, binding: Binding, via, depth, extra=(), use: Optional[Context] = None) -> Sources:
    if binding.kind != "assign":
        return Sources(complete=False)  # a loop element or a context manager's value
    value = binding.value
    if binding.index is None:
        if isinstance(value, cst.IfExp) or handed_back(facts, value) is not None:
            # the arms' origins (or the value a call hands back: ``torch.compile(model)``,
            # ``model.to(device)``) are read on the use's path
            return sources(facts, value, _on_path(binding, use), binding.order, via, depth + 1, extra)
        return sources(facts, value, binding.ctx, binding.order, via, depth + 1, extra)
    if isinstance(value, (cst.Tuple, cst.List)) and binding.index < len(value.elements):
        return sources(facts, value.elements[binding.index].value, binding.ctx, binding.order, via, depth + 1, extra)
    if isinstance(value, cst.Call):
        infos = called_functions(facts, value, binding.ctx)
        if len(infos) == 1:
            return _returns(facts, infos[0], value, via, binding.index, depth, extra)
    return Sources(complete=False)


def _parameter(facts: ModuleFacts, name: str, ctx: Context, via, depth) -> Sources:
    """A parameter's value: the argument of the innermost call passed through."""
    info = function_info(facts, ctx.function)
    if info is None:
        return Sources(complete=False)
    if not via:
        return Sources(complete=False, open_params=[(name, ctx)], other_gaps=False)
    known, expr = argument_for(via[-1], info, name)
    if not known:
        return Sources(complete=False)
    if expr is None:
        return Sources([Source(cst.Name("None"), ctx, 0, via[:-1])])
    if any(p.default is expr for p in (*info.node.params.params, *info.node.params.kwonly_params)):
        return sources(facts, expr, ctx, 0, via[:-1], depth + 1)
    caller = _caller_context(facts, via[-1])
    if caller is None:
        return Sources(complete=False)
    return sources(facts, expr, caller[0], caller[1], via[:-1], depth + 1)


def calls_of(facts: ModuleFacts, function) -> List[cst.Call]:
    """The calls in this file that reach ``function``: by name; for a method, ``self.name(...)``
    in its class and ``obj.name(...)`` on an instance of its class (``ema = EMA(m)``)."""
    info = function_info(facts, function)
    if info is None:
        return []
    return facts.cached(("calls_of", id(info.node)), lambda f: _calls_of(f, info))


def _calls_of(facts: ModuleFacts, info) -> List[cst.Call]:
    by_name = calls_by_callee_name(facts)
    if info.class_def is None:
        return [site.node for site in by_name.get((False, info.name), ())]
    found = []
    for site in by_name.get((True, info.name), ()):
        receiver = dotted_name(site.node.func.value)
        if receiver == "self":
            if site.ctx.class_def is info.class_def:
                found.append(site.node)
        elif receiver is not None and _instance_of(facts, site.node.func.value, site, info.class_def):
            found.append(site.node)
    return found


def _instance_of(facts: ModuleFacts, expr, site, class_def) -> bool:
    for source in sources(facts, expr, site.ctx, site.order).found:
        call = source.expr
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and facts.classes.get(call.func.value) is class_def:
            return True
    return False


def _caller_context(facts: ModuleFacts, call: cst.Call) -> Optional[Tuple[Context, int]]:
    site = facts.call_site(call)
    return (site.ctx, site.order) if site is not None else None


def dict_entries(facts: ModuleFacts, value: cst.BaseExpression) -> Optional[dict]:
    """A dict display or ``dict(k=v)``: its string keys and value expressions; None otherwise."""
    entries = {}
    if isinstance(value, cst.Dict):
        for element in value.elements:
            if not isinstance(element, cst.DictElement):
                return None  # ``{**other}``
            key = literal_string(element.key)
            if key is None:
                return None
            entries[key] = element.value
        return entries
    if isinstance(value, cst.Call) and dotted_name(value.func) == "dict" and facts.qualname(value.func) is None:
        for arg in value.args:
            if arg.star or arg.keyword is None:
                return None
            entries[arg.keyword.value] = arg.value
        return entries
    return None


def written_value(write: Mutation, target: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The value a plain assignment writes to ``target`` (an attribute or subscript the
    ``Mutation`` records: ``p.requires_grad = False``, ``cfg["key"] = value``); None for
    ``+=``, ``del`` and the targets of a call."""
    statement = write.ctx.statement
    assign = next((a for a in getattr(statement, "body", ()) if isinstance(a, cst.Assign)
                   and any(t.target is target for t in a.targets)), None)
    return assign.value if assign is not None else None


# methods that change a dict in place: what it holds after one of them is not read
DICT_MUTATORS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"})


@dataclass
class ItemWrites:
    """What a function writes into a dict item by item (``item_writes``): ``entries``,
    key -> (value, its write), for ``name["key"] = value`` with a literal key before the
    use; ``opaque`` when some write anywhere in the function cannot be read (a key that is
    not a literal, ``del name[...]``, ``name[k] += ...``, ``name.update(...)`` and the
    other ``DICT_MUTATORS``)."""

    entries: dict = field(default_factory=dict)
    opaque: bool = False
    # some entry is written under an ``if`` the use does not stand under: it may be missing
    # (or hold the display's value) at the use
    conditional: bool = False
    conditional_keys: set = field(default_factory=set)  # the keys of those writes

    @property
    def readable(self) -> bool:
        """Every write is read and runs whenever the use does: the dict at the use is the
        display with ``entries`` written over it."""
        return not self.opaque and not self.conditional

    def readable_for(self, key: str) -> bool:
        """``readable`` for the one entry ``key``: every write is read, and none of ``key``
        may or may not have run (``if cpu_offload: kwargs["cpu_offload"] = ...`` leaves
        ``kwargs["mp_policy"]`` what the display says)."""
        return not self.opaque and key not in self.conditional_keys


def item_writes(facts: ModuleFacts, name: str, ctx: Context, order: int) -> ItemWrites:
    """The writes into the dict held by ``name`` in the function of ``ctx`` (module level:
    None), ``order`` being where the dict is used (``fsdp_kwargs = {}``, then
    ``fsdp_kwargs["mp_policy"] = MixedPrecisionPolicy(...)``, then
    ``fully_shard(m, **fsdp_kwargs)``).  A write under an ``if`` that the use does not
    stand under is one that may have run (``conditional``)."""
    found = ItemWrites()
    for write in facts.mutations:
        if write.ctx.function is not ctx.function:
            continue
        for target in write.targets:
            if not (isinstance(target, cst.Subscript) and dotted_name(target.value) == name):
                continue
            key = literal_key(target)
            value = written_value(write, target)
            if key is None or value is None:
                found.opaque = True  # ``d[k] = v``, ``del d["k"]``, ``d["k"] += v``
            elif write.order < order:  # (a write records the order reached, not one of its own)
                found.entries[key] = (value, write)
                guards = write.ctx.guards
                if ctx.guards[:len(guards)] != guards:
                    found.conditional = True
                    found.conditional_keys.add(key)
    for site in facts.calls:
        func = site.node.func
        if (site.ctx.function is ctx.function and isinstance(func, cst.Attribute)
                and func.attr.value in DICT_MUTATORS and dotted_name(func.value) == name):
            found.opaque = True
    return found


def _item(facts: ModuleFacts, expr: cst.Subscript, ctx: Context, order: int, via, depth) -> Sources:
    """``cfg["key"]`` where ``cfg`` is a dict display or ``dict(...)`` (a constant, a variable,
    an argument): the value stored under that key; with a key that is not a literal
    (``STRATEGIES[args.strategy]``), any value of the dict."""
    index = expr.slice[0].slice if len(expr.slice) == 1 else None
    if not isinstance(index, cst.Index):
        return Sources(complete=False)
    containers = sources(facts, expr.value, ctx, order, via, depth + 1)
    return _lookup(facts, containers, literal_string(index.value), None, ctx, order, via, depth)


def _lookup(facts: ModuleFacts, containers: Sources, key: Optional[str], default, ctx: Context, order: int, via,
            depth) -> Sources:
    """What ``container[key]`` (``default`` None) or ``container.get(key, default)`` may
    be, ``containers`` being what the container may be (dict displays): the entry under a
    literal key, else any entry; for ``.get``, also the default (``None`` when not given)
    where the key may be missing."""
    result = Sources(complete=containers.complete)  # (an entry of a parameter: not the parameter)
    missing = False
    for source in containers.found:
        entries = dict_entries(facts, source.expr)
        if entries is None or (key is not None and key not in entries and default is None):
            result.add(Sources(complete=False))
            continue
        if key is not None and key in entries:
            chosen = [entries[key]]
        else:
            chosen = list(entries.values()) if key is None else []
            missing = True
        for value in chosen:
            result.add(sources(facts, value, source.ctx, source.order, source.via, depth + 1))
    if missing and default is not None:
        result.add(sources(facts, default, ctx, order, via, depth + 1))
    return result


def _dict_get(facts: ModuleFacts, call: cst.Call, ctx: Context, order: int, via, depth) -> Optional[Sources]:
    """``d.get(key[, default])`` where every value ``d`` may be is a dict display; None
    when ``d`` is something else (then the call is a value the file cannot see into)."""
    found = sources(facts, call.func.value, ctx, order, via, depth + 1)
    if not found.found or any(dict_entries(facts, s.expr) is None for s in found.found):
        return None
    key = literal_string(call.args[0].value)
    default = call.args[1].value if len(call.args) == 2 else cst.Name("None")
    return _lookup(facts, found, key, default, ctx, order, via, depth)


def _in_arm(facts: ModuleFacts, expr: cst.IfExp, arm: str, ctx: Context, order: int) -> Context:
    """``ctx`` with the conditional expression's test as one more guard: in ``model.module
    if ddp else model``, the ``model`` of the ``else`` arm is not the one ``if ddp: model =
    FSDP(model)`` bound (``flow.exclusive`` reads both tests)."""
    guard = Guard(node=expr, loop_depth=len(ctx.loops), with_depth=len(ctx.withs), periodic=False,
                  leaves_loop=False, branch=arm, order=order, bindings=facts.binding_index)
    return replace(ctx, guards=ctx.guards + (guard,))


def _literal(expr):
    """The value of a string, integer or ``True``/``False``/``None`` literal, else a sentinel."""
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value
    if isinstance(expr, cst.Integer):
        return int(expr.value)
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    return _UNDECIDED


_UNDECIDED = object()


def _decided(facts: ModuleFacts, test, ctx: Context, order: int, via, depth: int) -> Optional[bool]:
    """The value of ``name == literal`` / ``name != literal`` (either side) when every value
    the name may have is a literal (a parameter read through the call passed through:
    ``_build(m, "actor")``); None when it cannot be told."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
        return None
    left, right = test.left, target.comparator
    if _literal(left) is not _UNDECIDED:
        left, right = right, left
    constant = _literal(right)
    if constant is _UNDECIDED or _literal(left) is not _UNDECIDED:
        return None
    found = sources(facts, left, ctx, order, via, depth + 1)
    values = {_literal(s.expr) for s in found.found}
    if not found.complete or not found.found or _UNDECIDED in values or len(values) != 1:
        return None
    equal = values.pop() == constant
    return equal if isinstance(target.operator, cst.Equal) else not equal


def sources(
    facts: ModuleFacts,
    expr: Optional[cst.BaseExpression],
    ctx: Context,
    order: int,
    via: Tuple[cst.Call, ...] = (),
    depth: int = 0,
    extra: Tuple[Binding, ...] = (),
) -> Sources:
    """The expressions ``expr`` (used at ``ctx``/``order``) may evaluate to.

    ``extra``: additional bindings to consider for a name (events such as an in-place
    ``fully_shard(model)``, which rebinds nothing but changes what ``model`` is)."""
    if expr is None or depth > MAX_DEPTH:
        return Sources(complete=False)
    if isinstance(expr, cst.IfExp):
        branch = _decided(facts, expr.test, ctx, order, via, depth)
        if branch is not None:  # ``x if role == "ref" else y`` with ``role`` known
            return sources(facts, expr.body if branch else expr.orelse, ctx, order, via, depth + 1, extra)
        result = sources(facts, expr.body, _in_arm(facts, expr, "body", ctx, order), order, via, depth + 1, extra)
        result.add(sources(facts, expr.orelse, _in_arm(facts, expr, "orelse", ctx, order), order, via, depth + 1, extra))
        return result
    if isinstance(expr, cst.Subscript):
        return _item(facts, expr, ctx, order, via, depth)
    if isinstance(expr, cst.Call):
        func = expr.func
        operand = handed_back(facts, expr)
        if operand is not None:
            return sources(facts, operand, ctx, order, via, depth + 1, extra)
        if isinstance(func, cst.Attribute) and func.attr.value == "get" and facts.qualname(func) is None \
                and 1 <= len(expr.args) <= 2 and not any(a.star or a.keyword for a in expr.args):
            got = _dict_get(facts, expr, ctx, order, via, depth)
            if got is not None:
                return got
        infos = called_functions(facts, expr, ctx)
        if len(infos) == 1 and facts.qualname(func) is None:
            return _returns(facts, infos[0], expr, via, None, depth, extra)
        return Sources([Source(expr, ctx, order, via)])
    dotted = dotted_name(expr)
    if dotted is None or (isinstance(expr, cst.Name) and expr.value in ("None", "True", "False")):
        return Sources([Source(expr, ctx, order, via)])
    if facts.qualname(expr) is not None:
        return Sources([Source(expr, ctx, order, via)])  # an imported name: itself
    found = lookup(facts, dotted, ctx, order, [b for b in extra if b.target == dotted])
    if found.param is not None:
        return _parameter(facts, found.param, ctx, via, depth)
    if not found.bindings:
        if isinstance(expr, cst.Name) and (expr.value in facts.functions or expr.value in facts.classes):
            return Sources([Source(expr, ctx, order, via)])  # a def or class of this file: itself
        unbound = [Source(expr, ctx, order, via)] if isinstance(expr, cst.Attribute) else []
        return Sources(complete=False, unbound=unbound)
    result = Sources()
    for binding in found.bindings:
        if binding.value is expr:
            continue
        if binding.kind == "event":
            result.found.append(Source(binding.value, binding.ctx, binding.order, via))
            continue
        result.add(_from_binding(facts, binding, via, depth, extra, ctx))
    return result
