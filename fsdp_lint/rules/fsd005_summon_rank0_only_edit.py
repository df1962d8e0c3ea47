"""FSD005 summon-rank0-only-edit."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.param_writes import param_edits
from fsdp_lint.facts.ranks import rank_guard
from fsdp_lint.facts.summon import summon_calls, summons_entering
from fsdp_lint.rules.base import FIX_NEVER, Rule


class SummonRank0OnlyEdit(Rule):
    code = "FSD005"
    name = "summon-rank0-only-edit"
    summary = "parameters edited in a `rank0_only=True` summon, or on rank 0 only in a writeback summon"
    fix_availability = FIX_NEVER
    markers = (("summon_full_params",),)  # rank0_only may be passed by position
    gate_calls = frozenset({torch_api.SUMMON})
    gate_torch_only = True
    gate_sites = True
    doc = """\
## What it does
Checks for parameters modified (in-place tensor methods such as `add_`/`copy_`/`zero_`,
augmented, subscript or attribute assignment, `load_state_dict`) inside a torch FSDP
`summon_full_params(..., rank0_only=True)` block, and for modifications made only under a
rank test (`if rank == 0:`, `if dist.get_rank() == 0:`, `if accelerator.is_main_process:`)
inside a summon block that writes back. A write is a parameter edit when its target comes
from the gathered module: the module itself, a name bound from it without a copy
(`for p in model.parameters()`, `w = model.fc.weight`, `.detach()`, `.data`), or a
`.weight`/`.bias`/`.data`/`.grad` chain. Filling a dict with copies, counters on a stats
object or an accumulator tensor are not edits.

## Why is this bad?
With `rank0_only=True` (which requires `writeback=False`) only rank 0 gathers the full
parameters; the other ranks see their own local shards. An in-place edit on rank 0 is
discarded at exit while the same edit on the other ranks lands in their shards: the ranks
silently diverge (measured on CPU/gloo, torch 2.13.0, and on 2 GPUs, torch 2.11). Editing
only under `if rank == 0:` in a writeback block keeps only rank 0's slice of the edit: the
other ranks write back their unedited copy of their own slice.

## Example
```python
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

with FSDP.summon_full_params(model, rank0_only=True, writeback=False):
    for param in model.parameters():
        param.data.mul_(0.5)
```

## Use instead
```python
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

with FSDP.summon_full_params(model):
    for param in model.parameters():
        param.data.mul_(0.5)
```

## Known problems
- Only edits the block itself shows are seen: a write inside a function the block calls (a
  helper, `model.apply(fn)`) is not followed, and a summon not entered by a `with` statement
  (stored in a name, entered through an `ExitStack`) is not checked.
- Rank tests are those `facts.ranks` recognises (the list under FSD104, also a name assigned
  one). An edit under a test it does not recognise (a flag passed in as a parameter) is
  taken as an edit on every rank: inside a `rank0_only=True` summon it is still flagged
  (the ranks diverge), inside a write-back summon it is not.
- A `rank0_only` or `writeback` that is not a literal leaves the matching case unflagged.

## Fix safety
No automatic fix: whether the edit should happen on every rank (drop `rank0_only`, edit on
all ranks) or not at all is the author's decision.

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for summon in summon_calls(facts):
            block = summon.site.entered_by
            if block is None:
                continue
            edits = param_edits(facts, block, [s.module_name for s in summons_entering(facts, block)])
            if not edits:
                continue
            depth = next(i for i, w in enumerate(edits[0].ctx.withs) if w is block)
            one_rank = [e for e in edits if rank_guard(facts, e.ctx, depth + 1)]
            if summon.value("rank0_only") is True:
                if one_rank and len(one_rank) == len(edits):
                    message = (
                        "parameters edited on rank 0 inside a `rank0_only=True` summon: rank 0 holds a "
                        "temporary full copy and its edit is discarded at exit; no shard changes"
                    )
                else:
                    message = (
                        "parameters edited inside a `rank0_only=True` summon: rank 0's edit is discarded "
                        "while the other ranks, which see their local shards, keep theirs; the ranks diverge"
                    )
            elif summon.value("writeback") is True and one_rank:
                message = (
                    f"parameters edited only under the rank test at line {report.row(rank_guard(facts, one_rank[0].ctx, depth + 1).node)} "
                    "inside a writeback summon: only that rank's slice of the edit persists; edit on every rank"
                )
            else:
                continue
            report(summon.node, message, statement=summon.site.ctx.statement)
