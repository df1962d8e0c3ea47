"""The one traversal of a module: collects imports, bindings, call sites with their
context, loops that run training steps, guards, with-blocks and mutations.

Rules never traverse the tree themselves; they query the ``ModuleFacts`` built here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

import libcst as cst

from fsdp_lint.facts.imports import ImportTable, dotted_name
from fsdp_lint.facts.model import (
    Binding,
    CallSite,
    Context,
    Guard,
    Loop,
    ModuleFacts,
    Mutation,
    WithBlock,
)

# Calls whose presence marks a training step.
STEP_ATTRS = frozenset({"backward", "step"})
# Calls that modify module state without a trailing underscore.
MUTATING_CALLS = frozenset({"load_state_dict", "setattr", "delattr", "register_parameter"})


@dataclass(frozen=True)
class _Frame:
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


def _ends_loop(body: cst.BaseSuite) -> bool:
    statements = getattr(body, "body", ())
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, cst.SimpleStatementLine) and last.body:
        return isinstance(last.body[-1], (cst.Break, cst.Return, cst.Raise))
    return False


class _Indexer(cst.CSTVisitor):
    def __init__(self, facts: ModuleFacts) -> None:
        super().__init__()
        self.facts = facts
        self.imports = facts.imports
        self.frames: List[_Frame] = [_Frame(None, None)]
        self.statements: List[cst.CSTNode] = [facts.module]
        self.with_items: Dict[int, WithBlock] = {}
        self.bare_calls = set()
        self.order = 0

    def _next(self) -> int:
        self.order += 1
        return self.order

    # -- context ------------------------------------------------------------------
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
        self.frames[-1] = replace(self.frames[-1], **changes)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self.statements.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        if isinstance(original_node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self.statements.pop()

    # -- imports and definitions ------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        self.imports.add_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.imports.add_import_from(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.facts.classes[node.name.value] = node
        if len(self.frames) == 1:
            self.imports.add_local_definition(node.name.value)
        self.frames.append(_Frame(None, node))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.frames.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.frames) == 1:
            self.imports.add_local_definition(node.name.value)
        params = node.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.annotation is not None:
                self.facts.annotated.setdefault(param.name.value, []).append(
                    param.annotation.annotation
                )
        self.frames.append(_Frame(node, self.frames[-1].class_def))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.frames.pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.frames.append(_Frame(self.frames[-1].function, self.frames[-1].class_def))

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self.frames.pop()

    # -- loops, guards, with-blocks ------------------------------------------------------
    def _push_loop(self, node) -> None:
        self._update(loops=self.frames[-1].loops + (Loop(node),))

    def _pop_loop(self) -> None:
        self._update(loops=self.frames[-1].loops[:-1])

    def visit_For_body(self, node: cst.For) -> None:
        self._push_loop(node)

    def leave_For_body(self, node: cst.For) -> None:
        self._pop_loop()

    def visit_While_body(self, node: cst.While) -> None:
        self._push_loop(node)

    def leave_While_body(self, node: cst.While) -> None:
        self._pop_loop()

    def _push_guard(self, node: cst.If, branch, which: str) -> None:
        frame = self.frames[-1]
        guard = Guard(
            node=node,
            loop_depth=len(frame.loops),
            with_depth=len(frame.withs),
            periodic=_is_periodic(node.test),
            leaves_loop=_ends_loop(branch),
            branch=which,
        )
        self._update(guards=frame.guards + (guard,))

    def _pop_guard(self) -> None:
        self._update(guards=self.frames[-1].guards[:-1])

    def visit_If_body(self, node: cst.If) -> None:
        self._push_guard(node, node.body, "body")

    def leave_If_body(self, node: cst.If) -> None:
        self._pop_guard()

    def visit_If_orelse(self, node: cst.If) -> None:
        branch = node.orelse.body if isinstance(node.orelse, cst.Else) else None
        self._push_guard(node, branch, "orelse")

    def leave_If_orelse(self, node: cst.If) -> None:
        self._pop_guard()

    def visit_With(self, node: cst.With) -> None:
        block = WithBlock(node)
        for item in node.items:
            if isinstance(item.item, cst.Call):
                self.with_items[id(item.item)] = block
            elif isinstance(item.item, cst.IfExp):
                # ``with FSDP.summon_full_params(m) if cond else nullcontext():``
                for branch in (item.item.body, item.item.orelse):
                    if isinstance(branch, cst.Call):
                        self.with_items[id(branch)] = block
        self.with_items[id(node)] = block

    def visit_With_body(self, node: cst.With) -> None:
        self._update(withs=self.frames[-1].withs + (self.with_items[id(node)],))

    def leave_With_body(self, node: cst.With) -> None:
        self._update(withs=self.frames[-1].withs[:-1])

    # -- calls, bindings, mutations ------------------------------------------------------
    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, cst.Call):
            self.bare_calls.add(id(node.value))

    def visit_Call(self, node: cst.Call) -> None:
        site = CallSite(
            node,
            self._context(),
            self._next(),
            entered_by=self.with_items.get(id(node)),
            bare=id(node) in self.bare_calls,
        )
        self.facts.calls.append(site)
        attr = site.attr
        if attr in STEP_ATTRS and isinstance(node.func, cst.Attribute):
            loops = self.frames[-1].loops
            if loops:
                loops[-1].steps = True
        if attr is not None and (
            (attr.endswith("_") and not attr.startswith("__")) or attr in MUTATING_CALLS
        ):
            self._mutation(node)

    def _mutation(self, node: cst.CSTNode) -> None:
        ctx = self._context()
        for block in ctx.withs:
            block.mutated = True
        self.facts.mutations.append(Mutation(node, ctx))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._mutation(node)

    def visit_Del(self, node: cst.Del) -> None:
        self._mutation(node)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            self._mutation(target)
        name = dotted_name(target)
        if name is None:
            return
        self.facts.bindings.append(Binding(name, value, self._context(), self._next()))
        if len(self.frames) == 1 and isinstance(target, cst.Name):
            if isinstance(value, (cst.Name, cst.Attribute)):
                self.imports.add_alias_assignment(name, value)
            elif not (isinstance(value, cst.Name) and value.value == "None"):
                self.imports.add_local_definition(name)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, (cst.Tuple, cst.List)):
                for element in target.target.elements:
                    if isinstance(element.value, (cst.Subscript, cst.Attribute)):
                        self._mutation(element.value)
                continue
            self._bind(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)
        name = dotted_name(node.target)
        if name is not None:
            self.facts.annotated.setdefault(name, []).append(node.annotation.annotation)


def index_module(module: cst.Module) -> ModuleFacts:
    facts = ModuleFacts(module=module, imports=ImportTable())
    module.visit(_Indexer(facts))
    return facts
