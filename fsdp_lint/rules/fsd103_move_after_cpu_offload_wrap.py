"""FSD103 move-after-cpu-offload-wrap."""

from __future__ import annotations

from fsdp_lint.facts.dataflow import sources
from fsdp_lint.facts.fsdp_modules import fsdp_modules, is_cpu_device, origins, wrap_config, wrap_line
from fsdp_lint.facts.values import first_positional, literal_string
from fsdp_lint.rules.base import FIX_NEVER, Rule


class MoveAfterCpuOffloadWrap(Rule):
    code = "FSD103"
    name = "move-after-cpu-offload-wrap"
    summary = "`.cuda()` / `.to(device)` on a module after wrapping it with CPU parameter offload"
    fix_availability = FIX_NEVER
    markers = (("CPUOffload",), (".cuda(", ".to("))
    doc = """\
## What it does
Checks for `.cuda()` or `.to(...)` (other than to the CPU or to a dtype) on a module that at
that point can be `FSDP(..., cpu_offload=CPUOffload(offload_params=True))`: the wrap reaches
the move (not in an exclusive `if`/`elif` arm, not behind a `return`), through variables,
class attributes and the offload configuration's variables.

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
        if not fsdp_modules(facts).wraps:
            return
        for site in facts.calls:
            func = site.node.func
            if site.attr not in ("cuda", "to") or not hasattr(func, "value") or facts.qualname(func) is not None:
                continue
            if site.attr == "to" and not _moves_off_cpu(facts, site):
                continue
            found = origins(facts, func.value, site.ctx, site.order)
            offloaded = [o for o in found.fsdp1 if wrap_config(facts, o).offload is True]
            if not offloaded:
                continue
            wrap = offloaded[0].wrap
            name = facts.module.code_for_node(func.value)
            report(
                site.node,
                f"`{name}` was wrapped with CPU parameter offload ({wrap_line(wrap, report.row)}); "
                "moving it to the GPU makes the first forward raise RuntimeError; let FSDP place the "
                "parameters (pass `device_id`, move before wrapping)",
                statement=site.ctx.statement,
            )


_DTYPES = frozenset({"float16", "half", "bfloat16", "float32", "float", "float64", "double", "int8", "uint8", "int32", "int64"})


def _moves_off_cpu(facts, site) -> bool:
    """``m.to(x)`` moves to an accelerator: not ``.to("cpu")`` nor ``.to(torch.device("cpu"))``
    (also through a name), not a dtype-only ``.to(torch.bfloat16)``."""
    call = site.node
    first = first_positional(call)
    device = next((a for a in call.args if a.keyword is not None and a.keyword.value == "device"), first)
    if device is None:
        return False
    text = literal_string(device.value)
    if text is not None:
        return not text.startswith("cpu")
    qualname = facts.qualname(device.value) or ""
    if qualname.startswith("torch.") and qualname.rsplit(".", 1)[-1] in _DTYPES:
        return False
    found = sources(facts, device.value, site.ctx, site.order)
    return not (found.complete and found.found and all(is_cpu_device(facts, s) for s in found.found))
