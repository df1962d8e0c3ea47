"""FSDP constructions, what a model expression is, and each construction's configuration.

- ``fsdp_modules(facts)``: every torch FSDP construction in the module (``FSDP(m, ...)``,
  also through ``functools.partial(FSDP, ...)`` and ``wrap(m)`` under ``with
  enable_wrap(wrapper_cls=FSDP, ...)``; FSDP2 ``fully_shard(m, ...)``, also the
  call of an in-file function that runs ``fully_shard`` on its parameter: torchtitan's
  ``apply_fsdp(model)``), and the file-level name sets (``fsdp1``/``fsdp2``) kept for sites
  whose model cannot be resolved.
- ``origins(facts, expr, ctx, order)``: the constructions a model expression at a site may
  come from (``facts.dataflow``), whether every path was followed, and whether some path
  leads to a module that is not FSDP-wrapped at that point.
- ``wrap_config(facts, origin)``: a construction's effective configuration (offload,
  device, ``use_orig_params``, sharding strategy), through variables, module constants,
  dicts passed as ``**kwargs``, ``functools.partial``, ``enable_wrap``, conditional expressions and the
  arguments of in-file wrapper functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.dataflow import ItemWrites, Source, Sources, calls_of, dict_entries, item_writes, sources
from fsdp_lint.facts.callers import passed_for
from fsdp_lint.facts.helper_summary import Helper, argument as helper_argument, project_helper
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Binding, CallSite, ModuleFacts
from fsdp_lint.facts.scopes import argument_for, function_info, lookup
from fsdp_lint.facts.conditions import excludes_value, never_together
from fsdp_lint.facts.values import UNKNOWN, first_positional, keyword_args, literal_bool, literal_string


@dataclass(eq=False)
class FsdpWrap:
    """``target = FSDP(module, ...)`` (target may be None for a nested or unbound wrap)."""

    site: CallSite
    target: Optional[str]
    wrapped: Optional[str]  # dotted name of the module passed in
    kwargs: Dict[str, cst.Arg]
    fsdp2: bool = False  # ``fully_shard(module)`` rather than ``FSDP(module)``
    stars: Tuple[cst.BaseExpression, ...] = ()  # ``**cfg`` arguments
    # ``functools.partial(FSDP, ...)`` this call goes through, or the ``enable_wrap(wrapper_cls=FSDP,
    # ...)`` a ``wrap(m)`` runs under: a call whose keywords configure the wrap
    partial: Optional[Source] = None
    # the call of an in-file function that shards its parameter in place: the
    # ``fully_shard(param, ...)`` inside it (its arguments are that call's, ``kwargs`` empty)
    through: Optional["FsdpWrap"] = None
    # the call of a project function of another file that shards its parameter in place,
    # or returns it wrapped in FSDP1 (``facts.helper_summary``): where, ``parallelize.py:42``
    elsewhere: str = ""
    # that FSDP1 wrap's configuration as the helper's summary tells it (``wrap_config``)
    summary: Optional[Helper] = None

    @property
    def row_node(self) -> cst.CSTNode:
        return self.site.node


@dataclass(frozen=True)
class Origin:
    wrap: FsdpWrap
    via: Tuple[cst.Call, ...] = ()


@dataclass
class Origins:
    wraps: List[Origin] = field(default_factory=list)
    complete: bool = True  # every path was followed (False: some path is not visible here)
    plain: bool = False  # some path leads to a module that is not FSDP-wrapped there
    # some path leads to a call this file cannot see into (``config.instantiate(cfg)``,
    # ``build_model()``): the value is this file's to know, and it is unknown; the policy for
    # the unknown is that such a value has no configuration another model of the file has
    opaque: bool = False
    # FSDP1 wraps whose inner module (``model.module``) some path leads to: that path still
    # counts as not followed (``complete`` False), this says where it went
    inner: List[Origin] = field(default_factory=list)
    # a parameter of a top-level function: the FSDP modules calls in other project files
    # pass for it (``facts.passed_arguments.ExternalWrap``; ``origins_with_callers`` only)
    external: list = field(default_factory=list)
    # parameters some path stopped at that are annotated with torch's FSDP class (``def
    # __init__(self, wrapped_model: FSDP)``): an FSDP1 module whose configuration is not seen
    declared: List[cst.Param] = field(default_factory=list)

    @property
    def fsdp1(self) -> List[Origin]:
        return [o for o in self.wraps if not o.wrap.fsdp2]

    @property
    def fsdp2(self) -> List[Origin]:
        return [o for o in self.wraps if o.wrap.fsdp2]


@dataclass
class FsdpModules:
    wraps: List[FsdpWrap]
    fsdp1: Set[str]  # dotted names holding an FSDP1-wrapped module somewhere in the file
    fsdp2: Set[str]  # dotted names passed to / bound from fully_shard
    fsdp2_wraps: List[FsdpWrap]
    events: List[Binding]  # in-place ``fully_shard(m)``: from there on ``m`` is FSDP2-sharded
    by_call: Dict[int, FsdpWrap] = field(default_factory=dict)


def _first_positional(call: cst.Call) -> Optional[str]:
    for arg in call.args:
        if arg.keyword is None and not arg.star:
            return dotted_name(arg.value)
        break
    module = keyword_args(call).get("module")
    return dotted_name(module.value) if module is not None else None


def _stars(call: cst.Call) -> Tuple[cst.BaseExpression, ...]:
    return tuple(a.value for a in call.args if a.star == "**")


def _is_fsdp_partial(facts: ModuleFacts, value: cst.BaseExpression) -> bool:
    return (
        isinstance(value, cst.Call)
        and facts.qualname(value.func) == "functools.partial"
        and bool(value.args)
        and facts.qualname(value.args[0].value) in torch_api.FSDP_CLASS
    )


def _partial_of_fsdp(facts: ModuleFacts, site: CallSite) -> Optional[Source]:
    """``wrap = functools.partial(FSDP, **cfg)``; ``wrap(m)``: the partial(...) call."""
    func = site.node.func
    if facts.qualname(func) is not None:
        return None
    for source in sources(facts, func, site.ctx, site.order).found:
        if _is_fsdp_partial(facts, source.expr):
            return source
    return None


def _enabled_wrap(facts: ModuleFacts, site: CallSite) -> Optional[Source]:
    """``wrap(m)`` in ``with enable_wrap(wrapper_cls=FSDP, **cfg):`` (of its function): the
    ``enable_wrap(...)`` call, whose keywords ``wrap`` passes on to ``FSDP``."""
    for block in reversed(site.ctx.withs):
        for item in block.node.items:
            call = item.item
            if not (isinstance(call, cst.Call) and facts.qualname(call.func) in torch_api.ENABLE_WRAP):
                continue
            wrapper = keyword_args(call).get("wrapper_cls")
            if wrapper is None or facts.qualname(wrapper.value) not in torch_api.FSDP_CLASS:
                return None
            return Source(call, site.ctx, site.order)
    return None


def _compute(facts: ModuleFacts) -> FsdpModules:
    targets = {id(b.value): b.target for b in facts.bindings if b.index is None and b.kind == "assign"}
    wraps: List[FsdpWrap] = []
    fsdp2_wraps: List[FsdpWrap] = []
    fsdp1: Set[str] = set()
    fsdp2: Set[str] = set()
    events: List[Binding] = []
    partial_names = {b.target for b in facts.bindings if _is_fsdp_partial(facts, b.value)}
    for site in facts.calls:
        if site.attr is None:
            continue
        qualname = facts.qualname(site.node.func)
        partial = None
        if qualname in torch_api.WRAP_FUNCTION:
            partial = _enabled_wrap(facts, site)
            if partial is None:
                continue
        elif qualname not in torch_api.FSDP_CLASS and qualname not in torch_api.FULLY_SHARD:
            if facts.project is not None and (_project_shard(facts, site, targets, fsdp2_wraps, fsdp2, events)
                                              or _project_wrap(facts, site, targets, wraps, fsdp1)):
                continue
            if dotted_name(site.node.func) not in partial_names:
                continue
            partial = _partial_of_fsdp(facts, site)
            if partial is None:
                continue
        target = targets.get(id(site.node))
        wrapped = _first_positional(site.node)
        if qualname in torch_api.FULLY_SHARD:
            wrap = FsdpWrap(site, target, wrapped, keyword_args(site.node), True, _stars(site.node))
            fsdp2_wraps.append(wrap)
            fsdp2.update(n for n in (wrapped, target) if n is not None)
            if wrapped is not None:
                events.append(Binding(wrapped, site.node, site.ctx, site.order, "event"))
        else:
            wrap = FsdpWrap(site, target, wrapped, keyword_args(site.node), False, _stars(site.node), partial)
            wraps.append(wrap)
            if target is not None:
                fsdp1.add(target)
    _through_helpers(facts, targets, fsdp2_wraps, fsdp2, events)
    for name, hints in facts.annotated.items():
        for annotation in hints:
            if facts.qualname(annotation) in torch_api.FSDP_CLASS:
                fsdp1.add(name)
    by_call = {id(w.site.node): w for w in wraps + fsdp2_wraps}
    return FsdpModules(wraps, fsdp1, fsdp2 - fsdp1, fsdp2_wraps, events, by_call)


MAX_HELPER_DEPTH = 3
_NOT_A_MODEL = re.compile(r"tokenizer|processor|config|feature_extractor|image_processor", re.I)


def names_a_model(receiver: str, wrapped) -> bool:
    """Whether the dotted ``receiver`` of a save (``self.model``, ``unwrapped_model``) is a
    model: one of the ``wrapped`` names (or its ``.module``), else a name saying "model" that
    names no tokenizer, processor or config."""
    base = receiver[: -len(".module")] if receiver.endswith(".module") else receiver
    if base in wrapped:
        return True
    last = receiver.rsplit(".", 1)[-1]
    return "model" in last.lower() and not _NOT_A_MODEL.search(receiver)


def _project_shard(facts: ModuleFacts, site: CallSite, targets, fsdp2_wraps: List[FsdpWrap], fsdp2: Set[str],
                   events: List[Binding]) -> bool:
    """A call of a project function of another file that shards the module passed for one
    of its parameters with ``fully_shard`` (torchtitan's ``apply_fsdp(model, mesh)`` in
    ``parallelize.py``): an FSDP2 wrap of that argument, as ``_through_helpers`` makes of
    this file's own."""
    helper = project_helper(facts, site.node.func)
    if helper is None or helper.shards is None:
        return False
    passed = dotted_name(helper_argument(helper, site.node, helper.shards))
    if passed is None:
        return False
    wrap = FsdpWrap(site, targets.get(id(site.node)), passed, {}, True,
                    elsewhere=helper.place(helper.shard_at, None))
    fsdp2_wraps.append(wrap)
    fsdp2.update(n for n in (passed, wrap.target) if n is not None)
    events.append(Binding(passed, site.node, site.ctx, site.order, "event"))
    return True


def _project_wrap(facts: ModuleFacts, site: CallSite, targets, wraps: List[FsdpWrap], fsdp1: Set[str]) -> bool:
    """``model = wrap_model(model, cfg)`` where the project function ``wrap_model`` of
    another file returns its parameter wrapped in FSDP1 (``Helper.wraps``): an FSDP1 wrap
    of that argument (``model = build_fsdp_model(cfg)``, ``Helper.wrap_built``: of a
    module no name of this file holds), configured as the summary says (``wrap_config``).  The argument may
    be any expression (``wrap_model(build_model(cfg), cfg)``: a wrap of no name, as
    ``FSDP(Net())`` is); a call that does not pass it is no wrap."""
    helper = project_helper(facts, site.node.func)
    if helper is None or (helper.wraps is None and not helper.wrap_built):
        return False
    passed = None
    if not helper.wrap_built:
        argument = helper_argument(helper, site.node, helper.wraps)
        if argument is None:
            return False
        passed = dotted_name(argument)
    wrap = FsdpWrap(site, targets.get(id(site.node)), passed, {}, elsewhere=helper.place(helper.wrap_at, None),
                    summary=helper)
    wraps.append(wrap)
    if wrap.target is not None:
        fsdp1.add(wrap.target)
    return True


def _through_helpers(facts: ModuleFacts, targets, fsdp2_wraps: List[FsdpWrap], fsdp2: Set[str], events: List[Binding]) -> None:
    """``fully_shard`` changes its argument in place, so ``def apply_fsdp(model):
    fully_shard(model)`` shards the module its caller passes: each call of such an in-file
    function (``apply_fsdp(net)``, ``self.shard(net)``, a helper's helper) is an FSDP2 wrap
    of that argument.  Only a parameter sharded as it is (not rebound before the call) counts."""
    pending = [(wrap, wrap, 0) for wrap in fsdp2_wraps]
    seen: Set[Tuple[int, str]] = set()
    while pending:
        inner, wrap, depth = pending.pop()
        function = wrap.site.ctx.function
        if wrap.wrapped is None or function is None or depth >= MAX_HELPER_DEPTH:
            continue
        info = function_info(facts, function)
        if info is None or wrap.wrapped not in info.param_names:
            continue
        if lookup(facts, wrap.wrapped, wrap.site.ctx, wrap.site.order).param != wrap.wrapped:
            continue  # rebound in the function before the call: not the caller's module
        for call in calls_of(facts, function):
            site = facts.call_site(call)
            known, argument = argument_for(call, info, wrap.wrapped)
            passed = dotted_name(argument) if known and argument is not None else None
            if site is None or passed is None or (id(call), passed) in seen:
                continue
            seen.add((id(call), passed))
            outer = FsdpWrap(site, targets.get(id(call)), passed, {}, True, through=inner)
            fsdp2_wraps.append(outer)
            fsdp2.update(n for n in (passed, outer.target) if n is not None)
            events.append(Binding(passed, call, site.ctx, site.order, "event"))
            pending.append((inner, outer, depth + 1))


def wrap_line(wrap: FsdpWrap, row) -> str:
    """Where a wrap is, for messages: ``line 9``, or for a project helper of another file
    that shards, ``line 9, sharded in parallelize.py:42`` (one that returns an FSDP1 wrap:
    ``line 9, wrapped in wrap.py:12``)."""
    verb = "sharded" if wrap.fsdp2 else "wrapped"
    return f"line {row(wrap.site.node)}" + (f", {verb} in {wrap.elsewhere}" if wrap.elsewhere else "")


def fsdp_modules(facts: ModuleFacts) -> FsdpModules:
    return facts.cached("fsdp_modules", _compute)


def uses_fsdp(facts: ModuleFacts) -> bool:
    """The module builds a torch FSDP model itself (``FSDP(...)`` or ``fully_shard(...)``)."""
    modules = fsdp_modules(facts)
    return bool(modules.wraps or modules.fsdp2_wraps)


def other_fsdp_imported(facts: ModuleFacts) -> bool:
    """fairscale (or another library) provides an FSDP of its own in this module."""
    return facts.imports.imports_from("fairscale")


# -- what a model expression is -------------------------------------------------------
def _is_plain_module(facts: ModuleFacts, expr: cst.BaseExpression) -> bool:
    """A value that is certainly not an FSDP-wrapped module: a class of this file, a
    ``torch.nn`` module, ``DistributedDataParallel``, a ``from_pretrained``/``from_config``."""
    if not isinstance(expr, cst.Call):
        return False
    func = expr.func
    qualname = facts.qualname(func) or ""
    if qualname.startswith("torch.nn.") and not qualname.startswith("torch.nn.utils"):
        return True
    if isinstance(func, cst.Name) and func.value in facts.classes and qualname == "":
        return True
    return isinstance(func, cst.Attribute) and func.attr.value in ("from_pretrained", "from_config")


# ``.module`` steps ``origins`` follows from an inner module to its wrapper
MAX_INNER_STEPS = 3


def origins(facts: ModuleFacts, expr: Optional[cst.BaseExpression], ctx, order: int, via=(),
            depth: int = 0) -> Origins:
    """``via``: the calls of in-file functions passed through to reach ``ctx`` (a
    parameter then reads the argument of the innermost one); ``depth``: how many
    ``.module`` steps were taken to get here (``root.module``, at most ``MAX_INNER_STEPS``:
    ``module = module.module`` in a loop would otherwise never end)."""
    modules = fsdp_modules(facts)
    if expr is None:
        return Origins(complete=False)
    found: Sources = sources(facts, expr, ctx, order, via, extra=tuple(modules.events))
    result = Origins(complete=found.complete)
    for source in found.found:
        wrap = modules.by_call.get(id(source.expr))
        if wrap is not None:
            result.wraps.append(Origin(wrap, source.via))
        elif _is_plain_module(facts, source.expr):
            result.plain = True
        else:
            result.complete = False
            result.opaque = result.opaque or isinstance(source.expr, cst.Call)
    for name, where in found.open_params:
        param = _declared_fsdp1(facts, name, where)
        if param is not None:
            result.declared.append(param)
    for source in found.unbound:
        if source.expr.attr.value in torch_api.FSDP1_INNER_MODULE and len(via) < 3 and depth < MAX_INNER_STEPS:
            outer = origins(facts, source.expr.value, source.ctx, source.order, source.via, depth + 1)
            result.inner.extend(o for o in outer.fsdp1 if o not in result.inner)
    return result


def _declared_fsdp1(facts: ModuleFacts, name: str, ctx) -> Optional[cst.Param]:
    """The parameter ``name`` of ``ctx``'s function when its annotation is torch's FSDP
    class (``wrapped_model: FSDP``, ``model: FullyShardedDataParallel``)."""
    info = function_info(facts, ctx.function) if ctx.function is not None else None
    if info is None:
        return None
    params = info.node.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        if param.name.value == name and param.annotation is not None \
                and facts.qualname(param.annotation.annotation) in torch_api.FSDP_CLASS:
            return param
    return None


def origins_with_callers(facts: ModuleFacts, expr: Optional[cst.BaseExpression], ctx, order: int) -> Origins:
    """``origins``, and where ``expr`` reads a parameter of the function it is in, also
    through each call of that function in this file (a ``snapshot(model)`` helper): complete
    when every such call's argument was followed."""
    result = origins(facts, expr, ctx, order)
    if result.complete or ctx.function is None:
        return result
    result.external = _passed_from_other_files(facts, expr, ctx, order)
    callers = calls_of(facts, ctx.function)
    if not callers:
        return result
    merged = Origins(list(result.wraps), complete=True, plain=result.plain, opaque=result.opaque,
                     inner=list(result.inner), external=list(result.external), declared=list(result.declared))
    info = function_info(facts, ctx.function)
    for call in callers:
        through = origins(facts, expr, ctx, order, (call,))
        if isinstance(expr, cst.Name) and info is not None and expr.value in info.param_names:
            # the caller's own parameter, passed on: what other files pass for it
            known, argument = argument_for(call, info, expr.value)
            site = facts.call_site(call)
            if known and argument is not None and site is not None:
                methods = frozenset({info.name}) if info.class_def is not None else frozenset()
                merged.external.extend(_passed_from_other_files(facts, argument, site.ctx, site.order, methods))
        merged.wraps.extend(o for o in through.wraps if o not in merged.wraps)
        merged.plain = merged.plain or through.plain
        merged.opaque = merged.opaque or through.opaque
        merged.complete = merged.complete and through.complete
        merged.inner.extend(o for o in through.inner if o not in merged.inner)
    return merged


def _passed_from_other_files(facts: ModuleFacts, expr, ctx, order: int, through=frozenset()) -> list:
    """``expr`` reads a parameter, as passed, of a top-level function of this file, or of a
    method of a top-level class: what calls of that function (of that method on an
    instance of the class or of a subclass, in another file) in other project files pass
    for it (``ProjectView.passed``).
    Also ``self.<attr>`` in a method of a top-level class whose ``__init__`` stores a
    parameter there (``self.model = model``): what other files pass to the class
    (``GRPOEngine(model, ref_model, optimizer)`` in the launcher)."""
    project = facts.project
    if project is None:
        return []
    if isinstance(expr, cst.Attribute) and ctx.class_def is not None:
        return _passed_to_constructor(facts, expr, ctx, order)
    if not isinstance(expr, cst.Name):
        # ``state["model"]`` where ``state = {"model": model, ...}``: the parameters it reads
        found = sources(facts, expr, ctx, order)
        return [w for name, where in found.open_params for w in _passed_to_param(facts, name, where, through)]
    if lookup(facts, expr.value, ctx, order).param != expr.value:
        return []  # rebound in the function first
    return _passed_to_param(facts, expr.value, ctx, through)


def _passed_to_param(facts: ModuleFacts, name: str, ctx, through=frozenset()) -> list:
    """What other files pass for the parameter ``name`` of ``ctx``'s function (``through``:
    ``ProjectView.passed``)."""
    info = function_info(facts, ctx.function) if ctx.function is not None else None
    if info is None or info.parent is not None or name not in info.param_names:
        return []
    if info.class_def is None:
        return facts.project.passed(info.name, tuple(info.param_names), name)
    # a method of a top-level class, called on an instance in another file
    # (``passed_arguments``: ``trainer.fit(model=fsdp_model)``)
    class_def = info.class_def
    if facts.classes.get(class_def.name.value) is not class_def or info.name.startswith("__") \
            or info.node.decorators or name == info.param_names[0]:
        return []
    return facts.project.passed(f"{class_def.name.value}.{info.name}", tuple(info.param_names[1:]), name, through)


def _passed_to_constructor(facts: ModuleFacts, expr: cst.Attribute, ctx, order: int) -> list:
    """``_passed_from_other_files`` of ``self.<attr>``: every binding of it that the use
    sees stores a parameter of the class's ``__init__``, as passed (precision first: a
    binding of anything else says nothing)."""
    class_def = ctx.class_def
    if dotted_name(expr.value) != "self" or facts.classes.get(class_def.name.value) is not class_def:
        return []
    bindings = lookup(facts, dotted_name(expr), ctx, order).bindings
    found = []
    for binding in bindings:
        info = function_info(facts, binding.ctx.function) if binding.ctx.function is not None else None
        value = binding.value
        if info is None or info.name != "__init__" or info.class_def is not class_def or not isinstance(value, cst.Name):
            return []
        if binding.kind != "assign" or lookup(facts, value.value, binding.ctx, binding.order).param != value.value:
            return []
        params = tuple(info.param_names[1:])
        found.extend(facts.project.passed(class_def.name.value, params, value.value))
    return found


# -- a construction's configuration ---------------------------------------------------
@dataclass
class Argument:
    known: bool  # False: hidden behind ``**cfg`` we cannot read
    sources: Sources = field(default_factory=Sources)  # empty: absent (the default)


def _dict_entries(facts: ModuleFacts, expr, ctx, order, via, key: Optional[str] = None, depth: int = 0,
                  callers: int = 1) -> Optional[List[Dict[str, Source]]]:
    """The dicts ``**expr`` may expand to; None when unreadable (with ``key``: when its
    entry is: ``dataflow.ItemWrites.readable_for``).  A parameter holds what every call of
    its function in this file passes (``facts.callers``: ``shard(block, fsdp_config)``; one
    level of callers, as the slice of a large file keeps them: ``Rule.caller_levels``), a
    display may spread another dict (``{**fsdp_config, "reshard_after_forward": False}``)."""
    if depth > _MAX_DICT_DEPTH:
        return None
    star = _star_kwargs_of_call(facts, expr, ctx, via, key)
    if star is not None:
        return star
    found = sources(facts, expr, ctx, order, via)
    if found.other_gaps or not (found.found or found.open_params) or (found.open_params and not callers):
        return None
    name = dotted_name(expr)
    written = item_writes(facts, name, ctx, order) if name is not None else ItemWrites()
    if not (written.readable if key is None else written.readable_for(key)):
        return None
    dicts: List[Dict[str, Source]] = []
    for source in found.found:
        made = _display_entries(facts, source, key, depth, callers)
        if made is None:
            return None
        dicts.extend(made)
    for param, where in found.open_params:
        passed = passed_for(facts, param, where)
        if not passed:
            return None
        for call in passed:
            if call.other_file or not call.known or call.expr is None:
                return None  # another file's dict, or one the call hides: not read
            more = _dict_entries(facts, call.expr, call.ctx, call.order, (), key, depth + 1, callers - 1)
            if more is None:
                return None
            dicts.extend(more)
    # ``kwargs["mp_policy"] = ...`` after the display: that entry may hold either
    overlay = {k: Source(v, w.ctx, w.order, via) for k, (v, w) in written.entries.items()}
    return [{**entries, **overlay} for entries in dicts]


_MAX_DICT_DEPTH = 3
_MAX_DICTS = 8


def _display_entries(facts: ModuleFacts, source: Source, key: Optional[str], depth: int, callers: int
                     ) -> Optional[List[Dict[str, Source]]]:
    """The dicts a dict display (or ``dict(k=v)``) ``source`` makes: one, or one per dict a
    ``**other`` in it may be; None when unreadable."""
    value = source.expr
    if not (isinstance(value, cst.Dict) and any(isinstance(e, cst.StarredDictElement) for e in value.elements)):
        raw = dict_entries(facts, value)
        if raw is None:
            return None
        return [{k: Source(v, source.ctx, source.order, source.via) for k, v in raw.items()}]
    made: List[Dict[str, Source]] = [{}]
    for element in value.elements:
        if isinstance(element, cst.StarredDictElement):
            inner = _dict_entries(facts, element.value, source.ctx, source.order, source.via, key, depth + 1, callers)
            if inner is None:
                return None
            made = [{**entries, **more} for entries in made for more in inner]
        else:
            name = literal_string(element.key)
            if name is None:
                return None
            made = [{**entries, name: Source(element.value, source.ctx, source.order, source.via)} for entries in made]
        if len(made) > _MAX_DICTS:
            return None
    return made


def _star_kwargs_of_call(facts: ModuleFacts, expr, ctx, via, key: Optional[str] = None
                         ) -> Optional[List[Dict[str, Source]]]:
    """``**kwargs`` of a wrapper ``def wrap(m, **kwargs): return FSDP(m, **kwargs)`` reached
    through a call ``wrap(net, cpu_offload=...)``: the call's extra keyword arguments."""
    info = function_info(facts, ctx.function) if ctx.function is not None else None
    if not (isinstance(expr, cst.Name) and info is not None and expr.value == info.star_kwargs and via):
        return None
    call = via[-1]
    caller = facts.call_site(call)
    if caller is None:
        return None
    named = set(info.param_names)
    entries: Dict[str, Source] = {}
    for arg in call.args:
        if arg.star == "**":
            more = _dict_entries(facts, arg.value, caller.ctx, caller.order, via[:-1], key)
            if more is None or len(more) != 1:
                return None
            entries.update(more[0])
        elif arg.keyword is not None and arg.keyword.value not in named:
            entries[arg.keyword.value] = Source(arg.value, caller.ctx, caller.order, via[:-1])
    return [entries]


def argument(facts: ModuleFacts, origin: Origin, name: str) -> Argument:
    wrap = origin.wrap
    site = wrap.site
    if wrap.summary is not None:
        return Argument(False)  # built in another file: only its summary is known (``wrap_config``)
    arg = wrap.kwargs.get(name)
    if arg is not None:
        return Argument(True, sources(facts, arg.value, site.ctx, site.order, origin.via))
    result = Argument(True)
    layers: List[Tuple[Tuple[cst.BaseExpression, ...], object, int, Tuple[cst.Call, ...]]] = [
        (wrap.stars, site.ctx, site.order, origin.via)
    ]
    if wrap.partial is not None:
        partial = wrap.partial
        call = partial.expr
        explicit = keyword_args(call).get(name)
        if explicit is not None:
            return Argument(True, sources(facts, explicit.value, partial.ctx, partial.order, partial.via))
        layers.append((_stars(call), partial.ctx, partial.order, partial.via))
    for stars, ctx, order, via in layers:
        for star in stars:
            dicts = _dict_entries(facts, star, ctx, order, via, name)
            if dicts is None:
                return Argument(False)
            for entries in dicts:
                if name in entries:
                    entry = entries[name]
                    result.sources.add(sources(facts, entry.expr, entry.ctx, entry.order, entry.via))
    return result


@dataclass
class WrapConfig:
    offload: object  # True (parameters kept on the CPU, possibly), False, or UNKNOWN
    offload_node: Optional[cst.CSTNode]  # the CPUOffload(...)/CPUOffloadPolicy(...) call
    cpu_device: bool  # ``device_id`` may be the CPU device (on some path)
    use_orig_params: object  # True, False or UNKNOWN
    sharding: object  # set of ShardingStrategy member names it may be, or UNKNOWN
    cpu_device_always: bool = False  # ``device_id`` is the CPU device on every path


def _bool_value(facts: ModuleFacts, arg: Argument, default: bool):
    if not arg.known:
        return UNKNOWN
    if not arg.sources.found and arg.sources.complete:
        return default
    values = {literal_bool(s.expr) for s in arg.sources.found}
    if not arg.sources.complete or UNKNOWN in values or len(values) != 1:
        return UNKNOWN
    return values.pop()


def cpu_device_text(text: str) -> bool:
    """A device string naming the CPU: ``"cpu"``, ``"cpu:0"`` (the ``ast`` gate reads the
    same definition: ``screen._cpu_string``)."""
    return text == "cpu" or text.startswith("cpu:")


def is_cpu_device(facts: ModuleFacts, source: Source) -> bool:
    """``source`` is the CPU device: ``"cpu"``, ``"cpu:0"``, ``torch.device("cpu")`` (also through names)."""
    expr = source.expr
    text = literal_string(expr)
    if text is not None:
        return cpu_device_text(text)
    if isinstance(expr, cst.Call) and facts.qualname(expr.func) in torch_api.TORCH_DEVICE:
        first = next((a for a in expr.args if (a.keyword is None and not a.star) or (a.keyword and a.keyword.value == "type")), None)
        if first is None:
            return False
        return any(is_cpu_device(facts, s) for s in sources(facts, first.value, source.ctx, source.order, source.via).found)
    return False


_DEVICE_WORDS = ("device", "cuda", "gpu", "rank")
_ACCELERATOR_MODULES = ("torch.cuda.", "torch.xpu.", "torch.npu.", "torch.mps.", "torch.accelerator.")


def _says_device(dotted: str) -> bool:
    """The last part of a dotted name says device (``device``, ``get_local_device``,
    ``local_rank``), and no part says dtype."""
    return "dtype" not in dotted.lower() and any(w in dotted.rsplit(".", 1)[-1].lower() for w in _DEVICE_WORDS)


def is_accelerator_device(facts: ModuleFacts, source: Source, depth: int = 0) -> bool:
    """``source`` names an accelerator to move a module to: a device string other than the
    CPU (``"cuda"``, ``"cuda:1"``), a device index, ``torch.device("cuda", i)``, or a value
    whose name says it is a device (``device``, ``self.device``, ``local_rank``), also
    through names.  A dtype (``torch.bfloat16``, ``args.dtype``) or a value the file cannot
    read is not (precision first)."""
    expr = source.expr
    text = literal_string(expr)
    if text is not None:
        return not (text == "cpu" or text.startswith("cpu:") or text == "meta")
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.FormattedString) and expr.parts and isinstance(expr.parts[0], cst.FormattedStringText):
        lead = expr.parts[0].value  # f"cuda:{local_rank}"
        return lead.startswith(("cuda", "xpu", "npu", "mps", "hpu"))
    if isinstance(expr, cst.Call) and facts.qualname(expr.func) in torch_api.TORCH_DEVICE:
        return not is_cpu_device(facts, source)
    if isinstance(expr, cst.Call):  # torch.cuda.current_device(), get_local_device()
        callee = facts.qualname(expr.func) or dotted_name(expr.func) or ""
        return callee.startswith(_ACCELERATOR_MODULES) or _says_device(callee)
    qualname = facts.qualname(expr)
    if qualname is not None and qualname.startswith("torch."):
        return False  # a torch constant: a dtype, not a device
    name = dotted_name(expr)
    if name is not None and _says_device(name):
        return True
    if depth > 3 or not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    found = sources(facts, expr, source.ctx, source.order, source.via)
    return any(s.expr is not expr and is_accelerator_device(facts, s, depth + 1) for s in found.found)


def offload_call(facts: ModuleFacts, source: Source) -> object:
    """True when ``source`` is ``CPUOffload(offload_params=True)`` / ``CPUOffloadPolicy()``,
    False when it is an offload object that keeps parameters on the device (or None),
    UNKNOWN otherwise."""
    expr = source.expr
    if isinstance(expr, cst.Name) and expr.value == "None":
        return False
    if not isinstance(expr, cst.Call):
        return UNKNOWN
    qualname = facts.qualname(expr.func)
    if qualname in torch_api.CPU_OFFLOAD_POLICY:
        return True
    if qualname not in torch_api.CPU_OFFLOAD:
        return UNKNOWN
    first = first_positional(expr)
    arg = keyword_args(expr).get("offload_params", first)
    if arg is None:
        return False
    values = {literal_bool(s.expr) for s in sources(facts, arg.value, source.ctx, source.order, source.via).found}
    return True if True in values else (False if values == {False} else UNKNOWN)


def wrap_config(facts: ModuleFacts, origin: Origin) -> WrapConfig:
    key = ("wrap_config", id(origin.wrap.site.node), tuple(id(c) for c in origin.via))
    if key not in facts._cache:
        facts._cache[key] = _config(facts, origin)
    return facts._cache[key]


def _config(facts: ModuleFacts, origin: Origin) -> WrapConfig:
    wrap = origin.wrap
    summary = wrap.summary
    if summary is not None:
        def known(value):
            return UNKNOWN if value is None else value

        sharding = set(summary.wrap_sharding) if summary.wrap_sharding is not None else UNKNOWN
        return WrapConfig(known(summary.wrap_offload), None, False, known(summary.wrap_orig_params), sharding)
    offload_arg = argument(facts, origin, "offload_policy" if wrap.fsdp2 else "cpu_offload")
    offload: object = False
    offload_node = None
    if not offload_arg.known:
        offload = UNKNOWN
    else:
        answers = []
        for source in offload_arg.sources.found:
            answer = offload_call(facts, source)
            answers.append(answer)
            if answer is True and offload_node is None:
                offload_node = source.expr
        if True in answers:
            offload = True  # a conditional that may offload is an offload configuration
        elif UNKNOWN in answers or not offload_arg.sources.complete:
            offload = UNKNOWN
    device = argument(facts, origin, "device_id")
    # a device value made where the construction cannot also run (``else: torch.device("cpu")``
    # of a helper's ``if torch.cuda.is_available():``, the wrap under that same test) is not
    # one it is given
    devices = [s for s in device.sources.found if not never_together(s.ctx, wrap.site.ctx)]
    cpu_device = device.known and any(is_cpu_device(facts, s) for s in devices) \
        and not _device_tested_not_cpu(origin)
    cpu_device_always = cpu_device and device.sources.complete and all(is_cpu_device(facts, s) for s in devices)
    use_orig = UNKNOWN if wrap.fsdp2 else _bool_value(facts, argument(facts, origin, "use_orig_params"), False)
    sharding: object = UNKNOWN
    if not wrap.fsdp2:
        strategy = argument(facts, origin, "sharding_strategy")
        if strategy.known and strategy.sources.complete:
            names = strategy_members(facts, strategy.sources.found)
            if names is not None:
                sharding = names or {"FULL_SHARD"}
    return WrapConfig(offload, offload_node, cpu_device, use_orig, sharding, cpu_device_always)


def strategy_members(facts: ModuleFacts, found: List[Source]) -> Optional[Set[str]]:
    """The ``ShardingStrategy`` members the values ``found`` may be (``None`` passed: FSDP's
    default, ``FULL_SHARD``; a call of a project function whose every ``return`` gives
    members: those, ``Helper.strategies``); None when one of them is something else."""
    names: Set[str] = set()
    for source in found:
        expr = source.expr
        member = (facts.qualname(expr) or dotted_name(expr) or "").rsplit(".", 1)[-1]
        if isinstance(expr, (cst.Attribute, cst.Name)) and member.isupper():
            names.add(member)
        elif isinstance(expr, cst.Name) and expr.value == "None":
            names.add("FULL_SHARD")
        elif isinstance(expr, cst.Call) and facts.project is not None and (
                helper := project_helper(facts, expr.func)) is not None and helper.strategies:
            names.update(helper.strategies)
        else:
            return None
    return names


def _device_tested_not_cpu(origin: Origin) -> bool:
    """The tests around the construction say its ``device_id`` is not a CPU device there:
    ``if device.type != "cuda": raise ...`` before ``FSDP(m, device_id=device)``."""
    site = origin.wrap.site
    value = keyword_args(site.node).get("device_id")
    name = dotted_name(value.value) if value is not None else None
    return name is not None and excludes_value(site.ctx, name + ".type", "cpu")


def has_nested_units(facts: ModuleFacts, origin: Origin) -> bool:
    """The FSDP1 construction is given an ``auto_wrap_policy`` (not ``None``): its inner
    module holds FSDP units of its own, whose state-dict hooks and forwards are collectives
    even when called through ``root.module``; for a project helper's wrap, what its summary
    says (``Helper.wrap_nested``).  Unknown (``**cfg``): False."""
    if origin.wrap.summary is not None:
        return origin.wrap.summary.wrap_nested is True
    policy = argument(facts, origin, "auto_wrap_policy")
    if not policy.known or not policy.sources.complete:
        return False
    return any(not (isinstance(s.expr, cst.Name) and s.expr.value == "None") for s in policy.sources.found)


# strategies whose nested units a forward inside a recursive ``summon_full_params`` leaves
# out of step with the block (measured: CPU/gloo, torch 2.13.0, 2 ranks, nested units by
# ``ModuleWrapPolicy``, ``use_orig_params=False``: ``FULL_SHARD`` and ``SHARD_GRAD_OP`` raise
# ``AssertionError: Expects tensor to be unsharded`` at the block's exit; ``NO_SHARD`` and
# ``HYBRID_SHARD`` on one host ran clean)
SUMMON_FORWARD_BREAKS = frozenset({"FULL_SHARD", "SHARD_GRAD_OP"})


def nested_forward_breaks_summon(facts: ModuleFacts, origin: Origin) -> bool:
    """The FSDP1 construction has nested units (``has_nested_units``) with flat parameters
    (``use_orig_params=False``, the default) and a strategy (one it may have, read) in
    ``SUMMON_FORWARD_BREAKS``: a forward through its inner module inside a recursive
    summon (``generate``, which ``FSDP.__getattr__`` hands to the inner model) runs the
    nested units' own forward on the summoned parameters.  Unknown (a strategy or
    ``use_orig_params`` the file does not show): False."""
    if not has_nested_units(facts, origin):
        return False
    config = wrap_config(facts, origin)
    return config.use_orig_params is False and config.sharding is not UNKNOWN \
        and bool(config.sharding & SUMMON_FORWARD_BREAKS)


__all__ = [
    "FsdpWrap", "FsdpModules", "Origin", "Origins", "WrapConfig", "fsdp_modules", "origins", "wrap_config",
    "offload_call", "other_fsdp_imported", "UNKNOWN",
]


def fully_sharded(facts: ModuleFacts, expr: Optional[cst.BaseExpression], ctx, order: int,
                  fsdp1_too: bool = False) -> Optional[Origin]:
    """The FSDP2 ``fully_shard`` that the module ``expr`` (used at ``ctx``/``order``) went
    through, when every construction it may come from is one (none FSDP1, no plain
    module and no call the file cannot see into on some path), also through the callers of a helper taking it as a parameter;
    None otherwise (precision first: a doubt is no sharding).  The one question the FSDP2
    API rules ask about a receiver: ``m.no_sync()``, ``m.load_state_dict(...)``,
    ``copy.deepcopy(m)``.  ``fsdp1_too``: an FSDP1 wrap counts as well (any FSDP)."""
    return _sharded_origin(origins_with_callers(facts, expr, ctx, order), fsdp1_too)


def _sharded_origin(found: Origins, fsdp1_too: bool = False) -> Optional[Origin]:
    if not found.wraps or (found.fsdp1 and not fsdp1_too) or found.plain or found.opaque:
        return None  # some path leads to a module not sharded there, or to one the file cannot see
    return found.wraps[0]


def sharded_here_or_passed(facts: ModuleFacts, expr: Optional[cst.BaseExpression], ctx, order: int) -> bool:
    """``fully_sharded``, or, on every path the file shows, a module that calls in other
    project files pass sharded by ``fully_shard`` (``Origins.external``: a training step of
    an engine class the launcher hands the sharded model to); its origins followed once."""
    found = origins_with_callers(facts, expr, ctx, order)
    if _sharded_origin(found) is not None:
        return True
    return bool(found.external) and all(e.fsdp2 for e in found.external) \
        and not (found.wraps or found.plain or found.opaque or found.inner)


def method_calls_on_sharded(facts: ModuleFacts, method: str):
    """``(site, origin, receiver code)`` for each ``m.<method>(...)`` of this file (a method
    call, not an imported function) whose receiver ``m`` went through ``fully_shard``
    (``fully_sharded``) when the call runs."""
    for site in facts.calls:
        func = site.node.func
        if site.attr != method or not isinstance(func, cst.Attribute) or facts.qualname(func) is not None:
            continue
        origin = fully_sharded(facts, func.value, site.ctx, site.order)
        if origin is not None:
            yield site, origin, facts.module.code_for_node(func.value)


def forward_calls_on_sharded(facts: ModuleFacts):
    """``(site, origin, callee code)`` for each call ``m(...)`` of a module ``m`` (a name or
    dotted name, not an imported function) that went through ``fully_shard`` when the call
    runs (``fully_sharded``): the module's forward through ``__call__``, where FSDP2's hooks
    run (``m.forward(...)`` skips them)."""
    for site in facts.calls:
        func = site.node.func
        if not isinstance(func, (cst.Name, cst.Attribute)) or facts.qualname(func) is not None:
            continue
        if dotted_name(func) is None:
            continue
        origin = fully_sharded(facts, func, site.ctx, site.order)
        if origin is not None:
            yield site, origin, facts.module.code_for_node(func)


def reshards_after_forward(facts: ModuleFacts, origin: Origin) -> object:
    """The ``reshard_after_forward`` a ``fully_shard`` was given: None when left out (the
    default: True for a non-root module, and torch >= 2.6 keeps the root unsharded after
    forward, ``FSDPState._lazy_init``), True or False when every path gives that literal,
    UNKNOWN otherwise (an int, a variable it cannot read, ``**cfg``)."""
    found = argument(facts, origin, "reshard_after_forward")
    if not found.known:
        return UNKNOWN
    if not found.sources.found:
        return None if found.sources.complete else UNKNOWN
    values = {literal_bool(s.expr) for s in found.sources.found}
    if not found.sources.complete or len(values) != 1:
        return UNKNOWN
    value = values.pop()
    return value if value in (True, False) else UNKNOWN
