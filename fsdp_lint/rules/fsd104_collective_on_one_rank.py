"""FSD104 collective-on-one-rank."""

from __future__ import annotations

import re

from fsdp_lint.facts.collectives import DIST_COLLECTIVES, GATHER_ADVICE, balanced, framework_call, torch_collective
from fsdp_lint.facts.frameworks import (
    FABRIC_CALL_TEXT, FABRIC_METHOD_TEXT, SHOWS_FSDP_TEXT, WITH_FSDP_METHODS, collective_method_needs,
    framework_collective,
)
from fsdp_lint.facts.helpers import collective_helper
from fsdp_lint.facts.processes import in_single_process_branch
from fsdp_lint.facts.ranks import one_rank_branch, rank_guard
from fsdp_lint.rules.base import FIX_NEVER, Rule


class CollectiveOnOneRank(Rule):
    code = "FSD104"
    name = "collective-on-one-rank"
    summary = (
        "a collective (full state dict or its load, `summon_full_params`, a forward of a model sharded into nested units, `torch.distributed`, accelerate/Lightning/transformers save and gather calls) called only under a rank test: hang"
    )
    fix_availability = FIX_NEVER
    # torch.distributed collectives count only in a file that uses FSDP; framework calls
    # that every rank must make are the frameworks' own list (accelerate's where an
    # accelerator shows, the FSDP-only ones where FSDP shows; ``frameworks``), Fabric's are
    # named by their receiver; torch's ``get_state_dict`` comes from
    # ``torch.distributed.checkpoint``
    marker_needs = {
        **collective_method_needs(),
        "get_state_dict": re.compile(f"{SHOWS_FSDP_TEXT.pattern}|checkpoint"),
        "fabric": FABRIC_CALL_TEXT,
        "Fabric": FABRIC_METHOD_TEXT,
    }
    markers = (
        (
            "FullyShardedDataParallel", "fully_shard", "get_model_state_dict", "get_optimizer_state_dict",
            "summon_full_params", "optim_state_dict", "full_optim_state_dict", "gather_cpu_state_dict",
            "get_full_optimizer_state_dict", "get_full_model_state_dict", *sorted(marker_needs),
        ),
        ("rank", "RANK", "main_process", "is_global_zero", "is_master", "process_zero", "should_save",
         "process_index", "is_main", "master_only"),
    )
    seed_names = DIST_COLLECTIVES
    project_kinds = frozenset({"shards", "wraps", "collective"})
    # a launch configuration turns FSDP on for the file
    needs_met_by_launch = WITH_FSDP_METHODS
    doc = """\
## What it does
Checks for collectives reached on one rank only. Rank tests: `rank == 0` (or any other
rank, `rank == 1`; `local_rank == -1` means one process, no rank), `not rank`, `if rank:` (its `else`),
`dist.get_rank() == 0`, `args.local_rank in (-1, 0)`, `local_rank <= 0`,
`int(os.environ["RANK"]) == 0`, `accelerator.is_main_process`, `trainer.is_global_zero`,
`trainer.is_world_process_zero()`, `fabric.global_rank == 0`, `args.should_save`, a
comparison of a variable that holds the process's rank whatever its name (`ddp_rank =
int(os.environ["RANK"])`, then `ddp_rank == 0`; a group's or mesh dimension's rank, such as
`mesh.get_local_rank("tp")`, is not one), a variable
or attribute assigned one (`is_main = dist.get_rank() == 0`, `self._is_rank_zero = ...`), a
function of this file returning one (a property or method of the file's own class too:
`self.should_save` is what that property returns, whatever its name says), the rest of a
block after `if rank != 0: return`,
functions decorated with `@rank_zero_only` / `@accelerator.on_main_process`, and a test of a
value that exists on one rank only (`evaluator = build() if rank == 0 else None`, then `if
evaluator is not None:`), or a comparison with a value every rank binds and one rank binds
again (`best_val_loss = float("inf")`, then, in the epoch loop, `if rank == 0 and loss <
best_val_loss: best_val_loss = loss`): after that rank's update the ranks hold different
values, so `if loss < best_val_loss:` sends them down different branches, and its body counts
as the one-rank side. A parameter read on its own holds what its function's callers pass:
where every call of the function (in this file, or in another file of the project, read
through two levels of importing files) passes a rank test (`save(model, is_main=rank == 0)`) or a value made on one rank, a test of the
parameter is a rank test too; so is a test of `self.eval_fn` where `__init__` stores its
`eval_fn` parameter and the launcher builds that function on the main process only. One
caller passing a value every rank has, or hiding it behind `**kwargs`, keeps it unknown.
A main-process flag's name (`should_save`) counts where the file does not show its value; a
local variable of that name computed from the step is no rank test. A rank read from the
environment and compared as text (`rank = os.environ["RANK"]`, then `if rank == 0:`) matches
on no rank: that branch never runs, and nothing in it is flagged. Code on a
branch that runs only when the program is not distributed (`else:` of `if world_size > 1:`,
of `if dist.is_initialized():`) has no peer to wait for and is not flagged.
Collectives:
- torch FSDP: `summon_full_params`; `state_dict()` of a module that is FSDP1-wrapped there
  (not inside `with summon_full_params(model)` of that module, entered by every rank: its
  parameters are gathered already and the state dict then starts no collective, measured
  on CPU/gloo, torch 2.13.0); `load_state_dict(...)` into a module that is FSDP1-wrapped
  there (FSDP1's full and sharded pre-load hooks unshard the parameters: an all-gather,
  `torch/distributed/fsdp/_state_dict_utils.py`; a plain module loaded on rank 0 before the
  wrap, as with `sync_module_states=True`, is not). A module built where the file cannot
  see (another module's helper, `self.model` set by a caller) counts as FSDP1 where the
  code sets that module's state-dict type: inside a `with FSDP.state_dict_type(m, ...)`
  block of it, or anywhere in the same class for `self.model` (in the same function for a
  name), where neither stands under a type test of it (`if isinstance(self.model, FSDP):`):
  the file says so; and a
  parameter of a top-level function counts as FSDP1 where another file of the project calls
  that function with an FSDP1 module it wraps (`save_checkpoint(model, ...)` from the entry
  script);
  `get_model_state_dict` / `get_optimizer_state_dict` / `get_state_dict`;
  `FSDP.optim_state_dict` / `full_optim_state_dict`;
- the forward `model(x)` of a model sharded into FSDP units that free their parameters
  after each forward: an FSDP1 root given an `auto_wrap_policy`, with `FULL_SHARD` (the
  default) or `HYBRID_SHARD` among the strategies it may have (also its inner module,
  `model.module(x)`), or a model sharded with `fully_shard` in a file that also shards
  layers with the default `reshard_after_forward`; for that FSDP1 root also a method of the
  model's own class (of this file, or of another project file its imports name) that runs
  a submodule holding the nested units (`for block in self.blocks: block(x)`,
  `self.encoder(x)`, `self(x)`): `model.embed_images(probe)`. An evaluation forward on rank 0 runs
  all-gathers that the other ranks' next step does not match. A model whose root is its only
  FSDP unit is not flagged: the root keeps its parameters gathered after a forward, and
  the one rank's all-gather pairs with the other ranks' next one (`SHARD_GRAD_OP` keeps
  them until a backward as well), measured on CPU/gloo, torch 2.13.0. A forward of the
  same module on the other ranks' side of the rank test (rank 0 profiles its step, the
  others run it plainly) balances it, pair by pair as for barriers. In a helper, a
  forward inside a `for` loop counts as run (an evaluation loop over its batches:
  `if master_process: estimate_loss()`);
- DTensor: `.full_tensor()` and `.redistribute(...)` of an FSDP2 gradient norm
  (`clip_grad_norm_`/`get_total_norm` over a `fully_shard`-ed module's parameters) or of a
  parameter in a loop over them (`facts.dtensors`): each is a collective over the mesh;
- `torch.distributed` collectives and barriers on the default group, in a file that wraps
  a model with FSDP itself or gathers one with `summon_full_params` (a helper module handed
  the model by its caller) (a `group=` restricts them; a barrier matched by the same
  barrier on the other ranks' path, as in the download idiom, is balanced, pair by pair:
  by the `else` of the same rank test, or, in order, by another rank test's branch for the
  other ranks; a balanced pair earlier in the function leaves a later one-rank barrier
  reported);
- accelerate (1.15.0): `wait_for_everyone`, `gather`, `gather_for_metrics`, `reduce`,
  `pad_across_processes` always; `get_state_dict`, `save_model`, `save_state`, `load_state`
  when the file configures FSDP, names the FSDP mode it is written for
  (`if accelerator.distributed_type == DistributedType.FSDP:`, where the switch is in a
  launch configuration the linter does not see) or the project launches it with FSDP (an
  accelerate config with `distributed_type: FSDP`, `--use_fsdp`; see the README: they
  gather only under FSDP or ZeRO-3);
- Lightning (2.6.6): `fabric.save`, `fabric.load`, `fabric.barrier` (each ends in a barrier
  in every multi-process strategy); the Trainer's `trainer.save_checkpoint` (a full state
  dict under FSDP, then a barrier) when the file configures FSDP (`strategy="fsdp"`,
  `FSDPStrategy`) or the project launches it with FSDP (a LightningCLI config passed with
  `--config`: `trainer: strategy: fsdp` or `class_path: ...FSDPStrategy`), not in every
  DeepSpeed or DDP file;
- transformers (5.24.0): `trainer.save_model()`, and `trainer.evaluate()` and
  `trainer.predict()` (the sharded model's forward and `gather_for_metrics` on every batch)
  when the file configures FSDP (`fsdp=`,
  also in a dict built before `TrainingArguments(**args)` or as the default of the `fsdp`
  field of a `TrainingArguments` subclass; `fsdp_config=` alone turns
  nothing on) or the project launches it with `--fsdp` (with its `--fsdp_config` JSON);
- torchtune (0.6.1): `training.gather_cpu_state_dict`, `training.get_full_optimizer_state_dict`
  (`full_tensor()` and a barrier for every parameter).
A helper that runs one of these on every call (under no `if`, loop or short-circuit in its
own body), of this file or of another file of the project found through the imports
(`from trainer.checkpoint import save_ckpt`, relative imports, `src/` layouts, a package's
`__init__` re-export), is a collective where it is called: `if rank == 0:
save_ckpt(model, path)` where `save_ckpt` calls `model.state_dict()` on an FSDP1 module, or
`print(count_params(model))` where `count_params` enters `summon_full_params`; the message
names the helper's file and line. A method called as `self.m(...)` from a method of its own
class is such a helper too (`if self.is_main_process: self._save_training_state()`, where
the method calls a checkpoint helper that gathers). A call of the same helper on the other
ranks' side of the rank test (`if is_node_leader: save_checkpoint(own_path, ...)` `else:
save_checkpoint(path, ...)`) balances it, pair by pair as for barriers: every rank runs the
helper's collectives. A helper that gathers only on some path is not known to,
and is left alone, except under a type test of the model it is passed: `if isinstance(model,
FSDP):`, also through a predicate of the file (`def is_fsdp(m): return isinstance(m, FSDP)`,
then `if is_fsdp(model):`), gathers whenever the caller passes an FSDP module.
A gathering call on a model that is not sharded yet (rank 0 reads its model before
`fully_shard`/`FSDP` wraps it later in the same function) is not a collective. Saving
(`torch.save`, `accelerator.save`, which guards itself) under the rank test is fine.

## Why is this bad?
Gathering a full state dict or the full parameters is an all-gather in which every rank
must take part. Called on one rank, that rank waits for the others forever: the job hangs
until the backend timeout (30 minutes by default), or fails later in a mismatched
collective (measured on CPU/gloo, torch 2.13.0).

The verifier shows where each rank waits: every rank's stack is dumped (`faulthandler`) and
read back once the job is stuck (on CPU, when no rank has progressed for a few seconds and
each waits in `torch.distributed`; elsewhere at its timeout). The hang need not be where the
rank test is: on CPU/gloo a `state_dict()` on rank 0 can pair its all-gathers with the other
rank's next forward, and the ranks then block in different collectives of the training step.

The framework forms are verified by their own scenarios, each the framework's call under
the rank test: `FSD104 (fabric-fsdp2)` (`fabric.save` on global rank 0 with
`ModelParallelStrategy`: rank 0 blocks in the path's broadcast inside `fabric.save`, the
other rank in its next forward; measured on CPU/gloo, torch 2.13.0, Lightning 2.6.6),
`FSD104 (load)` (`model.load_state_dict(...)` into an FSDP1 module on rank 0 only),
`FSD104 (forward)` and `FSD104 (forward-fsdp2)` (an evaluation forward on rank 0 only of a
model whose layers are FSDP1 units, or are sharded with `fully_shard`: rank 0 blocks in an
all-gather of its next forward, the other rank in the reduce-scatter of its backward),
`FSD104 (fabric)` (`fabric.save` with `strategy="fsdp"`) and `FSD104 (accelerate)`
(`accelerator.get_state_dict(model)` under FSDP1 on the main process). The last two run on
GPUs only: Lightning refuses `strategy="fsdp"` off GPU (`fabric/connector.py` l. 433-439) and
accelerate enables FSDP only over an accelerator (`state.py` l. 986-1013).

## Example
```python
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
if dist.get_rank() == 0:
    torch.save(model.state_dict(), "model.pt")
```

## Use instead
```python
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net)
state = model.state_dict()
if dist.get_rank() == 0:
    torch.save(state, "model.pt")
```

The message's advice fits the call: a gathering call (state dict, `summon_full_params`,
`all_gather`, accelerate's `get_state_dict`/`gather`) is to run on every rank with only the
save under the rank test; a barrier, `all_reduce`, `broadcast` or framework barrier has to
move out of the rank test.

## Known problems
- Rank tests are those `facts.ranks` recognises (listed above); a one-rank branch decided by
  anything else (a flag with another name whose value the file does not show, a test made in
  another file) is not seen, and the collective under it is not flagged.
- `model.state_dict()` and `model.load_state_dict(...)` count as a gather when the model is
  FSDP1-wrapped there; when its origin cannot be followed, only inside a
  `with FSDP.state_dict_type(model, ...)` block of that same module, or when the same name
  holds an FSDP1 module in the file and the value is not returned by a call the file cannot
  see into (`Origins.opaque`).
- `model.module.state_dict()` (the inner module of an FSDP1 root, also through a name
  bound to it) counts as a gather only when the root is given an `auto_wrap_policy`: its
  nested FSDP units gather; without them the inner module's state dict gathers nothing (it
  holds this rank's views, wrong but no hang). Nested units made another way (`wrap()`
  under `enable_wrap`, FSDP modules built inside the model) are not seen. A
  conditional expression is tied to the `if` that wraps where both tests are read: in
  `raw = model.module if ddp else model` after `if ddp: model = FSDP(model)`, the `else`
  arm's `model` is the plain one.
- A comparison with a value one rank updates makes only its body the one-rank side: a
  collective in its `else` is not flagged, though there too only some ranks call it. A value
  one rank updates and then sends to the others (`best = broadcast(best)`, bound on every
  rank after the update, or `dist.broadcast(best, src=0)` / `dist.all_reduce(best)` outside
  any rank test in the same function, which write it in place) is the same everywhere and no
  rank test.
- Two branches count as exclusive only where their `if` tests are read (`facts.conditions`:
  names bound once, comparisons with literals); a flag whose value the file does not show
  keeps both branches possible.
- `torch.distributed` collectives count only in a file that wraps a model with FSDP itself
  or calls `summon_full_params`;
  accelerate's `save_model`/`save_state`/`load_state`/`get_state_dict` and transformers'
  `save_model` only where the file configures FSDP or the project's launch turns it on (an
  accelerate config, `--fsdp`, `[tool.fsdp-lint] launch`).
- Helpers are followed in this file and in project files its imports lead to, and only
  where they run a collective on every call; an installed package's function is not.
  A helper of another file that only runs a forward is not summarized (the project index
  reads files that name a gathering call).
- A forward counts through `model(...)`, or through a method of the model's class where
  that class is found (this file or a project file); a library model's methods
  (`model.generate(...)` of a transformers model) are not followed, nor a model wrapped by
  accelerate or Lightning, or a strategy the file cannot read (`sharding_strategy=cfg.strategy`).

## Fix safety
No automatic fix: the gathering call has to move before the rank test.

## References
- accelerate 1.15.0 `accelerator.py` (`get_state_dict` l. 4043-4113, `save_model` l. 3530,
  `save_state` l. 3701-3720), `state.py` l. 412 (`wait_for_everyone`)
- lightning 2.6.6 `fabric/fabric.py` l. 829-867 ("This method must be called on all
  processes!"), `pytorch/trainer/trainer.py` l. 1465
- transformers 5.24.0 `trainer.py` l. 4085-4137 (`save_model`), l. 2805-3026 (`evaluate`,
  `predict`, `evaluation_loop`)
- [FSDP state dicts](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.state_dict_type)
"""

    def check(self, facts, report):
        for site in facts.calls:
            if not site.ctx.guards and site.ctx.function is None:
                continue
            guard = rank_guard(facts, site.ctx)  # (first: most calls stand under no rank test)
            if guard is None or in_single_process_branch(site.ctx):
                continue  # no rank test; or one process, with no peer to wait for
            collective = torch_collective(facts, site)
            if collective is None:
                words = framework_collective(facts, site)
                collective = framework_call(words, site.attr) if words else None
            helper = None
            if collective is None:
                helper = collective_helper(facts, site)
                if helper is None:
                    continue
            if collective is not None and collective.balanced_by and balanced(facts, site, collective.balanced_by):
                continue
            test = getattr(guard, "node", guard)  # an ``if``'s Guard, or a one-rank decorator itself
            if helper is not None:
                name = facts.module.code_for_node(site.node.func)
                what = (f"`{name}` runs {helper.collective} at {helper.place(helper.collective_at, report.row)} and "
                        "is")
                advice = (f"call `{name}` on every rank and keep only what uses its result under the rank test"
                          if helper.advice == GATHER_ADVICE else helper.advice)
            else:
                what, advice = collective.what, collective.advice
            report(
                site.node,
                f"{what} called only under the rank test at line {report.row(test)}{_decided_by(facts, test)}: "
                f"the other ranks never join and the job hangs; {advice}",
                statement=site.ctx.statement,
            )


def _decided_by(facts, test) -> str:
    """The test's text where it is a rank test only through how its values are made
    (``if self.eval_fn is not None:``, the function built on the main process): what the
    message must show for the reader to see why."""
    expr = getattr(test, "test", None)
    if expr is None or one_rank_branch(expr) is not None:
        return ""
    code = " ".join(facts.module.code_for_node(expr).split())
    return f" (`{code if len(code) <= 60 else code[:57] + '...'}`, whose value depends on the rank)"
