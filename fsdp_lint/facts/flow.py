"""Whether one statement can run after another, and which bindings of a name reach a use.

Both answers come from the guards the traversal records (``Context.guards``): each ``if``
between a statement and its function, with the branch the statement is in, plus the
early exits (``if not cfg.fsdp: ...; return`` puts the rest of the block in the ``if``'s
else).  Only statements of the same function are compared; across functions the answer
is "it can", which is what precision needs from a rule that fires on ordering.
"""

from __future__ import annotations

from typing import List

from fsdp_lint.facts.conditions import conditions_contradict
from fsdp_lint.facts.model import Binding, Context

_LEAVES_FUNCTION = ("return", "raise")


def exclusive(a: Context, b: Context) -> bool:
    """``a`` and ``b`` sit in different arms of one ``if`` (an ``elif`` chain included)
    that no loop of their function repeats, or one of them is in an arm that returns and
    the other after it, or the tests around them contradict each other (``if is_fsdp:``
    and ``if is_ddp:`` of one ``args.dist``: ``conditions``): in one call of the function
    at most one of them runs."""
    if a.function is not b.function:
        return False
    arms_a = {id(g.node): g for g in a.guards}
    for guard in b.guards:
        other = arms_a.get(id(guard.node))
        if other is None or other.branch == guard.branch:
            continue
        exit_kind = guard.after_exit or other.after_exit
        if exit_kind in _LEAVES_FUNCTION or guard.loop_depth == 0:
            return True
    return conditions_contradict(a, b)


def can_follow(first: Context, first_order: int, then: Context, then_order: int) -> bool:
    """``then`` can run after ``first`` in one call of their function (source order, not
    in exclusive arms).  Different functions: True (nothing is known)."""
    if first.function is not then.function:
        return True
    if then_order <= first_order and not then.loops:
        return False
    return not exclusive(first, then)


def on_every_path(binding: Binding, use: Context) -> bool:
    """The binding runs whenever the use runs: its ifs and loops enclose the use too."""
    use_arms = {(id(g.node), g.branch) for g in use.guards}
    if any((id(g.node), g.branch) not in use_arms for g in binding.ctx.guards):
        return False
    use_loops = {id(loop.node) for loop in use.loops}
    return all(id(loop.node) in use_loops for loop in binding.ctx.loops)


def reaching(bindings: List[Binding], use: Context, order: int) -> List[Binding]:
    """Of ``bindings`` (one name, one function), those whose value the use at ``order``
    may see: earlier in evaluation order, not in an arm exclusive with the use, and not
    overwritten on every path by a later one; and those later in a loop that encloses the
    use too (they reach it on the next iteration), but for one overwritten on every path by
    one after it in the loop."""
    found: List[Binding] = []
    use_loops = {id(loop.node) for loop in use.loops}
    later: List[Binding] = []
    for binding in sorted(bindings, key=lambda b: b.order, reverse=True):
        if exclusive(binding.ctx, use):
            continue
        if binding.order >= order:
            # later in a loop that also encloses the use: it reaches the next iteration,
            # unless a binding after it in the iteration runs whenever it does (``best =
            # box[0]`` after ``if rank == 0: best = loss``)
            if any(id(loop.node) in use_loops for loop in binding.ctx.loops) \
                    and not any(on_every_path(kept, binding.ctx) for kept in later):
                later.append(binding)
            continue
        found.append(binding)
        if on_every_path(binding, use) or _both_arms_bind(found, use):
            break
    return found + later


def _both_arms_bind(found: List[Binding], use: Context) -> bool:
    """Two of ``found`` stand in the body and the ``else`` of one ``if`` around neither the
    use nor anything else, each on every path of its arm (``if fp32_master: fully_shard(model,
    mp_policy=...)`` / ``else: fully_shard(model)``): every path binds again, so nothing
    earlier reaches the use."""
    use_arms = {(id(g.node), g.branch) for g in use.guards}
    use_loops = {id(loop.node) for loop in use.loops}
    arms = {}
    for binding in found:
        extra = [g for g in binding.ctx.guards if (id(g.node), g.branch) not in use_arms]
        if len(extra) != 1 or not all(id(loop.node) in use_loops for loop in binding.ctx.loops):
            continue
        guard = extra[0]
        if guard.after_exit or guard.leaves_loop:
            continue
        arms.setdefault(id(guard.node), set()).add(guard.branch)
    return any(branches >= {"body", "orelse"} for branches in arms.values())
