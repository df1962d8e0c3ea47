"""Training loops: which loop, if any, runs a statement on every training step.

A loop "steps" when a ``.backward(...)`` or ``.step(...)`` call (``loss.backward()``,
``accelerator.backward(loss)``, ``scaler.scale(loss).backward()``, ``optimizer.step()``,
``scaler.step(opt)``) has it as its innermost loop.  So an epoch loop around a batch
loop does not step itself, and an evaluation loop (no backward, no step) never steps.
A statement under a sparse guard, or in a branch that leaves the loop (ends with
break/return/raise), does not run on every step.  A guard is sparse when its test uses
``%`` (``step % every == 0``, also through a name bound from it: ``do_eval = ...; if
do_eval:``), compares a loop counter with ``==`` or ``in`` (``step == max_steps - 1``,
``step in eval_steps``), or passes one to a call (``should_run(step, every)``, a schedule
predicate).  Loop counters: the ``for`` target and the names the loop adds to (``step +=
1``).  A test of a latch the function sets after it (``if self.logged: return``, then
``self.logged = True``) runs once.  A test on anything else (a flag, ``step > warmup``)
leaves every step.  A function
of this file called on every step runs its body on every step too, and so do the functions
it calls on every run (``CALL_LEVELS`` calls apart).

A trainer's loop is not in the file: the methods it calls once per step are
(``frameworks.STEP_HOOKS``: a LightningModule's ``training_step`` and batch hooks, a
Lightning callback's, a transformers ``TrainerCallback``'s ``on_step_end``).  A hook's body
runs on every step unless under a sparse guard, whose counters are the trainer's
(``frameworks.STEP_COUNTERS``: ``batch_idx``, ``global_step``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Set, Tuple, Union

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.dataflow import called_functions, calls_of
from fsdp_lint.facts.frameworks import STEP_COUNTERS, step_hook
from fsdp_lint.facts.imports import dotted_name, target_names
from fsdp_lint.facts.index import STEP_ATTRS
from fsdp_lint.facts.model import CallSite, Context, Guard, Loop, ModuleFacts
from fsdp_lint.facts.walk import descendants
from fsdp_lint.facts.scopes import function_info, latest_binding


@dataclass(frozen=True, eq=False)
class StepHook:
    """A method a trainer calls once per training step (``frameworks.step_hook``)."""

    node: object  # the method's ``cst.FunctionDef``
    trainer: str  # whose hook it is: "a LightningModule", ...


def per_step_loop(facts: ModuleFacts, ctx: Context) -> Optional[Loop]:
    """The innermost training loop that runs this context on every iteration, or None."""
    for depth in range(len(ctx.loops) - 1, -1, -1):
        loop = ctx.loops[depth]
        if not steps(facts, loop):
            continue
        inside = [g for g in ctx.guards if g.loop_depth > depth]
        if any(_sparse(facts, g, ctx.loops[depth:], ctx) for g in inside):
            return None
        return loop
    return None


def steps(facts: ModuleFacts, loop: Loop) -> bool:
    """The loop runs a training step on every iteration: a ``.backward(...)``/``.step(...)``
    call has it as its innermost loop, or it calls a function of this file that makes one
    outside any loop of its own (``for batch in loader: train_step(model, batch)``, the
    backward and the optimizer step in ``train_step``).  A function whose steps are in a
    loop of its own (``train_epoch``) does not make its caller's loop a training loop."""
    if loop.steps:
        return True
    return facts.cached(("loop_steps_through_call", id(loop.node)), lambda f: any(
        site.ctx.loops and site.ctx.loops[-1] is loop and any(
            _steps_once(f, info.node) for info in called_functions(f, site.node, site.ctx))
        for site in f.calls))


def _steps_once(facts: ModuleFacts, function) -> bool:
    """The function makes a ``.backward(...)``/``.step(...)`` call outside any loop of its own."""
    return facts.cached(("steps_once", id(function)), lambda f: any(
        site.ctx.function is function and not site.ctx.loops and site.attr in STEP_ATTRS
        and isinstance(site.node.func, cst.Attribute) for site in f.calls))


def _counters(facts: ModuleFacts, loop: Loop) -> Set[str]:
    """The loop's ``for`` target names and the names it adds to (``step += 1``)."""
    def compute(_facts):
        found: Set[str] = set()
        if isinstance(loop.node, cst.For):
            found.update(target_names(loop.node.target))
        for node in descendants(loop.node.body):
            if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
                found.update(filter(None, [dotted_name(node.target)]))
        return found
    return facts.cached(("loop_counters", id(loop.node)), compute)


def _mentions(expr, names: Set[str]) -> bool:
    return any(
        isinstance(node, (cst.Name, cst.Attribute)) and dotted_name(node) in names for node in descendants(expr)
    )


def _sparse(facts: ModuleFacts, guard: Guard, loops, ctx: Context) -> bool:
    """The guard's branch does not run on every iteration of ``loops`` (the module docstring)."""
    if guard.leaves_loop:
        return True
    return _sparse_on(facts, guard, set().union(*(_counters(facts, loop) for loop in loops)), ctx)


def _sparse_on(facts: ModuleFacts, guard: Guard, counters, ctx: Context) -> bool:
    """The guard's test runs its branch sparsely with these step counters: ``%``, a run-once
    latch, or a test of a counter (``_sparse_test``)."""
    return guard.periodic or _latched(guard, ctx) or _sparse_test(facts, guard.node.test, counters, guard, ctx, 0)


_CONSTANTS = frozenset({"True", "False", "None"})


def _latched(guard: Guard, ctx: Context) -> bool:
    """The guard's test reads a name or attribute that its function sets to a constant after
    the test (``if self.logged: return``, then ``self.logged = True``; ``if not warned:
    ...; warned = True``): a run-once latch, so what it guards does not run on every step
    (unless something else resets it every step: then a finding is missed, never made).
    "After": at the test's order or later (the order counts calls, and none may stand
    between the test and the binding)."""
    if guard.bindings is None or ctx.function is None:
        return False
    stack = [guard.node.test]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = dotted_name(node)
            if name is not None and any(
                    b.order >= guard.order and b.kind == "assign" and isinstance(b.value, cst.Name)
                    and b.value.value in _CONSTANTS for b in guard.bindings.of(ctx.function, name)):
                return True
        if isinstance(node, (cst.UnaryOperation, cst.BooleanOperation, cst.Comparison, cst.Attribute)):
            stack.extend(node.children)
    return False


def per_step_hook(facts: ModuleFacts, ctx: Context) -> Optional[StepHook]:
    """The trainer's per-step hook whose body runs ``ctx`` on every step (not under a sparse
    guard, a test of ``%`` or of the trainer's step counters), or None."""
    if ctx.function is None or ctx.class_def is None:
        return None
    info = function_info(facts, ctx.function)
    trainer = step_hook(facts, info) if info is not None else None
    if trainer is None:
        return None
    if any(_sparse_on(facts, g, STEP_COUNTERS, ctx) for g in ctx.guards):
        return None
    return StepHook(ctx.function, trainer)


def _sparse_test(facts: ModuleFacts, test, counters: Set[str], guard: Guard, ctx: Context, depth: int) -> bool:
    stack = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) and not isinstance(
            node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
        ):
            return True
        if isinstance(node, cst.Comparison) and any(
            isinstance(c.operator, (cst.Equal, cst.In)) for c in node.comparisons
        ) and _mentions(node, counters):
            return True
        if isinstance(node, cst.Call) and any(_mentions(a.value, counters) for a in node.args):
            return True
        if isinstance(node, cst.Name) and depth < 2 and ctx.function is not None:
            # ``do_eval = step % every == 0`` ... ``if do_eval:`` (the latest binding before the if)
            latest = latest_binding(facts, node.value, ctx, guard.order)
            if latest is not None and latest.ctx.function is ctx.function \
                    and _sparse_test(facts, latest.value, counters, guard, ctx, depth + 1):
                return True
        if isinstance(node, (cst.Comparison, cst.UnaryOperation, cst.BooleanOperation, cst.BinaryOperation,
                             cst.Call, cst.Attribute, cst.Subscript, cst.Name)):
            stack.extend(node.children)
    return False


# How many calls apart a statement and the loop (or hook) that runs it may stand: the
# statement's function called from the loop (1), or from a function the loop calls (2),
# and so on.  ``slicing`` keeps that many levels of callers for a large file.
CALL_LEVELS = 3


def per_step_via_call(facts: ModuleFacts, ctx: Context) -> Optional[Tuple[Union[Loop, StepHook], Tuple[CallSite, ...]]]:
    """The training loop, or the trainer's per-step hook, that runs ``ctx`` on every step:
    directly, or through calls of this file made on every step, up to ``CALL_LEVELS``
    apart (``ema.update(model)`` in the loop, the summon inside ``update``; a loop calling
    ``train_step(batch)``, which calls ``rollout(model)``, which summons).  Each call on the
    way must run on every run of its function (not under a sparse guard).  The calls come
    from the loop (or hook) inwards; none for the direct case."""
    found = per_step_loop(facts, ctx) or per_step_hook(facts, ctx)
    if found is not None:
        return found, ()
    return _per_step_caller(facts, ctx, CALL_LEVELS, set())


def _per_step_caller(facts: ModuleFacts, ctx: Context, levels: int, seen: Set[int]):
    if levels == 0 or ctx.function is None or id(ctx.function) in seen:
        return None
    if any(_sparse(facts, g, ctx.loops, ctx) for g in ctx.guards):
        return None
    seen.add(id(ctx.function))
    for call in calls_of(facts, ctx.function):
        site = facts.call_site(call)
        if site is None or site.ctx.function is ctx.function:
            continue
        outer = per_step_loop(facts, site.ctx) or per_step_hook(facts, site.ctx)
        found = (outer, ()) if outer is not None else _per_step_caller(facts, site.ctx, levels - 1, seen)
        if found is not None:
            return found[0], found[1] + (site,)
    return None
