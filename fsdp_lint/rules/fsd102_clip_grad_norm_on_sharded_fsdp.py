"""FSD102 clip-grad-norm-on-sharded-fsdp."""

from __future__ import annotations

from fsdp_lint.diagnostics import UNSAFE
from fsdp_lint.facts import torch_api
from fsdp_lint.facts.conditions import tests_type_of
from fsdp_lint.facts.processes import in_single_process_branch
from fsdp_lint.facts.fsdp_modules import origins_with_callers, wrap_config
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.values import UNKNOWN, bind_arguments
from fsdp_lint.facts.scopes import latest_binding
from fsdp_lint.fixes import drop_import_name, method_call
from fsdp_lint.lazy_libcst import cst
from fsdp_lint.rules.base import FIX_SOMETIMES, FixProposal, Rule


class ClipGradNormOnShardedFsdp(Rule):
    code = "FSD102"
    name = "clip-grad-norm-on-sharded-fsdp"
    summary = "`torch.nn.utils.clip_grad_norm_` on a sharded FSDP1 module's parameters: each rank clips by its local norm"
    fix_availability = FIX_SOMETIMES
    markers = (("clip_grad_norm_",), ("FullyShardedDataParallel",))
    gate_facts = ("fsdp1_passed",)
    gate_calls = frozenset({"clip_grad_norm_"})
    gate_sites = True
    doc = """\
## What it does
Checks for `torch.nn.utils.clip_grad_norm_(m.parameters(), ...)` (any import alias; also a
list, generator, `list(...)` or `filter(...)` of them, directly or through a name:
`trainable = [p for p in m.parameters() if p.requires_grad]`; also the parameters of a part
of `m`: `m.base_model.parameters()`, `m.module.parameters()`, whose parameters are `m`'s
shards) where `m` is wrapped in this file by FSDP1 `FSDP(...)` with a sharded strategy (the default
`FULL_SHARD`, `SHARD_GRAD_OP`, `HYBRID_SHARD`). The wrap must reach the call on some path
(`if distributed: model = FSDP(model)`: the distributed run is the one that clips wrongly;
for a parameter of a function of this file, through a call of that function in this file,
as in a `train(model, ...)` helper, or, for a top-level function of a project module,
through the calls other files of the project make of it: `train(model, ...)` in the entry
script that wraps `model`, with the strategy that file shows; for a method of a project
class, the calls other files make on an instance of it or of a subclass that does not
override the methods the model went through, `trainer.fit(model=fsdp_model)` reaching the
clip in `Trainer.train_loop` through `self.train_loop(...)` in `fit`; in each case not on a branch that
runs only when the program is not distributed, such as the `else` of `if cfg.enable_fsdp:`),
or `m` is a parameter annotated with torch's FSDP class (`def __init__(self, wrapped_model:
FSDP)`, then `self.wrapped_model.parameters()`). The strategies it may have are read where
they are visible: written, or held in
a variable, module constant, config function or dict of this file (`STRATEGIES.get(name,
ShardingStrategy.FULL_SHARD)`: any of its values), or returned by a function of another
project file whose every `return` gives a `ShardingStrategy` member
(`get_sharding_strategy(args)`: any of them); one of them must shard, and a strategy the
linter cannot see (a command-line choice, an annotation) counts as one that may: every
strategy but `NO_SHARD` shards, and the sharded run is the one that clips wrongly. Not
where a branch around the call tests what the module is (`isinstance(model, FSDP)`,
`hasattr(model, "clip_grad_norm_")`), nor in a branch exclusive with the wrap's (`if not
use_fsdp:`; in a class, the `else` of `if self.is_fsdp:` where `__init__` sets the flag once
and wraps under it). An attribute bound in a method of an in-file base class counts for a
subclass that does not override that method (`self.policy.v_head = FSDP(...)` in
`BasicTrainer.shard`, clipped in `PPOTrainer(BasicTrainer)`). Not for FSDP2 (`fully_shard`), where the gradients are DTensors and
`torch.nn.utils.clip_grad_norm_` is correct, nor for `NO_SHARD`.

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

## Known problems
- The rule stays quiet unless an FSDP1 construction of this file (or, for a parameter, of a
  project file that calls the function or the method on an instance, or builds the class
  whose `__init__` stores it in `self.model`) or an FSDP annotation reaches the call. In a project without
  `pyproject.toml` or `.git` the other files are not read. A model it cannot follow (a
  parameter of a function no call of the project passes a wrapped model to and that is not
  annotated as FSDP, an attribute set elsewhere, a value returned by a call the file cannot
  see into) is not flagged.
- A strategy it cannot see is taken to shard: a job launched with `NO_SHARD` from a config
  (`ShardingStrategy[args.strategy]`) and a torch `clip_grad_norm_` is reported although it
  clips right; add `# noqa: FSD102` there.
- A wrap on one path is enough: a program that clips wrongly whenever it runs sharded is
  reported, even if its other configurations (one process, DDP, `NO_SHARD`) are right.
- Parameters listed through a helper of another function are not followed; only a list,
  generator, `list(...)`/`filter(...)` or a name bound in the same function is.

## Fix safety
The fix rewrites the call to `m.clip_grad_norm_(max_norm[, norm_type])` and is unsafe:
it is right only when `m` is the root FSDP module (on an inner unit FSDP raises
`RuntimeError: clip_grad_norm_() should only be called on the root FSDP instance`), and
the returned value becomes the total norm instead of the local one. Calls with other
keyword arguments (`error_if_nonfinite`, `foreach`) get no fix.
A list or filter of the parameters gets no fix: `m.clip_grad_norm_` clips all of them.

## References
- [`FullyShardedDataParallel.clip_grad_norm_`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.clip_grad_norm_)
"""

    def check(self, facts, report):
        for site in facts.calls:
            if facts.qualname(site.node.func) not in torch_api.CLIP_GRAD_NORM:
                continue
            bound, opaque = bind_arguments(site.node.args, ("parameters", "max_norm", "norm_type"))
            params = bound.get("parameters")
            if params is None:
                continue
            subset = False
            call = params.value
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                    and call.func.attr.value == "parameters" and not call.args):
                call = _parameters_call(facts, params.value, site, 0)
                subset = True  # a list or filter of them: `m.clip_grad_norm_` would clip them all
                if call is None:
                    continue
            func = call.func
            found, module = _root_or_part(facts, func.value, site)
            if module is not func.value:
                subset = True  # a part of the root: `root.clip_grad_norm_` would clip all of it
            owner = dotted_name(module)
            # from the callers in other files: not on a branch that runs only when the program
            # is not distributed (``else:`` of ``if cfg.enable_fsdp:``), which such a caller never takes
            passed = [e for e in found.external if not e.fsdp2] if not in_single_process_branch(site.ctx) else []
            declared = found.declared if not in_single_process_branch(site.ctx) else []
            if not (found.fsdp1 or passed or declared) or (owner is not None and tests_type_of(site.ctx, owner)):
                continue  # no FSDP1 wrap reaches the call, or a type test decides which one does
            strategies = [wrap_config(facts, o).sharding for o in found.fsdp1] + [
                set(e.sharding) if e.sharding is not None else UNKNOWN for e in passed] + [UNKNOWN for _ in declared]
            if not any(s is UNKNOWN or s - {"NO_SHARD"} for s in strategies):
                continue  # none of the strategies it may have shards
            if found.fsdp1:
                where = f"line {report.row(found.fsdp1[0].wrap.site.node)}"
            elif passed:
                where = f"passed sharded by {passed[0].place}"
            else:
                annotation = facts.module.code_for_node(declared[0].annotation.annotation)
                where = f"`{declared[0].name.value}: {annotation}`, line {report.row(declared[0])}"
            fix = None
            extra = set(bound) - {"parameters", "max_norm", "norm_type"}
            if not opaque and not extra and "max_norm" in bound and not subset:
                args = [bound[k] for k in ("max_norm", "norm_type") if k in bound]
                new = method_call(site.node, func.value, "clip_grad_norm_", args)
                name = site.node.func
                also = drop_import_name(facts.import_froms, facts.module.code, name.value) if isinstance(name, cst.Name) else ()
                fix = FixProposal(UNSAFE, f"Use `{owner}.clip_grad_norm_(...)`", site.node, new, also=also)
            report(
                site.node,
                f"`clip_grad_norm_` over the sharded FSDP module `{owner}` ({where}): "
                f"each rank clips by its local norm; use `{owner}.clip_grad_norm_(max_norm)` on the root module",
                fix,
                statement=site.ctx.statement,
            )



def _root_or_part(facts, expr, site):
    """(origins, the module they are of): ``expr``'s own, or, when no FSDP1 construction
    reaches it, those of the nearest module it is a part of (``model.base_model``,
    ``self.policy.v_head``, ``model.module``): a submodule of a sharded FSDP1 root holds
    the root's shards (its parameters are views into them, or its units' flat parameters)."""
    found = origins_with_callers(facts, expr, site.ctx, site.order)
    part = expr
    while not found.fsdp1 and not found.external and not found.declared and isinstance(part, cst.Attribute):
        part = part.value
        outer = origins_with_callers(facts, part, site.ctx, site.order)
        if outer.fsdp1:
            return outer, part
    return found, expr


def _parameters_call(facts, expr, site, depth):
    """The ``m.parameters()`` / ``m.named_parameters()`` call that ``expr`` lists or filters:
    ``[p for p in m.parameters() if p.requires_grad]``, a generator, ``list(...)``,
    ``filter(f, ...)``, also through a name bound in the same function before ``site``."""
    if depth > 3:
        return None
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and not expr.args \
            and expr.func.attr.value in ("parameters", "named_parameters"):
        return expr
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp)) and expr.for_in.inner_for_in is None:
        return _parameters_call(facts, expr.for_in.iter, site, depth + 1)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("list", "tuple", "filter") \
            and expr.args and facts.qualname(expr.func) is None:
        return _parameters_call(facts, expr.args[-1].value, site, depth + 1)
    name = dotted_name(expr)
    if name is not None and isinstance(expr, cst.Name):
        latest = latest_binding(facts, name, site.ctx, site.order)
        if latest is not None and latest.ctx.function is site.ctx.function:
            return _parameters_call(facts, latest.value, site, depth + 1)
    return None
