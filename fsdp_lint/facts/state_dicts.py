"""Where a file sets an FSDP1 module's state-dict type, and with which configuration:
``FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(...))``
(a context manager) and ``FSDP.set_state_dict_type(...)`` (until changed), the
configuration passed directly or through names.  Computed once per file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.conditions import tests_type_of
from fsdp_lint.facts.flow import exclusive
from fsdp_lint.facts.dataflow import Source, Sources, sources
from fsdp_lint.facts.fsdp_modules import Origins, origins_with_callers
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts
from fsdp_lint.facts.values import UNKNOWN, bind_arguments, literal_bool

# FullStateDictConfig(offload_to_cpu=False, rank0_only=False): a dataclass, positional too
_FULL_CONFIG_PARAMS = ("offload_to_cpu", "rank0_only")


@dataclass
class StateDictSetting:
    site: CallSite
    module_expr: Optional[cst.BaseExpression]
    configs: Sources  # what ``state_dict_config`` may be (empty and complete: not passed)

    def origins(self, facts: ModuleFacts) -> Origins:
        """The FSDP constructions the module may come from (``facts.fsdp_modules``); in a
        function, also through each call of it in this file (a ``save(model, path)``
        helper)."""
        return origins_with_callers(facts, self.module_expr, self.site.ctx, self.site.order)


def _compute(facts: ModuleFacts) -> List[StateDictSetting]:
    found = []
    for site in facts.calls:
        if facts.qualname(site.node.func) not in torch_api.STATE_DICT_TYPE_METHODS:
            continue
        bound, _ = bind_arguments(site.node.args, torch_api.STATE_DICT_TYPE_PARAMS)
        module = bound.get("module")
        config = bound.get("state_dict_config")
        configs = Sources() if config is None else sources(facts, config.value, site.ctx, site.order)
        found.append(StateDictSetting(site, module.value if module is not None else None, configs))
    return found


def state_dict_settings(facts: ModuleFacts) -> List[StateDictSetting]:
    return facts.cached("state_dict_settings", _compute)


def inside_own_state_dict_type(facts: ModuleFacts, model: cst.BaseExpression, site: CallSite) -> bool:
    """``site`` runs inside ``with FSDP.state_dict_type(m, ...)`` whose module ``m`` is the
    same dotted name as ``model``: the file itself treats that module as FSDP1 there (the
    context sets the state-dict type of its FSDP1 units), even where its construction is in
    another file (``model = setup_fsdp(model, cfg)``, ``self.model`` set by a caller)."""
    name = dotted_name(model)
    if name is None or not site.ctx.withs:
        return False
    blocks = {id(block) for block in site.ctx.withs}
    return any(
        setting.site.entered_by is not None and id(setting.site.entered_by) in blocks
        and setting.module_expr is not None and dotted_name(setting.module_expr) == name
        for setting in state_dict_settings(facts)
    )


def state_dict_type_set_for(facts: ModuleFacts, model: cst.BaseExpression, site: CallSite) -> bool:
    """``inside_own_state_dict_type``, or the code around ``site`` sets the state-dict type of
    the same module elsewhere, as FSDP1 code does for its model: an attribute
    (``self.model``) anywhere in the same class, a name in the same function; not where
    that setting or ``site`` stands under a test of what kind of module it is (``if
    isinstance(self.model, FSDP):``), which says the module may be another kind, nor where
    the two cannot both run (the ``else`` of ``if use_fsdp:``)."""
    if inside_own_state_dict_type(facts, model, site):
        return True
    name = dotted_name(model)
    if name is None or tests_type_of(site.ctx, name):
        return False
    own_class = name.startswith("self.") and site.ctx.class_def is not None
    for setting in state_dict_settings(facts):
        if setting.module_expr is None or dotted_name(setting.module_expr) != name or tests_type_of(setting.site.ctx, name):
            continue
        where = setting.site.ctx
        if exclusive(where, site.ctx):
            continue  # ``if use_fsdp: with FSDP.state_dict_type(m): ...`` and its ``else``
        if (where.class_def is site.ctx.class_def) if own_class else (where.function is site.ctx.function):
            return True
    return False


def full_config_offloads(facts: ModuleFacts, source: Source) -> object:
    """True when ``source`` is ``FullStateDictConfig(offload_to_cpu=True, ...)`` (the value
    followed through names), False for a full config that does not offload, UNKNOWN for
    anything else."""
    expr = source.expr
    if not isinstance(expr, cst.Call) or facts.qualname(expr.func) not in torch_api.FULL_STATE_DICT_CONFIG:
        return UNKNOWN
    bound, opaque = bind_arguments(expr.args, _FULL_CONFIG_PARAMS)
    arg = bound.get("offload_to_cpu")
    if arg is None:
        return UNKNOWN if opaque else False
    values = {literal_bool(s.expr) for s in sources(facts, arg.value, source.ctx, source.order, source.via).found}
    return True if values == {True} else (False if values == {False} else UNKNOWN)


__all__ = ["StateDictSetting", "state_dict_settings", "full_config_offloads"]
