"""What the callers of a function pass for one of its parameters.

``dataflow.sources`` follows a parameter into the argument of a call only when that call
was passed through on the way (``via``).  A use of a parameter read on its own (``if
evaluator is not None:`` inside ``train(model, evaluator)``) stops there, and
``Sources.open_params`` says so.  This module lists who calls that function and what each
call passes for the parameter, so that a domain fact (``facts.ranks``: a value made on one
rank only) can be read on the caller's side:

- calls in this file: ``train(model, evaluator)`` by name, ``Trainer(eval_fn=fn)`` for
  the ``__init__`` of a class of this file (a method's ``self.<attr>`` bound from an
  ``__init__`` parameter reaches here through ``sources``);
- calls in other project files (``ProjectView.arguments``, from each importer's
  ``facts.passed_arguments`` records, where the caller's file answered the question).

Only a top-level function or the ``__init__`` of a top-level class has callers this
can list; anything else answers None (the policy for the unknown: nothing is assumed).
A call that hides the parameter behind ``*args``/``**kwargs`` is ``Passed(known=False)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.dataflow import calls_of
from fsdp_lint.facts.model import Context, ModuleFacts
from fsdp_lint.facts.scopes import argument_for, calls_by_callee_name, function_info


@dataclass(frozen=True)
class Passed:
    """One call's argument for the parameter."""

    known: bool = True  # False: hidden behind ``*args``/``**kwargs``
    # in this file: the argument (or the parameter's default, or None: no default) and
    # where it is evaluated
    expr: Optional[cst.BaseExpression] = None
    ctx: Optional[Context] = None
    order: int = 0
    # in another project file: what that file's facts said about the argument
    # (``facts.passed_arguments``); None when the call does not pass it
    record: Optional[dict] = None
    other_file: bool = False
    default: bool = False  # the call does not pass it: the parameter's default


def passed_for(facts: ModuleFacts, name: str, ctx: Context) -> Optional[List[Passed]]:
    """Each call of the function ``ctx`` stands in (this file's calls first) with what it
    passes for its parameter ``name``; None when its callers cannot be listed."""
    info = function_info(facts, ctx.function) if ctx.function is not None else None
    if info is None or info.parent is not None or name not in info.param_names:
        return None
    if info.class_def is None:
        public, params, calls = info.name, info.param_names, calls_of(facts, info.node)
    elif info.name == "__init__" and facts.classes.get(info.class_def.name.value) is info.class_def:
        public, params = info.class_def.name.value, info.param_names[1:]
        calls = [site.node for site in calls_by_callee_name(facts).get((False, public), ())]
    else:
        return None
    found = _passed_by(facts, info, name, calls, ctx)
    project = facts.project
    if project is not None and project.callers:
        default = _default_of(info, name)
        for record in project.arguments(public, tuple(params), name):
            if record is None:
                found.append(Passed(expr=default, ctx=ctx, default=True, other_file=True))
            else:
                found.append(Passed(known=not record.get("open", False), record=record, other_file=True))
    return found


def passed_in_file(facts: ModuleFacts, name: str, ctx: Context) -> Optional[List[Passed]]:
    """Each call of the function ``ctx`` stands in that this file makes (``dataflow.calls_of``:
    any function, a method's ``self.shard(model)`` too), with what it passes for its parameter
    ``name``; None without such a function.  For a function ``passed_for`` cannot list."""
    info = function_info(facts, ctx.function) if ctx.function is not None else None
    if info is None or name not in info.param_names:
        return None
    return _passed_by(facts, info, name, calls_of(facts, info.node), ctx)


def _passed_by(facts: ModuleFacts, info, name: str, calls, ctx: Context) -> List[Passed]:
    """What each of ``calls`` (of the function ``info``) passes for its parameter ``name``."""
    found = []
    for call in calls:
        known, expr = argument_for(call, info, name)
        site = facts.call_site(call)
        if not known or site is None:
            found.append(Passed(known=False))
        elif _is_default(info, name, expr):
            found.append(Passed(expr=expr, ctx=ctx, default=True))
        else:
            found.append(Passed(expr=expr, ctx=site.ctx, order=site.order))
    return found


def _default_of(info, name: str) -> Optional[cst.BaseExpression]:
    params = info.node.params
    for p in (*params.posonly_params, *params.params, *params.kwonly_params):
        if p.name.value == name:
            return p.default
    return None


def _is_default(info, name: str, expr) -> bool:
    return expr is None or expr is _default_of(info, name)
