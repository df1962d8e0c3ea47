"""FSD103 move-after-cpu-offload-wrap."""

from __future__ import annotations

from fsdp_lint.facts.dataflow import Source
from fsdp_lint.facts.fsdp_modules import fsdp_modules, is_accelerator_device, origins_with_callers, wrap_config, wrap_line
from fsdp_lint.facts.values import first_positional
from fsdp_lint.rules.base import FIX_NEVER, Rule


class MoveAfterCpuOffloadWrap(Rule):
    code = "FSD103"
    name = "move-after-cpu-offload-wrap"
    summary = "`.cuda()` / `.to(device)` on a module after wrapping it with CPU parameter offload"
    fix_availability = FIX_NEVER
    markers = (("CPUOffload",), (".cuda(", ".to("))
    gate_facts = ("fsdp1_model", "cpu_offload_named")
    gate_calls = frozenset({"cuda", "to"})
    gate_sites = True
    doc = """\
## What it does
Checks for `.cuda()` or `.to(...)` (other than to the CPU or to a dtype) on a module that at
that point can be `FSDP(..., cpu_offload=CPUOffload(offload_params=True))`: the wrap reaches
the move (not in an exclusive `if`/`elif` arm, not behind a `return`), through variables,
class attributes, the offload configuration's variables, and a function's parameter from the
calls of that function in this file (a `prepare_for_eval(model, device)` helper).

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

## Known problems
- Only a module that at the move can be an FSDP1 wrap of this file with a visible
  `CPUOffload(offload_params=True)` (on some path) is checked. Offload set outside the file
  (an accelerate config's `fsdp_offload_params`, `--fsdp "... offload"`), an unreadable
  `**cfg`, or a model wrapped elsewhere (a parameter, an attribute set in another file) is
  not flagged. FSDP2's `CPUOffloadPolicy` is not checked.
- `.to(x)` counts as a move only when `x` says it is an accelerator: a device string or
  index (`"cuda"`, `f"cuda:{rank}"`, `0`), `torch.device("cuda", ...)`, or a name that says
  device (`device`, `self.device`, `local_rank`), also through assignments. A dtype
  (`torch.bfloat16`, `args.dtype`) or a value it cannot read (`.to(args.target)`) is not
  flagged.

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
            found = origins_with_callers(facts, func.value, site.ctx, site.order)
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


def _moves_off_cpu(facts, site) -> bool:
    """``m.to(x)`` moves to an accelerator (``facts.fsdp_modules.is_accelerator_device``):
    not ``.to("cpu")``, not a dtype-only ``.to(torch.bfloat16)`` / ``.to(args.dtype)``, not
    a value the file cannot read."""
    call = site.node
    first = first_positional(call)
    device = next((a for a in call.args if a.keyword is not None and a.keyword.value == "device"), first)
    if device is None:
        return False
    return is_accelerator_device(facts, Source(device.value, site.ctx, site.order))
