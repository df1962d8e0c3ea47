"""Every torch ``summon_full_params`` call in the module, with its arguments bound.

Two call forms are the same staticmethod call (torch/distributed/fsdp/
fully_sharded_data_parallel.py): ``FSDP.summon_full_params(m, ...)`` and the instance
form ``m.summon_full_params(m, ...)``.  fairscale's instance method
``summon_full_params(recurse, volatile)`` takes no module argument and is not torch's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import libcst as cst

from fsdp_lint.edits import remove_argument, set_keyword
from fsdp_lint.facts import torch_api
from fsdp_lint.facts.fsdp_modules import fsdp_modules, other_fsdp_imported
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, ModuleFacts
from fsdp_lint.facts.values import UNKNOWN, bind_arguments, literal_bool


@dataclass(eq=False)
class SummonCall:
    site: CallSite
    args: Dict[str, cst.Arg]
    opaque: bool  # *args/**kwargs: some arguments cannot be known

    @property
    def node(self) -> cst.Call:
        return self.site.node

    @property
    def module_name(self) -> Optional[str]:
        arg = self.args.get("module")
        return dotted_name(arg.value) if arg is not None else None

    def value(self, name: str):
        """True/False when the argument is literal or absent (its default), UNKNOWN otherwise."""
        arg = self.args.get(name)
        if arg is None:
            return UNKNOWN if self.opaque else torch_api.SUMMON_DEFAULTS[name]
        return literal_bool(arg.value)

    def is_explicit(self, name: str) -> bool:
        return name in self.args

    @property
    def block_may_mutate(self) -> bool:
        """True unless a with-statement enters this call and its body provably modifies nothing."""
        block = self.site.entered_by
        return block is None or block.mutated

    def with_argument(self, name: str, code: str) -> cst.Call:
        """The call with ``name=code`` (a positional argument is replaced where it stands)."""
        return self.with_arguments({name: code})

    def with_arguments(self, values: Dict[str, str]) -> cst.Call:
        """The call with each ``name=code``; new keywords are appended, so positions stay valid."""
        call = self.node
        for name, code in values.items():
            arg = self.args.get(name)
            position = None
            if arg is not None and arg.keyword is None:
                position = list(self.node.args).index(arg)
            call = set_keyword(call, name, code, position)
        return call

    def without_argument(self, name: str) -> cst.Call:
        """The call without ``name``; a positional one followed by others becomes ``False``."""
        arg = self.args[name]
        args = list(self.node.args)
        index = args.index(arg)
        if arg.keyword is None and index != len(args) - 1:
            return self.with_argument(name, "False")
        return remove_argument(self.node, index)


def _is_torch_summon(facts: ModuleFacts, site: CallSite) -> bool:
    func = site.node.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == torch_api.SUMMON):
        return False
    if torch_api.is_summon_qualname(facts.qualname(func)):
        return True
    receiver = dotted_name(func.value)
    if receiver is None:
        return False
    modules = fsdp_modules(facts)
    if receiver in modules.fsdp1:
        return True
    if receiver in modules.fsdp2 or other_fsdp_imported(facts):
        return False
    # An FSDP module reached some other way (a parameter, a return value): the torch
    # staticmethod called on an instance passes the module again, which fairscale's
    # method never does; require a torch FSDP import in the module as well.
    first = next((a for a in site.node.args if a.keyword is None and not a.star), None)
    return (
        first is not None
        and dotted_name(first.value) == receiver
        and facts.imports.imports_from(torch_api.FSDP_PACKAGE)
    )


def _compute(facts: ModuleFacts) -> List[SummonCall]:
    summons = []
    for site in facts.calls:
        if site.attr == torch_api.SUMMON and _is_torch_summon(facts, site):
            bound, opaque = bind_arguments(site.node.args, torch_api.SUMMON_PARAMS)
            summons.append(SummonCall(site, bound, opaque))
    return summons


def summon_calls(facts: ModuleFacts) -> List[SummonCall]:
    return facts.cached("summon_calls", _compute)
