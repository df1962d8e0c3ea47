"""Optimizers built from a module's parameters, and where they are used.

An optimizer is a call to a ``torch.optim`` class (any alias), or to a class whose name
says optimizer (``FusedAdam``, ``Adam8bit``, ``Lion``, ...) given ``M.parameters()``.
Its module ``M`` is the receiver of the ``parameters()``/``named_parameters()`` call found
in its first argument (also inside lists, dicts and comprehensions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

import libcst as cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts

_OPTIMIZER_NAME = re.compile(r"(Adam|AdamW|SGD|Adagrad|Adadelta|Adamax|RMSprop|Rprop|Lion|Lamb|LAMB|Adafactor)\w*$")
_PARAMETER_CALLS = frozenset({"parameters", "named_parameters"})


@dataclass(eq=False)
class OptimizerSite:
    site: CallSite
    module: str  # dotted name whose parameters it holds
    target: Optional[str]  # the name it is bound to


def _parameters_owner(expr: cst.CSTNode) -> Optional[str]:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value in _PARAMETER_CALLS:
                return dotted_name(node.func.value)
        stack.extend(node.children)
    return None


def _compute(facts: ModuleFacts) -> List[OptimizerSite]:
    targets = {id(b.value): b.target for b in facts.bindings}
    found = []
    for site in facts.calls:
        qualname = facts.qualname(site.node.func) or ""
        name = site.attr or ""
        is_torch = qualname.startswith(torch_api.OPTIMIZER_PACKAGE + ".") and name[:1].isupper()
        if not (is_torch or _OPTIMIZER_NAME.search(name)):
            continue
        first = next((a for a in site.node.args if a.keyword is None or a.keyword.value == "params"), None)
        if first is None or first.star:
            continue
        owner = _parameters_owner(first.value)
        if owner is not None:
            found.append(OptimizerSite(site, owner, targets.get(id(site.node))))
    return found


def optimizers(facts: ModuleFacts) -> List[OptimizerSite]:
    return facts.cached("optimizers", _compute)


def used_after(facts: ModuleFacts, name: str, function, order: int) -> Optional[CallSite]:
    """A call that uses ``name`` (``name.step()``, ``f(name)``) after ``order`` in ``function``;
    for an attribute (``self.optimizer``), any use in another function counts too."""
    rebinds = [b.order for b in facts.bindings if b.target == name and b.ctx.function is function and b.order > order]
    until = min(rebinds, default=None)  # a new value bound to the name ends the old one's life
    for site in facts.calls:
        same = site.ctx.function is function
        if same and (site.order <= order or (until is not None and site.order > until)):
            continue
        if not same and "." not in name:
            continue
        callee = dotted_name(site.node.func) or ""
        if callee.startswith(name + ".") or any(dotted_name(a.value) == name for a in site.node.args):
            return site
    return None
