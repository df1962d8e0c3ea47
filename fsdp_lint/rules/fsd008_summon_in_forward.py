"""FSD008 summon-in-forward."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.hooks import runs_in_forward_or_backward
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.rules.base import FIX_NEVER, Rule


class SummonInForward(Rule):
    code = "FSD008"
    name = "summon-in-forward"
    summary = "`summon_full_params` inside `forward()` or a forward/backward hook"
    fix_availability = FIX_NEVER
    markers = (("summon_full_params",), ("forward", "hook"))
    gate_calls = frozenset({torch_api.SUMMON})
    gate_torch_only = True
    gate_sites = True
    doc = """\
## What it does
Checks for a torch FSDP `summon_full_params(...)` call inside the `forward()` method of a
`torch.nn.Module` subclass, or inside a function registered as a hook
(`register_forward_hook`, `register_forward_pre_hook`, `register_full_backward_hook`,
`register_hook`, ...) in the same module.

## Why is this bad?
FSDP refuses to unshard while it is running forward or backward:
`AssertionError: Cannot manually unshard parameters during forward/backward` (torch
2.13.0 CPU/gloo and 2.11 on 2 GPUs).

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def log_norms(module, inputs, output):
    with FSDP.summon_full_params(model, writeback=False):
        print(sum(p.norm() for p in model.parameters()))

model = FSDP(net)
net[0].register_forward_hook(log_norms)
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def log_norms():
    with FSDP.summon_full_params(model, writeback=False):
        print(sum(p.norm() for p in model.parameters()))

model = FSDP(net)
loss = model(batch).sum()
log_norms()
```

## Known problems
- Forward code is what the file shows: the body of `forward()` of a class the file shows
  deriving from `torch.nn.Module` (directly or through its own classes), or a function of
  this file registered as a hook in this file. A class whose base comes from another module
  (transformers' `PreTrainedModel`, a base class of the project), a hook registered in
  another file, or a summon in a helper that `forward()` calls is not seen, and nothing is
  flagged.

## Fix safety
No automatic fix: the summon has to move to between steps.

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for summon in summon_calls(facts):
            where = runs_in_forward_or_backward(facts, summon.site.ctx)
            if where:
                report(
                    summon.node,
                    f"`summon_full_params` inside {where}, which runs during forward/backward: "
                    "`AssertionError: Cannot manually unshard parameters during forward/backward`",
                    statement=summon.site.ctx.statement,
                )
