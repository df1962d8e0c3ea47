"""FSD112 rank0-save-of-sharded-state-dict."""

from __future__ import annotations

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.dtensors import GATHERS as DTENSOR_GATHERS
from fsdp_lint.facts.fsdp_modules import fully_sharded, wrap_line
from fsdp_lint.facts.model import ModuleFacts
from fsdp_lint.facts.ranks import rank_guard
from fsdp_lint.facts.scopes import latest_binding
from fsdp_lint.facts.values import first_positional
from fsdp_lint.facts.walk import descendants, push_children
from fsdp_lint.rules.base import FIX_NEVER, Rule


class Rank0SaveOfShardedStateDict(Rule):
    code = "FSD112"
    name = "rank0-save-of-sharded-state-dict"
    summary = "`torch.save(model.state_dict())` on one rank of an FSDP2 model: the file holds that rank's shards only"
    fix_availability = FIX_NEVER
    markers = (("state_dict",), ("fully_shard",), ("save",))
    gate_facts = ("fsdp2_wrap",)
    doc = """\
## What it does
Checks for `torch.save(...)` (or `safetensors.torch.save_file`) under a rank test (`if rank
== 0:`, `if dist.get_rank() == 0:`, a one-rank decorator: `facts.ranks`) whose object holds
`model.state_dict()` of a module sharded with FSDP2 `fully_shard` (directly, in a dict or
comprehension, or through a name bound to it before the save).

## Why is this bad?
An FSDP2 module's `state_dict()` is a dict of DTensors, each holding this rank's shard, and
it starts no collective. Saved on rank 0 alone, the checkpoint holds rank 0's shards only:
reloaded, every value is a DTensor whose local tensor is a fraction of the parameter (8x8
weights come back as 4x8 local shards on 2 ranks: reproduced by the verifier on CPU/gloo,
torch 2.13.0). No error is raised; the loss shows up when the checkpoint is used
(transformers#37689, miles-credit#414).

## Example
```python
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

fully_shard(model)
train(model)
if dist.get_rank() == 0:
    torch.save(model.state_dict(), "model.pt")
```

## Use instead
```python
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

fully_shard(model)
train(model)
state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
if dist.get_rank() == 0:
    torch.save(state, "model.pt")
```
Or save a sharded checkpoint on every rank with `torch.distributed.checkpoint.save`.

## Known problems
- The save must be under a rank test that `facts.ranks` recognises (see FSD104); a save on
  one rank decided by something the file does not show as a rank test is not flagged.
- The `state_dict()` must be in the saved object or in a name bound to it in the same
  function (two levels); a state dict built by a helper is not followed. One a comprehension
  gathers (`{k: v.full_tensor() for k, v in sd.items()}`) holds full tensors and is not
  flagged.
- The module must reach a `fully_shard` the file shows, as in FSD109; a model sharded where
  the file cannot see is not flagged.

## Fix safety
No automatic fix: the full state dict must be gathered on every rank before the rank test
(a collective), which moves code out of the test.

## References
- [`get_model_state_dict`](https://pytorch.org/docs/stable/distributed.checkpoint.html)
- huggingface/transformers#37689
"""

    def check(self, facts, report):
        saves = torch_api.TORCH_SAVE | torch_api.SAFETENSORS_SAVE
        for site in facts.calls:
            if facts.qualname(site.node.func) not in saves:
                continue
            argument = first_positional(site.node)
            if argument is None or rank_guard(facts, site.ctx) is None:
                continue
            for call in _state_dict_calls(facts, argument.value, site):
                origin = fully_sharded(facts, call.func.value, site.ctx, site.order)
                if origin is None:
                    continue
                name = facts.module.code_for_node(call.func.value)
                report(
                    site.node,
                    f"`{name}` is sharded with FSDP2 `fully_shard` ({wrap_line(origin.wrap, report.row)}): its "
                    "`state_dict()` holds this rank's DTensor shards, so the file saved on one rank is missing the "
                    "others'; gather `get_model_state_dict(..., options=StateDictOptions(full_state_dict=True, "
                    "cpu_offload=True))` on every rank before the rank test, or save with torch.distributed.checkpoint",
                    statement=site.ctx.statement,
                )
                break


def _state_dict_calls(facts: ModuleFacts, expr, site, depth: int = 0):
    """``X.state_dict()`` calls in ``expr``, and in the values last bound to the names in it;
    not those a comprehension gathers (``{k: v.full_tensor() for k, v in sd.items()}``: full
    tensors, not this rank's shards)."""
    for node in _ungathered(expr):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "state_dict" \
                and not node.args:
            yield node
        elif isinstance(node, cst.Name) and depth < 2:
            latest = latest_binding(facts, node.value, site.ctx, site.order)
            if latest is not None and latest.ctx.function is site.ctx.function:
                yield from _state_dict_calls(facts, latest.value, site, depth + 1)


def _ungathered(expr):
    """``expr`` and the nodes below it (``walk.descendants``), but not what a comprehension
    iterates over when its element gathers a DTensor (``dtensors.GATHERS``: ``full_tensor()``,
    ``redistribute(...)``)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (cst.DictComp, cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            element = (node.key, node.value) if isinstance(node, cst.DictComp) else (node.elt,)
            if any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in DTENSOR_GATHERS
                   for part in element for n in descendants(part)):
                continue
        push_children(node, stack)
