"""What the ``if`` tests around a statement say, and whether the tests around two statements
can all hold in one call of their function.

``if is_fsdp: model = FSDP(model)`` and, further down, ``if (not is_distributed) or is_ddp:
model.state_dict()`` never both run when ``is_ddp = is_distributed and args.dist == "ddp"``
and ``is_fsdp = is_distributed and args.dist == "fsdp"``: one value of ``args.dist`` cannot
equal both strings. A test is read as a formula over atoms:
- a name or attribute (``use_fsdp``, ``args.fsdp``), replaced by the one value the function
  assigns it before the test (outside any loop) when that value is itself a condition (not
  a module global that ``exec(...)`` or ``globals()`` may rebind after it: nanoGPT's
  ``use_fsdp = False`` then ``exec(open("configurator.py").read())``; it stays one atom);
- ``x == "fsdp"``, ``x != 2``, ``x in ("ddp", "fsdp")``, ``x is None`` (``x`` a name or
  attribute, the other side a literal): at most one literal equals ``x``;
- any other comparison of names and literals (``world_size > 1``): one atom per text.
- a call of a test whose answer a process cannot change (``torch.cuda.is_available()``,
  ``torch_api.PROCESS_CONSTANT_TESTS``): one atom, the same in every function of the file,
  so ``never_together`` relates a setup helper's ``else: device = torch.device("cpu")``
  to its caller's ``if torch.cuda.is_available(): FSDP(m, device_id=device)``.
Any other test that calls something (``dist.is_initialized()``), or reads a name the function binds
more than once, in a loop, or after the test, is not read: its value may change between the
two tests, so nothing is concluded from it; inside ``and``/``or``/``not`` such a part is an
atom of its own, free to take either value, so the rest of the test still counts (an "exclusive" answer only ever removes findings; it is
given only where the file shows it).  In a loop a bare name read as a flag is not read
either: the loop may change what it holds without binding it (``if buf: ... else:
buf.append(x)``); an attribute (``args.fsdp``) and a comparison with a literal are.
"""

from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Set, Tuple

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.imports import dotted_name
from fsdp_lint.facts.model import Context, Guard
from fsdp_lint.facts.values import literal_string
from fsdp_lint.facts.walk import descendants

_MAX_DEPTH = 4
_MAX_CASES = 4096
_UNREAD = object()  # a test this module does not read
_PROCESS = "()"  # the key prefix of a process-constant test's atom

# formulas: ("atom", key) | ("eq", subject, literal) | ("not", f) | ("and", fs) | ("or", fs) | ("const", bool)


def _literal(node) -> object:
    """The value of a literal (string, number, True/False/None), else ``_UNREAD``."""
    if isinstance(node, cst.SimpleString):
        text = literal_string(node)
        return _UNREAD if text is None else ("str", text)
    if isinstance(node, cst.Integer):
        return ("int", node.value)
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return ("name", node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(
            node.expression, cst.Integer):
        return ("int", "-" + node.expression.value)
    return _UNREAD


def _stable(guard: Guard, function, name: str) -> Optional[List]:
    """The bindings of ``name`` (and of its head, for ``args.dist``) in ``function`` when
    its value cannot change between the start of the function's body and the test: at most
    one binding, outside loops, before the test.  None when it may change."""
    index = guard.bindings
    if index is None:
        return None
    head = name.split(".", 1)[0]
    own = index.of(function, name)
    heads = index.of(function, head) if head != name else []
    for binding in own + heads:
        if binding.ctx.loops or binding.order >= guard.order or (binding.kind == "for" and guard.loop_depth):
            return None  # a loop's target takes a new value in each iteration
    if len(own) > 1 or len(heads) > 1 or (own and heads):
        return None
    return own


def _formula(expr, guard: Guard, function, depth: int = 0):
    if depth > _MAX_DEPTH:
        return _UNREAD
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return ("const", expr.value == "True")
    if isinstance(expr, cst.Call) and not expr.args and guard.bindings is not None:
        qualname = guard.bindings.qualname(expr.func)
        return ("atom", _PROCESS + qualname) if qualname in torch_api.PROCESS_CONSTANT_TESTS else _UNREAD
    if isinstance(expr, (cst.Name, cst.Attribute)):
        name = dotted_name(expr)
        if name is None:
            return _UNREAD
        own = _stable(guard, function, name)
        if own is None:
            return _UNREAD
        rewritten = function is None and bool(own) and guard.bindings.globals_rewritten_after(own[0].order)
        if len(own) == 1 and own[0].kind == "assign" and own[0].index is None and not rewritten:
            inner = _formula(own[0].value, guard, function, depth + 1)
            if inner is not _UNREAD:
                return inner
            if not isinstance(own[0].value, (cst.Name, cst.Attribute, cst.SimpleString, cst.Integer)) and any(
                    isinstance(node, cst.Call) for node in descendants(own[0].value)):
                # computed once before the test (outside loops: ``_stable``): still one value,
                # the same atom in a loop as outside it, unless the loop may change the object
                if guard.loop_depth and "." not in name and guard.bindings.changed_in_place(function, name):
                    return _UNREAD
                return ("atom", "=" + name)
        if guard.loop_depth and "." not in name and (guard.bindings is None or guard.bindings.changed_in_place(function, name)):
            # a loop may change what a name holds without binding it (``buf.append(x)``):
            # a name the function hands to a call or writes into is not read there; a
            # flag it only reads (``if use_fsdp:``), an attribute (``args.fsdp``) and a
            # comparison are
            return _UNREAD
        return ("atom", name)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return ("not", _read(expr.expression, guard, function, depth + 1))
    if isinstance(expr, cst.BooleanOperation):
        left = _read(expr.left, guard, function, depth + 1)
        right = _read(expr.right, guard, function, depth + 1)
        return ("and" if isinstance(expr.operator, cst.And) else "or", (left, right))
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        return _comparison(expr, guard, function)
    return _UNREAD


def _read(expr, guard: Guard, function, depth: int = 0):
    """``_formula``, where a part it does not read (``dist.get_rank() == 0``, a name bound
    twice) is an atom of its own, free to be true or false: ``mode != "fsdp" and
    dist.get_rank() == 0`` still contradicts ``mode == "fsdp"``."""
    found = _formula(expr, guard, function, depth)
    return ("atom", f"?{id(expr)}") if found is _UNREAD else found


def _comparison(expr: cst.Comparison, guard: Guard, function):
    target = expr.comparisons[0]
    op = target.operator
    left, right = expr.left, target.comparator
    if _literal(left) is not _UNREAD and _literal(right) is _UNREAD:
        left, right = right, left
    name = dotted_name(left) if isinstance(left, (cst.Name, cst.Attribute)) else None
    if name is None or _stable(guard, function, name) is None:
        return _UNREAD
    value = _literal(right)
    if isinstance(op, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot)):
        if value is _UNREAD:
            return _UNREAD
        eq = ("eq", name, value)
        return ("not", eq) if isinstance(op, (cst.NotEqual, cst.IsNot)) else eq
    if isinstance(op, (cst.In, cst.NotIn)) and isinstance(right, (cst.Tuple, cst.List, cst.Set)):
        values = [_literal(e.value) for e in right.elements]
        if not values or any(v is _UNREAD for v in values):
            return _UNREAD
        either = ("or", tuple(("eq", name, v) for v in values))
        return ("not", either) if isinstance(op, cst.NotIn) else either
    if isinstance(op, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)) and (
            value is not _UNREAD):
        return ("atom", f"{name} {type(op).__name__} {value}")
    return _UNREAD


def _guard_formula(guard: Guard, function):
    """The formula that holds where the guarded statement runs (None: not read)."""
    cache: Dict[Tuple[int, int], object] = guard.bindings.formulas if guard.bindings is not None else {}
    key = (id(guard), id(function))
    if key not in cache:
        found = _formula(guard.node.test, guard, function)
        cache[key] = None if found is _UNREAD else (found if guard.branch == "body" else ("not", found))
    return cache[key]


def _atoms(formula, atoms: Set[str], subjects: Dict[str, Set[object]]) -> None:
    kind = formula[0]
    if kind == "atom":
        atoms.add(formula[1])
    elif kind == "eq":
        subjects.setdefault(formula[1], set()).add(formula[2])
    elif kind == "not":
        _atoms(formula[1], atoms, subjects)
    elif kind in ("and", "or"):
        for part in formula[1]:
            _atoms(part, atoms, subjects)


def _holds(formula, truth: Dict[str, bool], chosen: Dict[str, object]) -> bool:
    kind = formula[0]
    if kind == "const":
        return formula[1]
    if kind == "atom":
        return truth[formula[1]]
    if kind == "eq":
        return chosen[formula[1]] == formula[2]
    if kind == "not":
        return not _holds(formula[1], truth, chosen)
    if kind == "and":
        return all(_holds(part, truth, chosen) for part in formula[1])
    return any(_holds(part, truth, chosen) for part in formula[1])


def conditions_contradict(a: Context, b: Context) -> bool:
    """The tests around ``a`` and around ``b`` (one function) cannot all hold in one call of
    it: at most one of the two statements runs."""
    if a.function is not b.function or not a.guards or not b.guards:
        return False
    shared = {(id(g.node), g.branch) for g in a.guards} & {(id(g.node), g.branch) for g in b.guards}
    only_a = [g for g in a.guards if (id(g.node), g.branch) not in shared]
    only_b = [g for g in b.guards if (id(g.node), g.branch) not in shared]
    if not only_a or not only_b:
        return False
    formulas = []
    for guard in only_a + only_b:
        found = _guard_formula(guard, a.function)
        if found is not None:
            formulas.append(found)
    if len(formulas) < 2:
        return False
    return not _satisfiable(formulas)


def never_together(a: Context, b: Context) -> bool:
    """At most one of ``a`` and ``b`` runs in one process: ``conditions_contradict`` within
    one function; across two functions only the process-constant tests relate them (a name
    in one function is another variable than the same name in the other, so every other
    atom is kept apart per side)."""
    if a.function is b.function:
        return conditions_contradict(a, b)
    formulas = []
    for side, ctx in (("a", a), ("b", b)):
        for guard in ctx.guards:
            found = _guard_formula(guard, ctx.function)
            if found is not None:
                formulas.append(_apart(found, side))
    atoms: Set[str] = set()
    for formula in formulas:
        _atoms(formula, atoms, {})
    if not any(atom.startswith(_PROCESS) for atom in atoms):
        return False
    return not _satisfiable(formulas)


def _apart(formula, side: str):
    """``formula`` with every atom and subject except the process-constant tests renamed for
    ``side``."""
    kind = formula[0]
    if kind == "atom":
        return formula if formula[1].startswith(_PROCESS) else ("atom", side + ":" + formula[1])
    if kind == "eq":
        return ("eq", side + ":" + formula[1], formula[2])
    if kind == "not":
        return ("not", _apart(formula[1], side))
    if kind in ("and", "or"):
        return (kind, tuple(_apart(part, side) for part in formula[1]))
    return formula


def _class_flag(guard: Guard, function, class_def, name: str) -> bool:
    """``name`` is ``self.<attr>`` bound once in its class, in ``__init__`` outside loops (and
    before ``guard`` when the guard is in ``__init__`` too): one value for every method call
    of an instance (``self.is_fsdp = config.use_fsdp``)."""
    if guard.bindings is None or not name.startswith("self.") or name.count(".") != 1:
        return False
    found = [b for b in guard.bindings._facts.bindings if b.target == name and b.ctx.class_def is class_def]
    if len(found) != 1:
        return False
    binding = found[0]
    function = binding.ctx.function
    if function is None or function.name.value != "__init__" or binding.ctx.loops or binding.ctx.guards:
        return False
    return not (binding.ctx.function is function and binding.order >= guard.order)


def _class_formula(expr, guard: Guard, function, class_def, depth: int = 0):
    """A test read for another method of the class: only ``self.<attr>`` flags of
    ``_class_flag`` (as themselves, not their values), and comparisons of them with literals."""
    if depth > _MAX_DEPTH:
        return _UNREAD
    if isinstance(expr, cst.Attribute):
        name = dotted_name(expr)
        return ("atom", name) if name is not None and _class_flag(guard, function, class_def, name) else _UNREAD
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        inner = _class_formula(expr.expression, guard, function, class_def, depth + 1)
        return ("not", ("atom", f"?{id(expr.expression)}") if inner is _UNREAD else inner)
    if isinstance(expr, cst.BooleanOperation):
        parts = []
        for side in (expr.left, expr.right):
            found = _class_formula(side, guard, function, class_def, depth + 1)
            parts.append(("atom", f"?{id(side)}") if found is _UNREAD else found)
        return ("and" if isinstance(expr.operator, cst.And) else "or", tuple(parts))
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        target = expr.comparisons[0]
        left, right = expr.left, target.comparator
        if _literal(left) is not _UNREAD and _literal(right) is _UNREAD:
            left, right = right, left
        name = dotted_name(left) if isinstance(left, cst.Attribute) else None
        value = _literal(right)
        if name is None or value is _UNREAD or not _class_flag(guard, function, class_def, name):
            return _UNREAD
        if isinstance(target.operator, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot)):
            eq = ("eq", name, value)
            return ("not", eq) if isinstance(target.operator, (cst.NotEqual, cst.IsNot)) else eq
    return _UNREAD


def excludes_value(ctx: Context, subject: str, literal: str) -> bool:
    """The tests around ``ctx`` say ``subject`` (a name or attribute, ``device.type``) is not
    the string ``literal`` there: after ``if device.type != "cuda": raise ...``,
    ``device.type == "cpu"`` cannot hold."""
    formulas = [f for f in (_guard_formula(g, ctx.function) for g in ctx.guards) if f is not None]
    if not formulas:
        return False
    return not _satisfiable(formulas + [("eq", subject, ("str", literal))])


def class_flags_contradict(a: Context, b: Context) -> bool:
    """``a`` and ``b`` are in different methods of one class, and the tests around them read
    an instance flag set once in ``__init__`` (``if self.is_fsdp:`` in ``__init__`` around
    the wrap, ``else:`` of ``if self.is_fsdp:`` around a clip in another method) in ways that
    cannot both hold: on one instance at most one of the two statements runs."""
    if a.function is b.function or a.class_def is None or a.class_def is not b.class_def:
        return False
    formulas = []
    for ctx in (a, b):
        for guard in ctx.guards:
            found = _class_formula(guard.node.test, guard, ctx.function, a.class_def)
            if found is not _UNREAD:
                formulas.append(found if guard.branch == "body" else ("not", found))
    if len(formulas) < 2:
        return False
    return not _satisfiable(formulas)


def _satisfiable(formulas) -> bool:
    """Some truth of the atoms and some value of each subject make every formula hold (also
    when there are too many cases to try: nothing is concluded then)."""
    atoms: Set[str] = set()
    subjects: Dict[str, Set[object]] = {}
    for formula in formulas:
        _atoms(formula, atoms, subjects)
    atom_list = sorted(atoms)
    subject_list = sorted(subjects)
    choices = [sorted(subjects[s], key=repr) + [None] for s in subject_list]  # None: another value
    cases = 2 ** len(atom_list)
    for options in choices:
        cases *= len(options)
    if cases > _MAX_CASES:
        return True
    for values in itertools.product((False, True), repeat=len(atom_list)):
        truth = dict(zip(atom_list, values))
        for picked in itertools.product(*choices):
            chosen = dict(zip(subject_list, picked))
            if all(_holds(f, truth, chosen) for f in formulas):
                return True
    return False


_TYPE_TESTS = frozenset({"isinstance", "hasattr", "type", "issubclass"})


def tests_type_of(ctx: Context, name: str) -> bool:
    """An ``if`` around ``ctx`` asks what kind of object ``name`` is (``isinstance(model,
    FSDP)``, ``hasattr(model, "clip_grad_norm_")``, ``type(model) is ...``), on either branch
    or as an early exit: which of the values reaching ``name`` runs there is decided by
    the test, so a value of one kind is not known to reach the statement."""
    for guard in ctx.guards:
        for node in descendants(guard.node.test):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in _TYPE_TESTS \
                    and node.args and dotted_name(node.args[0].value) == name:
                return True
    return False


def _failed_type_tests(ctx: Context, test_name: str, name: str):
    """The second argument of each ``test_name(name, ...)`` test (``isinstance``,
    ``hasattr``) of an ``if`` or conditional expression around ``ctx`` that ``ctx`` runs
    where the test is false: the ``else`` of ``if hasattr(name, "item"):``, the body of
    ``if not isinstance(name, FSDP):``."""
    for guard in ctx.guards:
        test, negated = guard.node.test, False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negated = test.expression, True
        if isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == test_name \
                and len(test.args) == 2 and dotted_name(test.args[0].value) == name \
                and guard.branch == ("body" if negated else "orelse"):
            yield test.args[1].value


def tested_without(ctx: Context, name: str, attributes) -> bool:
    """``ctx`` stands where an ``if`` (or a conditional expression) says ``name`` has none
    of ``attributes``: the ``else`` of ``if hasattr(name, "item"):`` or of ``x.item() if
    hasattr(x, "item") else float(x)``, the body of ``if not hasattr(name, "item"):``.  What
    runs there never holds an object that has them (``tests_type_of`` only says the test is
    there, on either branch)."""
    return any(isinstance(attribute, cst.SimpleString) and attribute.evaluated_value in attributes
               for attribute in _failed_type_tests(ctx, "hasattr", name))


def tested_not_instance(facts, ctx: Context, name: str, classes) -> bool:
    """``ctx`` stands where an ``if`` says ``name`` is no instance of ``classes`` (qualified
    names): the ``else`` of ``if isinstance(name, FSDP):``, the body of ``if not
    isinstance(name, FSDP):``."""
    for kinds in _failed_type_tests(ctx, "isinstance", name):
        elements = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        if all(facts.qualname(e) in classes for e in elements):
            return True
    return False
