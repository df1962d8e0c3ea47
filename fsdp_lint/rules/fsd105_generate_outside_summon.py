"""FSD105 generate-outside-summon."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.forward_methods import ENTRY_POINTS, model_class_method
from fsdp_lint.facts.fsdp_modules import Origin, fsdp_modules, origins_with_callers, wrap_config
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.rebinding import rebound_between
from fsdp_lint.facts.summon import maybe_in_summon, root_left_gathered
from fsdp_lint.facts.values import UNKNOWN
from fsdp_lint.lazy_libcst import cst
from fsdp_lint.rules.base import FIX_NEVER, Rule


# Attributes that hand back the module FSDP wraps.
class GenerateOutsideSummon(Rule):
    code = "FSD105"
    name = "generate-outside-summon"
    summary = "`model.generate(...)` (a non-forward entry point) on an FSDP1 model outside `summon_full_params`: sharded weights"
    fix_availability = FIX_NEVER
    # (an entry point, or a method of a class of the file or of another project file: the
    # gate's ``gate_class_methods``)
    markers = (("FullyShardedDataParallel",),)
    gate_facts = ("fsdp1_model",)
    gate_calls = ENTRY_POINTS
    gate_class_methods = True
    gate_sites = True
    doc = """\
## What it does
Checks for `m.generate(...)` and the other entry points that run a model's forward from
one of its own methods (`encode_image`, `encode_text`, `get_image_features`,
`get_text_features`, `encode`, `decode`, `sample`), also through `m.module`, where `m` is
wrapped in this file by FSDP1 `FSDP(...)` (or `wrap(m)` under `with
enable_wrap(wrapper_cls=FSDP, ...)`) with a sharded strategy, outside a
`summon_full_params` block. Also a method of the model's own class (`m.forward_train(...)`,
`m.flow_step(...)`), where `m` is built from a class of this file or of another file of the
project (`FSDP(GraspModel(cfg), ...)` with `GraspModel` imported from `models/`), and that
method computes with a weight the class holds itself: it calls `self.head(...)` or reads
`self.pos_embed`, where `self.head = nn.Linear(...)` (a `torch.nn` layer with weights) or
`self.pos_embed = nn.Parameter(...)`, also through the class's other methods and its
`forward` (handing on `self.head.parameters()` computes nothing and does not count). Methods `torch.nn.Module` defines (`train`, `parameters`, `state_dict`, ...) run
the wrapper's own and are never reported. Not for FSDP2 (`fully_shard`), which has no summon (FSD114
covers its entry points), nor for `NO_SHARD`. A strategy held in a variable is not
judged. A summon entered less directly counts as one: a context held in a name (`ctx =
FSDP.summon_full_params(m, ...); with ctx:`), `stack.enter_context(...)` in an enclosing
`ExitStack` block, a `@contextmanager` helper of this file that enters one.

## Why is this bad?
`FullyShardedDataParallel.__getattr__` forwards a missing attribute to the wrapped module
(torch/distributed/fsdp/fully_sharded_data_parallel.py), so `m.generate` is the inner
model's method, and it calls the inner model's `forward` directly. FSDP1 gathers the
parameters that no nested FSDP unit owns (embeddings, the LM head, final norms: the root's
own flat parameter) only in the root's `forward`. Outside it they are still sharded, and
every rank fails (CPU/gloo, torch 2.13.0, measured by the scenario after a training step):
- `use_orig_params=True`: `RuntimeError: 'weight' must be 2-D` (an `nn.Embedding` weight
  is a 1-D shard of the flat parameter);
- `use_orig_params=False`: `RuntimeError: setStorage: sizes [16], strides [1], storage
  offset 0, and itemsize 4 requiring a storage size of 64 are out of bounds for storage of
  size 0` (the freed unsharded flat parameter).
A method of the model's own class that uses such a weight fails the same way; with the
default `use_orig_params=False` after an optimizer step, in a forward with autograd on:
`RuntimeError: Output 0 of View is a view and its base or another view of its base has been
modified inplace` (the root's weights are views of its flat parameter; `verify FSD105 --form
method`).
Right after a root forward without backward it can run (measured), because FSDP1 does not
free the root's parameters after its forward (`_post_forward_reshard` in
torch/distributed/fsdp/_runtime_utils.py): that is why the failure looks intermittent.
`NO_SHARD` ran clean in the same measurement.

## Example
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(model, auto_wrap_policy=policy, use_orig_params=True)
train(model)
output_ids = model.generate(input_ids, max_new_tokens=64)
```

## Use instead
```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(model, auto_wrap_policy=policy, use_orig_params=True)
train(model)
with FSDP.summon_full_params(model, writeback=False, recurse=False):
    output_ids = model.generate(input_ids, max_new_tokens=64)
```

`recurse=False` gathers only the root's own parameters; the nested FSDP units gather theirs
in their own forwards. FSDP2 (`fully_shard`) has no such block: register the method with
`register_fsdp_forward_method` (FSD114).

## Known problems
- The receiver must be an FSDP1 wrap of this file that reaches the call on some path (the
  value flow: re-bindings, branches, a helper's parameter through its callers in the file,
  one level), with a strategy the rule can read, one of whose possible values shards. Where
  the flow cannot follow the receiver, for a plain name the latest wrap before the call in
  the same function counts, and for an attribute (`self.model`) any wrap of it in the file.
  A model wrapped in another file or a strategy it cannot read (an unreadable `**cfg`, an
  accelerate config) is not flagged; a parameter annotated `FullyShardedDataParallel` is
  assumed to use the default `FULL_SHARD`.
- A method of the model's own class counts only where the class is found (this file, or a
  project file its imports name) and the method is shown to use a weight the class builds
  itself as a `torch.nn` layer or `nn.Parameter`: an auto-wrap policy leaves those in the
  root's unit. A method that calls only submodules of the model's own classes
  (`self.encoder(...)`, which a policy may wrap as a nested unit gathering in its own
  forward) is not reported, nor one of a class from another library.
- Any doubt about a summon counts as inside one (a `with` on a name, an `ExitStack`, a
  `@contextmanager` helper of the file, a caller that gathers): such a call is not flagged.
- A root forward `m(...)` that may run earlier in the same function with no `.backward()`
  after it (an evaluation loss loop before sampling) leaves the root's parameters gathered
  (see above), so such a call is not flagged, even where that forward runs on some paths
  only (its loop may be empty).

## Fix safety
No automatic fix: the block gathers the root's parameters on every rank (memory), and
every rank has to enter it (a collective).

## References
- torch/distributed/fsdp/fully_sharded_data_parallel.py: `__getattr__` forwards to
  `_fsdp_wrapped_module`; `forward` runs `_root_pre_forward` / `_pre_forward_unshard`.
- [`FullyShardedDataParallel.summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
- [pytorch/pytorch#124019](https://github.com/pytorch/pytorch/issues/124019): `RuntimeError: 'weight' must be 2-D`
  from `ppo_trainer.model.generate(...)` on an FSDP model (TRL, PEFT)
"""

    def check(self, facts, report):
        modules = fsdp_modules(facts)
        # methods of the file's classes that FSDP1's ``__getattr__`` hands over from the inner module
        own_methods = {name for name, infos in facts.functions.items()
                       if any(info.class_def is not None for info in infos)} - torch_api.NN_MODULE_METHODS
        for site in facts.calls:
            entry = site.attr in ENTRY_POINTS
            # (a method of a class of another project file: asked of the project index below)
            method = site.attr in own_methods or facts.project is not None and site.attr not in torch_api.NN_MODULE_METHODS
            if not (entry or method) or not isinstance(site.node.func, cst.Attribute):
                continue
            receiver = dotted_name(site.node.func.value)
            if receiver is None:
                continue
            owner = receiver
            for inner in torch_api.FSDP1_INNER_MODULE:
                if owner.endswith("." + inner):
                    owner = owner[: -len(inner) - 1]
                    break
            found = origins_with_callers(facts, site.node.func.value, site.ctx, site.order)
            followed = found.fsdp1 + found.inner
            if followed or found.fsdp2 or found.complete:
                # the value flow decides: an FSDP1 wrap with a sharded strategy reaches the
                # call on some path (also through the callers of a helper taking the model)
                wraps = [origin for origin in followed if _sharded(facts, origin.wrap)]
                if not wraps:
                    continue
            else:
                wrap = self._wrap_in_scope(facts, modules, owner, site)
                if wrap is None or (wrap is not _ANNOTATED and not _sharded(facts, wrap)):
                    continue
                if wrap is not _ANNOTATED and rebound_between(facts, owner, wrap.site, site):
                    continue
                wraps = [Origin(wrap)] if wrap is not _ANNOTATED else []
            uses = None
            if not entry:  # a method of the model's class: only one shown to use the root's own weights
                uses = next((u for u in (_own_weight_used(facts, origin, site.attr) for origin in wraps) if u), None)
                if uses is None:
                    continue
            if maybe_in_summon(facts, site, owner) or root_left_gathered(facts, site, owner):
                continue
            runs = "the inner model's forward" if uses is None else \
                f"{uses[0]}, which computes with `{uses[1]}`,"
            report(
                site.node,
                f"`{receiver}.{site.attr}(...)` runs {runs} without FSDP's root forward: the "
                f"root parameters of `{owner}` stay sharded ('weight' must be 2-D); call it inside "
                f"`with FSDP.summon_full_params({owner}, writeback=False, recurse=False):`",
                statement=site.ctx.statement,
            )

    @staticmethod
    def _wrap_in_scope(facts, modules, owner, site):
        """The FSDP1 wrap that ``owner`` holds at ``site``: for a plain name, the latest wrap
        before it in the same function; for an attribute (``self.model``), any wrap of it."""

        if "." in owner:
            wraps = [w for w in modules.wraps if w.target == owner]
            sharded2 = any(owner in (w.target, w.wrapped) for w in modules.fsdp2_wraps)
            return wraps[-1] if wraps and not sharded2 else None
        same = [
            w for w in (*modules.wraps, *modules.fsdp2_wraps)
            if owner in (w.target, w.wrapped) and w.site.ctx.function is site.ctx.function
            and w.site.order < site.order
        ]
        if same:
            latest = max(same, key=lambda w: w.site.order)
            return None if latest.fsdp2 or latest.target != owner else latest
        if any(w.target == owner for w in modules.wraps if w.site.ctx.function is site.ctx.function):
            return None  # wrapped only after this call
        hints = facts.annotated.get(owner, ())
        if any(facts.qualname(h) in torch_api.FSDP_CLASS for h in hints):
            return _ANNOTATED
        return None


def _own_weight_used(facts, origin, name: str):
    """(```Class.method```, ``self.X``) when the module ``origin`` wraps is built from a class
    of this file, or of another project file, whose method ``name`` computes with a weight
    the class holds itself (``forward_methods.model_class_method``): on the FSDP1 root that
    weight is the root's own."""
    found = model_class_method(facts, origin, name)
    return (found["label"], found["weight"]) if found is not None and found["weight"] else None


def _sharded(facts, wrap) -> bool:
    """The construction's strategy is visible and one of the strategies it may have shards
    (``NO_SHARD`` gathers nothing; ``{"FULL_SHARD": ..., "NO_SHARD": ...}[cfg.strategy]``
    shards under one configuration, as FSD102 reads it)."""
    sharding = wrap_config(facts, Origin(wrap)).sharding
    return sharding is not UNKNOWN and bool(sharding - {"NO_SHARD"})


class _Annotated:
    """A name annotated as ``FullyShardedDataParallel`` (a parameter): strategy unknown
    in this file, FSDP's default (FULL_SHARD) assumed."""

    sharding_strategy = "FULL_SHARD"


_ANNOTATED = _Annotated()
