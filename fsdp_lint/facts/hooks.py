"""Code that runs during forward or backward: ``forward()`` of ``torch.nn.Module``
subclasses, and functions registered as module or tensor hooks."""

from __future__ import annotations

from typing import Set

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Context, ModuleFacts

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


def _hook_names(facts: ModuleFacts) -> Set[str]:
    names = set()
    for site in facts.calls:
        if site.attr in HOOK_REGISTRATIONS and isinstance(site.node.func, cst.Attribute):
            args = [a for a in site.node.args if a.keyword is None and not a.star]
            hook = args[0].value if args else None
            # functools.partial(fn, ...) registers fn
            if isinstance(hook, cst.Call) and dotted_name(hook.func) in ("partial", "functools.partial"):
                inner = [a for a in hook.args if a.keyword is None and not a.star]
                hook = inner[0].value if inner else None
            name = dotted_name(hook) if hook is not None else None
            if name is not None:
                names.add(name.rsplit(".", 1)[-1])
    return names


def hook_names(facts: ModuleFacts) -> Set[str]:
    return facts.cached("hook_names", _hook_names)


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
    if function.name.value in hook_names(facts):
        return f"hook `{function.name.value}`"
    if (
        function.name.value == "forward"
        and ctx.class_def is not None
        and ctx.class_def.name.value in facts.cached("module_classes", _module_classes)
    ):
        return f"`{ctx.class_def.name.value}.forward()`"
    return ""
