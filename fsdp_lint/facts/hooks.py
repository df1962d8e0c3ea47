"""Code that runs during forward or backward: ``forward()`` of ``torch.nn.Module``
subclasses, and functions registered as module or tensor hooks."""

from __future__ import annotations

from typing import Set

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.dataflow import sources
from fsdp_lint.facts.model import Context, ModuleFacts
from fsdp_lint.facts.scopes import methods_of
from fsdp_lint.facts.values import positional_args

HOOK_REGISTRATIONS = frozenset(
    {
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_full_backward_pre_hook",
        "register_backward_hook",
        "register_hook",
        "register_post_accumulate_grad_hook",
    }
)


def _hook_functions(facts: ModuleFacts) -> Set[int]:
    """The functions of this file registered as hooks (ids of their ``def`` nodes): by name,
    through a variable, ``functools.partial(fn, ...)``, a bound method (``self.hook``), or an
    instance of a class of this file (its ``__call__``)."""
    found: Set[int] = set()
    for site in facts.calls:
        if site.attr not in HOOK_REGISTRATIONS or not isinstance(site.node.func, cst.Attribute):
            continue
        args = positional_args(site.node)
        if not args:
            continue
        for source in sources(facts, args[0].value, site.ctx, site.order).found:
            hook = source.expr
            if isinstance(hook, cst.Call) and facts.qualname(hook.func) == "functools.partial" and hook.args:
                hook = hook.args[0].value
            if isinstance(hook, cst.Call) and isinstance(hook.func, cst.Name) and hook.func.value in facts.classes:
                found.update(id(i.node) for i in methods_of(facts, facts.classes[hook.func.value], "__call__"))
                continue
            dotted = dotted_name(hook)
            if dotted is None:
                continue
            name = dotted.rsplit(".", 1)[-1]
            if dotted.startswith("self.") and source.ctx.class_def is not None:
                found.update(id(i.node) for i in methods_of(facts, source.ctx.class_def, name))
            else:
                found.update(id(i.node) for i in facts.functions.get(name, ()))
    return found


def _module_classes(facts: ModuleFacts) -> Set[str]:
    """Names of classes in this module that derive from torch.nn.Module (directly or via one another)."""
    classes = facts.classes
    derived: Set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, node in classes.items():
            if name in derived:
                continue
            for base in node.bases:
                dotted = dotted_name(base.value)
                if facts.qualname(base.value) in torch_api.NN_MODULE or dotted in derived:
                    derived.add(name)
                    changed = True
                    break
    return derived


def runs_in_forward_or_backward(facts: ModuleFacts, ctx: Context) -> str:
    """'forward()' / 'a hook' when ``ctx`` runs during forward or backward, else ''."""
    function = ctx.function
    if function is None:
        return ""
    if id(function) in facts.cached("hook_functions", _hook_functions):
        return f"hook `{function.name.value}`"
    if (
        function.name.value == "forward"
        and ctx.class_def is not None
        and ctx.class_def.name.value in facts.cached("module_classes", _module_classes)
    ):
        return f"`{ctx.class_def.name.value}.forward()`"
    return ""
