"""FSD010 summon-offload-to-cpu-no-shard."""

from __future__ import annotations

from fsdp_lint.diagnostics import UNSAFE
from fsdp_lint.facts.fsdp_modules import wrap_config
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.fixes import drop_argument
from fsdp_lint.rules.base import FIX_ALWAYS, FixProposal, Rule


class SummonOffloadToCpuNoShard(Rule):
    code = "FSD010"
    name = "summon-offload-to-cpu-no-shard"
    summary = "`offload_to_cpu=True` on a model wrapped with `ShardingStrategy.NO_SHARD`: NotImplementedError"
    fix_availability = FIX_ALWAYS
    markers = (("summon_full_params",), ("NO_SHARD",), ("offload_to_cpu",))
    doc = """\
## What it does
Checks for torch FSDP `summon_full_params(..., offload_to_cpu=True)` on a module wrapped in
this file with `sharding_strategy=ShardingStrategy.NO_SHARD`.

## Why is this bad?
FSDP raises at entry, on every rank: `NotImplementedError: offload_to_cpu=True and
NO_SHARD is not supported yet` (also with world size 1; torch 2.13.0 CPU/gloo and 2.11 on
2 GPUs).

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

model = FSDP(net, sharding_strategy=ShardingStrategy.NO_SHARD)
with FSDP.summon_full_params(model, offload_to_cpu=True, rank0_only=True, writeback=False):
    state = {n: p.clone() for n, p in model.named_parameters()}
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

model = FSDP(net, sharding_strategy=ShardingStrategy.NO_SHARD)
with FSDP.summon_full_params(model, rank0_only=True, writeback=False):
    state = {n: p.cpu() for n, p in model.named_parameters()}
```

## Fix safety
The fix drops `offload_to_cpu=True`; it is unsafe because the block then sees the
parameters on their device instead of on the CPU (code there may rely on CPU tensors).

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for summon in summon_calls(facts):
            if summon.value("offload_to_cpu") is not True:
                continue
            wraps = summon.origins(facts).fsdp1
            no_shard = [o for o in wraps if wrap_config(facts, o).sharding == {"NO_SHARD"}]
            if not no_shard:
                continue
            report(
                summon.node,
                f"`offload_to_cpu=True` on a NO_SHARD model (line {report.row(no_shard[0].wrap.site.node)}) raises "
                "`NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet`",
                (FixProposal(UNSAFE, "Remove `offload_to_cpu=True`", summon.node,
                            drop_argument(summon.node, summon.args, "offload_to_cpu")) if summon.fixable else None),
                statement=summon.site.ctx.statement,
            )
