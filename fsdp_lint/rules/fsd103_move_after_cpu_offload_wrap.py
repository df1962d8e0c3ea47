"""FSD103 move-after-cpu-offload-wrap."""

from __future__ import annotations

from fsdp_lint.rules.base import FIX_NEVER, Rule


class MoveAfterCpuOffloadWrap(Rule):
    code = "FSD103"
    name = "move-after-cpu-offload-wrap"
    summary = "`.cuda()` / `.to(device)` on a module after wrapping it with CPU parameter offload"
    fix_availability = FIX_NEVER
    markers = (("CPUOffload",), (".cuda(", ".to("))
    doc = """\
## What it does
Checks for `.cuda()` or `.to(...)` (other than to the CPU) on a name bound to
`FSDP(..., cpu_offload=CPUOffload(offload_params=True))`, after that wrap.

## Why is this bad?
With parameter offload FSDP keeps the parameters on the CPU and moves them itself. Moving
the wrapped module to the GPU breaks that contract; the first forward fails on every rank:
`RuntimeError: An FSDP-managed module with parameter CPU offloading enabled has parameters
on cuda:0. Make sure to not move the module from CPU when offloading parameters.`
(2 GPUs, torch 2.11). Moving the module before wrapping (with `device_id`) is fine.

## Example
```python
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP

model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))
model = model.cuda()
```

## Use instead
```python
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP

model = FSDP(net, cpu_offload=CPUOffload(offload_params=True), device_id=torch.cuda.current_device())
```

## Fix safety
No automatic fix: where the module should live is the author's decision.

## References
- [FSDP `CPUOffload`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.CPUOffload)
"""

    def check(self, facts, report):
        from fsdp_lint.facts.imports import dotted_name
        from fsdp_lint.facts.offload import offloads_params
        from fsdp_lint.facts.values import literal_string

        for wrap in facts.fsdp_modules().wraps:
            offload = wrap.kwargs.get("cpu_offload")
            if wrap.target is None or offload is None or not offloads_params(facts, offload.value):
                continue
            for site in facts.calls:
                func = site.node.func
                if site.order <= wrap.site.order or site.attr not in ("cuda", "to"):
                    continue
                if dotted_name(getattr(func, "value", None)) != wrap.target:
                    continue
                if site.ctx.function is not wrap.site.ctx.function and "." not in wrap.target:
                    continue
                first = next((a for a in site.node.args if a.keyword is None), None)
                if site.attr == "to" and (first is None or (literal_string(first.value) or "").startswith("cpu")):
                    continue
                report(
                    site.node,
                    f"`{wrap.target}` was wrapped with CPU parameter offload (line {report.row(wrap.site.node)}); "
                    "moving it to the GPU makes the first forward raise RuntimeError; let FSDP place the "
                    "parameters (pass `device_id`, move before wrapping)",
                    statement=site.ctx.statement,
                )
