"""FSD107 cast-after-wrap."""

from __future__ import annotations

from fsdp_lint.facts.dtypes import CAST_METHODS, module_casts
from fsdp_lint.facts.fsdp_modules import fsdp_modules, wrap_line
from fsdp_lint.facts.rebinding import rebound_between
from fsdp_lint.facts.scopes import runs_before
from fsdp_lint.rules.base import FIX_NEVER, Rule



class CastAfterWrap(Rule):
    code = "FSD107"
    name = "cast-after-wrap"
    summary = "`.to(dtype)` / `.half()` / `.bfloat16()` on a module after FSDP wrapped it: use `MixedPrecision` at wrap time"
    fix_availability = FIX_NEVER
    markers = (
        ("to", "half", "bfloat16", "float", "double"),
        ("FullyShardedDataParallel", "fully_shard"),
        (".to(", ".half(", ".bfloat16(", ".float(", ".double("),
    )
    gate_facts = ("fsdp_wrap",)
    gate_calls = CAST_METHODS | {"to"}
    gate_receiver = "wrapped"
    gate_sites = True  # the cast is the finding
    doc = """\
## What it does
Checks for a dtype cast of a module after torch FSDP wrapped it: `m.to(torch.bfloat16)`,
`m.to(device, torch.float16)`, `m.to(dtype=...)`, `m.half()`, `m.bfloat16()`, `m.float()`,
`m.double()` where `m` was bound to `FSDP(...)` or passed to / bound from `fully_shard(...)`
(or to a function of this file that runs `fully_shard` on its parameter) earlier in the
same function (or is an attribute such as `self.model`). `.to(device)`
without a dtype is not a cast; casting before the wrap is fine.

## Why is this bad?
FSDP keeps its own views of the parameters (FSDP1's flat parameter with its local shard
and padded unshard buffers; FSDP2's sharded DTensors and all-gather buffers), created in
the dtype the parameters had at wrap time and at the first forward. `Module.to` swaps the
parameters' data underneath them. Once the model has run a forward, the next use fails on
every rank (CPU/gloo, torch 2.13.0, measured by the scenario):
- FSDP1, state dict after the cast (`model.to(torch.bfloat16); model.state_dict()`):
  `ValueError: Invalid usage of tensors with different dtypesFound torch.float32 and
  torch.bfloat16` in the state-dict pre-hook's unshard; the next forward:
  `RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float`, after
  which the handle is stuck (`AssertionError: Expects the handle training to be IDLE`).
- FSDP2: the next forward fails in the all-gather: `RuntimeError: Expected out tensor to
  have dtype c10::BFloat16, but got float instead`.
- On 2 GPUs (NCCL, torch 2.11.0) the FSDP1 state dict after the cast fails in the
  all-gather: `TypeError: output tensor must have the same type as input tensor`. The
  recorded GPU run judged it ERROR because that text was not yet among the scenario's
  patterns; it is now, and the next GPU run will judge it.
A cast made right after the wrap, before any forward, happened to run on torch 2.13.0; it is
still flagged: it relies on FSDP not having built its buffers yet, and the reduced dtype
belongs in the wrap's mixed-precision policy, which also keeps fp32 master weights.

## Example
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
train(model)
model.to(torch.bfloat16)
torch.save(model.state_dict(), "model.pt")
```

## Use instead
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision

model = FSDP(net, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16))
train(model)
state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
torch.save(state, "model.pt")
```

With FSDP2: `fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))`,
or cast the module before `fully_shard`.

## Known problems
- The wrap and the cast must be in the same function (a call there of a helper of the file
  or of a project file that shards the model counts), or the module an attribute such as
  `self.model` wrapped anywhere in the file. A model wrapped by a caller or in another file
  is not followed, and nothing is flagged.
- A cast is what the file names: `.half()`/`.bfloat16()`/`.float()`/`.double()`, a
  `torch.<dtype>` argument of `.to(...)`, or any `dtype=` keyword; a dtype passed by
  position in a variable (`model.to(device, dt)`) is not recognised.

## Fix safety
No automatic fix: moving the dtype into `MixedPrecision` / `MixedPrecisionPolicy` (or
casting before the wrap, or casting the state dict) changes what is trained or saved.

## References
- [`MixedPrecision`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.MixedPrecision),
  [`MixedPrecisionPolicy`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
- torch/distributed/fsdp/_flat_param.py (`FlatParamHandle` buffers, `_orig_param_dtype`),
  torch/distributed/fsdp/_fully_shard/_fsdp_param.py (all-gather buffers)
"""

    def check(self, facts, report):
        modules = fsdp_modules(facts)
        wrapped = []  # (name, wrap)
        for wrap in modules.wraps:
            if wrap.target is not None:
                wrapped.append((wrap.target, wrap))
        for wrap in modules.fsdp2_wraps:
            for name in {wrap.target, wrap.wrapped} - {None}:
                wrapped.append((name, wrap))
        if not wrapped:
            return
        for cast in module_casts(facts):
            site, receiver = cast.site, cast.receiver
            for name, wrap in wrapped:
                if name != receiver:
                    continue
                if site.ctx.function is not wrap.site.ctx.function and "." not in name:
                    continue
                if site.order <= wrap.site.order or not runs_before(facts, wrap.site.ctx, wrap.site.done, site.ctx, site.order):
                    continue  # the cast runs first (``FSDP(model.bfloat16())``), or in a branch the wrap is not on
                if rebound_between(facts, name, wrap.site, site):
                    continue
                kind = "fully_shard" if wrap.fsdp2 else "FSDP"
                policy = "`fully_shard(..., mp_policy=MixedPrecisionPolicy(...))`" if wrap.fsdp2 else \
                    "`FSDP(..., mixed_precision=MixedPrecision(...))`"
                report(
                    site.node,
                    f"`{receiver}` is cast after `{kind}` wrapped it ({wrap_line(wrap, report.row)}): FSDP's "
                    "views of the parameters keep the old dtype; once the model has run a forward, the next "
                    "forward or state dict fails (measured on torch 2.13.0, where a cast before any forward "
                    f"happened to run); use {policy} at wrap time, or cast before wrapping",
                    statement=site.ctx.statement,
                )
                break
