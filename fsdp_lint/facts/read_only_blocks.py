"""Whether a ``summon_full_params`` block provably leaves the parameters as they are: the
question behind a fix that drops the write-back (FSD001's and FSD004's ``writeback=False``,
FSD006's ``rank0_only=True``).  A wrong "yes" silently loses the user's edit, so every
doubt answers "may edit":

- a write (``facts.param_writes``) whose target may alias a parameter: names are followed
  through anything that may return what it is given (``next(iter(m.parameters()))``,
  ``torch.flatten(p)``, ``p.type(...)``, ``p.detach().numpy()``, comprehensions, ``:=``),
  and only known copies (``.clone()``, ``.item()``, ``copy.deepcopy``) stop them;
- a call that hands such a value to code that may write it (``model.apply(init_fn)``,
  ``vector_to_parameters(v, model.parameters())``), or converts the module in place
  (``model.half()``, ``model.to(torch.float16)``); known readers (``print``, ``torch.save``,
  a logger, ``p.norm()``, an in-place method of another tensor) are fine;
- a call of a function or method of this file that names the module itself (a global
  ``model``, ``self`` for ``self.model``), a ``yield`` (the caller's code runs inside the
  block), a nested ``def``, ``lambda`` or ``class``.

``facts.param_writes.param_edits`` answers the opposite question (which writes certainly
edit parameters) for rules that flag edits (FSD005).
"""

from __future__ import annotations

from typing import FrozenSet, Iterable, List, Optional, Set

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.dataflow import called_functions
from fsdp_lint.facts.imports import dotted_name, target_names
from fsdp_lint.facts.model import ModuleFacts, WithBlock
from fsdp_lint.facts.param_writes import PARAM_ATTRS, param_edits, under, written
from fsdp_lint.facts.walk import descendants

# results that never share storage with what they were computed from
_COPY_METHODS = frozenset({"clone", "item", "tolist", "__len__", "numel", "size", "dim", "norm", "sum", "mean", "std",
                           "var", "any", "all", "eq", "ne", "equal", "allclose", "isclose", "isfinite", "isnan",
                           "isinf", "nelement", "element_size", "stride", "is_contiguous", "data_ptr", "full_tensor",
                           "abs", "square", "pow", "sqrt", "mul", "add", "sub", "div", "matmul", "sign", "argmax",
                           "argmin", "count_nonzero", "keys", "extra_repr", "__repr__"})
_COPY_FUNCTIONS = frozenset({"int", "float", "str", "len", "bool", "repr", "format", "isinstance", "hasattr", "id",
                             "type", "print", "round", "hash", "abs", "callable", "range", "sum"})
_COPY_QUALNAMES = frozenset({"copy.deepcopy", "copy.copy", "torch.clone", "torch.norm", "torch.equal", "torch.allclose",
                             "torch.isclose", "torch.numel", "torch.is_tensor", "torch.sum", "torch.mean"})
# calls that read what they are handed
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
_READING_METHODS = frozenset(
    {
        "info", "debug", "warning", "warn", "error", "critical", "exception", "log", "print", "write",
        "append", "extend", "add", "setdefault", "insert", "put", "format", "join", "add_scalar",
        "add_scalars", "add_histogram", "save", "dump", "dumps", "assert_close",
    }
)
# methods of a tensor that read it (what they return may still alias it: ``_may_alias``)
_READ_METHODS = _COPY_METHODS | frozenset(
    {
        "detach", "view", "view_as", "reshape", "flatten", "narrow", "select", "squeeze", "unsqueeze", "t",
        "transpose", "permute", "expand", "expand_as", "contiguous", "parameters", "named_parameters",
        "buffers", "named_buffers", "state_dict", "modules", "named_modules", "children", "named_children",
        "get_submodule", "get_parameter", "items", "values", "split", "chunk", "unbind", "__getitem__",
        "numpy", "to_local", "get", "count", "index", "amax", "amin", "max", "min", "topk", "sort", "nonzero",
        "ravel", "long", "int", "bool", "cpu", "cuda", "to", "float", "half", "bfloat16", "double", "type",
    }
)
# methods that convert a module's parameters in place (on a tensor they return a copy)
_MODULE_CONVERSIONS = frozenset({"half", "float", "double", "bfloat16", "to", "cuda", "cpu", "type", "to_empty"})


def _may_alias(facts: ModuleFacts, expr, names: FrozenSet[str]) -> bool:
    """``expr`` may be (or share storage with) something reachable from ``names``."""
    if isinstance(expr, (cst.Name, cst.Attribute)):
        dotted = dotted_name(expr)
        if dotted is not None:
            return any(part in PARAM_ATTRS for part in dotted.split(".")[1:]) or under(dotted, names)
        if isinstance(expr, cst.Attribute):
            return expr.attr.value in PARAM_ATTRS or _may_alias(facts, expr.value, names)
        return False
    if isinstance(expr, cst.Subscript):
        return _may_alias(facts, expr.value, names)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in _COPY_METHODS:
            return False
        qualname = facts.qualname(func)
        if qualname in _COPY_QUALNAMES or (qualname is None and isinstance(func, cst.Name) and func.value in _COPY_FUNCTIONS):
            return False
        if isinstance(func, cst.Attribute) and _may_alias(facts, func.value, names):
            return True
        return any(_may_alias(facts, a.value, names) for a in expr.args)
    if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
        comp = expr.for_in
        while comp is not None:
            if _may_alias(facts, comp.iter, names):
                return True
            comp = comp.inner_for_in
        return False
    if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        return any(_may_alias(facts, e.value, names) for e in expr.elements)
    if isinstance(expr, cst.Dict):
        return any(_may_alias(facts, e.value, names) for e in expr.elements if isinstance(e, cst.DictElement))
    if isinstance(expr, cst.IfExp):
        return _may_alias(facts, expr.body, names) or _may_alias(facts, expr.orelse, names)
    if isinstance(expr, (cst.NamedExpr, cst.Await)):
        return _may_alias(facts, expr.value if isinstance(expr, cst.NamedExpr) else expr.expression, names)
    if isinstance(expr, cst.BooleanOperation):
        return _may_alias(facts, expr.left, names) or _may_alias(facts, expr.right, names)
    return False


def _writes_alias(facts: ModuleFacts, node, target, names: FrozenSet[str]) -> bool:
    """Writing ``target`` may change a parameter: an in-place call changes the object itself;
    an assignment to ``obj.attr`` rebinds an attribute of ``obj`` (a parameter of a module,
    ``p.data``), not the tensor ``obj.attr`` held before."""
    if not isinstance(node, cst.Call) and isinstance(target, cst.Attribute):
        return target.attr.value in PARAM_ATTRS or _may_alias(facts, target.value, names)
    return _may_alias(facts, target, names)


def _aliases(facts: ModuleFacts, function, seeds: Iterable[str], nodes) -> FrozenSet[str]:
    """The seed names plus every name bound (in ``function``, or by a comprehension or
    ``:=`` in the block) from something that may alias them."""
    names: Set[str] = set(seeds)
    pairs = [(b.target, b.value) for b in facts.bindings if b.ctx.function is function]
    for node in nodes:
        if isinstance(node, cst.CompFor):
            for target in target_names(node.target):
                pairs.append((target, node.iter))
        elif isinstance(node, cst.NamedExpr):
            for target in target_names(node.target):
                pairs.append((target, node.value))
    changed = True
    while changed:
        changed = False
        frozen = frozenset(names)
        for target, value in pairs:
            if target not in names and _may_alias(facts, value, frozen):
                names.add(target)
                changed = True
    return frozenset(names)


def _reads_only(facts: ModuleFacts, call: cst.Call, names: FrozenSet[str], modules: Set[str]) -> bool:
    """``call`` leaves what it is handed as it is, as far as this file can tell."""
    func = call.func
    qualname = facts.qualname(func) or ""
    if qualname:
        return qualname.startswith(_READING_QUALNAME_PREFIXES)
    if isinstance(func, cst.Name):
        return func.value in _READING_FUNCTIONS or func.value in names  # ``model(x)``: the forward
    if isinstance(func, cst.Attribute):
        method = func.attr.value
        receiver = dotted_name(func.value)
        if receiver in modules and method in _MODULE_CONVERSIONS:
            return False  # ``model.half()`` converts the module's parameters in place
        if _may_alias(facts, func.value, names):
            return method in _READ_METHODS
        # an in-place method writes its (other) receiver and reads its arguments
        return method in _READING_METHODS or method.startswith("assert") or (
            method.endswith("_") and not method.startswith("__")
        )
    return False


def _reaches(facts: ModuleFacts, info, roots: Optional[Set[str]], depth: int) -> bool:
    """A function of this file may reach the gathered module without being handed it: its
    body names the module's root (a global ``model``, ``self`` for ``self.model``), or so
    does a function of this file it calls (three levels).  ``roots`` None: the module is an
    expression without a name, so any function may reach it."""
    if roots is None or depth >= 3:
        return True
    if any(isinstance(node, cst.Name) and node.value in roots for node in descendants(info.node.body)):
        return True
    for site in facts.calls:
        if site.ctx.function is info.node:
            if any(_reaches(facts, inner, roots, depth + 1) for inner in called_functions(facts, site.node, site.ctx)):
                return True
    return False


def may_edit_calls(facts: ModuleFacts, block: WithBlock, modules: Iterable[Optional[str]]) -> List[cst.CSTNode]:
    """Why ``block`` may edit the gathered parameters although it shows no edit
    (``param_edits``): the calls, ``yield``s and nested definitions of the module docstring."""
    modules = list(modules)  # None: a module expression that is not a name
    nodes = list(descendants(block.node.body))
    found: List[cst.CSTNode] = [
        n for n in nodes if isinstance(n, (cst.Yield, cst.Lambda, cst.FunctionDef, cst.ClassDef))
    ]
    calls = [site for site in facts.calls if any(w is block for w in site.ctx.withs)]
    function = calls[0].ctx.function if calls else None
    names = _aliases(facts, function, [m for m in modules if m is not None], nodes)
    named = {m for m in modules if m is not None}
    roots = {m.split(".", 1)[0] for m in named} if None not in modules else None
    for write in facts.mutations:
        if any(w is block for w in write.ctx.withs) and (
            not write.targets or any(_writes_alias(facts, write.node, t, names) for t in written(facts, write))
        ):
            found.append(write.node)
    for site in calls:
        call = site.node
        if site.entered_by is not None:
            continue
        callees = called_functions(facts, call, site.ctx)
        if any(_reaches(facts, info, roots, 0) for info in callees):
            found.append(call)  # a function of this file that names the module (a global, ``self``)
            continue
        if not callees and _reads_only(facts, call, names, named):
            continue  # (a function of this file sees only its arguments: checked below)
        handed = [a.value for a in call.args]
        if isinstance(call.func, cst.Attribute):
            handed.append(call.func.value)
        elif isinstance(call.func, cst.Call):  # ``getattr(model, "load_state_dict")(sd)``
            handed.extend(a.value for a in call.func.args)
        if any(_may_alias(facts, value, names) for value in handed):
            found.append(call)
    return found


def block_may_edit(facts: ModuleFacts, block: WithBlock, modules: Iterable[Optional[str]]) -> bool:
    """False only when ``block`` provably leaves the gathered modules' parameters as they are."""
    modules = list(modules)
    return bool(param_edits(facts, block, modules)) or bool(may_edit_calls(facts, block, modules))


def describe_possible_edit(facts: ModuleFacts, node: cst.CSTNode) -> str:
    """Words for one of ``may_edit_calls``'s answers, for a message."""
    if isinstance(node, cst.Yield):
        return "a `yield` (the caller's code runs inside the block)"
    if isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
        return "a function defined in the block"
    if isinstance(node, cst.Call):
        return f"`{facts.module.code_for_node(node.func)}(...)`"
    return f"`{facts.module.code_for_node(node)}`"
