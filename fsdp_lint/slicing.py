"""The part of a large file that libcst needs to see: whole statements, chosen with the
stdlib ``ast`` (C speed), mapped back to the file's own offsets.

Large real files (framework trainers, test suites of thousands of lines) hold their FSDP
code in a few functions or methods; libcst's parse and the facts walk cost ~5 us a
character, so parsing only what the rules can need is most of the win.  Units are the
top-level statements and, for a class, its header (``class X(Base):``) and each member.
The slice is the kept units' complete lines, in their original order: every kept unit is
byte-for-byte the original, so libcst builds the same nodes for it, and an offset in the
slice maps to one in the file by a per-chunk shift (``Slice.to_original``).

Which units are kept (a closure; when unsure, keep):

1. seeds: the units holding a candidate site of a selected rule (``screen``: every call
   where one of its findings may stand, and the lines the facts read file-wide), and the
   units naming a torch API the facts recognise (``FullyShardedDataParallel``,
   ``summon_full_params``, ``CPUOffload``, ...; the wraps, summons and configurations the
   facts collect for the whole file) or an import alias of one (``FSDP``); a name the file
   binds only to something else (``from .utils import get_state_dict``) does not count
   where it stands as a plain name.  Without sites (a rule the screen does not know), the
   units naming a rule's topic (its rarest marker group: ``FullyShardedDataParallel``
   rather than FSD107's ``to``) are seeds too, and step 2 follows them forward;
2. forward: the callers of every function a seed defines (one level: the facts follow a
   call once, ``offload``'s callers of a wrap; ``Rule.caller_levels`` levels for a rule
   whose facts follow more, FSD002's ``loops.per_step_via_call``; references too, hooks
   are known by name).  Without sites, also: what a relevant unit defines at
   module scope; attributes and names bound from relevant values (the facts know
   ``self.model`` as FSDP by name), the units using them, transitively; and the functions
   whose ``return`` carries something relevant (their callers get an FSDP model);
3. every top-level ``import``, and one importer of each module the file imports anywhere
   (the facts ask whether the file imports fairscale);
4. backward, transitively: for each name the kept code uses, its definitions at module
   scope and its imports (any depth), its bindings outside functions (module constants,
   class attributes: the facts' global lookup), the classes of that name, enough of the
   functions of that name ("exactly one?"), and, for ``self.x`` in a method, the methods of
   the class that bind ``self.x`` and the method ``x``; for an attribute the kept code binds,
   enough of its uses elsewhere ("used in another method?").  "Enough" is ``min(n, 2)``,
   and units kept only for such a count are not followed further.  A class kept brings its
   methods of a name the kept code uses after a dot (``model.score(...)`` on an instance:
   FSD114 reads what an in-file class's method does).  Names used only in
   decorators (``@pytest.mark.parametrize("case", CASES)``) do not count: nothing the rules
   read flows from a decorator's arguments into the function;
5. a kept member brings its class header, and a header its class attributes.

What the closure alone does not keep: a unit whose only tie to the FSDP code is a *local*
name that happens to match (``model.state_dict()`` in an unrelated test while another test
wraps its own ``model``); the facts' name-keyed sets could connect them, but they are
different variables.  With sites, such a unit is kept when the screen finds a candidate
site in it (a rank-guarded ``model.state_dict()``).  Also kept: every ``if`` at module level
or in a class body with a branch that leaves the block (``if rank != 0: raise``): the facts
guard every statement after it.  ``tests/test_slicing.py``, ``tests/test_screen.py`` (generated
modules) and ``bench/compare_slicing.py`` check that slicing changes no diagnostic, position
or fix on the fixtures, on large generated modules and on the benchmark corpora.

A file that ``ast`` cannot parse, a short one, or one whose slice would keep most of it is
not sliced; ``engine`` parses it whole.
"""

from __future__ import annotations

import ast
import bisect
import re
import unicodedata
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from fsdp_lint.screen import parse

# Files shorter than this are parsed whole: the ``ast`` pass would cost more than it saves.
MIN_CHARS = 16_000
# A slice keeping more than this share of the lines is not worth the mapping.
MAX_SHARE = 0.8
# How many occurrences of each kind (and statements holding them) a relevant name keeps.
ENOUGH = 2

# Torch API names the facts recognise (see ``facts.torch_api``), as identifiers.
_API_NAMES = frozenset(
    {
        "FullyShardedDataParallel", "fully_shard", "CPUOffload", "CPUOffloadPolicy",
        "FullStateDictConfig", "StateDictOptions", "get_model_state_dict", "get_state_dict",
        "clip_grad_norm_", "summon_full_params", "ShardingStrategy", "StateDictType",
        "state_dict_type", "set_state_dict_type", "MixedPrecision",
        # framework switches the facts read file-wide (``TrainingArguments(fsdp=...)``)
        "fsdp", "fsdp_config", "fsdp_plugin", "FullyShardedDataParallelPlugin",
        # FSD108: a function setting up the process group saves there
        "init_process_group",
        # frameworks' FSDP configurations the facts read file-wide
        "ModelParallelStrategy", "FSDPStrategy",
    }
)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_WORD = re.compile(r"[^\W\d]\w*")
_CHILD_FIELDS: Dict[type, Tuple[str, ...]] = {}
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_ODD_LINE_ENDS = re.compile("[\f\v\x1c\x1d\x1e\x85\u2028\u2029]")


class Slice:
    """The kept lines as one text, and how its offsets map onto the file's."""

    def __init__(self, text: str, chunks: List[Tuple[int, int, int]], kept_units: int = 0, units: int = 0) -> None:
        self.text = text
        self.chunks = chunks  # (start in slice, start in file, length), in order
        self.kept_units = kept_units
        self.units = units
        self._starts = [chunk[0] for chunk in chunks]

    def to_original(self, offset: int, end: bool = False) -> int:
        """The file offset of a slice offset.  At a chunk boundary a start belongs to the
        next chunk and an end to the previous one (an end there closes a line)."""
        index = (bisect.bisect_left if end else bisect.bisect_right)(self._starts, offset) - 1
        index = max(index, 0)
        start, original, _ = self.chunks[index]
        return original + offset - start


class _Unit:
    """One top-level statement (statements sharing a line are one unit)."""

    def __init__(
        self, first: int, last: int, nodes: List[ast.stmt], parent: Optional[int] = None,
        header: Optional[ast.ClassDef] = None,
    ) -> None:
        self.first = first  # 1-based line numbers, inclusive
        self.last = last
        self.nodes = nodes
        self.names: Set[str] = set()  # identifiers used (decorators left out)
        self.attributes: Set[str] = set()  # identifiers after a dot (``x.summon_full_params``)
        self.defines: Set[str] = set()  # bound at module scope (imports left out)
        self.imported: Set[str] = set()  # bound by an import, at any depth
        self.binds_any: Set[str] = set()  # every dotted name bound or def'd, any depth
        self.uses_any: Set[str] = set()  # every dotted name read (with its prefixes)
        self.decorator_names: Set[str] = set()  # identifiers in decorators
        self.modules: Set[str] = set()  # modules imported, at any depth
        self.occurrences: Dict[Tuple[str, str], int] = {}  # (dotted, kind) -> count
        self.vocabulary_aliases: Set[str] = set()  # names an import binds to an API name
        self.torch_imported: Set[str] = set()  # names an import from torch binds (``*``: all)
        self.top_import = False
        self.parent = parent  # a class member: the index of its class's header unit
        self.header = header  # a class header (``class X(Base):``): its class
        self.members: List[int] = []  # a class header: its members' units
        self.methods: Set[str] = set()  # a class member: the methods it defines
        self.assignments: List[Tuple[Tuple[str, ...], int, int]] = []  # targets, lines
        self.functions: List[Tuple[str, int, int]] = []  # every def: name, lines
        self.returns: List[Tuple[int, int]] = []  # ``return <value>``: lines
        self.referenced: Set[str] = set()  # read other than as the callee of a call
        self.params: Set[str] = set()  # parameter names, any depth
        self.assigned: Set[str] = set()  # plain names bound by ``=`` and the like, any depth

    @property
    def size(self) -> int:
        return self.last - self.first + 1


def _dotted(node: ast.AST) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _statement_targets(node) -> list:
    """The assignment targets a statement binds (``=``, ``+=``, annotated, ``for``, ``with ... as``)."""
    kind = type(node)
    if kind is ast.Assign:
        return list(node.targets)
    if kind in (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor):
        return [node.target]
    if kind in (ast.With, ast.AsyncWith):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []


def _target_names(target):
    """The dotted names an assignment target binds (tuples, lists and ``*rest`` unpacked)."""
    stack = [target]
    while stack:
        item = stack.pop()
        if isinstance(item, (ast.Tuple, ast.List)):
            stack.extend(item.elts)
        elif isinstance(item, ast.Starred):
            stack.append(item.value)
        else:
            dotted = _dotted(item)
            if dotted is not None:
                yield dotted


def _prefixes(dotted: str) -> Iterable[str]:
    index = dotted.find(".")
    while index != -1:
        yield dotted[:index]
        index = dotted.find(".", index + 1)
    yield dotted


MODULE, CLASS_BODY, FUNCTION = 0, 1, 2


class _Analyser:
    """One walk over a unit's ``ast``: names used, module-scope definitions, imports, and
    the occurrences of dotted names the closure asks about: ``use``; ``global`` (bound
    outside any function: module level or a class body); ``bind`` (an attribute bound
    anywhere); ``function`` (a ``def`` that is not a method, at any depth); ``class``."""

    def __init__(self, unit: _Unit, vocabulary: Set[str]) -> None:
        self.unit = unit
        self.vocabulary = vocabulary

    def occur(self, dotted: str, kind: str) -> None:
        if kind == "use":
            self.unit.uses_any.add(dotted)
        key = (dotted, kind)
        occurrences = self.unit.occurrences
        occurrences[key] = occurrences.get(key, 0) + 1

    def target(self, node: ast.AST, scope: int, stack) -> None:
        """A binding target: names it binds are recorded; what it reads is walked as usual."""
        if isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self.target(element, scope, stack)
            return
        if isinstance(node, ast.Starred):
            self.target(node.value, scope, stack)
            return
        dotted = _dotted(node)
        if dotted is not None:
            unit = self.unit
            parts = dotted.split(".")
            unit.names.update(parts)
            unit.attributes.update(parts[1:])
            unit.binds_any.add(dotted)
            if len(parts) == 1:
                unit.assigned.add(dotted)
            if scope != FUNCTION:
                self.occur(dotted, "global")
            if len(parts) > 1:
                self.occur(dotted, "bind")
                for prefix in _prefixes(dotted.rsplit(".", 1)[0]):
                    self.occur(prefix, "use")
            elif scope == MODULE:
                unit.defines.add(dotted)
            return
        stack.append((node, scope))

    def run(self) -> None:
        unit = self.unit
        names = unit.names
        if unit.header is not None:
            node = unit.header
            names.add(node.name)
            unit.binds_any.add(node.name)
            unit.defines.add(node.name)
            self.occur(node.name, "class")
            for decorator in node.decorator_list:
                unit.decorator_names.update(
                    n.id if isinstance(n, ast.Name) else n.attr
                    for n in ast.walk(decorator)
                    if isinstance(n, (ast.Name, ast.Attribute))
                )
            stack: List[Tuple[ast.AST, int]] = [(base, MODULE) for base in (*node.bases, *node.keywords)]
        else:
            start = MODULE if unit.parent is None else CLASS_BODY
            stack = [(node, start) for node in reversed(unit.nodes)]
        while stack:
            node, scope = stack.pop()
            kind = type(node)
            if kind is ast.Name:
                names.add(node.id)
                if type(node.ctx) is ast.Load:
                    self.occur(node.id, "use")
                    unit.referenced.add(node.id)
                continue
            if kind is ast.Attribute:
                dotted = _dotted(node)
                if dotted is not None:
                    parts = dotted.split(".")
                    names.update(parts)
                    unit.attributes.update(parts[1:])
                    unit.referenced.add(parts[-1])
                    for prefix in _prefixes(dotted):
                        self.occur(prefix, "use")
                    continue
                names.add(node.attr)
                unit.attributes.add(node.attr)
                unit.referenced.add(node.attr)
                stack.append((node.value, scope))
                continue
            if kind is ast.Call:
                func = node.func
                dotted = _dotted(func)
                if dotted is not None:  # the callee: a use, but not a reference to pass on
                    parts = dotted.split(".")
                    names.update(parts)
                    unit.attributes.update(parts[1:])
                    for prefix in _prefixes(dotted):
                        self.occur(prefix, "use")
                else:
                    stack.append((func, scope))
                for child in reversed((*node.args, *node.keywords)):
                    stack.append((child, scope))
                continue
            if kind is ast.Return:
                if node.value is not None:
                    unit.returns.append((node.lineno, node.end_lineno or node.lineno))
                    stack.append((node.value, scope))
                continue
            if kind is ast.Constant:
                continue
            if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
                names.add(node.name)
                unit.binds_any.add(node.name)
                if kind is not ast.ClassDef:
                    unit.functions.append((node.name, node.lineno, node.end_lineno or node.lineno))
                if kind is ast.ClassDef:
                    self.occur(node.name, "class")
                elif scope != CLASS_BODY:
                    self.occur(node.name, "function")
                else:
                    unit.methods.add(node.name)
                if scope == MODULE:
                    unit.defines.add(node.name)
                # decorators are left out: see the module docstring (4.)
                for decorator in node.decorator_list:
                    unit.decorator_names.update(
                        n.id if isinstance(n, ast.Name) else n.attr
                        for n in ast.walk(decorator)
                        if isinstance(n, (ast.Name, ast.Attribute))
                    )
                inner = FUNCTION if kind is not ast.ClassDef or scope == FUNCTION else CLASS_BODY
                for child in reversed(node.body):
                    stack.append((child, inner))
                if kind is ast.ClassDef:
                    for base in (*node.bases, *node.keywords):
                        stack.append((base, scope))
                else:
                    stack.append((node.args, FUNCTION))
                    if node.returns is not None:
                        stack.append((node.returns, scope))
                continue
            if kind is ast.arg:
                names.add(node.arg)
                unit.params.add(node.arg)
                if node.annotation is not None:
                    stack.append((node.annotation, scope))
                continue
            if kind is ast.Lambda:
                stack.append((node.args, FUNCTION))
                stack.append((node.body, FUNCTION))
                continue
            if kind in (ast.Import, ast.ImportFrom):
                self.on_import(node)
                continue
            if kind is ast.Assign:
                for target in node.targets:
                    self.target(target, scope, stack)
                self.assignment(node.targets, node)
                stack.append((node.value, scope))
                continue
            if kind in (ast.AnnAssign, ast.AugAssign, ast.NamedExpr):
                self.target(node.target, scope, stack)
                self.assignment((node.target,), node)
                if kind is ast.AnnAssign:
                    stack.append((node.annotation, scope))
                if node.value is not None:
                    stack.append((node.value, scope))
                continue
            if kind in (ast.For, ast.AsyncFor):
                self.target(node.target, scope, stack)
                for child in (node.iter, *node.body, *node.orelse):
                    stack.append((child, scope))
                continue
            if kind is ast.comprehension:
                self.target(node.target, FUNCTION, stack)
                stack.append((node.iter, scope))
                for test in node.ifs:
                    stack.append((test, scope))
                continue
            if kind is ast.withitem:
                if node.optional_vars is not None:
                    self.target(node.optional_vars, scope, stack)
                stack.append((node.context_expr, scope))
                continue
            if kind is ast.ExceptHandler:
                if node.name:
                    names.add(node.name)
                    if scope == MODULE:
                        unit.defines.add(node.name)
            elif kind in (ast.Global, ast.Nonlocal):
                for name in node.names:
                    names.add(name)
                    self.occur(name, "global")
                    unit.defines.add(name)  # assigned inside a function, bound in the module
                continue
            elif kind is ast.keyword:
                if node.arg:
                    names.add(node.arg)
            elif kind in (ast.MatchAs, ast.MatchStar, ast.MatchMapping):
                name = node.rest if kind is ast.MatchMapping else node.name
                if name:
                    names.add(name)
                    if scope == MODULE:
                        unit.defines.add(name)
            fields = _CHILD_FIELDS.get(kind)
            if fields is None:
                fields = _CHILD_FIELDS[kind] = tuple(
                    name for name in kind._fields if name not in ("ctx", "type_comment", "kind", "type_ignores")
                )
            for name in reversed(fields):
                value = getattr(node, name, None)
                if isinstance(value, list):
                    for child in reversed(value):
                        if isinstance(child, ast.AST):
                            stack.append((child, scope))
                elif isinstance(value, ast.AST):
                    stack.append((value, scope))

    def assignment(self, targets, node) -> None:
        """Remember where ``targets = value`` stands (the forward step reads its lines)."""
        found = [name for target in targets for name in _target_names(target)]
        if found:
            self.unit.assignments.append((tuple(found), node.lineno, node.end_lineno or node.lineno))

    def on_import(self, node) -> None:
        unit = self.unit
        if isinstance(node, ast.ImportFrom):
            base = ("." * node.level) + (node.module or "")
            unit.modules.add(base)
            unit.names.update(_IDENTIFIER.findall(base))
            for alias in node.names:
                bound = alias.asname or alias.name
                self._import_binding(bound, f"{base}.{alias.name}" if alias.name != "*" else base)
        else:
            for alias in node.names:
                unit.modules.add(alias.name)
                unit.names.update(alias.name.split("."))
                bound = alias.asname or alias.name.split(".", 1)[0]
                self._import_binding(bound, alias.name)

    def _import_binding(self, bound: str, source: str) -> None:
        unit = self.unit
        unit.names.add(bound)
        unit.imported.add(bound)  # the import table ignores scope
        if self.vocabulary.intersection(source.split(".")):
            unit.vocabulary_aliases.add(bound)
        if source.split(".", 1)[0] == "torch" or bound == "*":
            unit.torch_imported.add(bound)


def _statements(nodes, units: List[_Unit], parent: Optional[int] = None) -> List[int]:
    """Append a unit per statement (statements sharing a line are one); their indices."""
    indices: List[int] = []
    for node in nodes:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
        last = node.end_lineno or node.lineno
        if indices and first <= units[indices[-1]].last:
            unit = units[indices[-1]]
            unit.last = max(unit.last, last)
            unit.nodes.append(node)
        else:
            units.append(_Unit(first, last, [node], parent=parent))
            indices.append(len(units) - 1)
    return indices


def _units(tree: ast.Module) -> List[_Unit]:
    """Top-level statements; a class whose body starts on a line of its own is a header
    unit (decorators, ``class X(Base):``) and a unit per member."""
    units: List[_Unit] = []
    top: List[_Unit] = []
    _statements(tree.body, top)
    for unit in top:
        node = unit.nodes[0]
        body_first = None
        if len(unit.nodes) == 1 and isinstance(node, ast.ClassDef) and node.body:
            first_member = node.body[0]
            body_first = min([first_member.lineno] + [d.lineno for d in getattr(first_member, "decorator_list", ())])
            header_last = max([node.lineno] + [getattr(b, "end_lineno", 0) or 0 for b in (*node.bases, *node.keywords)])
            if body_first <= header_last:
                body_first = None  # ``class A: x = 1``: one unit
        if body_first is None:
            units.append(unit)
            continue
        header = _Unit(unit.first, body_first - 1, [], header=node)
        units.append(header)
        header_index = len(units) - 1
        header.members = _statements(node.body, units, header_index)
    return units


def seed_group(rule) -> Tuple[str, ...]:
    """The marker group that names a rule's topic: its first, or a later one whose shortest
    marker is longer (``FullyShardedDataParallel``, not ``to``: FSD107's casts are reached
    from the wrap, through the names it binds; a unit holding ``.to(`` is no seed)."""
    group = rule.markers[0]
    for other in rule.markers[1:]:
        if min(map(len, other)) > min(map(len, group)):
            group = other
    return group


def vocabulary_for(rules: Sequence[type]) -> Tuple[Set[str], Tuple[str, ...]]:
    """(identifiers that make a statement a seed, marker strings searched in its text)."""
    markers = set()
    for rule in rules:
        if rule.markers:
            markers.update(seed_group(rule))
    identifiers = set(_API_NAMES)
    for rule in rules:
        identifiers.update(rule.seed_names)
    for marker in markers:
        if "." not in marker:  # ``torch.distributed.fsdp``: imports, kept anyway
            identifiers.update(_IDENTIFIER.findall(marker))
    return identifiers, tuple(sorted(markers))


class _Index:
    """The units of a file, analysed on demand: a unit's ``ast`` is walked only when the
    closure asks about it.  Which units to ask is narrowed by the identifiers of each
    unit's text (a superset of those of its ``ast``: strings and comments count too)."""

    def __init__(self, units: List[_Unit], lines: List[str], vocabulary: Set[str]) -> None:
        self.units = units
        self.lines = lines
        self.vocabulary = vocabulary
        self.analysed: Set[int] = set()
        self.by_word: Dict[str, List[int]] = {}
        self.texts: List[str] = []
        self.word_sets: List[Set[str]] = []
        self.statement_names: Dict[int, Tuple[Set[str], Set[str]]] = {}
        self.grown = 0
        self.counted: Set[int] = set()
        for index, unit in enumerate(units):
            chunk = "".join(lines[unit.first - 1 : unit.last])
            self.texts.append(chunk)
            words = set(_WORD.findall(chunk))
            if not chunk.isascii():  # the parser normalises identifiers (NFKC)
                words |= {unicodedata.normalize("NFKC", w) for w in words if not w.isascii()}
            self.word_sets.append(words)
            for word in words:
                self.by_word.setdefault(word, []).append(index)

        # what each unit binds outside functions, read from its statements alone (no walk
        # of expressions); units with ``:=`` or ``global`` are analysed instead
        self.shallow_defines: Dict[str, List[int]] = {}
        self.shallow_globals: Dict[str, List[int]] = {}
        self.walked: List[int] = []
        self.function_units: Dict[str, List[int]] = {}  # functions (not methods) by name, any depth
        self.class_units: Dict[str, List[int]] = {}
        for index, unit in enumerate(units):
            text = self.texts[index]
            walked = ":=" in text or "global" in text or "nonlocal" in text
            if walked:
                self.walked.append(index)
            defines: Set[str] = set()
            bound: Set[str] = set()
            if unit.header is not None:
                defines.add(unit.header.name)
            else:
                _shallow(unit.nodes, unit.parent is None, defines, bound)
            functions: Set[str] = set()
            classes: Set[str] = set()
            if unit.header is not None:
                classes.add(unit.header.name)
            else:
                _definitions(unit.nodes, unit.parent is not None, functions, classes)
            for name in functions:
                self.function_units.setdefault(name, []).append(index)
            for name in classes:
                self.class_units.setdefault(name, []).append(index)
            if walked:
                continue
            for name in defines:
                self.shallow_defines.setdefault(name, []).append(index)
            for name in bound:
                self.shallow_globals.setdefault(name, []).append(index)

    limit: Optional[float] = None
    importing: List[int] = []

    def take(self, index: int) -> None:
        """Count a unit about to be kept; past the limit the slice is not worth it."""
        if index not in self.counted:
            self.counted.add(index)
            self.grown += self.units[index].size
            if self.limit is not None and self.grown > self.limit:
                raise _TooMuch

    def words(self, index: int) -> Set[str]:
        return self.word_sets[index]

    def open_name(self, index: int, name: str) -> bool:
        """``name`` is a parameter in the unit, or no statement of it binds ``name``
        (read from statements only: bindings inside expressions do not count, so the
        answer errs on yes)."""
        found = self.statement_names.get(index)
        if found is None:
            params: Set[str] = set()
            bound: Set[str] = set()
            unit = self.units[index]
            if unit.header is None:
                _statement_bindings(unit.nodes, params, bound)
            found = self.statement_names[index] = (params, bound)
        return name in found[0] or name not in found[1]

    def unit(self, index: int) -> _Unit:
        if index not in self.analysed:
            self.analysed.add(index)
            unit = self.units[index]
            _Analyser(unit, self.vocabulary).run()
            unit.top_import = bool(unit.nodes) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in unit.nodes)
        return self.units[index]

    def mentioning(self, words: Iterable[str]) -> Set[int]:
        found: Set[int] = set()
        for word in words:
            found.update(self.by_word.get(word, ()))
        return found

    def holders(self, key: Tuple[str, str]) -> List[int]:
        """Units holding an occurrence ``key``, smallest first."""
        dotted, kind = key
        if kind == "global":
            candidates = set(self.shallow_globals.get(dotted, ())) | set(self.walked)
        else:
            if kind == "function":
                candidates = set(self.function_units.get(dotted, ()))
            elif kind == "class":
                candidates = set(self.class_units.get(dotted, ()))
            else:
                candidates = set(self.by_word.get(dotted.rsplit(".", 1)[-1], ()))
        found = [i for i in candidates if key in self.unit(i).occurrences]
        found.sort(key=lambda i: (self.units[i].size, i))
        return found

    def definers(self, name: str) -> List[int]:
        """Units that bind ``name`` at module scope, or import it anywhere."""
        found = set(self.shallow_defines.get(name, ()))
        for i in (*self.importing, *self.walked):
            unit = self.unit(i)
            if name in unit.defines or name in unit.imported:
                found.add(i)
        return sorted(found)

    def in_class(self, parent: int, attribute: str) -> List[int]:
        """Members of a class that bind ``self.<attribute>`` or define the method."""
        found = []
        for i in self.by_word.get(attribute, ()):
            unit = self.units[i]
            if unit.parent != parent:
                continue
            unit = self.unit(i)
            if attribute in unit.methods or (f"self.{attribute}", "bind") in unit.occurrences or (
                f"cls.{attribute}", "bind"
            ) in unit.occurrences:
                found.append(i)
        return found


def _shallow(nodes, module_scope: bool, defines: Set[str], bound: Set[str]) -> None:
    """Names bound by these statements outside any function (not looking into ``def``
    bodies or expressions): ``defines`` at module scope, ``bound`` anywhere outside a
    function (module scope or a class body), with dotted targets."""
    for node in nodes:
        kind = type(node)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            bound.add(node.name)
            if module_scope:
                defines.add(node.name)
            if kind is ast.ClassDef:
                _shallow(node.body, False, set(), bound)
            continue
        targets = _statement_targets(node)
        if kind in (ast.Import, ast.ImportFrom):
            for alias in node.names:
                name = alias.asname or alias.name.split(".", 1)[0]
                bound.add(name)
                if module_scope:
                    defines.add(name)
        elif kind is ast.Try or kind.__name__ == "TryStar":
            for handler in node.handlers:
                if handler.name:
                    bound.add(handler.name)
                    if module_scope:
                        defines.add(handler.name)
        elif kind is ast.Match:
            return _shallow_match(node, module_scope, defines, bound)
        for dotted in (name for target in targets for name in _target_names(target)):
            bound.add(dotted)
            if module_scope and "." not in dotted:
                defines.add(dotted)
        for field_name in ("body", "orelse", "finalbody", "handlers"):
            children = getattr(node, field_name, None)
            if isinstance(children, list):
                _shallow(
                    [c.body if isinstance(c, ast.ExceptHandler) else c for c in children if not isinstance(c, ast.ExceptHandler)]
                    + [b for c in children if isinstance(c, ast.ExceptHandler) for b in c.body],
                    module_scope, defines, bound,
                )


def _definitions(nodes, in_class: bool, functions: Set[str], classes: Set[str]) -> None:
    """Names of the functions (methods left out) and classes these statements define, at
    any depth (statements only: a ``def`` cannot hide in an expression)."""
    for node in nodes:
        kind = type(node)
        if kind is ast.ClassDef:
            classes.add(node.name)
            _definitions(node.body, True, functions, classes)
            continue
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef):
            if not in_class:
                functions.add(node.name)
            _definitions(node.body, False, functions, classes)
            continue
        for field_name in ("body", "orelse", "finalbody"):
            children = getattr(node, field_name, None)
            if isinstance(children, list):
                _definitions(children, in_class, functions, classes)
        for handler in getattr(node, "handlers", ()) or ():
            _definitions(handler.body, in_class, functions, classes)
        for case in getattr(node, "cases", ()) or ():
            _definitions(case.body, in_class, functions, classes)


def _statement_bindings(nodes, params: Set[str], bound: Set[str]) -> None:
    """Parameter names, and plain names bound by statements (``=``, ``for``, ``with``,
    ``import``, ``def``), at any depth, without looking into expressions."""
    for node in nodes:
        kind = type(node)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef):
            bound.add(node.name)
            args = node.args
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if arg is not None:
                    params.add(arg.arg)
        elif kind is ast.ClassDef:
            bound.add(node.name)
        targets = _statement_targets(node)
        if kind in (ast.Import, ast.ImportFrom):
            bound.update(alias.asname or alias.name.split(".", 1)[0] for alias in node.names)
        bound.update(n for t in targets for n in _target_names(t) if "." not in n)
        for field_name in ("body", "orelse", "finalbody"):
            children = getattr(node, field_name, None)
            if isinstance(children, list):
                _statement_bindings(children, params, bound)
        for handler in getattr(node, "handlers", ()) or ():
            _statement_bindings(handler.body, params, bound)
        for case in getattr(node, "cases", ()) or ():
            _statement_bindings(case.body, params, bound)


def _shallow_match(node, module_scope: bool, defines: Set[str], bound: Set[str]) -> None:
    for case in node.cases:
        for pattern in ast.walk(case.pattern):
            name = getattr(pattern, "name", None) or getattr(pattern, "rest", None)
            if isinstance(name, str):
                bound.add(name)
                if module_scope:
                    defines.add(name)
        _shallow(case.body, module_scope, defines, bound)


class _TooMuch(Exception):
    """The slice would keep more than it is worth: parse the whole text."""


def choose(
    text: str, rules: Sequence[type], max_share: float = 1.0, tree: Optional[ast.Module] = None,
    sites: Optional[Set[int]] = None,
) -> Optional[Tuple[List[_Unit], Set[int]]]:
    """The units of ``text`` and the indices of those the slice keeps (None: not sliceable,
    or the kept lines would pass ``max_share`` of the file's).  ``tree``: ``text``'s
    ``ast``, when the caller has it.  ``sites``: the lines where a finding of ``rules``
    may stand (``screen.live_rules_and_sites``): they are the seeds, with the units naming
    a torch API the facts read file-wide, and nothing is followed forward from them but
    one level of callers (unless ``sites.complete`` is False: then the whole closure
    runs besides them)."""
    if tree is None:
        tree = parse(text)
    if tree is None or not tree.body:
        return None
    units = _units(tree)
    follow = sites is None or not getattr(sites, "complete", True)  # the whole closure too
    vocabulary, markers = vocabulary_for(rules if follow else ())
    lines = text.splitlines(keepends=True)
    index = _Index(units, lines, vocabulary)
    index.limit = max_share * len(lines) if max_share < 1.0 else None
    levels = max((rule.caller_levels for rule in rules), default=1)
    try:
        return _choose(index, markers, vocabulary, sites, follow, levels)
    except _TooMuch:
        return None


def _check_size(index: "_Index", kept: Set[int]) -> None:
    if index.limit is not None:
        for i in kept - index.counted:
            index.take(i)


def _site_units(units: List[_Unit], sites: Set[int]) -> List[int]:
    """The units holding these lines (a member rather than its class's header unit)."""
    found = []
    lines = sorted(sites)
    for i, unit in enumerate(units):
        at = bisect.bisect_left(lines, unit.first)
        if at < len(lines) and lines[at] <= unit.last:
            found.append(i)
    return found


def _choose(
    index: "_Index", markers, vocabulary, sites: Optional[Set[int]] = None, follow: bool = True, levels: int = 1,
) -> Optional[Tuple[List[_Unit], Set[int]]]:
    units, lines = index.units, index.lines
    importing = sorted(index.mentioning(("import",)))
    index.importing = importing
    for i in importing:
        index.unit(i)

    kept: Set[int] = set()
    # 1-2: seeds, and whatever names they define, transitively
    relevant = set(vocabulary)
    for i in importing:
        relevant |= units[i].vocabulary_aliases
    # an API name the file binds only to something else (``from .utils import get_state_dict``,
    # ``def get_state_dict(...)``) is not the API where it stands as a plain name
    bound_elsewhere: Set[str] = set()
    from_torch: Set[str] = set()
    for i in index.mentioning(vocabulary) | set(importing):
        unit = index.unit(i)
        bound_elsewhere |= (unit.imported | unit.defines) & vocabulary
        from_torch |= unit.torch_imported
    shadowed = set() if "*" in from_torch else bound_elsewhere - from_torch
    # the markers as the file filter reads them (substrings: ``FullyShardedDataParallel``
    # also finds ``FullyShardedDataParallelPlugin``, which the facts know too)
    textual = tuple(markers)
    frontier = [] if sites is None else _site_units(units, sites)
    for i, unit in enumerate(units):
        if textual and any(marker in index.texts[i] for marker in textual):
            frontier.append(i)
    for i in sorted(index.mentioning(relevant)):
        unit = index.unit(i)
        if not (unit.names | unit.decorator_names).isdisjoint(relevant - shadowed) or not unit.attributes.isdisjoint(
            vocabulary
        ):
            frontier.append(i)
    chains: Set[str] = set()  # dotted names bound from something relevant (``self.model = FSDP(...)``)
    locals_seen: Set[str] = set()
    # units kept only because they call a function of a relevant unit, with how many calls
    # they stand from it: a rule's facts follow calls ``Rule.caller_levels`` deep (FSD002: a
    # training loop calling ``train_step``, which calls the helper that summons), so such a
    # unit's functions make their callers relevant one level further, up to that depth; beyond it
    # only the functions whose ``return`` carries something relevant do (``dataflow``
    # follows returns up: ``model = self._wrap(net)``)
    callers: Dict[int, int] = {}
    processed: Dict[int, Optional[int]] = {}  # unit -> None: processed in full; n: as a caller n calls away
    while frontier:
        added: List[int] = []
        full_queued: Set[int] = set()

        def queue(j: int, full: bool, level: int = 1) -> None:
            if full:
                callers.pop(j, None)
                full_queued.add(j)
            elif j in full_queued or processed.get(j, level) is None or callers.get(j, level + 1) <= level:
                return
            else:
                callers[j] = level
            added.append(j)
            index.take(j)

        for i in frontier:
            level = callers.get(i)
            if i in processed and (processed[i] is None or (level is not None and processed[i] <= level)):
                continue  # done, and not to be followed further than it was
            processed[i] = level
            kept.add(i)
            unit = index.unit(i)
            further = level is None or level < levels  # its callers are still within reach
            if unit.top_import:
                defs, functions, new_chains, local = unit.vocabulary_aliases - relevant, set(), set(), set()
            elif not follow:
                # every site is a seed: only the callers of a seed's functions, and theirs,
                # ``levels`` deep (``loops.per_step_via_call``, ``offload``'s callers of a
                # wrap, hooks by name)
                defs, new_chains, local = set(), set(), set()
                functions = {name for name, _, _ in unit.functions} if further else set()
            else:
                defs, functions, new_chains, local = _passed_on(unit, relevant, chains, lines, level is not None)
                if level is not None and further:
                    functions = {name for name, _, _ in unit.functions}
                defs -= relevant
                functions -= relevant
                new_chains -= chains
                local -= locals_seen
            new = defs | functions
            relevant |= new
            chains |= new_chains
            locals_seen |= local
            for j in sorted(index.mentioning(new | local)):
                # a name it defines, read anywhere (over-approximated by the text's words); a
                # local name bound from something relevant (``model = FSDP(net)``): the facts'
                # file-wide name sets reach a unit where that name is a parameter or not
                # bound (``def save(model): model.state_dict()``); a caller of a function
                if processed.get(j, 0) is None:
                    continue
                words = index.words(j)
                if not words.isdisjoint(defs) or any(
                    index.open_name(j, name) and name in index.unit(j).uses_any for name in local & words
                ):
                    queue(j, True)
                elif not words.isdisjoint(functions):
                    queue(j, False, (level or 0) + 1)
            for j in sorted(index.mentioning({c.rsplit(".", 1)[-1] for c in new_chains})):
                if processed.get(j, 0) is None:
                    continue
                if not (index.unit(j).uses_any | index.unit(j).binds_any).isdisjoint(new_chains):
                    queue(j, True)
        frontier = added
    if not kept:
        return None  # nothing relevant found (markers only in comments between statements): parse it all
    # code outside any function (module level, class bodies) is one function for the facts
    # (``ctx.function`` None): a site there is paired with every such statement (``used_after``,
    # ``rebound_between``, ``balanced``, a wrap and an optimizer "in the same function")
    trigger = _site_units(units, sites) if sites is not None else kept
    if any(_outside_functions(units[i]) for i in trigger):
        kept.update(i for i, unit in enumerate(units) if _outside_functions(unit))
    # an ``if`` with a branch that leaves the block (``if rank != 0: raise ...`` at module
    # level or in a class body) guards every statement after it (``facts.index``)
    kept.update(i for i, unit in enumerate(units) if any(map(_exits_early, unit.nodes)))
    # 3: top-level imports
    kept.update(i for i in importing if units[i].top_import and units[i].parent is None)
    _close(index, kept, importing)
    return units, kept


_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _outside_functions(unit: _Unit) -> bool:
    """Statements run outside any function: not a header, and not only definitions."""
    return unit.header is None and not all(isinstance(node, _DEFINITIONS) for node in unit.nodes)


def _exits_early(node: ast.AST) -> bool:
    return type(node) is ast.If and any(
        branch and isinstance(branch[-1], _EXITS) for branch in (node.body, node.orelse)
    )


def _passed_on(unit: _Unit, relevant: Set[str], chains: Set[str], lines: List[str], as_caller: bool = False):
    """What a relevant statement makes relevant elsewhere: (identifiers it defines, the
    functions it defines, dotted names, local names).

    - what it defines at module scope (a helper, a model class, ``model = FSDP(...)``);
    - the functions and methods it defines: their callers (the facts follow a call into a
      helper: a summon in a function that a training loop calls) and references
      (``register_forward_hook(self._log)``: the facts know hooks by name); for a unit kept
      only as a caller (``as_caller``), those whose ``return`` mentions something relevant
      (their callers get an FSDP model: ``model = self._wrap(net)``);
    - the attributes and names it binds from something relevant (``self.model = FSDP(m)``:
      the facts know the names that hold an FSDP module, in every function).
    """
    def words(first: int, last: int) -> Set[str]:
        return set(_IDENTIFIER.findall("".join(lines[first - 1 : last])))

    extra: Set[str] = set()

    def tainted(found: Set[str]) -> bool:
        return not (relevant.isdisjoint(found) and chains.isdisjoint(found) and extra.isdisjoint(found))

    bound: Set[str] = set()
    for _ in range(2):  # ``wrapped = FSDP(m)``, then ``self.model = wrapped``
        for targets, first, last in unit.assignments:
            if tainted(words(first, last)) or tainted(set(targets)):
                bound.update(targets)
                extra.update(t for t in targets if "." not in t)
    identifiers = set(unit.defines) - {name for name, _, _ in unit.functions}
    functions = {name for name, _, _ in unit.functions}
    returning = set()
    for name, first, last in unit.functions:
        for r_first, r_last in unit.returns:
            if first <= r_first and r_last <= last and tainted(words(r_first, r_last)):
                returning.add(name)
                break
    dotted = {t for t in bound if "." in t}
    local = {t for t in bound if "." not in t} - unit.defines
    return identifiers | (bound & unit.defines), returning if as_caller else functions, dotted, local


def _close(index: _Index, kept: Set[int], importing: List[int]) -> None:
    """Steps 3-5 of the module docstring, until nothing changes."""
    units = index.units
    module_holders: Dict[str, List[int]] = {}
    for i in importing:
        for module in units[i].modules:
            module_holders.setdefault(module, []).append(i)
    for indices in module_holders.values():
        indices.sort(key=lambda i: units[i].size)

    # passive: kept only so that a whole-module count or "is there one?" gets the file's
    # answer (its code is not followed by anything kept, so its own names need nothing)
    passive: Set[int] = set()
    done: Set[int] = set()
    # a method called on an instance (``model.score(...)``) may be one of a kept class's:
    # the attributes the kept code names, and the class statements kept so far
    called: Set[str] = set()
    headers: List[int] = []
    while True:
        fresh = [i for i in kept if i not in done]
        if not fresh:
            break
        _check_size(index, kept)
        done.update(fresh)
        for i in fresh:
            unit = index.unit(i)
            if unit.parent is not None:
                kept.add(unit.parent)  # a member needs its class statement
                passive.discard(unit.parent)
            if unit.header is not None:
                # the class body's own statements (class attributes: bindings outside any
                # function) come with the class statement
                for member in unit.members:
                    if not all(isinstance(n, _DEFINITIONS) for n in units[member].nodes):
                        kept.add(member)
                # and its methods of a name the kept code calls on something
                headers.append(i)
                for attribute in called:
                    kept.update(index.in_class(i, attribute))
            if unit.top_import or i in passive:
                continue  # what an import binds matters where it is used
            new = unit.attributes - called
            if new:
                called |= new
                for header in headers:
                    for attribute in new:
                        kept.update(index.in_class(header, attribute))
            for name in unit.names:
                kept.update(index.definers(name))
            for dotted, kind in list(unit.occurrences):
                if kind == "use":
                    # a name read here: its bindings outside functions (module constants,
                    # class attributes, ``args.x = ...``), the classes of that name, and
                    # enough of the functions of that name ("exactly one?")
                    kept.update(index.holders((dotted, "global")))
                    kept.update(index.holders((dotted, "class")))
                    functions = index.holders((dotted, "function"))
                    _keep_enough(units, kept, functions, (dotted, "function"), passive if len(functions) > 1 else None)
                    if unit.parent is not None and dotted.startswith(("self.", "cls.")):
                        # ``self.x`` in a method: every method of the class that binds
                        # ``self.x``, and the method ``x`` itself
                        kept.update(index.in_class(unit.parent, dotted.split(".")[1]))
                elif kind == "bind":
                    # an attribute bound here (``self.optimizer = ...``): enough of its uses
                    # elsewhere ("used in another method?")
                    _keep_enough(units, kept, index.holders((dotted, "use")), (dotted, "use"), passive)
        covered = set().union(*(units[i].modules for i in kept if i in index.analysed))
        for module, indices in module_holders.items():
            if module not in covered:
                if indices[0] not in kept:
                    passive.add(indices[0])
                kept.add(indices[0])
                covered |= units[indices[0]].modules
    for i, unit in enumerate(units):
        if unit.header is not None and i in kept and not any(m in kept for m in unit.members):
            kept.add(unit.members[0])  # a class statement needs a body


def _keep_enough(units: List[_Unit], kept: Set[int], holders: Sequence[int], key, passive=None) -> None:
    """At least min(n, ENOUGH) of the statements holding ``key`` and of its occurrences."""
    if not holders:
        return
    want_units = min(len(holders), ENOUGH)
    want_count = min(sum(units[i].occurrences[key] for i in holders), ENOUGH)
    have_units = have_count = 0
    for index in holders:
        if index in kept:
            have_units += 1
            have_count += units[index].occurrences[key]
    for index in holders:  # smallest first
        if have_units >= want_units and have_count >= want_count:
            return
        if index not in kept:
            kept.add(index)
            if passive is not None:
                passive.add(index)
            have_units += 1
            have_count += units[index].occurrences[key]


def slice_text(
    text: str, rules: Sequence[type], min_chars: int = MIN_CHARS, max_share: float = MAX_SHARE,
    tree: Optional[ast.Module] = None, sites: Optional[Set[int]] = None,
) -> Optional[Slice]:
    """The slice of ``text`` for ``rules``, or None to lint the whole text (``tree``:
    ``text``'s ``ast``, when the caller has it; ``sites``: see ``choose``)."""
    if len(text) < min_chars:
        return None
    if _ODD_LINE_ENDS.search(text) or text.count("\r") != text.count("\r\n"):
        return None  # str.splitlines, ast and libcst may disagree on what ends a line
    chosen = choose(text, rules, max_share, tree, sites)
    if chosen is None:
        return None
    units, kept = chosen
    lines = text.splitlines(keepends=True)
    kept_lines = sum(units[i].size for i in kept)
    if kept_lines > max_share * len(lines) or len(kept) == len(units):
        return None
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    pieces: List[str] = []
    chunks: List[Tuple[int, int, int]] = []
    position = 0
    for index in sorted(kept):
        unit = units[index]
        begin, end = starts[unit.first - 1], starts[unit.last]
        piece = text[begin:end]
        if not piece.endswith(("\n", "\r")):
            piece += "\n"  # the file's last line, without a newline: the slice goes on
        if chunks and chunks[-1][1] + chunks[-1][2] == begin and chunks[-1][0] + chunks[-1][2] == position:
            start, original, length = chunks[-1]
            chunks[-1] = (start, original, length + end - begin)
        else:
            chunks.append((position, begin, end - begin))
        pieces.append(piece)
        position += len(piece)
    if not chunks:
        chunks.append((0, 0, 0))
    return Slice("".join(pieces), chunks, len(kept), len(units))
