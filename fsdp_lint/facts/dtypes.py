"""Module casts and the dtypes they name: ``m.half()``, ``m.bfloat16()``, ``m.to(torch.bfloat16)``,
``m.to(device, dtype=...)``, and ``from_pretrained(..., torch_dtype=torch.bfloat16)`` /
``from_config(config, torch_dtype=...)``.

``module_casts`` lists them once per module (FSD107: a cast after a wrap; FSD113: a cast to
the mixed-precision policy's own ``param_dtype`` before ``fully_shard``); ``loaded_in`` says
in which dtype a module value was loaded or cast where it was made, also inside a function
of this file that returns it (``model = load_model(cfg)``); ``module_in_dtype`` whether a
module name holds weights in a dtype where it is used (cast before on a path that reaches,
made so by its latest binding, or, for a parameter, passed so by every caller, in this
file and in other project files: ``facts.callers``, whose records of other files carry it
as ``passed_arguments``' "dtype").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.callers import passed_for, passed_in_file
from fsdp_lint.facts.dataflow import RETURNS_SELF, called_functions, sources
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import CallSite, Context, ModuleFacts
from fsdp_lint.facts.scopes import latest_binding, lookup, runs_before

# ``Module`` methods that cast every parameter (no arguments)
CAST_METHODS = frozenset({"half", "bfloat16", "float", "double"})
TORCH_DTYPES = frozenset(
    f"torch.{name}"
    for name in ("bfloat16", "float16", "half", "float32", "float", "float64", "double")
)
# one name per dtype
_CANONICAL = {"torch.half": "torch.float16", "torch.float": "torch.float32", "torch.double": "torch.float64"}
_METHOD_DTYPE = {"half": "torch.float16", "bfloat16": "torch.bfloat16", "float": "torch.float32", "double": "torch.float64"}
LOW_PRECISION = frozenset({"torch.float16", "torch.bfloat16"})


@dataclass(eq=False)
class Cast:
    site: CallSite
    receiver: str  # the module cast (dotted name)
    dtype: Optional[str]  # canonical ``torch.<dtype>``; None when not a literal dtype


def canonical_dtype(facts: ModuleFacts, expr) -> Optional[str]:
    """``torch.bfloat16`` for an expression naming a torch dtype (any alias), else None."""
    qualname = facts.qualname(expr) if expr is not None else None
    if qualname not in TORCH_DTYPES:
        return None
    return _CANONICAL.get(qualname, qualname)


def dtype_at(facts: ModuleFacts, expr, ctx: Optional[Context], order: int) -> Optional[str]:
    """``canonical_dtype``, also through names (``dtype = torch.bfloat16`` then
    ``dtype=dtype``) when every value that may reach ``ctx``/``order`` is the same dtype."""
    found = canonical_dtype(facts, expr)
    if found is not None or ctx is None or not isinstance(expr, (cst.Name, cst.Attribute)):
        return found
    values = sources(facts, expr, ctx, order)
    dtypes = {canonical_dtype(facts, s.expr) for s in values.found}
    return dtypes.pop() if values.complete and len(dtypes) == 1 else None


def casts_dtype(facts: ModuleFacts, call) -> bool:
    """``.to(...)`` with a dtype: ``to(torch.bfloat16)``, ``to(device, torch.float16)``, ``to(dtype=...)``."""
    for arg in call.args:
        if arg.star:
            continue
        if arg.keyword is not None:
            if arg.keyword.value == "dtype":
                return True
            continue
        if facts.qualname(arg.value) in TORCH_DTYPES:
            return True
    return False


def _to_dtype(facts: ModuleFacts, call) -> Optional[str]:
    for arg in call.args:
        if arg.star:
            continue
        if arg.keyword is None or arg.keyword.value == "dtype":
            found = canonical_dtype(facts, arg.value)
            if found is not None:
                return found
    return None


def module_casts(facts: ModuleFacts) -> List[Cast]:
    return facts.cached("module_casts", _compute)


def _compute(facts: ModuleFacts) -> List[Cast]:
    found: List[Cast] = []
    for site in facts.calls:
        attr = site.attr
        func = site.node.func
        receiver = dotted_name(getattr(func, "value", None))
        if receiver is None:
            continue
        is_cast, dtype = _cast(facts, site.node, attr)
        if is_cast:
            found.append(Cast(site, receiver, dtype))
    return found


def _cast(facts: ModuleFacts, call, attr: Optional[str]) -> Tuple[bool, Optional[str]]:
    """Whether the method call ``call`` (named ``attr``) casts its module, and to which dtype
    (None when not a literal one): ``.to(dtype)``, ``.to(device, dtype=...)``, and
    ``Module.half()``/``bfloat16()``/``float()``/``double()``, which take no arguments."""
    if attr == "to":
        return (True, _to_dtype(facts, call)) if casts_dtype(facts, call) else (False, None)
    if attr in CAST_METHODS and not call.args:
        return True, _METHOD_DTYPE[attr]
    return False, None


def loaded_dtype(facts: ModuleFacts, call, ctx: Optional[Context] = None) -> Optional[str]:
    """``X.from_pretrained(..., torch_dtype=torch.bfloat16)`` or ``X.from_config(config,
    torch_dtype=...)`` (or ``dtype=``, the name transformers uses since 4.56; a name holding
    one dtype where ``ctx`` is given): the dtype the loaded model's weights have; None
    otherwise."""
    func = getattr(call, "func", None)
    if getattr(getattr(func, "attr", None), "value", None) not in ("from_pretrained", "from_config"):
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in ("torch_dtype", "dtype"):
            site = facts.call_site(call)
            return dtype_at(facts, arg.value, ctx, site.order if site is not None else 0)
    return None


# methods that hand back their module (``dataflow.RETURNS_SELF``) unchanged in dtype
# (``from_pretrained(...).cuda()``): not the casts, not ``to`` (read by ``_cast``), not
# ``to_empty`` or ``apply``, which make new tensors or run any function
_KEEPS_DTYPE = RETURNS_SELF - CAST_METHODS - {"to", "to_empty", "apply"}
MAX_LOAD_DEPTH = 3


def loaded_in(facts: ModuleFacts, value, ctx: Context, depth: int = 0) -> Optional[Tuple[str, cst.Call]]:
    """(dtype, the call) when the module ``value`` (an expression bound at ``ctx``) comes
    from ``from_pretrained(..., torch_dtype=...)`` / ``from_config(...)``, or is cast by
    the call that makes it (``m.to(torch.bfloat16)``, ``m.half()``), through methods that
    keep its dtype (``.to(device)``, ``.cuda()``, ``.eval()``) and through the ``return`` of
    a function of this file that makes it (``model = load_model(name)``, ``returned_in``),
    or of a project function of another file that returns it so (``project_returned_dtype``).
    None when it is not known."""
    if depth > MAX_LOAD_DEPTH or not isinstance(value, cst.Call):
        return None
    dtype = loaded_dtype(facts, value, ctx)
    if dtype is not None:
        return dtype, value
    func = value.func
    if isinstance(func, cst.Attribute) and facts.qualname(func) is None:
        attr = func.attr.value
        is_cast, cast_to = _cast(facts, value, attr)
        if is_cast:
            return (cast_to, value) if cast_to is not None else None
        if attr == "to" or attr in _KEEPS_DTYPE:  # ``.to(device)``, ``.cuda()``, ``.eval()``
            return loaded_in(facts, func.value, ctx, depth + 1)
    infos = called_functions(facts, value, ctx)
    if not infos:
        found = project_returned_dtype(facts, func)  # a project function of another file
        return (found[0], value) if found is not None else None
    if len(infos) != 1 or facts.qualname(func) is not None:
        return None
    return returned_in(facts, infos[0].node, depth)


def project_returned_dtype(facts: ModuleFacts, func) -> Optional[Tuple[str, str]]:
    """(dtype, ``file:line``) when ``func`` names, through this file's imports, a function of
    another project file whose every call returns a module made in that dtype
    (``fsdp_lint.project.returned_dtypes_of_text``, which reads it with ``returned_in``)."""
    project = facts.project
    if project is None:
        return None
    spec = facts.imports.project_spec(dotted_name(func))
    return project.returned_dtype(spec) if spec is not None else None


def returned_in(facts: ModuleFacts, function, depth: int = 0) -> Optional[Tuple[str, cst.Call]]:
    """(dtype, the call) when a ``return`` of the file's ``function`` gives a module made in
    that dtype (``loaded_in``: a name returned is followed to its latest binding in the
    function, and a function that also casts that name in place says nothing); the first
    ``return`` that tells."""
    for ret in facts.returns:
        if ret.ctx.function is not function or ret.value is None:
            continue
        made = ret.value
        if isinstance(made, cst.Name):
            binding = latest_binding(facts, made.value, ret.ctx, ret.order)
            if binding is None or binding.ctx.function is not function:
                continue
            if any(c.receiver == made.value and c.site.ctx.function is function and c.site.node is not binding.value
                   for c in module_casts(facts)):
                continue  # also cast in place in the function: which dtype leaves it is not read here
            made, where = binding.value, binding.ctx
        else:
            where = ret.ctx
        found = loaded_in(facts, made, where, depth + 1)
        if found is not None:
            return found
    return None


# how many callers up a parameter's dtype is followed
MAX_CALLERS_DEPTH = 2


def module_in_dtype(facts: ModuleFacts, name: str, ctx: Context, order: int, dtype: str,
                    depth: int = 0) -> Optional[Tuple[str, Optional[cst.CSTNode]]]:
    """(words, node) when the module ``name`` holds weights in ``dtype`` where it is used at
    ``ctx``/``order``: cast before in its function on a path that reaches, or made in that
    dtype by its latest binding; for a parameter of the function with no binding of its own,
    what every call of the function passes (``shard(model)`` after ``model =
    from_config(config, dtype=torch.bfloat16)``, in this file or in another project file:
    then ``node`` is None and ``words`` say where)."""
    at_use = lookup(facts, name, ctx, order).bindings
    for cast in module_casts(facts):
        if cast.receiver != name or cast.dtype != dtype or cast.site.ctx.function is not ctx.function:
            continue
        if not runs_before(facts, cast.site.ctx, cast.site.done, ctx, order):
            continue
        # the cast's module reaches the use on some path: ``model = model.to(...)`` is the
        # binding that reaches, or the cast is in place and a binding it acted on reaches
        # (``model, banks = wrap_with_banks(model)`` in an exclusive branch rebinds nothing
        # on the other path)
        cast_ids = {id(b) for b in lookup(facts, name, cast.site.ctx, cast.site.order).bindings}
        if not any(b.value is cast.site.node or id(b) in cast_ids for b in at_use):
            continue
        return f"`{facts.module.code_for_node(cast.site.node)}`", cast.site.node
    latest = latest_binding(facts, name, ctx, order)
    if latest is None:
        return _passed_in_dtype(facts, name, ctx, dtype, depth)
    found = loaded_in(facts, latest.value, latest.ctx)
    if found is None or found[0] != dtype:
        return None
    node = found[1]
    made = project_returned_dtype(facts, node.func) if not called_functions(facts, node, latest.ctx) else None
    if made is not None:  # made so in another file of the project
        return f"`{facts.module.code_for_node(node)}` from {made[1]}", node
    if loaded_dtype(facts, node, latest.ctx) is not None:
        keyword = next(a.keyword.value for a in node.args if a.keyword is not None and a.keyword.value in ("torch_dtype", "dtype"))
        return f"`{node.func.attr.value}(..., {keyword}=...)`", node
    return f"`{facts.module.code_for_node(node)}`", node


def _passed_in_dtype(facts: ModuleFacts, name: str, ctx: Context, dtype: str, depth: int):
    """The first caller's evidence when every call of ``ctx``'s function passes, for its
    parameter ``name``, a module in ``dtype`` (precision first: one call passing anything
    else, or a call that hides it, says nothing).  The callers ``facts.callers`` lists (this
    file's and other project files'); for a method it cannot list, the calls of this file."""
    if depth >= MAX_CALLERS_DEPTH:
        return None
    passed = passed_for(facts, name, ctx)
    if passed is None:
        passed = passed_in_file(facts, name, ctx)
    found = []
    for call in passed or ():
        if call.other_file:
            known = (call.record or {}).get("dtype")
            if not call.known or not known or known[0] != dtype:
                return None
            found.append((f"{known[1]} at {known[2]}", None))
            continue
        if not call.known or call.default or not isinstance(call.expr, cst.Name):
            return None
        evidence = module_in_dtype(facts, call.expr.value, call.ctx, call.order, dtype, depth + 1)
        if evidence is None:
            return None
        found.append(evidence)
    return found[0] if found else None
