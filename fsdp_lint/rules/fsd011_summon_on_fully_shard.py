"""FSD011 summon-on-fully-shard."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.fsdp_modules import fsdp_modules
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.rules.base import FIX_NEVER, Rule


class SummonOnFullyShard(Rule):
    code = "FSD011"
    name = "summon-on-fully-shard"
    summary = "`FSDP.summon_full_params` on a module sharded with FSDP2 `fully_shard`: a silent no-op"
    fix_availability = FIX_NEVER
    markers = (("summon_full_params",), ("fully_shard",))
    gate_facts = ("fsdp2_wrap",)
    gate_calls = frozenset({torch_api.SUMMON})
    gate_torch_only = True
    gate_sites = True
    doc = """\
## What it does
Checks for torch FSDP1 `summon_full_params(m, ...)` where `m` is sharded in this file with
FSDP2's `fully_shard(m)`.

## Why is this bad?
FSDP2 has no `summon_full_params`; FSDP1's static method finds no FSDP1 state on the module
and does nothing: inside the block the parameters are still sharded `DTensor`s, so code
that expects full tensors silently works on shards (measured on torch 2.13.0, CPU/gloo).

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard

fully_shard(model)
with FSDP.summon_full_params(model, writeback=False):
    full = {n: p.detach().clone() for n, p in model.named_parameters()}
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard

fully_shard(model)
full = {n: p.full_tensor() for n, p in model.named_parameters()}
```

## Known problems
- When the summoned model is followed to constructions of the file (or to a project helper
  the file imports that shards it), it is flagged only if every one is a `fully_shard`.
- When its origin cannot be followed (a parameter, an attribute, a value returned by a call
  the file cannot see into), the rule falls back on the name: it flags when the same dotted
  name is passed to or bound from `fully_shard` anywhere in the file and no path leads to a
  plain module or to a call the file cannot see into (`model = load_model()` is not taken
  for the sharded model of the same name). A parameter or attribute of the same name is
  taken for it: add `# noqa: FSD011` where it is another model.
- A model sharded by code the file does not call or import is not seen.

## Fix safety
No automatic fix. FSDP2 replacements: `model.unshard()` / `model.reshard()`,
`DTensor.full_tensor()` per parameter, or
`torch.distributed.checkpoint.state_dict.get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))`.

## References
- [FSDP2 `fully_shard`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
"""

    def check(self, facts, report):
        fsdp2 = fsdp_modules(facts).fsdp2
        for summon in summon_calls(facts):
            found = summon.origins(facts)
            if found.wraps:
                sharded = bool(found.fsdp2) and not found.fsdp1
            else:
                sharded = not found.plain and not found.opaque and summon.module_name in fsdp2
            if sharded:
                report(
                    summon.node,
                    f"`{summon.module_name}` is sharded with FSDP2 `fully_shard`: `summon_full_params` does "
                    "nothing there (the parameters stay sharded DTensors); use `unshard()`/`reshard()`, "
                    "`DTensor.full_tensor()` or `get_model_state_dict`",
                    statement=summon.site.ctx.statement,
                )
