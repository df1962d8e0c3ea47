"""FSD010 summon-offload-to-cpu-no-shard."""

from __future__ import annotations

from fsdp_lint.diagnostics import UNSAFE
from fsdp_lint.facts.fsdp_modules import wrap_config
from fsdp_lint.facts.state_dicts import full_config_offloads, state_dict_settings
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.fixes import drop_argument
from fsdp_lint.facts import torch_api
from fsdp_lint.rules.base import FIX_SOMETIMES, FixProposal, Rule


class SummonOffloadToCpuNoShard(Rule):
    code = "FSD010"
    name = "summon-offload-to-cpu-no-shard"
    summary = "`offload_to_cpu=True` on a model wrapped with `ShardingStrategy.NO_SHARD`: NotImplementedError"
    fix_availability = FIX_SOMETIMES
    # offload_to_cpu may be passed by position (to summon_full_params or FullStateDictConfig)
    markers = (("summon_full_params", "state_dict_type", "set_state_dict_type"), ("NO_SHARD",))
    paths_fixed_in = {"state-dict": "2.1"}
    gate_names = frozenset({"NO_SHARD"})
    gate_calls = frozenset({torch_api.SUMMON, "state_dict_type", "set_state_dict_type"})
    gate_sites = True
    doc = """\
## What it does
Checks for torch FSDP `summon_full_params(..., offload_to_cpu=True)` on a module wrapped in
this file with `sharding_strategy=ShardingStrategy.NO_SHARD`, also where the summon is in a
helper and the module its parameter (`snapshot(model)`: each call of the helper in this file
is followed).

With `target-torch-version` below 2.1 it also checks the state-dict path:
`FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT,
FullStateDictConfig(offload_to_cpu=True, ...))` (or `FSDP.set_state_dict_type`) on such a
model, the configuration passed directly or through a name. Only an explicit `NO_SHARD`
counts: FSDP also switches to `NO_SHARD` at world size 1, but a file does not show the
world size, and flagging every full state dict offloaded to the CPU would be a false alarm
on multi-GPU jobs.

## Why is this bad?
FSDP raises at entry, on every rank: `NotImplementedError: offload_to_cpu=True and
NO_SHARD is not supported yet` (also with world size 1; torch 2.13.0 CPU/gloo and 2.11 on
2 GPUs).

Before torch 2.1 the full state dict reached the same check: `model.state_dict()` under
`FullStateDictConfig(offload_to_cpu=True)` raised that `NotImplementedError` from the
state-dict hook on a `NO_SHARD` model, and on a single GPU, where FSDP turns `FULL_SHARD`
into `NO_SHARD` (the most frequent signature in the bug reports we collected, 11 threads,
e.g. princeton-nlp/LLM-Shearing#23). From torch 2.1 the state-dict hooks of a `NO_SHARD`
module replace the configuration with a default `FullStateDictConfig()` before unsharding
(`_replace_with_full_state_dict_type` in `_pre_state_dict_hook`,
`torch/distributed/fsdp/_state_dict_utils.py`), so the call works; this path is therefore
off unless `target-torch-version` is below 2.1.
The verifier's `state-dict` form says NOT REPRODUCED on torch 2.13.0 (CPU) and 2.11 (GPU),
as expected. It has not run on a torch below 2.1: torch 2.0.1's FSDP needs CUDA (its
constructor calls `torch.cuda.current_device()`), and the GPU machine's Python 3.12 has no
torch 2.0 wheel; the signature below 2.1 rests on the bug reports and the torch source.

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

For the state-dict path on torch < 2.1, keep the state dict on the device and copy it:
`FullStateDictConfig(rank0_only=True)`, then `{k: v.cpu() for k, v in model.state_dict().items()}`.

## Known problems
- Only an explicit `ShardingStrategy.NO_SHARD` that the rule can read on a construction of
  this file the summoned model can come from counts (written, in a variable, a module
  constant or a `**cfg` dict it can read). A strategy set elsewhere (an accelerate config's
  `fsdp_sharding_strategy`, a parameter, an unreadable `**cfg`) or a model whose
  construction is not visible is not flagged.
- FSDP's own switch to `NO_SHARD` at world size 1 is not assumed: the file does not show the
  world size.
- The state-dict path runs only with `target-torch-version` below 2.1.

## Fix safety
The fix drops `offload_to_cpu=True`; it is unsafe because the block then sees the
parameters on their device instead of on the CPU (code there may rely on CPU tensors).
The state-dict path gets no automatic fix: without the offload the whole state dict is
gathered on the device, which may not fit.

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
- [FSDP `state_dict_type`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.state_dict_type)
- princeton-nlp/LLM-Shearing#23: `NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet` from `state_dict()` (torch < 2.1)
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
        if self.reports_path("state-dict"):
            self._check_state_dicts(facts, report)

    def _check_state_dicts(self, facts, report):
        for setting in state_dict_settings(facts):
            if not any(full_config_offloads(facts, s) is True for s in setting.configs.found):
                continue
            no_shard = [o for o in setting.origins(facts).fsdp1 if wrap_config(facts, o).sharding == {"NO_SHARD"}]
            if not no_shard:
                continue
            report(
                setting.site.node,
                f"a full state dict offloaded to the CPU from a NO_SHARD model (line "
                f"{report.row(no_shard[0].wrap.site.node)}): `state_dict()` raises `NotImplementedError: "
                "offload_to_cpu=True and NO_SHARD is not supported yet` on torch < 2.1",
                statement=setting.site.ctx.statement,
            )
