"""FSD106 grad-norm-read-per-rank."""

from __future__ import annotations


from fsdp_lint.diagnostics import UNSAFE
from fsdp_lint.facts.conditions import tested_without
from fsdp_lint.facts.dtensors import (
    BUILTIN_LOCAL_READS, DTENSOR_METHODS, GATHERS, LOCAL_READS, PASS_THROUGH, bound_source, formatted_values,
    norm_sources,
)
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.ranks import mentions_rank, restricted_to_some_ranks
from fsdp_lint.lazy_libcst import cst
from fsdp_lint.rules.base import FIX_SOMETIMES, FixProposal, Rule


# reads that turn a DTensor into a plain value on this rank
# reads of a Replicate() total norm that give the global value (``.tolist()`` raises instead)
TOTAL_NORM_READS_FIXED = frozenset({".item()", "float(...)", "int(...)", ".to_local()"})


def _maybe_on_some_ranks(facts, site) -> bool:
    """A read under an ``if`` that may restrict it to some ranks, or in a statement that
    names a rank, where ``.full_tensor()`` (a collective) would hang (``facts.ranks``)."""
    return restricted_to_some_ranks(facts, site.ctx) or mentions_rank(site.ctx.statement)


def _reads(facts):
    """(the call, the node a finding stands on, the value read, the read as written) for
    each read of a tensor's value into a plain one (``LOCAL_READS``, ``float(...)``) and each
    formatting of a value with a spec (``dtensors.formatted_values``: the node is the value)."""
    for site in facts.calls:
        node = site.node
        if site.attr in LOCAL_READS and isinstance(node.func, cst.Attribute):
            yield site, node, node.func.value, f".{site.attr}()"
        elif facts.qualname(node.func) is None and dotted_name(node.func) in BUILTIN_LOCAL_READS and len(node.args) == 1:
            yield site, node, node.args[0].value, f"{dotted_name(node.func)}(...)"
    for site, value, read in formatted_values(facts):
        yield site, value, value, read


class GradNormReadPerRank(Rule):
    code = "FSD106"
    name = "grad-norm-read-per-rank"
    summary = ("a gradient norm of an FSDP2 model read with `.item()` / `float()` / `.tolist()` or formatted with a spec, "
               "without `.full_tensor()`")
    fix_availability = FIX_SOMETIMES
    # clip_grad_norm_/get_total_norm come back Replicate() from torch 2.11 (measured on 2.11
    # and 2.13): .item(), float(), int() and .to_local() then read the global norm
    paths_fixed_in = {"total-norm": "2.11"}
    paths_on_by_default = frozenset({"total-norm"})
    markers = (
        ("clip_grad_norm_", "get_total_norm", "norm", "vector_norm"),
        ("fully_shard",),
        # the reads; ``{`` for a format spec in an f-string or a ``.format`` literal
        (".item(", "float(", ".tolist(", ".to_local(", ".numpy(", "int(", "{", "format("),
    )
    # a read of a norm of an FSDP2 module's gradients; the norm it reads may be bound far
    # from it, so the read alone does not seed a slice (no ``gate_sites``)
    gate_facts = ("fsdp2_passed",)
    gate_calls = LOCAL_READS | BUILTIN_LOCAL_READS | {"format"}
    gate_formats = True
    doc = """\
## What it does
Checks for a gradient norm computed from the DTensor gradients of a model sharded with
FSDP2 (`fully_shard(m)` in the same function, or a call there of a function of this file
that runs `fully_shard` on its parameter, torchtitan's `apply_fsdp(model)`) and read into
a plain value on each rank without `.full_tensor()`:
- the total norm returned by `torch.nn.utils.clip_grad_norm_(m.parameters(), ...)` or
  `torch.nn.utils.get_total_norm(...)`, read with `.item()`, `float(...)`, `int(...)`,
  `.tolist()`, `.to_local()` or `.numpy()` (also after `.detach()`, `.mean()`, `.cpu()`),
  or formatted with a format spec (`f"{grad_norm:.4f}"` in a call's arguments,
  `format(grad_norm, ".4f")`, `"{:.4f}".format(grad_norm)`);
- a per-parameter norm, `p.grad.norm()`, `torch.linalg.vector_norm(p.grad)`,
  `torch.norm(p.grad)`, in a loop over `m.parameters()` / `m.named_parameters()`, read
  the same way.

## Why is this bad?
A norm of a sharded DTensor is a DTensor with a pending reduction (`_NormPartial`):
each rank holds the norm of its own shard. DTensor's `.item()` does not reduce a partial
value (pytorch/pytorch#144054, "intentional"; `aten._local_scalar_dense` returns the local
value, torch/distributed/tensor/_sharding_prop.py), so every rank reads its local norm: the
logged `grad_norm` differs across ranks and under-reports the true norm, by about
`sqrt(n_shards)` when the gradients are spread evenly.

Which reads misbehave depends on torch:
- per-parameter norms: the local shard's norm, on torch 2.13.0 too. CPU/gloo, torch
  2.13.0, 2 ranks, one weight: `p.grad.norm().item()` gives 31.92 on rank 0 and 35.12 on
  rank 1 against the true 47.46 (`.full_tensor().item()`).
- the total norm of `clip_grad_norm_` / `get_total_norm`: a `_NormPartial` DTensor up to
  torch 2.9 at least (pytorch/pytorch#166638 and #170862 on 2.9.0 and 2.9.1,
  pytorch/torchtitan#766), so `.item()` is the local norm there. On torch 2.13.0 it comes
  back `Replicate()` (measured): `.item()`, `float()` and `.to_local()` give the global
  norm, and `.tolist()` raises `RuntimeError: .tolist() is not supported for tensor
  subclasses, got DTensor`; on torch 2.11 the ranks' `.item()` agree too (2 GPUs, the
  verifier's record below). So the
  total-norm path reports `.item()`, `float()`, `int()` and `.to_local()` unless
  `target-torch-version` is 2.11 or later: with no target set it reports, since code that
  logs the norm runs on the torch its users install and `.full_tensor()` is right on all
  of them. `.tolist()` and the per-parameter norms report on every version.
- a format spec fails on every version: `Tensor.__format__` formats a 0-dim tensor through
  `.item()` only when its type is exactly `Tensor` (torch/_tensor.py); a DTensor goes to
  `object.__format__`, which refuses any spec. CPU/gloo, torch 2.13.0, 2 ranks:
  `f"{grad_norm:.4f}"` on the `Replicate()` total norm raises `TypeError: unsupported
  format string passed to DTensor.__format__` on every rank (`f"{grad_norm}"`, with no
  spec, prints the DTensor's repr and is not flagged).
The clipping itself is correct: the clip coefficient is computed in DTensor arithmetic.

## Example
```python
import torch
from torch.distributed.fsdp import fully_shard

fully_shard(model)
loss.backward()
grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
logger.info(f"grad_norm: {grad_norm.item():.4f}")
```

## Use instead
```python
import torch
from torch.distributed.fsdp import fully_shard

fully_shard(model)
loss.backward()
grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
logger.info(f"grad_norm: {grad_norm.full_tensor().item():.4f}")
```

## Known problems
- The model must be sharded with `fully_shard` in the same function as the norm (a call of a
  helper of the file or of a project file that shards it counts), or be an attribute such as
  `self.model` sharded anywhere in the file, or one that every call in other project files
  passes sharded (a parameter of a top-level function, or `self.model = model` in the
  `__init__` of a class such as a trainer engine that the launcher builds with the sharded
  model); a model passed in from where the project does not show is not followed, and
  nothing is flagged.
- With no `target-torch-version`, the total-norm reads (`.item()`, `float()`, `int()`,
  `.to_local()`) assume a torch before 2.11, where the total norm is a `_NormPartial`
  DTensor; `target-torch-version = "2.11"` or later turns that path off (`.tolist()` stays).
- A read where a `hasattr` test says the norm lacks a DTensor method (the `else` of
  `norm.item() if hasattr(norm, "item") else float(norm)`, the body of
  `if not hasattr(norm, "full_tensor"):`) is not flagged: no DTensor reaches it.
- A read under any `if` that may restrict it to some ranks gets no fix: `.full_tensor()` is a
  collective.
- An f-string is read where a call takes it as an argument (`print(...)`, `logger.info(...)`,
  `pbar.set_description(...)`) or where it is bound to a name (`msg = f"{norm:.4f}"`); one
  inside a container or returned is not.

## Fix safety
The fix inserts `.full_tensor()` before the read and is unsafe: `.full_tensor()` is a
collective (every rank must run that line, which a read under a rank test does not; there
the message asks for the full norm to be computed on every rank before the test), and
when no parameter has a gradient `clip_grad_norm_` returns a plain tensor, which has no
`.full_tensor()`. Reads inside a rank test, or in a statement or under an `if` that
names a rank (`if not rank:`, `x if rank == 0 else None`), get no fix. A `.to_local()` read
becomes `.full_tensor()` (the full tensor is a plain tensor).

## References
- [DTensor `full_tensor`](https://pytorch.org/docs/stable/distributed.tensor.html#torch.distributed.tensor.DTensor.full_tensor)
- [pytorch/pytorch#144054](https://github.com/pytorch/pytorch/issues/144054): `item()` on
  DTensor only grabs the local tensor
- [pytorch/pytorch#166638](https://github.com/pytorch/pytorch/issues/166638): the grad norm
  returned by `clip_grad_norm_` with FSDP2 is a partial DTensor
- torch/nn/utils/clip_grad.py (`_get_total_norm`: `torch.stack` of per-tensor norms, then
  `vector_norm`)
"""

    def check(self, facts, report):
        sources, named = norm_sources(facts)
        if not sources:
            return

        for site, node, inner, read in _reads(facts):
            base = inner
            gathered = False
            while isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) \
                    and base.func.attr.value in PASS_THROUGH | GATHERS and id(base) not in sources:
                gathered = gathered or base.func.attr.value in GATHERS
                base = base.func.value
            if gathered:
                continue
            if dotted_name(base) is not None and tested_without(site.ctx, dotted_name(base), DTENSOR_METHODS):
                continue  # ``x.item() if hasattr(x, "item") else float(x)``: no DTensor reaches the else
            what = sources.get(id(base))
            if what is None:
                name = dotted_name(base)
                if name is None or name not in named:
                    continue
                what = bound_source(facts, site, name, named, sources)
                if what is None:
                    continue
            if what.startswith("the total norm") and read in TOTAL_NORM_READS_FIXED and not self.reports_path("total-norm"):
                continue
            fix = None
            some_ranks = _maybe_on_some_ranks(facts, site)
            if not some_ranks:
                if read == ".to_local()":  # the full tensor is a plain tensor: no .to_local() after it
                    fix = FixProposal(UNSAFE, "Read with `.full_tensor()`", node,
                                      node.with_changes(func=node.func.with_changes(attr=cst.Name("full_tensor"))))
                else:
                    new_base = cst.Call(func=cst.Attribute(value=base, attr=cst.Name("full_tensor")))
                    fix = FixProposal(UNSAFE, "Insert `.full_tensor()` before the read", base, new_base)
            if node is inner:  # a format spec
                when = "raises TypeError (`unsupported format string passed to DTensor.__format__`) on every torch"
            elif read == ".tolist()":
                when = "raises RuntimeError on a DTensor (torch 2.13) or reads this rank's local norm (torch <= 2.9)"
            elif what.startswith("the total norm"):
                when = "reads this rank's local norm on torch <= 2.9 (a _NormPartial DTensor)"
            else:
                when = "reads this rank's local norm (a _NormPartial DTensor)"
            if some_ranks:  # .full_tensor() is a collective: under a rank test it would hang
                advice = ("compute the full norm on every rank before the rank test (`.full_tensor()` is a "
                          "collective: called under it, the other ranks never join), then read that under the test")
            else:
                advice = "call `.full_tensor()` first"
            effect = "the job stops at the log line" if node is inner else "the logged norm differs across ranks"
            report(
                node,
                f"{what} is a DTensor; `{read}` {when}: {effect}; {advice}",
                fix,
                statement=site.ctx.statement,
            )
