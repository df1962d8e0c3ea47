"""FSD118 tied-parameters-in-separate-groups."""

from __future__ import annotations

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.flow import exclusive
from fsdp_lint.facts.fsdp_modules import fsdp_modules
from fsdp_lint.facts.scopes import latest_binding
from fsdp_lint.facts.ties import (
    project_class_ties,
    tests_identity,
    INPUT_EMBEDDINGS,
    OUTPUT_EMBEDDINGS,
    group_of,
    instance_class,
    shard_groups,
    ties,
    ties_word_embeddings,
)
from fsdp_lint.rules.base import FIX_NEVER, Rule

PARAMETER_NAMES = frozenset({"weight", "bias"})


class TiedParametersInSeparateGroups(Rule):
    code = "FSD118"
    name = "tied-parameters-in-separate-groups"
    summary = "two modules that share a tied parameter sharded in separate `fully_shard` groups: ValueError at the first forward (torch <= 2.11: the tie breaks silently)"
    fix_availability = FIX_NEVER
    markers = (("fully_shard",),)
    gate_facts = ("fsdp2_wrap",)
    doc = """\
## What it does
Checks for a parameter tied between two modules (`model.lm_head.weight =
model.embed.weight` in the function, or `self.lm_head.weight = self.embed.weight` in
`__init__` or a tying method called in the file, of a class of this file the model is
built from; sharing a whole submodule counts too) where the function then puts the two
modules into different FSDP2 `fully_shard` groups: `fully_shard(model.embed)` and
`fully_shard(model.lm_head)`, a loop over `(model.embed, model.lm_head)` that shards each,
or one of them in its own group and the other left to the root's
`fully_shard(model)`. A transformers model loaded with `tie_word_embeddings=True` said in
the file (`from_pretrained(..., tie_word_embeddings=True)`, or `from_config(config)` with such
a config) ties its output embedding (`lm_head`, `get_output_embeddings()`) to its input
embedding (`embed_tokens`, `wte`, `word_embeddings`, `get_input_embeddings()`): flagged when
the two are each named in a different group. Where the model's config decides the tie and
the file does not say it, nothing is flagged; nor a tie made under an `if` when one of the
two `fully_shard` calls is under an `if` too (both may follow one option).

## Why is this bad?
Each `fully_shard` group owns its parameters: it replaces them by its own sharded DTensors
and all-gathers, reduces and reshards them on its own. A parameter shared by two groups
is managed twice. Since pytorch#176225/#176257 (March 2026) FSDP2 checks this in its lazy
init and the first forward raises `ValueError: Parameter 'lm_head.weight' is shared with a
parameter already managed by another FSDP group. For shared/tied parameters, use
fully_shard([module_a, module_b]) to place them in the same FSDP group.` (reproduced by the
verifier on CPU/gloo, torch 2.13.0, one and two ranks; measured also when only `embed` has its own
group and `lm_head` is left to the root's). Right after the two `fully_shard` calls
`model.lm_head.weight is model.embed.weight` is already False (measured). Older releases
raise nothing: the tie breaks silently and, with uneven sharding, the last rank's rows of
the tied weight never update (pytorch#176076, torchtitan#2495, reported on torch <= 2.11).
A whole submodule shared by two parents sharded separately (`fully_shard(model.encoder)`,
`fully_shard(model.decoder)`) fails in the second call on torch 2.13.0 with `TypeError:
Invariant encountered: value was None when it should not be` (measured); sharding the
shared submodule on its own first is the supported way and is not flagged.

## Example
```python
from torch.distributed.fsdp import fully_shard

model.lm_head.weight = model.embed.weight
fully_shard(model.embed)
fully_shard(model.lm_head)
fully_shard(model)
```

## Use instead
```python
from torch.distributed.fsdp import fully_shard

model.lm_head.weight = model.embed.weight
fully_shard([model.embed, model.lm_head])
fully_shard(model)
```
Or leave both modules to the root's group (`fully_shard(model)` only).

## Known problems
- A tie is what the project shows: an assignment in the function, in `__init__`/a tying
  method of a class of this file the model is built from, or in the `__init__` of a class
  of another project file the model is built from (`model = Llama(cfg)` with `from
  model.llama import Llama`). A tie decided by the model's config (transformers'
  `tie_word_embeddings` default) or made by a library is not seen, and nothing is flagged;
  say `tie_word_embeddings=True` in the file for it to be checked.
- Shardings under an `if` that asks whether the two parameters are one object (`if
  model.output.weight is model.embedding.weight:`) follow the tie by construction and are
  not flagged.
- The groups are the `fully_shard` calls of one function; sharding inside a helper is not
  followed. A tie under an `if` with a sharding under an `if` too is assumed to follow one
  option and is not flagged.

## Fix safety
No automatic fix: which group the tied modules share (their own, or the root's) changes
memory and communication; the choice is the program's.

## References
- [`fully_shard`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html) (a list of modules is one group)
- pytorch/pytorch#176076, pytorch/pytorch#176257, pytorch/pytorch#179532, pytorch/torchtitan#2495
"""

    def check(self, facts, report):
        found = ties(facts)
        functions = []
        for wrap in fsdp_modules(facts).fsdp2_wraps:
            if wrap.through is None and not any(f is wrap.site.ctx.function for f in functions):
                functions.append(wrap.site.ctx.function)
        for function in functions:
            groups = shard_groups(facts, function)
            reported = set()
            self._word_embeddings(facts, report, groups, reported)
            for tie in found:
                for head in _heads(facts, tie, groups, function):
                    self._pair(report, groups, reported, f"{head}.{tie.first}", f"{head}.{tie.second}",
                               f"line {report.row(tie.binding.value)}", bool(tie.binding.ctx.guards))
            for head in sorted({n.split(".", 1)[0] for g in groups for n in g.names}):
                site = groups[0].wrap.site
                for first, second, place in project_class_ties(facts, cst.Name(head), site.ctx, site.order):
                    self._pair(report, groups, reported, f"{head}.{first}", f"{head}.{second}", place, False)

    @staticmethod
    def _pair(report, groups, reported, first, second, tied_at, tie_guarded):
        """Report the second of two groups that each take one side of the tie ``first`` =
        ``second`` (made at ``tied_at``)."""
        if any(first in g.names or second in g.names for g in groups):
            return  # the shared module is sharded on its own: both parents skip it
        one, other = group_of(groups, first), group_of(groups, second)
        if one is None or other is None or one is other:
            return
        a, b = sorted((one.wrap.site, other.wrap.site), key=lambda s: s.order)
        if exclusive(a.ctx, b.ctx) or id(b.node) in reported:
            return
        if tie_guarded and (a.ctx.guards or b.ctx.guards):
            return  # a tie under an ``if`` and a sharding under one: maybe the same option
        if any(tests_identity(g.node.test) for g in (*a.ctx.guards, *b.ctx.guards)):
            return  # ``if model.output.weight is embed.weight: fully_shard([embed, model.output])``:
            # the program shards by whether the tie is there
        reported.add(id(b.node))
        where = (f"lines {report.row(a.node)} and {report.row(b.node)}" if a is not b
                 else f"line {report.row(a.node)}, one group per loop iteration")
        if first.rsplit(".", 1)[-1] in PARAMETER_NAMES:
            what = ("ValueError 'shared with a parameter already managed by another FSDP group' at the "
                    "first forward (torch <= 2.11: the tie breaks silently)")
        else:
            what = "an error in the second `fully_shard` or at the first forward (a shared submodule)"
        report(
            b.node,
            f"`{first}` is tied to `{second}` ({tied_at}) and the two are "
            f"sharded in separate `fully_shard` groups ({where}): {what}; put both modules in one group "
            "(`fully_shard([module_a, module_b])`) or leave them to the root's",
            statement=b.ctx.statement,
        )

    @staticmethod
    def _word_embeddings(facts, report, groups, reported):
        """A transformers model loaded with ``tie_word_embeddings=True`` whose input and output
        embeddings are each named in a different group."""
        def named(group, head, suffixes):
            return next((n for n in group.names if n.startswith(head + ".") and n.rsplit(".", 1)[-1] in suffixes), None)

        heads = {n.split(".", 1)[0] for g in groups for n in g.names}
        for head in sorted(heads):
            inputs = [(g, named(g, head, INPUT_EMBEDDINGS)) for g in groups]
            outputs = [(g, named(g, head, OUTPUT_EMBEDDINGS)) for g in groups]
            pairs = [(gi, ni, go, no) for gi, ni in inputs if ni for go, no in outputs if no and go is not gi]
            if not pairs:
                continue
            site = groups[0].wrap.site
            if not ties_word_embeddings(facts, cst.Name(head), site.ctx, site.order):
                continue
            gi, ni, go, no = pairs[0]
            a, b = sorted((gi.wrap.site, go.wrap.site), key=lambda s: s.order)
            if exclusive(a.ctx, b.ctx) or id(b.node) in reported:
                continue
            reported.add(id(b.node))
            where = (f"lines {report.row(a.node)} and {report.row(b.node)}" if a is not b
                     else f"line {report.row(a.node)}, one group per loop iteration")
            report(
                b.node,
                f"`{head}` is loaded with `tie_word_embeddings=True`: `{no}` shares `{ni}`'s weight, and the two are "
                f"sharded in separate `fully_shard` groups ({where}): ValueError 'shared with a parameter already "
                "managed by another FSDP group' at the first forward (torch <= 2.11: the tie breaks silently); put "
                "both modules in one group (`fully_shard([module_a, module_b])`) or leave them to the root's",
                statement=b.ctx.statement,
            )


def _heads(facts, tie, groups, function):
    """The names in ``function``'s groups that hold the tied object."""
    heads = []
    for group in groups:
        for name in group.names:
            head = name.split(".", 1)[0]
            if head in heads:
                continue
            site = group.wrap.site
            if tie.class_def is None:
                binding = tie.binding
                if head != tie.head or binding.ctx.function is not function or binding.order > site.order:
                    continue
                at_tie = latest_binding(facts, head, binding.ctx, binding.order, kinds=("assign", "for", "with"))
                at_wrap = latest_binding(facts, head, site.ctx, site.order, kinds=("assign", "for", "with"))
                if at_tie is not at_wrap:
                    continue  # bound to another object between the tie and the sharding
            elif instance_class(facts, cst.Name(head), site.ctx, site.order) is not tie.class_def:
                continue
            heads.append(head)
    return heads
