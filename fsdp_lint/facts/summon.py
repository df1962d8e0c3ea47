"""Every torch ``summon_full_params`` call in the module, with its arguments bound.

Two call forms are the same staticmethod call (torch/distributed/fsdp/
fully_sharded_data_parallel.py): ``FSDP.summon_full_params(m, ...)`` and the instance
form ``m.summon_full_params(m, ...)``.  fairscale's instance method
``summon_full_params(recurse, volatile)`` takes no module argument and is not torch's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.dataflow import called_functions, calls_of, dict_entries, item_writes, sources
from fsdp_lint.facts.fsdp_modules import Origins, fsdp_modules, origins_with_callers, other_fsdp_imported
from fsdp_lint.facts.offload import OffloadEvidence, params_on_cpu
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts
from fsdp_lint.facts.param_writes import param_edits
from fsdp_lint.facts.processes import true_when_distributed
from fsdp_lint.facts.read_only_blocks import block_may_edit, may_edit_calls
from fsdp_lint.facts.walk import descendants
from fsdp_lint.facts.values import UNKNOWN, bind_arguments, first_positional, literal_bool


@dataclass(eq=False)
class SummonCall:
    site: CallSite
    args: Dict[str, cst.Arg]
    opaque: bool  # *args/**kwargs: some arguments cannot be known
    # arguments read from ``**kwargs`` dicts (``gather_kw = dict(rank0_only=True)``): known
    # values, but a fix must not add a keyword the dict may also pass
    from_dicts: Dict[str, cst.BaseExpression] = field(default_factory=dict)
    # arguments whose every value the file shows is a "launched distributed?" test
    # (``offload = get_world_size() > 1``): True in the run FSDP shards, each with that test
    when_distributed: Dict[str, cst.BaseExpression] = field(default_factory=dict)

    @property
    def fixable(self) -> bool:
        """A fix may add or drop keywords: no ``*args``/``**kwargs`` in the call."""
        return not self.opaque and not self.from_dicts and not any(a.star for a in self.node.args)

    @property
    def node(self) -> cst.Call:
        return self.site.node

    @property
    def module_name(self) -> Optional[str]:
        arg = self.args.get("module")
        return dotted_name(arg.value) if arg is not None else None

    @property
    def module_expr(self) -> Optional[cst.BaseExpression]:
        arg = self.args.get("module")
        return arg.value if arg is not None else None

    def origins(self, facts: ModuleFacts) -> Origins:
        """The FSDP constructions the summoned module may come from (``facts.fsdp_modules``),
        also through the calls of the function it is in when it is that function's parameter."""
        return origins_with_callers(facts, self.module_expr, self.site.ctx, self.site.order)

    def params_on_cpu(self, facts: ModuleFacts) -> List[OffloadEvidence]:
        return params_on_cpu(facts, self.module_expr, self.site.ctx, self.site.order)

    def value(self, name: str):
        """True/False when the argument is literal or absent (its default), or a test that
        holds in every distributed run (``when_distributed``); UNKNOWN otherwise."""
        arg = self.args.get(name)
        if arg is not None:
            return True if name in self.when_distributed else literal_bool(arg.value)
        if name in self.from_dicts:
            return literal_bool(self.from_dicts[name])
        return UNKNOWN if self.opaque else torch_api.SUMMON_DEFAULTS[name]

    def may_edit_through(self, facts: ModuleFacts) -> List[cst.CSTNode]:
        """Where the entering block shows no edit itself, what in it may still edit the
        gathered parameters (``read_only_blocks.may_edit_calls``)."""
        block = self.site.entered_by
        if block is None:
            return []
        modules = [s.module_name for s in summons_entering(facts, block)]
        if param_edits(facts, block, modules):
            return []
        return may_edit_calls(facts, block, modules)

    def block_may_edit(self, facts: ModuleFacts) -> bool:
        """True unless a with-statement enters this call and its body provably edits no
        parameter of the gathered modules (``facts.param_writes``)."""
        block = self.site.entered_by
        if block is None:
            return True
        modules = [s.module_name for s in summons_entering(facts, block)]
        return block_may_edit(facts, block, modules)


def _is_torch_summon(facts: ModuleFacts, site: CallSite) -> bool:
    func = site.node.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == torch_api.SUMMON):
        return False
    if torch_api.is_summon_qualname(facts.qualname(func)):
        return True
    receiver = dotted_name(func.value)
    if receiver is None:
        return False
    modules = fsdp_modules(facts)
    if receiver in modules.fsdp1:
        return True
    if receiver in modules.fsdp2 or other_fsdp_imported(facts):
        return False
    # An FSDP module reached some other way (a parameter, a return value): the torch
    # staticmethod called on an instance passes the module again, which fairscale's
    # method never does; require a torch FSDP import in the module as well.
    first = first_positional(site.node)
    return (
        first is not None
        and dotted_name(first.value) == receiver
        and facts.imports.imports_from(torch_api.FSDP_PACKAGE)
    )


def _compute(facts: ModuleFacts) -> List[SummonCall]:
    summons = []
    for site in facts.calls:
        if site.attr == torch_api.SUMMON and _is_torch_summon(facts, site):
            bound, opaque = bind_arguments(site.node.args, torch_api.SUMMON_PARAMS)
            from_dicts = {}
            if opaque:
                from_dicts, opaque = _expand_dicts(facts, site)
            summons.append(SummonCall(site, bound, opaque, from_dicts, _when_distributed(facts, site, bound)))
    return summons


def _when_distributed(facts: ModuleFacts, site: CallSite, bound: Dict[str, cst.Arg]) -> Dict[str, cst.BaseExpression]:
    """The non-literal arguments every value of which the file shows, each a test true in
    every distributed run (``processes.true_when_distributed``), with one such value."""
    found = {}
    for name, arg in bound.items():
        if name == "module" or literal_bool(arg.value) is not UNKNOWN:
            continue
        values = sources(facts, arg.value, site.ctx, site.order)
        if values.complete and values.found and all(true_when_distributed(v.expr) for v in values.found):
            found[name] = values.found[0].expr
    return found


def _expand_dicts(facts: ModuleFacts, site: CallSite):
    """The keywords ``**d`` arguments pass when each ``d`` is one dict display or ``dict(...)``
    (``facts.dataflow``); (values, still opaque)."""
    values: Dict[str, cst.BaseExpression] = {}
    for arg in site.node.args:
        if arg.star == "*":
            return {}, True
        if arg.star != "**":
            continue
        found = sources(facts, arg.value, site.ctx, site.order)
        entries = [dict_entries(facts, s.expr) for s in found.found]
        if not found.complete or len(entries) != 1 or entries[0] is None:
            return {}, True
        name = dotted_name(arg.value)
        written = item_writes(facts, name, site.ctx, site.order) if name is not None else None
        if written is not None and not written.readable:
            return {}, True
        values.update(entries[0])
        if written is not None:  # ``kw["writeback"] = False`` after the display
            values.update({key: item for key, (item, _) in written.entries.items()})
    return values, False


def _other_library(facts: ModuleFacts, expr: cst.BaseExpression) -> bool:
    qualname = facts.qualname(expr)
    return qualname is not None and qualname.split(".")[0] not in torch_api.SUMMON_CONTEXT_LIBRARIES


def summon_on_other_class(facts: ModuleFacts, func: cst.BaseExpression) -> bool:
    """``X.summon_full_params`` where name resolution says ``X`` is not an FSDP of torch,
    fairscale, fairseq or metaseq: a name imported from another library
    (``from mylib import FSDP``), or a class of this file that derives from none of those
    libraries' classes (``class FSDP: ...``).  A receiver nothing resolves (an instance,
    ``self.model``) is not decided here."""
    if not isinstance(func, cst.Attribute):
        return False
    receiver = func.value
    if _other_library(facts, receiver):
        return True
    if isinstance(receiver, cst.Name) and facts.qualname(receiver) is None and receiver.value in facts.classes:
        bases = facts.classes[receiver.value].bases
        return not any(facts.qualname(base.value) is not None and not _other_library(facts, base.value)
                       for base in bases)
    return False


def summon_calls(facts: ModuleFacts) -> List[SummonCall]:
    return facts.cached("summon_calls", _compute)



def summon_ids(facts: ModuleFacts) -> Set[int]:
    """The ids of the call nodes of ``summon_calls``, for a membership test."""
    return facts.cached("summon_ids", lambda f: {id(s.node) for s in summon_calls(f)})

def summons_entering(facts: ModuleFacts, block) -> List[SummonCall]:
    """The summon calls that a with-statement enters."""
    return [s for s in summon_calls(facts) if s.site.entered_by is block]


def summon_blocks(facts: ModuleFacts, ctx) -> List[Tuple[SummonCall, int]]:
    """(summon, depth) for each summon block enclosing ``ctx``, innermost last."""
    found = []
    for depth, block in enumerate(ctx.withs):
        found.extend((summon, depth) for summon in summons_entering(facts, block))
    return found


def _holds_summon(node, summon_ids) -> bool:
    return any(id(item) in summon_ids for item in descendants(node))


def _gathers(summon: SummonCall, model: Optional[str]) -> bool:
    """The summon may gather ``model`` (a dotted name; None: any model): its module is
    ``model``, holds it or is held by it (``self.policy`` / ``self.policy.module``), or is
    not a name (a doubt)."""
    name = summon.module_name
    if model is None or name is None:
        return True
    return name == model or model.startswith(name + ".") or name.startswith(model + ".")


def _same_value(facts: ModuleFacts, summon: SummonCall, model: Optional[str], site: CallSite) -> bool:
    """``model`` at ``site`` and the summoned module may be one object under two names
    (``raw_model = model`` in the FSDP branch, then ``with FSDP.summon_full_params(model):
    raw_model.generate(...)``): some construction reaches both (``dataflow.sources``)."""
    if model is None or summon.module_expr is None:
        return False
    held = cst.parse_expression(model)
    mine = {id(s.expr) for s in sources(facts, held, site.ctx, site.order).found if isinstance(s.expr, cst.Call)}
    if not mine:
        return False
    theirs = sources(facts, summon.module_expr, summon.site.ctx, summon.site.order).found
    return any(id(s.expr) in mine for s in theirs)


def maybe_in_summon(facts: ModuleFacts, site: CallSite, model: Optional[str] = None, depth: int = 0) -> bool:
    """``site`` may run inside a summon: a ``with`` entering one (``summon_blocks``), or one
    the file enters less directly: a name bound to it (``ctx = FSDP.summon_full_params(m);
    with ctx:``) or to a factory of it (``ctx = lambda: FSDP.summon_full_params(m) if fsdp
    else nullcontext(); with ctx():``), ``stack.enter_context(summon)`` earlier in an
    enclosing block, a ``@contextmanager`` helper of this file that enters one (``with
    gathered(model):``), or a call of ``site``'s function made inside one (a helper whose
    caller gathers: its body runs where it is called; two levels).  For rules that flag
    code outside a summon: a doubt counts as inside.  With ``model``, a ``with`` block or a
    caller's block that gathers another named model does not count, unless some construction
    reaches both names (an alias: ``_same_value``)."""
    ctx = site.ctx
    if any(_gathers(summon, model) or _same_value(facts, summon, model, site) for summon, _ in summon_blocks(facts, ctx)):
        return True
    summons = summon_calls(facts)
    if not summons:
        return False
    if depth < 2 and ctx.function is not None:
        for call in calls_of(facts, ctx.function):
            caller = facts.call_site(call)
            if caller is not None and caller.ctx.function is not ctx.function and maybe_in_summon(facts, caller, model, depth + 1):
                return True
    summon_ids = {id(s.node) for s in summons if _gathers(s, model)}
    blocks = {id(b) for b in ctx.withs}
    for block in ctx.withs:
        for item in block.node.items:
            expr = item.item
            if _holds_summon(expr, summon_ids):
                return True
            name = dotted_name(expr.func) if isinstance(expr, cst.Call) else dotted_name(expr)
            if name is not None and any(
                b.target == name and b.ctx.function is ctx.function and _holds_summon(b.value, summon_ids)
                for b in facts.bindings
            ):
                return True
            if isinstance(expr, cst.Call):
                helpers = {id(info.node) for info in called_functions(facts, expr, ctx)}
                if any(s.site.ctx.function is not None and id(s.site.ctx.function) in helpers for s in summons):
                    return True
    for other in facts.calls:  # ``stack.enter_context(FSDP.summon_full_params(...))``
        if other.attr == "enter_context" and other.order < site.order and other.ctx.withs \
                and id(other.ctx.withs[-1]) in blocks and any(_holds_summon(a.value, summon_ids) for a in other.node.args):
            return True
    return False


def root_left_gathered(facts: ModuleFacts, site: CallSite, model: str) -> bool:
    """An FSDP1 root forward ``model(...)`` may run before ``site`` in its function with no
    ``.backward()`` between them: FSDP1 does not free the root's own parameters after the
    root forward (``_post_forward_reshard`` in torch/distributed/fsdp/_runtime_utils.py
    reshards only a non-root unit), so until the backward they are still gathered and a
    ``model.module.generate(...)`` there runs (measured by FSD105's scenario).  Whether it
    ran on every path is not known here: a doubt counts as gathered."""
    function = site.ctx.function
    forwards = [
        s.order for s in facts.calls
        if s.ctx.function is function and s.order < site.order and dotted_name(s.node.func) in (model, model + ".forward")
    ]
    if not forwards:
        return False
    last = max(forwards)
    return not any(
        s.ctx.function is function and s.attr == "backward" and s.order < site.order and s.done >= last
        for s in facts.calls
    )
