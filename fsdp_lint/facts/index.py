"""The one traversal of a module (``facts.walk``): collects imports, bindings, call sites with their
context, loops that run training steps, guards, with-blocks and mutations.

Rules never traverse the tree themselves; they query the ``ModuleFacts`` built here.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts.imports import ImportTable, dotted_name
from fsdp_lint.facts.model import (
    Binding,
    BindingIndex,
    CallSite,
    Context,
    FunctionInfo,
    Guard,
    Loop,
    ModuleFacts,
    Mutation,
    Return,
    WithBlock,
)
from fsdp_lint.facts.walk import Exit, push_children, walk
from fsdp_lint.facts.values import first_positional

# Calls whose presence marks a training step.
STEP_ATTRS = frozenset({"backward", "step"})
# Calls that modify module state without a trailing underscore.
MUTATING_CALLS = frozenset({"load_state_dict", "setattr", "delattr", "register_parameter"})


class _Frame(NamedTuple):
    function: Optional[cst.FunctionDef]
    class_def: Optional[cst.ClassDef]
    loops: Tuple[Loop, ...] = ()
    guards: Tuple[Guard, ...] = ()
    withs: Tuple[WithBlock, ...] = ()


def _is_periodic(test: cst.BaseExpression) -> bool:
    """True when the test contains a modulo: ``step % n == 0``, ``not step % n``."""
    stack = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Modulo) and not isinstance(
                node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
            ):
                return True
            stack.extend((node.left, node.right))
        elif isinstance(node, cst.Comparison):
            stack.append(node.left)
            stack.extend(c.comparator for c in node.comparisons)
        elif isinstance(node, cst.UnaryOperation):
            stack.append(node.expression)
        elif isinstance(node, cst.BooleanOperation):
            stack.extend((node.left, node.right))
    return False


def _exit_names():
    return {cst.Return: "return", cst.Raise: "raise", cst.Continue: "continue", cst.Break: "break"}


def _exit_kind(body: Optional[cst.BaseSuite]) -> str:
    """How a block ends unconditionally: "return", "raise", "continue", "break" or ""."""
    statements = getattr(body, "body", ())
    if not statements:
        return ""
    last = statements[-1]
    exits = _exit_names()
    if isinstance(last, cst.SimpleStatementLine) and last.body:
        return exits.get(type(last.body[-1]), "")
    if isinstance(body, cst.SimpleStatementSuite):
        return exits.get(type(last), "")
    return ""


def _ends_loop(body: cst.BaseSuite) -> bool:
    return _exit_kind(body) in ("break", "return", "raise")



class _Indexer:
    """Fills a ``ModuleFacts`` in one walk (``facts.walk``): a handler per node type
    that matters, run in source order, with loop/guard/with/function context kept on
    ``frames`` (one frame per function, class or lambda)."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.imports = facts.imports
        self.binding_index = facts.binding_index = BindingIndex(facts)
        self.frames: List[_Frame] = [_Frame(None, None)]
        self.statements: List[cst.CSTNode] = [facts.module]
        self.with_items: Dict[int, WithBlock] = {}
        self.bare_calls = set()
        self.order = 0
        self.handlers = {
            cst.Import: self.on_import,
            cst.ImportFrom: self.on_import_from,
            cst.ClassDef: self.on_class,
            cst.FunctionDef: self.on_function,
            cst.Lambda: self.on_lambda,
            cst.For: self.on_for,
            cst.While: self.on_while,
            cst.If: self.on_if,
            cst.IfExp: self.on_if_exp,
            cst.With: self.on_with,
            cst.Expr: self.on_expr,
            cst.Call: self.on_call,
            cst.AugAssign: self.on_mutating_statement,
            cst.Del: self.on_mutating_statement,
            cst.Assign: self.on_assign,
            cst.AnnAssign: self.on_ann_assign,
            cst.SimpleStatementLine: self.on_statement,
            cst.IndentedBlock: self.on_block,
            cst.Return: self.on_return,
        }
        for kind in (cst.Try, cst.TryStar, cst.Match) if hasattr(cst, "TryStar") else (cst.Try, cst.Match):
            self.handlers[kind] = self.on_statement

    def run(self) -> None:
        walk(self.facts.module, self.handlers)

    # -- context ------------------------------------------------------------------
    def _next(self) -> int:
        self.order += 1
        return self.order

    def _context(self) -> Context:
        frame = self.frames[-1]
        return Context(
            statement=self.statements[-1],
            function=frame.function,
            class_def=frame.class_def,
            loops=frame.loops,
            guards=frame.guards,
            withs=frame.withs,
        )

    def _update(self, **changes) -> None:
        self.frames[-1] = self.frames[-1]._replace(**changes)

    def _enter_statement(self, node: cst.CSTNode, stack: List[object]) -> None:
        """Make ``node`` the current statement until its children are done."""
        self.statements.append(node)
        stack.append(Exit(self.statements.pop))

    def on_statement(self, node, stack) -> None:
        self._enter_statement(node, stack)
        push_children(node, stack)

    def on_block(self, node: cst.IndentedBlock, stack) -> None:
        """Guards added by early exits inside a block end with the block."""
        depth = len(self.frames[-1].guards)
        stack.append(Exit(lambda: self._update(guards=self.frames[-1].guards[:depth])))
        push_children(node, stack)

    def on_return(self, node: cst.Return, stack) -> None:
        if self.frames[-1].function is not None:
            self.facts.returns.append(Return(node.value, self._context(), self._next()))
        push_children(node, stack)

    # -- imports and definitions ------------------------------------------------------
    def on_import(self, node: cst.Import, stack) -> None:
        self.imports.add_import(node)

    def on_import_from(self, node: cst.ImportFrom, stack) -> None:
        self.imports.add_import_from(node)
        self.facts.import_froms.append((node, self.statements[-1]))

    def _scoped(self, node, stack, frame: _Frame, outside, inside) -> None:
        """Visit ``outside`` in the current frame, then ``inside`` in ``frame``."""
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self._enter_statement(node, stack)
        stack.append(Exit(self.frames.pop))
        stack.extend(reversed(inside))
        stack.append(Exit(lambda: self.frames.append(frame)))
        stack.extend(reversed(outside))

    def on_class(self, node: cst.ClassDef, stack) -> None:
        self.facts.classes[node.name.value] = node
        if len(self.frames) == 1:
            self.imports.add_local_definition(node.name.value)
        outside = [d.decorator for d in node.decorators] + [a.value for a in (*node.bases, *node.keywords)]
        self._scoped(node, stack, _Frame(None, node), outside, [node.body])

    def on_function(self, node: cst.FunctionDef, stack) -> None:
        if len(self.frames) == 1:
            self.imports.add_local_definition(node.name.value)
        frame = self.frames[-1]
        method_of = frame.class_def if frame.function is None else None
        self.facts.functions.setdefault(node.name.value, []).append(FunctionInfo(node, method_of, frame.function))
        params = node.params
        outside = [d.decorator for d in node.decorators]
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.annotation is not None:
                self.facts.annotated.setdefault(param.name.value, []).append(param.annotation.annotation)
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.default is not None:
                outside.append(param.default)
        self._scoped(node, stack, _Frame(node, self.frames[-1].class_def), outside, [node.body])

    def on_lambda(self, node: cst.Lambda, stack) -> None:
        frame = self.frames[-1]
        self._scoped(node, stack, _Frame(frame.function, frame.class_def), [], [node.body])

    # -- loops, guards, with-blocks ------------------------------------------------------
    def _loop(self, node, stack, outside, body, orelse) -> None:
        self._enter_statement(node, stack)
        if orelse is not None:
            stack.append(orelse)
        stack.append(Exit(lambda: self._update(loops=self.frames[-1].loops[:-1])))
        stack.append(body)
        stack.append(Exit(lambda: self._update(loops=self.frames[-1].loops + (Loop(node),))))
        stack.extend(reversed(outside))

    def on_for(self, node: cst.For, stack) -> None:
        # the iterable runs first, then the target is bound (inside the loop's context)
        self._loop(node, stack, [node.iter, Exit(lambda: self._bind_targets(node.target, node.iter, "for")), node.target],
                   node.body, node.orelse)

    def on_while(self, node: cst.While, stack) -> None:
        self._loop(node, stack, [node.test], node.body, node.orelse)

    def _new_guard(self, node: cst.If, branch, which: str, after_exit: str = "") -> Guard:
        frame = self.frames[-1]
        return Guard(
            node=node,
            loop_depth=len(frame.loops),
            with_depth=len(frame.withs),
            periodic=_is_periodic(node.test),
            leaves_loop=_ends_loop(branch) if branch is not None else False,
            branch=which,
            after_exit=after_exit,
            order=self.order + 1,
            bindings=self.binding_index,
        )

    def _guard(self, node: cst.If, branch, which: str, depth: list) -> Exit:
        def push() -> None:
            depth.append(len(self.frames[-1].guards))
            self._update(guards=self.frames[-1].guards + (self._new_guard(node, branch, which),))

        return Exit(push)

    def _end_branch(self, depth: list) -> Exit:
        """Leave a branch: the guards go back to what they were before it, also dropping
        the after-exit guards of ``if``s inside it (``_after_if``: the rest of the branch ran
        only on their other path, the code after the whole ``if`` does not)."""
        return Exit(lambda: self._update(guards=self.frames[-1].guards[:depth.pop()]))

    def _after_if(self, node: cst.If) -> Exit:
        """``if test: ...; return`` (no else): the rest of the block runs only when the test
        was false, as if it were the else branch (and the converse for an exiting else)."""

        def push() -> None:
            body_exit = _exit_kind(node.body)
            else_exit = _exit_kind(node.orelse.body) if isinstance(node.orelse, cst.Else) else ""
            if node.orelse is not None and not isinstance(node.orelse, cst.Else):
                return  # an elif chain: which arms exit is not tracked
            if body_exit and not else_exit:
                guard = self._new_guard(node, node.orelse.body if node.orelse else None, "orelse", body_exit)
            elif else_exit and not body_exit:
                guard = self._new_guard(node, node.body, "body", else_exit)
            else:
                return
            self._update(guards=self.frames[-1].guards + (guard,))

        return Exit(push)

    def on_if(self, node: cst.If, stack) -> None:
        stack.append(self._after_if(node))
        self._enter_statement(node, stack)
        depth: list = []
        if node.orelse is not None:
            branch = node.orelse.body if isinstance(node.orelse, cst.Else) else None
            stack.extend([self._end_branch(depth), node.orelse, self._guard(node, branch, "orelse", depth)])
        stack.extend([self._end_branch(depth), node.body, self._guard(node, node.body, "body", depth), node.test])

    def on_if_exp(self, node: cst.IfExp, stack) -> None:
        """``a if test else b``: ``a`` runs only when ``test`` holds, ``b`` only when it does
        not (``cpu_state if args.fsdp else model.state_dict()``), as the branches of an ``if``."""
        depth: list = []
        stack.extend([self._end_branch(depth), node.orelse, self._guard(node, None, "orelse", depth),
                      self._end_branch(depth), node.body, self._guard(node, None, "body", depth), node.test])

    def on_with(self, node: cst.With, stack) -> None:
        self._enter_statement(node, stack)
        block = WithBlock(node)
        items = []
        for item in node.items:
            items.append(item)
            if item.asname is not None:  # bound once the item's expression has run
                items.append(Exit(lambda item=item: self._bind_targets(item.asname.name, item.item, "with")))
            if isinstance(item.item, cst.Call):
                self.with_items[id(item.item)] = block
            elif isinstance(item.item, cst.IfExp):
                # ``with FSDP.summon_full_params(m) if cond else nullcontext():``
                for branch in (item.item.body, item.item.orelse):
                    if isinstance(branch, cst.Call):
                        self.with_items[id(branch)] = block
        stack.append(Exit(lambda: self._update(withs=self.frames[-1].withs[:-1])))
        stack.append(node.body)
        stack.append(Exit(lambda: self._update(withs=self.frames[-1].withs + (block,))))
        stack.extend(reversed(items))

    # -- calls, bindings, mutations ------------------------------------------------------
    def on_expr(self, node: cst.Expr, stack) -> None:
        if isinstance(node.value, cst.Call):
            self.bare_calls.add(id(node.value))
        stack.append(node.value)

    def on_call(self, node: cst.Call, stack) -> None:
        site = CallSite(
            node,
            self._context(),
            self._next(),
            entered_by=self.with_items.get(id(node)),
            bare=id(node) in self.bare_calls,
        )
        self.facts.calls.append(site)
        stack.append(Exit(lambda: setattr(site, "done", self.order)))
        attr = site.attr
        if attr in STEP_ATTRS and isinstance(node.func, cst.Attribute):
            loops = self.frames[-1].loops
            if loops:
                loops[-1].steps = True
        if attr is not None and (
            (attr.endswith("_") and not attr.startswith("__")) or attr in MUTATING_CALLS
        ):
            # the receiver (``p.add_``, ``m.load_state_dict``) or the first argument
            # (``init.zeros_(w)``, ``setattr(m, ...)``) is what changes
            targets = [node.func.value] if isinstance(node.func, cst.Attribute) else []
            first = first_positional(node)
            first = first.value if first is not None else None
            if first is not None:
                targets.append(first)
            self._mutation(node, tuple(targets))
        push_children(node, stack)

    def _mutation(self, node: cst.CSTNode, targets=()) -> None:
        self.facts.mutations.append(Mutation(node, self._context(), tuple(targets), self.order))

    def on_mutating_statement(self, node, stack) -> None:
        if isinstance(node, cst.AugAssign):
            targets = (node.target,)
        else:  # del a, b.c
            target = node.target
            targets = tuple(e.value for e in target.elements) if isinstance(target, (cst.Tuple, cst.List)) else (target,)
        self._mutation(node, targets)
        push_children(node, stack)

    def _bind_targets(self, target: cst.BaseExpression, value: cst.BaseExpression, kind: str) -> None:
        """Bindings for a loop or ``with ... as`` target: a name, or each name of a tuple."""
        if isinstance(target, (cst.Tuple, cst.List)):
            for index, element in enumerate(target.elements):
                name = dotted_name(element.value)
                if name is not None:
                    self.facts.bindings.append(Binding(name, value, self._context(), self._next(), kind, index))
            return
        name = dotted_name(target)
        if name is not None:
            self.facts.bindings.append(Binding(name, value, self._context(), self._next(), kind))

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, index=None) -> None:
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            self._mutation(target, (target,))
        name = dotted_name(target)
        if name is None:
            return
        self.facts.bindings.append(Binding(name, value, self._context(), self._next(), "assign", index))
        if len(self.frames) == 1 and isinstance(target, cst.Name):
            if index is not None:
                self.imports.add_local_definition(name)
            elif isinstance(value, cst.Name) and value.value == "None":
                pass  # ``except ImportError: fully_shard = None``: no other callable
            elif isinstance(value, (cst.Name, cst.Attribute)):
                self.imports.add_alias_assignment(name, value)
            else:
                self.imports.add_local_definition(name)

    def on_assign(self, node: cst.Assign, stack) -> None:
        def bind() -> None:  # the right side runs first, then the targets are bound
            for target in node.targets:
                if isinstance(target.target, (cst.Tuple, cst.List)):
                    for index, element in enumerate(target.target.elements):
                        if not isinstance(element.value, cst.StarredElement):
                            self._bind(element.value, node.value, index)
                    continue
                self._bind(target.target, node.value)

        stack.append(Exit(bind))
        push_children(node, stack)

    def on_ann_assign(self, node: cst.AnnAssign, stack) -> None:
        if node.value is not None:
            stack.append(Exit(lambda: self._bind(node.target, node.value)))
        name = dotted_name(node.target)
        if name is not None:
            self.facts.annotated.setdefault(name, []).append(node.annotation.annotation)
        push_children(node, stack)


def index_module(module: cst.Module) -> ModuleFacts:
    facts = ModuleFacts(module=module, imports=ImportTable())
    _Indexer(facts).run()
    return facts
