"""What a helper function does to the arguments it is called with: the summary the project
index keeps per top-level function (``fsdp_lint.project``), and the one ``facts.helpers``
computes for the functions of the linted file itself.

A summary says only what the helper does on every call (the call stands in the helper's
own body, under no ``if``, loop, conditional expression, ``and``/``or`` or lambda):

- ``collective``: it runs a collective (full state dict, ``summon_full_params``,
  ``get_model_state_dict``, a ``torch.distributed`` collective, a framework's save or
  barrier).  ``model`` names the parameter the collective is on when the caller's
  argument decides (``needs``: "fsdp1", a ``state_dict()`` gathers only on an FSDP1
  module; "sharded", unless the caller's module is proven not sharded; "fsdp-file", a
  ``torch.distributed`` collective counts only where the caller's file uses FSDP, as in
  ``facts.collectives``; "forward", a call of a module it is passed (``forward_of``: the
  parameters so called), a collective where the caller's module is sharded with FSDP;
  "fsdp2", a DTensor gather (``.full_tensor()``) over the
  parameters of a module counts where the caller's module is sharded with ``fully_shard``);
- ``shards``: the parameter it shards in place with FSDP2 ``fully_shard``;
- ``saves``: it writes a file with ``torch.save`` / safetensors, under no rank test, to
  the path its parameter ``save_path`` gives (None: a path of its own, not per rank);
- ``builds_optimizer``: it builds an optimizer;
- ``wraps``: the parameter it returns wrapped in FSDP1 (``return FSDP(model, ...)``, on
  every call, every ``return`` that wrap), or ``wrap_built``: it returns so a module of
  its own making (``return FSDP(Net(cfg), ...)``), each with that wrap's configuration
  where it is the same on every path (``wrap_offload``: ``cpu_offload=CPUOffload(offload_params=True)``;
  ``wrap_orig_params``; ``wrap_sharding``: the ``ShardingStrategy`` members it may be;
  ``wrap_nested``: given an ``auto_wrap_policy``, so it holds nested units; None: not known
  here, e.g. read from the helper's own arguments).

Where a place is a node of this file (``file`` empty) or a line of ``file`` (a path
relative to the project root).  Nothing here follows a call into another file: a
summary is computed from its own file alone, so it is cached by that file's content.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Dict, Optional, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import ModuleFacts


@dataclass
class Helper:
    name: str
    params: Tuple[str, ...] = ()
    file: str = ""  # the helper's file, relative to the project root; "" for the linted file
    line: object = None  # its ``def``
    collective: str = ""
    collective_at: object = None
    advice: str = ""
    model: Optional[str] = None
    needs: str = ""
    shards: Optional[str] = None
    shard_at: object = None
    saves: str = ""
    save_at: object = None
    save_path: Optional[str] = None
    builds_optimizer: bool = False
    wraps: Optional[str] = None
    wrap_built: bool = False  # it returns an FSDP1 wrap of a module it builds (no parameter of it)
    wrap_at: object = None
    wrap_offload: Optional[bool] = None
    wrap_orig_params: Optional[bool] = None
    wrap_sharding: Optional[Tuple[str, ...]] = None
    wrap_nested: Optional[bool] = None  # True: that wrap is given an auto-wrap policy (nested units)
    # the ``ShardingStrategy`` members its every ``return`` gives (``get_sharding_strategy()``
    # choosing one from the command line): what a wrap given its result may be
    strategies: Optional[Tuple[str, ...]] = None
    balanced_by: Optional[str] = None  # a ``torch.distributed`` collective's name: its caller may balance it
    forward_of: Tuple[str, ...] = ()  # ``needs="forward"``: the parameters whose module it calls
    forward: bool = False  # its collective is a forward (this file's helpers only: ``project`` drops it)
    kinds: Tuple[str, ...] = field(default=())

    def place(self, at, row) -> str:
        """``parallelize.py:42`` for a helper of another file, ``line 42`` for this one's
        (``row``: the reporter's line of a node)."""
        if self.file:
            return f"{self.file}:{at}"
        return f"line {row(at)}"

    def to_json(self) -> dict:
        """The fields as they are (no copy: places stay this file's nodes until the index
        turns them into lines)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def from_json(data: dict, file: str) -> "Helper":
        sharding, strategies = data.get("wrap_sharding"), data.get("strategies")
        helper = Helper(**{**data, "params": tuple(data.get("params", ())), "kinds": tuple(data.get("kinds", ())),
                           "forward_of": tuple(data.get("forward_of", ())),
                           "wrap_sharding": tuple(sharding) if sharding is not None else None,
                           "strategies": tuple(strategies) if strategies is not None else None})
        helper.file = file
        return helper


def kinds_of(helper: Helper) -> Tuple[str, ...]:
    """What the gate reads (``screen``, ``engine.wanted_rules``): "collective", "shards",
    "saves", "wraps" (returns an FSDP1 wrap), "offloads" (that wrap offloads its parameters);
    and "strategy" (it returns a sharding strategy: no rule is woken by it alone)."""
    found = []
    if helper.collective:
        found.append("collective")
    if helper.shards is not None:
        found.append("shards")
    if helper.saves:
        found.append("saves")
    if helper.wraps is not None or helper.wrap_built:
        found.append("wraps")
        if helper.wrap_offload:
            found.append("offloads")
    if helper.strategies:
        found.append("strategy")
    return tuple(found)


def project_helper(facts: ModuleFacts, func: cst.BaseExpression) -> Optional[Helper]:
    """The summary of the project function a call's ``func`` names through this file's
    imports (absolute within the project, relative, ``src/`` layouts: ``fsdp_lint.project``),
    or None (no project, not a project function, nothing it does that a rule reads)."""
    project = facts.project
    if project is None:
        return None
    spec = facts.imports.project_spec(dotted_name(func))
    if spec is None:
        return None
    return project.helper(spec)


def argument(helper: Helper, call: cst.Call, param: Optional[str]) -> Optional[cst.BaseExpression]:
    """The expression ``call`` passes for ``param`` of ``helper`` (positional or keyword);
    None when it cannot be told (``*args``/``**kwargs``, a default)."""
    if param is None or param not in helper.params:
        return None
    position = helper.params.index(param)
    index = 0
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is not None:
            if arg.keyword.value == param:
                return arg.value
            continue
        if index == position:
            return arg.value
        index += 1
    return None


def summaries_digest(helpers: Dict[str, Helper]) -> str:
    """A stable text of what a module's summaries say (the project index's cache tags)."""
    return repr(sorted((name, sorted(h.to_json().items(), key=lambda kv: kv[0])) for name, h in helpers.items()))
