"""FSD009 summon-with-grads-unsupported."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.fsdp_modules import wrap_config
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.rules.base import FIX_NEVER, Rule


class SummonWithGradsUnsupported(Rule):
    code = "FSD009"
    name = "summon-with-grads-unsupported"
    summary = "`with_grads=True` with `offload_to_cpu=True` or without `use_orig_params=True`: NotImplementedError"
    fix_availability = FIX_NEVER
    markers = (("summon_full_params",),)  # with_grads may be passed by position
    gate_calls = frozenset({torch_api.SUMMON})
    gate_torch_only = True
    gate_arguments = {"with_grads": torch_api.SUMMON_PARAMS.index("with_grads")}
    gate_sites = True
    doc = """\
## What it does
Checks for torch FSDP `summon_full_params(..., with_grads=True)` calls that also pass
`offload_to_cpu=True`, or whose module is wrapped in this file by `FSDP(...)` without
`use_orig_params=True` (also through the calls of a helper whose parameter is the summoned
module: every call of it in this file must pass such a model).

## Why is this bad?
`with_grads=True` is implemented only for `use_orig_params=True` without CPU offload of the
summoned parameters; otherwise FSDP raises at entry, on every rank:
`NotImplementedError: with_grads=True, use_orig_params=False, offload_to_cpu=False is not
supported yet` (torch 2.13.0 CPU/gloo, torch 2.11 on 2 GPUs).

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
with FSDP.summon_full_params(model, with_grads=True, writeback=False):
    grads = [p.grad for p in model.parameters()]
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net, use_orig_params=True)
with FSDP.summon_full_params(model, with_grads=True, writeback=False):
    grads = [p.grad for p in model.parameters()]
```

## Known problems
- The `offload_to_cpu=True` case needs only the call. The `use_orig_params` case needs every
  construction the summoned model can come from to be an FSDP1 wrap in this file whose
  `use_orig_params` is visibly False (left out or a literal `False`).
- Where that is not visible, nothing is flagged: a model that cannot be followed (a
  parameter with no caller in the file, an attribute set elsewhere, a value returned by a
  call the file cannot see into), an unreadable `**cfg`, or `use_orig_params` set by a
  launcher (accelerate's `fsdp_use_orig_params`).
- A `with_grads` that is not a literal `True` is not judged.

## Fix safety
No automatic fix: `use_orig_params=True` changes how the optimizer sees parameters.

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for summon in summon_calls(facts):
            if summon.value("with_grads") is not True:
                continue
            if summon.value("offload_to_cpu") is True:
                why = "with `offload_to_cpu=True`"
            else:
                found = summon.origins(facts)
                wraps = found.fsdp1
                if not found.complete or not wraps or len(wraps) != len(found.wraps):
                    continue  # the model's construction is not (all) visible here
                if any(wrap_config(facts, o).use_orig_params is not False for o in wraps):
                    continue
                why = f"on a model wrapped without `use_orig_params=True` (line {report.row(wraps[0].wrap.site.node)})"
            report(
                summon.node,
                f"`with_grads=True` {why} raises `NotImplementedError` at entry",
                statement=summon.site.ctx.statement,
            )
