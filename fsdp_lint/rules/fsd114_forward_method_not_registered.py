"""FSD114 forward-method-not-registered."""

from __future__ import annotations

from fsdp_lint.facts.forward_methods import (
    BYPASS,
    CALL_THROUGH_SELF,
    ENTRY_POINTS,
    HOOKS,
    defined_in_file_class,
    in_file_method,
    registered_forward_methods,
)
from fsdp_lint.facts.fsdp_modules import method_calls_on_sharded
from fsdp_lint.rules.base import FIX_NEVER, Rule

LIBRARY_ENTRY_POINTS = ENTRY_POINTS - CALL_THROUGH_SELF
# what nn.Module and FSDPModule define, and forward itself: not entry points of a model
_NOT_ENTRY = frozenset({"forward", "__call__", "__init__", "extra_repr", "reset_parameters", "init_weights"})


class ForwardMethodNotRegistered(Rule):
    code = "FSD114"
    name = "forward-method-not-registered"
    summary = "`model.encode(...)` (a method other than `forward`) on a `fully_shard`-ed module without `register_fsdp_forward_method`: the parameters stay sharded"
    fix_availability = FIX_NEVER
    markers = (("fully_shard",),)
    gate_facts = ("fsdp2_wrap",)
    doc = """\
## What it does
Checks for `m.<method>(...)` where `m` was sharded with FSDP2 `fully_shard` before the call
(directly, in a helper of the file, or passed in by a caller that shards it) and the method
computes with the model without going through `m(...)`:
- a method of a class of this file that `m` is built from (`model = Transformer(cfg)`),
  which calls a submodule the class builds with parameters (`self.embed(...)` for a
  `torch.nn` layer with weights, a module class of the file, a `from_pretrained` model; not
  a loss, an activation or dropout) that the file does not shard apart (no
  `fully_shard(model.embed)`), or `self.forward(...)`, and never `self(...)` (also through
  the class's other methods);
- for a model of another library, `encode_image`, `encode_text`, `get_image_features`,
  `get_text_features`, `encode`, `decode` and `sample` (not `generate`: transformers'
  `generate` calls `self(...)`, which runs FSDP's hooks).

Nothing is reported in a file that calls `register_fsdp_forward_method(m, "<method>")` for
that method name (or with a name that is not a literal), nor for `m(...)`.

## Why is this bad?
FSDP2 all-gathers a module's parameters in a forward pre-hook and frees them in a forward
hook (`FSDPState._pre_forward` / `_post_forward`, registered with
`register_forward_pre_hook` in torch/distributed/fsdp/_fully_shard/_fsdp_state.py): they
run when the module is called, `m(...)`. Any other method runs with `m`'s own parameters
(those no nested `fully_shard` owns: embeddings, heads, final norms) still sharded DTensors,
and fails: `RuntimeError: aten.embedding.default got mixed torch.Tensor and DTensor, need to
convert all torch.Tensor to DTensor before calling distributed operators!` (CPU/gloo, torch
2.13.0, 1 and 2 ranks: by the verifier after a training step, by hand also before any step;
sglang#34575, pytorch#125394, #156535). Right after a forward without backward it runs,
because FSDP2 leaves the root unsharded after its forward (measured): the failure looks
intermittent.
`register_fsdp_forward_method(m, "encode")` (torch/distributed/fsdp/_fully_shard/
_fully_shard.py) wraps the method with the same pre- and post-forward hooks.
Calling `m.forward(...)` directly skips the hooks the same way (measured); this rule leaves
that call alone. Measured on torch 2.13.0, the newest release installed here; no release is
known to change this, so the rule sets no `hazard_fixed_in`.

## Example
```python
import torch
from torch.distributed.fsdp import fully_shard


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 64)
        self.head = torch.nn.Linear(64, 1000)

    def forward(self, ids):
        return self.head(self.encode(ids))

    def encode(self, ids):
        return self.embed(ids)


model = Encoder()
fully_shard(model)
features = model.encode(ids)
```

## Use instead
```python
import torch
from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 64)
        self.head = torch.nn.Linear(64, 1000)

    def forward(self, ids):
        return self.head(self.encode(ids))

    def encode(self, ids):
        return self.embed(ids)


model = Encoder()
fully_shard(model)
register_fsdp_forward_method(model, "encode")
features = model.encode(ids)
```

## Known problems
- A `register_fsdp_forward_method(m, "name")` made in another file (a helper of the
  project, a framework) is not seen, and the call is flagged: add `# noqa: FSD114`. A
  registration with a name that is not a literal turns the rule off for the whole file.
- For a model whose class is not in this file (a library model, a model passed in), the
  library entry points listed above are assumed to bypass `__call__`; other methods are not
  flagged. For a class of this file, only a method shown to call a submodule or
  `self.forward(...)` and never `self(...)` is flagged.
- The module must reach a `fully_shard` the file shows, as in FSD109.

## Fix safety
No automatic fix: the registration belongs after the root's `fully_shard`, on the module
whose method is called, which may be in another function or file.

## References
- [`register_fsdp_forward_method`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
- torch/distributed/fsdp/_fully_shard/_fsdp_state.py: `_pre_forward`, `_post_forward`
- sgl-project/sglang#34575, pytorch/pytorch#125394, pytorch/pytorch#156535
"""

    def check(self, facts, report):
        registered = registered_forward_methods(facts)
        if None in registered:
            return
        names = set(LIBRARY_ENTRY_POINTS)
        names.update(
            name for name, infos in facts.functions.items()
            if any(info.class_def is not None for info in infos)
            and name not in _NOT_ENTRY and not name.startswith("__")
        )
        for name in sorted(names - registered):
            for site, origin, receiver in method_calls_on_sharded(facts, name):
                does = in_file_method(facts, origin, name)
                if does == HOOKS:
                    continue
                if does != BYPASS and (name not in LIBRARY_ENTRY_POINTS or defined_in_file_class(facts, origin, name)):
                    continue
                report(
                    site.node,
                    f"`{receiver}` is sharded with FSDP2 `fully_shard` (line {report.row(origin.wrap.site.node)}) and "
                    f"`{receiver}.{name}(...)` does not go through `{receiver}(...)`: FSDP2 gathers the parameters only "
                    f"in the hooks of a call of the module, so `{receiver}`'s own parameters are still sharded DTensors "
                    "here (RuntimeError: got mixed torch.Tensor and DTensor); call "
                    f"`register_fsdp_forward_method({receiver}, \"{name}\")` after `fully_shard`",
                    statement=site.ctx.statement,
                )
