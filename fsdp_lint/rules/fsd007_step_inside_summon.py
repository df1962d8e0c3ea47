"""FSD007 step-inside-summon."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.fsdp_modules import fsdp_modules
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.summon import summon_blocks
from fsdp_lint.rules.base import FIX_NEVER, Rule


class StepInsideSummon(Rule):
    code = "FSD007"
    name = "step-inside-summon"
    summary = "the FSDP model's forward or a `.backward()` runs inside a `summon_full_params` block"
    fix_availability = FIX_NEVER
    markers = (("summon_full_params",),)
    gate_calls = frozenset({torch_api.SUMMON})  # the step stands inside the summon's block
    gate_torch_only = True
    gate_sites = True
    doc = """\
## What it does
Checks for a forward call of an FSDP-wrapped model (the summoned module, or any name bound
to an `FSDP(...)` construction) or any `.backward(...)` call inside a torch FSDP
`summon_full_params` block.

## Why is this bad?
Inside the block the parameters are unsharded views that FSDP's own forward and backward
do not expect. Measured on CPU/gloo (torch 2.13.0) and 2 GPUs (torch 2.11):
- `use_orig_params=False`: `AssertionError: Expects tensor to be unsharded with size ...
  but got ...` when the block exits;
- `use_orig_params=True` with `writeback=True`: no error, and the weights are silently
  changed without any optimizer step.

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
with FSDP.summon_full_params(model):
    loss = model(batch).sum()
    loss.backward()
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
loss = model(batch).sum()
loss.backward()
with FSDP.summon_full_params(model, writeback=False):
    norms = [p.norm() for p in model.parameters()]
```

## Known problems
- Only a summon entered directly by a `with` statement around the call is seen: a step in a
  function the block calls, or in a block entered through a name, an `ExitStack` or a
  `@contextmanager` helper, is not flagged.
- A forward is recognised by name: a call of the summoned module's name, or of a name the
  file binds to `FSDP(...)` anywhere (also when that name holds another model at this point).
  The model under another name (an alias, a function parameter) is not recognised. Every
  `.backward(...)` inside the block is flagged, whatever tensor it belongs to.

## Fix safety
No automatic fix: the step has to move out of the block, which changes the program's order.

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        fsdp1 = fsdp_modules(facts).fsdp1
        for site in facts.calls:
            if not site.ctx.withs:
                continue
            blocks = summon_blocks(facts, site.ctx)
            if not blocks:
                continue
            callee = dotted_name(site.node.func)
            modules = {s.module_name for s, _ in blocks} | fsdp1
            if site.attr == "backward" and hasattr(site.node.func, "attr"):
                what = "`.backward()`"
            elif callee is not None and callee in modules:
                what = f"the FSDP model's forward (`{callee}(...)`)"
            else:
                continue
            summon = blocks[-1][0]
            report(
                site.node,
                f"{what} inside the `summon_full_params` block at line {report.row(summon.node)}: "
                "AssertionError at exit (use_orig_params=False) or weights changed with no optimizer "
                "step; run the step outside the block",
                statement=site.ctx.statement,
            )
