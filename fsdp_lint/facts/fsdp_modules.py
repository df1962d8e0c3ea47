"""Which expressions denote torch FSDP: the class, its constructions, wrapped modules.

Derived from the traversal's records on first use and cached on the ``ModuleFacts``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Set

import libcst as cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts
from fsdp_lint.facts.values import keyword_args, literal_bool, UNKNOWN


@dataclass(eq=False)
class FsdpWrap:
    """``target = FSDP(module, ...)`` (target may be None for a nested or unbound wrap)."""

    site: CallSite
    target: Optional[str]
    wrapped: Optional[str]  # dotted name of the module passed in
    kwargs: Dict[str, cst.Arg]
    fsdp2: bool = False  # ``fully_shard(module)`` rather than ``FSDP(module)``

    @property
    def use_orig_params(self):
        if self.fsdp2:
            return None
        arg = self.kwargs.get("use_orig_params")
        return False if arg is None else literal_bool(arg.value)

    @property
    def sharding_strategy(self) -> Optional[str]:
        """The ShardingStrategy member name when written literally, 'FULL_SHARD' when absent."""
        arg = self.kwargs.get("sharding_strategy")
        if arg is None:
            return "FULL_SHARD"
        if isinstance(arg.value, cst.Attribute):
            return arg.value.attr.value
        return None


@dataclass
class FsdpModules:
    wraps: List[FsdpWrap]
    fsdp1: Set[str]  # dotted names holding an FSDP1-wrapped module
    fsdp2: Set[str]  # dotted names passed to / bound from fully_shard
    fsdp2_wraps: List[FsdpWrap]

    def wrap_for(self, dotted: Optional[str]) -> Optional[FsdpWrap]:
        for wrap in self.wraps:
            if dotted is not None and wrap.target == dotted:
                return wrap
        return None


def _first_positional(call: cst.Call) -> Optional[str]:
    for arg in call.args:
        if arg.keyword is None and not arg.star:
            return dotted_name(arg.value)
        break
    module = keyword_args(call).get("module")
    return dotted_name(module.value) if module is not None else None


def _compute(facts: ModuleFacts) -> FsdpModules:
    targets = {id(b.value): b.target for b in facts.bindings}
    wraps: List[FsdpWrap] = []
    fsdp2_wraps: List[FsdpWrap] = []
    fsdp1: Set[str] = set()
    fsdp2: Set[str] = set()
    for site in facts.calls:
        qualname = facts.qualname(site.node.func)
        if qualname in torch_api.FSDP_CLASS:
            target = targets.get(id(site.node))
            wraps.append(
                FsdpWrap(site, target, _first_positional(site.node), keyword_args(site.node))
            )
            if target is not None:
                fsdp1.add(target)
        elif qualname in torch_api.FULLY_SHARD:
            wrapped = _first_positional(site.node)
            target = targets.get(id(site.node))
            fsdp2_wraps.append(FsdpWrap(site, target, wrapped, keyword_args(site.node), fsdp2=True))
            if wrapped is not None:
                fsdp2.add(wrapped)
            if target is not None:
                fsdp2.add(target)
    for name, hints in facts.annotated.items():
        for annotation in hints:
            if facts.qualname(annotation) in torch_api.FSDP_CLASS:
                fsdp1.add(name)
    return FsdpModules(wraps, fsdp1, fsdp2 - fsdp1, fsdp2_wraps)


def fsdp_modules(facts: ModuleFacts) -> FsdpModules:
    return facts.cached("fsdp_modules", _compute)


def other_fsdp_imported(facts: ModuleFacts) -> bool:
    """fairscale (or another library) provides an FSDP of its own in this module."""
    return facts.imports.imports_from("fairscale")


__all__ = ["FsdpWrap", "FsdpModules", "fsdp_modules", "other_fsdp_imported", "UNKNOWN"]
