"""FSD007 step-inside-summon."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.forward_methods import ENTRY_POINTS
from fsdp_lint.facts.fsdp_modules import fsdp_modules, nested_forward_breaks_summon, origins_with_callers
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.summon import summon_blocks
from fsdp_lint.lazy_libcst import cst
from fsdp_lint.diagnostics import UNSAFE
from fsdp_lint.fixes import set_arguments
from fsdp_lint.rules.base import FIX_SOMETIMES, FixProposal, Rule


def _entry_point_summon(facts, site, blocks):
    """The recursive summon (``recurse`` not ``False``) around ``site`` when ``site`` calls a
    method that runs the model's forward from inside (``forward_methods.ENTRY_POINTS``:
    ``generate``) on the summoned module or its inner module, and that module is an FSDP1
    construction whose nested units such a forward breaks (``nested_forward_breaks_summon``)."""
    func = site.node.func
    if site.attr not in ENTRY_POINTS or not isinstance(func, cst.Attribute):
        return None
    receiver = dotted_name(func.value)
    if receiver is None:
        return None
    for summon, _ in reversed(blocks):
        name = summon.module_name
        if name is None or receiver not in {name, *(f"{name}.{inner}" for inner in torch_api.FSDP1_INNER_MODULE)}:
            continue
        if summon.value("recurse") is False:
            continue
        found = origins_with_callers(facts, summon.module_expr, summon.site.ctx, summon.site.order)
        if any(nested_forward_breaks_summon(facts, o) for o in found.fsdp1):
            return summon
    return None


class StepInsideSummon(Rule):
    code = "FSD007"
    name = "step-inside-summon"
    summary = ("the FSDP model's forward (also through `generate` on nested units) or a `.backward()` runs inside a "
               "`summon_full_params` block")
    fix_availability = FIX_SOMETIMES
    markers = (("summon_full_params",),)
    gate_calls = frozenset({torch_api.SUMMON})  # the step stands inside the summon's block
    gate_torch_only = True
    gate_sites = True
    doc = """\
## What it does
Checks for a forward call of an FSDP-wrapped model (the summoned module, or any name bound
to an `FSDP(...)` construction) or any `.backward(...)` call inside a torch FSDP
`summon_full_params` block; and for a method that runs the model's forward from inside
(`generate`, `encode`, `sample`, ...) called on the summoned module (or its `.module`)
inside a recursive summon (`recurse` not `False`) when the file shows that module built with
nested units (an `auto_wrap_policy`), flat parameters (`use_orig_params=False`, the default)
and a strategy that shards (`FULL_SHARD`, the default, or `SHARD_GRAD_OP`).

## Why is this bad?
Inside the block the parameters are unsharded views that FSDP's own forward and backward
do not expect. Measured on CPU/gloo (torch 2.13.0) and 2 GPUs (torch 2.11):
- `use_orig_params=False`: `AssertionError: Expects tensor to be unsharded with size ...
  but got ...` when the block exits;
- `use_orig_params=True` with `writeback=True`: no error, and the weights are silently
  changed without any optimizer step.

`model.generate(...)` on an FSDP1 root is the inner model's method (`FSDP.__getattr__`): it
calls the inner model, whose nested FSDP units then run their own forward on the summoned
parameters. Measured on CPU/gloo, torch 2.13.0, 2 ranks, units by `ModuleWrapPolicy`,
`use_orig_params=False`: `AssertionError: Expects tensor to be unsharded with size ... but
got ...` at the block's exit with `FULL_SHARD` and `SHARD_GRAD_OP`; clean with
`recurse=False` (TRL's idiom: only the root's own parameters are gathered), with
`use_orig_params=True`, with a single unit, with `NO_SHARD`, and with `HYBRID_SHARD` on one
host.

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

- The sampling-method form needs the model's construction in the file (or in a caller of
  the function that summons it, in the file): a model handed in from elsewhere, or built
  with a strategy or `use_orig_params` the file does not show, is not flagged.

## Fix safety
No automatic fix for a forward or a backward: the step has to move out of the block, which
changes the program's order. For a sampling method (`generate`) the fix passes
`recurse=False` to the summon (the verifier's fixed program for that form) and is unsafe:
the block then gathers only the root's own parameters, so code in it that reads the nested
units' parameters (`model.state_dict()`, `model.named_parameters()`) sees their shards. There
is no fix where the summon takes `*args`/`**kwargs`.

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
                summon = _entry_point_summon(facts, site, blocks)
                if summon is not None:
                    fix = None
                    if summon.fixable:
                        fix = FixProposal(UNSAFE, "Pass `recurse=False` to the summon", summon.node,
                                          set_arguments(summon.node, summon.args, {"recurse": "False"}))
                    report(
                        site.node,
                        f"`{callee}(...)` runs the forward of the FSDP model's nested units inside the recursive "
                        f"`summon_full_params` block at line {report.row(summon.node)}: AssertionError at exit "
                        "(use_orig_params=False); pass `recurse=False` (the root's own parameters) or call it "
                        "outside the block",
                        fix,
                        statement=site.ctx.statement,
                    )
                continue
            summon = blocks[-1][0]
            report(
                site.node,
                f"{what} inside the `summon_full_params` block at line {report.row(summon.node)}: "
                "AssertionError at exit (use_orig_params=False) or weights changed with no optimizer "
                "step; run the step outside the block",
                statement=site.ctx.statement,
            )
