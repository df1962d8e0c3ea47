"""Records produced by the one traversal (``index``) and queried by the rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from typing import TYPE_CHECKING

from fsdp_lint.facts.imports import ImportTable, dotted_name

if TYPE_CHECKING:  # libcst is imported only once a file is parsed
    import libcst as cst


@dataclass(eq=False)
class Loop:
    node: cst.CSTNode  # For or While
    steps: bool = False  # a backward()/step() call has this loop as its innermost loop


@dataclass(eq=False)
class Guard:
    """An ``if`` between a statement and the enclosing loops of its function."""

    node: cst.If
    loop_depth: int  # how many loops enclose the if itself
    with_depth: int  # how many with-blocks enclose the if itself
    periodic: bool  # the test uses ``%`` (``if step % every == 0``)
    leaves_loop: bool  # the guarded branch ends with break/return/raise: runs at most once
    branch: str  # "body" or "orelse": which branch the guarded code is in
    # how the *other* branch ends when the guarded code is the rest of a block after
    # ``if test: ...; return`` (an early exit): "return", "raise", "continue", "break"; else ""
    after_exit: str = ""
    order: int = 0  # source order of the test (bindings before it may reach it)


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
    order: int  # position in source order, across calls and bindings
    entered_by: Optional[WithBlock] = None  # the with-statement whose item is this call
    bare: bool = False  # the whole expression statement is this call (result discarded)

    @property
    def func_dotted(self) -> Optional[str]:
        return dotted_name(self.node.func)

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


@dataclass(eq=False)
class Binding:
    """``target = value`` (target a dotted name: ``model``, ``self.model``).

    ``kind``: "assign"; "for" (``for target in value``: one element of the iterable);
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
    functions: Dict[str, List[FunctionInfo]] = field(default_factory=dict)  # by name, any scope
    annotated: Dict[str, List[cst.BaseExpression]] = field(default_factory=dict)
    classes: Dict[str, cst.ClassDef] = field(default_factory=dict)
    _cache: Dict[str, object] = field(default_factory=dict)

    def cached(self, key, compute):
        """Derived facts (FSDP instances, offload) are computed on first use, then shared."""
        if key not in self._cache:
            self._cache[key] = compute(self)
        return self._cache[key]

    def qualname(self, expr) -> Optional[str]:
        """The imported name ``expr`` stands for (``facts.imports``), memoised per node."""
        memo = self._cache.setdefault("qualnames", {})
        hit = memo.get(id(expr))
        if hit is None or hit[0] is not expr:  # the node is kept so that its id is never reused
            hit = memo[id(expr)] = (expr, self.imports.qualname(expr))
        return hit[1]

    # -- derived facts, shared by all rules ----------------------------------------
    def summons(self):
        """Every torch ``summon_full_params`` call (``facts.summon``)."""
        from fsdp_lint.facts.summon import summon_calls

        return summon_calls(self)

    def fsdp_modules(self):
        """FSDP constructions and the names holding wrapped modules (``facts.fsdp_modules``)."""
        from fsdp_lint.facts.fsdp_modules import fsdp_modules

        return fsdp_modules(self)

    def cpu_param_evidence(self):
        """Where the module keeps FSDP parameters on the CPU (``facts.offload``)."""
        from fsdp_lint.facts.offload import cpu_param_evidence

        return cpu_param_evidence(self)

    def rank_guard(self, ctx: Context, min_with_depth: int = 0):
        """The ``if rank == 0:``-style guard that runs ``ctx`` on one rank only (``facts.ranks``)."""
        from fsdp_lint.facts.ranks import rank_guard

        return rank_guard(self, ctx, min_with_depth)

    def summons_entering(self, block: WithBlock):
        """The summon calls that a with-statement enters."""
        return [s for s in self.summons() if s.site.entered_by is block]

    def summon_blocks(self, ctx: Context):
        """(summon, depth) for each summon block enclosing ``ctx``, innermost last."""
        found = []
        for depth, block in enumerate(ctx.withs):
            found.extend((summon, depth) for summon in self.summons_entering(block))
        return found

    @staticmethod
    def per_step_loop(ctx: Context):
        """The training loop that runs ``ctx`` on every step, if any (``facts.loops``)."""
        from fsdp_lint.facts.loops import per_step_loop

        return per_step_loop(ctx)

    def single_value(self, name: str) -> Optional[cst.BaseExpression]:
        """The value of a name assigned exactly once in the module (constants, configs)."""
        values = [b.value for b in self.bindings if b.target == name]
        return values[0] if len(values) == 1 else None
