"""Modules built on the meta device, their materialisation with ``to_empty``, and the calls
that may give the materialised parameters values.

- ``meta_built(facts, name, ctx, order)``: the binding of ``name`` (seen at ``ctx``/``order``)
  that built it on the meta device: inside ``with torch.device("meta"):`` or accelerate's
  ``with init_empty_weights():`` (any alias), or a constructor given ``device="meta"`` /
  ``device=torch.device("meta")``; an in-place ``fully_shard(name)`` or ``name =
  fully_shard(name)`` between is looked through.  None otherwise.
- ``to_empty_calls(facts)``: each ``m.to_empty(...)`` (a method call, ``m`` a dotted name).
- ``may_initialise(facts, site, module)``: whether a call may give ``module``'s parameters
  values: a re-initialisation or a load by its name (``init``, ``reset``, ``load``,
  ``restore``, ``materialize``, ``copy_``, ``fill_``, ``normal_``, ``uniform_``, ``zero_``,
  ``apply``: ``model.init_weights()``, ``m.reset_parameters()``, ``nn.init.trunc_normal_``,
  ``set_model_state_dict``, ``dcp.load``), a call that takes ``module`` (or a part of it)
  as an argument, a method of ``module`` other than those that only read or move it, a
  call of a function of this file or a method on ``self`` (their bodies are not followed:
  any of them may initialise).
  Every doubt answers "may".
"""

from __future__ import annotations

import re
from typing import List, Optional

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Binding, CallSite, Context, ModuleFacts
from fsdp_lint.facts.ranks import rank_guard
from fsdp_lint.facts.scopes import latest_binding
from fsdp_lint.facts.values import first_positional, keyword_args, literal_string
from fsdp_lint.facts.walk import push_children

INIT_EMPTY_WEIGHTS = frozenset({"accelerate.init_empty_weights", "accelerate.big_modeling.init_empty_weights"})
# a word of the callee's name (``init_weights``, ``_init_weights``, ``post_init``, ``reset_parameters``,
# ``load_state_dict``, ``dcp.load``), an in-place init (``trunc_normal_``, ``copy_``), or ``apply``
_MAY_INIT = re.compile(
    r"(^|_)(init|initiali[sz]e|reset|load|restore|materiali[sz]e)(_|$|[A-Z])|(copy|fill|normal|uniform|zero)_$|^apply$"
)
# methods of a module that only read it or move it: they give its parameters no values
READ_OR_MOVE = frozenset(
    {"train", "eval", "parameters", "named_parameters", "buffers", "named_buffers", "modules", "named_modules",
     "children", "named_children", "to", "cuda", "cpu", "zero_grad", "requires_grad_", "state_dict", "forward",
     "set_requires_gradient_sync", "set_reshard_after_forward", "reshard", "unshard", "register_forward_hook",
     "register_forward_pre_hook", "register_full_backward_hook", "num_parameters", "get_input_embeddings",
     "get_output_embeddings", "gradient_checkpointing_enable"}
)


def _meta_device(facts: ModuleFacts, expr: cst.BaseExpression) -> bool:
    if literal_string(expr) == "meta":
        return True
    if isinstance(expr, cst.Call) and facts.qualname(expr.func) in torch_api.TORCH_DEVICE:
        first = first_positional(expr)
        return first is not None and literal_string(first.value) == "meta"
    return False


def _meta_block(facts: ModuleFacts, block) -> bool:
    for item in block.node.items:
        call = item.item
        if not isinstance(call, cst.Call):
            continue
        if facts.qualname(call.func) in INIT_EMPTY_WEIGHTS or _meta_device(facts, call):
            return True
    return False


def _built_on_meta(facts: ModuleFacts, binding: Binding) -> bool:
    if any(_meta_block(facts, block) for block in binding.ctx.withs):
        return True
    value = binding.value
    if isinstance(value, cst.Call):
        device = keyword_args(value).get("device")
        return device is not None and _meta_device(facts, device.value)
    return False


def meta_built(facts: ModuleFacts, name: str, ctx: Context, order: int) -> Optional[Binding]:
    for _ in range(4):
        binding = latest_binding(facts, name, ctx, order, kinds=("assign", "with"))
        if binding is None:
            return None
        if binding.kind == "assign" and _built_on_meta(facts, binding):
            return binding
        value = binding.value
        first = first_positional(value) if isinstance(value, cst.Call) else None
        if not (first is not None and facts.qualname(value.func) in torch_api.FULLY_SHARD
                and dotted_name(first.value) == name):
            return None
        ctx, order = binding.ctx, binding.order  # ``model = fully_shard(model)``: the earlier ``model``
    return None


def to_empty_calls(facts: ModuleFacts) -> List[CallSite]:
    return [s for s in facts.calls if s.attr == "to_empty" and isinstance(s.node.func, cst.Attribute)
            and facts.qualname(s.node.func) is None and dotted_name(s.node.func.value) is not None]


def _rooted(expr: cst.CSTNode, module: str) -> bool:
    """``expr`` names ``module`` or a part of it (``model``, ``model.layers``, ``model.layers[0]``)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = dotted_name(node)
            if name is not None and (name == module or name.startswith(module + ".")):
                return True
        if isinstance(node, cst.Subscript):
            stack.append(node.value)
        elif isinstance(node, (cst.List, cst.Tuple)):
            push_children(node, stack)
    return False


def may_initialise(facts: ModuleFacts, site: CallSite, module: str) -> bool:
    func = site.node.func
    name = site.attr or ""
    qualname = facts.qualname(func) or ""
    if _MAY_INIT.search(name) or qualname.startswith("torch.nn.init."):
        return True
    if isinstance(func, cst.Name) and qualname == "" and (func.value in facts.functions or func.value in facts.classes):
        return True  # a function of this file: its body may initialise
    if isinstance(func, cst.Attribute) and dotted_name(func.value) == "self":
        return True  # a method of the object that holds the model (``self.setup_model()``)
    if isinstance(func, cst.Attribute) and _rooted(func.value, module) and name not in READ_OR_MOVE:
        return True
    return any(_rooted(arg.value, module) for arg in site.node.args)


def initialises_every_rank(facts: ModuleFacts, site: CallSite, after: CallSite) -> bool:
    """A call that ``may_initialise`` a module runs on every rank that runs ``after`` (the
    ``to_empty``): a load or re-initialisation under a rank test (``if rank == 0:
    model.load_state_dict(sd)``) fills that rank's shards only; the others keep
    uninitialised memory."""
    guard = rank_guard(facts, site.ctx)
    return guard is None or any(guard is g for g in after.ctx.guards)
