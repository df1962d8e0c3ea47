"""Which code runs only in a single process: the branch of a "launched distributed?" test
that runs when the program was not.

A *single-process branch* runs only when the program was not launched distributed: the
``else`` of ``if "LOCAL_RANK" in os.environ:``, of ``if dist.is_initialized():``, of
``if world_size > 1:``, of ``if args.distributed:`` / ``if use_fsdp or use_ddp:``, of ``if
int(os.environ.get("RANK", -1)) != -1:`` (-1: the rank of a run not launched distributed),
the body of ``if not dist.is_initialized():``.  A name the file assigns such a test decides
by that value (``ddp = int(os.environ.get("RANK", -1)) != -1``, then ``if ddp:``).  There is
one process: nothing there runs on every rank, and nothing there happens in the run FSDP
shards (``scopes.lookup`` does not let a binding made there reach code outside such a
branch).
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Context
from fsdp_lint.facts.values import literal_key, literal_string

# environment variables torchrun (and the other launchers) set in every process it starts
LAUNCHER_ENV = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
# ``dist.is_initialized()``: true only in a distributed run
DISTRIBUTED_CALLS = frozenset({"is_initialized", "is_distributed"})
# a flag or setting that says the run is distributed: ``args.distributed``, ``use_fsdp``
DISTRIBUTED_FLAG = re.compile(r"^(use_|is_|enable_|with_)?(distributed|fsdp|ddp|multi_gpu|multigpu|dist)$", re.I)
# DDP's flag: its false side may be FSDP (``if use_ddp: DDP(m) else: FSDP(m)``), not one
# process (the false side of FSDP's flag is a run FSDP is not in, which FSDP's rules read as
# one process)
DDP_FLAG = re.compile(r"^(use_|is_|enable_|with_)?ddp$", re.I)
WORLD_SIZE_NAME = re.compile(r"^_*(world_size|num_processes|n_gpus|num_gpus|ngpus)$", re.I)


def last_name(dotted: Optional[str]) -> str:
    return dotted.rsplit(".", 1)[-1].lstrip("_") if dotted else ""


def integer_value(expr: cst.BaseExpression) -> Optional[int]:
    if isinstance(expr, cst.Integer):
        return int(expr.value, 0)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus) and isinstance(expr.expression, cst.Integer):
        return -int(expr.expression.value, 0)
    return None


def _distributed_test(test: cst.BaseExpression) -> Optional[bool]:
    """True: ``test`` holds only in a distributed run; False: only in a single process;
    None: neither is known."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _distributed_test(test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        sides = (_distributed_test(test.left), _distributed_test(test.right))
        if sides[0] is None or sides[1] is None or sides[0] != sides[1]:
            return None
        return sides[0]  # ``use_fsdp or use_ddp``; ``dist.is_available() and dist.is_initialized()`` below
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        op, left, right = target.operator, test.left, target.comparator
        key = literal_string(left)
        if key in LAUNCHER_ENV and dotted_name(right) in ("os.environ", "environ"):
            return isinstance(op, cst.In) if isinstance(op, (cst.In, cst.NotIn)) else None
        if integer_value(right) == -1 and _launcher_rank(left):
            # ``int(os.environ.get("RANK", -1)) != -1``, ``args.local_rank != -1``: -1 is the
            # value a run not launched distributed has
            if isinstance(op, (cst.NotEqual, cst.GreaterThan)):
                return True
            if isinstance(op, cst.Equal):
                return False
            return None
        if WORLD_SIZE_NAME.match(last_name(dotted_name(left))) or (
            isinstance(left, cst.Call) and last_name(dotted_name(left.func)) in ("get_world_size", "device_count")
        ):
            value = integer_value(right)
            if value == 1 and isinstance(op, (cst.GreaterThan, cst.NotEqual)):
                return True
            if value == 1 and isinstance(op, (cst.Equal, cst.LessThanEqual)):
                return False
        return None
    if isinstance(test, cst.Call):
        name = last_name(dotted_name(test.func))
        if name in DISTRIBUTED_CALLS:
            return True
        if name == "is_available":
            return True  # ``dist.is_available() and dist.is_initialized()``: decided by the other side
        return None
    dotted = dotted_name(test)
    if dotted is not None and DISTRIBUTED_FLAG.match(last_name(dotted)):
        return True
    return None


def true_when_distributed(expr: cst.BaseExpression) -> bool:
    """``expr`` is a "launched distributed?" test that holds in every distributed run
    (``get_world_size() > 1``, ``dist.is_initialized()``, ``"RANK" in os.environ``): its
    value in the run FSDP shards is True."""
    return _distributed_test(expr) is True and _ddp_flag_side(expr) is None


def false_when_distributed(expr: cst.BaseExpression) -> bool:
    """``expr`` is a "launched distributed?" test that fails in every distributed run
    (``not dist.is_initialized()``, ``get_world_size() == 1``): its value in the run FSDP
    shards is False."""
    return _distributed_test(expr) is False and _ddp_flag_side(expr) is None


_LAUNCHER_RANK = re.compile(r"^_*(local_|global_)?rank$", re.I)


_ENVIRONMENT_CALLS = frozenset({"os.environ.get", "environ.get", "os.getenv", "getenv"})


def environment_read(expr, any_receiver: bool = False) -> Optional[Tuple[str, Optional[cst.BaseExpression]]]:
    """(variable, default or None) when ``expr`` reads an environment variable named by a
    literal: ``os.environ["RANK"]`` (``environ[...]``), ``os.environ.get("RANK", -1)``,
    ``os.getenv("LOCAL_RANK")``.  ``any_receiver``: also ``<anything>.get("RANK")`` /
    ``getenv`` of any receiver (a rank word asks no more: the variable's name says it).
    The one reader of the environment the rank facts use (``ranks``, ``_launcher_rank``)."""
    if isinstance(expr, cst.Subscript):
        if dotted_name(expr.value) not in ("os.environ", "environ"):
            return None
        name = literal_key(expr)
        return (name, None) if name is not None else None
    if not isinstance(expr, cst.Call) or not expr.args:
        return None
    func = expr.func
    if any_receiver:
        method = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if method not in ("get", "getenv"):
            return None
    elif dotted_name(func) not in _ENVIRONMENT_CALLS:
        return None
    name = literal_string(expr.args[0].value)
    if name is None:
        return None
    return name, (expr.args[1].value if len(expr.args) > 1 else None)


def _launcher_rank(expr) -> bool:
    """The rank a launcher sets: ``os.environ.get("RANK", -1)`` (in ``int(...)``),
    ``os.environ["LOCAL_RANK"]``, a name or attribute ``rank`` / ``local_rank``."""
    if isinstance(expr, cst.Call) and dotted_name(expr.func) == "int" and len(expr.args) == 1:
        expr = expr.args[0].value
    read = environment_read(expr, any_receiver=True)
    if read is not None:
        return read[0] in LAUNCHER_ENV
    return bool(_LAUNCHER_RANK.match(last_name(dotted_name(expr))))


def _ddp_flag_side(test: cst.BaseExpression) -> Optional[str]:
    """When ``test`` is DDP's flag, possibly negated (``use_ddp``, ``not args.use_ddp``): the
    branch that runs when the flag is off; None for any other test."""
    negated = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, not negated
    dotted = dotted_name(test)
    if dotted is None or not DDP_FLAG.match(last_name(dotted)):
        return None
    return "body" if negated else "orelse"


def single_process_branch(test: cst.BaseExpression, bindings=None, function=None) -> Optional[str]:
    """'body' or 'orelse': the branch of ``if test`` that runs only when the program is not
    distributed (one process); None when ``test`` does not ask.  With the file's
    ``bindings`` (a ``model.BindingIndex``) and the ``function`` the test stands in, a
    name's value decides where the file shows one: ``ddp = int(os.environ.get("RANK", -1))
    != -1`` makes ``if ddp:`` a "launched distributed?" test whatever the name."""
    if bindings is not None:
        shown = _shown_answer(test, bindings, function)
        if shown is not None:
            return "orelse" if shown else "body"
    if isinstance(test, cst.Call) and last_name(dotted_name(test.func)) == "is_available":
        return None  # alone, ``dist.is_available()`` says nothing about this run
    if _ddp_flag_side(test) is not None:
        return None  # ``if use_ddp:``: the other branch may run FSDP
    answer = _distributed_test(test)
    if answer is None:
        return None
    return "orelse" if answer else "body"


def _shown_answer(test, bindings, function) -> Optional[bool]:
    """``_distributed_test`` of a bare name (or its ``not``) read through its assignments in
    ``function`` (else at module level), each a test itself (a flag copied from another
    name says no more than the name)."""
    negated = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, not negated
    if not isinstance(test, cst.Name):
        return None
    found = bindings.of(function, test.value) or (bindings.of(None, test.value) if function is not None else [])
    answers = set()
    for binding in found:
        if binding.kind != "assign" or binding.index is not None or dotted_name(binding.value) is not None:
            return None
        answers.add(_distributed_test(binding.value))
    if len(answers) != 1 or None in answers:
        return None
    answer = answers.pop()
    return not answer if negated else answer


def in_single_process_branch(ctx: Context) -> bool:
    """Code at ``ctx`` runs only when the program is not distributed (``else:`` of ``if
    world_size > 1:``): one process, no peer to wait for or to disagree with."""
    return any(single_process_branch(guard.node.test, guard.bindings, ctx.function) == guard.branch
               for guard in ctx.guards)


def holds_when_sharded(guard) -> bool:
    """The branch of ``guard`` (a ``model.Guard``) runs in every run that shards with FSDP:
    the distributed side of a "launched distributed?" test, the true side of an FSDP flag
    (``if config.use_fsdp:``) or the false side of a DDP one (the rest of a helper after
    ``if config.use_ddp: return DDP(model)``)."""
    off = _ddp_flag_side(guard.node.test)
    if off is not None:
        return guard.branch == off
    flip = {"body": "orelse", "orelse": "body"}
    return single_process_branch(guard.node.test) == flip[guard.branch]
