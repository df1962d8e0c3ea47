"""Whether FSDP parameters live on the CPU: for one model, and anywhere in the module.

Evidence, any of:
- ``CPUOffload(offload_params=True)`` / ``CPUOffload(True)`` (torch's class, any alias),
  passed directly, through a variable, module constant, ``**cfg`` dict, ``functools.partial``
  or a wrapper's argument, or in a conditional (``... if args.offload else None`` still
  configures offload);
- FSDP2 ``CPUOffloadPolicy(...)``;
- FSDP placed on the CPU device: ``device_id=torch.device("cpu")`` or ``device_id="cpu"``,
  where pytorch#188989 reproduces.

``params_on_cpu`` answers for the model a site names: by that model's own construction when
the site's model resolves (``facts.fsdp_modules.origins``), and by the module-level evidence
when it does not (a parameter, a model built in another file): the rules' documented
promise, "in a module that configures CPU offload".  Offload chosen only by an external
config (YAML, accelerate) is invisible and not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.dataflow import Source, calls_of
from fsdp_lint.facts.fsdp_modules import FsdpWrap, Origin, fsdp_modules, offload_call, origins, wrap_config
from fsdp_lint.facts.model import Context, ModuleFacts
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.scopes import function_info, lookup
from fsdp_lint.facts.values import UNKNOWN
from fsdp_lint.facts.walk import descendants

CPU_OFFLOAD = "CPUOffload(offload_params=True)"
OFFLOAD_POLICY = "CPUOffloadPolicy"
CPU_DEVICE = "device_id on the CPU"


@dataclass(eq=False)
class OffloadEvidence:
    kind: str  # CPU_OFFLOAD, OFFLOAD_POLICY or CPU_DEVICE
    node: cst.CSTNode  # where the configuration is written
    wrap: Optional[FsdpWrap] = None  # the model's own construction; None: module-level evidence
    # the model's own construction says so on every path (not a conditional device, not
    # another model's configuration): what a safe fix may rest on
    certain: bool = False
    # module-level evidence written in a project helper's file (``FsdpWrap.elsewhere``)
    elsewhere: str = ""


def _compute(facts: ModuleFacts) -> List[OffloadEvidence]:
    evidence: List[OffloadEvidence] = []
    for site in facts.calls:
        qualname = facts.qualname(site.node.func)
        if qualname in torch_api.CPU_OFFLOAD and offload_call(facts, Source(site.node, site.ctx, site.order)) is True:
            evidence.append(OffloadEvidence(CPU_OFFLOAD, site.node))
        elif qualname in torch_api.CPU_OFFLOAD_POLICY:
            evidence.append(OffloadEvidence(OFFLOAD_POLICY, site.node))
    seen = {id(e.node) for e in evidence}
    modules = fsdp_modules(facts)
    for wrap in modules.wraps + modules.fsdp2_wraps:
        # the construction as written, and as each call of its enclosing function builds it
        callers = calls_of(facts, wrap.site.ctx.function) if wrap.site.ctx.function is not None else []
        for origin in [Origin(wrap)] + [Origin(wrap, (call,)) for call in callers]:
            config = wrap_config(facts, origin)
            if config.cpu_device and id(wrap.site.node) not in seen:
                evidence.append(OffloadEvidence(CPU_DEVICE, wrap.site.node, wrap))
                seen.add(id(wrap.site.node))
            node = config.offload_node
            if node is None and wrap.summary is not None:
                node = wrap.site.node  # a project helper's wrap: configured in its file (``wrap.elsewhere``)
            if config.offload is True and node is not None and id(node) not in seen:
                kind = OFFLOAD_POLICY if wrap.fsdp2 else CPU_OFFLOAD
                evidence.append(OffloadEvidence(kind, node, wrap))
                seen.add(id(node))
    return evidence


def cpu_param_evidence(facts: ModuleFacts) -> List[OffloadEvidence]:
    """Module-level evidence, in source order of kind."""
    return facts.cached("cpu_param_evidence", _compute)


def params_on_cpu(facts: ModuleFacts, expr, ctx, order: int) -> List[OffloadEvidence]:
    """Why the model ``expr`` (used at ``ctx``/``order``) keeps FSDP parameters on the CPU:
    its own constructions' evidence when every construction it may come from is visible,
    else the module-level evidence; empty when it does not (or nothing says so)."""
    found = origins(facts, expr, ctx, order)
    unknown = not found.complete
    evidence: List[OffloadEvidence] = []
    for origin in found.wraps:
        config = wrap_config(facts, origin)
        if config.cpu_device:
            evidence.append(OffloadEvidence(CPU_DEVICE, origin.wrap.site.node, origin.wrap, config.cpu_device_always))
        if config.offload is True:
            kind = OFFLOAD_POLICY if origin.wrap.fsdp2 else CPU_OFFLOAD
            evidence.append(OffloadEvidence(kind, config.offload_node or origin.wrap.site.node, origin.wrap))
        elif config.offload is UNKNOWN:
            unknown = True
    if evidence or not unknown:
        if unknown or len(found.wraps) != sum(1 for o in found.wraps if wrap_config(facts, o).cpu_device_always):
            for e in evidence:
                e.certain = False  # some path is not visible, or not on the CPU device
        return evidence
    # the module-level answer: not this model's own construction; where that construction
    # is known but opaque (``FSDP(m, **get_kwargs(m))``), not what another construction of
    # the file passes itself (``FSDP(ref, cpu_offload=CPUOffload(...))`` configures ``ref``)
    own = {id(o.wrap) for o in found.wraps}
    others = _argument_nodes(facts, own) if found.wraps else set()
    return [OffloadEvidence(e.kind, e.node, elsewhere=_configured_elsewhere(e)) for e in cpu_param_evidence(facts)
            if id(e.node) not in others and (e.wrap is None or not found.wraps or id(e.wrap) in own)
            and _reaches(facts, e, ctx, strict=_built_here(facts, expr, ctx, order))]


def _configured_elsewhere(evidence: OffloadEvidence) -> str:
    wrap = evidence.wrap
    return wrap.elsewhere if wrap is not None and wrap.elsewhere and evidence.node is wrap.site.node else ""


def _built_here(facts: ModuleFacts, expr, ctx: Context, order: int) -> bool:
    """The model is a name the use's function binds itself (``model = make_model(...)``):
    its construction is visible but opaque, so only a configuration that can reach it
    counts.  A parameter or an attribute comes from code the file may not show: the
    module-level reading applies."""
    name = dotted_name(expr) if expr is not None else None
    if name is None or ctx.function is None or "." in name:
        return False
    return bool(lookup(facts, name, ctx, order).bindings)


def _evidence_context(facts: ModuleFacts, evidence: OffloadEvidence) -> Optional[Context]:
    site = facts.call_site(evidence.node)
    if site is not None:
        return site.ctx
    return evidence.wrap.site.ctx if evidence.wrap is not None else None


def _reaches(facts: ModuleFacts, evidence: OffloadEvidence, ctx: Context, strict: bool = True, depth: int = 0) -> bool:
    """Whether an offload configuration of the file may configure a model used at ``ctx``
    whose own construction is not visible (the policy for the unknown: precision first).
    It may when it is written where that model can come from: the same function, one
    enclosing it, the same class, a module-level constant or call, a function the use's
    function calls (a builder) or one that calls it (the caller that passes the model), and
    what reaches such a caller (two levels).
    Not a decorator or default of another function (``@pytest.mark.parametrize`` of
    another test), not another class, not an unrelated function.  Without ``strict`` (the
    model is a parameter or attribute: it may come from anywhere) only the decorators and
    defaults of other functions are left out."""
    where = _evidence_context(facts, evidence)
    if where is None:
        return False
    function = ctx.function
    if where.function is None:
        if where.class_def is not None:
            return where.class_def is ctx.class_def
        header = where.statement
        if isinstance(header, cst.FunctionDef):  # a decorator or a default of that function
            return header is function
        return True
    if not strict:
        return True
    if function is None or where.function is function:
        return True
    if ctx.class_def is not None and where.class_def is ctx.class_def:
        return True
    info = function_info(facts, function)
    while info is not None and info.parent is not None:  # a function enclosing the use's
        if info.parent is where.function:
            return True
        info = function_info(facts, info.parent)
    for call in calls_of(facts, where.function):  # a builder the use's function calls
        site = facts.call_site(call)
        if site is not None and site.ctx.function is function:
            return True
    for call in calls_of(facts, function):  # a caller that passes the model, and what reaches it
        site = facts.call_site(call)
        if site is None or site.ctx.function is function:
            continue
        if site.ctx.function is where.function or (depth < 2 and _reaches(facts, evidence, site.ctx, strict, depth + 1)):
            return True
    return False


def _argument_nodes(facts: ModuleFacts, own) -> set:
    """ids of the nodes inside the arguments of the file's FSDP constructions other than ``own``."""
    modules = fsdp_modules(facts)
    found = set()
    for wrap in modules.wraps + modules.fsdp2_wraps:
        if id(wrap) in own or wrap.through is not None:
            continue
        for arg in wrap.site.node.args:
            found.update(id(node) for node in descendants(arg.value))
    return found
