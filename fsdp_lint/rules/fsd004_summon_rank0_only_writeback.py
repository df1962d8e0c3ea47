"""FSD004 summon-rank0-only-writeback."""

from __future__ import annotations

from fsdp_lint.diagnostics import SAFE, UNSAFE
from fsdp_lint.facts import torch_api
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.fixes import set_arguments
from fsdp_lint.rules.base import FIX_SOMETIMES, FixProposal, Rule


class SummonRank0OnlyWriteback(Rule):
    code = "FSD004"
    name = "summon-rank0-only-writeback"
    summary = "`rank0_only=True` with `writeback` missing or True: always NotImplementedError"
    fix_availability = FIX_SOMETIMES
    markers = (("summon_full_params",),)  # rank0_only may be passed by position
    gate_calls = frozenset({torch_api.SUMMON})
    gate_torch_only = True
    gate_arguments = {"rank0_only": torch_api.SUMMON_PARAMS.index("rank0_only")}
    gate_sites = True
    doc = """\
## What it does
Checks for torch FSDP `summon_full_params(..., rank0_only=True)` calls whose `writeback` is
missing (its default is `True`) or literally `True`.

## Why is this bad?
FSDP rejects the combination at entry, on every rank:
`NotImplementedError: writeback=True and rank0_only=True is not supported yet`
(torch/distributed/fsdp/_unshard_param_utils.py, `_validate_unshard_params_args`). Measured
on torch 2.13.0 (CPU, gloo) and 2.11 (2 GPUs, NCCL).

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

with FSDP.summon_full_params(model, rank0_only=True):
    if rank == 0:
        torch.save(model.state_dict(), "full.pt")
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

with FSDP.summon_full_params(model, rank0_only=True, writeback=False):
    if rank == 0:
        torch.save(model.state_dict(), "full.pt")
```

## Known problems
- The rule reads only the call's own arguments, also through a `**kwargs` dict it can read
  (`dict(rank0_only=True)`). A `rank0_only` or `writeback` it cannot read as a literal (a
  variable, an unreadable `**kwargs`) is not judged, and nothing is flagged.
- A `summon_full_params` called on an instance whose class the file does not show counts as
  torch's only when the module is passed again as its first argument and the file imports
  `torch.distributed.fsdp` (fairscale's method takes no module).

## Fix safety
The fix adds `writeback=False` (or turns a literal `True` into `False`). It is safe when
the `with` block that enters the call provably does not modify parameters, unsafe otherwise
(such a block wanted its edits kept; see FSD005 for why `rank0_only` edits diverge anyway).

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for summon in summon_calls(facts):
            if summon.value("rank0_only") is True and summon.value("writeback") is True:
                report(
                    summon.node,
                    "`rank0_only=True` requires `writeback=False`: this call raises "
                    "`NotImplementedError: writeback=True and rank0_only=True is not supported yet`",
                    (FixProposal(
                        UNSAFE if summon.block_may_edit(facts) else SAFE,
                        "Pass `writeback=False`",
                        summon.node,
                        set_arguments(summon.node, summon.args, {"writeback": "False"}),
                    ) if summon.fixable else None),
                    statement=summon.site.ctx.statement,
                )
