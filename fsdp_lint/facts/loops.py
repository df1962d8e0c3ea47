"""Training loops: which loop, if any, runs a statement on every training step.

A loop "steps" when a ``.backward(...)`` or ``.step(...)`` call (``loss.backward()``,
``accelerator.backward(loss)``, ``scaler.scale(loss).backward()``, ``optimizer.step()``,
``scaler.step(opt)``) has it as its innermost loop.  So an epoch loop around a batch
loop does not step itself, and an evaluation loop (no backward, no step) never steps.
A statement under a periodic guard (an ``if`` whose test uses ``%``), or in a branch
that leaves the loop (ends with break/return/raise), does not run on every step.
"""

from __future__ import annotations

from typing import Optional

from fsdp_lint.facts.model import Context, Loop


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
