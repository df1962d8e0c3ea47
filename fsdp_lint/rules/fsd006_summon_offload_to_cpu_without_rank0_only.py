"""FSD006 summon-offload-to-cpu-without-rank0-only."""

from __future__ import annotations

from fsdp_lint.diagnostics import UNSAFE
from fsdp_lint.facts import torch_api
from fsdp_lint.facts.offload import CPU_DEVICE
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.facts.values import UNKNOWN
from fsdp_lint.fixes import set_arguments
from fsdp_lint.rules.base import FIX_SOMETIMES, FixProposal, Rule


class SummonOffloadToCpuWithoutRank0Only(Rule):
    code = "FSD006"
    name = "summon-offload-to-cpu-without-rank0-only"
    summary = "`offload_to_cpu=True` without `rank0_only=True`: every rank copies the full model to host memory"
    fix_availability = FIX_SOMETIMES
    markers = (("summon_full_params",),)  # offload_to_cpu may be passed by position
    gate_calls = frozenset({torch_api.SUMMON})
    gate_torch_only = True
    gate_arguments = {"offload_to_cpu": torch_api.SUMMON_PARAMS.index("offload_to_cpu")}
    gate_sites = True
    doc = """\
## What it does
Checks for torch FSDP `summon_full_params(..., offload_to_cpu=True)` calls that leave
`rank0_only` at its default or pass a literal `False` (also through a `**kwargs` dict). A
non-literal `rank0_only` (a variable, a test parameter) is an explicit choice and is not
flagged. An `offload_to_cpu` whose every value the file shows is a "launched distributed?"
test (`offload_to_cpu = get_world_size() > 1`, `dist.is_initialized()`) counts as `True`:
it is true in every multi-rank run, the only run where the copies add up.

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

## Known problems
- The rule reads only the call's arguments: a `rank0_only` or `offload_to_cpu` that is not a
  literal (a variable, an unreadable `**kwargs`) is an explicit choice and is not flagged,
  unless it is a "launched distributed?" test (above).
- It does not know the model's size, the host's memory or whether every rank needs the full
  weights: any `offload_to_cpu=True` without `rank0_only=True` is flagged. Where every rank
  does need them and the host holds world-size copies, add `# noqa: FSD006`.

## Fix safety
The fix adds `rank0_only=True` (and `writeback=False`, which `rank0_only` requires). It is
always unsafe: the other ranks then see only their local shards inside the block, which
changes what code there computes. There is no fix where the block may edit parameters
(`writeback=False` would drop the edit, and an edit on rank 0 alone is FSD005), where
`writeback` is computed by the code, or where the parameters already live on the CPU (then
`offload_to_cpu=True` itself is the problem: FSD003 removes it).

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for summon in summon_calls(facts):
            if summon.value("offload_to_cpu") is not True or summon.value("rank0_only") is not False:
                continue
            values = {"rank0_only": "True"}
            writeback = summon.value("writeback")
            if writeback is not False:
                values["writeback"] = "False"
            # no fix where it would drop an edit (rank0_only needs writeback=False), overrule a
            # writeback the code computes, or where offload_to_cpu=True itself is the bug (FSD003)
            fixable = summon.fixable and writeback is not UNKNOWN and not summon.block_may_edit(facts) \
                and not any(e.kind == CPU_DEVICE and e.certain for e in summon.params_on_cpu(facts))
            new = set_arguments(summon.node, summon.args, values) if fixable else None
            test = summon.when_distributed.get("offload_to_cpu")
            offload = "`offload_to_cpu=True`" if test is None else (
                f"`offload_to_cpu` true in every multi-rank run (`{facts.module.code_for_node(test)}`)")
            report(
                summon.node,
                f"{offload} without `rank0_only=True`: every rank copies the full model into "
                "host memory (PyTorch warns: risks CPU OOM); if only rank 0 uses the full weights, pass "
                "`rank0_only=True, writeback=False`",
                (FixProposal(UNSAFE, "Pass `rank0_only=True` (and `writeback=False`)", summon.node, new) if fixable else None),
                statement=summon.site.ctx.statement,
            )

