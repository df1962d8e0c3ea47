"""FSD111 deepcopy-of-sharded-model."""

from __future__ import annotations

from fsdp_lint.facts.fsdp_modules import fully_sharded, wrap_line
from fsdp_lint.facts.values import first_positional
from fsdp_lint.rules.base import FIX_NEVER, Rule

DEEPCOPY = frozenset({"copy.deepcopy"})


class DeepcopyOfShardedModel(Rule):
    code = "FSD111"
    name = "deepcopy-of-sharded-model"
    summary = "`copy.deepcopy` of a module already wrapped with FSDP or sharded with `fully_shard`: it raises"
    fix_availability = FIX_NEVER
    markers = (("deepcopy",), ("FullyShardedDataParallel", "fully_shard"))
    gate_facts = ("fsdp_wrap",)
    gate_calls = frozenset({"deepcopy"})
    doc = """\
## What it does
Checks for `copy.deepcopy(model)` (any import alias) where every construction `model` may
come from is an FSDP wrap (`FullyShardedDataParallel(...)`, FSDP2 `fully_shard(...)`, a
helper of the file that shards it) that ran before the copy: the usual way to make an EMA
or a frozen reference model, ported from single-GPU code. For `self.model`, a wrap in
another method of the class (or a base class of the file) counts before the copy where the
copying method calls that method earlier (`self.shard()`, `super().prepare_model()`, also
through methods they call), not where it calls it later; a method the copying method does
not call may have run before.

## Why is this bad?
Neither FSDP copies: FSDP2 raises `AssertionError: FSDP does not support deepcopy. Please
use state dict for serialization.`, FSDP1 a `RuntimeError` about views of its flat
parameter modified in place (both reproduced by the verifier's scenario and by hand on
CPU/gloo, torch 2.13.0, two ranks; reported in FastVideo#915, miles-credit#414,
pytorch#82070). Where a copy appears to work (older releases), the copy shares or mixes
shards with the original.

## Example
```python
import copy
from torch.distributed.fsdp import fully_shard

fully_shard(model)
ema_model = copy.deepcopy(model)
```

## Use instead
```python
import copy
from torch.distributed.fsdp import fully_shard

ema_model = copy.deepcopy(model)
fully_shard(model)
fully_shard(ema_model)
```

## Known problems
- The copied model must reach an FSDP wrap the file shows (`FSDP(...)`, `fully_shard`, a
  helper of the file, a project helper its imports lead to, or the in-file callers of a
  function taking it as a parameter); a model wrapped where the file cannot see is not
  flagged.
- A base class of another file that shards `self.model` in a method the subclass calls
  (`super().prepare_model()`) is not read: the copy is not flagged.
- A path to a plain module (a `torch.nn` module, a class of this file, `from_pretrained`)
  keeps it quiet, and so does a path to a value returned by a call the file cannot see
  into: every path must reach a wrap.

## Fix safety
No automatic fix: the copy has to move before the wrap (and be sharded itself), or be
rebuilt from a state dict; both change the program's structure.

## References
- [FSDP2 `fully_shard`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
- pytorch/pytorch#82070, hao-ai-lab/FastVideo#915
"""

    def check(self, facts, report):
        for site in facts.calls:
            if facts.qualname(site.node.func) not in DEEPCOPY:
                continue
            argument = first_positional(site.node)
            if argument is None:
                continue
            origin = fully_sharded(facts, argument.value, site.ctx, site.order, fsdp1_too=True)
            if origin is None:
                continue
            name = facts.module.code_for_node(argument.value)
            kind = "sharded with `fully_shard`" if origin.wrap.fsdp2 else "wrapped with FSDP"
            report(
                site.node,
                f"`{name}` is {kind} ({wrap_line(origin.wrap, report.row)}): FSDP does not support deepcopy and "
                "the copy raises; copy the module before wrapping it (and shard the copy), or build the copy from "
                "a state dict",
                statement=site.ctx.statement,
            )
