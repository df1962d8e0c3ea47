"""FSD002 summon-in-training-loop."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.loops import per_step_via_call
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.rules.base import FIX_NEVER, Rule


class SummonInTrainingLoop(Rule):
    code = "FSD002"
    name = "summon-in-training-loop"
    summary = "`summon_full_params` runs on every iteration of a training loop"
    fix_availability = FIX_NEVER
    markers = (("summon_full_params",), ("backward", ".step"))
    gate_calls = frozenset({torch_api.SUMMON})
    gate_torch_only = True
    gate_names = frozenset({"backward", "step"})
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
to (`global_step += 1`). A test on anything else (`if args.debug:`, `if step > warmup:`)
leaves the summon on every step; nor is a
summon in an outer epoch loop, or in an evaluation loop that never steps. A summon in a
function or method of the same file that the loop calls on every step
(`ema.update(model)`, `log_weight_norm(model)`) runs on every step too (one call level).

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
  a `.backward(...)` or `.step(...)` call in the same function. A loop whose step runs in a
  function it calls (`train_step(batch)`), or a framework's loop (a Trainer callback, a
  Lightning hook), is not seen, and its summons are not flagged.
- The summon must be in the loop's function or in a function of this file that the loop
  calls directly (one call level); a summon two calls away or in another module is not
  followed.
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
            loop, call = found
            through = f" (through the call at line {report.row(call.node)})" if call is not None else ""
            what = "the root module's own parameters" if summon.value("recurse") is False else "all parameters"
            report(
                summon.node,
                "`summon_full_params` runs on every iteration of the training loop at line "
                f"{report.row(loop.node)}{through}: one extra all-gather of {what} per step; "
                "move it out of the loop, guard it to every N steps (`if step % N == 0:`), or "
                "compute from the local shards plus an `all_reduce`",
                statement=summon.site.ctx.statement,
            )
