"""FSD102 clip-grad-norm-on-sharded-fsdp."""

from __future__ import annotations

from fsdp_lint.diagnostics import UNSAFE
from fsdp_lint.rules.base import FIX_SOMETIMES, FixProposal, Rule


class ClipGradNormOnShardedFsdp(Rule):
    code = "FSD102"
    name = "clip-grad-norm-on-sharded-fsdp"
    summary = "`torch.nn.utils.clip_grad_norm_` on a sharded FSDP1 module's parameters: each rank clips by its local norm"
    fix_availability = FIX_SOMETIMES
    markers = (("clip_grad_norm_",), ("FullyShardedDataParallel",))
    doc = """\
## What it does
Checks for `torch.nn.utils.clip_grad_norm_(m.parameters(), ...)` (any import alias) where
`m` is wrapped in this file by FSDP1 `FSDP(...)` with a sharded strategy (the default
`FULL_SHARD`, `SHARD_GRAD_OP`, `HYBRID_SHARD`). Not for FSDP2 (`fully_shard`), where the
gradients are DTensors and `torch.nn.utils.clip_grad_norm_` is correct, nor for `NO_SHARD`.

## Why is this bad?
Each rank sees only its shard of the gradients, so each computes its local norm and clips
by a different factor: the ranks' updates disagree and the weights come out wrong.
Measured: local norms 4.41 and 9.52 against the true 10.50 (CPU/gloo, torch 2.13.0).
`FSDP.clip_grad_norm_` on the root module all-reduces the norm first.

## Example
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
```

## Use instead
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
loss.backward()
model.clip_grad_norm_(1.0)
```

## Fix safety
The fix rewrites the call to `m.clip_grad_norm_(max_norm[, norm_type])` and is unsafe:
it is right only when `m` is the root FSDP module (on an inner unit FSDP raises
`RuntimeError: clip_grad_norm_() should only be called on the root FSDP instance`), and
the returned value becomes the total norm instead of the local one. Calls with other
keyword arguments (`error_if_nonfinite`, `foreach`) get no fix.

## References
- [`FullyShardedDataParallel.clip_grad_norm_`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.clip_grad_norm_)
"""

    def check(self, facts, report):
        import libcst as cst

        from fsdp_lint.facts import torch_api
        from fsdp_lint.facts.imports import dotted_name
        from fsdp_lint.facts.values import bind_arguments

        modules = facts.fsdp_modules()
        for site in facts.calls:
            if facts.qualname(site.node.func) not in torch_api.CLIP_GRAD_NORM:
                continue
            bound, opaque = bind_arguments(site.node.args, ("parameters", "max_norm", "norm_type"))
            params = bound.get("parameters")
            if params is None or not isinstance(params.value, cst.Call):
                continue
            func = params.value.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "parameters") or params.value.args:
                continue
            owner = dotted_name(func.value)
            wrap = modules.wrap_for(owner)
            if owner in modules.fsdp2 or wrap is None or wrap.sharding_strategy in (None, "NO_SHARD"):
                continue
            fix = None
            extra = set(bound) - {"parameters", "max_norm", "norm_type"}
            if not opaque and not extra and "max_norm" in bound:
                args = [bound[k] for k in ("max_norm", "norm_type") if k in bound]
                args = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(args) - 1 else a
                        for i, a in enumerate(args)]
                new = site.node.with_changes(
                    func=cst.Attribute(value=func.value, attr=cst.Name("clip_grad_norm_")), args=args
                )
                fix = FixProposal(UNSAFE, f"Use `{owner}.clip_grad_norm_(...)`", site.node, new)
            report(
                site.node,
                f"`clip_grad_norm_` over the sharded FSDP module `{owner}` (line {report.row(wrap.site.node)}): "
                f"each rank clips by its local norm; use `{owner}.clip_grad_norm_(max_norm)` on the root module",
                fix,
                statement=site.ctx.statement,
            )
