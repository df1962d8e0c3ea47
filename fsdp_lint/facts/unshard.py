"""FSDP2's explicit gather: ``m.unshard()`` ... ``m.reshard()`` on a ``fully_shard``-ed module.

``unshard_regions(facts)``: each ``m.unshard(...)`` (also ``handle = m.unshard(async_op=True)``,
whose ``handle.wait()`` finishes the gather) whose receiver went through ``fully_shard``
(``fsdp_modules.method_calls_on_sharded``) and the first later ``m.reshard()`` on the same
receiver (the same code) in the same function and the same loops, with the parameter edits
between them (``param_writes.param_edits_between``).  An ``unshard()`` without a
``reshard()`` in its function is no region: where its parameters go back to the shards (the
next forward's reshard, another function) is not visible here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from fsdp_lint.facts.fsdp_modules import Origin, method_calls_on_sharded
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts, Mutation
from fsdp_lint.facts.param_writes import param_edits_between


@dataclass(eq=False)
class UnshardRegion:
    unshard: CallSite
    reshard: CallSite
    receiver: str  # the module's code (``model``, ``self.model``)
    origin: Origin  # the ``fully_shard`` the module went through
    edits: List[Mutation]  # writes between that may edit its (unsharded) parameters


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
        module = dotted_name(site.node.func.value)
        edits = param_edits_between(facts, site.ctx.function, site.done, after.order, [module]) if module else []
        regions.append(UnshardRegion(site, after, receiver, origin, edits))
    return regions


def unshard_regions(facts: ModuleFacts) -> List[UnshardRegion]:
    return facts.cached("unshard_regions", _compute)
