"""FSD104 collective-on-one-rank."""

from __future__ import annotations

from fsdp_lint.rules.base import FIX_NEVER, Rule


class CollectiveOnOneRank(Rule):
    code = "FSD104"
    name = "collective-on-one-rank"
    summary = "a full state dict or `summon_full_params` (collectives) called only under a rank test: hang"
    fix_availability = FIX_NEVER
    markers = (
        # state_dict() counts only on a module this file wraps with FSDP(...)
        ("FullyShardedDataParallel", "get_model_state_dict", "get_state_dict", "summon_full_params"),
        ("rank", "is_main_process", "is_global_zero", "is_master"),
    )
    doc = """\
## What it does
Checks for collectives reached on one rank only, under a rank test (`if rank == 0:`,
`if dist.get_rank() == 0:`, `if local_rank == 0:`, `if accelerator.is_main_process:`,
`if trainer.is_global_zero:`): `state_dict()` on a module wrapped by FSDP1 in this file,
`get_model_state_dict(...)`, `get_state_dict(...)`, and torch FSDP `summon_full_params`.
Saving (`torch.save`) under the rank test is fine and common: only the gathering call is
flagged.

## Why is this bad?
Gathering a full state dict or the full parameters is an all-gather in which every rank
must take part. Called on one rank, that rank waits for the others forever: the job hangs
until the backend timeout (30 minutes by default), or fails later in a mismatched
collective (measured on CPU/gloo, torch 2.13.0).

The verifier shows where each rank waits: at its timeout every rank's stack is dumped
(`faulthandler`) and read back. The hang need not be where the rank test is: on CPU/gloo a
`state_dict()` on rank 0 can pair its all-gathers with the other rank's next forward, and the
ranks then block in different collectives of the training step.

## Example
```python
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
if dist.get_rank() == 0:
    torch.save(model.state_dict(), "model.pt")
```

## Use instead
```python
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
state = model.state_dict()
if dist.get_rank() == 0:
    torch.save(state, "model.pt")
```

## Fix safety
No automatic fix: the gathering call has to move before the rank test.

## References
- [FSDP state dicts](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.state_dict_type)
"""

    def check(self, facts, report):
        from fsdp_lint.facts import torch_api
        from fsdp_lint.facts.imports import dotted_name

        fsdp1 = facts.fsdp_modules().fsdp1
        summons = {id(s.node) for s in facts.summons()}
        for site in facts.calls:
            if not site.ctx.guards:
                continue
            what = None
            if id(site.node) in summons:
                what = "`summon_full_params` (an all-gather)"
            elif site.attr == "state_dict" and dotted_name(getattr(site.node.func, "value", None)) in fsdp1:
                what = "a full FSDP state dict (an all-gather)"
            elif facts.qualname(site.node.func) in torch_api.FULL_STATE_DICT_FUNCTIONS:
                what = f"`{site.attr}` (a collective)"
            if what is None:
                continue
            guard = facts.rank_guard(site.ctx)
            if guard is None:
                continue
            report(
                site.node,
                f"{what} called only under the rank test at line {report.row(guard.node)}: the other ranks never "
                "join and the job hangs; gather on every rank, then save under the rank test",
                statement=site.ctx.statement,
            )
