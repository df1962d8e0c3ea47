"""What a file passes to the functions of other project files: per call of an imported
project function (or class, or a method called on an instance of an imported project class
or of a subclass of this file: ``trainer.fit(model=m)``), what its own facts say about each
argument.

Real projects wrap the model in the entry script and hand it to a training loop, a clipping
or a checkpoint helper of another module (``train(model, optimizer, loader)`` from
``train_utils.py``), and build some values on one rank only before handing them on
(``Trainer(model, eval_fn=eval_fn)`` where only the main process built ``eval_fn``).  Read
from the caller's side, with the caller's own facts, this says per call and per argument
(by position or keyword):
- whether it holds an FSDP1 module (with the sharding strategies its wrap may have) or an
  FSDP2 one (``fsdp_modules.origins_with_callers``);
- whether it is a rank test, and which branch of ``if <it>:`` runs on one rank
  (``ranks.one_rank_branch``), and whether every value it may hold is None except values
  made on one rank (``ranks.set_on_one_rank``);
- for a module name, the low-precision dtype its weights are in there
  (``dtypes.module_in_dtype``: ``model = from_pretrained(..., dtype=torch.bfloat16)`` then
  ``apply_fsdp(model)``).
``fsdp_lint.project`` keeps these records per file and hands the callee's file the records
of calls of its functions: ``ProjectView.passed`` (the FSDP modules, which
``fsdp_modules.origins_with_callers`` turns into ``ExternalWrap``s of a parameter) and
``ProjectView.arguments`` (every call, for ``facts.callers``).

Only what the caller's file shows counts: an argument whose every origin was followed to
FSDP wraps of that file (or its helpers); anything else says nothing (the policy for the
unknown: precision first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.dataflow import sources
from fsdp_lint.facts.dtypes import LOW_PRECISION, module_in_dtype
from fsdp_lint.facts.fsdp_modules import origins_with_callers, wrap_config
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import ModuleFacts
from fsdp_lint.facts.ranks import one_rank_branch, set_on_one_rank
from fsdp_lint.facts.scopes import methods_of


# ``ProjectView.gate_kinds``' key for what other files may pass to this file's functions
# (no dotted name a call can write): the gate's "fsdp1_model" holds under it
PASSED = "<passed>"


@dataclass(frozen=True)
class ExternalWrap:
    """An FSDP module a caller in another file passes for a parameter."""

    fsdp2: bool
    sharding: Optional[Tuple[str, ...]]  # FSDP1: the strategies its wrap may have; None: not known
    place: str  # ``train.py:23``: the call that passes it


def passed_arguments(facts: ModuleFacts, row, in_project=lambda spec: True) -> List[dict]:
    """One record per call of an imported project function: {"spec": what the call names
    through the imports, "line": the call's line, "open": whether ``*args``/``**kwargs``
    may pass more, "args": {"0" (position) or the keyword: what is known of that argument:
    "fsdp" (1 or 2) with "sharding" ([...] or None), "rank" ("body"/"orelse"), "one_rank"
    (true), "dtype" ([dtype, how it was made, its line or None])}} (an argument nothing is known of maps to {}).  ``row``: a node's line;
    ``in_project``: whether a spec names a function of the project (not torch's)."""
    records = []
    for site in facts.calls:
        spec = facts.imports.project_spec(dotted_name(site.node.func))
        method, overrides = None, ()
        if spec is None:
            spec, method, overrides = _project_method(facts, site)
        if spec is None or not in_project(spec):
            continue
        args: Dict[str, dict] = {}
        position = 0
        open_ = False
        for arg in site.node.args:
            if arg.star:
                open_ = True
                if arg.star == "*":
                    break  # the positions after ``*args`` are not known
                continue
            key = arg.keyword.value if arg.keyword is not None else str(position)
            if arg.keyword is None:
                position += 1
            args[key] = _argument(facts, arg.value, site, row)
        record = {"spec": spec, "line": row(site.node), "open": open_, "args": args}
        if method is not None:
            record["method"] = method
            if overrides:
                record["overrides"] = list(overrides)
        records.append(record)
    return records


def _project_method(facts: ModuleFacts, site) -> Tuple[Optional[str], Optional[str], Tuple[str, ...]]:
    """(the project class, the method, the methods the instance's own class overrides) a
    call ``obj.method(...)`` reaches: ``obj`` holds, on every path the file shows, an
    instance of a class imported from the project, or of a class of this file deriving
    from one that does not define ``method`` itself (``trainer = FSDPTrainer(...)``,
    ``class FSDPTrainer(Trainer)``, ``trainer.fit(model=m)`` runs ``Trainer.fit``; a
    ``self.train_loop(...)`` in it runs ``FSDPTrainer``'s own when it defines one: the
    overrides).  (None, None, ()) otherwise."""
    func = site.node.func
    nothing = (None, None, ())
    if not isinstance(func, cst.Attribute) or dotted_name(func.value) in (None, "self"):
        return nothing
    found = sources(facts, func.value, site.ctx, site.order)
    if not found.complete or not found.found:
        return nothing
    classes = set()
    for source in found.found:
        call = source.expr
        if not isinstance(call, cst.Call):
            return nothing
        found_class = _project_class(facts, call.func, func.attr.value)
        if found_class is None:
            return nothing
        classes.add(found_class)
    if len(classes) != 1:
        return nothing
    spec, overrides = classes.pop()
    return spec, func.attr.value, overrides


def _project_class(facts: ModuleFacts, func, method: str, depth: int = 0) -> Optional[Tuple[str, Tuple[str, ...]]]:
    name = dotted_name(func)
    spec = facts.imports.project_spec(name)
    if spec is not None:
        return spec, ()
    local = facts.classes.get(name or "")
    if local is None or depth > 2 or methods_of(facts, local, method) or len(local.bases) != 1:
        return None
    base = _project_class(facts, local.bases[0].value, method, depth + 1)
    if base is None:
        return None
    own = {info.name for infos in facts.functions.values() for info in infos
           if info.class_def is local and info.parent is None}
    return base[0], tuple(sorted(set(base[1]) | own))


def _argument(facts: ModuleFacts, expr, site, row) -> dict:
    data: dict = {}
    found = origins_with_callers(facts, expr, site.ctx, site.order)
    if found.wraps and found.complete and not found.plain and not found.opaque:
        if all(o.wrap.fsdp2 for o in found.wraps):
            data.update(fsdp=2, sharding=None)
        elif not any(o.wrap.fsdp2 for o in found.wraps):
            strategies = set()
            for origin in found.wraps:
                sharding = wrap_config(facts, origin).sharding
                if not isinstance(sharding, set):
                    strategies = None
                    break
                strategies |= sharding
            data.update(fsdp=1, sharding=sorted(strategies) if strategies is not None else None)
    branch = one_rank_branch(expr, facts, site.ctx, site.order)
    if branch is not None:
        data["rank"] = branch
    if set_on_one_rank(facts, expr, site.ctx, site.order):
        data["one_rank"] = True
    if isinstance(expr, cst.Name):
        for dtype in sorted(LOW_PRECISION):
            made = module_in_dtype(facts, expr.value, site.ctx, site.order, dtype)
            if made is not None:
                data["dtype"] = [dtype, made[0], row(made[1]) if made[1] is not None else None]
                break
    return data


def external_wraps(records: List[dict], params: Tuple[str, ...], param: str) -> List[ExternalWrap]:
    """The FSDP modules the calls ``records`` (of one function, with ``place`` added) pass
    for ``param`` of its parameters ``params``."""
    found = []
    for record, data in zip(records, argument_records(records, params, param)):
        if data is not None and "fsdp" in data:
            sharding = data.get("sharding")
            found.append(ExternalWrap(data["fsdp"] == 2, tuple(sharding) if sharding is not None else None,
                                      record["place"]))
    return found


def argument_records(records: List[dict], params: Tuple[str, ...], param: str) -> List[Optional[dict]]:
    """Per call of ``records`` (of one function whose parameters are ``params``): what it
    passes for ``param`` (``passed_arguments``' "args" entry), None when it does not pass
    it; {"open": True} when ``*args``/``**kwargs`` may hide it."""
    if param not in params:
        return []
    keys = (str(params.index(param)), param)
    found: List[Optional[dict]] = []
    for record in records:
        data = next((record["args"][key] for key in keys if key in record["args"]), None)
        if data is None and record.get("open"):
            data = {"open": True}
        found.append(data)
    return found
