"""FSD002 summon-in-training-loop."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.frameworks import STEP_HOOK_NAMES
from fsdp_lint.facts.loops import CALL_LEVELS, StepHook, per_step_via_call
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.rules.base import FIX_NEVER, Rule


class SummonInTrainingLoop(Rule):
    code = "FSD002"
    name = "summon-in-training-loop"
    summary = "`summon_full_params` runs on every training step: in a training loop, or in a trainer's per-step hook"
    fix_availability = FIX_NEVER
    markers = (("summon_full_params",), ("backward", ".step", *sorted(STEP_HOOK_NAMES)))
    caller_levels = CALL_LEVELS
    gate_calls = frozenset({torch_api.SUMMON})
    gate_torch_only = True
    gate_names = frozenset({"backward", "step"}) | STEP_HOOK_NAMES
    gate_sites = True
    doc = """\
## What it does
Checks for a torch FSDP `summon_full_params(...)` call that runs on every iteration of a
training loop. A training loop is a `for`/`while` loop that is the innermost loop of a
`.backward(...)` call (`loss.backward()`, `accelerator.backward(loss)`,
`scaler.scale(loss).backward()`) or a `.step(...)` call (`optimizer.step()`) in the same
function. A summon under a sparse guard, or in a branch that leaves the loop, is not
flagged. Sparse: the test uses `%` (`if step % eval_every == 0:`, also through a name
bound from it: `do_eval = step % n == 0; if do_eval:`), compares a loop counter with `==`
or `in` (`if step == max_steps - 1:`, `if step in eval_steps:`), or passes one to a call
(`if should_run(step, every):`); loop counters are the `for` target and names the loop adds
to (`global_step += 1`). A run-once latch is sparse too: a test of a name or attribute
the function sets to `True`/`False`/`None` after the test (`if not checked: ...; checked =
True`, `if self.logged: return` then `self.logged = True`). A test on anything else (`if
args.debug:`, `if step > warmup:`) leaves the summon on every step; nor is a
summon in an outer epoch loop, or in an evaluation loop that never steps. A summon in a
function or method of the same file that the loop calls on every step
(`ema.update(model)`, `log_weight_norm(model)`) runs on every step too, and so does one
that such a function calls, up to three calls from the loop (`train_step(batch)` calling
`generate_completions(policy)`, which summons); a call under a sparse guard on the way
breaks the chain. A loop also steps when it calls a function of the file that makes the
backward or the optimizer step outside any loop of its own (`for batch in loader:
train_step(batch)`); a function that loops over batches itself (`train_epoch`) leaves its
caller's loop an epoch loop.

A trainer's loop is not in the file, but the methods it calls on every training step are:
a `LightningModule`'s `training_step`, `backward`, `optimizer_step`, `optimizer_zero_grad`,
`configure_gradient_clipping` and batch hooks (`on_train_batch_start`/`_end`,
`on_before_backward`, `on_after_backward`, `on_before_optimizer_step`,
`on_before_zero_grad`), a Lightning `Callback`'s batch hooks, and a transformers
`TrainerCallback`'s `on_step_begin`, `on_pre_optimizer_step`, `on_optimizer_step`,
`on_substep_end` and `on_step_end`, and a transformers `Trainer`'s (or a TRL trainer's)
`training_step` and the `compute_loss` it calls for every micro-batch (lightning 2.6.6,
transformers 5.24.0). The method's class
must derive from the framework's class (also through classes of this file). A summon in such
a hook (or in a method of the file it calls) is flagged unless under a sparse guard, whose
counters are the trainer's: `batch_idx` and `global_step` (`if batch_idx % 100 == 0:`,
`if state.global_step == state.max_steps:`). The EMA update in `on_before_zero_grad` under
`FSDPStrategy` is the common case.

## Why is this bad?
Each summon all-gathers every parameter of the module: one extra all-gather of the whole
model per training step. Measured: +12 % step time on 268M parameters on 2 H200 GPUs
(FULL_SHARD, NCCL, torch 2.11); +24 % to +52 % on CPU/gloo with 4.2M parameters. Running
the step near a summon also invites the summon hazards (a forward or backward inside the
block fails or silently changes weights).

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

for step, batch in enumerate(loader):
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()
    with FSDP.summon_full_params(model, writeback=False):
        norm = sum(p.norm() for p in model.parameters())
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

for step, batch in enumerate(loader):
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        with FSDP.summon_full_params(model, writeback=False):
            norm = sum(p.norm() for p in model.parameters())
```

## Known problems
- A training loop is one the file shows: a `for`/`while` loop that is the innermost loop of
  a `.backward(...)` or `.step(...)` call in the same function or in a function of the file
  it calls, or a trainer's per-step hook listed above. A loop whose step runs in another
  module, a hook of another framework, or a hook method of a class whose framework base the
  file cannot name (a base class from another module of the project), is not seen, and its
  summons are not flagged.
- The summon must be in the loop's function or at most three calls away in functions of
  this file; a summon in another module is not followed.
- A guard it does not recognise as sparse (a flag, `if step > warmup:`, a predicate that
  does not take a loop counter) is assumed to run on every step and the summon is flagged;
  write the guard with `%` or a counter comparison, or add `# noqa: FSD002`.

## Fix safety
No automatic fix: moving the block out of the loop, guarding it to every N steps, or
computing the statistic from the local shards plus one scalar `torch.distributed.all_reduce`
(which costs nothing measurable) are design choices.

## References
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        for summon in summon_calls(facts):
            found = per_step_via_call(facts, summon.site.ctx)
            if found is None:
                continue
            where, calls = found
            rows = ", ".join(str(report.row(call.node)) for call in calls)
            if len(calls) > 1:
                through = f" (through the calls at lines {rows})"
            else:
                through = f" (through the call at line {rows})" if calls else ""
            what = "the root module's own parameters" if summon.value("recurse") is False else "all parameters"
            if isinstance(where, StepHook):
                runs = (f"in `{where.node.name.value}` (line {report.row(where.node)}), a hook of "
                        f"{where.trainer} that the trainer calls on every training step{through}")
                advice = "move it to a per-epoch hook, guard it to every N steps (`if batch_idx % N == 0:`)"
            else:
                runs = f"on every iteration of the training loop at line {report.row(where.node)}{through}"
                advice = "move it out of the loop, guard it to every N steps (`if step % N == 0:`)"
            report(
                summon.node,
                f"`summon_full_params` runs {runs}: one extra all-gather of {what} per step; {advice}, or "
                "compute from the local shards plus an `all_reduce`",
                statement=summon.site.ctx.statement,
            )
