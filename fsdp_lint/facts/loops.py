"""Training loops: which loop, if any, runs a statement on every training step.

A loop "steps" when a ``.backward(...)`` or ``.step(...)`` call (``loss.backward()``,
``accelerator.backward(loss)``, ``scaler.scale(loss).backward()``, ``optimizer.step()``,
``scaler.step(opt)``) has it as its innermost loop.  So an epoch loop around a batch
loop does not step itself, and an evaluation loop (no backward, no step) never steps.
A statement under a periodic guard (an ``if`` whose test uses ``%``), or in a branch
that leaves the loop (ends with break/return/raise), does not run on every step.  A
function of this file called on every step runs its body on every step too.
"""

from __future__ import annotations

from typing import Optional, Tuple

from fsdp_lint.facts.dataflow import calls_of
from fsdp_lint.facts.model import CallSite, Context, Loop, ModuleFacts


def per_step_loop(ctx: Context) -> Optional[Loop]:
    """The innermost training loop that runs this context on every iteration, or None."""
    for depth in range(len(ctx.loops) - 1, -1, -1):
        loop = ctx.loops[depth]
        if not loop.steps:
            continue
        inside = [g for g in ctx.guards if g.loop_depth > depth]
        if any(g.periodic or g.leaves_loop for g in inside):
            return None
        return loop
    return None


def per_step_via_call(facts: ModuleFacts, ctx: Context) -> Optional[Tuple[Loop, Optional[CallSite]]]:
    """The training loop that runs ``ctx`` on every step: directly, or through a call of its
    function (or method) from this file made on every step of a loop (one call level:
    ``ema.update(model)`` in the loop, the summon inside ``update``).  The call is None for
    the direct case."""
    loop = per_step_loop(ctx)
    if loop is not None:
        return loop, None
    if ctx.function is None or any(g.periodic or g.leaves_loop for g in ctx.guards):
        return None
    for call in calls_of(facts, ctx.function):
        site = facts.cached("call_sites_by_id", lambda f: {id(s.node): s for s in f.calls}).get(id(call))
        if site is not None and site.ctx.function is not ctx.function:
            outer = per_step_loop(site.ctx)
            if outer is not None:
                return outer, site
    return None
