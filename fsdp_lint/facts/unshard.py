"""FSDP2's explicit gather: ``m.unshard()`` ... ``m.reshard()`` on a ``fully_shard``-ed module.

``unshard_regions(facts)``: each ``m.unshard(...)`` (also ``handle = m.unshard(async_op=True)``,
whose ``handle.wait()`` finishes the gather) whose receiver went through ``fully_shard``
(``fsdp_modules.method_calls_on_sharded``) and the first later ``m.reshard()`` on the same
receiver (the same code) in the same function and the same loops, with the parameter edits
between them (``param_writes.param_edits_between``) up to the first call that reshards the
module before that: ``m.state_dict()``, ``m.load_state_dict(...)`` (FSDP2's state-dict
pre-hooks reshard; measured: ``load_state_dict`` of full tensors there raises ``got mixed
torch.Tensor and DTensor``, FSD110's error) or a forward ``m(...)`` (which may reshard it:
a non-root group with ``reshard_after_forward``); a doubt ends the region (a miss, not a
false alarm).  An ``unshard()`` without a
``reshard()`` in its function is no region: where its parameters go back to the shards (the
next forward's reshard, another function) is not visible here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.fsdp_modules import Origin, method_calls_on_sharded
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts, Mutation
from fsdp_lint.facts.param_writes import param_edits_between


# methods of an FSDP2 module that reshard its group before they run (their pre-hooks)
RESHARDING_METHODS = frozenset({"state_dict", "load_state_dict"})


@dataclass(eq=False)
class UnshardRegion:
    unshard: CallSite
    reshard: CallSite
    receiver: str  # the module's code (``model``, ``self.model``)
    origin: Origin  # the ``fully_shard`` the module went through
    edits: List[Mutation]  # writes between that may edit its unsharded parameters


def _compute(facts: ModuleFacts) -> List[UnshardRegion]:
    reshards = list(method_calls_on_sharded(facts, "reshard"))
    regions: List[UnshardRegion] = []
    for site, origin, receiver in method_calls_on_sharded(facts, "unshard"):
        after: Optional[CallSite] = None
        for other, _, name in reshards:
            if (
                name == receiver
                and other.ctx.function is site.ctx.function
                and other.ctx.loops == site.ctx.loops
                and other.order > site.done
                and (after is None or other.order < after.order)
            ):
                after = other
        if after is None:
            continue
        end = after.order
        for other in facts.calls:  # a call that reshards the module first ends the region there
            if (
                other.ctx.function is site.ctx.function and site.done < other.order < end
                and _reshards(facts, other, receiver)
            ):
                end = other.order
        module = dotted_name(site.node.func.value)
        edits = param_edits_between(facts, site.ctx.function, site.done, end, [module]) if module else []
        regions.append(UnshardRegion(site, after, receiver, origin, edits))
    return regions


def _reshards(facts: ModuleFacts, site: CallSite, receiver: str) -> bool:
    """``m.state_dict()``, ``m.load_state_dict(...)`` (FSDP2's state-dict pre-hooks reshard the
    group first: ``to_sharded_hook``, ``FSDPParamGroup._register_state_dict_hooks``) or
    ``m(...)`` (its post-forward hook may reshard) on the module ``receiver``."""
    func = site.node.func
    if facts.module.code_for_node(func) == receiver:
        return True
    return (
        isinstance(func, cst.Attribute) and func.attr.value in RESHARDING_METHODS
        and facts.module.code_for_node(func.value) == receiver
    )


def unshard_regions(facts: ModuleFacts) -> List[UnshardRegion]:
    return facts.cached("unshard_regions", _compute)
