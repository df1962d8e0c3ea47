"""Whether a name still holds what a call bound to it: a rebinding in between breaks the link.

``model = FSDP(net)`` ... ``model = torch.load(path)`` ... ``model.half()``: the last call is
on the loaded object, not on the FSDP module.  ``model = model.to(...)`` / ``model =
model.cuda()`` (a method of the same object, returning it) keeps the link.
"""

from __future__ import annotations

from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts


def rebound_between(facts: ModuleFacts, name: str, source: CallSite, use: CallSite) -> bool:
    """``name`` is bound to something else after ``source`` (its binding call) and before ``use``."""
    for binding in facts.bindings:
        if binding.target != name or not source.order < binding.order < use.order:
            continue
        if binding.value is source.node:
            continue
        if "." not in name and binding.ctx.function is not use.ctx.function:
            continue
        receiver = getattr(getattr(binding.value, "func", None), "value", None)
        if dotted_name(receiver) == name:
            continue
        return True
    return False
