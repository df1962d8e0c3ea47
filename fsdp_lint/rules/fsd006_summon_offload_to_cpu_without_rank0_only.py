"""FSD006 summon-offload-to-cpu-without-rank0-only."""

from __future__ import annotations

from fsdp_lint.diagnostics import UNSAFE
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.fixes import set_arguments
from fsdp_lint.rules.base import FIX_ALWAYS, FixProposal, Rule


class SummonOffloadToCpuWithoutRank0Only(Rule):
    code = "FSD006"
    name = "summon-offload-to-cpu-without-rank0-only"
    summary = "`offload_to_cpu=True` without `rank0_only=True`: every rank copies the full model to host memory"
    fix_availability = FIX_ALWAYS
    markers = (("summon_full_params",), ("offload_to_cpu",))
    doc = """\
## What it does
Checks for torch FSDP `summon_full_params(..., offload_to_cpu=True)` calls that leave
`rank0_only` at its default or pass a literal `False` (also through a `**kwargs` dict). A
non-literal `rank0_only` (a variable, a test parameter) is an explicit choice and is not
flagged.

## Why is this bad?
Every rank then copies the whole unsharded model into host memory; ranks on one host share
that memory, so an 8-GPU node holds eight full copies. PyTorch warns at entry:
`UserWarning: offload_to_cpu=True and rank0_only=False may result in theunsharded
parameters being redundantly copied to CPU memory for GPUs sharing the same CPU memory,
which risks CPU OOM. We recommend using offload_to_cpu=True with rank0_only=True.` (sic;
seen on CPU with torch 2.13.0 and on 2 GPUs with torch 2.11).

The verifier measures the copies rather than trusting the warning: each rank's resident host
memory inside the block against the full model's size, and the same with `rank0_only=True`
in the fixed program (only rank 0 grows). On CPU this needs torch >= 2.14.1: earlier releases
hit pytorch#188989 (FSD003) on CPU-resident parameters first.

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

with FSDP.summon_full_params(model, offload_to_cpu=True, writeback=False):
    full = {n: p.clone() for n, p in model.named_parameters()}
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

with FSDP.summon_full_params(model, offload_to_cpu=True, rank0_only=True, writeback=False):
    full = {n: p.clone() for n, p in model.named_parameters()}
```

## Fix safety
The fix adds `rank0_only=True` (and `writeback=False`, which `rank0_only` requires). It is
always unsafe: the other ranks then see only their local shards inside the block, which
changes what code there computes.

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for summon in summon_calls(facts):
            if summon.value("offload_to_cpu") is not True or summon.value("rank0_only") is not False:
                continue
            values = {"rank0_only": "True"}
            if summon.value("writeback") is not False:
                values["writeback"] = "False"
            new = set_arguments(summon.node, summon.args, values)
            report(
                summon.node,
                "`offload_to_cpu=True` without `rank0_only=True`: every rank copies the full model into "
                "host memory (PyTorch warns: risks CPU OOM); if only rank 0 uses the full weights, pass "
                "`rank0_only=True, writeback=False`",
                (FixProposal(UNSAFE, "Pass `rank0_only=True` (and `writeback=False`)", summon.node, new) if summon.fixable else None),
                statement=summon.site.ctx.statement,
            )

