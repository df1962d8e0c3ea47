"""Helpers: what a top-level function of a module does on every call
(``facts.helper_summary.Helper``), computed from the module's own facts (the same
``collectives``, ``fsdp_modules``, ``frameworks``, ``ranks`` and ``optimizers`` answers the
rules read), and the helper a call site calls: a function of this file by bare name, or a
project function through this file's imports (``facts.project``).

``summaries(facts)`` is what the project index stores per file; ``helper_at(facts, site)``
is what rules ask.  "On every call" is decided in the helper alone: the call stands in the
helper's body (not in a nested ``def`` or lambda), under no ``if`` (nor the rest of a
block after an ``if`` that exits), no loop, no conditional expression, ``and``/``or`` or
comprehension.  A helper that calls another helper of its own file on every call does
what that one does (three levels deep); a call into another file is not followed (a
summary depends on its file alone).  A method is summarized only where it is called as
``self.m(...)`` from a method of its own class (``method_summary``; a subclass that
overrides it is not seen): which class another instance is cannot be told from the call.
Method summaries stay out of ``summaries`` (what other files import) and are asked by
``collective_helper`` only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Set

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.collectives import (
    DIST_COLLECTIVES, FORWARD_ADVICE, FRAMEWORK_GATHERS, GATHER_ADVICE, balance_key, balanced, forward_gathers,
    gathers_full_state_dict,
    in_fsdp_program,
    may_forward_gather,
    not_sharded_here, on_other_ranks_side,
    on_subgroup,
    torch_collective,
)
from fsdp_lint.facts.call_shape import of_cst
from fsdp_lint.facts.dtensors import GATHERS as DTENSOR_GATHERS, sharded_module
from fsdp_lint.facts.frameworks import framework_collective
from fsdp_lint.facts.dataflow import sources
from fsdp_lint.facts.fsdp_modules import Origin, fsdp_modules, has_nested_units, strategy_members, wrap_config
from fsdp_lint.facts.helper_summary import Helper, argument, kinds_of, project_helper
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, FunctionInfo, ModuleFacts
from fsdp_lint.facts.optimizers import optimizers
from fsdp_lint.facts.processes import holds_when_sharded
from fsdp_lint.facts.ranks import mentions_rank, per_rank_path, restricted_to_some_ranks, value_parts
from fsdp_lint.facts.scopes import latest_binding, lookup, module_functions
from fsdp_lint.facts.summon import summon_ids
from fsdp_lint.facts.values import bind_arguments, first_positional

MAX_DEPTH = 3
SAVES = torch_api.TORCH_SAVE | torch_api.SAFETENSORS_SAVE
_MAYBE_NAMES = ("IfExp", "BooleanOperation", "Lambda", "ListComp", "SetComp", "DictComp", "GeneratorExp")


def _top_level(facts: ModuleFacts) -> Dict[str, FunctionInfo]:
    """Module-level functions defined once (a name defined twice is not known)."""
    found = {}
    for name, infos in facts.functions.items():
        tops = [i for i in infos if i.class_def is None and i.parent is None]
        if len(tops) == 1 and len(infos) == len(tops):
            found[name] = tops[0]
    return found


def _methods(facts: ModuleFacts) -> Dict[tuple, FunctionInfo]:
    """(id(class), name) -> a method defined once in its class, undecorated (a
    ``staticmethod`` takes no ``self``)."""
    found: Dict[tuple, List[FunctionInfo]] = {}
    for infos in facts.functions.values():
        for info in infos:
            if info.class_def is not None and info.parent is None:
                found.setdefault((id(info.class_def), info.name), []).append(info)
    return {key: infos[0] for key, infos in found.items()
            if len(infos) == 1 and not infos[0].node.decorators and infos[0].param_names}


def _self_method(func, class_def) -> Optional[str]:
    """``self.m`` called in a method of ``class_def``: ``m``."""
    if class_def is not None and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
            and func.value.value == "self":
        return func.attr.value
    return None


def _calls_by_function(facts: ModuleFacts) -> Dict[int, List[CallSite]]:
    found: Dict[int, List[CallSite]] = {}
    for site in facts.calls:
        if site.ctx.function is not None:
            found.setdefault(id(site.ctx.function), []).append(site)
    return found


def _holds_when_it_returns(guard) -> bool:
    """The guarded code runs on every call that shards with FSDP and returns: a test that
    holds whenever FSDP shards, or the rest of a block after ``if ...: raise``."""
    return guard.after_exit == "raise" or holds_when_sharded(guard)


def _always_reached(site: CallSite, loops_ok: bool = False) -> bool:
    """The call runs whenever its statement does, and its statement on every call of its
    function that runs with FSDP: no guard (but one that holds whenever FSDP shards), loop (``loops_ok``: loops allowed, the caller vouches for them), or
    short-circuiting expression between them."""
    ctx = site.ctx
    if not all(_holds_when_it_returns(g) for g in ctx.guards) or (ctx.loops and not loops_ok):
        # (a test that holds whenever FSDP shards: ``if config.use_fsdp:``; the rest of a
        # block after ``if fully_shard is None: raise ...``: every call that returns)
        return False
    statement = ctx.statement
    if isinstance(statement, (cst.If, cst.For, cst.While, cst.Try)) or type(statement).__name__ in ("TryStar", "Match"):
        return False  # in a compound statement's header or body parts not tracked as guards
    maybe_kinds = tuple(getattr(cst, name) for name in _MAYBE_NAMES)  # libcst stays unloaded until a parse
    stack = [(statement, False)]
    target = site.node
    while stack:
        node, maybe = stack.pop()
        if node is target:
            return not maybe
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            continue
        maybe = maybe or isinstance(node, maybe_kinds)
        stack.extend((child, maybe) for child in node.children)
    return False


def _handled(function: cst.FunctionDef) -> Set[int]:
    """The ids of the statements of ``function`` (not of its nested ``def``s) that stand in
    an ``except`` (or ``finally``) block: they run when something failed (or always, but
    after what may have raised), not on every call.  One walk per function."""
    found: Set[int] = set()
    stack = [(function.body, False)]
    while stack:
        node, handled = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, (cst.ExceptHandler, cst.Finally)) or type(node).__name__ == "ExceptStarHandler":
            handled = True
        if handled and isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement, cst.SimpleStatementLine)):
            found.add(id(node))
        if isinstance(node, (cst.BaseExpression, cst.SimpleStatementLine)) and not handled:
            continue  # no handler inside an expression or a simple line
        stack.extend((child, handled) for child in node.children)
    return found


def _in_handler(facts: ModuleFacts, function: cst.FunctionDef, statement) -> bool:
    """``statement`` stands in an ``except`` (or ``finally``) block of ``function``."""
    handled = facts.cached("handled_statements", lambda f: {})
    ids = handled.get(id(function))
    if ids is None:
        ids = handled[id(function)] = _handled(function)
    return id(statement) in ids


def _fsdp_type_test(facts: ModuleFacts, guard, info: FunctionInfo) -> Optional[str]:
    """The parameter of ``info`` that ``guard``'s true side knows to be an FSDP module
    (``_fsdp_type_subject``)."""
    if guard.branch != "body":
        return None
    subject = _fsdp_type_subject(facts, guard.node.test)
    if not isinstance(subject, cst.Name) or subject.value not in info.param_names:
        return None
    return subject.value


def _fsdp_type_subject(facts: ModuleFacts, test, depth: int = 0) -> Optional[cst.BaseExpression]:
    """What ``test`` knows to be an FSDP module when true: the first argument of
    ``isinstance(x, T)`` where ``T`` names an FSDP class (``torch_api.FSDP_MODULE_TYPES``)
    itself or through a module-level name bound to a tuple naming one (``FSDP_TYPES =
    (FSDPModule,)``); or the argument of a call of a function of this file every ``return``
    of which is such a test of its one parameter (``def is_fsdp(m): return isinstance(m,
    FSDP)``, then ``if is_fsdp(model):``)."""
    if not isinstance(test, cst.Call) or facts.qualname(test.func) is not None or depth > 1:
        return None
    if isinstance(test.func, cst.Name) and test.func.value != "isinstance" and len(test.args) == 1 \
            and not test.args[0].star and test.args[0].keyword is None:
        infos = module_functions(facts, test.func.value)
        if len(infos) != 1 or len(infos[0].param_names) != 1:
            return None
        returns = [r for r in facts.returns if r.ctx.function is infos[0].node]
        if not returns or any(r.value is None or r.ctx.guards for r in returns):
            return None
        for ret in returns:
            inner = _fsdp_type_subject(facts, ret.value, depth + 1)
            if not isinstance(inner, cst.Name) or inner.value != infos[0].param_names[0]:
                return None
        return test.args[0].value
    if dotted_name(test.func) != "isinstance" or len(test.args) != 2:
        return None
    pending, seen = [test.args[1].value], 0
    while pending and seen < 200:
        node = pending.pop()
        seen += 1
        if isinstance(node, (cst.Name, cst.Attribute)):
            if facts.qualname(node) in torch_api.FSDP_MODULE_TYPES:
                return test.args[0].value
            if isinstance(node, cst.Name):
                pending.extend(b.value for b in facts.bindings if b.target == node.value and b.ctx.function is None)
            continue
        pending.extend(node.children)
    return None


def _param(facts: ModuleFacts, info: FunctionInfo, expr, site: CallSite) -> Optional[str]:
    """The parameter of ``info`` that ``expr`` (a node or a dotted name) reads as passed
    (not rebound before ``site``)."""
    name = expr if isinstance(expr, str) else (dotted_name(expr) if expr is not None else None)
    if name is None or name not in info.param_names:
        return None
    return name if lookup(facts, name, site.ctx, site.order).param == name else None


def _target_names(target) -> Set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {e.value.value for e in target.elements if isinstance(e.value, cst.Name)}
    return set()


def _model_arg(call: cst.Call):
    first = first_positional(call)
    if first is None:
        first = next((a for a in call.args if a.keyword is not None and a.keyword.value in ("model", "module")), None)
    return first.value if first is not None else None


class _Summarizer:
    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.functions = _top_level(facts)
        self.methods = _methods(facts)
        self.by_function = facts.cached("calls_by_function", _calls_by_function)
        self.done: Dict[object, Optional[Helper]] = {}
        self.busy: Set[object] = set()

    def summary(self, name: str, depth: int = 0) -> Optional[Helper]:
        return self._summary(name, self.functions.get(name), depth)

    def method_summary(self, class_def, name: str, depth: int = 0) -> Optional[Helper]:
        """The method ``name`` of ``class_def`` as ``self.name(...)`` calls it (its
        parameters without ``self``)."""
        key = (id(class_def), name)
        return self._summary(key, self.methods.get(key), depth)

    def _summary(self, key, info: Optional[FunctionInfo], depth: int) -> Optional[Helper]:
        if key in self.done:
            return self.done[key]
        if key in self.busy or depth > MAX_DEPTH or info is None:
            return None
        self.busy.add(key)
        helper = self._compute(info, depth)
        self.busy.discard(key)
        self.done[key] = helper
        return helper

    def _compute(self, info: FunctionInfo, depth: int) -> Helper:
        facts = self.facts
        params = info.param_names[1:] if info.class_def is not None else info.param_names
        helper = Helper(info.name, params, line=info.node.name)
        own = [s for s in self.by_function.get(id(info.node), ()) if not _in_handler(facts, info.node, s.ctx.statement)]
        sites = [s for s in own if _always_reached(s)]
        for site in sites:
            if not helper.collective:
                self._collective(info, site, helper, depth)
        for site in own:
            if not helper.collective:
                self._collective_on_fsdp_type(info, site, helper, depth)
        if not helper.collective:
            self._parameter_gather(info, helper)
        if not helper.collective:
            self._forward(info, helper)
        for site in sites:
            if not helper.saves:
                self._save(info, site, helper)
        for wrap in fsdp_modules(facts).fsdp2_wraps:
            if wrap.site.ctx.function is info.node and helper.shards is None and not wrap.elsewhere \
                    and _always_reached(wrap.site) and not _in_handler(facts, info.node, wrap.site.ctx.statement):
                param = _param(facts, info, wrap.wrapped, wrap.site)
                if param is not None:
                    inner = wrap.through or wrap
                    helper.shards, helper.shard_at = param, inner.site.node
        self._returned_wrap(info, helper)
        self._returned_strategy(info, helper)
        helper.builds_optimizer = any(o.site.ctx.function is info.node for o in optimizers(facts))
        helper.kinds = kinds_of(helper)
        return helper

    def _collective(self, info: FunctionInfo, site: CallSite, helper: Helper, depth: int) -> None:
        facts = self.facts
        node, func = site.node, site.node.func
        summons = summon_ids(facts)
        qualname = facts.qualname(func) or ""
        if id(node) in summons:
            param = _param(facts, info, _model_arg(node), site)
            if param is not None:
                helper.collective, helper.model, helper.needs = "`summon_full_params` (an all-gather)", param, "sharded"
                helper.collective_at, helper.advice = node, GATHER_ADVICE
                return
        if site.attr == "state_dict" and isinstance(func, cst.Attribute) and not node.args:
            param = _param(facts, info, func.value, site)
            if param is not None:
                helper.collective, helper.model, helper.needs = "a full FSDP state dict (an all-gather)", param, "fsdp1"
                helper.collective_at, helper.advice = node, GATHER_ADVICE
                return
        if not qualname and isinstance(func, (cst.Name, cst.Attribute)) and _param(facts, info, func, site) is not None:
            return  # the forward of a module it is passed: what the caller passes decides (``_forward``)
        found = torch_collective(facts, site)
        if found is not None:
            helper.collective, helper.collective_at, helper.advice = found.what, node, found.advice
            helper.balanced_by = found.balanced_by
            model = _model_arg(node) if qualname in torch_api.FULL_STATE_DICT_FUNCTIONS else None
            param = _param(facts, info, model, site)
            if param is not None:
                helper.model, helper.needs = param, "sharded"
            return
        name = qualname.rsplit(".", 1)[-1]
        if qualname.startswith("torch.distributed.") and qualname.count(".") == 2 and name in DIST_COLLECTIVES:
            if not on_subgroup(of_cst(node), name):
                helper.collective, helper.collective_at, helper.needs = f"`{name}` (a collective)", node, "fsdp-file"
                helper.advice, helper.balanced_by = "every rank must call it: move it out of the rank test", qualname
            return
        words = framework_collective(facts, site)
        if words:
            helper.collective, helper.collective_at = words, node
            helper.advice = GATHER_ADVICE if site.attr in FRAMEWORK_GATHERS else "move it out of the rank test"
            return
        inner = None
        if isinstance(func, cst.Name) and func.value in self.functions and facts.qualname(func) is None:
            inner = self.summary(func.value, depth + 1)
        elif _self_method(func, info.class_def) is not None:
            inner = self.method_summary(info.class_def, func.attr.value, depth + 1)
        if inner is not None:
            if not inner.collective:
                return
            if inner.model is None:
                helper.collective, helper.collective_at, helper.advice = inner.collective, inner.collective_at, inner.advice
                helper.needs, helper.balanced_by = inner.needs, inner.balanced_by
                return
            passed = argument(inner, node, inner.model)
            param = _param(facts, info, passed, site)
            if param is not None:
                helper.collective, helper.collective_at, helper.advice = inner.collective, inner.collective_at, inner.advice
                helper.model, helper.needs = param, inner.needs
            elif passed is not None and applies(facts, inner, site):
                helper.collective, helper.collective_at, helper.advice = inner.collective, inner.collective_at, inner.advice

    def _collective_on_fsdp_type(self, info: FunctionInfo, site: CallSite, helper: Helper, depth: int) -> None:
        """A collective on a parameter that runs where that parameter is an FSDP module:
        under ``if isinstance(model, FSDP):`` (``isinstance(model, FSDP_TYPES + (DDP,))``)
        and otherwise on every call.  The collective's ``needs`` already asks the caller's
        module to be sharded, so the test adds nothing to what the caller must show."""
        tested = [_fsdp_type_test(self.facts, g, info) for g in site.ctx.guards]
        if not any(tested) or site.ctx.loops:
            return
        if not all(t is not None or _holds_when_it_returns(g) for t, g in zip(tested, site.ctx.guards)):
            return
        if len({t for t in tested if t}) != 1:
            return
        probe = Helper(info.name, helper.params)
        bare = replace(site, ctx=replace(site.ctx, guards=()))
        if not _always_reached(bare):
            return
        self._collective(info, site, probe, depth)
        if probe.collective and probe.model == next(t for t in tested if t) and probe.needs in ("sharded", "fsdp1", "fsdp2"):
            for name in ("collective", "collective_at", "advice", "model", "needs", "balanced_by"):
                setattr(helper, name, getattr(probe, name))

    def _returned_wrap(self, info: FunctionInfo, helper: Helper) -> None:
        """``def wrap_model(model, cfg): ...; return FSDP(model, cpu_offload=...)``: every
        ``return`` of the helper gives the one FSDP1 wrap of its parameter, built on every
        call (or, ``def build_fsdp_model(cfg): return FSDP(Net(cfg), ...)``, of a module it
        builds itself: ``wrap_built``); the wrap's configuration as
        ``fsdp_modules.wrap_config`` reads it, each value kept where it is known."""
        facts = self.facts
        modules = fsdp_modules(facts)
        returns = [r for r in facts.returns if r.ctx.function is info.node]
        if not returns or any(r.value is None for r in returns):
            return
        found = None
        for ret in returns:
            came = sources(facts, ret.value, ret.ctx, ret.order)
            wraps = {id(w): w for w in (modules.by_call.get(id(s.expr)) for s in came.found) if w is not None}
            if not came.complete or len(wraps) != 1 or len(came.found) != 1:
                return
            (wrap,) = wraps.values()
            if wrap.fsdp2 or (found is not None and wrap is not found):
                return
            found = wrap
        site = found.site
        if site.ctx.function is not info.node or not _always_reached(site) or _in_handler(self.facts, info.node, site.ctx.statement):
            return
        param = _param(facts, info, found.wrapped, site)
        config = wrap_config(facts, Origin(found))
        helper.wraps, helper.wrap_built, helper.wrap_at = param, param is None, site.node
        helper.wrap_offload = config.offload if config.offload in (True, False) else None
        helper.wrap_orig_params = config.use_orig_params if config.use_orig_params in (True, False) else None
        helper.wrap_sharding = tuple(sorted(config.sharding)) if isinstance(config.sharding, set) else None
        helper.wrap_nested = True if has_nested_units(facts, Origin(found)) else None

    def _returned_strategy(self, info: FunctionInfo, helper: Helper) -> None:
        """``def get_sharding_strategy(): ... return ShardingStrategy.FULL_SHARD ... elif ...:
        return ShardingStrategy.NO_SHARD``: the members its every ``return`` may give
        (``fsdp_modules.strategy_members``), when each is a ``torch.distributed.fsdp``
        ``ShardingStrategy`` member."""
        facts = self.facts
        returns = [r for r in facts.returns if r.ctx.function is info.node]
        if not returns or any(r.value is None for r in returns):
            return
        members: set = set()
        for ret in returns:
            came = sources(facts, ret.value, ret.ctx, ret.order)
            if not came.complete or not all(
                    "ShardingStrategy." in (facts.qualname(s.expr) or "") and torch_api.is_fsdp_api(facts.qualname(s.expr))
                    for s in came.found):
                return
            found = strategy_members(facts, came.found)
            if not found:
                return
            members |= found
        helper.strategies = tuple(sorted(members))

    def _parameter_gather(self, info: FunctionInfo, helper: Helper) -> None:
        """``for name, p in model.named_parameters(): ...optimizer.state[p]["exp_avg_sq"].full_tensor()``:
        a DTensor gather (``dtensors.GATHERS``) of what a loop over the parameters of the
        helper's parameter ``model`` yields (the parameter, its ``.grad``, its optimizer
        state, or a name bound to one in the loop).  When the caller passes a module sharded
        with ``fully_shard`` these are DTensors, and the loop runs on every rank as often (the
        same module on every rank, with parameters): a collective on every call
        (``needs="fsdp2"``)."""
        facts = self.facts
        for site in self.by_function.get(id(info.node), ()):
            func = site.node.func
            if not (site.ctx.loops and isinstance(func, cst.Attribute) and func.attr.value in DTENSOR_GATHERS):
                continue
            if not _always_reached(site, loops_ok=True) or _in_handler(self.facts, info.node, site.ctx.statement):
                continue
            model, names = None, set()
            for loop in site.ctx.loops:
                loop_node = loop.node
                iterated = loop_node.iter if isinstance(loop_node, cst.For) else None
                if not (isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Attribute)
                        and iterated.func.attr.value in ("parameters", "named_parameters")):
                    model = None
                    break
                param = _param(facts, info, iterated.func.value, site)
                if param is None or model not in (None, param):
                    model = None
                    break
                model = param
                names |= _target_names(loop_node.target)
            if model is None or not self._yielded(func.value, names, site, 0):
                continue
            helper.collective = f"`.{func.attr.value}()` on DTensors of `{model}`'s parameters (a collective)"
            helper.collective_at, helper.advice, helper.model, helper.needs = site.node, GATHER_ADVICE, model, "fsdp2"
            return

    def _forward(self, info: FunctionInfo, helper: Helper) -> None:
        """``def evaluate(model, loader): for batch in loader: model(batch)``: the forward of a
        module that is sharded with FSDP (``collectives.forward_gathers``), the helper's
        parameter (``needs="forward"``: it counts where the caller passes a sharded module)
        or a module the helper reads itself (nanoGPT's ``estimate_loss()``).  A forward in a
        ``for`` loop counts as run on every call: an evaluation loop over its batches (the
        one case it is not is a loop over nothing, which no training script evaluates on)."""
        facts = self.facts
        called, first = [], None
        for site in self.by_function.get(id(info.node), ()):
            func = site.node.func
            if not isinstance(func, (cst.Name, cst.Attribute)) or facts.qualname(func) is not None:
                continue
            if any(not isinstance(loop.node, cst.For) for loop in site.ctx.loops):
                continue
            param = _param(facts, info, func, site)
            if param in called or (param is None and not may_forward_gather(facts)):
                continue  # cheap answers first: the walks below are what a summary costs
            if not _always_reached(site, loops_ok=True) or _in_handler(facts, info.node, site.ctx.statement):
                continue
            if param is not None:
                if param not in called:
                    called.append(param)
                    first = first or site.node
                continue
            if forward_gathers(facts, func, site):
                helper.collective = (f"the forward of `{dotted_name(func)}` (its FSDP units "
                                     "all-gather their parameters and free them again)")
                helper.collective_at, helper.advice, helper.forward = site.node, FORWARD_ADVICE, True
                return
        if called:
            helper.collective = ("the forward of the module it is passed (its FSDP units all-gather their parameters "
                                 "and free them again)")
            helper.collective_at, helper.advice, helper.needs = first, FORWARD_ADVICE, "forward"
            helper.model, helper.forward_of, helper.forward = called[0], tuple(called), True

    def _yielded(self, expr, names: Set[str], site: CallSite, depth: int) -> bool:
        """``expr`` is a loop variable in ``names``, its attribute (``p.grad``), a subscript
        by it (``optimizer.state[p]``) or of one (``state["exp_avg_sq"]``), or a local name
        bound to one of these in the helper."""
        while isinstance(expr, (cst.Attribute, cst.Subscript)):
            if isinstance(expr, cst.Subscript) and any(
                isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name) and e.slice.value.value in names
                for e in expr.slice
            ):
                return True
            expr = expr.value
        if not isinstance(expr, cst.Name):
            return False
        if expr.value in names:
            return True
        latest = latest_binding(self.facts, expr.value, site.ctx, site.order)
        if depth >= MAX_DEPTH or latest is None or latest.ctx.function is not site.ctx.function:
            return False
        return self._yielded(latest.value, names, site, depth + 1)

    def _save(self, info: FunctionInfo, site: CallSite, helper: Helper) -> None:
        facts = self.facts
        if facts.qualname(site.node.func) not in SAVES:
            return
        bound, _ = bind_arguments(site.node.args, ("obj", "f"))
        path = bound.get("f") or bound.get("filename")
        if path is None or restricted_to_some_ranks(facts, site.ctx):
            return
        function = info.node
        if any(mentions_rank(d.decorator) for d in function.decorators):
            return
        if any(isinstance(s, cst.If) and mentions_rank(s.test) for s in function.body.body):
            return  # a rank test in the helper, perhaps an early exit: not on every rank
        param = _param(facts, info, path.value, site)
        if param is None:
            if per_rank_path(facts, site, path.value):
                return
            made_of = _path_params(facts, info, path.value, site)
            if len(made_of) > 1:
                return  # ``target = folder / name``: which of the caller's arguments makes it per rank is not kept
            param = made_of[0] if made_of else None
        helper.saves = f"`{dotted_name(site.node.func)}`"
        helper.save_at, helper.save_path = site.node, param


def _path_params(facts: ModuleFacts, info: FunctionInfo, expr, site: CallSite, depth: int = 0) -> List[str]:
    """The parameters of the helper a save path is made of (``target = folder / fname``),
    through the names bound to it in the helper, each once."""
    found: List[str] = []
    for item in value_parts(expr):
        name = dotted_name(item) if isinstance(item, (cst.Name, cst.Attribute)) else None
        head = name.split(".", 1)[0] if name is not None else None
        if head is None:
            continue
        param = _param(facts, info, head, site)
        if param is not None:
            found.append(param)
            continue
        latest = latest_binding(facts, head, site.ctx, site.order)
        if depth < MAX_DEPTH and latest is not None and latest.ctx.function is info.node:
            found.extend(_path_params(facts, info, latest.value, site, depth + 1))
    return list(dict.fromkeys(found))


def summaries(facts: ModuleFacts) -> Dict[str, Helper]:
    """The summary of every module-level function of the file that does something a
    rule reads (``Helper.kinds`` not empty)."""
    return facts.cached("helper_summaries", _summaries)


def _summarizer(facts: ModuleFacts) -> "_Summarizer":
    return facts.cached("helper_summarizer", _Summarizer)


def _summaries(facts: ModuleFacts) -> Dict[str, Helper]:
    summarizer = _summarizer(facts)
    found = {}
    for name in summarizer.functions:
        helper = summarizer.summary(name)
        if helper is not None and helper.kinds:
            found[name] = helper
    return found


def helper_at(facts: ModuleFacts, site: CallSite) -> Optional[Helper]:
    """The helper ``site`` calls: a module-level function of this file called by its bare
    name, else a project function this file imports (``facts.project``)."""
    func = site.node.func
    if isinstance(func, cst.Name) and facts.qualname(func) is None and facts.imports.project_spec(func.value) is None:
        return summaries(facts).get(func.value)
    return project_helper(facts, func)


def applies(facts: ModuleFacts, helper: Helper, site: CallSite) -> bool:
    """The helper's collective runs for what ``site`` passes it (``Helper.needs``)."""
    if not helper.collective:
        return False
    if helper.needs == "fsdp-file":
        return in_fsdp_program(facts)
    if helper.model is None:
        return True
    passed = argument(helper, site.node, helper.model)
    if passed is None:
        return False
    if helper.needs == "fsdp1":
        return gathers_full_state_dict(facts, passed, site)
    if helper.needs == "fsdp2":
        return sharded_module(facts, passed, site)
    if helper.needs == "forward":
        return any(forward_gathers(facts, p, site)
                   for p in (argument(helper, site.node, name) for name in helper.forward_of) if p is not None)
    return not not_sharded_here(facts, passed, site)


def collective_helper(facts: ModuleFacts, site: CallSite) -> Optional[Helper]:
    """The helper ``site`` calls when it runs a collective on every call for what is passed
    (not where the other ranks call the same helper on their side of the rank test).
    A ``torch.distributed`` collective that the calling function also calls on the other
    ranks' side of a rank test (the download idiom: ``if rank == 0: prepare()`` where
    ``prepare`` ends in a barrier, ``else: dist.barrier()``) may be balanced: left alone.
    The same collective called by every rank elsewhere in the function (an all-reduce of the
    training loss before ``if rank == 0: validate(...)``) balances nothing."""
    helper = helper_at(facts, site)
    method = _self_method(site.node.func, site.ctx.class_def) if site.ctx.function is not None else None
    if helper is None and method is not None:
        helper = _summarizer(facts).method_summary(site.ctx.class_def, method)
    if helper is None or not applies(facts, helper, site):
        return None
    key = balance_key(facts, site)
    if key is not None and balanced(facts, site, key):
        return None  # the other ranks call the same helper on their side: the same collectives
    if helper.balanced_by and any(
        other.ctx.function is site.ctx.function and facts.qualname(other.node.func) == helper.balanced_by
        and on_other_ranks_side(facts, other)
        for other in facts.calls
    ):
        return None
    return helper
