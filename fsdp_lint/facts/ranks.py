"""Rank tests: code that runs on one rank (or one process per node) only.

A test is a rank test when it compares a rank with 0 or with the ranks of a
single-process run: ``rank == 0``, ``dist.get_rank() == 0``, ``args.local_rank in (-1, 0)``,
``local_rank <= 0``, ``int(os.environ["RANK"]) == 0``; or asks for the main process:
``accelerator.is_main_process``, ``trainer.is_global_zero``, ``fabric.is_global_zero``,
``trainer.is_world_process_zero()``, ``args.should_save``.  ``!=``, ``not in``, ``> 0`` and
``not`` put the one-rank code in the other branch; a rank test combined with ``and`` still
restricts its body.  A name or attribute assigned a rank test (``is_main = rank == 0``,
``self.is_main = ...``) and a call of a function of this file that returns one are rank
tests too.  ``if rank != 0: return`` makes the rest of its block one-rank code (the
traversal records it as the ``if``'s else branch).  A main-process flag's name counts
where the file does not show its value (``args.should_save``); a value the file shows
decides (a local ``should_save = is_last or step % every == 0`` is no rank test).  A rank
read from the environment and never converted (``rank = os.environ["RANK"]``) never
equals a number: ``if rank == 0:`` runs on no rank, and is no one-rank branch.

A *single-process branch* (``facts.processes``) runs only when the program was not
launched distributed: there is one process, so nothing there runs on every rank.

Whether code may run on some ranks only (``restricted_to_some_ranks``) is wider: any
``if`` whose test is a rank test (either branch) or names a rank (``RANK_WORD``:
``if my_rank == 0``, ``if args.rank_zero``), a single-process branch, or a one-rank
decorator.  Rules that flag what runs on *every* rank ask this one, so that every doubt
keeps them quiet; rules that flag what runs on *one* rank ask ``rank_guard``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.callers import passed_for
from fsdp_lint.facts.dataflow import Sources, calls_of, sources
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Context, ModuleFacts
from fsdp_lint.facts.processes import (
    environment_read, false_when_distributed, in_single_process_branch, integer_value as _integer, last_name as _last,
    single_process_branch, true_when_distributed,
)
from fsdp_lint.facts.scopes import latest_binding, lookup, methods_of, module_functions
from fsdp_lint.facts.values import literal_string

# ``node_rank`` (every process of a node), ``tp_rank``/``pp_rank`` (a sub-mesh) and
# ``lora_rank`` are not one rank; ``src_rank`` is any rank.
RANK_NAME = re.compile(r"^_*((local|global|world)_)?rank$|^_*(local_)?process_index$")
MAIN_FLAGS = frozenset(
    {
        "is_main_process", "is_local_main_process", "is_global_zero", "is_rank_zero", "is_master", "is_main",
        "is_world_process_zero", "is_local_process_zero", "is_master_ordinal", "is_rank0", "is_rank_0",
        "should_save", "is_main_rank", "is_master_process", "master_process", "is_rank_zero", "is_rank_0",
        "is_global_master", "is_local_master", "save_on_this_rank", "global_rank_zero", "is_first_rank",
    }
)
# Decorators that run a function on one rank only.
ONE_RANK_DECORATORS = frozenset({"rank_zero_only", "on_main_process", "on_local_main_process", "master_only", "main_process_only"})
RANK_CALLS = frozenset({"get_rank", "get_local_rank", "get_global_rank", "get_node_local_rank", "get_process_index"})
RANK_ENV = re.compile(r"^(LOCAL_|GLOBAL_|NODE_)?RANK$")
# an identifier that names a rank or the main process (a test or a path built from it may
# differ between ranks): ``rank``, ``my_rank``, ``local_rank_zero``, ``is_main_process``
RANK_WORD = re.compile(
    r"(^|_)(rank|ranks|rank0|process_index|local_process_index|is_main_process|is_local_main_process|is_global_zero|"
    r"is_world_process_zero|is_local_process_zero|is_rank_zero|is_master|is_main|main_process|master_process|"
    r"should_save|rank_zero_only|master|is_local_master|global_zero|process_zero)($|_)",
    re.I,
)
_FLIP = {"body": "orelse", "orelse": "body"}
MAX_DEPTH = 4


def _is_rank_value(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Call):
        func = expr.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if name in RANK_CALLS:
            return True
        if name == "int" and expr.args:
            return _is_rank_value(expr.args[0].value)
    read = environment_read(expr, any_receiver=True)  # os.environ.get("RANK"), os.getenv("LOCAL_RANK")
    if read is not None:
        return bool(RANK_ENV.match(read[0]))
    if isinstance(expr, (cst.Call, cst.Subscript)):
        return False
    dotted = dotted_name(expr)
    return bool(RANK_NAME.match(_last(dotted))) and not _adapter_rank(dotted)


# the owner of a ``rank`` that is a low-rank adapter's dimension, not a process's rank:
# ``config.model.lora.rank``, ``peft_config.rank``, ``self.adapter.rank``
_ADAPTER = re.compile(r"(^|_)(lora|qlora|dora|loha|lokr|adapter|adapters|peft|low_rank|lowrank)($|_)", re.I)


def _adapter_rank(dotted: Optional[str]) -> bool:
    """``dotted`` reads a ``rank`` off a low-rank adapter's configuration (a part before the
    last one names LoRA, PEFT or an adapter): the adapter's matrix rank, the same on every
    process."""
    return dotted is not None and any(_ADAPTER.search(part) for part in dotted.split(".")[:-1])


def _text_against_number(facts: ModuleFacts, test: cst.Comparison, ctx: Context, order: int) -> bool:
    """``rank == 0`` where ``rank`` is always the text of an environment variable
    (``rank = os.environ["RANK"]``, no ``int(...)``): never equal, on any rank."""
    target = test.comparisons[0]
    sides = (test.left, target.comparator)
    for text, number in (sides, sides[::-1]):
        elements = number.elements if isinstance(number, (cst.Tuple, cst.List, cst.Set)) else None
        numbers = [e.value for e in elements] if elements is not None else [number]
        if numbers and all(_integer(n) is not None for n in numbers) and _always_text(facts, text, ctx, order):
            return True
    return False


def _always_text(facts: ModuleFacts, expr, ctx: Context, order: int) -> bool:
    return _environment_text(expr) or _always_assigned(facts, expr, ctx, order, _environment_text)


def _always_assigned(facts: ModuleFacts, expr, ctx: Context, order: int, holds) -> bool:
    """``expr`` is a name every binding of which that reaches ``ctx`` is a plain assignment
    of a value ``holds`` says yes to (``sources`` would look into ``os.environ``'s entries)."""
    dotted = dotted_name(expr)
    if dotted is None:
        return False
    found = lookup(facts, dotted, ctx, order)
    return found.param is None and bool(found.bindings) and all(
        b.kind == "assign" and b.index is None and holds(b.value) for b in found.bindings)


def _environment_text(expr) -> bool:
    """``os.environ["RANK"]``, ``os.environ.get("LOCAL_RANK", ...)``, ``os.getenv("RANK")``:
    the variable's text (a string, even where it reads ``"0"``)."""
    read = environment_read(expr)
    return read is not None and bool(RANK_ENV.match(read[0])) and (
        read[1] is None or literal_string(read[1]) is not None)


def _rank_valued(facts: ModuleFacts, expr, ctx: Context, order: int) -> bool:
    """A name the file binds, everywhere it reaches ``ctx``, to this process's rank: the
    environment's ``RANK``/``LOCAL_RANK`` (``ddp_rank = int(os.environ["RANK"])``) or
    ``dist.get_rank()`` with no group (a group's or mesh dimension's rank, ``tp_rank``, is
    not one).  Its name then need not say rank."""
    return _always_assigned(facts, expr, ctx, order, _whole_run_rank)


def _whole_run_rank(expr) -> bool:
    """``_is_rank_value`` of the whole run: not a call given a group or a mesh dimension."""
    if isinstance(expr, cst.Call) and _last(dotted_name(expr.func)) == "int" and len(expr.args) == 1:
        return _whole_run_rank(expr.args[0].value)
    if isinstance(expr, cst.Call) and expr.args:
        return False  # get_rank(group), mesh.get_local_rank("tp"): one rank of each group
    return _is_rank_value(expr)


def _compare(test: cst.Comparison, is_rank=_is_rank_value) -> Optional[str]:
    if len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    left, op, right = test.left, target.operator, target.comparator
    if not is_rank(left):
        number = _integer(left)
        if is_rank(right) and number is not None and number >= 0 and isinstance(op, (cst.Equal, cst.NotEqual)):
            left, right = right, left
        else:
            return None
    value = _integer(right)
    if isinstance(op, (cst.In, cst.NotIn)) and isinstance(right, (cst.Tuple, cst.List, cst.Set)):
        values = [_integer(e.value) for e in right.elements]
        if 0 in values and all(v is not None and v <= 0 for v in values):
            return "body" if isinstance(op, cst.In) else "orelse"
        return None
    if value is None:
        return None
    # ``rank == 1`` runs on one rank as ``rank == 0`` does (a negative number is no rank:
    # ``local_rank == -1`` is the single-process convention, ``processes``)
    if (isinstance(op, cst.Equal) and value >= 0) or (isinstance(op, cst.LessThanEqual) and value == 0) or (
        isinstance(op, cst.LessThan) and value == 1
    ):
        return "body"
    if (isinstance(op, cst.NotEqual) and value >= 0) or (isinstance(op, cst.GreaterThan) and value == 0) or (
        isinstance(op, cst.GreaterThanEqual) and value == 1
    ):
        return "orelse"
    return None


def one_rank_branch(test: cst.BaseExpression, facts: Optional[ModuleFacts] = None, ctx: Optional[Context] = None,
                    order: int = 0, depth: int = 0) -> Optional[str]:
    """'body' or 'orelse': the branch of ``if test`` that runs on one rank only; None if
    ``test`` is not a rank test.  With ``facts``/``ctx``, names and calls are followed."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(test, cst.BooleanOperation):
        # a side that asks "launched distributed?" has its distributed run's value, where FSDP
        # shards: ``is_distributed() and get_rank() != 0`` is ``get_rank() != 0`` there, and so
        # is ``not is_distributed() or get_rank() != 0``
        settled = true_when_distributed if isinstance(test.operator, cst.And) else false_when_distributed
        for side, other in ((test.left, test.right), (test.right, test.left)):
            if settled(side):
                return one_rank_branch(other, facts, ctx, order, depth + 1)
        sides = (one_rank_branch(test.left, facts, ctx, order, depth + 1), one_rank_branch(test.right, facts, ctx, order, depth + 1))
        if isinstance(test.operator, cst.And):
            return "body" if "body" in sides else None  # both sides hold: one of them on one rank
        # ``or``: its ``else`` needs every side false (``if not should_save or rank != 0: return``)
        return "orelse" if "orelse" in sides else None
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        if _is_rank_value(test.expression):
            return "body"  # ``if not dist.get_rank():``: rank 0
        inner = one_rank_branch(test.expression, facts, ctx, order, depth + 1)
        return _FLIP.get(inner) if inner else None
    if isinstance(test, cst.Comparison):
        answer = _compare(test)
        if answer is None and facts is not None and ctx is not None:
            answer = _compare(test, lambda e: _is_rank_value(e) or _rank_valued(facts, e, ctx, order))
        if answer is not None and facts is not None and ctx is not None and _text_against_number(facts, test, ctx, order):
            return None  # ``os.environ["RANK"] == 0``: a string never equals a number; no rank runs it
        if answer is None and facts is not None and ctx is not None and _compares_a_value_one_rank_updates(
                facts, test, ctx, order):
            return "body"
        if answer is None and facts is not None and ctx is not None and len(test.comparisons) == 1:
            target = test.comparisons[0]
            if isinstance(target.operator, (cst.Is, cst.IsNot)) and _is_none(target.comparator) \
                    and set_on_one_rank(facts, test.left, ctx, order):
                return "body" if isinstance(target.operator, cst.IsNot) else "orelse"
        return answer
    if _is_rank_value(test):
        return "orelse"  # ``if rank:`` runs on the other ranks; ``else`` on rank 0
    own = _own_method(facts, ctx, test.func if isinstance(test, cst.Call) else test)
    if own is not None:
        # ``self.should_save`` (a property) or ``self.is_main()`` of the file's own class: what
        # it returns decides, whatever its name says (a method read without a call is a
        # bound method, always true: no rank test)
        if isinstance(test, cst.Call) == _is_property(own):
            return None
        return _returns_rank_test(facts, own, depth)
    if isinstance(test, cst.Call):
        func = test.func
        if _last(dotted_name(func)) in MAIN_FLAGS:
            return "body"
        if facts is not None and isinstance(func, cst.Name) and facts.qualname(func) is None:
            return _returns_rank_test(facts, func.value, depth)
        return None
    dotted = dotted_name(test)
    if dotted is None:
        # ``Tools().parallel.is_main_process``: a flag read off a value the file cannot follow
        return "body" if isinstance(test, cst.Attribute) and test.attr.value in MAIN_FLAGS else None
    if facts is None or ctx is None:
        return "body" if _last(dotted) in MAIN_FLAGS else None
    answers = set()
    found = sources(facts, test, ctx, order)
    # (a value made where the program runs in one process, ``else: master_process = True``,
    # is not what a distributed run sees)
    shown = [s for s in found.found if not in_single_process_branch(s.ctx)]
    if _last(dotted) in MAIN_FLAGS and not (found.complete and shown and all(s.expr is not test for s in shown)):
        # the name says so where the file does not show the value (``args.should_save``);
        # a value it shows decides (``should_save = is_last or step % every == 0``)
        return "body"
    for source in shown:
        if source.expr is test:
            return None
        answers.add(one_rank_branch(source.expr, facts, source.ctx, source.order, depth + 1))
    for name, where in found.open_params:  # what the callers pass (``facts.callers``)
        answers.add(_passed_rank_test(facts, name, where, depth))
    if not found.found and not found.open_params and "." in dotted:
        return _attribute_rank_test(facts, dotted, depth)
    if answers == {None} and set_on_one_rank(facts, test, ctx, order, found):
        return "body"  # ``if eval_model:`` where only rank 0 builds one
    return answers.pop() if answers and len(answers) == 1 else None


_FALSY = ("None", "False")


def _is_none(expr) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def set_on_one_rank(facts: ModuleFacts, expr, ctx: Context, order: int, found: Optional[Sources] = None) -> bool:
    """Every value ``expr`` may hold is ``None`` (or ``False``) except values made only on
    one rank: ``eval_model = build() if rank == 0 else None``, ``writer = None`` then ``if
    is_main: writer = SummaryWriter()``, a method that returns None off rank 0.  A test of
    it (``if eval_model is not None:``) then restricts its branch to that rank.  A
    parameter read on its own holds what its function's callers pass (``facts.callers``,
    in this file and in other project files): ``self.eval_fn`` bound from ``__init__``'s
    ``eval_fn``, where the launcher builds that function on the main process only.
    ``found``: ``sources`` of ``expr`` where the caller has them already."""
    busy = facts.cached("ranks_values_in_progress", lambda f: set())
    key = id(expr)
    if key in busy:
        return False
    busy.add(key)
    try:
        if _bound_on_one_rank(facts, expr, ctx, order):
            return True
        if found is None:
            found = sources(facts, expr, ctx, order)
        if found.other_gaps or not (found.found or found.open_params):
            return False
        made = False
        for source in found.found:
            if _falsy(source.expr):
                continue
            calls = [facts.call_site(call) for call in source.via]
            if rank_guard(facts, source.ctx) is None and not any(c is not None and rank_guard(facts, c.ctx) for c in calls):
                return False  # (made by a call of this file that itself runs on one rank: ``build() if rank == 0``)
            made = True
        for name, where in found.open_params:
            answer = _passed_on_one_rank(facts, name, where)
            if answer is None:
                return False
            made = made or answer
        return made
    finally:
        busy.discard(key)


def _compares_a_value_one_rank_updates(facts: ModuleFacts, test: cst.Comparison, ctx: Context, order: int) -> bool:
    """A side of the comparison is a name that reaches it both as a value bound on every rank
    and as one bound again only under a rank test (``best_val_loss = float("inf")``, then
    in the loop ``if rank == 0 and loss < best_val_loss: best_val_loss = loss``): once
    that rank has updated it, the ranks hold different values and take different branches,
    so the body runs on some ranks only (counted as the one-rank side: a collective there
    hangs; one in the ``else`` is not reported)."""
    busy = facts.cached("ranks_values_in_progress", lambda f: set())
    key = ("compared", id(test))
    if key in busy:
        return False  # (the update's own rank test compares the value: ``rank == 0 and loss < best``)
    busy.add(key)
    try:
        for side in (test.left, *(target.comparator for target in test.comparisons)):
            dotted = dotted_name(side)
            if dotted is None:
                continue
            seen = lookup(facts, dotted, ctx, order)
            guarded = [b.kind == "assign" and rank_guard(facts, b.ctx) is not None for b in seen.bindings]
            if any(guarded) and not all(guarded) and not _synced_by_a_collective(facts, dotted, ctx):
                return True
        return False
    finally:
        busy.discard(key)


def _synced_by_a_collective(facts: ModuleFacts, dotted: str, ctx: Context) -> bool:
    """The function hands ``dotted`` to a ``torch.distributed`` collective outside any rank
    test (``dist.broadcast(stop, src=0)``, ``dist.all_reduce(best, op=MIN)``,
    ``dist.broadcast_object_list([best])``): it writes the group's value into it, so what
    one rank set is everyone's again."""
    for site in facts.calls:
        if site.ctx.function is not ctx.function:
            continue
        qualname = facts.qualname(site.node.func) or ""
        if not qualname.startswith("torch.distributed.") or qualname.rsplit(".", 1)[-1] not in torch_api.DIST_COLLECTIVES:
            continue
        if any(dotted_name(n) == dotted for arg in site.node.args for n in _expressions(arg.value)) \
                and rank_guard(facts, site.ctx) is None:
            return True
    return False


def _expressions(node):
    """``node`` and the expressions inside it (a list display's elements)."""
    stack = [node]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, (cst.List, cst.Tuple)):
            stack.extend(e.value for e in item.elements if isinstance(e, cst.Element))


def _bound_on_one_rank(facts: ModuleFacts, expr, ctx: Context, order: int) -> bool:
    """The name ``expr`` itself is bound to something other than None/False only under a
    rank test (``export_model = None``, then ``if rank == 0: export_model = model``): on
    the other ranks it stays None, whatever the value it is bound to holds elsewhere."""
    dotted = dotted_name(expr)
    if dotted is None:
        return False
    seen = lookup(facts, dotted, ctx, order)
    bound = [b for b in seen.bindings if not _falsy(b.value)]
    return bool(bound) and seen.param is None and all(
        b.kind == "assign" and rank_guard(facts, b.ctx) is not None for b in bound)


def _passed_on_one_rank(facts: ModuleFacts, name: str, ctx: Context) -> Optional[bool]:
    """``set_on_one_rank`` of a parameter: None when some caller may pass a value made on
    every rank (or callers are unknown); else whether some caller passes one made on one
    rank (every other one passing None/False, or leaving a None/False default)."""
    passed = passed_for(facts, name, ctx)
    if not passed:
        return None
    made = False
    for argument in passed:
        if not argument.known:
            return None
        if argument.record is not None:
            if not argument.record.get("one_rank"):
                return None
            made = True
        elif argument.expr is None or _falsy(argument.expr):
            continue  # None/False (or no default: a call that does not pass it fails)
        elif argument.default or not set_on_one_rank(facts, argument.expr, argument.ctx, argument.order):
            return None
        else:
            made = True
    return made


def _passed_rank_test(facts: ModuleFacts, name: str, ctx: Context, depth: int) -> Optional[str]:
    """``one_rank_branch`` of a parameter read on its own (``if is_main:`` in ``save(model,
    is_main)``): the branch every caller's argument makes one-rank, None when they differ
    or a caller is unknown."""
    passed = passed_for(facts, name, ctx)
    if not passed:
        return None
    answers = set()
    for argument in passed:
        if not argument.known or argument.expr is None and argument.record is None:
            return None
        if argument.record is not None:
            answers.add(argument.record.get("rank"))
        else:
            answers.add(one_rank_branch(argument.expr, facts, argument.ctx, argument.order, depth + 1))
        if None in answers or len(answers) > 1:
            return None
    return answers.pop()


def _falsy(expr) -> bool:
    return isinstance(expr, cst.Name) and expr.value in _FALSY


def _attribute_rank_test(facts: ModuleFacts, dotted: str, depth: int) -> Optional[str]:
    """``if args.save_logs:`` in a function handed ``args``, where the file sets
    ``args.save_logs = args.logs and is_master(args)`` elsewhere: the branch every
    assignment of that attribute (the same dotted name, in any function) makes one-rank."""
    bindings = [b for b in facts.bindings if b.target == dotted and b.kind == "assign" and b.index is None]
    answers = {one_rank_branch(b.value, facts, b.ctx, b.order, depth + 1) for b in bindings}
    return answers.pop() if bindings and len(answers) == 1 else None


def _returned(facts: ModuleFacts, function):
    """The ``return`` records (with a value) of ``function``: the one function of this
    module of that name, or a method's ``FunctionInfo``; [] when the module has none or
    several of that name."""
    if isinstance(function, str):
        infos = module_functions(facts, function)
        if len(infos) != 1:
            return []
        function = infos[0]
    return [r for r in facts.returns if r.ctx.function is function.node and r.value is not None]


def _returns_rank_test(facts: ModuleFacts, function, depth: int) -> Optional[str]:
    answers = {one_rank_branch(r.value, facts, r.ctx, r.order, depth + 1) for r in _returned(facts, function)}
    return answers.pop() if len(answers) == 1 else None


def _is_property(info) -> bool:
    """``info``'s function is decorated ``@property`` (or ``functools.cached_property``)."""
    return any(_last(dotted_name(d.decorator)) in ("property", "cached_property") for d in info.node.decorators)


def _own_method(facts: Optional[ModuleFacts], ctx: Optional[Context], expr):
    """The method ``self.name`` (``expr``) reads, where ``ctx`` stands in a method of a class of
    this file that defines exactly one ``name``: a property is read without a call, a
    method with one (its ``return`` values are what the test sees); None otherwise."""
    if facts is None or ctx is None or ctx.class_def is None or not isinstance(expr, cst.Attribute) \
            or not isinstance(expr.value, cst.Name) or expr.value.value != "self":
        return None
    infos = methods_of(facts, ctx.class_def, expr.attr.value)
    return infos[0] if len(infos) == 1 else None


def _guard_branch(facts: ModuleFacts, ctx: Context, index: int) -> Optional[str]:
    """``one_rank_branch`` of the test of ``ctx.guards[index]``, read where the ``if``
    stands (its own guards, not those of the code inside it): one answer per ``if`` of
    the file, however many calls stand under it."""
    guard = ctx.guards[index]
    memo = facts.cached("ranks_guard_branches", lambda f: {})
    hit = memo.get(id(guard.node))
    if hit is None or hit[0] is not guard.node:
        at = replace(ctx, guards=ctx.guards[:index])
        hit = memo[id(guard.node)] = (guard.node, one_rank_branch(guard.node.test, facts, at, guard.order))
    return hit[1]


def rank_guard(facts: ModuleFacts, ctx: Context, min_with_depth: int = 0):
    """The innermost guard that restricts ``ctx`` to one rank (nested at ``min_with_depth``+):
    an ``if``'s ``Guard``, or the ``Decorator`` of a function that runs on one rank only
    (``@rank_zero_only``, ``@accelerator.on_main_process``)."""
    for index in range(len(ctx.guards) - 1, -1, -1):
        guard = ctx.guards[index]
        if guard.with_depth < min_with_depth:
            continue
        if _guard_branch(facts, ctx, index) == guard.branch:
            return guard
    if ctx.function is not None and min_with_depth == 0:
        for decorator in ctx.function.decorators:
            node = decorator.decorator
            name = dotted_name(node.func if isinstance(node, cst.Call) else node)
            if _last(name) in ONE_RANK_DECORATORS:
                return decorator
    return None


def _identifiers(node):
    """Every Name and Attribute identifier in an expression (no strings, no comments)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, cst.Name):
            yield item.value
        elif isinstance(item, cst.Attribute):
            yield item.attr.value
        stack.extend(item.children)


def value_parts(node):
    """``node``'s parts that may carry a rank *value*: not a comparison (``rank == 0`` is
    a flag, the same string on every rank) and not a keyword's name (``is_master=``)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, cst.Comparison):
            continue
        if isinstance(item, cst.Arg):
            stack.append(item.value)
            continue
        yield item
        stack.extend(item.children)


def mentions_rank(node, values_only: bool = False) -> bool:
    """Some identifier of ``node`` names a rank or the main process (``RANK_WORD``), or
    some part of it reads the rank (``os.environ["LOCAL_RANK"]``, ``dist.get_rank()``).
    ``values_only``: only where a rank value may flow into the result (a path built from
    ``rank``), not a rank test passed along (``AtomicDirectory(d, is_master=rank == 0)``)."""
    if values_only:
        parts = list(value_parts(node))
        names = [p.value if isinstance(p, cst.Name) else p.attr.value for p in parts if isinstance(p, (cst.Name, cst.Attribute))]
        if any(RANK_WORD.search(name) and name.lower().lstrip("_") not in MAIN_FLAGS for name in names):
            return True
        return any(isinstance(p, (cst.Call, cst.Subscript)) and _is_rank_value(p) for p in parts)
    if any(RANK_WORD.search(name) for name in _identifiers(node)):
        return True
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, (cst.Call, cst.Subscript)) and _is_rank_value(item):
            return True
        stack.extend(item.children)
    return False


def restricted_to_some_ranks(facts: ModuleFacts, ctx: Context, callers: bool = False) -> bool:
    """Code at ``ctx`` may run on some ranks only, or in a single process (the module
    docstring): every doubt answers yes.  ``callers``: also where the function it stands
    in runs only so, every call of it in this file standing under such a test (a
    ``save_ckpt`` helper whose only caller is ``if rank == 0: save_ckpt(...)``); a summary
    of what a function does on every call does not ask this."""
    for guard in ctx.guards:
        test = guard.node.test
        if one_rank_branch(test, facts, ctx, guard.order) is not None or mentions_rank(test):
            return True
        if single_process_branch(test) == guard.branch:
            return True
    if rank_guard(facts, ctx) is not None:
        return True
    return callers and _called_on_some_ranks_only(facts, ctx.function)


def _called_on_some_ranks_only(facts: ModuleFacts, function, depth: int = 0) -> bool:
    """Every call of ``function`` in this file (at least one) stands where only some ranks
    run, itself or through the functions it stands in (three levels at most)."""
    if function is None or depth > 2:
        return False
    busy = facts.cached("ranks_callers_in_progress", lambda f: set())
    if id(function) in busy:
        return False
    busy.add(id(function))
    try:
        calls = [facts.call_site(call) for call in calls_of(facts, function)]
        return bool(calls) and all(
            site is not None and (restricted_to_some_ranks(facts, site.ctx)
                                  or _called_on_some_ranks_only(facts, site.ctx.function, depth + 1))
            for site in calls)
    finally:
        busy.discard(id(function))


def on_every_rank_but_one(facts: ModuleFacts, ctx: Context) -> Optional[cst.If]:
    """The ``if`` whose other branch runs on one rank only, when code at ``ctx`` stands on
    the side that runs on every other rank (``else:`` of ``if rank == 0:``, the body of
    ``if rank != 0:``, the rest of a block after ``if is_main: return``) and no other guard
    narrows it: no one-rank guard or decorator, no other rank test, no single-process
    branch.  Several ranks run that code (all but one); None otherwise."""
    if rank_guard(facts, ctx) is not None:
        return None
    found = None
    for guard in ctx.guards:
        test = guard.node.test
        side = one_rank_branch(test, facts, ctx, guard.order)
        if side is not None and side != guard.branch:
            found = guard.node
            continue
        if mentions_rank(test) or single_process_branch(test) is not None:
            return None
    return found


def per_rank_path(facts: ModuleFacts, site, expr, depth: int = 0) -> bool:
    """A path written at ``site`` that differs between ranks or processes: it names a rank
    (``f"ckpt_{rank}.pt"``), is an in-memory buffer, or a temporary file or folder made by
    this process (``tempfile.NamedTemporaryFile().name``, ``mkstemp()``, ``mkdtemp()``),
    following local assignments."""
    if mentions_rank(expr, values_only=True):
        return True
    if isinstance(expr, cst.Call):
        callee = dotted_name(expr.func) or ""
        if callee.rsplit(".", 1)[-1] in ("BytesIO", "StringIO"):
            return True
        if (facts.qualname(expr.func) or "").startswith("tempfile."):
            return True
    if depth > 3:
        return False
    for item in value_parts(expr):  # a function of this file that returns a per-rank value
        if isinstance(item, cst.Call) and isinstance(item.func, cst.Name) and facts.qualname(item.func) is None:
            if any(mentions_rank(r.value, values_only=True) for r in _returned(facts, item.func.value)):
                return True  # ``f"{name}.{rankstr()}.pth"`` with ``def rankstr(): return f"rank_{rank}"``
    names = set()
    for item in value_parts(expr):  # what may flow into the path (not a rank test passed along)
        if isinstance(item, (cst.Name, cst.Attribute)) and dotted_name(item) is not None:
            names.add(dotted_name(item))
            names.add(dotted_name(item).split(".", 1)[0])  # ``tmp.name``: what ``tmp`` is
    for name in names:
        latest = latest_binding(facts, name, site.ctx, site.order, plain=False, kinds=("assign", "for", "with"))
        if latest is not None and latest.ctx.function is site.ctx.function \
                and per_rank_path(facts, site, latest.value, depth + 1):
            return True
    return False
