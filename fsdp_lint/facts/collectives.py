"""Calls that every rank must make (collectives), and whether a model is sharded yet.

- torch FSDP: ``summon_full_params``; ``state_dict()`` of an FSDP1 module (a full state dict
  all-gathers) and its ``load_state_dict(...)`` (the full and sharded pre-load hooks unshard
  the parameters, ``_enter_unshard_params_ctx``); ``FSDP.optim_state_dict`` / ``full_optim_state_dict``;
  ``torch.distributed.checkpoint.state_dict.get_*state_dict`` on a sharded model.
- the forward of an FSDP module sharded into nested units that reshard after forward,
  ``model(x)`` (``forward_gathers``).
- ``torch.distributed`` collectives and barriers, in a file that uses torch FSDP (a
  DDP-only script's collectives are out of this linter's scope).
- framework calls (``facts.frameworks``).
A gathering call on a model that is not sharded yet at that point (built by rank 0 before
``fully_shard``/``FSDP`` wraps it later in the same function) runs no collective.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.call_shape import CallShape, of_cst
from fsdp_lint.facts.conditions import tested_not_instance
from fsdp_lint.facts.flow import exclusive
from fsdp_lint.facts.forward_methods import model_class_method
from fsdp_lint.facts.fsdp_modules import (
    UNKNOWN, Origin, fsdp_modules, has_nested_units, origins_with_callers, reshards_after_forward, uses_fsdp,
    wrap_config,
)
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts
from fsdp_lint.facts.ranks import one_rank_branch, restricted_to_some_ranks
from fsdp_lint.facts.state_dicts import state_dict_type_set_for
from fsdp_lint.facts.summon import summon_ids, summons_entering
from fsdp_lint.facts.values import first_positional
from fsdp_lint.facts.dtensors import GATHERS as DTENSOR_GATHERS, sharded_norm, sharded_parameter

DIST_COLLECTIVES = torch_api.DIST_COLLECTIVES
# torchtune 0.6.1 training/_distributed.py: full_tensor() and a barrier per parameter
# (l. 342-386), the optimizer state likewise (l. 388-409): every rank must call them.
LIBRARY_GATHERS = frozenset(
    {
        f"torchtune.training.{name}"
        for name in ("gather_cpu_state_dict", "get_full_optimizer_state_dict", "get_full_model_state_dict")
    }
    | {
        f"torchtune.training._distributed.{name}"
        for name in ("gather_cpu_state_dict", "get_full_optimizer_state_dict", "get_full_model_state_dict")
    }
)
# DTensor methods that run a collective over the tensor's mesh (facts.dtensors: on a sharded
# gradient norm or parameter)
DTENSOR_COLLECTIVES = DTENSOR_GATHERS
FSDP_OPTIM_STATE = frozenset({"optim_state_dict", "full_optim_state_dict", "sharded_optim_state_dict"})
_WRAP_WORDS = ("shard", "fsdp", "wrap", "parallelize")
# ... but not a checkpoint helper named for the sharded model it takes (``save_sharded_checkpoint``)
_NOT_WRAP_WORDS = ("save", "load", "checkpoint", "ckpt", "state", "unwrap", "gather", "export")


GATHER_ADVICE = "gather on every rank, then save under the rank test"
EVERY_RANK_ADVICE = "every rank must call it: move it out of the rank test"
# torch.distributed collectives that hand this rank data gathered from every rank: the value
# can be computed on every rank and then used under the rank test
DIST_GATHERS = frozenset({"all_gather", "all_gather_into_tensor", "all_gather_object", "gather", "gather_object"})
# framework methods (``facts.frameworks``) that gather a state dict or tensors; the others
# (``wait_for_everyone``, ``fabric.barrier``, ``save``/``load``/``save_state``...) synchronise
FRAMEWORK_GATHERS = frozenset({"get_state_dict", "gather", "gather_for_metrics", "pad_across_processes", "reduce"})


@dataclass
class Collective:
    what: str  # words for the message
    # a torch.distributed collective's name, or ``forward:model`` for a forward: the same
    # call on the other ranks' path balances it
    balanced_by: Optional[str] = None
    advice: str = GATHER_ADVICE  # what to do instead, fitted to the call


def framework_call(words: str, method: str) -> Collective:
    """A framework call every rank must make (``facts.frameworks.framework_collective``'s words)."""
    return Collective(words, advice=GATHER_ADVICE if method in FRAMEWORK_GATHERS else "move it out of the rank test")


def _model_arg(call: cst.Call) -> Optional[cst.BaseExpression]:
    first = first_positional(call)
    if first is None:
        first = next((a for a in call.args if a.keyword is not None and a.keyword.value in ("model", "module")), None)
    return first.value if first is not None else None


def sharded_later(facts: ModuleFacts, expr: Optional[cst.BaseExpression], site: CallSite) -> bool:
    """``expr`` is handed to a wrapping call later in the same function (``fully_shard(model)``,
    ``FSDP(model)``, a helper of this file or the project that shards it (``fsdp_modules``),
    or a function named for it whose sharding may be out of sight: ``prepare_fully_shard(model)``,
    ``apply_fsdp(model)``, ``shard_model(model)``, not ``save_sharded_checkpoint(model)``): at
    ``site`` it is not sharded yet."""
    name = dotted_name(expr) if expr is not None else None
    if name is None:
        return False
    modules = fsdp_modules(facts)
    known = facts.cached("wrap_call_ids", lambda f: {id(w.site.node) for w in modules.wraps + modules.fsdp2_wraps})
    for later in facts.calls:
        if later.order <= site.order or later.ctx.function is not site.ctx.function:
            continue
        if not any(dotted_name(a.value) == name for a in later.node.args):
            continue
        if id(later.node) in known:
            return True  # ``FSDP(model)``, ``fully_shard(model)``, a helper of the file or project that shards it
        func = later.node.func
        dotted = dotted_name(func) or ""
        if isinstance(func, cst.Name) and func.value in facts.functions:
            bodies = {id(info.node) for info in facts.functions[func.value]}
            if any(id(w.site.ctx.function) in bodies for w in modules.wraps + modules.fsdp2_wraps):
                return True  # a helper of this file that wraps or shards (``return FSDP(model, ...)``)
        callee = dotted.rsplit(".", 1)[-1].lower()
        if any(w in callee for w in _WRAP_WORDS) and not any(w in callee for w in _NOT_WRAP_WORDS):
            return True  # ``apply_fsdp(model)``, ``prepare_fully_shard(model)`` (its sharding may be out of sight)
    return False


def on_subgroup(shape: CallShape, name: str) -> bool:
    """A ``group=``/``process_group=`` other than None (or a group passed by position: the
    first argument of ``barrier``, the third of the others) restricts the collective
    ``name`` to the group's members.  Read off the call's shape (``call_shape``): the
    ``ast`` gate asks this same definition."""
    for keyword, value in shape.keywords.items():
        if keyword in ("group", "process_group"):
            return value is not None
    return shape.positional > (0 if name in ("barrier", "monitored_barrier") else 2)


def _rank_side(facts: ModuleFacts, site: CallSite):
    """(the innermost rank test's ``If``, "one" | "others"): which side of a rank test the
    call is on; None when no rank test encloses it."""
    for guard in reversed(site.ctx.guards):
        branch = one_rank_branch(guard.node.test, facts, site.ctx, guard.order)
        if branch is not None:
            return guard.node, ("one" if branch == guard.branch else "others")
    return None


def on_other_ranks_side(facts: ModuleFacts, site: CallSite) -> bool:
    """``site`` runs on the side of a rank test that excludes the one rank (the ``else`` of
    ``if rank == 0:``, the body of ``if rank != 0:``)."""
    side = _rank_side(facts, site)
    return side is not None and side[1] == "others"


def balance_key(facts: ModuleFacts, site: CallSite) -> Optional[str]:
    """What pairs a call with the same call on the other ranks' path: its qualified name (a
    helper's too: ``save_checkpoint`` in both arms of ``if is_main: ... else: ...``), or
    for the forward of a module ``model(x)``, ``forward:model``."""
    qualname = facts.qualname(site.node.func)
    if qualname:
        return qualname
    name = dotted_name(site.node.func)
    return FORWARD_KEY + name if name is not None else None


FORWARD_KEY = "forward:"


def balanced(facts: ModuleFacts, site: CallSite, qualname: str) -> bool:
    """The other ranks call the same collective on their own path, decided per pair: the
    call in the ``else`` of the same rank test (``if rank == 0: ...; dist.barrier()``
    ``else: dist.barrier()``), or, in source order, a call in another rank test's branch
    that excludes the one rank (``if local_rank not in (-1, 0): dist.barrier()`` ...
    ``if local_rank == 0: dist.barrier()``).  A call pairs with one call at most: a balanced
    pair earlier in the function does not balance a later one-rank call."""
    calls = []
    for other in facts.calls:
        if other.ctx.function is not site.ctx.function or balance_key(facts, other) != qualname:
            continue
        side = _rank_side(facts, other)
        if side is not None:
            calls.append((other, side[0], side[1]))
    calls.sort(key=lambda c: c[0].order)
    paired = set()
    for one, test, side in calls:  # the if and its else first
        if side != "one" or id(one) in paired:
            continue
        match = next((o for o, t, s in calls if t is test and s == "others" and id(o) not in paired), None)
        if match is not None:
            paired.update((id(one), id(match)))
    ones = [c for c, _t, s in calls if s == "one" and id(c) not in paired]
    others = [c for c, _t, s in calls if s == "others" and id(c) not in paired]
    for one, other in zip(ones, others):  # then separate rank tests, in order
        paired.update((id(one), id(other)))
    return id(site) in paired


def _not_sharded_here(facts: ModuleFacts, expr, site: CallSite) -> bool:
    if sharded_later(facts, expr, site):
        return True
    found = origins_with_callers(facts, expr, site.ctx, site.order)
    return found.complete and not found.wraps


def _inside_own_summon(facts: ModuleFacts, model, site: CallSite) -> bool:
    """``model.state_dict()`` inside ``with FSDP.summon_full_params(model)`` (recursive, the
    default): its flat parameters are already unsharded, and the state dict's own unshard
    skips a handle in that state (``_unshard_fsdp_state_params``: "the handle may be already
    unsharded"), so no rank all-gathers there; measured on CPU/gloo, torch 2.13.0, with
    ``rank0_only=True`` and without, ``use_orig_params`` True and False."""
    name = dotted_name(model)
    if name is None:
        return False
    for block in site.ctx.withs:
        for summon in summons_entering(facts, block):
            if summon.module_name == name and summon.value("recurse") is True:
                return True
    return False


def gathers_full_state_dict(facts: ModuleFacts, model: cst.BaseExpression, site: CallSite) -> bool:
    """``model.state_dict()`` at ``site`` all-gathers: ``model`` is FSDP1-wrapped there, or
    is the inner module (``root.module``) of an FSDP1 root given an ``auto_wrap_policy``
    (its nested units gather; without them the inner module's state dict gathers nothing) (or,
    where its origin cannot be followed, a module whose state-dict type the code sets: in an
    enclosing ``FSDP.state_dict_type`` block, elsewhere in its class for ``self.model``, in
    its function for a name; or a name the file binds to an FSDP1 module; a value
    followed to a call the file cannot see into, ``model = config.instantiate(cfg)``, is not
    taken for the FSDP module the same name holds elsewhere: ``Origins.opaque``); a
    parameter that callers in other project files pass FSDP1 modules for
    (``Origins.external``) is one too."""
    if dotted_name(model) is not None and tested_not_instance(facts, site.ctx, dotted_name(model), torch_api.FSDP_CLASS):
        return False  # the ``else`` of ``if isinstance(model, FSDP):``
    found = origins_with_callers(facts, model, site.ctx, site.order)
    if found.fsdp1 or any(not e.fsdp2 for e in found.external):  # also as callers in other files pass it
        return True
    if found.inner:  # ``root.module``: its own FSDP units gather, the root's flat parameter does not
        return any(has_nested_units(facts, o) for o in found.inner)
    if found.complete or found.wraps or found.plain:
        return False
    # unknown origin: the file's own word that it is FSDP1 (it sets the state-dict type of
    # that module, around the site or elsewhere in its class or function; else a name it binds to an FSDP1 module, unless the
    # value comes from a call the file cannot see into)
    return state_dict_type_set_for(facts, model, site) or (
        not found.opaque and dotted_name(model) in fsdp_modules(facts).fsdp1 and _may_hold_wrap(facts, dotted_name(model), site))


def _may_hold_wrap(facts: ModuleFacts, name: str, site: CallSite) -> bool:
    """Some FSDP1 wrap bound to ``name`` may reach ``site``: not one of its own function that
    can never run with it (``if is_fsdp: model = FSDP(model)`` and, under ``if not
    is_distributed or is_ddp:``, ``model.state_dict()``)."""
    own = [w for w in fsdp_modules(facts).wraps if w.target == name]
    if not own:
        return True  # an annotation or a project helper's wrap: nothing to rule out
    return any(not (w.site.ctx.function is site.ctx.function and exclusive(w.site.ctx, site.ctx)) for w in own)


FORWARD_ADVICE = ("run the forward on every rank (each on its own batch) and keep only what uses its "
                  "result (logging, saving) under the rank test")


# FSDP1 strategies whose non-root units free their parameters after the forward
# (``RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES``, fsdp/_runtime_utils.py)
RESHARD_AFTER_FORWARD = frozenset({"FULL_SHARD", "HYBRID_SHARD"})


def _fsdp2_nested(facts: ModuleFacts, root) -> bool:
    """Another ``fully_shard`` of the file (a layer's, or one in a loop over layers) whose
    units free their parameters after the forward (``reshard_after_forward`` left out or
    True)."""
    for wrap in fsdp_modules(facts).fsdp2_wraps:
        if wrap is root.wrap and not wrap.site.ctx.loops:
            continue
        if reshards_after_forward(facts, Origin(wrap)) in (None, True):
            return True
    return False


def _frees_after_forward(facts: ModuleFacts, origin: Origin) -> bool:
    """An FSDP1 construction with nested units and a strategy (one it may have, read) that
    frees their parameters after each forward."""
    sharding = wrap_config(facts, origin).sharding
    return sharding is not UNKNOWN and bool(sharding & RESHARD_AFTER_FORWARD) and has_nested_units(facts, origin)


def may_forward_gather(facts: ModuleFacts) -> bool:
    """Some construction of the file is one whose forward ``forward_gathers`` counts: an
    FSDP1 wrap with nested units and a strategy that reshards after forward, or a
    ``fully_shard`` of a file that shards layers that reshard.  Asked first, once per file."""
    def compute(f: ModuleFacts) -> bool:
        modules = fsdp_modules(f)
        for wrap in modules.fsdp2_wraps:
            if _fsdp2_nested(f, Origin(wrap)):
                return True
        return any(_frees_after_forward(f, Origin(wrap)) for wrap in modules.wraps if not wrap.fsdp2)

    return facts.cached("may_forward_gather", compute)


def forward_gathers(facts: ModuleFacts, module: cst.BaseExpression, site: CallSite) -> bool:
    """Calling ``module`` at ``site`` (its forward through ``__call__``) runs all-gathers
    that a forward on the other ranks does not match: the module is sharded into nested
    units that free their parameters after each forward, so a forward that no backward
    follows (an evaluation on one rank) all-gathers them again in the next forward.  On some
    path it is an FSDP1 root given an ``auto_wrap_policy`` with ``FULL_SHARD`` (the default)
    or ``HYBRID_SHARD`` among its possible strategies, or its inner module
    (``root.module``); or a module sharded with FSDP2 ``fully_shard`` in a file that also
    shards its layers with the default ``reshard_after_forward``.  A single FSDP unit does
    not count: the root keeps its parameters gathered after a forward, and the one rank's
    extra all-gather pairs with the other ranks' next one (``SHARD_GRAD_OP`` likewise keeps
    them until a backward); measured on CPU/gloo, torch 2.13.0 (``verify FSD104 --form
    forward``).  Not inside a ``summon_full_params`` of that module entered by every rank.
    A value the file cannot follow, or a strategy it cannot read, is no such module
    (precision first)."""
    if dotted_name(module) is None or not uses_fsdp(facts) or not may_forward_gather(facts):
        return False
    if _inside_own_summon(facts, module, site):
        return False
    found = origins_with_callers(facts, module, site.ctx, site.order)
    if any(_fsdp2_nested(facts, o) for o in found.fsdp2):
        return True
    return any(_frees_after_forward(facts, origin) for origin in found.fsdp1 + found.inner)


def method_forward_gathers(facts: ModuleFacts, module: cst.BaseExpression, name: str, site: CallSite):
    """(```Class.method```, ``self.X``) when ``module.name(...)`` at ``site`` runs the forward
    of nested FSDP units that free their parameters after it, as ``forward_gathers`` counts a
    call of the module: the module (or its inner one, ``root.module``) comes from such an
    FSDP1 construction, and its class (of this file or another project file) has a method
    ``name`` that runs a submodule holding those units (``forward_methods.runs_forward``:
    ``for block in self.blocks: block(x)``, ``self(...)``).  None otherwise (a class not
    found: precision first)."""
    if dotted_name(module) is None or not uses_fsdp(facts) or not may_forward_gather(facts):
        return None
    if _inside_own_summon(facts, module, site):
        return None
    found = origins_with_callers(facts, module, site.ctx, site.order)
    for origin in found.fsdp1 + found.inner:
        if not _frees_after_forward(facts, origin):
            continue
        method = model_class_method(facts, origin, name)
        if method is not None and method["forward"]:
            return method["label"], method["forward"]
    return None


def not_sharded_here(facts: ModuleFacts, model, site: CallSite) -> bool:
    """``model`` is proven not sharded at ``site`` (sharded later in the function, or every
    origin followed and none a wrap)."""
    return _not_sharded_here(facts, model, site)


def in_fsdp_program(facts: ModuleFacts) -> bool:
    """The module is part of an FSDP program: it builds an FSDP model, or gathers one with
    ``summon_full_params`` (a helper module such as ``fsdp_model_params.py``, handed the
    model by its caller).  Where ``torch.distributed`` collectives count for FSD104."""
    return uses_fsdp(facts) or bool(summon_ids(facts))


# the qualified names of ``DIST_COLLECTIVES`` (``torch.distributed.barrier``): on the default
# group unless a ``group=`` says otherwise (``on_subgroup``); the ``ast`` gate reads the same set
DEFAULT_GROUP_COLLECTIVES = frozenset(f"torch.distributed.{name}" for name in DIST_COLLECTIVES)


def every_rank_collective(facts: ModuleFacts, site: CallSite) -> bool:
    """``site`` is a ``torch.distributed`` collective on the default group (``dist.barrier()``,
    ``dist.all_reduce(t)``, no ``group=``): every rank of the job must make it, so code that
    makes it runs on every rank (where it does not hang)."""
    qualname = facts.qualname(site.node.func) or ""
    return qualname in DEFAULT_GROUP_COLLECTIVES and not on_subgroup(of_cst(site.node), qualname.rsplit(".", 1)[-1])


def fsdp_training_step(facts: ModuleFacts, function) -> Optional[cst.Call]:
    """The ``X.backward()`` of ``function`` (None: module level) when the function also calls
    a module that an FSDP wrap of this file reaches (FSDP1 or FSDP2, also through the
    callers of the function in the file: ``train_one_epoch(model, ...)``): that backward
    reduces the gradients over every rank, so every rank runs the function, or the job
    hangs in it.  Both calls stand under no rank test; the first such backward, or None."""
    def compute(f: ModuleFacts):
        found = {}
        for site in f.calls:
            func = site.node.func
            if site.attr == "backward" and isinstance(func, cst.Attribute) and not f.qualname(func) \
                    and id(site.ctx.function) not in found and not restricted_to_some_ranks(f, site.ctx):
                found[id(site.ctx.function)] = site.node
        steps = {}
        for site in f.calls:  # a forward of an FSDP module in such a function
            key = id(site.ctx.function)
            func = site.node.func
            if key in found and key not in steps and isinstance(func, (cst.Name, cst.Attribute)) \
                    and not f.qualname(func) and dotted_name(func) is not None \
                    and not restricted_to_some_ranks(f, site.ctx) \
                    and origins_with_callers(f, func, site.ctx, site.order).wraps:
                steps[key] = found[key]
        return steps

    if not uses_fsdp(facts):
        return None
    return facts.cached("fsdp_training_steps", compute).get(id(function))


def torch_collective(facts: ModuleFacts, site: CallSite) -> Optional[Collective]:
    node = site.node
    func = node.func
    if id(node) in summon_ids(facts):
        if sharded_later(facts, _model_arg(node), site):
            return None
        return Collective("`summon_full_params` (an all-gather)")
    qualname = facts.qualname(func) or ""
    if site.attr == "state_dict" and isinstance(func, cst.Attribute) and not node.args:
        if _inside_own_summon(facts, func.value, site):
            return None
        if gathers_full_state_dict(facts, func.value, site):
            # the other ranks' ``model.state_dict()`` of the same module on their side of
            # the rank test gathers with it (``if not is_main: model.state_dict(); return``)
            name = dotted_name(func)
            return Collective("a full FSDP state dict (an all-gather)",
                              balanced_by=FORWARD_KEY + name if name is not None else None)
        return None
    if site.attr == "load_state_dict" and isinstance(func, cst.Attribute) and not qualname:
        # FSDP1's full and sharded pre-load hooks unshard the parameters (an all-gather,
        # torch/distributed/fsdp/_state_dict_utils.py); a module wrapped later in the
        # function (rank 0 loads, then ``FSDP(..., sync_module_states=True)``) is not FSDP yet
        if sharded_later(facts, func.value, site) or _inside_own_summon(facts, func.value, site):
            return None
        if gathers_full_state_dict(facts, func.value, site):
            return Collective(
                "`load_state_dict` into an FSDP module (its load hooks all-gather the parameters)",
                advice="load on every rank, or load the plain module on rank 0 before wrapping it with "
                       "`sync_module_states=True`",
            )
        return None
    if site.attr in DTENSOR_COLLECTIVES and isinstance(func, cst.Attribute) and not qualname and (
        sharded_norm(facts, func.value, site) is not None or sharded_parameter(facts, func.value, site)
    ):
        return Collective(f"`{site.attr}` of a DTensor (a collective over its mesh)",
                          advice="compute it on every rank before the rank test, then read the result under it")
    if not qualname and isinstance(func, (cst.Name, cst.Attribute)) and forward_gathers(facts, func, site):
        return Collective(f"the forward of `{dotted_name(func)}` (its FSDP units all-gather their "
                          "parameters and free them again)", advice=FORWARD_ADVICE,
                          balanced_by=FORWARD_KEY + dotted_name(func))
    if not qualname and isinstance(func, cst.Attribute) and site.attr not in torch_api.NN_MODULE_METHODS:
        runs = method_forward_gathers(facts, func.value, site.attr, site)
        if runs is not None:
            name = dotted_name(func.value)
            return Collective(f"`{name}.{site.attr}(...)` ({runs[0]} runs `{runs[1]}`, whose FSDP units all-gather "
                              "their parameters and free them again)", advice=FORWARD_ADVICE,
                              balanced_by=FORWARD_KEY + name)
    if qualname in LIBRARY_GATHERS:
        return Collective(f"`{site.attr}` (it gathers on every rank)")
    if qualname in torch_api.FULL_STATE_DICT_FUNCTIONS or (
        site.attr in FSDP_OPTIM_STATE and any(qualname == f"{c}.{site.attr}" for c in torch_api.FSDP_CLASS)
    ):
        if _not_sharded_here(facts, _model_arg(node), site):
            return None
        return Collective(f"`{site.attr}` (a collective)")
    if qualname in DEFAULT_GROUP_COLLECTIVES and in_fsdp_program(facts):
        name = qualname.rsplit(".", 1)[-1]
        if on_subgroup(of_cst(node), name):
            return None  # only the group's members take part
        return Collective(f"`{name}` (a collective)", balanced_by=qualname,
                          advice=GATHER_ADVICE if name in DIST_GATHERS else EVERY_RANK_ADVICE)
    return None
