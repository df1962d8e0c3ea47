"""What a file passes to the functions of other project files: the FSDP modules among the
arguments of its calls of imported project functions.

Real projects wrap the model in the entry script and hand it to a training loop, a clipping
or a checkpoint helper of another module (``train(model, optimizer, loader)`` from
``train_utils.py``).  Read from the caller's side, with the caller's own facts (its
``fsdp_modules.origins_with_callers``), this says, per call: which argument (by position
or keyword) holds an FSDP1 module (with the sharding strategies its wrap may have) or an
FSDP2 one, and where that wrap is.  ``fsdp_lint.project`` keeps these records per file and
hands the callee's file the records of calls of its functions (``ProjectView.passed``),
which ``fsdp_modules.origins_with_callers`` turns into ``ExternalWrap``s of a parameter.

Only what the caller's file shows counts: an argument whose every origin was followed to
FSDP wraps of that file (or its helpers); anything else says nothing (the policy for the
unknown: precision first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from fsdp_lint.facts.fsdp_modules import origins_with_callers, wrap_config
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import ModuleFacts


# ``ProjectView.gate_kinds``' key for what other files may pass to this file's functions
# (no dotted name a call can write): the gate's "fsdp1_model" holds under it
PASSED = "<passed>"


@dataclass(frozen=True)
class ExternalWrap:
    """An FSDP module a caller in another file passes for a parameter."""

    fsdp2: bool
    sharding: Optional[Tuple[str, ...]]  # FSDP1: the strategies its wrap may have; None: not known
    place: str  # ``train.py:23``: the call that passes it


def passed_modules(facts: ModuleFacts, row) -> List[dict]:
    """One record per call of an imported project function that passes an FSDP module:
    {"spec": what the call names through the imports, "line": the call's line, "args":
    {"0" (position) or the keyword: {"fsdp": 1 or 2, "sharding": [...] or None}}}.
    ``row``: a node's line."""
    records = []
    for site in facts.calls:
        spec = facts.imports.project_spec(dotted_name(site.node.func))
        if spec is None:
            continue
        args: Dict[str, dict] = {}
        position = 0
        for arg in site.node.args:
            if arg.star:
                if arg.star == "*":
                    break  # the positions after ``*args`` are not known
                continue
            key = arg.keyword.value if arg.keyword is not None else str(position)
            if arg.keyword is None:
                position += 1
            found = origins_with_callers(facts, arg.value, site.ctx, site.order)
            if not found.wraps or not found.complete or found.plain or found.opaque:
                continue
            if all(o.wrap.fsdp2 for o in found.wraps):
                args[key] = {"fsdp": 2, "sharding": None}
            elif not any(o.wrap.fsdp2 for o in found.wraps):
                strategies = set()
                for origin in found.wraps:
                    sharding = wrap_config(facts, origin).sharding
                    if not isinstance(sharding, set):
                        strategies = None
                        break
                    strategies |= sharding
                args[key] = {"fsdp": 1, "sharding": sorted(strategies) if strategies is not None else None}
        if args:
            records.append({"spec": spec, "line": row(site.node), "args": args})
    return records


def external_wraps(records: List[dict], params: Tuple[str, ...], param: str) -> List[ExternalWrap]:
    """The FSDP modules the calls ``records`` (of one function, with ``place`` added) pass
    for ``param`` of its parameters ``params``."""
    if param not in params:
        return []
    keys = (str(params.index(param)), param)
    found = []
    for record in records:
        for key in keys:
            data = record["args"].get(key)
            if data is not None:
                sharding = data.get("sharding")
                found.append(ExternalWrap(data["fsdp"] == 2, tuple(sharding) if sharding is not None else None,
                                          record["place"]))
    return found
