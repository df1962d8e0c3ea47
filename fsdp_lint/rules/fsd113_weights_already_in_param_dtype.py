"""FSD113 weights-already-in-param-dtype."""

from __future__ import annotations

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.dtypes import LOW_PRECISION, MAX_CALLERS_DEPTH, module_in_dtype
from fsdp_lint.facts.fsdp_modules import fsdp_modules
from fsdp_lint.facts.mixed_precision import mp_policy
from fsdp_lint.facts.model import ModuleFacts
from fsdp_lint.facts.optimizers import may_train_parameters_of
from fsdp_lint.facts.submodules import weight_holders
from fsdp_lint.facts.values import UNKNOWN, first_positional, keyword_args
from fsdp_lint.rules.base import FIX_NEVER, Rule


class WeightsAlreadyInParamDtype(Rule):
    code = "FSD113"
    name = "weights-already-in-param-dtype"
    summary = "`fully_shard(m, mp_policy=MixedPrecisionPolicy(param_dtype=bf16))` on weights already cast to bf16: the policy does nothing, the optimizer state is bf16"
    fix_availability = FIX_NEVER
    markers = (("MixedPrecisionPolicy",), ("fully_shard",))
    gate_facts = ("fsdp2_wrap",)
    gate_calls = frozenset({"MixedPrecisionPolicy"})
    caller_levels = MAX_CALLERS_DEPTH  # a helper's parameter: its callers' callers may load the model
    doc = """\
## What it does
Checks for `fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=D))` with `D`
`torch.bfloat16` or `torch.float16`, where `model`'s weights were already cast to `D` before
the sharding: `model.to(torch.bfloat16)`, `model.bfloat16()`, `model.half()`, or
`model.to(device, dtype=torch.bfloat16)` in place, or
`model = X.from_pretrained(..., torch_dtype=torch.bfloat16)` (or `X.from_config(config,
torch_dtype=...)`, or `dtype=`, also a name holding that one dtype), also made by a function
of this file that returns it (`model = load_model(path)`, whose `return` gives such a load or
cast, and which casts it in place to no other dtype on its way out), or by a function of
another file of the project that returns it so (`model = setup_model(cfg)` imported from
`model.py`), on a path that reaches the
`fully_shard` without re-binding `model` (a re-binding in a branch exclusive with the
`fully_shard`, or on another path, leaves the cast reaching it). A `fully_shard` inside a
helper that shards its parameter (`def shard(model): fully_shard(model, ...)`) is checked
with what every call of the helper passes, in the file and in the other files of the project
(`apply_fsdp(model, mesh)` in `train.py` after `from_pretrained(..., torch_dtype=torch.bfloat16)`). A layer sharded in a loop
over what is read from the cast model (`for layer in model.model.layers:`, `for block in
find_blocks(model):`), or a submodule of it sharded by attribute or index
(`fully_shard(model.transformer.h[i], ...)`), holds the cast weights too and is reported as
well; so is a part of it found at run time (`getattr(getattr(model, "model", None),
"visual", None)`), a list of such parts (`fully_shard([visual.patch_embed,
visual.rotary_pos_emb], ...)`), or a name every non-`None` value of which is one (`layers =
model.model.language_model.layers` in one branch, `model.model.layers` in the other:
`submodules.weight_holders`).

## Why is this bad?
FSDP2's mixed precision keeps the sharded parameters in their own dtype and casts to
`param_dtype` for compute. With the weights already in `D`, the sharded parameters, their
gradients and the optimizer state are in `D` too: the policy is a no-op and the fp32 master
weights the user asked for do not exist (the verifier shows the sharded parameters and
AdamW's `exp_avg` in `torch.bfloat16` on CPU/gloo, torch 2.13.0). Training loses precision
silently: unstable gradient norms, loss spikes (accelerate#3139, torchtitan#1133, #528,
verl#6526).

## Example
```python
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

model = model.to(torch.bfloat16)
fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
```

## Use instead
```python
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
```

## Known problems
- Only a `fully_shard` call with a `MixedPrecisionPolicy` whose `param_dtype` the rule can
  read is checked; a policy in an unreadable `**kwargs` or set by a framework config is not
  flagged.
- The cast must be in the function that shards (or, for a helper's parameter, in every
  caller of the helper in this file) before the sharding (`.to(torch.bfloat16)`,
  `.bfloat16()`, `.half()`), or the model loaded there in a dtype the rule can read, or
  returned so by a project function, or passed so by every call of the sharding helper (a
  caller in another file counts where that file names FSDP, as the project's importers do);
  a dtype chosen at run time (`"auto"`, a command-line choice, a project function's
  parameter) or a helper called with models in different dtypes is not flagged.
- A model no optimizer can hold is not flagged: when the function that shards it builds
  optimizers, each from the parameters of a model the rule can name, and none of them is this
  one (a frozen reference or teacher model beside the policy), its low-precision weights lose
  no update. A function that builds no optimizer, or builds one the rule cannot follow, may
  hand the model to one, and the rule reports.
- A model whose parameters the function froze before sharding is not flagged either (a
  LoRA base model: `for _, p in model.named_parameters(): p.requires_grad = False`, or
  `model.requires_grad_(False)`, with no `if` around or inside the loop): no optimizer
  updates them. A function that also turns `requires_grad` back on somewhere (unfreezing the
  last layers) keeps the report.

## Fix safety
No automatic fix: pure low-precision training can be intended (then suppress with
`# noqa: FSD113` on the `fully_shard` line); dropping the cast changes memory use.

## References
- [`MixedPrecisionPolicy`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
- huggingface/accelerate#3139, pytorch/torchtitan#1133
"""

    def check(self, facts, report):
        for wrap in fsdp_modules(facts).fsdp2_wraps:
            if wrap.through is not None:
                continue
            dtype = _policy_dtype(facts, wrap)
            if dtype not in LOW_PRECISION:
                continue
            found = _cast_before(facts, wrap, dtype)
            if found is None:
                continue
            module, (words, node) = found
            where = f"{words}, line {report.row(node)}" if node is not None else words
            if not may_train_parameters_of(facts, module, wrap.site.ctx.function, wrap.site.order):
                continue  # a frozen reference, teacher or LoRA base model: no update to lose
            shown = wrap.wrapped or facts.module.code_for_node(_wrapped_expr(wrap.site.node))
            report(
                wrap.site.node,
                f"`{shown}` is already in {dtype} ({where}) "
                f"and the policy's param_dtype is {dtype}: the mixed-precision policy does nothing, the sharded "
                "parameters, gradients and optimizer state stay low precision; keep the weights in float32 and let "
                "`MixedPrecisionPolicy` cast for compute",
                statement=wrap.site.ctx.statement,
            )


def _policy_dtype(facts: ModuleFacts, wrap):
    policy = mp_policy(facts, wrap)
    return None if policy is UNKNOWN else policy.param_dtype


def _wrapped_expr(call: cst.Call):
    """The module expression ``fully_shard`` is given (first positional, or ``module=``)."""
    arg = first_positional(call)
    if arg is None:
        arg = keyword_args(call).get("module")
    return arg.value if arg is not None else None


def _cast_before(facts: ModuleFacts, wrap, dtype):
    """(module, evidence) for the first module whose weights the wrapped one holds
    (``submodules.weight_holders``: itself, the module it is read from, a loop's source)
    in ``dtype`` at the wrap."""
    for module in weight_holders(facts, _wrapped_expr(wrap.site.node), wrap.site.ctx, wrap.site.order):
        evidence = module_in_dtype(facts, module, wrap.site.ctx, wrap.site.order, dtype)
        if evidence is not None:
            return module, evidence
    return None
