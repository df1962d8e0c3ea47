"""FSD117 to-empty-without-init."""

from __future__ import annotations

from fsdp_lint.facts.flow import can_follow
from fsdp_lint.facts.fsdp_modules import forward_calls_on_sharded, fully_sharded
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.meta_init import initialises_every_rank, may_initialise, meta_built, to_empty_calls
from fsdp_lint.rules.base import FIX_NEVER, Rule


class ToEmptyWithoutInit(Rule):
    code = "FSD117"
    name = "to-empty-without-init"
    summary = "a model built on the meta device, sharded with `fully_shard`, materialised with `to_empty()` and run with no re-initialisation or load on every rank: the weights are uninitialised memory"
    fix_availability = FIX_NEVER
    markers = (("to_empty",), ("fully_shard",), ("meta", "init_empty_weights"))
    gate_facts = ("fsdp2_wrap",)
    doc = """\
## What it does
Checks for `model.to_empty(device=...)` on a module built on the meta device (inside
`with torch.device("meta"):` or accelerate's `with init_empty_weights():`, or a constructor
given `device="meta"`) and sharded with FSDP2 `fully_shard`, followed in the same function
by a forward of `model` with no call between that may give the parameters values: a
re-initialisation (`model.init_weights()`, `m.reset_parameters()`, `model.apply(init_fn)`,
`torch.nn.init.*`), a load (`set_model_state_dict`, `model.load_state_dict`, DCP `load`),
any call that takes `model` or a part of it, or a function of this file (its body is not
followed). Every doubt counts as an initialisation.

## Why is this bad?
A module on the meta device has no storage. `to_empty` allocates it with `torch.empty`:
the parameters (FSDP2's sharded DTensors) hold whatever the memory held before. Training
runs on garbage without an error: NaN or a loss far from a random init's (11.08 instead of
3.63 reported, transformers#45902, torchtitan#4783, SkyRL#1709). Buffers computed in
`__init__` (RoPE `inv_freq`) are lost the same way and need their own re-computation.
Measured by the verifier on CPU/gloo, torch 2.13.0, one and two ranks (a 3-layer MLP):
after `to_empty`, 5 or 6 of the 6 parameters (it varies with what the memory held) were
outside `nn.Linear`'s init range, non-finite or zero, and the first loss was NaN; with
`reset_parameters()` on each layer after `to_empty`, none. Its one-rank form re-initialises
under `if dist.get_rank() == 0:` (two ranks): rank 0's shards were nn.Linear's init, rank 1's
were not (4 to 6 of the 6 in three runs, with what the memory held) and the first loss was NaN (no hang: `reset_parameters` on a DTensor shard
runs no collective); with the re-initialisation on every rank, none.

## Example
```python
import torch
from torch.distributed.fsdp import fully_shard

with torch.device("meta"):
    model = Transformer(config)
fully_shard(model)
model.to_empty(device="cuda")
loss = model(batch).sum()
```

## Use instead
```python
import torch
from torch.distributed.fsdp import fully_shard

with torch.device("meta"):
    model = Transformer(config)
fully_shard(model)
model.to_empty(device="cuda")
with torch.no_grad():
    model.init_weights()
loss = model(batch).sum()
```
Or load a checkpoint after `to_empty` (`set_model_state_dict`, DCP `load`).

## Known problems
- Every doubt counts as an initialisation: any call between `to_empty` and the forward that
  takes the model or a part of it, or any function of this file (its body is not followed),
  keeps the rule quiet. One exception: a load or re-initialisation under a rank test
  (`if rank == 0: model.load_state_dict(...)`) fills that rank's shards only, so it does not
  count for the other ranks, and the rule reports (naming it).
- The meta-device construction, the `to_empty` and the forward must be visible: the model
  built on meta in the same scope the `to_empty` sees, and the forward in the same function.
  A model built on meta in another function or file is not flagged.
- The module must reach a `fully_shard` the file shows, as in FSD109.

## Fix safety
No automatic fix: how the model initialises its weights (or which checkpoint to load) is
the model's own.

## References
- [FSDP2 meta-device initialisation](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
- huggingface/transformers#45902, pytorch/torchtitan#4783
"""

    def check(self, facts, report):
        calls = to_empty_calls(facts)
        if not calls:
            return
        forwards = list(forward_calls_on_sharded(facts))
        for site in calls:
            receiver = site.node.func.value
            module = dotted_name(receiver)
            built = meta_built(facts, module, site.ctx, site.order)
            if built is None or fully_sharded(facts, receiver, site.ctx, site.order) is None:
                continue
            use = next(
                (f for f, _, callee in forwards
                 if callee == module and f.ctx.function is site.ctx.function and f.order > site.done
                 and can_follow(site.ctx, site.order, f.ctx, f.order)),
                None,
            )
            if use is None:
                continue
            between = _initialising_between(facts, module, site, use)
            if any(initialises_every_rank(facts, init, site) for init in between):
                continue
            one_rank = f" (the one at line {report.row(between[0].node)} runs on one rank only)" if between else ""
            report(
                site.node,
                f"`{module}` was built on the meta device (line {report.row(built.value)}) and `to_empty` gives it "
                f"uninitialised memory; its forward at line {report.row(use.node)} runs with no re-initialisation or "
                f"load between{one_rank}: the weights are garbage; call `{module}.init_weights()` / "
                "`reset_parameters()` or load a checkpoint on every rank after `to_empty`",
                statement=site.ctx.statement,
            )


def _initialising_between(facts, module: str, to_empty, use):
    """The calls between ``to_empty`` and the forward that may give ``module`` values."""
    return [
        site for site in facts.calls
        if site is not to_empty and site.ctx.function is to_empty.ctx.function
        and to_empty.done < site.order < use.order and may_initialise(facts, site, module)
    ]
