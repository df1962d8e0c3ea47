"""FSD109 no-sync-on-fully-shard."""

from __future__ import annotations

from fsdp_lint.facts.fsdp_modules import method_calls_on_sharded, wrap_line
from fsdp_lint.rules.base import FIX_NEVER, Rule


class NoSyncOnFullyShard(Rule):
    code = "FSD109"
    name = "no-sync-on-fully-shard"
    summary = "FSDP1's `no_sync()` on a module sharded with FSDP2 `fully_shard`: AttributeError"
    fix_availability = FIX_NEVER
    markers = (("no_sync",), ("fully_shard",))
    gate_facts = ("fsdp2_wrap",)
    gate_calls = frozenset({"no_sync"})
    gate_sites = True
    doc = """\
## What it does
Checks for `model.no_sync()` (FSDP1's and DDP's gradient-accumulation context) on a module
that the file shards with FSDP2 `fully_shard` (directly, in a helper of the file, or passed
in by a caller that shards it), after the sharding ran. Every construction the module may
come from must be a `fully_shard`: a model that may be FSDP1- or DDP-wrapped on some path is
left alone.

## Why is this bad?
FSDP2 modules have no `no_sync`: gradient accumulation code ported from FSDP1 fails at its
first micro-batch with `AttributeError: 'FSDPSequential' object has no attribute 'no_sync'`
(reproduced by the verifier on CPU/gloo, torch 2.13.0, two ranks; reported in
accelerate#3760, pytorch#148715, torchtitan#940). FSDP2's switch is
`model.set_requires_gradient_sync(False)` before the micro-batches that should not reduce,
and `set_requires_gradient_sync(True)` before the last one's backward.

## Example
```python
from torch.distributed.fsdp import fully_shard

fully_shard(model)
for i, batch in enumerate(micro_batches):
    if i < len(micro_batches) - 1:
        with model.no_sync():
            model(batch).sum().backward()
    else:
        model(batch).sum().backward()
```

## Use instead
```python
from torch.distributed.fsdp import fully_shard

fully_shard(model)
for i, batch in enumerate(micro_batches):
    model.set_requires_gradient_sync(i == len(micro_batches) - 1)
    model(batch).sum().backward()
```

## Known problems
- The module must reach a `fully_shard` the file shows: in this file, a helper of the file,
  a project helper its imports lead to, or the callers in this file of the function taking
  it as a parameter. A model sharded where the file cannot see (a parameter with no caller
  in the file, an attribute set in another file) is not flagged.
- A path that leads to FSDP1, DDP or a plain module (a `torch.nn` module, a class of this
  file, `from_pretrained`) keeps it quiet, and so does a path to a value returned by a call
  the file cannot see into (`model = load_model()` on one branch): every path must reach a
  `fully_shard`.

## Fix safety
No automatic fix: `no_sync()` is a block, `set_requires_gradient_sync` a switch that must be
turned back on before the last micro-batch's backward; where is a choice of the loop.

## References
- [`FSDPModule.set_requires_gradient_sync`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
- pytorch/pytorch#148715, huggingface/accelerate#3760, pytorch/torchtitan#940
"""

    def check(self, facts, report):
        for site, origin, name in method_calls_on_sharded(facts, "no_sync"):
            report(
                site.node,
                f"`{name}` is sharded with FSDP2 `fully_shard` ({wrap_line(origin.wrap, report.row)}), which has "
                "no `no_sync()`: AttributeError at the first micro-batch; use "
                f"`{name}.set_requires_gradient_sync(False)` and turn it back on before the last micro-batch's backward",
                statement=site.ctx.statement,
            )
