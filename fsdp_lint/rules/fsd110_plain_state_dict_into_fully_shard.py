"""FSD110 plain-state-dict-into-fully-shard."""

from __future__ import annotations

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.dataflow import sources
from fsdp_lint.facts.fsdp_modules import method_calls_on_sharded, wrap_line
from fsdp_lint.facts.ranks import per_rank_path
from fsdp_lint.facts.values import first_positional
from fsdp_lint.rules.base import FIX_NEVER, Rule

# loaders that return plain (full, unsharded) tensors
PLAIN_LOADERS = frozenset({"torch.load", "safetensors.torch.load_file", "safetensors.torch.load"})


class PlainStateDictIntoFullyShard(Rule):
    code = "FSD110"
    name = "plain-state-dict-into-fully-shard"
    summary = "`load_state_dict(torch.load(...))` into a module already sharded with FSDP2 `fully_shard`: RuntimeError"
    fix_availability = FIX_NEVER
    markers = (("load_state_dict",), ("fully_shard",))
    gate_facts = ("fsdp2_wrap",)
    gate_calls = frozenset({"load_state_dict"})
    doc = """\
## What it does
Checks for `model.load_state_dict(sd)` where `model` was sharded with FSDP2 `fully_shard`
before the call and `sd` is a plain state dict: the result of `torch.load(...)` or
`safetensors.torch.load_file(...)`, directly, through a name, or under a key
(`torch.load(path)["model"]`). A state dict from anywhere else (a distributed checkpoint,
`get_model_state_dict`) is left alone.

## Why is this bad?
After `fully_shard`, the parameters are DTensor shards; a checkpoint saved from an unsharded
model holds full tensors. `load_state_dict` copies each into the shard and fails:
`RuntimeError: Error(s) in loading state_dict for FSDPSequential: While copying the
parameter named "0.weight", whose dimensions in the model are torch.Size([...]) and whose
dimensions in the checkpoint are torch.Size([...])` (reproduced by the verifier on
CPU/gloo, torch 2.13.0, two ranks), or `aten.copy_.default: got mixed torch.Tensor and
DTensor` (pytorch#136336, #157781; torchtitan#765).

## Example
```python
import torch
from torch.distributed.fsdp import fully_shard

fully_shard(model)
model.load_state_dict(torch.load("pretrained.pt"))
```

## Use instead
```python
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import fully_shard

fully_shard(model)
set_model_state_dict(model, torch.load("pretrained.pt"), options=StateDictOptions(full_state_dict=True))
```
Or load the checkpoint before `fully_shard`.

## Known problems
- The module must reach a `fully_shard` the file shows, as in FSD109 (a model sharded where
  the file cannot see is not flagged; a path to FSDP1, DDP or a plain module keeps it quiet).
- The state dict must be a plain loader's result on every path (`torch.load`,
  `safetensors.torch.load_file`, an item of one); a state dict from a helper, a parameter or
  a call the file cannot see into is assumed not to be plain, and nothing is flagged.
- A file whose path names the rank (`f"model_rank_{rank}.pt"`) is what that rank saved of
  the sharded model, its own shards: not plain.

## Fix safety
No automatic fix: whether every rank reads the file or rank 0 broadcasts it
(`broadcast_from_rank0=True`), or the load moves before the sharding, is a choice.

## References
- [`torch.distributed.checkpoint.state_dict.set_model_state_dict`](https://pytorch.org/docs/stable/distributed.checkpoint.html)
- pytorch/pytorch#136336, pytorch/pytorch#157781, pytorch/torchtitan#765
"""

    def check(self, facts, report):
        for site, origin, name in method_calls_on_sharded(facts, "load_state_dict"):
            argument = first_positional(site.node)
            if argument is None or not _plain(facts, argument.value, site):
                continue
            report(
                site.node,
                f"`{name}` is sharded with FSDP2 `fully_shard` ({wrap_line(origin.wrap, report.row)}) and this "
                "state dict holds full tensors: loading it into the DTensor shards raises RuntimeError; use "
                f"`set_model_state_dict({name}, sd, options=StateDictOptions(full_state_dict=True))` or load before "
                "`fully_shard`",
                statement=site.ctx.statement,
            )


def _plain(facts, expr, site) -> bool:
    """``expr`` is (every value it may have is) a plain loader's result, or an item of one."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    if isinstance(expr, cst.Call):
        if facts.qualname(expr.func) not in PLAIN_LOADERS:
            return False
        # a file each rank saved for itself (its path names the rank) holds what that rank's
        # ``state_dict()`` held: its own DTensor shards, not full tensors
        path = first_positional(expr)
        at = facts.call_site(expr)
        return path is None or at is None or not per_rank_path(facts, at, path.value)
    found = sources(facts, expr, site.ctx, site.order)
    if not found.complete or not found.found:
        return False
    return all(s.expr is not expr and _plain(facts, s.expr, site) for s in found.found)
