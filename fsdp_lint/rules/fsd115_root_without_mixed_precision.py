"""FSD115 root-without-mixed-precision."""

from __future__ import annotations

from fsdp_lint.facts.dtypes import LOW_PRECISION
from fsdp_lint.facts.flow import exclusive
from fsdp_lint.facts.fsdp_modules import fsdp_modules
from fsdp_lint.facts.mixed_precision import mp_policy
from fsdp_lint.facts.param_writes import bound_from, under
from fsdp_lint.facts.values import UNKNOWN
from fsdp_lint.rules.base import FIX_NEVER, Rule


class RootWithoutMixedPrecision(Rule):
    code = "FSD115"
    name = "root-without-mixed-precision"
    summary = "submodules sharded with a bf16/fp16 `MixedPrecisionPolicy` but the root's `fully_shard(model)` without it (or with another param_dtype): the root's own modules compute in float32 on low-precision activations"
    fix_availability = FIX_NEVER
    markers = (("MixedPrecisionPolicy",), ("fully_shard",))
    gate_facts = ("fsdp2_wrap",)
    gate_calls = frozenset({"MixedPrecisionPolicy"})
    doc = """\
## What it does
Checks for `fully_shard(model, ...)` with no `mp_policy` (or one whose `param_dtype` is the
other low-precision dtype) after, in the same function, `fully_shard` sharded a submodule
of `model` (`for layer in model.layers`, `enumerate(model.blocks)`, `model.encoder`) with
`MixedPrecisionPolicy(param_dtype=torch.bfloat16)` or `torch.float16`. A root policy given
explicitly with `param_dtype=torch.float32` or none is taken as a choice and left alone;
so is a policy that cannot be read (a parameter, an unreadable `**kwargs`). A submodule
sharded in the other arm of the `if` that shards the root (`if fp32_master: ... mp_policy=...`
/ `else:` without one) never runs with it and does not count.

## Why is this bad?
Each `fully_shard` group casts only its own parameters (`FSDPParam.init_dtype_attrs`
in torch/distributed/fsdp/_fully_shard/_fsdp_param.py; the group's forward pre-hook casts
the inputs with `cast_forward_inputs`). The root's own modules (token embedding, final
norm, output head) keep float32 weights while the layers return bfloat16 activations. What
happens depends on the modules (measured on CPU/gloo, torch 2.13.0: the errors at 2 ranks,
the float32 logits by the verifier at 1 and 2 ranks):
- a module that meets a layer's output as it is fails at the first forward: `nn.Linear`:
  `RuntimeError: expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != float`
  (on GPU: `mat1 and mat2 must have the same dtype`); a root policy of the other dtype
  (float16 against bfloat16 layers) fails the same way;
- a norm that upcasts (the RMSNorm of Llama-style models: `x.float()`, then `weight *
  x.to(dtype)`) promotes to float32: training runs, but the final norm, the output head's
  matmul and the logits run in float32 (verifier: logits `torch.float32`, `torch.bfloat16`
  with the root given the same policy), the largest matmul of a language model at full
  precision (speculators#530, torchtitan#2886).

Measured on torch 2.13.0, the newest release installed here; no release is known to change
this, so the rule sets no `hazard_fixed_in`.

## Example
```python
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in model.layers:
    fully_shard(layer, mp_policy=policy)
fully_shard(model)
```

## Use instead
```python
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in model.layers:
    fully_shard(layer, mp_policy=policy)
fully_shard(model, mp_policy=policy)
```

## Known problems
- The root and its layers must be sharded by `fully_shard` calls written in the same
  function; sharding done inside a helper (torchtitan's `apply_fsdp`) or in another file is
  not followed, and nothing is flagged.
- A root or layer policy the rule cannot read (a parameter, an unreadable `**kwargs`) is
  taken as a choice and left alone.

## Fix safety
No automatic fix: keeping the head and embeddings in float32 can be intended (then give the
root an explicit `MixedPrecisionPolicy(param_dtype=torch.float32)` or suppress with
`# noqa: FSD115`), and the root's policy changes the dtype of the model's output.

## References
- [`MixedPrecisionPolicy`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
- torch/distributed/fsdp/_fully_shard/_fsdp_param.py: `init_dtype_attrs`
- speculators#530, pytorch/torchtitan#2886
"""

    def check(self, facts, report):
        wraps = [w for w in fsdp_modules(facts).fsdp2_wraps if w.through is None and w.wrapped is not None]
        for root in wraps:
            root_policy = mp_policy(facts, root)
            if root_policy is UNKNOWN or (root_policy.given and root_policy.param_dtype not in LOW_PRECISION):
                continue
            reaching = bound_from(facts, root.site.ctx.function, [root.wrapped])
            for layer in wraps:
                if (
                    layer is root or layer.wrapped == root.wrapped
                    or layer.site.ctx.function is not root.site.ctx.function or layer.site.order > root.site.order
                    or exclusive(layer.site.ctx, root.site.ctx)  # ``if fp32_master: ...`` / ``else: ...``
                    or not under(layer.wrapped, reaching)
                ):
                    continue
                policy = mp_policy(facts, layer)
                if policy is UNKNOWN or policy.param_dtype not in LOW_PRECISION:
                    continue
                if root_policy.given and root_policy.param_dtype == policy.param_dtype:
                    continue
                has = (f"a policy with param_dtype={root_policy.param_dtype}" if root_policy.given
                       else "no `mp_policy`")
                report(
                    root.site.node,
                    f"`fully_shard({root.wrapped})` has {has} while `{layer.wrapped}` (line "
                    f"{report.row(layer.site.node)}) is sharded with param_dtype={policy.param_dtype}: the root's own "
                    f"modules (embeddings, final norm, head) compute in {root_policy.param_dtype or 'their own dtype (float32)'} "
                    f"on {policy.param_dtype} activations (RuntimeError: expected m1 and m2 to have the same dtype, or "
                    "float32 logits); "
                    "give the root the same `mp_policy`",
                    statement=root.site.ctx.statement,
                )
                break
