"""FSDP2 mixed-precision policies: what ``fully_shard(m, mp_policy=...)`` asks for.

``mp_policy(facts, wrap)``: the ``MixedPrecisionPolicy`` a ``fully_shard`` construction gets
(through names, ``**kwargs`` dicts and conditional values, ``fsdp_modules.argument``), as a
``Policy``: ``given`` (an ``mp_policy`` argument is there; absent: FSDP2's default, no cast)
and its ``param_dtype`` (canonical ``torch.<dtype>``, None for no cast); ``UNKNOWN`` when a
value is not readable or the paths disagree.  FSD113 reads the dtype (weights already in
it), FSD115 compares a root's policy with its submodules'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.dtypes import canonical_dtype
from fsdp_lint.facts.fsdp_modules import FsdpWrap, Origin, argument
from fsdp_lint.facts.model import ModuleFacts
from fsdp_lint.facts.values import UNKNOWN, keyword_args


@dataclass(frozen=True)
class Policy:
    given: bool  # an ``mp_policy`` argument (False: the default, parameters' own dtype)
    param_dtype: Optional[str]  # ``torch.bfloat16``...; None: no cast
    node: Optional[cst.CSTNode] = None  # the ``MixedPrecisionPolicy(...)`` call


NO_POLICY = Policy(False, None)


def _read(facts: ModuleFacts, wrap: FsdpWrap):
    arg = argument(facts, Origin(wrap), "mp_policy")
    if not arg.known or not arg.sources.complete:
        return UNKNOWN
    if not arg.sources.found:
        return NO_POLICY
    policies = []
    for source in arg.sources.found:
        call = source.expr
        if isinstance(call, cst.Name) and call.value == "None":
            policies.append(NO_POLICY)
            continue
        if not isinstance(call, cst.Call) or facts.qualname(call.func) not in torch_api.MIXED_PRECISION_POLICY:
            return UNKNOWN
        if any(a.star for a in call.args):
            return UNKNOWN
        param = keyword_args(call).get("param_dtype")
        if param is None and call.args and call.args[0].keyword is None:
            param = call.args[0]  # MixedPrecisionPolicy(param_dtype, reduce_dtype, ...)
        if param is None or (isinstance(param.value, cst.Name) and param.value.value == "None"):
            dtype = None
        else:
            dtype = canonical_dtype(facts, param.value)
            if dtype is None:
                return UNKNOWN
        policies.append(Policy(True, dtype, call))
    dtypes = {(p.given, p.param_dtype) for p in policies}
    if len(dtypes) != 1:
        return UNKNOWN
    return policies[0]


def mp_policy(facts: ModuleFacts, wrap: FsdpWrap):
    """The wrap's ``Policy``, or ``UNKNOWN``."""
    return facts.cached(("mp_policy", id(wrap.site.node), id(wrap)), lambda f: _read(f, wrap))
