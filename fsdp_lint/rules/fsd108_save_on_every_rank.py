"""FSD108 save-on-every-rank."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.flow import exclusive
from fsdp_lint.facts.frameworks import launched_prepares, launched_trainer_runs
from fsdp_lint.facts.fsdp_modules import fsdp_modules, names_a_model
from fsdp_lint.facts.helper_summary import argument
from fsdp_lint.facts.dataflow import calls_of, sources
from fsdp_lint.facts.helpers import helper_at, summaries
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.collectives import every_rank_collective, fsdp_training_step
from fsdp_lint.facts.ranks import mentions_rank, on_every_rank_but_one, per_rank_path, restricted_to_some_ranks
from fsdp_lint.facts.values import bind_arguments, literal_bool, literal_string
from fsdp_lint.lazy_libcst import cst
from fsdp_lint.rules.base import FIX_NEVER, Rule




class SaveOnEveryRank(Rule):
    code = "FSD108"
    name = "save-on-every-rank"
    summary = "`torch.save` / `save_pretrained` to one path on every rank of an FSDP program: the ranks overwrite each other"
    fix_availability = FIX_NEVER
    project_kinds = frozenset({"shards", "wraps", "saves"})
    markers = (
        ("save", "save_pretrained", "save_file", "save_model"),
        ("FullyShardedDataParallel", "fully_shard", "torch.distributed.fsdp"),
    )
    launch_markers = (("save", "save_pretrained", "save_file", "save_model"), ("prepare", ".train("))
    gate_facts = ("fsdp_program",)
    gate_calls = torch_api.TORCH_SAVE | torch_api.SAFETENSORS_SAVE | {"save_pretrained"}
    gate_helper_kinds = frozenset({"saves"})
    gate_anchors = ("process_group", "fsdp_api", "fsdp_wrap", "launched_prepare", "launched_trainer",
                    "collective", "backward")  # ``check``'s
    gate_sites = True  # the save is the finding
    doc = """\
## What it does
Checks, in a file that uses torch FSDP (it imports `torch.distributed.fsdp` or wraps a
module), for `torch.save(obj, path)`, `safetensors.torch.save_file(...)` and
`model.save_pretrained(path)` that run on every rank to the same path: not under a rank
test (`if rank == 0:`, `if dist.get_rank() == 0:`, `if accelerator.is_main_process:`,
`if args.local_rank in (-1, 0):`, `if trainer.is_world_process_zero():`, any `if` whose test
names a rank or main-process flag), not after an early `if rank != 0: return`, not in a
function decorated `@rank_zero_only`, and with a
path that does not contain the rank (`f"ckpt_{rank}.pt"` is per-rank and fine) and is not
a temporary file or folder the process made (`tempfile.NamedTemporaryFile().name`,
`mkstemp()`, `mkdtemp()`: unique per process).

To stay precise the rule looks only at saves in the function that sets up the distributed
run (the one that calls `init_process_group`, `FSDP(...)` or `fully_shard(...)`, or module
level code that does, or shards through a helper), or in a function that makes a collective
every rank must join on the save's path (`dist.barrier()`, `dist.all_reduce(t)` on the
default group, or a training step: a `.backward()` in a function that also calls a module an
FSDP wrap of the file reaches, directly or through the function's callers in the file, whose
gradients that backward reduces over every rank; under no rank test: every rank runs that
function, or the job hangs there first; for `torch.save` and safetensors to a file name written in that function, as in
`os.path.join(path, "client_state.pt")`, not to one its caller passes, and not
`save_pretrained`, which may itself gather, as a tensor-parallel model's does): a save
inside a helper such as
`save_checkpoint(model, path)` may be called under a rank test elsewhere, so the helper's
*call* is what is checked there. A helper of this file or of another file of the project
(found through the imports) that saves with `torch.save`/safetensors on every call (no rank
test, no early exit, a path that is not per rank in it) is flagged where that function
calls it on every rank, to the path it passes (or its own); where such a helper itself sets
up the run or works with FSDP modules (`FSDP.state_dict_type` in a checkpoint helper) and
every call of it in the file is checked so, the finding is at those calls, not also at its
save. It does not flag distributed checkpointing
(`torch.distributed.checkpoint.save`, `dcp.save`: every rank must call it),
`save_pretrained(..., is_main_process=...)` (transformers writes only where it is true),
`tokenizer.save_pretrained` / `config.save_pretrained` (small identical text files; racy in
principle, noise in practice), or saves to an in-memory buffer.

## Why is this bad?
Every rank opens the same file for writing and truncates it; whichever rank writes last
wins. When the ranks hold different data (a sharded state dict, local shards, per-rank
optimizer state) the file ends up with one rank's part only and the others' saves are lost
without an error; on shared filesystems concurrent writers also leave interleaved,
truncated files ("a corrupted binary file", "PytorchStreamReader failed reading zip
archive"). Measured (CPU/gloo, torch 2.13.0, 2 ranks, FSDP2 `model.state_dict()` saved by
both ranks to one path): the file holds rank 1's shards only; rank 0's save is lost.
With a full state dict on every rank the bytes are the same on each rank and the race only
costs every rank the memory and the write of the whole model.

## Example
```python
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def main(model, args):
    dist.init_process_group("nccl")
    fully_shard(model)
    train(model)
    torch.save(model.state_dict(), f"{args.output_dir}/model.pt")
```

## Use instead
```python
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import fully_shard


def main(model, args):
    dist.init_process_group("nccl")
    fully_shard(model)
    train(model)
    dcp.save(model.state_dict(), checkpoint_id=f"{args.output_dir}/checkpoint")
```

Or gather a full state dict on every rank (a collective) and write it on rank 0 only:
`state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
cpu_offload=True))`, then `if dist.get_rank() == 0: torch.save(state, path)`.

## Known problems
- Only saves in a function that sets up the distributed run or works with FSDP modules are
  checked (it calls `init_process_group`, `FSDP(...)`, `fully_shard(...)`, another name of
  `torch.distributed.fsdp` such as `FSDP.state_dict_type`, a helper that shards, or, in a
  file a project command starts with `accelerate launch` and an FSDP config,
  `accelerator.prepare` or a transformers/TRL `trainer.train()`: the Trainer builds its
  accelerator from that launch and shards the model) on a path the
  save can follow (not the `else` of `if isinstance(model, FSDP):`); elsewhere the rule does
  not know whether every rank runs the save, and stays quiet.
- Every doubt about ranks keeps it quiet: any `if` whose test names a rank or a
  main-process flag, a single-process branch, a one-rank decorator, an earlier early exit
  under a rank test, a function every call of which in the file stands under such a test
  (`save_checkpoint(model, path)` called only as `if rank == 0: save_checkpoint(...)`). The one exception is the other side of a test it reads as "one rank"
  (the `else:` of `if rank == 0:`, the rest of a function after `if rank == 0: return`):
  every rank but one runs that code, and it is reported when no other test narrows it.
- A path it cannot read is assumed to be the same on every rank, unless it names a rank
  (also through a function of this file that returns one, `f"{name}.{rankstr()}.pth"`) or
  comes from `tempfile`/an in-memory buffer. A save that is meant to run on every rank to a
  shared path: `# noqa: FSD108`.
- Helpers are followed in this file and in project files its imports lead to; a helper that
  saves only on some path is not counted.

## Fix safety
No automatic fix: whether to write one file from rank 0, one file per rank, or a
distributed checkpoint depends on what the state holds.

## References
- [Distributed checkpoint (`torch.distributed.checkpoint`)](https://pytorch.org/docs/stable/distributed.checkpoint.html)
- [`PreTrainedModel.save_pretrained(is_main_process=...)`](https://huggingface.co/docs/transformers/main_classes/model#transformers.PreTrainedModel.save_pretrained)
"""

    def check(self, facts, report):
        modules = fsdp_modules(facts)
        # where the function sets up the run or works with FSDP modules: a save is checked
        # when one of these can run on its path (not in a branch exclusive with it, such as
        # the ``else`` of ``if isinstance(model, FSDP)``)
        anchors: dict = {}
        plain_anchors: dict = {}
        for site in facts.calls:
            qualname = facts.qualname(site.node.func)
            if qualname in torch_api.INIT_PROCESS_GROUP or qualname in torch_api.FULLY_SHARD or torch_api.is_fsdp_api(qualname):
                anchors.setdefault(id(site.ctx.function), []).append(site.ctx)
            elif every_rank_collective(facts, site) and not restricted_to_some_ranks(facts, site.ctx):
                # ``dist.barrier()`` on the default group: every rank runs this function (for
                # plain writes only: a ``save_pretrained`` there may itself gather, as a
                # tensor-parallel model's does, and must then stay on every rank)
                plain_anchors.setdefault(id(site.ctx.function), []).append((site.ctx, site.node))
            elif site.attr == "backward" and fsdp_training_step(facts, site.ctx.function) is site.node:
                # the backward of an FSDP model's loss reduces gradients over every rank
                plain_anchors.setdefault(id(site.ctx.function), []).append((site.ctx, site.node))
        for wrap in modules.fsdp2_wraps:  # also a helper that shards, of this file or the project's
            anchors.setdefault(id(wrap.site.ctx.function), []).append(wrap.site.ctx)
        # ``accelerate launch`` with FSDP: ``prepare`` shards, and so does an HF Trainer's ``train()``
        prepares = launched_prepares(facts) + launched_trainer_runs(facts)
        for site in prepares:
            anchors.setdefault(id(site.ctx.function), []).append(site.ctx)
        if not (anchors or plain_anchors) or not (facts.imports.imports_from(torch_api.FSDP_PACKAGE) or modules.wraps
                                                  or modules.fsdp2_wraps or prepares):
            return
        wrapped = set(modules.fsdp1) | set(modules.fsdp2)

        for site in facts.calls:
            key = id(site.ctx.function)
            anchored = any(not exclusive(ctx, site.ctx) for ctx in anchors.get(key, ()))
            joined = None  # the collective that shows every rank runs this function
            if not anchored and site.attr != "save_pretrained":
                joined = next((node for ctx, node in plain_anchors.get(key, ()) if not exclusive(ctx, site.ctx)), None)
            if not anchored and joined is None:
                continue
            qualname = facts.qualname(site.node.func)
            path = None
            what = None
            if qualname in torch_api.TORCH_SAVE or qualname in torch_api.SAFETENSORS_SAVE:
                bound, _ = bind_arguments(site.node.args, ("obj", "f"))
                path = bound.get("f") or bound.get("filename")
                path = path.value if path is not None else None
                what = f"`{dotted_name(site.node.func)}`"
            elif site.attr == "save_pretrained" and isinstance(site.node.func, cst.Attribute):
                receiver = dotted_name(site.node.func.value)
                if receiver is None or not names_a_model(receiver, wrapped):
                    continue
                bound, opaque = bind_arguments(site.node.args, ("save_directory",))
                main = bound.get("is_main_process")
                if opaque or (main is not None and literal_bool(main.value) is not True):
                    continue
                path = bound.get("save_directory")
                path = path.value if path is not None else None
                what = f"`{receiver}.save_pretrained`"
            elif site.attr is not None:
                # a helper (of this file or the project) that saves on every call
                # (``facts.helpers``): to the path its caller passes, or to its own, not per rank
                helper = helper_at(facts, site)
                if helper is None or not helper.saves:
                    continue
                path = argument(helper, site.node, helper.save_path) if helper.save_path is not None else site.node
                what = (f"`{facts.module.code_for_node(site.node.func)}` (it saves with {helper.saves} at "
                        f"{helper.place(helper.save_at, report.row)})")
            if path is None:
                continue
            if path is not site.node and per_rank_path(facts, site, path):
                continue
            if not anchored and not _file_named_here(facts, site, path):
                continue  # a helper writing the file its caller names: the caller's path decides
            others = on_every_rank_but_one(facts, site.ctx)
            if restricted_to_some_ranks(facts, site.ctx, callers=True) and others is None:
                continue  # a rank test, a single-process branch, a one-rank decorator (facts.ranks)
            if others is None and self._checked_at_its_calls(facts, site, anchors):
                continue
            function = site.ctx.function
            if function is not None and any(mentions_rank(d.decorator) for d in function.decorators):
                continue  # ``@rank_zero_only`` (Lightning) runs the function on rank 0 only
            if others is None and self._after_early_exit(facts, site, report):
                continue
            if prepares and not (modules.wraps or modules.fsdp2_wraps) and facts.launch is not None:
                what += f" (FSDP is turned on by {facts.launch.source})"
            if joined is not None and not anchored:
                what += (f" (its function calls `{facts.module.code_for_node(joined.func)}` at line "
                         f"{report.row(joined)}, which every rank must join)")
            runs = "runs on every rank and every rank writes" if others is None else (
                f"runs on every rank but one (the other side of the rank test at line {report.row(others)}) and "
                "those ranks write")
            report(
                site.node,
                f"{what} {runs} the same path: the last writer wins and the "
                "other ranks' data is lost (or the file is corrupted); save under a rank test, put the rank in "
                "the path, or use torch.distributed.checkpoint",
                statement=site.ctx.statement,
            )

    @staticmethod
    def _checked_at_its_calls(facts, site, anchors) -> bool:
        """The save is what its function, a helper of this file that saves on every call,
        does (``facts.helpers``), and every call of that function in the file stands where
        this rule checks calls (a function with an anchor on its path): each call is then
        reported where it stands, where the fix goes, and the save is not reported again."""
        function = site.ctx.function
        if function is None:
            return False
        helper = summaries(facts).get(function.name.value)
        if helper is None or helper.save_at is not site.node:
            return False
        calls = [facts.call_site(call) for call in calls_of(facts, function)]
        return bool(calls) and all(
            call is not None and any(not exclusive(ctx, call.ctx) for ctx in anchors.get(id(call.ctx.function), ()))
            for call in calls)

    @staticmethod
    def _after_early_exit(facts, site, report) -> bool:
        """An earlier ``if rank != 0: return`` (any rank test ending in return/raise/exit) in the function."""

        body = site.ctx.function.body.body if site.ctx.function is not None else facts.module.body
        row = report.row(site.node)
        for statement in body:
            if report.row(statement) >= row:
                break
            if not isinstance(statement, cst.If) or not mentions_rank(statement.test):
                continue
            last = statement.body.body[-1] if statement.body.body else None
            if isinstance(last, cst.SimpleStatementLine) and last.body:
                final = last.body[-1]
                if isinstance(final, (cst.Return, cst.Raise)):
                    return True
                if isinstance(final, cst.Expr) and isinstance(final.value, cst.Call):
                    callee = (dotted_name_of(final.value.func) or "").rsplit(".", 1)[-1]
                    if callee in ("exit", "_exit"):
                        return True
        return False


def _file_named_here(facts, site, path, depth: int = 0) -> bool:
    """The file name the save writes is written in its function: the whole path, the last
    argument of ``os.path.join``, or the right side of a ``/`` is a string (or f-string),
    also through the names it is bound to there; not a parameter its caller passes."""
    if isinstance(path, cst.Call) and (dotted_name(path.func) or "").endswith("path.join") and path.args:
        path = path.args[-1].value
    elif isinstance(path, cst.BinaryOperation) and isinstance(path.operator, cst.Divide):
        path = path.right
    if literal_string(path) is not None or isinstance(path, cst.FormattedString):
        return True
    if depth >= 3 or dotted_name(path) is None:
        return False
    found = sources(facts, path, site.ctx, site.order)
    return found.complete and bool(found.found) and all(
        s.expr is not path and _file_named_here(facts, site, s.expr, depth + 1) for s in found.found)


def dotted_name_of(expr):
    return dotted_name(expr)
