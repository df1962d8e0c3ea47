"""FSD101 optimizer-before-wrap."""

from __future__ import annotations

from fsdp_lint.facts.flow import can_follow
from fsdp_lint.facts.frameworks import framework_wraps
from fsdp_lint.facts.fsdp_modules import Origin, fsdp_modules, wrap_config
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.optimizers import aliases, optimizers, used_after
from fsdp_lint.rules.base import FIX_NEVER, Rule


class OptimizerBeforeWrap(Rule):
    code = "FSD101"
    name = "optimizer-before-wrap"
    summary = (
        "optimizer built from a module's parameters before FSDP (or accelerate's FSDP1 `prepare`) wraps it"
    )
    fix_availability = FIX_NEVER
    markers = (
        ("FullyShardedDataParallel", "fully_shard", "FullyShardedDataParallelPlugin", "ModelParallelStrategy"),
        ("parameters(", "configure_optimizers("),
        ("optim", "Adam", "SGD", "Adagrad", "Adadelta", "RMSprop", "Rprop", "Lion", "Lamb", "LAMB", "Adafactor"),
    )
    launch_markers = (("prepare",), ("parameters(", "configure_optimizers("))
    doc = """\
## What it does
Checks for an optimizer built from `m.parameters()` (or from param groups listed from
`m.parameters()`/`m.named_parameters()` first, through a name) before `m` is wrapped by torch FSDP
(`FSDP(m, ...)`, `FSDP(module=m)`, FSDP2 `fully_shard(m)`, also inside an `if`, or a call
of a function of this file that runs `fully_shard` on its parameter, torchtitan's
`apply_fsdp(model)`: FSDP2 shards in place, or a function of another file of the project
that does, found through the imports: `parallelize_llama(model, mesh)` from
`parallelize.py`, the message then names where it shards) in the same function and still used after the wrap: called, returned (`return model, optimizer`),
stored on an object (`self.optimizer = ...`), passed on (`Trainer(model, optimizer)`), or
handed before the wrap to an object that is used after it (`stepper = Stepper(model,
optimizer)`, the wrap, then `stepper.step(loss)` in the loop).
An optimizer built after the wrap from the module object that was wrapped
(`self.model = FSDP(model)` then `Adam(model.parameters())`) is not flagged: FSDP1 registers
its flat parameters on that inner module (or keeps the original parameter objects with
`use_orig_params=True`), so it holds the tensors FSDP trains (measured on CPU/gloo, torch
2.13.0, both settings). Names are followed through
aliases (`self.model = model`). An optimizer is a `torch.optim` class, an optimizer-like
class or variable (`optimizer_cls = torch.optim.AdamW`; `optimizer_cls(params=...)`), or
`m.configure_optimizers(...)` / a method of this file that builds one from
`self.parameters()`. FSDP1 with `use_orig_params=True` (or a value that is not visible)
keeps the original parameter objects and is not flagged; branches that exclude each
other are not an order.
Through accelerate (1.15.0): `accelerator.prepare(model, optimizer)` with a
`FullyShardedDataParallelPlugin(use_orig_params=False)` (FSDP1) wraps the model and leaves
the optimizer's parameters alone (accelerate re-points them for FSDP2 only,
`accelerator.py` l. 1766). Left out, the plugin's `use_orig_params` comes from the
environment that `accelerate launch` sets (`FSDP_USE_ORIG_PARAMS`: its config's
`fsdp_use_orig_params`, default `true`); started any other way it is unset and False
(`utils/dataclasses.py` l. 1938-1939). So a plugin without it is flagged where the project
says how the file starts: a launch script (`torchrun ... train.py`, `python train.py`),
`[tool.fsdp-lint] launch = { framework = "torchrun" }`, or an accelerate config with
`fsdp_use_orig_params: false`; not where that is unknown (`accelerate launch` may read the
user's own default config).
Through Lightning Fabric (2.6.6): `fabric.setup(model, optimizer)` / `fabric.setup_module(model)`
with `ModelParallelStrategy` (FSDP2 through the user's `parallelize_fn`) maps no optimizer
parameters (`strategies/strategy.py` l. 150-161); with `FSDPStrategy` it wraps with
`use_orig_params=True` by default and the joint setup is documented.

## Why is this bad?
FSDP replaces the module's parameters (by flat parameters, or FSDP2 DTensors). The
optimizer keeps stepping the old tensors, which no forward or backward uses any more: the
weights never change, silently, and a full-size copy of the old parameters stays alive
(measured on CPU/gloo, torch 2.13.0, and on 2 GPUs, torch 2.11).

The framework forms are verified by their own scenarios, each the framework's call:
`FSD101 (fabric-fsdp2)` (`fabric.setup(model, optimizer)` with `ModelParallelStrategy`:
no weight changed by 3 optimizer steps, measured on CPU/gloo, torch 2.13.0, Lightning 2.6.6)
and `FSD101 (accelerate)` (`accelerator.prepare(model, optimizer)` with the FSDP1 plugin),
which runs on GPUs only: accelerate 1.15.0 enables its FSDP plugin only over an
accelerator's process group (`state.py` l. 986-1013).

## Example
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model = FSDP(model)
for batch in loader:
    model(batch).sum().backward()
    optimizer.step()
```

## Use instead
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for batch in loader:
    model(batch).sum().backward()
    optimizer.step()
```

## Known problems
- Order is judged within one function: the optimizer and the wrap must be in the same
  function. An optimizer built in a function or file the wrap's function does not show (a
  helper returning both, a framework's trainer) is not flagged.
- A wrap by a project function of another file is seen when the file's imports lead to it
  (`fsdp_lint/project.py`); a module sharded by code they do not lead to is not.
- FSDP1 with a `use_orig_params` the rule cannot read (a variable it cannot follow, an
  unreadable `**cfg`) is assumed to keep the parameters (True) and is not flagged.
- An accelerate FSDP1 plugin that leaves out `use_orig_params` is flagged only where the
  project says how the file starts (a launch script, an accelerate config with
  `fsdp_use_orig_params: false`, or `[tool.fsdp-lint] launch`); where that is unknown it
  stays quiet: set `[tool.fsdp-lint] launch` to tell it.

## Fix safety
No automatic fix: the optimizer construction has to move after the wrap, which may move
other code with it.

## References
- [FSDP: construct the optimizer after wrapping](https://pytorch.org/docs/stable/fsdp.html)
"""

    def check(self, facts, report):
        modules = fsdp_modules(facts)
        for optimizer in optimizers(facts):
            opt = optimizer.site
            alias = aliases(facts, opt.ctx.function)
            if opt.ctx.class_def is not None:
                alias = {**aliases(facts, None), **alias}

            def same(a, b):
                return a is not None and b is not None and alias.get(a, a) == alias.get(b, b)

            for wrap in modules.wraps + modules.fsdp2_wraps:
                site, wrapped = wrap.site, wrap.wrapped
                if site.ctx.function is not opt.ctx.function or not same(wrapped, optimizer.module):
                    continue
                if not wrap.fsdp2 and wrap_config(facts, Origin(wrap)).use_orig_params is not False:
                    continue  # FSDP1 use_orig_params=True keeps the parameter objects
                if opt.order < site.order and can_follow(opt.ctx, opt.order, site.ctx, site.order):
                    if optimizer.target is None or not used_after(facts, optimizer.target, site.ctx.function, site.order):
                        continue
                    where = f"line {report.row(site.node)}"
                    if wrap.elsewhere:
                        does = "shards it" if wrap.fsdp2 else "returns it in FSDP1"
                        where += (f": `{facts.module.code_for_node(site.node.func)}` {does}, wrapped in "
                                  f"{wrap.elsewhere}")
                    message = (
                        f"optimizer built from `{optimizer.module}.parameters()` before `{wrapped}` is wrapped by FSDP "
                        f"({where}) and used afterwards: it steps the old parameters and "
                        "the weights never change; build it after wrapping"
                    )
                else:
                    continue
                report(opt.node, message, statement=opt.ctx.statement)
                break
            else:
                self._framework_wrap(facts, report, optimizer, same)

    @staticmethod
    def _framework_wrap(facts, report, optimizer, same):
        """A framework call that shards the model and leaves this optimizer alone
        (``facts.frameworks.framework_wraps``)."""
        opt = optimizer.site
        for wrap in framework_wraps(facts):
            site = wrap.site
            if site.ctx.function is not opt.ctx.function or site.order <= opt.order:
                continue
            if not can_follow(opt.ctx, opt.order, site.ctx, site.order):
                continue
            if not any(same(dotted_name(a.value), optimizer.module) for a in site.node.args):
                continue
            report(
                opt.node,
                f"optimizer built from `{optimizer.module}.parameters()` before "
                f"`{facts.module.code_for_node(site.node.func)}` (line {report.row(site.node)}) shards "
                f"`{optimizer.module}` with {wrap.how} (line {report.row(wrap.config)}): the optimizer keeps the "
                "old parameters and the weights never change; set the model up first and build the optimizer "
                "from it",
                statement=opt.ctx.statement,
            )
            return
