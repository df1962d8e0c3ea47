"""Records produced by the one traversal (``index``) and queried by the rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from fsdp_lint.facts.imports import ImportTable
from fsdp_lint.lazy_libcst import cst


@dataclass(eq=False)
class Loop:
    node: cst.CSTNode  # For or While
    steps: bool = False  # a backward()/step() call has this loop as its innermost loop


class BindingIndex:
    """The file's bindings by function and name, shared by every guard of the file (built on
    the first question, once the walk has recorded them all): what ``flow`` reads to see
    that two tests share a condition (``is_fsdp = args.dist == "fsdp"``); and, per
    function, the bare names something may change without binding them (``buf`` in
    ``buf.append(x)``, ``fill(buf)``, ``buf[i] = x``, ``buf += [x]``)."""

    def __init__(self, facts: "ModuleFacts") -> None:
        self._facts = facts
        self._by: Optional[Dict[Tuple[int, str], List["Binding"]]] = None
        self._handed: Optional[Dict[int, Set[str]]] = None
        self._rewrites: Optional[List[int]] = None  # orders of ``exec(...)`` / ``globals()`` calls
        self.formulas: Dict[Tuple[int, int], object] = {}  # ``conditions``: each guard's test, read once

    def of(self, function, name: str) -> List["Binding"]:
        if self._by is None:
            by: Dict[Tuple[int, str], List[Binding]] = {}
            for binding in self._facts.bindings:
                by.setdefault((id(binding.ctx.function), binding.target), []).append(binding)
            self._by = by
        return self._by.get((id(function), name), [])

    def qualname(self, expr) -> Optional[str]:
        """The qualified name ``expr`` refers to (a test's call: ``torch.cuda.is_available``)."""
        return self._facts.qualname(expr)

    def globals_rewritten_after(self, order: int) -> bool:
        """The module runs, after ``order``, code that may rebind its globals by name:
        ``exec(...)`` (nanoGPT's ``exec(open("configurator.py").read())`` overrides
        ``use_fsdp = False`` from the command line) or a call on ``globals()``
        (``globals().update(cfg)``)."""
        if self._rewrites is None:
            self._rewrites = [
                site.order for site in self._facts.calls
                if isinstance(site.node.func, cst.Name) and site.node.func.value in ("exec", "globals")
                and self._facts.qualname(site.node.func) is None
            ]
        return any(at > order for at in self._rewrites)

    def changed_in_place(self, function, name: str) -> bool:
        """``function`` hands the object ``name`` holds to something that may change it: a
        method call on it, a call taking it, a write into it."""
        if self._handed is None:
            handed: Dict[int, Set[str]] = {}
            for site in self._facts.calls:
                names = handed.setdefault(id(site.ctx.function), set())
                func = site.node.func
                if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                    names.add(func.value.value)
                names.update(a.value.value for a in site.node.args if isinstance(a.value, cst.Name))
            for mutation in self._facts.mutations:
                names = handed.setdefault(id(mutation.ctx.function), set())
                for target in mutation.targets:
                    while isinstance(target, (cst.Attribute, cst.Subscript)):
                        target = target.value
                    if isinstance(target, cst.Name):
                        names.add(target.value)
            for binding in self._facts.bindings:
                if "." in binding.target or "[" in binding.target:
                    handed.setdefault(id(binding.ctx.function), set()).add(binding.target.split(".", 1)[0].split("[", 1)[0])
            self._handed = handed
        return name in self._handed.get(id(function), ())


@dataclass(eq=False)
class Guard:
    """An ``if`` between a statement and the enclosing loops of its function (or, for the
    values ``dataflow`` follows into one arm of ``a if test else b``, that expression)."""

    node: cst.If  # or cst.IfExp: both have ``test``
    loop_depth: int  # how many loops enclose the if itself
    with_depth: int  # how many with-blocks enclose the if itself
    periodic: bool  # the test uses ``%`` (``if step % every == 0``)
    leaves_loop: bool  # the guarded branch ends with break/return/raise: runs at most once
    branch: str  # "body" or "orelse": which branch the guarded code is in
    # how the *other* branch ends when the guarded code is the rest of a block after
    # ``if test: ...; return`` (an early exit): "return", "raise", "continue", "break"; else ""
    after_exit: str = ""
    order: int = 0  # source order of the test (bindings before it may reach it)
    bindings: Optional[BindingIndex] = None  # the file's bindings, to read the test's names


@dataclass(eq=False)
class WithBlock:
    node: cst.With


@dataclass(eq=False)
class Context:
    """Where a node sits: enclosing statement, function, class, loops, guards, with-blocks.

    Loops, guards and with-blocks are those of the innermost function only: a nested
    ``def`` inside a loop body does not run on every iteration.
    """

    statement: cst.CSTNode
    function: Optional[cst.FunctionDef]
    class_def: Optional[cst.ClassDef]
    loops: Tuple[Loop, ...]
    guards: Tuple[Guard, ...]
    withs: Tuple[WithBlock, ...]


@dataclass(eq=False)
class CallSite:
    node: cst.Call
    ctx: Context
    order: int  # when the call starts: position in evaluation order, across calls and bindings
    entered_by: Optional[WithBlock] = None  # the with-statement whose item is this call
    bare: bool = False  # the whole expression statement is this call (result discarded)
    # when the call returns: the last order given inside it (its arguments run first), so
    # ``FSDP(model.bfloat16())`` casts before it wraps: the cast's order <= the wrap's ``done``
    done: int = 0

    @property
    def attr(self) -> Optional[str]:
        func = self.node.func
        name = getattr(func, "attr", func)  # Attribute -> its Name; Name -> itself
        value = getattr(name, "value", None)
        return value if isinstance(value, str) else None


@dataclass(eq=False)
class Mutation:
    """A write: an assignment to an attribute or subscript, ``+=``, ``del``, or a call that
    changes its receiver or arguments in place (``p.add_(1)``, ``init.zeros_(w)``,
    ``m.load_state_dict(sd)``).  ``targets`` are the expressions written to; whether
    they are parameters is decided by ``facts.param_writes``."""

    node: cst.CSTNode
    ctx: Context
    targets: Tuple[cst.BaseExpression, ...] = ()
    # position in evaluation order (``CallSite.order``): the latest order given when the
    # write is recorded (a call's own order; an assignment's after its right side)
    order: int = 0


@dataclass(eq=False)
class Binding:
    """``target = value`` (target a dotted name: ``model``, ``self.model``).

    ``order`` follows every call of ``value`` (the right side runs before the target is
    bound: in ``model = FSDP(model)`` the argument is the earlier ``model``).  ``kind``: "assign"; "for" (``for target in value``: one element of the iterable);
    "with" (``with value as target``).  ``index``: the position of the target in a tuple
    target (``model, opt = value``), None for a plain target."""

    target: str
    value: cst.BaseExpression
    ctx: Context
    order: int
    kind: str = "assign"
    index: Optional[int] = None


@dataclass(eq=False)
class FunctionInfo:
    """A ``def``: ``class_def`` is its class when it is a method (defined directly in a class)."""

    node: cst.FunctionDef
    class_def: Optional[cst.ClassDef]
    parent: Optional[cst.FunctionDef] = None  # the function this ``def`` stands in (a nested def)

    @property
    def name(self) -> str:
        return self.node.name.value

    @property
    def param_names(self) -> Tuple[str, ...]:
        params = self.node.params
        return tuple(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))

    @property
    def star_kwargs(self) -> Optional[str]:
        star = self.node.params.star_kwarg
        return star.name.value if star is not None else None


@dataclass(eq=False)
class Return:
    """``return value`` inside a function (``value`` None for a bare return)."""

    value: Optional[cst.BaseExpression]
    ctx: Context
    order: int


@dataclass
class ModuleFacts:
    module: cst.Module
    imports: ImportTable
    calls: List[CallSite] = field(default_factory=list)
    mutations: List[Mutation] = field(default_factory=list)
    bindings: List[Binding] = field(default_factory=list)
    returns: List[Return] = field(default_factory=list)
    import_froms: List[Tuple[cst.ImportFrom, cst.CSTNode]] = field(default_factory=list)  # (node, its statement)
    functions: Dict[str, List[FunctionInfo]] = field(default_factory=dict)  # by name, any scope
    annotated: Dict[str, List[cst.BaseExpression]] = field(default_factory=dict)
    classes: Dict[str, cst.ClassDef] = field(default_factory=dict)
    # how the project launches this file when that turns FSDP on (``fsdp_lint.launch.Launch``)
    launch: Optional[object] = None
    # the project's other files as this file imports them (``fsdp_lint.project.ProjectView``):
    # ``helper(spec)`` answers a project function's summary (``facts.helper_summary``)
    project: Optional[object] = None
    binding_index: Optional[BindingIndex] = None  # ``bindings`` by function and name (``conditions``)
    _cache: Dict[str, object] = field(default_factory=dict)

    def cached(self, key, compute):
        """Derived facts (FSDP instances, offload) are computed on first use, then shared."""
        if key not in self._cache:
            self._cache[key] = compute(self)
        return self._cache[key]

    def call_site(self, call) -> Optional["CallSite"]:
        """The recorded site of the call node ``call`` (its context and order)."""
        return self.cached("call_sites_by_id", lambda f: {id(s.node): s for s in f.calls}).get(id(call))

    def qualname(self, expr) -> Optional[str]:
        """The imported name ``expr`` stands for (``facts.imports``), memoised per node."""
        memo = self._cache.setdefault("qualnames", {})
        hit = memo.get(id(expr))
        if hit is None or hit[0] is not expr:  # the node is kept so that its id is never reused
            hit = memo[id(expr)] = (expr, self.imports.qualname(expr))
        return hit[1]

