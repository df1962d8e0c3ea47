"""FSD001 summon-writeback-with-cpu-offload."""

from __future__ import annotations

from fsdp_lint.diagnostics import SAFE, UNSAFE
from fsdp_lint.facts.offload import CPU_DEVICE
from fsdp_lint.facts.read_only_blocks import describe_possible_edit
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.fixes import set_arguments
from fsdp_lint.facts import torch_api
from fsdp_lint.rules.base import FIX_SOMETIMES, FixProposal, Rule


class SummonWritebackWithCpuOffload(Rule):
    code = "FSD001"
    name = "summon-writeback-with-cpu-offload"
    summary = (
        "`summon_full_params` without `writeback=False` in a module that keeps FSDP "
        "parameters on the CPU"
    )
    fix_availability = FIX_SOMETIMES
    markers = (("summon_full_params",), ("CPUOffload", "cpu"))
    hazard_fixed_in = "2.14.1"
    gate_facts = ("params_on_cpu_named",)
    gate_calls = frozenset({torch_api.SUMMON})
    gate_torch_only = True
    gate_sites = True
    doc = """\
## What it does
Checks for `FullyShardedDataParallel.summon_full_params(...)` calls (class or instance
form, any import alias) that leave `writeback` at its default `True` (or pass a literal
`True`) on a model whose FSDP parameters live on the CPU: `CPUOffload(offload_params=True)`,
FSDP2 `CPUOffloadPolicy(...)`, or FSDP placed on the CPU device
(`device_id=torch.device("cpu")`). The decision is per model: the summoned module is
followed to the constructions it can come from (local and class attributes, helper
functions and their `**kwargs`, `functools.partial`, dicts passed as `**cfg`, module
constants, conditional expressions); a model built without offload in a file that also
offloads another one is not flagged (a model it cannot follow: see Known problems). A
block that edits parameters is not flagged under CPU offload on GPUs:
there the write-back is what keeps the edit, and it works; it is still flagged with FSDP on
the CPU device and `offload_to_cpu=True`, where the write-back itself overwrites the shards.

## Why is this bad?
With `writeback=True`, leaving the block copies this rank's slice of the full parameters
back into the local shard: a write path for a block that usually only reads. When the
parameters live on the CPU this path silently overwrote shards in pytorch/pytorch#188989:
on torch 2.13.0, FSDP on the CPU device, `summon_full_params(m, offload_to_cpu=True)` with
the default writeback overwrites the local shard with freed memory on exit, even when the
block never touched a parameter (8 elements to 100 % of the shard, random per rank and run).
`writeback=False` keeps the shard intact. Fixed in torch 2.14.1. What lands in the shard is
whatever reused the freed memory: a block that allocates anything (here a scratch tensor)
gets its own data written into the parameters; a block that allocates nothing can come out
unchanged by chance (1 run in 8 on torch 2.13.0).

With real `CPUOffload(offload_params=True)` on GPUs the shards are not corrupted (the
parameters are on the GPU when `to_cpu()` runs), but the default writeback costs time: on
exit of every block each rank copies its slice of the full parameters back into its
host-resident shard. Measured by hand on 2 x H200 (torch 2.11, NCCL, 24 x Linear(4096,
4096), FSDP per layer): a read-only summon took 46.3 ms with the default writeback and
28.2 ms with `writeback=False` (+64 %); without CPU offload the difference is 4-10 %.

What the verifier runs, and where (table below):
- CPU scenario, the pytorch#188989 combination only: FSDP on the CPU device (gloo),
  `summon_full_params(model, offload_to_cpu=True)` with the default writeback, a block that
  reads no parameter. Corruption reproduced on torch 2.13.0 and 2.11; not on 2.14.1.
- GPU scenario: real `CPUOffload(offload_params=True)`, `offload_to_cpu` left False, the
  read-only block timed with the default writeback against `writeback=False` (CONFIRMED at
  1.25x or more). Its corruption check, run on 2 x H200 with torch 2.11 before the cost was
  measured, ran clean for every combination of `offload_to_cpu`, `writeback`, `rank0_only`
  and `use_orig_params` (NOT REPRODUCED in the imported GPU record).

## Example
```python
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP

model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))
with FSDP.summon_full_params(model):
    for name, param in model.named_parameters():
        print(name, param.norm())
```

## Use instead
```python
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP

model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))
with FSDP.summon_full_params(model, writeback=False):
    for name, param in model.named_parameters():
        print(name, param.norm())
```

## Known problems
- When the summoned model cannot be followed to its construction (a function parameter, an
  attribute set elsewhere, a model built in another file), the rule assumes the module-level
  reading: the model keeps its parameters on the CPU if the file configures CPU offload or
  FSDP on the CPU device anywhere, except in another function's decorator or default (another
  test's `@pytest.mark.parametrize`).
- When the model's construction is found but opaque (`FSDP(m, **get_kwargs(m))`), the
  configuration another construction passes itself does not count; when the function builds
  the model through a call the file cannot see into (`model = make_model(...)`), only a
  configuration that can reach it counts: in the same function or class, a module constant,
  a builder it calls, or a caller that passes the model.
- Offload chosen outside the file (an accelerate config's `fsdp_offload_params`, `--fsdp
  "... offload"`, a YAML config) is not read: such a summon is not flagged.
- A `writeback` the file does not show as a literal (a variable, an unreadable `**kwargs`) is
  taken as an explicit choice and not flagged.
- The rule is off when `target-torch-version` is 2.14.1 or later; unset, it reports. A
  deliberate default write-back on an offloaded model: `# noqa: FSD001`.

## Fix safety
The fix adds `writeback=False` (or turns a literal `writeback=True` into `False`). It is
safe when the `with` block that enters the call provably does not modify parameters: no
in-place tensor method (`add_`, `copy_`, `zero_`, any `*_` call) on a parameter, the
gathered module or a view of them, no augmented, subscript or attribute assignment to them
(`p.data = ...`, `p[0] = 1`, `p += 1`), no `load_state_dict`, `setattr` or `del`; a method
writes its receiver only (`shadow[n].add_(p)` updates an EMA copy and reads `p`), a module
function such as `init.zeros_(w)` its first argument; and no call hands the parameters or
the module to code that may write them (`model.apply(init_fn)`, a helper of the file,
`vector_to_parameters(v, model.parameters())`; known readers such as `print`, `torch.save`,
a logger or `p.norm()` are fine). Otherwise it is unsafe (the block's edits would be discarded) and is
applied only with `--unsafe-fixes`. A summon that is not entered by a `with` statement
(stored in a variable, `ExitStack.enter_context`) gets the unsafe fix: its block is unknown.

## References
- pytorch/pytorch#188989: `summon_full_params(offload_to_cpu=True)` with CPU-resident parameters
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for summon in summon_calls(facts):
            if summon.value("writeback") is not True:
                continue
            found = summon.params_on_cpu(facts)
            if not found:
                continue
            on_cpu_device = [e for e in found if e.kind == CPU_DEVICE]
            evidence = on_cpu_device[0] if on_cpu_device and summon.value("offload_to_cpu") is True else found[0]
            where = f"{evidence.kind}, line {report.row(evidence.node)}"
            if evidence.wrap is not None and evidence.wrap.elsewhere and evidence.node is evidence.wrap.site.node:
                where = f"{evidence.kind}, in {evidence.wrap.elsewhere}"  # configured in the helper's file
            elif evidence.elsewhere:
                where = f"{evidence.kind}, in {evidence.elsewhere} through line {report.row(evidence.node)}"
            if evidence.wrap is not None:
                model = summon.module_expr
                name = facts.module.code_for_node(model) if model is not None else "the model"
                wrapped = f"line {report.row(evidence.wrap.site.node)}" + (
                    f", in {evidence.wrap.elsewhere}" if evidence.wrap.elsewhere else "")
                subject = f"`{name}` (wrapped at {wrapped}) keeps its FSDP parameters on the CPU ({where})"
            else:
                subject = f"this module keeps FSDP parameters on the CPU ({where})"
            edits = summon.block_may_edit(facts)
            through = summon.may_edit_through(facts) if edits else []
            corrupts = evidence.kind == CPU_DEVICE and summon.value("offload_to_cpu") is True
            if edits and not through and not corrupts and summon.site.entered_by is not None:
                continue  # the block edits parameters: the write-back it pays for is what keeps the edit
            if through:
                advice = (
                    f"{describe_possible_edit(facts, through[0])} (line {report.row(through[0])}) may edit the "
                    "parameters, so `writeback=False` could drop an edit: if the block only reads them, pass "
                    "`writeback=False`"
                )
            elif edits and summon.site.entered_by is not None:
                advice = (
                    "the block edits parameters, so `writeback=False` would drop the edit: edit the local "
                    "shards outside the summon, or load the new values with `set_model_state_dict`"
                )
            else:
                advice = "pass `writeback=False` for a read-only block"
            if corrupts:
                consequence = (
                    "on exit the write-back overwrites the local shards with freed memory on torch < 2.14.1 "
                    "(pytorch#188989)"
                )
            else:
                consequence = "on every exit each rank copies its slice back into its host-resident shard"
            fix = (FixProposal(
                UNSAFE if edits else SAFE,
                "Pass `writeback=False`",
                summon.node,
                set_arguments(summon.node, summon.args, {"writeback": "False"}),
            ) if summon.fixable else None)
            report(summon.node, f"`summon_full_params` writes back by default and {subject}: {consequence}; {advice}",
                   fix, statement=summon.site.ctx.statement)
