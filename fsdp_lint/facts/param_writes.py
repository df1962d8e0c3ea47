"""Which writes inside a ``summon_full_params`` block edit parameters.

A write (``facts.index`` records every one as a ``Mutation``) edits parameters when what it
writes to comes from the gathered module: the module itself (``model.fc.weight = ...``,
``model.load_state_dict(sd)``), a name bound from it without a copy (``w = model.fc.weight``,
``for p in model.parameters()``, ``for k, v in model.state_dict().items()``), or any
``.weight`` / ``.bias`` / ``.data`` / ``.grad`` chain.  Writes to anything else (a dict of
CPU copies, a stats object, an accumulator tensor) are not parameter edits: they survive
``writeback=False`` unchanged.  ``.clone()``, ``.item()``, ``.tolist()`` and unknown calls
make a copy; views (``.detach()``, ``.view()``, ``.data``, ``.to()``, ``.cpu()``, which
return the same storage when nothing moves) do not.
"""

from __future__ import annotations

from typing import FrozenSet, Iterable, List, Optional, Set

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import ModuleFacts, Mutation, WithBlock

PARAM_ATTRS = frozenset({"weight", "bias", "data", "grad"})
# Methods whose result shares storage (or yields the module's own tensors/submodules).
_SAME_STORAGE = frozenset(
    {
        "detach", "view", "view_as", "reshape", "flatten", "narrow", "select", "squeeze", "unsqueeze",
        "t", "transpose", "permute", "expand", "expand_as", "as_strided", "to", "cpu", "cuda", "contiguous",
        "float", "half", "bfloat16", "parameters", "named_parameters", "buffers", "named_buffers",
        "state_dict", "modules", "named_modules", "children", "named_children", "get_submodule",
        "get_parameter", "items", "values", "split", "chunk", "unbind", "__getitem__",
    }
)
# Builtins that keep the elements of what they are given.
_SAME_ELEMENTS = frozenset({"list", "tuple", "dict", "sorted", "reversed", "enumerate", "zip", "iter", "filter", "getattr"})


def _root(expr: cst.BaseExpression, names: FrozenSet[str]) -> bool:
    """``expr`` is (a view of) something reachable from one of ``names``."""
    while True:
        dotted = dotted_name(expr)
        if dotted is not None:
            parts = dotted.split(".")
            if any(part in PARAM_ATTRS for part in parts[1:]):
                return True
            return any(".".join(parts[:i]) in names for i in range(1, len(parts) + 1))
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in PARAM_ATTRS:
                return True
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _SAME_STORAGE:
                expr = func.value
            elif isinstance(func, cst.Name) and func.value in _SAME_ELEMENTS and expr.args:
                return any(_root(a.value, names) for a in expr.args if not a.keyword)
            else:
                return False
        elif isinstance(expr, (cst.Tuple, cst.List)):
            return any(_root(e.value, names) for e in expr.elements)
        else:
            return False


def _tainted(facts: ModuleFacts, function, seeds: Iterable[str]) -> FrozenSet[str]:
    """The seed names plus every name of ``function`` bound from them without a copy."""
    names: Set[str] = set(seeds)
    local = [b for b in facts.bindings if b.ctx.function is function]
    changed = True
    while changed:
        changed = False
        frozen = frozenset(names)
        for binding in local:
            if binding.target not in names and _root(binding.value, frozen):
                names.add(binding.target)
                changed = True
    return frozenset(names)


def param_edits(facts: ModuleFacts, block: WithBlock, modules: Iterable[Optional[str]]) -> List[Mutation]:
    """The writes inside ``block`` that may edit the parameters of ``modules`` (the gathered
    modules' names; None stands for a module expression that is not a name, where any
    write may reach the module)."""
    writes = [m for m in facts.mutations if any(w is block for w in m.ctx.withs)]
    if not writes:
        return []
    modules = list(modules)
    if None in modules:
        return writes
    names = _tainted(facts, writes[0].ctx.function, modules)
    # a write whose target is unknown is assumed to edit
    return [w for w in writes if not w.targets or any(_root(t, names) for t in _written(facts, w))]


def _written(facts: ModuleFacts, write: Mutation) -> tuple:
    """What ``write`` changes: a method changes its receiver, not its arguments
    (``ema[n].add_(p)`` reads ``p``); a function of a module (``init.zeros_(w)``) or a bare
    function (``setattr(m, ...)``) its first argument, which ``facts.index`` records too."""
    node = write.node
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and write.targets
        and write.targets[0] is node.func.value
        and facts.qualname(node.func) is None
    ):
        return write.targets[:1]
    return write.targets


# What a call may do with the gathered parameters it is handed, for a fix's safety: a
# callee outside these lists (``model.apply(init_fn)``, ``reinit_head(model)``,
# ``vector_to_parameters(v, model.parameters())``) may write them.
_READING_FUNCTIONS = frozenset(
    {
        "print", "len", "isinstance", "issubclass", "hasattr", "getattr", "id", "type", "repr", "str",
        "format", "bool", "int", "float", "complex", "sorted", "list", "tuple", "dict", "set", "frozenset",
        "enumerate", "zip", "iter", "next", "reversed", "filter", "map", "min", "max", "sum", "any", "all",
        "abs", "round", "hash", "vars", "dir", "callable", "range",
    }
)
_READING_QUALNAME_PREFIXES = (
    "torch.save", "torch.equal", "torch.allclose", "torch.isclose", "torch.norm", "torch.linalg.",
    "torch.testing.", "torch.cat", "torch.stack", "torch.numel", "torch.is_tensor", "torch.isfinite",
    "torch.isnan", "torch.isinf", "torch.sum", "torch.mean", "torch.abs", "torch.max", "torch.min",
    "torch.clone", "torch.flatten", "torch.nn.utils.parameters_to_vector", "copy.", "logging.", "json.",
    "math.", "numpy.", "pickle.dump", "safetensors.torch.save", "wandb.", "pprint.",
)
# methods that read their arguments: loggers, containers, writers, unittest asserts
_READING_METHODS = frozenset(
    {
        "info", "debug", "warning", "warn", "error", "critical", "exception", "log", "print", "write",
        "append", "extend", "add", "update", "setdefault", "insert", "put", "format", "join", "add_scalar",
        "add_scalars", "add_histogram", "save", "dump", "dumps", "assert_close",
    }
)
# methods of a tensor or module that read it
_READ_METHODS = _SAME_STORAGE | frozenset(
    {
        "clone", "norm", "sum", "mean", "std", "var", "abs", "max", "min", "amax", "amin", "any", "all",
        "numel", "size", "dim", "item", "tolist", "numpy", "eq", "ne", "equal", "allclose", "isclose",
        "isfinite", "isnan", "isinf", "nelement", "element_size", "nbytes", "stride", "is_contiguous",
        "data_ptr", "storage", "untyped_storage", "full_tensor", "to_local", "type", "double", "long",
        "int", "bool", "keys", "get", "count", "index", "named_modules", "extra_repr", "__repr__",
        "square", "pow", "sqrt", "mul", "add", "sub", "div", "matmul", "flatten", "ravel", "sign",
        "argmax", "argmin", "topk", "sort", "count_nonzero", "nonzero", "float", "abs", "norm",
    }
)


def _reads_only(facts: ModuleFacts, call: cst.Call, names: FrozenSet[str]) -> bool:
    """``call`` leaves the gathered parameters as they are, as far as this file can tell."""
    func = call.func
    qualname = facts.qualname(func) or ""
    if qualname:
        return qualname.startswith(_READING_QUALNAME_PREFIXES)
    if isinstance(func, cst.Name):
        return func.value in _READING_FUNCTIONS or func.value in names  # ``model(x)``: the forward
    if isinstance(func, cst.Attribute):
        method = func.attr.value
        if _root(func.value, names):
            return method in _READ_METHODS
        # an in-place method writes its (other) receiver and reads its arguments
        return method in _READING_METHODS or method.startswith("assert") or (
            method.endswith("_") and not method.startswith("__")
        )
    return False


def possible_edits(facts: ModuleFacts, block: WithBlock, modules: Iterable[Optional[str]]) -> List[cst.Call]:
    """The calls inside ``block`` that hand the gathered parameters (the module, a name bound
    from it, as argument or as receiver) to code that may write them: not edits this file
    shows, but a fix that drops the write-back is not safe past them."""
    modules = list(modules)
    calls = [site for site in facts.calls if any(w is block for w in site.ctx.withs)]
    if not calls or None in modules:
        return []
    names = _tainted(facts, calls[0].ctx.function, modules)
    found = []
    for site in calls:
        call = site.node
        if site.entered_by is not None or _reads_only(facts, call, names):
            continue
        handed = [a.value for a in call.args]
        if isinstance(call.func, cst.Attribute):
            handed.append(call.func.value)
        if any(_root(value, names) for value in handed):
            found.append(call)
    return found


def block_edits_params(facts: ModuleFacts, block: WithBlock, modules: Iterable[Optional[str]]) -> bool:
    return bool(param_edits(facts, block, modules)) or bool(possible_edits(facts, block, modules))
