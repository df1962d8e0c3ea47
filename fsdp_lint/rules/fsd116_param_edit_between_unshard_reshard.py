"""FSD116 param-edit-between-unshard-reshard."""

from __future__ import annotations

from fsdp_lint.facts.unshard import unshard_regions
from fsdp_lint.rules.base import FIX_NEVER, Rule


class ParamEditBetweenUnshardReshard(Rule):
    code = "FSD116"
    name = "param-edit-between-unshard-reshard"
    summary = "parameters edited between FSDP2's `m.unshard()` and `m.reshard()`: the edits are discarded at the reshard"
    fix_availability = FIX_NEVER
    markers = (("unshard",), ("reshard",), ("fully_shard",))
    gate_facts = ("fsdp2_wrap",)
    gate_calls = frozenset({"unshard"})
    gate_sites = True  # the edits are in the unshard's own function (``facts.unshard``)
    doc = """\
## What it does
Checks for writes to a module's parameters between `m.unshard()` (also
`handle = m.unshard(async_op=True)`) and the next `m.reshard()` of the same module in the
same function, where `m` was sharded with FSDP2 `fully_shard` (directly, in a helper of the
file, or passed in by a caller that shards it): in-place tensor methods (`p.mul_(...)`,
`p.copy_(...)`, `p.data.zero_()`), `torch.nn.init.*_` calls, assignments to `.data` or
`.weight`, on the module or on a name bound from it (`for p in m.parameters()`). Reads (an
EMA copy, a checksum) are left alone, and so is an `unshard()` without a `reshard()` in its
function. The region ends early at `m.state_dict()`, `m.load_state_dict(...)` (FSDP2's
state-dict pre-hooks put the sharded parameters back first: `to_sharded_hook` in
`FSDPParamGroup._register_state_dict_hooks`; a full-tensor `load_state_dict` there raises
`got mixed torch.Tensor and DTensor`, measured, FSD110's error) and at a forward `m(...)`.

## Why is this bad?
`unshard()` all-gathers each sharded DTensor parameter into a new unsharded tensor and
registers that one on the module (`FSDPParam.to_unsharded` in
torch/distributed/fsdp/_fully_shard/_fsdp_param.py); `reshard()` frees it and registers the
sharded DTensor again (`to_sharded`, `free_unsharded_param`). Nothing is copied back: FSDP2
has no write-back (FSDP1's `summon_full_params(writeback=True)` has no FSDP2 twin). The
edits are discarded silently: the verifier scales every parameter by 0.5 between the two
calls and finds every local shard unchanged afterwards (CPU/gloo, torch 2.13.0, 1 and 2
ranks; pytorch#129229). `unshard()` is not recursive: the parameters of nested
`fully_shard` groups stay DTensor shards, so a loop over `m.parameters()` loses the edits of
`m`'s own group and edits the nested groups' shards (or fails there on a full-size operand:
`got mixed torch.Tensor and DTensor`). Measured on torch 2.13.0, the newest release
installed here; no release is known to change this, so the rule sets no `hazard_fixed_in`.

## Example
```python
import torch
from torch.distributed.fsdp import fully_shard

fully_shard(model)
model.unshard()
with torch.no_grad():
    for p in model.parameters():
        p.mul_(0.5)
model.reshard()
```

## Use instead
```python
import torch
from torch.distributed.fsdp import fully_shard

fully_shard(model)
with torch.no_grad():
    for p in model.parameters():
        p.mul_(0.5)  # each rank scales its own DTensor shard
```
Edit the sharded parameters: an elementwise change works shard by shard; a full tensor goes
in with `p.copy_(distribute_tensor(full, p.device_mesh, p.placements))` or
`set_model_state_dict(model, sd, options=StateDictOptions(full_state_dict=True))`.

## Known problems
- The `unshard()` and the `reshard()` must be on the same receiver in the same function (and
  the same loops); an `unshard()` whose `reshard()` is elsewhere is no region.
- Only edits written between them are seen: a write inside a function called there is not
  followed. Any doubt ends the region early (a miss, not a false alarm).
- The module must reach a `fully_shard` the file shows, as in FSD109.

## Fix safety
No automatic fix: an edit that needs the full tensor (a norm over the whole parameter, a
copy from a full checkpoint) has to be rewritten for the shards, and the unshard may be
there for reads that must stay.

## References
- [`FSDPModule.unshard` / `reshard`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
- torch/distributed/fsdp/_fully_shard/_fsdp_param.py: `to_unsharded`, `to_sharded`
- [pytorch/pytorch#129229](https://github.com/pytorch/pytorch/issues/129229)
- [pytorch/pytorch#144289](https://github.com/pytorch/pytorch/issues/144289): the sharded and
  unsharded parameters, and which one is registered when
"""

    def check(self, facts, report):
        for region in unshard_regions(facts):
            for edit in region.edits:
                report(
                    edit.node,
                    f"this edits the parameters of `{region.receiver}` between `{region.receiver}.unshard()` "
                    f"(line {report.row(region.unshard.node)}) and `{region.receiver}.reshard()` (line "
                    f"{report.row(region.reshard.node)}): FSDP2 frees the unsharded parameters at the reshard "
                    "without writing them back, so the edit is lost; edit the sharded DTensor parameters instead",
                    statement=edit.ctx.statement,
                )
