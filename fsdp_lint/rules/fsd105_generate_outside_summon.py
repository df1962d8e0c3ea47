"""FSD105 generate-outside-summon."""

from __future__ import annotations

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.forward_methods import ENTRY_POINTS
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
    markers = (tuple(sorted(ENTRY_POINTS)), ("FullyShardedDataParallel",))
    gate_facts = ("fsdp1_model",)
    gate_calls = ENTRY_POINTS
    gate_sites = True
    doc = """\
## What it does
Checks for `m.generate(...)` and the other entry points that run a model's forward from
one of its own methods (`encode_image`, `encode_text`, `get_image_features`,
`get_text_features`, `encode`, `decode`, `sample`), also through `m.module`, where `m` is
wrapped in this file by FSDP1 `FSDP(...)` (or `wrap(m)` under `with
enable_wrap(wrapper_cls=FSDP, ...)`) with a sharded strategy, outside a
`summon_full_params` block. Not for FSDP2 (`fully_shard`), which has no summon (FSD114
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
- A method of the model's own that runs its forward under another name (`forward_train`,
  `forward_encoder`) is not an entry point here: whether it reaches parameters the root
  holds (and not only nested FSDP units, which gather in their own forwards) depends on the
  model's class, which is usually in another file.
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
        for site in facts.calls:
            if site.attr not in ENTRY_POINTS or not isinstance(site.node.func, cst.Attribute):
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
                if not any(_sharded(facts, origin.wrap) for origin in followed):
                    continue
            else:
                wrap = self._wrap_in_scope(facts, modules, owner, site)
                if wrap is None or (wrap is not _ANNOTATED and not _sharded(facts, wrap)):
                    continue
                if wrap is not _ANNOTATED and rebound_between(facts, owner, wrap.site, site):
                    continue
            if maybe_in_summon(facts, site, owner) or root_left_gathered(facts, site, owner):
                continue
            report(
                site.node,
                f"`{receiver}.{site.attr}(...)` runs the inner model's forward without FSDP's root forward: the "
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
