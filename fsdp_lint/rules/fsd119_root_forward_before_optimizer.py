"""FSD119 root-forward-before-optimizer."""

from __future__ import annotations

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.flow import can_follow
from fsdp_lint.facts.fsdp_modules import forward_calls_on_sharded, fully_sharded, reshards_after_forward
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.optimizers import optimizers
from fsdp_lint.rules.base import FIX_NEVER, Rule

# calls on the model between the forward and the optimizer that leave its parameters sharded again
_RESHARDING = frozenset({"reshard", "set_reshard_after_forward"})


class RootForwardBeforeOptimizer(Rule):
    code = "FSD119"
    name = "root-forward-before-optimizer"
    summary = "a forward of the `fully_shard`-ed root before the optimizer is built from its parameters: the optimizer holds the root's unsharded tensors, which never train"
    fix_availability = FIX_NEVER
    markers = (("fully_shard",), ("parameters(",))
    gate_facts = ("fsdp2_wrap",)
    doc = """\
## What it does
Checks for an optimizer built from `model.parameters()` where `model` was sharded with FSDP2
`fully_shard` (with `reshard_after_forward` left out, the default, or `False`), after a
forward of `model` (`model(batch)`: a warm-up, a shape check, a dry run, also under
`torch.no_grad()`) in the same function, with no `.backward()` and no `model.reshard()`
between the forward and the optimizer.

## Why is this bad?
FSDP2 leaves the root module's parameters unsharded after its forward: with
`reshard_after_forward` left out, the root's first forward sets its post-forward mesh to
none (`FSDPState._lazy_init`: "for the root, do not reshard after forward"), and with
`False` every module stays unsharded. Until the next backward, `model.parameters()` yields
the all-gathered plain `nn.Parameter`s, not the sharded DTensor parameters FSDP trains.
The optimizer keeps those: after the backward FSDP swaps the sharded parameters back in, the
gradients land on them, and the optimizer's tensors get none, so the root's own weights
(embeddings, final norm, output head) never change, silently. Measured by the verifier on
CPU/gloo, torch 2.13.0, one and two ranks (a 3-layer MLP, its first layer in its own group,
a warm-up forward under `torch.no_grad()`): the optimizer held 4 of its 6 parameters as
plain tensors and 4 of the 6 sharded parameters did not change over three training steps;
built before the warm-up, it held none and all 6 changed. With `reshard_after_forward=False`
it held all 6 and none trained (pytorch#149205, #144289). A `.backward()` or
`model.reshard()` before the optimizer shards the root again (measured: no plain tensor held).
With `reshard_after_forward=True` given explicitly, torch 2.13.0 reshards the root too and
nothing is flagged (before pytorch#154704 and #155319, June 2025, the root was kept
unsharded whatever the argument: code that targets an older torch is not covered there).

## Example
```python
import torch
from torch.distributed.fsdp import fully_shard

for block in model.layers:
    fully_shard(block)
fully_shard(model)
with torch.no_grad():
    model(example_batch)  # warm-up
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
```

## Use instead
```python
import torch
from torch.distributed.fsdp import fully_shard

for block in model.layers:
    fully_shard(block)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
with torch.no_grad():
    model(example_batch)  # warm-up
```
Or call `model.reshard()` after the warm-up forward.

## Known problems
- A `reshard_after_forward` the rule cannot read (an int, a variable, an unreadable
  `**kwargs`) keeps it quiet, as does a literal `True`.
- The forward and the optimizer must be in the same function; any `.backward()` between them
  counts as a reshard, whatever it differentiates.
- The module must reach a `fully_shard` the file shows, as in FSD109; a model sharded where
  the file cannot see is not flagged.

## Fix safety
No automatic fix: the optimizer construction or the warm-up has to move, or a
`model.reshard()` to be added, which is a choice of the program.

## References
- [`fully_shard`'s `reshard_after_forward`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
- pytorch/pytorch#149205, pytorch/pytorch#144289, pytorch/pytorch#155319
"""

    def check(self, facts, report):
        forwards = list(forward_calls_on_sharded(facts))
        if not forwards:
            return
        for optimizer in optimizers(facts):
            opt = optimizer.site
            origin = fully_sharded(facts, optimizer.owner, opt.ctx, opt.order)
            if origin is None or reshards_after_forward(facts, origin) not in (None, False):
                continue
            module = optimizer.module
            for site, forward_origin, callee in forwards:
                if (
                    forward_origin.wrap is not origin.wrap
                    or callee != module
                    or site.ctx.function is not opt.ctx.function
                    or not site.order < opt.order
                    or not can_follow(site.ctx, site.order, opt.ctx, opt.order)
                    or _resharded_between(facts, module, site, opt)
                ):
                    continue
                report(
                    opt.node,
                    f"optimizer built from `{module}.parameters()` after a forward of the `fully_shard`-ed root "
                    f"`{module}` (line {report.row(site.node)}): FSDP2 leaves the root unsharded after its forward, so "
                    "the optimizer holds the unsharded plain tensors, not the sharded parameters that train; build the "
                    "optimizer before the forward (or call `reshard()` first)",
                    statement=opt.ctx.statement,
                )
                break


def _resharded_between(facts, module: str, forward, opt) -> bool:
    """A ``.backward()`` (FSDP reshards the root after it) or ``module.reshard()`` /
    ``module.set_reshard_after_forward(...)`` between the forward and the optimizer, in
    their function."""
    for site in facts.calls:
        if site.ctx.function is not opt.ctx.function or not (forward.order <= site.done and site.order < opt.order):
            continue  # ``done``: ``model(batch).sum().backward()`` ends after the forward it holds
        func = site.node.func
        if not isinstance(func, cst.Attribute):
            continue
        if site.attr == "backward" or (site.attr in _RESHARDING and dotted_name(func.value) == module):
            return True
    return False
