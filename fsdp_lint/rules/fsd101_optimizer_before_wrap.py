"""FSD101 optimizer-before-wrap."""

from __future__ import annotations

from fsdp_lint.rules.base import FIX_NEVER, Rule


class OptimizerBeforeWrap(Rule):
    code = "FSD101"
    name = "optimizer-before-wrap"
    summary = "optimizer built from a module's parameters before FSDP wraps it, or from the unwrapped module"
    fix_availability = FIX_NEVER
    markers = (
        ("FullyShardedDataParallel", "fully_shard"),
        ("parameters(",),
        ("optim", "Adam", "SGD", "Adagrad", "Adadelta", "RMSprop", "Rprop", "Lion", "Lamb", "LAMB", "Adafactor"),
    )
    doc = """\
## What it does
Checks for an optimizer built from `m.parameters()` before `m` is wrapped by torch FSDP
(`FSDP(m, ...)` or FSDP2 `fully_shard(m)`) in the same function and still used after the
wrap; and for an optimizer built after wrapping but from the unwrapped module object
(`self.model = FSDP(model)` then `Adam(model.parameters())`). FSDP1 with
`use_orig_params=True` keeps the original parameter objects and is not flagged.

## Why is this bad?
FSDP replaces the module's parameters (by flat parameters, or FSDP2 DTensors). The
optimizer keeps stepping the old tensors, which no forward or backward uses any more: the
weights never change, silently, and a full-size copy of the old parameters stays alive
(measured on CPU/gloo, torch 2.13.0, and on 2 GPUs, torch 2.11).

## Example
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model = FSDP(model)
for batch in loader:
    model(batch).sum().backward()
    optimizer.step()
```

## Use instead
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for batch in loader:
    model(batch).sum().backward()
    optimizer.step()
```

## Fix safety
No automatic fix: the optimizer construction has to move after the wrap, which may move
other code with it.

## References
- [FSDP: construct the optimizer after wrapping](https://pytorch.org/docs/stable/fsdp.html)
"""

    def check(self, facts, report):
        from fsdp_lint.facts.optimizers import optimizers, used_after

        modules = facts.fsdp_modules()
        for optimizer in optimizers(facts):
            for wrap in modules.wraps + modules.fsdp2_wraps:
                site, wrapped, target = wrap.site, wrap.wrapped, wrap.target
                if wrapped != optimizer.module or site.ctx.function is not optimizer.site.ctx.function:
                    continue
                if wrap.use_orig_params is True:
                    continue  # FSDP1 use_orig_params=True keeps the parameter objects
                if optimizer.site.order < site.order:
                    if optimizer.target is None or not used_after(facts, optimizer.target, site.ctx.function, site.order):
                        continue
                    message = (
                        f"optimizer built from `{wrapped}.parameters()` before `{wrapped}` is wrapped by FSDP "
                        f"(line {report.row(site.node)}) and used afterwards: it steps the old parameters and "
                        "the weights never change; build it after wrapping"
                    )
                elif not wrap.fsdp2 and target is not None and target != wrapped:
                    message = (
                        f"optimizer built from the unwrapped `{wrapped}` after `{target} = FSDP({wrapped}, ...)` "
                        f"(line {report.row(site.node)}): build it from `{target}.parameters()`"
                    )
                else:
                    continue
                report(optimizer.site.node, message, statement=optimizer.site.ctx.statement)
                break

