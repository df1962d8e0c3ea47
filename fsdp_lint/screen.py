"""Which selected rules can report anything on a file, and where, proven with the stdlib
``ast`` before libcst is imported or parses anything (the engine's stage after the text
markers; the command line also reads its compiled-names check from the same walk:
``Summary.confirms``).

Each rule's screen yields the calls where one of its findings may stand (its candidate
sites); a rule with none is dropped for the file, and the sites seed the slice
(``slicing``).  A screen is a necessary condition read off the rule's ``check`` and the
facts it asks, and errs on "can fire":

- a qualified name (``facts.qualname``: ``dist.barrier`` is ``torch.distributed.barrier``
  after ``import torch.distributed as dist``) is read the way ``facts.imports`` reads it,
  through absolute imports and name-to-name assignments, keeping every answer a name may
  have (the facts give up on a name bound twice; the screen keeps both);
- where the facts follow a value (``facts.dataflow``: a receiver to ``Accelerator()``, a
  model to ``FSDP(...)``, an ``if`` test to ``rank == 0``), the screen follows it as
  ``scopes.lookup`` does, but more widely (``_Flow``): every binding of the name in the
  function (else outside functions; ``self.x`` anywhere), every function of a called name,
  and inside a function entered through a call every argument of every call of it for a
  parameter; and it looks at everything inside an expression, not its value alone;
- where the rule pairs two sites of one function (an optimizer built and a module
  wrapped; a cast after a wrap; a save in a function that sets up FSDP), both must stand
  in one ``def`` (lambdas count as their ``def``; module level and class bodies are one
  place, as for the facts, whose ``ctx.function`` is None for both);
- a site under a rank test must stand under an ``if`` of its own function (the facts'
  guards: an ``if``'s branches, the arms of ``a if test else b``, and the rest of a block
  after an ``if`` with an exiting branch; a lambda has none), or in a function with a
  one-rank decorator;
- a fact that a call's arguments alone decide (``collectives.on_subgroup``,
  ``frameworks.plugin_keeps_orig_params``) is evaluated here by its own definition, over
  the call's shape (``facts.call_shape``: the same reading of a libcst and an ``ast`` call).

A rule declares what can make it fire in its own module (``Rule.gate_facts``,
``gate_calls``, ``gate_torch_only``, ``gate_bare``, ``gate_arguments``, ``gate_names``,
``gate_sites``, ``gate_receiver``, ``gate_helper_kinds``, ``gate_anchors``) and ``declared``
derives its screen; FSD101 and FSD104 still have hand-written ones in ``_SCREENS``.  A rule with neither is always kept (and the slice then runs its whole
closure).
``tests/test_screen.py`` checks, on every fixture, on code written to reach each
condition's corners and on generated modules, that the screen changes no diagnostic.  What
it costs is an ``ast.parse`` and one walk (about a twentieth of libcst's parse and facts
walk).
"""

from __future__ import annotations

import ast
import builtins
import types
import warnings
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.call_shape import of_ast
from fsdp_lint.facts.collectives import (
    DEFAULT_GROUP_COLLECTIVES, FSDP_OPTIM_STATE, LIBRARY_GATHERS, on_subgroup,
)
from fsdp_lint.facts.dataflow import RETURNS_SELF
from fsdp_lint.facts.fsdp_modules import cpu_device_text
from fsdp_lint.facts.frameworks import (
    ACCELERATOR, ALWAYS, FABRIC, FSDP_PLUGIN, LIGHTNING_TRAINER, WITH_FSDP, names_fsdp_mode, plugin_keeps_orig_params,
    turns_fsdp_on,
)
from fsdp_lint.facts.optimizers import OPTIMIZER_NAME, optimizer_like_name
from fsdp_lint.facts.optimizers import OPTIMIZER_FACTORY_METHODS
from fsdp_lint.facts.ranks import MAIN_FLAGS, ONE_RANK_DECORATORS, RANK_CALLS, RANK_ENV, RANK_NAME
from fsdp_lint.facts.dtensors import GATHERS
from fsdp_lint.facts.passed_arguments import PASSED

_WRAPS = torch_api.FSDP_CLASS | torch_api.FULLY_SHARD | torch_api.WRAP_FUNCTION
_GATHERS = LIBRARY_GATHERS | torch_api.FULL_STATE_DICT_FUNCTIONS
_OPTIM_STATE = frozenset(f"{c}.{name}" for c in torch_api.FSDP_CLASS for name in FSDP_OPTIM_STATE)
_SAVES = torch_api.TORCH_SAVE | torch_api.SAFETENSORS_SAVE
_PARTIAL = "functools.partial"
_PARAMETER_CALLS = frozenset({"parameters", "named_parameters"})
_BLOCKS = frozenset({"body", "orelse", "finalbody"})
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_SKIPPED_FIELDS = frozenset({"ctx", "type_comment", "kind", "type_ignores"})
_CHILD_FIELDS: Dict[type, Tuple[str, ...]] = {}


def parse(text: str) -> Optional[ast.Module]:
    """The file's ``ast``, or None where CPython cannot parse it (libcst then decides)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _is_self_method(func) -> bool:
    return type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self"


def _last(node) -> Optional[str]:
    kind = type(node)
    if kind is ast.Name:
        return node.id
    if kind is ast.Attribute:
        return node.attr
    return None


def _dotted(node) -> Optional[str]:
    parts = []
    while type(node) is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    if type(node) is ast.Name:
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _block(statements: List[ast.stmt], key: int, guards: tuple, push) -> None:
    """Push a block's statements (last first); after an ``if`` one of whose branches ends
    by leaving the block, the rest of the block is guarded by its test too."""
    items = []
    for statement in statements:
        items.append((statement, key, (), guards))
        if type(statement) is ast.If and (
            (statement.body and isinstance(statement.body[-1], _EXITS))
            or (statement.orelse and isinstance(statement.orelse[-1], _EXITS))
        ):
            guards = guards + (statement.test,)
    for item in reversed(items):
        push(item)


class _Soft(tuple):
    """The holders of a node inside an annotation (the compiler may drop it)."""


_SOFT = _Soft()


class _Frame:
    """What one ``def`` holds (key 0: module level and class bodies)."""

    __slots__ = ("name", "calls", "one_rank", "returns_value", "params")

    def __init__(self, name: Optional[str] = None) -> None:
        self.name = name
        self.calls: List[ast.Call] = []
        self.one_rank = False  # decorated ``@rank_zero_only`` and the like
        self.returns_value = False
        self.params: Set[str] = set()


class Summary:
    """One walk over a module's ``ast``: what the screens ask."""

    def __init__(self, tree: ast.Module, project: Optional[Dict[str, frozenset]] = None,
                 launched: bool = False) -> None:
        # a launch configuration starts the file with FSDP (``fsdp_lint.launch``)
        self.launched = launched
        # what the project helpers this file imports do, by the dotted name a call writes
        # (``ProjectView.gate_kinds``: the project index's own summaries, not a copy here)
        self.project: Dict[str, frozenset] = project or {}
        self.identifiers: Set[str] = set()  # names, attributes, imports, defs, parameters (code)
        self.soft: Set[str] = set()  # identifiers also seen in annotations, ``global`` and ``nonlocal``
        self.strings: Set[str] = set()  # str constants
        self.keywords: Set[str] = set()  # keyword argument names of calls
        self.imported_modules: Set[str] = set()
        self.frames: Dict[int, _Frame] = {0: _Frame()}
        self.guards: Dict[int, tuple] = {}  # id(call) -> the ``if`` tests guarding it in its function
        self.param_holders: Set[int] = set()  # id(call) of calls with ``X.parameters()`` in their arguments
        self.bare: Set[int] = set()  # id(call) of calls that are a whole expression statement
        # target (dotted) -> (value bound to it, frame of the binding)
        self.bindings: Dict[str, List[Tuple[ast.expr, int]]] = {}
        # id(bound value) -> the ``if`` tests guarding its binding in its function
        # (``ranks.set_on_one_rank``: a value made under a rank test exists on some ranks)
        self.binding_guards: Dict[int, tuple] = {}
        self.returns: Dict[str, List[Tuple[ast.expr, int]]] = {}  # function name -> (returned value, frame)
        self.defaults: Dict[int, List[Tuple[str, ast.expr, int]]] = {}  # frame -> (parameter, default, frame)
        self.calls_by_name: Dict[str, List[ast.Call]] = {}  # callee's last name -> calls
        # frame of a class's ``__init__`` -> the class's name (its callers call the class)
        self.init_classes: Dict[int, str] = {}
        self.class_methods: Set[str] = set()  # names of the methods the file's classes define
        self.call_frames: Dict[int, int] = {}  # id(call) -> its frame
        self.assigned_to: Dict[int, Set[str]] = {}  # id(call) -> names bound to its value
        self.annotated: Dict[str, List[ast.expr]] = {}
        self.imported: Dict[str, Set[str]] = {}  # name -> qualified names absolute imports bind to it
        self.aliased: Dict[str, List[ast.expr]] = {}  # plain name -> dotted values assigned to it
        # lines of dict displays with an "fsdp"/"fsdp_config"/"fsdp_plugin"/"strategy" key
        # (``frameworks._dict_turns_fsdp_on``: a dict passed as ``**args``)
        self.fsdp_dict_lines: Set[int] = set()
        self.fsdp_attributes: List[ast.Attribute] = []  # ``X.FSDP``
        self.formatted: List[ast.FormattedValue] = []  # f-string fields with a format spec
        self.call_values: Dict[str, List[ast.Call]] = {}  # dotted name -> calls whose value it is bound to
        self._qualnames: Dict[str, Set[str]] = {}
        self._callees: Dict[int, Set[str]] = {}
        self._cache: Dict[str, object] = {}
        self._walk(tree)
        self.names = self.identifiers | self.soft  # what the screens read (the facts see annotations)

    def imports_project_names(self) -> bool:
        """The file imports names of other project files (``ProjectView.gate_kinds``'s
        "imported", or a helper's kinds): one may be a class whose methods a rule reads."""
        found = self._cache.get("imports_project_names")
        if found is None:
            found = self._cache["imports_project_names"] = any(name != PASSED for name in self.project)
        return found

    def confirms(self, rules: Sequence[type], text: str) -> bool:
        """``engine.ast_confirms`` (a rule's first marker group names an identifier the
        compiled code uses), read from the walk: an identifier of code answers yes, one
        seen only in an annotation or a ``global`` statement is left to the compiler."""
        wanted = {marker for rule in rules for marker in rule.markers[0]}
        if self.launched:  # a launch that turns FSDP on: the markers that then make a rule wanted
            wanted |= {marker for rule in rules if rule.launch_markers for marker in rule.launch_markers[0]}
        code = self.identifiers | self.imported_modules
        if not code.isdisjoint(wanted):
            return True
        if self.soft.isdisjoint(wanted):
            return False
        return ast_confirms(text, rules)

    # -- the walk ----------------------------------------------------------------------
    def _walk(self, tree: ast.Module) -> None:
        """Iterative; each item carries its frame, the calls in whose arguments it sits,
        and the ``if`` tests guarding it in its frame."""
        identifiers, strings, frames, guarded = self.identifiers, self.strings, self.frames, self.guards
        calls_by_name, soft = self.calls_by_name, self.soft
        stack: List[Tuple[ast.AST, int, tuple, tuple]] = []
        push = stack.append
        _block(tree.body, 0, (), push)
        while stack:
            node, key, holders, guards = stack.pop()
            kind = type(node)
            if kind is ast.Name:
                (soft if type(holders) is _Soft else identifiers).add(node.id)
                continue
            if kind is ast.Attribute:
                (soft if type(holders) is _Soft else identifiers).add(node.attr)
                if node.attr == "FSDP":
                    self.fsdp_attributes.append(node)  # ``frameworks.names_fsdp_mode``
                push((node.value, key, holders, guards))
                continue
            if kind is ast.Constant:
                if type(node.value) is str:
                    strings.add(node.value)
                continue
            if kind is ast.Call:
                frame = frames[key]
                frame.calls.append(node)
                self.call_frames[id(node)] = key
                if guards:
                    guarded[id(node)] = guards
                func = node.func
                name = _last(func)
                if name is not None:
                    calls_by_name.setdefault(name, []).append(node)
                    if holders and name in _PARAMETER_CALLS and type(func) is ast.Attribute and _dotted(func.value):
                        self.param_holders.update(map(id, holders))
                inner = holders + (node,)
                if type(holders) is _Soft:
                    inner = _Soft(inner)
                for keyword in reversed(node.keywords):
                    if keyword.arg:
                        self.keywords.add(keyword.arg)
                    push((keyword.value, key, inner, guards))
                for arg in reversed(node.args):
                    push((arg, key, inner, guards))
                push((func, key, holders, guards))
                continue
            if kind is ast.FormattedValue and node.format_spec is not None and node.conversion == -1:
                self.formatted.append(node)  # ``Rule.gate_formats``
            if kind is ast.Expr and type(node.value) is ast.Call:
                self.bare.add(id(node.value))
            if kind is ast.Dict and any(
                    type(k) is ast.Constant and k.value in ("fsdp", "fsdp_config", "fsdp_plugin", "strategy")
                    for k in node.keys):
                self.fsdp_dict_lines.add(node.lineno)
            if kind is ast.If:
                inner = guards + (node.test,)
                _block(node.orelse, key, inner, push)
                _block(node.body, key, inner, push)
                push((node.test, key, holders, guards))
                continue
            if kind is ast.IfExp:  # ``a if test else b``: the facts guard each arm as an ``if``'s branch
                inner = guards + (node.test,)
                push((node.orelse, key, holders, inner))
                push((node.body, key, holders, inner))
                push((node.test, key, holders, guards))
                continue
            if kind in (ast.FunctionDef, ast.AsyncFunctionDef):
                self._function(node, key, guards, push)
                continue
            if kind is ast.ClassDef:
                identifiers.add(node.name)
                for child in node.body:
                    if type(child) in (ast.FunctionDef, ast.AsyncFunctionDef):
                        self.class_methods.add(child.name)
                        if child.name == "__init__":
                            self.init_classes[id(child)] = node.name
                _block(node.body, 0, (), push)  # a class body: ``ctx.function`` is None, no guards
                for child in (*node.decorator_list, *node.bases, *node.keywords):
                    push((child, key, (), guards))
                continue
            if kind is ast.Lambda:
                args = node.args
                for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                    if arg is not None:
                        identifiers.add(arg.arg)
                push((node.body, key, holders, ()))  # a lambda's own frame has no guards
                for child in (*args.defaults, *(d for d in args.kw_defaults if d is not None)):
                    push((child, key, holders, guards))
                continue
            if kind is ast.Assign:
                for target in node.targets:
                    self._bind(target, node.value, key)
                if guards:
                    self.binding_guards[id(node.value)] = guards
            elif kind is ast.AnnAssign:
                dotted = _dotted(node.target)
                if dotted is not None:
                    self.annotated.setdefault(dotted, []).append(node.annotation)
                if node.value is not None:
                    self._bind(node.target, node.value, key)
                    if guards:
                        self.binding_guards[id(node.value)] = guards
                    push((node.value, key, holders, guards))
                push((node.annotation, key, _SOFT, guards))
                # ``x: int`` without a value binds no name the compiler lists (at module
                # level it only fills ``__annotations__``)
                push((node.target, key, holders if node.value is not None else _SOFT, guards))
                continue
            elif kind in (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith):
                # ``for``/``with ... as`` bindings: the facts' partials may come from them
                pairs = [(node.target, node.iter)] if kind in (ast.For, ast.AsyncFor) else [
                    (item.optional_vars, item.context_expr) for item in node.items if item.optional_vars is not None
                ]
                for target, value in pairs:
                    if type(value) is ast.Call:
                        for element in target.elts if type(target) in (ast.Tuple, ast.List) else (target,):
                            dotted = _dotted(element)
                            if dotted is not None:
                                self.call_values.setdefault(dotted, []).append(value)
            elif kind is ast.Return:
                frame = frames[key]
                if node.value is not None and frame.name is not None:
                    frame.returns_value = True
                    self.returns.setdefault(frame.name, []).append((node.value, key))
            elif kind is ast.Import:
                for alias in node.names:
                    self.imported_modules.add(alias.name)
                    identifiers.update(alias.name.split("."))
                    if alias.asname:
                        identifiers.add(alias.asname)
                        self.imported.setdefault(alias.asname, set()).add(alias.name)
                    else:
                        head = alias.name.split(".", 1)[0]
                        self.imported.setdefault(head, set()).add(head)
                continue
            elif kind is ast.ImportFrom:
                if node.module:
                    identifiers.update(node.module.split("."))
                    if not node.level:
                        self.imported_modules.add(node.module)
                for alias in node.names:
                    identifiers.add(alias.name)
                    if alias.asname:
                        identifiers.add(alias.asname)
                    if node.module and not node.level and alias.name != "*":  # relative: the user's own code
                        self.imported.setdefault(alias.asname or alias.name, set()).add(f"{node.module}.{alias.name}")
                continue
            elif kind in (ast.Global, ast.Nonlocal):
                soft.update(node.names)
                continue
            elif kind is ast.ExceptHandler:
                if node.name:
                    identifiers.add(node.name)
            elif kind is ast.arg:
                identifiers.add(node.arg)
            else:
                for attribute in ("name", "rest"):  # match patterns
                    value = getattr(node, attribute, None)
                    if type(value) is str:
                        identifiers.add(value)
            fields = _CHILD_FIELDS.get(kind)
            if fields is None:
                fields = _CHILD_FIELDS[kind] = tuple(f for f in kind._fields if f not in _SKIPPED_FIELDS)
            for name in reversed(fields):
                value = getattr(node, name, None)
                if type(value) is list:
                    if name in _BLOCKS and value and isinstance(value[0], ast.stmt):
                        _block(value, key, guards, push)
                        continue
                    for child in reversed(value):
                        if isinstance(child, ast.AST):
                            push((child, key, holders, guards))
                elif isinstance(value, ast.AST):
                    push((value, key, holders, guards))

    def _function(self, node, outer: int, guards: tuple, push) -> None:
        name = node.name
        self.identifiers.add(name)
        key = id(node)
        self.frames[key] = frame = _Frame(name)
        _block(node.body, key, (), push)
        for decorator in node.decorator_list:
            callee = decorator.func if type(decorator) is ast.Call else decorator
            dotted = _dotted(callee)
            if dotted is not None and dotted.rsplit(".", 1)[-1].lstrip("_") in ONE_RANK_DECORATORS:
                frame.one_rank = True
            push((decorator, outer, (), guards))
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        defaults = self.defaults.setdefault(key, [])
        for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
            defaults.append((arg.arg, default, outer))
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            if default is not None:
                defaults.append((arg.arg, default, outer))
        for arg in (*positional, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is None:
                continue
            self.identifiers.add(arg.arg)
            frame.params.add(arg.arg)
            if arg.annotation is not None:
                self.annotated.setdefault(arg.arg, []).append(arg.annotation)
                push((arg.annotation, outer, _SOFT, guards))
        for default in (*args.defaults, *(d for d in args.kw_defaults if d is not None)):
            push((default, outer, (), guards))
        if node.returns is not None:
            push((node.returns, outer, _SOFT, guards))

    def _bind(self, target, value, key: int) -> None:
        if type(target) in (ast.Tuple, ast.List):
            for element in target.elts:
                self._bind(element.value if type(element) is ast.Starred else element, value, key)
            return
        dotted = _dotted(target)
        if dotted is None:
            return
        self.bindings.setdefault(dotted, []).append((value, key))
        if type(value) is ast.Call:
            self.assigned_to.setdefault(id(value), set()).add(dotted)
            self.call_values.setdefault(dotted, []).append(value)
        elif "." not in dotted and type(value) in (ast.Name, ast.Attribute):
            self.aliased.setdefault(dotted, []).append(value)

    # -- names ---------------------------------------------------------------------------
    def qualnames(self, expr) -> Set[str]:
        """The qualified names ``expr`` may stand for (``facts.imports``: a name's absolute
        imports, or the dotted value it is assigned, then the attributes after it)."""
        parts = []
        while type(expr) is ast.Attribute:
            parts.append(expr.attr)
            expr = expr.value
        if type(expr) is not ast.Name or (expr.id not in self.imported and expr.id not in self.aliased):
            return set()  # not a name an import (or an alias of one) binds
        found = self._name_qualnames(expr.id, set())
        if parts and found:
            rest = ".".join(reversed(parts))
            found = {f"{q}.{rest}" for q in found}
        return found

    def _name_qualnames(self, name: str, seen: Set[str]) -> Set[str]:
        hit = self._qualnames.get(name)
        if hit is not None:
            return hit
        found = set(self.imported.get(name, ()))
        seen.add(name)
        for value in self.aliased.get(name, ()):
            dotted = _dotted(value)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head in seen:
                continue
            found.update(f"{q}.{rest}" if rest else q for q in self._name_qualnames(head, seen))
        if len(seen) == 1:
            self._qualnames[name] = found
        seen.discard(name)
        return found

    def callee(self, call: ast.Call) -> Set[str]:
        """The callee's qualified names, and the callable a name bound to
        ``functools.partial(F, ...)`` stands for (``fsdp_modules``: a partial of FSDP)."""
        memo = self._callees
        found = memo.get(id(call))
        if found is None:
            func = call.func
            found = self.qualnames(func)
            dotted = _dotted(func)
            for value in self.call_values.get(dotted, ()) if dotted is not None else ():
                if value.args and _PARTIAL in self.qualnames(value.func):
                    found = found | self.qualnames(value.args[0])
            memo[id(call)] = found
        return found

    def imports_from(self, package: str) -> bool:
        return any(m == package or m.startswith(package + ".") for m in self.imported_modules)

    # -- FSDP constructions --------------------------------------------------------------
    def wraps(self) -> List[Tuple[int, ast.Call, bool, Set[str]]]:
        """(frame, call, FSDP1, names) of every call that may construct FSDP (``FSDP(m)``,
        ``fully_shard(m)``, a partial of FSDP), with the names it binds, and for FSDP2 the
        names it takes (``fsdp_modules``: FSDP2 shards its argument in place)."""
        found = self._cache.get("wraps")
        if found is None:
            found = []
            for key, frame in self.frames.items():
                for call in frame.calls:
                    names = self.callee(call)
                    if names.isdisjoint(_WRAPS):
                        kinds = self.project_kinds(call)
                        if "shards" in kinds:  # ``fsdp_modules._project_shard``
                            taken = set(filter(None, (_dotted(a) for a in call.args)))
                            taken.update(filter(None, (_dotted(k.value) for k in call.keywords)))
                            found.append((key, call, False, set(self.assigned_to.get(id(call), ())) | taken))
                        elif "wraps" in kinds:  # ``fsdp_modules._project_wrap``: an FSDP1 wrap it returns
                            found.append((key, call, True, set(self.assigned_to.get(id(call), ()))))
                        continue
                    # ``wrap(m)`` may be FSDP1 (``fsdp_modules``: under ``enable_wrap(wrapper_cls=FSDP)``)
                    fsdp1 = not names.isdisjoint(torch_api.FSDP_CLASS) or not names.isdisjoint(torch_api.WRAP_FUNCTION)
                    bound = set(self.assigned_to.get(id(call), ()))
                    taken = set(filter(None, (_dotted(a) for a in call.args)))
                    taken.update(filter(None, (_dotted(k.value) for k in call.keywords if k.arg == "module")))
                    if not names.isdisjoint(torch_api.FULLY_SHARD):
                        found.append((key, call, False, bound | taken))
                    if fsdp1:
                        found.append((key, call, True, bound))
            self._through_helpers(found)
            self._cache["wraps"] = found
        return found

    def _through_helpers(self, found: List[Tuple[int, ast.Call, bool, Set[str]]]) -> None:
        """``fsdp_modules._through_helpers``: a function whose FSDP2 wrap takes one of its
        parameters shards what its callers pass, so each call of it by name (three levels
        deep, as the facts) is an FSDP2 wrap taking all its arguments."""
        pending = [(key, names) for key, _, fsdp1, names in found if not fsdp1]
        frame_of: Optional[Dict[int, int]] = None
        seen: Set[str] = set()
        for _ in range(3):
            later = []
            for key, names in pending:
                frame = self.frames[key]
                if frame.name is None or frame.name in seen or names.isdisjoint(frame.params):
                    continue
                seen.add(frame.name)
                if frame_of is None:
                    frame_of = {id(c): k for k, f in self.frames.items() for c in f.calls}
                for call in self.calls_by_name.get(frame.name, ()):
                    caller = frame_of.get(id(call))
                    if caller is None:
                        continue
                    taken = set(self.assigned_to.get(id(call), ()))
                    taken.update(filter(None, (_dotted(a) for a in call.args)))
                    taken.update(filter(None, (_dotted(k.value) for k in call.keywords)))
                    found.append((caller, call, False, taken))
                    later.append((caller, taken))
            pending = later

    def project_kinds(self, call: ast.Call) -> frozenset:
        """What the project helper ``call`` calls does ("collective", "shards", "saves")."""
        if not self.project:
            return frozenset()
        return self.project.get(_dotted(call.func) or "", frozenset())

    def local_helpers(self) -> Dict[str, Set[str]]:
        """``facts.helpers`` for this file's functions, read wider: by name, what a function
        may do somewhere in its body ("collective": a call that may run a collective by the
        same reading as a call outside a helper, ``_collective_here``; "saves":
        ``torch.save``), also through the functions of this file it calls."""
        found = self._cache.get("local_helpers")
        if found is None:
            found = {}
            calls_of: Dict[str, Set[str]] = {}
            for frame in self.frames.values():
                if frame.name is None:
                    continue
                kinds = found.setdefault(frame.name, set())
                for call in frame.calls:
                    names = self.callee(call)
                    if "collective" not in kinds and _collective_here(self, call):
                        kinds.add("collective")
                    if not names.isdisjoint(_SAVES):
                        kinds.add("saves")
                    if type(call.func) is ast.Name:
                        calls_of.setdefault(frame.name, set()).add(call.func.id)
                    elif _is_self_method(call.func):  # ``self.m(...)``: a method of the class
                        calls_of.setdefault(frame.name, set()).add(call.func.attr)
            for _ in range(3):
                for name, callees in calls_of.items():
                    for callee in callees:
                        found[name] |= found.get(callee, set())
            self._cache["local_helpers"] = found
        return found

    def helper_kinds(self, call: ast.Call) -> Set[str]:
        """What the helper ``call`` calls may do: a project helper's summary, or this
        file's function of that name (``local_helpers``)."""
        kinds = set(self.project_kinds(call))
        if type(call.func) is ast.Name:
            kinds |= self.local_helpers().get(call.func.id, set())
        elif _is_self_method(call.func):
            kinds |= self.local_helpers().get(call.func.attr, set())
        return kinds

    def fsdp1_wraps(self) -> bool:
        return any(fsdp1 for _, _, fsdp1, _ in self.wraps())

    def fsdp2_wraps(self) -> bool:
        return any(not fsdp1 for _, _, fsdp1, _ in self.wraps())

    def fsdp1_annotated(self) -> Set[str]:
        """Names annotated as torch's FSDP class (``facts.annotated``)."""
        found = self._cache.get("fsdp1_annotated")
        if found is None:
            found = self._cache["fsdp1_annotated"] = {
                name for name, hints in self.annotated.items()
                if any(not self.qualnames(h).isdisjoint(torch_api.FSDP_CLASS) for h in hints)
            }
        return found

    def fsdp1_names(self) -> Set[str]:
        """``fsdp_modules.fsdp1``: names bound to an FSDP1 wrap, or annotated as FSDP."""
        found = self._cache.get("fsdp1_names")
        if found is None:
            found = set().union(*(names for _, _, fsdp1, names in self.wraps() if fsdp1))
            found = self._cache["fsdp1_names"] = found | self.fsdp1_annotated()
        return found

    def flow(self, key: str, leaf: Callable[[ast.AST], bool], callers: bool = False,
             guarded: bool = False, tests: bool = False, unseen_callers: bool = True) -> "_Flow":
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = _Flow(self, leaf, callers, guarded, tests, unseen_callers)
        return found


# -- following values ----------------------------------------------------------------------
class _Flow:
    """Which expressions may hold (or lead the facts to) a node ``leaf`` accepts: a least
    fixpoint over what ``facts.dataflow`` follows, each step taken as widely as it could be
    (every binding of a name, every function of a called name, every argument of every call
    of a function for its parameters, every node inside an expression)."""

    def __init__(self, summary: Summary, leaf: Callable[[ast.AST], bool], callers: bool = False,
                 guarded: bool = False, tests: bool = False, unseen_callers: bool = True) -> None:
        self.summary = summary
        self.leaf = leaf
        # ``facts.ranks``: a rank test is read where a test can decide (``_read_test``), not
        # in every node of a value (``x[rank]`` is a value of every rank, not a rank test)
        self.tests = tests
        # ``ranks.set_on_one_rank``: a binding's value also depends on the tests guarding the
        # binding (``if is_main: model = ...``, then ``if model is not None:``)
        self.guarded = guarded
        # ``facts.callers`` follows this fact into what a function's callers pass for a
        # parameter read on its own: every call of it by name in the file, and (where
        # another project file imports this one, or for an ``__init__``, whose calls are
        # its class's) any value
        self.callers = callers
        # False: only the calls of this file (``fsdp_modules.origins_with_callers`` reads no
        # other file's): a parameter never holds any value
        self.unseen_callers = unseen_callers
        self.info: Dict[int, Tuple[bool, Set[str], Set[str]]] = {}
        self.known: Dict[Tuple[int, int, bool], bool] = {}  # (id(expr), frame, entered) -> may reach a leaf

    def _read(self, expr: ast.AST) -> Tuple[bool, Set[str], Set[str]]:
        """(holds a leaf, dotted names the facts follow from it, functions whose ``return``
        they follow).  Followed: a whole ``a.b.c`` (not ``a`` on its own), the receiver
        of a method that returns it (``m.to(...)``), a function called by name or as
        ``self.f(...)``."""
        hit = self.info.get(id(expr))
        if hit is not None:
            return hit
        if expr is _ANY_VALUE:
            return True, set(), set()
        if self.tests:
            hit = self.info[id(expr)] = self._read_test(expr)
            return hit
        leaf = self.leaf
        found = False
        chains: Set[str] = set()
        callees: Set[str] = set()
        stack: List[Tuple[ast.AST, bool]] = [(expr, True)]
        while stack:
            node, whole = stack.pop()
            if not found and leaf(node):
                found = True
            kind = type(node)
            if kind is ast.Name:
                if whole:
                    chains.add(node.id)
                continue
            if kind is ast.Attribute:
                if whole:
                    dotted = _dotted(node)
                    if dotted is not None:
                        chains.add(dotted)
                stack.append((node.value, False))
                continue
            if kind is ast.Call:
                func = node.func
                if type(func) is ast.Name:
                    callees.add(func.id)
                elif type(func) is ast.Attribute:
                    if type(func.value) is ast.Name and func.value.id == "self":
                        callees.add(func.attr)
                    if func.attr in RETURNS_SELF:
                        stack.append((func.value, True))
                stack.append((func, False))
                stack.extend((child, True) for child in (*node.args, *(k.value for k in node.keywords)))
                continue
            stack.extend((child, True) for child in ast.iter_child_nodes(node))
        hit = self.info[id(expr)] = (found, chains, callees)
        return hit

    def _read_test(self, expr: ast.AST) -> Tuple[bool, Set[str], Set[str]]:
        """``_read`` of a value as ``ranks.one_rank_branch`` reads a test: through ``and``/
        ``or``/``not``, both sides of a comparison, both arms (and the test) of a
        conditional expression, the items of a display (``sources`` reads an entry of a
        dict or tuple), an index; a call by its name (a rank call, a main-process flag: the
        leaf) and its ``return`` (``_returns_rank_test``), into its arguments only for
        ``int(...)`` and an environment read (``int(os.environ.get("RANK", 0))``).  Never into
        the arguments of any other call, arithmetic or a comprehension: the rank facts
        read none of those as a test."""
        leaf = self.leaf
        found = False
        chains: Set[str] = set()
        callees: Set[str] = set()
        stack: List[ast.AST] = [expr]
        while stack:
            node = stack.pop()
            if not found and leaf(node):
                found = True
            kind = type(node)
            if kind is ast.Name:
                chains.add(node.id)
            elif kind is ast.Attribute:
                dotted = _dotted(node)
                if dotted is not None:
                    chains.add(dotted)
            elif kind is ast.BoolOp:
                stack.extend(node.values)
            elif kind is ast.UnaryOp:
                stack.append(node.operand)
            elif kind is ast.Compare:
                stack.append(node.left)
                stack.extend(node.comparators)
            elif kind is ast.IfExp:
                stack.extend((node.test, node.body, node.orelse))
            elif kind in (ast.Tuple, ast.List, ast.Set):
                stack.extend(node.elts)
            elif kind is ast.Dict:
                stack.extend(v for v in node.values if v is not None)
            elif kind in (ast.Subscript, ast.Starred, ast.NamedExpr, ast.Await):
                stack.append(node.value)
                if kind is ast.Subscript:
                    stack.append(node.slice)
            elif kind is ast.Call:
                func = node.func
                if not found and leaf(func):
                    found = True
                if type(func) is ast.Name:
                    callees.add(func.id)
                elif type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self":
                    callees.add(func.attr)
                if _last(func) in _TEST_ARGUMENT_CALLS:
                    stack.extend(node.args)
        return found, chains, callees

    def _lookup(self, chain: str, key: int, entered: bool) -> List[Tuple[ast.AST, int, bool]]:
        """``scopes.lookup`` read widely: in a function, its own bindings of the name if
        any; else, for a parameter, what the calls of the function pass (only inside a
        function entered through a call: ``dataflow._parameter``); else the bindings
        outside functions.  ``self.x``: every binding of it."""
        summary = self.summary
        bindings = summary.bindings.get(chain, ())
        head = chain.split(".", 1)[0]
        if head == "self" and "." in chain:
            return [(value, k, entered) for value, k in bindings]
        if key != 0:
            local = [(value, k, entered) for value, k in bindings if k == key]
            if local:
                return local
            frame = summary.frames[key]
            if head in frame.params:
                if head != chain:
                    return []
                # an ``__init__`` is called as its class (``facts.callers``)
                callee = summary.init_classes.get(key) if frame.name == "__init__" else frame.name
                if not entered:
                    if not self.callers:
                        return []
                    if self.unseen_callers and (callee is None or PASSED in summary.project):
                        return [(_ANY_VALUE, 0, False)]
                found = [(value, k, True) for name, value, k in summary.defaults.get(key, ()) if name == chain]
                for call in summary.calls_by_name.get(callee, ()):
                    k = summary.call_frames[id(call)]
                    found.extend((arg, k, True) for arg in call.args)
                    found.extend((kw.value, k, True) for kw in call.keywords)
                return found
            if "." in chain and any(k == key for _, k in summary.bindings.get(head, ())):
                return []  # ``x.attr`` of a local ``x``
        return [(value, k, entered) for value, k in bindings if k == 0]

    def _depends(self, expr, key: int, entered: bool) -> List[Tuple[ast.AST, int, bool]]:
        """What the facts may follow from ``expr`` (in frame ``key``): the bindings of the
        names it reads (``_lookup``), the ``return`` values of the functions it calls
        (then inside them)."""
        summary = self.summary
        _, chains, callees = self._read(expr)
        found: List[Tuple[ast.AST, int, bool]] = []
        for chain in chains:
            values = self._lookup(chain, key, entered)
            found.extend(values)
            if self.guarded:
                guards = summary.binding_guards
                found.extend((test, k, mode) for value, k, mode in values for test in guards.get(id(value), ()))
        for callee in callees:
            found.extend((value, k, True) for value, k in summary.returns.get(callee, ()))
        return found

    def may_reach(self, exprs: Sequence[ast.AST], key: int, entered: bool = False) -> bool:
        """Whether one of ``exprs`` (standing in frame ``key``) may reach a leaf
        (``entered``: in a function the facts entered through a call).  Everything they
        lead to is collected, then marked from the leaves up (the least fixpoint over that
        part of the graph is the whole graph's answer for it: kept for later questions)."""
        known = self.known
        nodes: Dict[Tuple[int, int, bool], ast.AST] = {}
        edges: Dict[Tuple[int, int, bool], List[Tuple[int, int, bool]]] = {}
        stack = [(e, key, entered) for e in exprs if (id(e), key, entered) not in known]
        while stack:
            expr, k, mode = stack.pop()
            node = (id(expr), k, mode)
            if node in nodes:
                continue
            nodes[node] = expr
            depends = self._depends(expr, k, mode)
            edges[node] = [(id(d), dk, dm) for d, dk, dm in depends]
            stack.extend(
                (d, dk, dm) for d, dk, dm in depends if (id(d), dk, dm) not in nodes and (id(d), dk, dm) not in known
            )
        reached = {node for node, expr in nodes.items() if self._read(expr)[0]}
        reached.update(n for targets in edges.values() for n in targets if known.get(n))
        changed = True
        while changed:
            changed = False
            for node, targets in edges.items():
                if node not in reached and any(t in reached for t in targets):
                    reached.add(node)
                    changed = True
        for node in nodes:
            known[node] = node in reached
        return any(known[(id(e), key, entered)] for e in exprs)


# calls whose arguments a rank test reads (``ranks._is_rank_value``: ``int(rank)``;
# ``processes.environment_read``: ``os.environ.get("RANK")``, ``os.getenv("LOCAL_RANK")``)
_TEST_ARGUMENT_CALLS = frozenset({"int", "get", "getenv"})

# what a parameter may hold when callers the file cannot see pass it (``_Flow.callers``)
_ANY_VALUE = ast.Constant(value=None)


def _rank_word(node: ast.AST) -> bool:
    """A word a rank test needs (``facts.ranks``): a rank-like name, a main-process flag, a
    rank call, a ``RANK`` environment key."""
    kind = type(node)
    if kind is ast.Name or kind is ast.Attribute:
        bare = (node.id if kind is ast.Name else node.attr).lstrip("_")
        return bare in MAIN_FLAGS or bare in RANK_CALLS or RANK_NAME.match(bare) is not None
    if kind is ast.Constant:
        return type(node.value) is str and RANK_ENV.match(node.value) is not None
    return False


# -- the screens, one per rule -----------------------------------------------------------------
def _project_offloads(s: Summary) -> bool:
    return any("offloads" in kinds for kinds in s.project.values())


def _summons(s: Summary) -> List[ast.Call]:
    """``summon.summon_calls``: ``X.summon_full_params(...)`` that may be torch's (its
    qualified name, ``X`` an FSDP1 name, or the instance form passing ``X`` again in a
    file importing torch's FSDP)."""
    found = s._cache.get("summons")
    if found is None:
        found = []
        methods = {f"{c}.{torch_api.SUMMON}" for c in torch_api.FSDP_CLASS}
        fsdp_import = s.imports_from(torch_api.FSDP_PACKAGE)
        for frame in s.frames.values():
            for call in frame.calls:
                func = call.func
                if type(func) is not ast.Attribute or func.attr != torch_api.SUMMON:
                    continue
                receiver = _dotted(func.value)
                first = next((a for a in call.args if type(a) is not ast.Starred), None)
                if (
                    not s.qualnames(func).isdisjoint(methods)
                    or (receiver is not None and receiver in s.fsdp1_names())
                    or (fsdp_import and receiver is not None and first is not None and _dotted(first) == receiver)
                ):
                    found.append(call)
        s._cache["summons"] = found
    return found


def _summon_ids(s: Summary) -> Set[int]:
    """The ids of ``_summons``' calls, for a membership test (``summon.summon_ids``)."""
    found = s._cache.get("summon_ids")
    if found is None:
        found = s._cache["summon_ids"] = {id(call) for call in _summons(s)}
    return found


def _passes(s: Summary, call: ast.Call, name: str, index: int) -> bool:
    """The argument ``name`` may be given at this call: by keyword, by position (``index``
    among the positional arguments as written: ``summon_full_params(m, True, False,
    True)``), or in a ``**`` dict (a string key, or ``dict(name=...)``)."""
    shape = of_ast(call)
    return shape.passes(name, index) or (shape.double_star and (name in s.keywords or name in s.strings))


def _optimizer_class(s: Summary, node: ast.AST) -> bool:
    if type(node) not in (ast.Name, ast.Attribute):
        return False
    package = torch_api.OPTIMIZER_PACKAGE + "."
    return any(q.startswith(package) and q.rsplit(".", 1)[-1][:1].isupper() for q in s.qualnames(node))


def _builds_optimizer(s: Summary, call: ast.Call) -> bool:
    """``optimizers``: a call holding ``X.parameters()`` in its arguments, whose callee says
    optimizer (a ``torch.optim`` class, an optimizer-like name) or holds a ``torch.optim``
    class."""
    func = call.func
    if type(func) is ast.Call and _last(func.func) == "getattr" and func.args:
        # ``getattr(torch.optim, config.optimizer)(...)``: ``optimizers._class_by_name``
        return torch_api.OPTIMIZER_PACKAGE in s.qualnames(func.args[0])
    name = _last(func)
    if name is None:
        return False
    package = torch_api.OPTIMIZER_PACKAGE + "."
    if id(call) not in s.param_holders:
        # param groups built first (``AdamW([{"params": decay}])``): the facts follow the names
        return bool(call.args) and bool(
            OPTIMIZER_NAME.search(name) or any(q.startswith(package) for q in s.qualnames(func))
        )
    if optimizer_like_name(name) or any(q.startswith(package) for q in s.qualnames(func)):
        return True
    return s.flow("optimizer_class", lambda node: _optimizer_class(s, node)).may_reach([func], s.call_frames[id(call)])


def _stale_plugin(s: Summary) -> bool:
    """``frameworks._stale_plugin``: an FSDP plugin whose arguments say ``use_orig_params``
    is off or leave it to its default (``frameworks.plugin_keeps_orig_params``; the
    default comes from how the project starts the file, which this stage does not read)."""
    return any(
        plugin_keeps_orig_params(of_ast(call)) is not True
        for frame in s.frames.values() for call in frame.calls if not s.callee(call).isdisjoint(FSDP_PLUGIN)
    )


def _fsd101(s: Summary) -> Iterator[ast.AST]:
    # an optimizer and a wrap (or a framework wrap) in the same function
    identifiers = s.names
    framework = (s.imports_from("accelerate") and (_stale_plugin(s) or s.launched)) or (
        s.imports_from("lightning") and any(i.endswith("ModelParallelStrategy") for i in identifiers)
    )
    wrapping = _wrapping_frames(s)  # with the project's sharding helpers
    if not wrapping and not framework:
        return
    factories = {
        f.name for f in s.frames.values()
        if f.name is not None and f.returns_value and any(_builds_optimizer(s, c) for c in f.calls)
    }
    for key, frame in s.frames.items():
        if key not in wrapping and not (
            framework and any(_last(c.func) in ("prepare", "setup", "setup_module") for c in frame.calls)
        ):
            continue
        for call in frame.calls:
            name = _last(call.func)
            if name in OPTIMIZER_FACTORY_METHODS or name in factories or _builds_optimizer(s, call):
                yield call


def _is_framework_constructor(s: Summary, node: ast.AST) -> bool:
    if type(node) is not ast.Call:
        return False
    for q in s.callee(node):
        if q in ACCELERATOR or q in FABRIC or q in LIGHTNING_TRAINER or (
            q.startswith(("transformers.", "trl.")) and q.endswith("Trainer")
        ):
            return True
    return False


_KNOWN_FRAMEWORKS = frozenset({"accelerator", "fabric", "hf_trainer", "lightning_trainer"})


def _framework_methods(s: Summary, call: ast.Call) -> Set[str]:
    """The methods every rank must call on the framework object the receiver may be
    (``frameworks.framework_of``: by its conventional name, ``self`` in a Trainer
    subclass, or a constructor its value may come from)."""
    receiver = call.func.value
    dotted = _dotted(receiver)
    last = dotted.rsplit(".", 1)[-1] if dotted is not None else None
    frameworks: Set[str] = set()
    if last in ("accelerator", "fabric"):
        frameworks.add(last)
    elif last == "trainer":
        frameworks.update(("hf_trainer", "lightning_trainer"))
    if dotted == "self":
        if any(i.endswith("Trainer") for i in s.names):
            frameworks.add("hf_trainer")
    elif s.flow("framework", lambda node: _is_framework_constructor(s, node)).may_reach(
        [receiver], s.call_frames[id(call)]
    ):
        frameworks.update(_KNOWN_FRAMEWORKS)
    frameworks.update({*ALWAYS, *WITH_FSDP} - _KNOWN_FRAMEWORKS)  # one this screen does not know
    methods: Set[str] = set()
    for framework in frameworks:
        methods |= ALWAYS.get(framework, frozenset()) | WITH_FSDP.get(framework, frozenset())
    return methods


_ALL_FRAMEWORK_METHODS = frozenset(set().union(*ALWAYS.values(), *WITH_FSDP.values()))


def _sets_state_dict_type(s: Summary) -> bool:
    found = s._cache.get("sets_state_dict_type")
    if found is None:
        found = s._cache["sets_state_dict_type"] = any(
            not s.callee(c).isdisjoint(torch_api.STATE_DICT_TYPE_METHODS) for f in s.frames.values() for c in f.calls)
    return found


def _collective_here(s: Summary, call: ast.Call) -> bool:
    """The call itself may run a collective (``collectives.torch_collective``,
    ``frameworks.framework_collective``, ``dtensors``, ``collectives.forward_gathers``),
    read wide; a call of a helper that does is ``helper_kinds``'s question.  Also what
    makes a function of this file a helper that runs one (``Summary.local_helpers``: the
    facts' helper summaries ask the same facts of each call in its body)."""
    func = call.func
    attr = func.attr if type(func) is ast.Attribute else None
    if attr == torch_api.SUMMON:
        return id(call) in _summon_ids(s)
    if attr == "load_state_dict" or attr == "state_dict" and not call.args and not call.keywords:
        if _sets_state_dict_type(s) or PASSED in s.project:  # ``inside_own_state_dict_type``;
            return True  # ``Origins.external``: a caller in another file may pass an FSDP1 module
        if s.fsdp1_wraps() or s.fsdp1_names():
            receiver = func.value
            if _dotted(receiver) in s.fsdp1_names():
                return True
            if _from_fsdp1(s, receiver, call):
                return True
    if attr in _ALL_FRAMEWORK_METHODS and attr in _framework_methods(s, call):
        return True
    if attr in GATHERS and s.fsdp2_wraps():  # ``facts.dtensors``: a DTensor norm or parameter
        return True
    if _may_forward(s, call):  # ``collectives.forward_gathers``
        return True
    names = s.callee(call)
    return bool(
        not names.isdisjoint(_GATHERS)
        or not names.isdisjoint(_OPTIM_STATE)
        # ``collectives.in_fsdp_program``
        or (not names.isdisjoint(DEFAULT_GROUP_COLLECTIVES) and (bool(s.wraps()) or bool(_summons(s)))
            and not _on_subgroup(call, names))
    )


def _fsd104(s: Summary) -> Iterator[ast.AST]:
    # a collective (``collectives.torch_collective``, ``frameworks.framework_collective``)
    # under a rank test or in a one-rank function, or a call of a helper that runs one
    # (``facts.helpers.collective_helper``)
    def collective(call: ast.Call) -> bool:
        return _collective_here(s, call) or "collective" in s.helper_kinds(call)

    ranks = s.flow("rank", _rank_word, callers=True, tests=True)
    # ``ranks.set_on_one_rank``: a value bound under a rank test
    made = s.flow("rank_made", _rank_word, callers=True, guarded=True, tests=True)
    for key, frame in s.frames.items():
        for call in frame.calls:
            guards = s.guards.get(id(call))
            if (guards or frame.one_rank) and collective(call) and (
                    frame.one_rank or ranks.may_reach(guards, key)
                    or made.may_reach([n for test in guards for n in _presence_tested(test)], key)):
                yield call


def _presence_tested(test: ast.AST) -> List[ast.AST]:
    """The values ``test`` asks about whose rank-made bindings ``ranks.one_rank_branch``
    reads: a name or attribute tested on its own (``if model:``) or against None
    (``set_on_one_rank``), or compared (``loss < best``: a value one rank updates,
    ``_compares_a_value_one_rank_updates``), through ``not``/``and``/``or``."""
    kind = type(test)
    if kind is ast.BoolOp:
        return [n for value in test.values for n in _presence_tested(value)]
    if kind is ast.UnaryOp and type(test.op) is ast.Not:
        return _presence_tested(test.operand)
    if kind is ast.Compare:
        return [n for n in (test.left, *test.comparators) if type(n) in (ast.Name, ast.Attribute)]
    return [test] if kind in (ast.Name, ast.Attribute) else []


_BUILTINS = frozenset(dir(builtins))


def _may_forward(s: Summary, call: ast.Call) -> bool:
    """``collectives.forward_gathers``, read wide: in a file that wraps a model into nested
    units, the call of a dotted name that no import binds and that is not a builtin, whose
    value (or whose receiver's: ``root.module``) may come from a wrap of the file."""
    func = call.func
    if type(func) is ast.Name:
        if func.id in _BUILTINS and func.id not in s.call_values:
            return False
    elif type(func) is not ast.Attribute:
        return False
    if not _nested_units_possible(s) or s.qualnames(func) or _dotted(func) is None:
        return False
    # the called module may come from a wrap of this file (``origins_with_callers``: this
    # file's calls of its function), or be the inner module of one (``root.module``)
    return s.flow("wrapped", lambda n: _is_wrapped(s, n), callers=True, unseen_callers=False).may_reach(
        _chain(func), s.call_frames[id(call)])


def _receiver_may_be_wrapped(s: Summary, call: ast.Call) -> bool:
    """``fsdp_modules.origins_with_callers`` of the receiver of ``call`` (``m`` of
    ``m.encode(...)``, or of ``m.module``), read wide: it, or what it is an attribute of, may
    come from a wrap of the file, also through any caller of its function."""
    return s.flow("wrapped_any_caller", lambda n: _is_wrapped(s, n), callers=True).may_reach(
        _chain(call.func.value), s.call_frames[id(call)])


def _chain(node: ast.AST) -> List[ast.AST]:
    """``node`` and each value it is an attribute of: ``a.b.c``, ``a.b``, ``a``."""
    found = [node]
    while type(node) is ast.Attribute:
        node = node.value
        found.append(node)
    return found


def _is_wrapped(s: Summary, node: ast.AST) -> bool:
    """A wrap of this file (FSDP1, FSDP2, a project helper's), or a name one binds or
    shards in place."""
    found = s._cache.get("wrapped_nodes")
    if found is None:
        found = s._cache["wrapped_nodes"] = (
            {id(call) for _, call, _, _ in s.wraps()}, set().union(*(names for _, _, _, names in s.wraps())))
    calls, names = found
    kind = type(node)
    if kind is ast.Call:
        return id(node) in calls
    return (kind is ast.Name or kind is ast.Attribute) and _dotted(node) in names


def _nested_units_possible(s: Summary) -> bool:
    """``collectives.may_forward_gather``, read wide: an FSDP1 wrap given an
    ``auto_wrap_policy`` other than ``None`` (or ``**`` arguments that may hold one), or any
    ``fully_shard``."""
    found = s._cache.get("nested_units")
    if found is None:
        found = False
        for _, call, fsdp1, _ in s.wraps():
            if not fsdp1:
                found = True
                break
            if any(_PARTIAL in s.qualnames(v.func) for v in s.call_values.get(_dotted(call.func) or "", ())):
                found = True  # ``functools.partial(FSDP, ...)``: its policy is in the partial
                break
            if s.callee(call).isdisjoint(torch_api.FSDP_CLASS):
                found = True  # a project helper's wrap: its summary may say so (``Helper.wrap_nested``)
                break
            shape = of_ast(call)  # ``fsdp_modules.has_nested_units``: a policy other than None, or ``**``
            if shape.double_star or shape.literal("auto_wrap_policy", default=None) is not None:
                found = True
                break
        s._cache["nested_units"] = found
    return found


def _on_subgroup(call: ast.Call, names: Set[str]) -> bool:
    """``collectives.on_subgroup`` for every name the callee may have."""
    shape = of_ast(call)
    return all(on_subgroup(shape, name.rsplit(".", 1)[-1]) for name in names & DEFAULT_GROUP_COLLECTIVES)


def _is_fsdp1_wrap(s: Summary, node: ast.AST) -> bool:
    """``FSDP(m)``, or the call of a project helper that returns an FSDP1 wrap."""
    return type(node) is ast.Call and (
        not s.callee(node).isdisjoint(torch_api.FSDP_CLASS) or "wraps" in s.project_kinds(node))


def _from_fsdp1(s: Summary, expr: ast.AST, call: ast.Call) -> bool:
    """``expr`` (at ``call``) may come from an FSDP1 construction, also through the calls
    of its function that pass it (``fsdp_modules.origins_with_callers``)."""
    return s.flow("fsdp1", lambda n: _is_fsdp1_wrap(s, n)).may_reach([expr], s.call_frames[id(call)], entered=True)


_SCREENS: Dict[str, Callable[[Summary], Iterator[ast.AST]]] = {
    "FSD101": _fsd101,
    "FSD104": _fsd104,
}


# the facts a rule may declare in ``Rule.gate_facts``, each read off the file's summary
_GATE_FACTS: Dict[str, Callable[[Summary], bool]] = {
    "fsdp2_wrap": lambda s: s.fsdp2_wraps(),
    "fsdp_wrap": lambda s: bool(s.wraps()),
    "fsdp1_model": lambda s: _fsdp1_model(s),
    # or one a caller in another project file may pass (``Origins.external``)
    "fsdp1_passed": lambda s: _fsdp1_model(s) or PASSED in s.project,
    "fsdp2_passed": lambda s: s.fsdp2_wraps() or PASSED in s.project,
    "fsdp_program": lambda s: bool(s.wraps()) or s.imports_from(torch_api.FSDP_PACKAGE)
    # ``frameworks.launched_prepares``, ``frameworks.launched_trainer_runs``
    or (s.launched and (s.imports_from("accelerate") or s.imports_from("transformers") or s.imports_from("trl"))),
    "cpu_offload_named": lambda s: not s.names.isdisjoint(("CPUOffload", "CPUOffloadPolicy")) or _project_offloads(s),
    "cpu_string": lambda s: _cpu_string(s),
    "params_on_cpu_named": lambda s: not s.names.isdisjoint(("CPUOffload", "CPUOffloadPolicy")) or _cpu_string(s)
    or _project_offloads(s),
}


def _fsdp1_model(s: Summary) -> bool:
    return bool(s.fsdp1_wraps() or s.fsdp1_annotated())


def _cpu_string(s: Summary) -> bool:
    """A ``"cpu"`` / ``"cpu:N"`` string in the code: what FSDP on the CPU device needs
    (``offload.CPU_DEVICE``: a ``device_id`` that may come from such a literal,
    ``fsdp_modules.cpu_device_text``)."""
    return any(cpu_device_text(v) for v in s.strings)

# declared call names whose calls the summary can narrow to those that may be torch's, for
# a rule with ``gate_torch_only`` (else: every call of the name written, or of a qualified
# name ending in it)
_TORCH_CALLS: Dict[str, Callable[[Summary], List[ast.Call]]] = {
    torch_api.SUMMON: _summons,
}


def _receiver_wrapped(s: Summary, call: ast.Call) -> bool:
    """``fsdp_modules``: the receiver of ``call`` is a name an FSDP wrap binds (FSDP2: or
    takes) in the call's own function, or an attribute any wrap binds."""
    func = call.func
    receiver = _dotted(func.value) if type(func) is ast.Attribute else None
    if receiver is None:
        return False
    key = s.call_frames[id(call)]
    return any(receiver in names and ("." in receiver or frame == key) for frame, _, _, names in s.wraps())


# ``Rule.gate_receiver``: what the receiver of a declared call must be
_RECEIVERS: Dict[str, Callable[[Summary, ast.Call], bool]] = {
    "": lambda s, call: True,
    "wrapped": _receiver_wrapped,
}


def _wrapping_frames(s: Summary) -> Set[int]:
    found = s._cache.get("wrapping_frames")
    if found is None:
        found = s._cache["wrapping_frames"] = {key for key, _, _, _ in s.wraps()}
    return found


# ``Rule.gate_anchors``: what a call of the finding's function may do, by its frame
_ANCHORS: Dict[str, Callable[[Summary, int, ast.Call], bool]] = {
    "process_group": lambda s, key, c: not s.qualnames(c.func).isdisjoint(torch_api.INIT_PROCESS_GROUP),
    "fsdp_api": lambda s, key, c: any(torch_api.is_fsdp_api(q) for q in s.qualnames(c.func)),
    "fsdp_wrap": lambda s, key, c: key in _wrapping_frames(s),
    "launched_prepare": lambda s, key, c: s.launched and s.imports_from("accelerate") and _last(c.func) == "prepare",
    # ``frameworks.launched_trainer_runs``: an HF Trainer's ``train()`` under the same launch
    "launched_trainer": lambda s, key, c: s.launched and _last(c.func) == "train" and (
        s.imports_from("transformers") or s.imports_from("trl")),
    # ``collectives.every_rank_collective`` (read wide: any group, any guard)
    "collective": lambda s, key, c: not s.qualnames(c.func).isdisjoint(DEFAULT_GROUP_COLLECTIVES),
    # ``collectives.fsdp_training_step`` (read wide: any ``.backward()``)
    "backward": lambda s, key, c: type(c.func) is ast.Attribute and c.func.attr == "backward",
}


def _anchored(s: Summary, call: ast.Call, anchors: Tuple[str, ...]) -> bool:
    """The function of ``call`` (its frame) does one of ``anchors`` (``Rule.gate_anchors``)."""
    key = s.call_frames[id(call)]
    memo = s._cache.setdefault(("anchored", anchors), {})
    if key not in memo:
        memo[key] = any(_ANCHORS[a](s, key, c) for a in anchors for c in s.frames[key].calls)
    return memo[key]


def declared(rule) -> Optional[Callable[[Summary], Iterator[ast.AST]]]:
    """The screen of a rule that declares what can make it fire (``Rule.gate_facts``,
    ``gate_calls``, ``gate_arguments``, ``gate_names``) instead of having a hand-written
    one: nothing unless every declared fact holds and the code names one of the declared
    names; then the calls of a declared name (by the name written or any qualified name it
    may have, a dotted one by its qualified name; only those that may be torch's with
    ``gate_torch_only``, only statements of their own with ``gate_bare``) or of a helper
    doing one of ``gate_helper_kinds``, or with ``gate_class_methods`` of a method a class of
    the file defines (any method, where the file imports names of other project files) that
    ``torch.nn.Module`` does not (``torch_api.NN_MODULE_METHODS``: the wrapper's own), on a
    receiver that may come from a wrap of the file, that may pass one of the declared arguments, whose
    receiver is what ``gate_receiver`` asks and whose function does one of ``gate_anchors``,
    and with ``gate_formats`` the f-string fields with a format spec;
    or, with no calls declared, the file's wraps.  None for a rule that declares nothing (it is
    always kept)."""
    facts, calls = tuple(rule.gate_facts), frozenset(rule.gate_calls)
    class_methods = rule.gate_class_methods
    helper_kinds = frozenset(rule.gate_helper_kinds)
    qualified = frozenset(c for c in calls if "." in c)
    arguments, names, bare = dict(rule.gate_arguments), frozenset(rule.gate_names), rule.gate_bare
    formats = rule.gate_formats
    receiver = rule.gate_receiver
    if receiver not in _RECEIVERS:
        raise ValueError(f"{rule.code}: unknown gate receiver {receiver!r} (known: {sorted(_RECEIVERS)})")
    anchors = tuple(rule.gate_anchors)
    unknown_anchors = [a for a in anchors if a not in _ANCHORS]
    if unknown_anchors:
        raise ValueError(f"{rule.code}: unknown gate anchors {unknown_anchors} (known: {sorted(_ANCHORS)})")
    if rule.gate_torch_only and not calls <= _TORCH_CALLS.keys():
        raise ValueError(f"{rule.code}: the gate cannot tell torch's calls of {sorted(calls - _TORCH_CALLS.keys())}")
    narrowed = sorted(calls) if rule.gate_torch_only else []
    known = frozenset() if rule.gate_torch_only else calls - qualified
    if not facts and not calls and not helper_kinds:
        return None
    unknown = [f for f in facts if f not in _GATE_FACTS]
    if unknown:
        raise ValueError(f"{rule.code}: unknown gate facts {unknown} (known: {sorted(_GATE_FACTS)})")

    def screen_of(s: Summary) -> Iterator[ast.AST]:
        if not all(_GATE_FACTS[f](s) for f in facts) or (names and s.names.isdisjoint(names)):
            return
        if not calls and not helper_kinds:
            yield from (call for _, call, _, _ in s.wraps())
            return
        named = [call for frame in s.frames.values() for call in frame.calls if not known.isdisjoint(
            {_last(call.func), *(q.rsplit(".", 1)[-1] for q in s.callee(call))})
            or (qualified and not qualified.isdisjoint(s.callee(call)))
            or (helper_kinds and not helper_kinds.isdisjoint(s.helper_kinds(call)))
            or (class_methods and type(call.func) is ast.Attribute
                and call.func.attr not in torch_api.NN_MODULE_METHODS
                and (call.func.attr in s.class_methods or s.imports_project_names())
                and _receiver_may_be_wrapped(s, call))] \
            if known or qualified or helper_kinds or class_methods else []
        for call in named + [call for name in narrowed for call in _TORCH_CALLS[name](s)]:
            if (not bare or id(call) in s.bare) and (
                not arguments or any(_passes(s, call, name, index) for name, index in arguments.items())
            ) and _RECEIVERS[receiver](s, call) and (not anchors or _anchored(s, call, anchors)):
                yield call
        if formats:
            yield from s.formatted

    return screen_of


_DECLARED: Dict[type, Optional[Callable[[Summary], Iterator[ast.AST]]]] = {}


def _screen_of(rule):
    """(the rule's screen or None, whether its sites are the finding's own statements: a
    hand-written screen's are, and a declared one's when the rule says so
    (``Rule.gate_sites``); else it only says whether the rule is live, and the slice then
    keeps the whole closure, as for a rule with no screen)."""
    screen_of = _SCREENS.get(rule.code)
    if screen_of is not None:
        return screen_of, True
    if rule not in _DECLARED:  # once per rule class, not per file
        _DECLARED[rule] = declared(rule)
    return _DECLARED[rule], bool(rule.gate_sites) and bool(rule.gate_calls)


def screened(rules: Iterable[type]) -> bool:
    """Some of ``rules`` has a screen (worth an ``ast`` parse)."""
    return any(_screen_of(rule)[0] is not None for rule in rules)


def fires(summary: Summary, rule) -> bool:
    """Whether ``rule`` may report something on the module ``summary`` describes."""
    screen_of = _screen_of(rule)[0]
    return screen_of is None or next(iter(screen_of(summary)), None) is not None


def screen(tree: ast.Module, rules: Iterable[type], project=None) -> List[type]:
    """``live_rules`` without its safety net (the tests call this)."""
    summary = Summary(tree, project)
    return [rule for rule in rules if fires(summary, rule)]


def confirmed_live_rules(text: str, rules: Sequence[type], project=None) -> List[type]:
    """The command line's cheap stages after the markers: the compiled-names stage
    (``Summary.confirms``: [] when no rule's topic is named in code) and the screen, from
    one ``ast`` parse.  Text CPython cannot parse keeps every rule (libcst decides)."""
    return Screening(text, rules, project=project).confirmed_live()


class Screening:
    """The ``ast`` stage of one text, each step run at most once however often it is
    asked: the parse, the summary, the compiled-names check and the live rules with
    their sites (``engine.FileGate`` holds one per file, so the command line's cheap
    answer and the lint after it share them)."""

    def __init__(
        self, text: str, rules: Sequence[type], tree: Optional[ast.Module] = None,
        project: Optional[Dict[str, frozenset]] = None, launched: bool = False,
    ) -> None:
        self.text = text
        self.launched = launched  # ``Summary``'s: a launch configuration starts the text with FSDP
        self.project = project  # ``Summary``'s: what the project helpers the text calls do
        self.rules = list(rules)
        self.tree = tree if tree is not None else parse(text)  # ``tree``: the caller's parse of ``text``
        self._summary: Optional[Summary] = None
        self._failed = False
        self._live: Optional[Tuple[List[type], Optional[Sites]]] = None

    def _summarised(self) -> Optional[Summary]:
        if self._summary is None and not self._failed and self.tree is not None:
            try:
                self._summary = Summary(self.tree, self.project, self.launched)
            except Exception:  # noqa: BLE001 - deep nesting, or a bug here: never at a finding's price
                self._failed = True
        return self._summary

    def live_and_sites(self) -> Tuple[List[type], Optional[Sites]]:
        """``live_rules_and_sites`` of the text's tree (every rule and no sites where
        CPython cannot parse it or the screen fails)."""
        if self._live is None:
            summary = self._summarised()
            self._live = (list(self.rules), None) if summary is None else _live_and_sites(summary, self.rules)
        return self._live

    def confirmed_live(self) -> List[type]:
        """``confirmed_live_rules``: the live rules, or [] when no rule's topic is named in code."""
        if self.tree is None:
            return list(self.rules)
        summary = self._summarised()
        if summary is None:
            return list(self.rules) if ast_confirms(self.text, self.rules) else []
        try:
            # a project helper's call can make a rule fire where the file names none of its topics
            if not self.project and not summary.confirms(self.rules, self.text):
                return []
        except Exception:  # noqa: BLE001
            return list(self.rules) if ast_confirms(self.text, self.rules) else []
        return self.live_and_sites()[0]


def live_rules(tree: Optional[ast.Module], rules: Iterable[type]) -> List[type]:
    """The rules of ``rules`` that may report something on the module ``tree`` (all of
    them when there is no tree, or when the screen fails: libcst then decides)."""
    rules = list(rules)
    if tree is None or not screened(rules):
        return rules
    try:
        return screen(tree, rules)
    except Exception:  # noqa: BLE001 - deep nesting, or a bug here: never at a finding's price
        return rules


class Sites(frozenset):
    """Lines where findings of the live rules may stand (``live_rules_and_sites``).
    ``complete`` is False when some live rule has no screen: its findings may stand
    anywhere, and the slice runs its whole closure besides these seeds."""

    complete = True


def live_rules_and_sites(tree: Optional[ast.Module], rules: Iterable[type],
                         project=None) -> Tuple[List[type], Optional[Sites]]:
    """``live_rules``, and the lines where their findings may stand (every candidate site
    of every screened live rule, and the lines the facts read file-wide:
    ``evidence_lines``); None when the screen fails (the slice then keeps what its own
    closure finds)."""
    rules = list(rules)
    if tree is None:
        return rules, None
    try:
        summary = Summary(tree, project)
    except Exception:  # noqa: BLE001 - deep nesting, or a bug here: never at a finding's price
        return rules, None
    return _live_and_sites(summary, rules)


def _live_and_sites(summary: Summary, rules: List[type]) -> Tuple[List[type], Optional[Sites]]:
    try:
        live: List[type] = []
        lines: Set[int] = set()
        complete = True
        for rule in rules:
            screen_of, exact = _screen_of(rule)
            if screen_of is None:
                live.append(rule)
                complete = False
                continue
            if not exact:  # a declared screen: live or not; its candidates seed nothing,
                if next(iter(screen_of(summary)), None) is not None:  # the slice keeps the closure
                    live.append(rule)
                    complete = False
                continue
            found = [node.lineno for node in screen_of(summary)]
            if found:
                live.append(rule)
                lines.update(found)
        sites = Sites(lines | evidence_lines(summary)) if live else Sites()
        if not complete:
            sites.complete = False
        return live, sites
    except Exception:  # noqa: BLE001 - deep nesting, or a bug here: never at a finding's price
        return rules, None


_EVIDENCE_CALLS = (
    torch_api.CPU_OFFLOAD | torch_api.CPU_OFFLOAD_POLICY | torch_api.FULL_STATE_DICT_CONFIG
    | torch_api.STATE_DICT_OPTIONS | FSDP_PLUGIN
)
_EVIDENCE_SUFFIXES = ("ModelParallelStrategy", "FSDPStrategy", "FullyShardedDataParallelPlugin")


def evidence_lines(summary: Summary) -> Set[int]:
    """Lines the facts read for the whole file, wherever a finding stands: every FSDP
    construction, under any alias or partial (``fsdp_modules``: the names that hold an FSDP
    module), every name annotated as FSDP, every offload and state-dict configuration
    (``offload.cpu_param_evidence``), a framework's FSDP plugin or strategy, and its FSDP
    switch (``frameworks.shows_fsdp``: ``fsdp_plugin=``, ``fsdp_config=``,
    ``strategy="fsdp"``, ``fsdp="full_shard"``, accelerate's ``DistributedType.FSDP``)."""
    found = {call.lineno for _, call, _, _ in summary.wraps()}
    for name, hints in summary.annotated.items():
        found.update(h.lineno for h in hints if not summary.qualnames(h).isdisjoint(torch_api.FSDP_CLASS))
    found.update(summary.fsdp_dict_lines)
    found.update(node.lineno for node in summary.fsdp_attributes
                 if any(names_fsdp_mode(q) for q in summary.qualnames(node)))
    for frame in summary.frames.values():
        for call in frame.calls:
            names = summary.callee(call)
            if not names.isdisjoint(_EVIDENCE_CALLS) or any(q.endswith(_EVIDENCE_SUFFIXES) for q in names):
                found.add(call.lineno)
            if call.keywords:
                for keyword, value in of_ast(call).keywords.items():
                    # ``fsdp_config=`` too: a line the facts read beside ``fsdp=``
                    if keyword == "fsdp_config" or turns_fsdp_on(keyword, value if type(value) is str else None):
                        found.add(call.lineno)
    return found


def ast_confirms(text: str, rules: Sequence[type]) -> bool:
    """Stage 2: a rule's first marker group names an identifier the code really uses
    (an attribute, a global, an imported name; never a string, comment or docstring).

    CPython compiles the file (C speed, nothing is run) and the names of its code objects
    are searched; measured faster than ``ast.parse`` alone.  Where CPython cannot compile
    the file (newer syntax, invalid code), the answer is yes: libcst decides, never at a
    finding's price."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = compile(text, "<fsdp-lint>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return True
    wanted = {marker for rule in rules for marker in rule.markers[0]}
    stack = [code]
    while stack:
        code = stack.pop()
        for name in (*code.co_names, *code.co_varnames, *code.co_cellvars, *code.co_freevars):
            if name in wanted or ("." in name and wanted.intersection(name.split("."))):
                return True
        stack.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return False
