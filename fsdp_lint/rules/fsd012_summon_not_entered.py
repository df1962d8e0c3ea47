"""FSD012 summon-not-entered."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.summon import summon_on_other_class
from fsdp_lint.rules.base import FIX_NEVER, Rule


class SummonNotEntered(Rule):
    code = "FSD012"
    name = "summon-not-entered"
    summary = (
        "`summon_full_params(...)` (torch, fairscale, fairseq, metaseq) called as a statement, never entered with `with`: nothing is gathered"
    )
    fix_availability = FIX_NEVER
    markers = (("summon_full_params",),)
    gate_calls = frozenset({torch_api.SUMMON})
    gate_bare = True
    gate_sites = True
    doc = """\
## What it does
Checks for a `summon_full_params(...)` call used as a bare expression statement, whatever
the receiver: torch's `FullyShardedDataParallel.summon_full_params` (class or instance
form) and the instance methods of fairscale, fairseq and metaseq's FSDP classes are all
generator-based context managers. Names resolve through imports: a class of this file
called `FSDP` (not derived from one of those classes), or an `FSDP` imported from another
library, is not torch's, and its `summon_full_params` is left alone.

## Why is this bad?
`summon_full_params` is a context manager: calling it only builds the generator. Nothing
is all-gathered and the code after it works on the local shards (measured on torch 2.13.0,
CPU/gloo: the parameters keep their sharded shapes). fairscale's
`FullyShardedDataParallel.summon_full_params` is a `@contextlib.contextmanager` too, so
the same statement is a no-op there.

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

FSDP.summon_full_params(model, writeback=False)
weights = {n: p.clone() for n, p in model.named_parameters()}
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

with FSDP.summon_full_params(model, writeback=False):
    weights = {n: p.clone() for n, p in model.named_parameters()}
```

## Known problems
- The rule assumes the worst about an unknown receiver: every bare `summon_full_params(...)`
  statement is flagged unless name resolution proves the receiver is another library's class
  or a class of this file that derives from no FSDP class. A project's own object (from
  another module) whose `summon_full_params` is an ordinary method is flagged: add
  `# noqa: FSD012`.

## Fix safety
No automatic fix: which statements belong inside the block is the author's decision.

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for site in facts.calls:
            if site.bare and site.attr == "summon_full_params" and not summon_on_other_class(facts, site.node.func):
                report(
                    site.node,
                    "`summon_full_params(...)` is a context manager: called as a statement it gathers "
                    "nothing and the code after it sees the local shards; use `with ...summon_full_params(...):`",
                    statement=site.ctx.statement,
                )
