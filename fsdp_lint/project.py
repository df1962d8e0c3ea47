"""The project index: what the other files of a project's helpers do, for the file linted.

Real projects wrap the model in one file (torchtitan's ``parallelize.py``), save or gather
it in a helper module, and call both from ``train.py``.  For a linted file this module
answers, through that file's own imports, the summary of a project function
(``facts.helper_summary.Helper``: it runs a collective, shards its argument with
``fully_shard``, saves on every rank, builds an optimizer), computed from the helper
file's own facts (``facts.helpers.summaries``, the facts every rule reads).

- The project root is found as ruff finds it (``launch.project_root``: the nearest
  ``pyproject.toml``, else ``.git``); a file in no project has no index (a folder of
  scripts without either: its files are linted one by one).
- An import resolves to a file of the project: relative imports from the importing
  file's package, absolute ones from the importing file's folder (a script's
  ``sys.path[0]``), the top of its package, the root and ``src/`` (``src`` layouts); a
  package's ``__init__.py`` that re-exports a function is followed (three levels).
- Summaries are computed on demand, only for the files the linted file imports (not the
  whole tree: a one-file run reads only what that file imports), and cached by file
  content (in memory, and under the result cache's folder in ``project/``): a warm run
  hashes the imported files and reads their summaries back, nothing is parsed.  With
  workers, the command line hands them the files that the files it is about to gate
  import (``ProjectIndex.prefetch``): they compute those summaries in parallel, and the
  main process waits for an answer instead of computing it.  A file
  without a word a summary can come from (``state_dict``, ``save``, ``fully_shard``,
  ``barrier``, ...) is not parsed at all; one over ``MAX_BYTES`` or that does not parse
  has no summary (unknown, not "assume the worst").  A file's cheap part, "names"
  (``summarized_names_of_text``: the functions a summary may hold, from ``ast`` alone), is
  read first: a module is summarized (libcst) only where an importer names one of those.
- Two parts of a file's index are read only when a rule asks, never by the gate:
  ``dtypes`` (what a top-level function returns a model made in: FSD113's
  ``model = load_model(name)``) and ``classes`` (what a class's methods do with the model's
  weights and nested units: FSD105's and FSD104's ``model.forward_train(...)``).  A cached
  result's ``tag`` holds what they answer for the file's imports (``imported_answers``).
- ``ProjectView.gate_kinds`` gives the gate (``engine.wanted_rules``, ``screen``) what
  the file's imported helpers do, read from the same summaries (a plain scan of the
  file's import statements, which finds every import the facts resolve); ``tag`` is what
  a cached result depends on: the summaries of the helpers the file imports, so a change
  to a helper's summary (or its line) invalidates the findings that depend on it.
- The other direction: what the project's files pass to a file's functions.  The files
  that name FSDP are scanned once per root for what they import (``importers``); an
  importer's calls of the file's top-level functions are read with its own facts
  (``facts.passed_arguments``: which arguments hold FSDP modules it wraps, which are rank
  tests or made on one rank, by content of the importer); ``fsdp_modules.origins_with_callers``
  gives a parameter those modules (``Origins.external``), ``facts.callers`` the rest.  The
  gate's "fsdp1_passed" fact holds where such an importer exists; ``tag`` then also depends
  on the importers' contents (``CALLER_DEPTH`` levels of them).
"""

from __future__ import annotations

import ast
from dataclasses import replace
import functools
import hashlib
import json
import warnings
import os
import re
import time
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple

from fsdp_lint.code_identity import code_fingerprint
from fsdp_lint.lazy_libcst import cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.dtensors import GATHERS as _DTENSOR_GATHERS
from fsdp_lint.facts.dtypes import returned_in
from fsdp_lint.facts.forward_methods import OWN_WEIGHT_LAYERS, runs_forward, uses_own_weights
from fsdp_lint.facts.call_shape import of_ast
from fsdp_lint.facts.collectives import DIST_COLLECTIVES, FSDP_OPTIM_STATE, LIBRARY_GATHERS, on_subgroup
from fsdp_lint.facts.frameworks import ALWAYS, WITH_FSDP, WITH_FSDP_METHODS
from fsdp_lint.facts.helper_summary import Helper, kinds_of
from fsdp_lint.facts.helpers import summaries
from fsdp_lint.facts.index import index_module
from fsdp_lint.facts.passed_arguments import PASSED, ExternalWrap, argument_records, external_wraps, passed_arguments
from fsdp_lint.facts.ties import ties
from fsdp_lint.launch import SKIPPED_DIRS, project_root
from fsdp_lint.positions import Positions
from fsdp_lint.source import line_starts

SUMMARY_VERSION = "project-index-12"
MAX_BYTES = 1024 * 1024
MAX_REEXPORT_DEPTH = 3
MEMO_SECONDS = 5.0
IMPORTERS_SECONDS = 60.0  # the project-wide scan of who imports whom: read again after this long
# a launched script's imports are followed this many files deep, this many files at most
# (``imported_files``: the modules a launch reaches)
MAX_REACH_DEPTH = 4
MAX_REACH_FILES = 300
# the files read for who imports a module (``ProjectIndex.importers``): at most this many
MAX_PROJECT_FILES = 3000
# a summary can only come from a call of one of these (``facts.helpers``): a file without
# one is not parsed
_FRAMEWORK_CALLS = frozenset().union(*ALWAYS.values(), *WITH_FSDP.values())
_SUMMARY_CALLS = frozenset(
    {"summon_full_params", "fully_shard", "state_dict", "save", "save_file", "full_tensor", "redistribute"}
    | DIST_COLLECTIVES | FSDP_OPTIM_STATE | {q.rsplit(".", 1)[-1] for q in LIBRARY_GATHERS | torch_api.FULL_STATE_DICT_FUNCTIONS}
    | set().union(*ALWAYS.values(), *WITH_FSDP.values())
)
_WITH_FSDP_ONLY = WITH_FSDP_METHODS - frozenset().union(*ALWAYS.values()) - DIST_COLLECTIVES
# a framework's own collectives (``fabric.load``, ``accelerator.wait_for_everyone``) count, as
# those named like ``torch.distributed``'s do, only in a file naming a framework
# (``frameworks.framework_collective`` reads the receiver: ``json.load`` is none)
_FRAMEWORK_ONLY = frozenset().union(*ALWAYS.values()) - DIST_COLLECTIVES


class _Words:
    """A pattern searched for only where one of its literal pieces occurs (every match holds
    one): ``re`` scans a text slowly for an alternation or a look-behind, ``in`` fast for a
    piece, and most files hold none."""

    def __init__(self, pattern: str, pieces) -> None:
        self.regex = re.compile(pattern)
        self.pieces = tuple(sorted(set(pieces)))

    def search(self, text: str):
        return self.regex.search(text) if any(piece in text for piece in self.pieces) else None


_STATE_DICT_FUNCTIONS = sorted(n for n in _SUMMARY_CALLS if n.endswith("state_dict") and n != "state_dict")
_GATHER_WORDS = _Words(
    r"summon_full_params|fully_shard|\.state_dict\(\s*\)|torch\.save\s*\(|save_file\s*\(|\.full_tensor\(|"
    r"\.redistribute\(|" + "|".join(_STATE_DICT_FUNCTIONS),
    ("summon_full_params", "fully_shard", "state_dict", "torch.save", "save_file", ".full_tensor(", ".redistribute("),
)
# a low-precision dtype named (``returned_dtypes_of_text``)
_LOW_PRECISION_WORDS = _Words(r"bfloat16|float16|\.half\(", ("float16", ".half("))
_DIST_WORDS = _Words(r"\b(?:" + "|".join(sorted(DIST_COLLECTIVES)) + r")\s*\(", DIST_COLLECTIVES)
# a file naming accelerate, Fabric, Lightning or HF's trainers (``frameworks.framework_of``;
# torch's own ``torch.accelerator`` and its ``current_accelerator`` are none)
_NAMES_A_FRAMEWORK = _Words(r"(?<!torch\.)\baccelerat|abric|lightning|transformers|\btrl\b",
                            ("accelerat", "abric", "lightning", "transformers", "trl"))
_FRAMEWORK_WORDS = _Words(r"\b(?:" + "|".join(sorted(_FRAMEWORK_CALLS)) + r")\s*\(", _FRAMEWORK_CALLS)


# a top-level ``def`` starts a line (a form feed may come first)
_TOP_LEVEL_DEF = re.compile(r"^\f*(?:async[\s\\]+)?def\b", re.M)


def _may_have_summary(text: str) -> bool:
    """The text has a call a summary can come from (``_candidates`` then looks closer): a
    summary is of top-level functions only, so there is a top-level ``def``, and the call is
    in a function's body, after the first such ``def``."""
    first = _TOP_LEVEL_DEF.search(text)
    if first is None:
        return False
    if "FullyShardedDataParallel" in text or "ShardingStrategy" in text or "fully_shard" in text:
        return True  # (imported under another name: ``fully_shard as shard``)
    body = text[first.start():]
    if _GATHER_WORDS.search(body):
        return True
    if "torch.distributed" in text and _DIST_WORDS.search(body):
        return True
    return bool(_NAMES_A_FRAMEWORK.search(text)) and bool(_FRAMEWORK_WORDS.search(body))


# led by the newline before the line (the text is scanned with one put in front): the same
# matches as ``^`` under ``re.M``, found about twice as fast
_FROM = re.compile(r"\n[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)")
_IMPORT = re.compile(r"\n[ \t]*import[ \t]+([^\n#;(]*)")
_AT_FIELDS = ("line", "collective_at", "shard_at", "save_at", "wrap_at")


class ModuleSummary:
    """A file's helpers (top-level functions by name) and, for a package's ``__init__``, the
    names it imports (``exports``: what it re-exports).  Its classes' tied parameters are a
    part of their own (``class_ties_of_text``), read only where a rule asks for a class."""

    def __init__(self, functions: Dict[str, dict], exports: Dict[str, str]) -> None:
        self.functions = functions
        self.exports = exports

    def to_json(self) -> str:
        return json.dumps({"functions": self.functions, "exports": self.exports}, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "ModuleSummary":
        data = json.loads(text)
        found = ModuleSummary(dict(data["functions"]), dict(data["exports"]))
        for data in found.functions.values():
            Helper.from_json(data, "")  # a damaged or foreign file is a miss
        return found


EMPTY = ModuleSummary({}, {})


# what ``facts.ties`` needs of a class's tie: ``self.<module>.<param> = self.<module>.<...>``,
# both sides at least two attributes deep (``ties._split``)
_TIE_TEXT = re.compile(r"self\.\w+\.\w[\w.]*\s*=[\s(\\]*self\.\w+\.\w")


def class_ties_of_text(text: str) -> Dict[str, list]:
    """A file's classes' tied parameters: class name -> [first path, second path, line] for
    each ``self.a.w = self.b.w`` of ``facts.ties`` (every instance's tie).  A file with no
    ``self.x.y = self.z.w`` is not parsed (most classes' ``self.x = self.y.z`` ties nothing)."""
    if not _TIE_TEXT.search(text):
        return {}
    try:
        module = cst.parse_module(_tying_classes(text))
        facts = index_module(module)
        positions = Positions(module, line_starts(text))
        found: Dict[str, list] = {}
        for tie in ties(facts):
            class_def = tie.class_def
            if class_def is not None and facts.classes.get(class_def.name.value) is class_def:
                line = positions(tie.binding.value).start.line
                found.setdefault(class_def.name.value, []).append([tie.first, tie.second, line])
        return found
    except Exception:  # noqa: BLE001 - a file that does not parse (or a bug here): no ties, never a finding
        return {}


def _ast_of(source) -> Optional[ast.Module]:
    """``source``'s ``ast`` (text or bytes), None where it does not parse (or is too deep or
    large for the parser); its warnings are not the user's business here."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _tying_classes(text: str) -> str:
    """The text with only the top-level classes that can hold a tie (``_TIE_TEXT`` in their
    body) and the code outside classes and functions kept in place; every other top-level
    ``def`` and ``class`` becomes blank lines, so each kept line keeps its number.  (A tie
    in a method called only from outside its class is then not seen: a missed tie, never a
    finding.)  The whole text where ``ast`` cannot parse it."""
    tree = _ast_of(text)
    if tree is None:
        return text
    return _blank_definitions(text, tree, lambda node, body: isinstance(node, ast.ClassDef) and _TIE_TEXT.search(body))


def _blank_definitions(text: str, tree: ast.Module, keep) -> str:
    """``text`` with each top-level ``def``/``class`` (decorators included) for which
    ``keep(node, its text)`` is false turned into blank lines: every kept line keeps its
    number, and libcst parses only what is kept."""
    lines = text.splitlines(keepends=True)
    kept = {id(node) for node in _kept_definitions(text, tree, keep, lines)}
    dropped = [_extent(node) for node in tree.body
               if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in kept]
    if not dropped:
        return text
    for first, last in dropped:
        for index in range(first - 1, min(last, len(lines))):
            lines[index] = "\n"
    return "".join(lines)


def _extent(node: ast.AST) -> Tuple[int, int]:
    """(first, last) line of a top-level definition, its decorators included."""
    return min([node.lineno] + [d.lineno for d in node.decorator_list]), node.end_lineno or node.lineno


def _kept_definitions(text: str, tree: ast.Module, keep, lines: Optional[List[str]] = None) -> List[ast.AST]:
    """The top-level ``def``/``class`` nodes for which ``keep(node, its text)`` holds."""
    lines = text.splitlines(keepends=True) if lines is None else lines
    kept = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first, last = _extent(node)
            if keep(node, "".join(lines[first - 1:last])):
                kept.append(node)
    return kept


def _exports(text: str, package: bool) -> Dict[str, str]:
    """What a package's ``__init__`` re-exports (the names its imports bind); {} for a module."""
    return {bound: spec for bound, spec in _import_bindings(text) if "." not in bound} if package else {}


def summarized_names_of_text(text: str, package: bool = False) -> dict:
    """The cheap part of a file's summary, read before it (``ProjectIndex._defined``,
    ``ProjectView.imported_helpers``): "functions", the top-level functions a summary may
    hold (those ``_summarized_text`` keeps: a blanked one cannot have one), and "exports"
    (``_exports``).  No libcst: a file whose importers name none of those functions is
    never summarized."""
    names: List[str] = []
    found = _candidates(text) if _may_have_summary(text) else None
    if found is not None:
        tree, kept, holders = found
        names = sorted(n.name for n in _kept_definitions(text, tree, _summary_keeps(holders))
                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return {"functions": names, "exports": _exports(text, package)}


def summarize_text(text: str, package: bool = False) -> ModuleSummary:
    """The summary of one file's text (``facts.helpers.summaries`` with lines for nodes);
    ``package``: the text is a package's ``__init__`` (only those re-export, ``exports``)."""
    exports = _exports(text, package)
    if not _may_have_summary(text):
        return ModuleSummary({}, exports)
    kept = _summarized_text(text)
    if kept is None:
        return ModuleSummary({}, exports)
    try:
        module = cst.parse_module(kept)
        facts = index_module(module)
        helpers = summaries(facts)
        positions = Positions(module, line_starts(kept))
        functions = {}
        for name, helper in helpers.items():
            if helper.forward:  # a forward helper serves its own file only: the caller of another file
                helper = replace(helper, collective="", collective_at=None, advice="", model=None, needs="",
                                 forward_of=(), forward=False)
                helper.kinds = kinds_of(helper)
                if not helper.kinds:
                    continue  # ``summaries`` keeps only helpers that do something a rule reads
            data = helper.to_json()
            for key in _AT_FIELDS:
                node = data.get(key)
                data[key] = positions(node).start.line if node is not None else None
            data["file"] = ""
            functions[name] = data
        return ModuleSummary(functions, exports)
    except Exception:  # noqa: BLE001 - a file that does not parse (or a bug here): no summary, never a finding
        return ModuleSummary({}, exports)


def _summarized_text(text: str) -> Optional[str]:
    """The text a summary is computed from (None: no function of it can have one): the
    file with only what a candidate function's summary can read kept in place, the
    functions ``_candidates`` finds and every top-level function and class they name, and
    all of the module's code outside functions and classes (imports, constants); every
    other top-level ``def`` and ``class`` becomes blank lines, so each kept line keeps its
    number.  Libcst then parses a fraction of a large module."""
    found = _candidates(text)
    if found is None:
        return None
    tree, names, _ = found
    return _blank_definitions(text, tree, _summary_keeps(names))


def _summary_keeps(names: set) -> Callable:
    """Which top-level definitions a summarized text keeps (``_blank_definitions``'
    ``keep``): those ``_candidates`` names, and any that may wrap or shard a model (what
    the file's FSDP use is: ``needs``, forwards)."""
    return lambda node, body: node.name in names or bool(_FILE_WIDE.search(body))


@functools.lru_cache(maxsize=8)
def _candidates(text: str) -> Optional[Tuple[ast.Module, set, set]]:
    """A cheap ``ast`` look before libcst (``facts.helpers`` asks more): the module's
    ``ast``, the top-level functions a summary may come from with every top-level
    function they name (what a summarized text keeps), and those functions alone (what
    a "names" part lists: an importer naming only a function they name needs no summary)
    (None: none may have one).  Such a function: some top-level
    function calls, on every call (in its body or a ``with`` block, not under an ``if``,
    loop, ``try`` or short-circuit), one of ``_SUMMARY_CALLS`` (``torch.distributed``'s only
    in a file naming it, ``state_dict()`` only on one of its parameters, a save only as
    ``torch.save`` or safetensors' ``save_file``), or another top-level function of the
    file that does; or, in a file naming ``FullyShardedDataParallel``, returns a value (it
    may return an FSDP1 wrap); or gathers a DTensor in a loop over its parameter's
    parameters; or, in a file naming ``ShardingStrategy``, returns a member (it may choose
    the strategy: ``Helper.strategies``).  Kept for the last texts asked: a file's "names"
    part and then its summary read it in turn (callers never change what it hands back)."""
    tree = _ast_of(text)
    if tree is None:
        return None
    bindings = dict(_import_bindings(text))
    distributed = _distributed_callee(text, bindings)
    # a framework's call (``accelerator.reduce``) is a method whose callee no import names
    # (``frameworks.framework_collective``): not ``functools.reduce`` or ``torch.gather``
    frameworks = _NAMES_A_FRAMEWORK.search(text) is not None
    framework_call = _framework_callee(bindings)
    shows_fsdp = "fsdp" in text.lower()
    fsdp1 = "FullyShardedDataParallel" in text  # a helper may return an FSDP1 wrap (``Helper.wraps``)
    wraps_here = fsdp1 or "fully_shard" in text  # a module of the file may be sharded
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    calls: Dict[str, set] = {}
    found = set()
    # another function's code (a branch, loop or handler is looked into: the summary's own
    # walk decides what runs on every call, ``helpers._always_reached``)
    skipped = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    for name, function in functions.items():
        args = function.args
        params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        stack = list(function.body)
        callees = calls.setdefault(name, set())
        while stack:
            node = stack.pop()
            if isinstance(node, ast.For) and _parameter_loop(node, params):
                if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _DTENSOR_GATHERS
                       for n in ast.walk(node)):
                    found.add(name)  # ``facts.helpers``: a DTensor gather over a parameter's parameters
                continue
            if isinstance(node, skipped):
                continue
            if fsdp1 and isinstance(node, ast.Return) and node.value is not None:
                found.add(name)
            if isinstance(node, ast.Call):
                func = node.func
                last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if isinstance(func, ast.Name) and func.id in bindings:  # ``fully_shard as shard``
                    last = bindings[func.id].rpartition(".")[2]
                root = func
                while isinstance(root, ast.Attribute):
                    root = root.value
                root = root.id if isinstance(root, ast.Name) else None
                if isinstance(func, ast.Name) and func.id in params:
                    if wraps_here:  # the forward of a module it is passed, which a caller here wraps
                        found.add(name)
                elif last in ("state_dict", "load_state_dict"):
                    if root in params or wraps_here:  # a parameter's, or one the file may wrap
                        found.add(name)
                elif last == "save":
                    if bindings.get(root, root) == "torch":
                        found.add(name)
                elif last in DIST_COLLECTIVES:
                    if (distributed(func) and not on_subgroup(of_ast(node), last)) \
                            or (last in _FRAMEWORK_CALLS and frameworks and framework_call(func)):
                        found.add(name)
                elif last in _WITH_FSDP_ONLY:
                    # a framework's (``framework_collective``) where the file shows FSDP; a
                    # function of that name is torch's (``get_state_dict(model, optimizer)``)
                    if shows_fsdp or not framework_call(func):
                        found.add(name)
                elif last in _FRAMEWORK_ONLY:
                    if frameworks and framework_call(func):
                        found.add(name)
                elif last in _SUMMARY_CALLS:
                    found.add(name)
                elif isinstance(func, ast.Name) and func.id in functions:
                    callees.add(func.id)
            stack.extend(ast.iter_child_nodes(node))
    for _ in range(3):
        found |= {name for name, callees in calls.items() if callees & found}
    if "ShardingStrategy" in text:  # ``facts.helpers``: a function whose returns choose a strategy
        found |= {name for name, function in functions.items() if any(
            isinstance(node, ast.Return) and isinstance(node.value, ast.Attribute) and node.value.attr.isupper()
            for node in ast.walk(function))}
    if not found:
        return None
    # and every top-level function or class they name, and what those name, which their
    # facts may follow (a helper's helper, ``class ShardedModel(FSDP)`` it returns)
    return tree, _with_what_they_name(tree, found), found


def _with_what_they_name(tree: ast.Module, found) -> set:
    """The top-level definitions ``found`` and every top-level function or class they name,
    and what those name in turn."""
    named = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    kept, pending = set(found), list(found)
    while pending:
        for node in ast.walk(named[pending.pop()]):
            if isinstance(node, ast.Name) and node.id in named and node.id not in kept:
                kept.add(node.id)
                pending.append(node.id)
    return kept


def _callee_parts(func: ast.expr) -> Optional[List[str]]:
    """The dotted parts of a call's callee (``dist.all_reduce``: ["dist", "all_reduce"]);
    None where its root is not a name (``make_accelerator().reduce``)."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    parts.append(func.id)
    parts.reverse()
    return parts


def _bound_prefix(parts: List[str], bindings: Dict[str, str], longest: int) -> int:
    """How many of ``parts``, at most ``longest``, form the longest prefix an import binds
    (0: none)."""
    for end in range(longest, 0, -1):
        if ".".join(parts[:end]) in bindings:
            return end
    return 0


def _distributed_callee(text: str, bindings: Dict[str, str]):
    """Whether a call's callee may be a ``torch.distributed`` function as the facts read it
    (``facts.imports``: a name the file imports, then attributes): its dotted name, read
    through the file's import statements (``bindings``: ``_import_bindings``), lies under
    ``torch.distributed``; ``functools.reduce``, ``torch.gather`` and ``tensor.scatter``
    do not.  A callee whose root no import binds may be one only where the file
    star-imports from torch (the wider answer: the facts read no star import)."""
    starred = re.search(r"from\s+torch[\w.]*\s+import\s+\*", text) is not None

    def distributed(func: ast.expr) -> bool:
        parts = _callee_parts(func)
        if parts is None:
            return False
        end = _bound_prefix(parts, bindings, len(parts))
        if end:
            return ".".join([bindings[".".join(parts[:end])], *parts[end:]]).startswith("torch.distributed.")
        return starred
    return distributed


def _framework_callee(bindings: Dict[str, str]):
    """Whether a call may be a framework's method as ``frameworks.framework_collective``
    reads it: an attribute call whose dotted callee no import of the file names
    (``bindings``; the facts give it no qualified name), so its receiver decides
    (``framework_of``)."""
    def framework_call(func: ast.expr) -> bool:
        if not isinstance(func, ast.Attribute):
            return False
        parts = _callee_parts(func)
        if parts is None:
            return True  # ``make_accelerator().reduce``: a value, not a name an import binds
        return not _bound_prefix(parts, bindings, len(parts) - 1)
    return framework_call


def _parameter_loop(loop: ast.For, params) -> bool:
    """``for ... in <param>.parameters()`` / ``.named_parameters()``."""
    iterated = loop.iter
    return isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Attribute) \
        and iterated.func.attr in ("parameters", "named_parameters") \
        and isinstance(iterated.func.value, ast.Name) and iterated.func.value.id in params


@functools.lru_cache(maxsize=256)
def _import_bindings(text: str) -> Tuple[Tuple[str, str], ...]:
    """(local dotted name, spec) for every import statement of ``text``: ``from .a import
    b as c`` gives ("c", ".a.b"), ``import a.b as c`` ("c", "a.b"), ``import a.b`` ("a.b",
    "a.b").  A plain scan (no parse): it may see more than the facts, never less.  Kept for
    the last texts asked (the command line asks twice per file: ``imported_modules`` for
    the prefetch, then ``imported_helpers``)."""
    text = "\n" + text.replace("\\\n", " ")
    found = []
    for match in _FROM.finditer(text):
        module, names = match.group(1), match.group(2).strip().strip("()")
        for part in names.replace("\n", " ").split(","):
            words = part.split()
            if not words or words[0] == "*":
                continue
            name, bound = words[0], words[2] if len(words) >= 3 and words[1] == "as" else words[0]
            spec = f"{module}{name}" if module.endswith(".") else f"{module}.{name}"
            found.append((bound, spec))
    for match in _IMPORT.finditer(text):
        for part in match.group(1).split(","):
            words = part.split()
            if not words:
                continue
            name = words[0]
            bound = words[2] if len(words) >= 3 and words[1] == "as" else name
            found.append((bound, name))
    return tuple(found)


# a ``def`` or ``class`` naming one of these is kept in a summarized text whatever it does:
# a summary also reads the whole file's FSDP use (a collective "needs" FSDP in the caller's
# file only where this one wraps nothing; a forward helper's model is the file's sharded one)
_FILE_WIDE = re.compile(r"fsdp|fully_shard|FullyShardedDataParallel", re.IGNORECASE)


# a class holding a weight of its own or a submodule (``forward_methods.own_weights``,
# ``unit_holders``) names one of these
_MODULE_TEXT = re.compile(r"\bParameter\(|\bModule(?:List|Dict)\(|\bSequential\(|\bfrom_pretrained\(|\b(?:"
                          + "|".join(sorted(OWN_WEIGHT_LAYERS)) + r")\(")


def class_methods_of_text(text: str) -> Dict[str, dict]:
    """What a file's top-level classes' methods do with the model (``facts.forward_methods``):
    class name -> {method: {"weight": the ``self.X`` weight of the class's own it computes
    with, "forward": the ``self.X`` holding nested FSDP units it runs, "line": its ``def``}},
    for the methods that do either.  Read only when a rule asks (``ProjectView.class_method``:
    FSD105 and FSD104, for a model built from a class of another file and wrapped with
    FSDP1), never by the gate; a file that builds no ``torch.nn`` layer or ``nn.Parameter``
    is not parsed, and only its classes that do are."""
    if "class " not in text or not _MODULE_TEXT.search(text):
        return {}
    tree = _ast_of(text)
    if tree is None:
        return {}
    try:
        kept_text = _blank_definitions(text, tree, lambda node, body: isinstance(node, ast.ClassDef)
                                       and bool(_MODULE_TEXT.search(body)))
        module = cst.parse_module(kept_text)
        facts = index_module(module)
        positions = Positions(module, line_starts(kept_text))
        found: Dict[str, dict] = {}
        for node in module.body:
            if not isinstance(node, cst.ClassDef):
                continue
            methods = {}
            for child in node.body.body:
                if not isinstance(child, cst.FunctionDef) or child.name.value.startswith("__") \
                        or child.name.value in torch_api.NN_MODULE_METHODS:
                    continue
                weight = uses_own_weights(facts, node, child.name.value)
                forward = runs_forward(facts, node, child.name.value)
                if weight is not None or forward is not None:
                    methods[child.name.value] = {"weight": weight, "forward": forward,
                                                 "line": positions(child.name).start.line}
            if methods:
                found[node.name.value] = methods
        return found
    except Exception:  # noqa: BLE001 - a file that does not parse (or a bug here): nothing known, never a finding
        return {}


def returned_dtypes_of_text(text: str) -> Dict[str, list]:
    """A file's top-level functions that return a module made in a known dtype
    (``facts.dtypes.returned_in``: ``return AutoModel.from_pretrained(name,
    torch_dtype=torch.bfloat16)``): function name -> [dtype, line].  Read only when a rule
    asks (``ProjectView.returned_dtype``: FSD113, for a model a project function makes), never
    by the gate; a file naming no low-precision dtype, or with no function that returns a
    value and loads or casts with one, is not parsed."""
    if not _LOW_PRECISION_WORDS.search(text):
        return {}
    tree = _ast_of(text)
    if tree is None:
        return {}
    found = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and _may_return_in_dtype(n, text)}
    if not found:
        return {}
    kept = _with_what_they_name(tree, found)  # which ``returned_in`` may follow
    try:
        kept_text = _blank_definitions(text, tree, lambda node, body: node.name in kept)
        module = cst.parse_module(kept_text)
        facts = index_module(module)
        positions = Positions(module, line_starts(kept_text))
        dtypes: Dict[str, list] = {}
        for name in sorted(found):
            function = next((n for n in module.body if isinstance(n, cst.FunctionDef) and n.name.value == name), None)
            returned = returned_in(facts, function) if function is not None else None
            if returned is not None:
                dtypes[name] = [returned[0], positions(returned[1]).start.line]
        return dtypes
    except Exception:  # noqa: BLE001 - a file that does not parse (or a bug here): nothing known, never a finding
        return {}


def _may_return_in_dtype(function: ast.AST, text: str) -> bool:
    """The function returns a value and may make it in a low-precision dtype: it loads a
    model with a ``dtype``/``torch_dtype`` keyword (``from_pretrained``, ``from_config``),
    or casts (``.to``, ``.bfloat16``, ``.half``) and names a low-precision dtype itself."""
    returns = loads = casts = False
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and node.value is not None:
            returns = True
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("from_pretrained", "from_config") and any(
                    k.arg in ("dtype", "torch_dtype") for k in node.keywords):
                loads = True
            elif node.func.attr in ("to", "bfloat16", "half"):
                casts = True
    if not returns:
        return False
    return loads or casts and bool(_LOW_PRECISION_WORDS.search(ast.get_source_segment(text, function) or ""))


def _load_ties(text: str) -> Dict[str, list]:
    found = json.loads(text)
    if not isinstance(found, dict):
        raise ValueError("not a ties part")
    return found


def _load_names(text: str) -> dict:
    found = json.loads(text)
    if not isinstance(found, dict) or not isinstance(found.get("functions"), list) \
            or not isinstance(found.get("exports"), dict):
        raise ValueError("not a names part")
    return found


# a part of a file's index: (when unknown, computed from (path, text), read back, written)
_PARTS = {
    "names": ({"functions": [], "exports": {}},
              lambda path, text: summarized_names_of_text(text, os.path.basename(path) == "__init__.py"),
              _load_names, lambda names: json.dumps(names, sort_keys=True)),
    "summary": (EMPTY, lambda path, text: summarize_text(text, os.path.basename(path) == "__init__.py"),
                ModuleSummary.from_json, ModuleSummary.to_json),
    "ties": ({}, lambda path, text: class_ties_of_text(text), _load_ties, lambda ties: json.dumps(ties, sort_keys=True)),
    "dtypes": ({}, lambda path, text: returned_dtypes_of_text(text), _load_ties,
               lambda dtypes: json.dumps(dtypes, sort_keys=True)),
    "classes": ({}, lambda path, text: class_methods_of_text(text), _load_ties,
                lambda classes: json.dumps(classes, sort_keys=True)),
}


def _occurs_twice(text: str, piece: str) -> bool:
    """``piece`` occurs at least twice in ``text`` (a name used beyond its import), found
    without counting every occurrence."""
    first = text.find(piece)
    return first >= 0 and text.find(piece, first + 1) >= 0


class ProjectIndex:
    """Summaries of a project's files, by content (one per process; its answers are shared by
    the files of a run).  ``cache_dir``: the result cache's folder (summaries go under
    ``project/``), None for memory only."""

    def __init__(self, cache_dir: Optional[str] = None, memo_seconds: Optional[float] = None) -> None:
        self.cache_dir = cache_dir
        # how long folders and files looked up are kept: a run's files do not change under it
        # (None: for the run); a long-lived index (the language server) passes MEMO_SECONDS
        self.memo_seconds = memo_seconds
        self._roots: Dict[str, Optional[str]] = {}
        # root -> (when read, file -> the files naming FSDP that import it)
        self._importers: Dict[str, Tuple[float, Dict[str, List[str]]]] = {}
        # (file, depth) -> (stat, its passed_arguments)
        self._passed: Dict[Tuple[str, int], Tuple[Tuple[int, int], List[dict]]] = {}
        self._digests: Dict[str, Tuple[Tuple[int, int], str]] = {}  # file -> (stat, sha256 of its bytes)
        # file -> (stat, its part): "summary" (``ModuleSummary``), "ties" (``class_ties_of_text``)
        self._parts: Dict[Tuple[str, str], Tuple[Tuple[int, int], object]] = {}
        self._exists: Dict[str, bool] = {}
        self._listings: Dict[str, FrozenSet[str]] = {}
        self._packages: Dict[str, str] = {}
        self._modules: Dict[Tuple[str, str, str], Optional[str]] = {}
        self._reach: Dict[str, Tuple[Tuple[int, int], FrozenSet[str]]] = {}
        # (folder of the importer, root, spec) -> (the helper ``resolved`` found, the module
        # file, the functions its summary may hold)
        self._resolved: Dict[Tuple[str, str, str], Tuple[Optional[Helper], Optional[str], Tuple[str, ...]]] = {}
        # (file, root) -> (its summary, its functions' ``Helper``s), while the summary stands
        self._module_helpers: Dict[Tuple[str, str], Tuple[ModuleSummary, Dict[str, Helper]]] = {}
        # file -> (a worker's answer to come: ``parts_in_worker``, how to wait for it): ``prefetch``
        self._pending: Dict[str, Tuple[object, Callable]] = {}
        self._since = time.monotonic()

    def __getstate__(self):  # workers start with empty memories
        return {"cache_dir": self.cache_dir, "memo_seconds": self.memo_seconds}

    def __setstate__(self, state) -> None:
        self.__init__(state.get("cache_dir"), state.get("memo_seconds"))

    def view(self, path: str) -> Optional["ProjectView"]:
        now = time.monotonic()
        if self.memo_seconds is not None and now - self._since > self.memo_seconds:  # a long-lived index sees new files
            self._roots.clear()
            self._exists.clear()
            self._listings.clear()
            self._packages.clear()
            self._modules.clear()
            self._reach.clear()
            self._resolved.clear()
            self._since = now
        path = os.path.abspath(path)
        folder = os.path.dirname(path)
        if folder not in self._roots:
            self._roots[folder] = project_root(path)
        root = self._roots[folder]
        if root is None:
            return None
        return ProjectView(self, path, root)

    # -- files and summaries ----------------------------------------------------------------
    def _has_entry(self, folder: str, name: str) -> bool:
        """``folder`` holds ``name.py`` or a folder ``name`` (one listing per folder)."""
        entries = self._listings.get(folder)
        if entries is None:
            try:
                entries = frozenset(os.listdir(folder))
            except OSError:
                entries = frozenset()
            self._listings[folder] = entries
        return name in entries or f"{name}.py" in entries

    def _is_file(self, path: str) -> bool:
        if path not in self._exists:
            self._exists[path] = os.path.isfile(path)
        return self._exists[path]

    def summary(self, path: str) -> ModuleSummary:
        return self._part(path, "summary")

    def ties(self, path: str) -> Dict[str, list]:
        return self._part(path, "ties")

    def _part(self, path: str, part: str):
        """A part of a file's index, computed once per content of the file (kept in memory
        by the file's stat, and on disk by a digest of its bytes)."""
        empty, compute, load, dump = _PARTS[part]
        try:
            stat = os.stat(path)
        except OSError:
            return empty
        key = (stat.st_mtime_ns, stat.st_size)
        memo = self._parts.get((path, part))
        if memo is not None and memo[0] == key:
            return memo[1]
        pending = self._pending.pop(path, None)
        if pending is not None:
            future, wait = pending
            try:
                answered = wait(future) or {}
            except Exception:  # noqa: BLE001 - the worker failed or its pool broke: computed here
                answered = {}
            for name, memo in answered.items():
                if memo[0] == key:
                    self._parts[(path, name)] = memo
            memo = self._parts.get((path, part))
            if memo is not None and memo[0] == key:
                return memo[1]
        found = empty if stat.st_size > MAX_BYTES else self._by_content(path, part, empty, compute, load, dump)
        self._parts[(path, part)] = (key, found)
        return found

    def _by_content(self, path: str, part: str, empty, compute, load, dump):
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_BYTES + 1)
        except OSError:
            return empty
        if len(raw) > MAX_BYTES:
            return empty
        digest = hashlib.sha256(f"{SUMMARY_VERSION}-{code_fingerprint()}-{part}".encode() + b"\0" + raw).hexdigest()
        stored = os.path.join(self.cache_dir, "project", digest + ".json") if self.cache_dir else None
        if stored is not None:
            try:
                with open(stored, encoding="utf-8") as handle:
                    return load(handle.read())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                pass  # a damaged or foreign file is a miss
        found = compute(path, raw.decode("utf-8", errors="replace"))
        if stored is not None:
            try:
                os.makedirs(os.path.dirname(stored), exist_ok=True)
                temporary = f"{stored}.{os.getpid()}.tmp"
                with open(temporary, "w", encoding="utf-8") as handle:
                    handle.write(dump(found))
                os.replace(temporary, stored)
            except OSError:
                pass
        return found

    def prefetch(self, paths, submit, wait) -> None:
        """Have other processes compute what the gate reads of ``paths`` (``submit(function,
        *args)`` gives a future, ``wait(future)`` its answer; ``parts_in_worker``) while this one
        goes on: a part asked for later (``_part``) waits for the answer instead of computing
        it again.  The command line, with workers, hands them the files its files import
        before linting them (``imported_modules``): computed in the main process one by one,
        they were most of the run on a large project that imports much (torch/)."""
        for path in paths:
            if path not in self._pending and (path, "names") not in self._parts:
                self._pending[path] = (submit(parts_in_worker, self.cache_dir, path), wait)

    def forget_pending(self) -> None:
        """Drop the answers still to come (their pool is gone): they are computed here if asked."""
        self._pending.clear()

    # -- imports ---------------------------------------------------------------------------
    def _package_top(self, folder: str, root: str) -> str:
        """The folder above the outermost package that holds ``folder`` (``__init__.py``s)."""
        if folder not in self._packages:
            top = folder
            while top != root and self._is_file(os.path.join(top, "__init__.py")):
                parent = os.path.dirname(top)
                if parent == top:
                    break
                top = parent
            self._packages[folder] = top
        return self._packages[folder]

    def module_file(self, importer: str, root: str, module: str) -> Optional[str]:
        """The project file of ``module`` (dotted, leading dots relative to ``importer``)."""
        key = (os.path.dirname(importer), root, module)
        if key not in self._modules:
            self._modules[key] = self._module_file(importer, root, module)
        return self._modules[key]

    def _module_file(self, importer: str, root: str, module: str) -> Optional[str]:
        level = len(module) - len(module.lstrip("."))
        parts = [p for p in module[level:].split(".") if p]
        if level:
            base = os.path.dirname(importer)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            bases = [base]
        else:
            if not parts:
                return None
            folder = os.path.dirname(importer)
            bases = list(dict.fromkeys([folder, self._package_top(folder, root), root, os.path.join(root, "src")]))
        for base in bases:
            if parts and not self._has_entry(base, parts[0]):
                continue  # no ``parts[0].py`` or ``parts[0]/`` there (``import torch`` in a project)
            stem = os.path.join(base, *parts) if parts else base
            for candidate in (stem + ".py", os.path.join(stem, "__init__.py")) if parts else (
                    os.path.join(stem, "__init__.py"),):
                if self._is_file(candidate):
                    candidate = os.path.normpath(candidate)
                    if candidate == root or candidate.startswith(root + os.sep):
                        return candidate
                    return None
        return None

    def _direct_imports(self, path: str, root: str) -> List[str]:
        """The project files ``path``'s import statements name (a module, or the module of
        an imported name), each once; read with ``ast`` (an import in a string or comment
        is none)."""
        try:
            if os.path.getsize(path) > MAX_BYTES:
                return []
            with open(path, "rb") as handle:
                tree = _ast_of(handle.read())
        except OSError:
            return []
        if tree is None:
            return []
        specs: List[Tuple[str, str]] = []  # (module, a name imported from it or "")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                specs += [(alias.name, "") for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                specs += [(module, alias.name) for alias in node.names if alias.name != "*"] or [(module, "")]
        found: List[str] = []
        for module, name in specs:
            candidates = []
            if name:
                candidates.append(f"{module}{name}" if module.endswith(".") else f"{module}.{name}")
            if module.strip("."):
                candidates.append(module)
            target = self._first_module_file(path, root, candidates)
            if target is not None and target != path:
                found.append(target)
        return list(dict.fromkeys(found))

    def _first_module_file(self, importer: str, root: str, candidates) -> Optional[str]:
        """The project file of the first of ``candidates`` (dotted modules, the imported name
        first: ``from a import b`` may import the module ``a.b`` or a name of ``a``) that is one."""
        for candidate in candidates:
            target = self.module_file(importer, root, candidate)
            if target is not None:
                return target
        return None

    def imported_files(self, script: str) -> FrozenSet[str]:
        """The project files a script imports, and what they import, ``MAX_REACH_DEPTH``
        files deep and ``MAX_REACH_FILES`` at most (imports read as ``_import_bindings`` reads
        them: a plain scan, also imports inside functions).  A launch of the script runs them
        in its processes (``launch.ProjectLaunches.for_file``)."""
        script = os.path.abspath(script)
        try:
            stat = os.stat(script)
        except OSError:
            return frozenset()
        key = (stat.st_mtime_ns, stat.st_size)
        memo = self._reach.get(script)
        if memo is not None and memo[0] == key:
            return memo[1]
        root = project_root(script)
        seen: Dict[str, None] = {}
        if root is not None:
            layer = [script]
            for _ in range(MAX_REACH_DEPTH):
                following = []
                for path in layer:
                    for target in self._direct_imports(path, root):
                        if target not in seen and target != script and len(seen) < MAX_REACH_FILES:
                            seen[target] = None
                            following.append(target)
                layer = following
        found = frozenset(seen)
        self._reach[script] = (key, found)
        return found

    def digest(self, path: str) -> str:
        """The sha256 of a file's bytes ("unreadable" when it cannot be read), by its stat:
        each importer is read once however many files it imports (``ProjectView.tag``)."""
        try:
            stat = os.stat(path)
        except OSError:
            return "unreadable"
        key = (stat.st_mtime_ns, stat.st_size)
        memo = self._digests.get(path)
        if memo is None or memo[0] != key:
            try:
                with open(path, "rb") as handle:
                    memo = self._digests[path] = (key, hashlib.sha256(handle.read()).hexdigest())
            except OSError:
                return "unreadable"
        return memo[1]

    # -- who passes FSDP modules to a file's functions -----------------------------------------
    def importers(self, path: str, root: str) -> List[str]:
        """The project files that import ``path`` and name FSDP (``_FILE_WIDE``: they may
        wrap a module and pass it on); read once per root, ``MAX_PROJECT_FILES`` at most."""
        now = time.monotonic()
        memo = self._importers.get(root)
        if memo is None or now - memo[0] > IMPORTERS_SECONDS:  # a long-lived index sees new importers
            memo = self._importers[root] = (now, self._reverse_imports(root))
        return memo[1].get(os.path.normpath(path), [])

    def _reverse_imports(self, root: str) -> Dict[str, List[str]]:
        found: Dict[str, List[str]] = {}
        seen = 0
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                seen += 1
                if seen > MAX_PROJECT_FILES:
                    return found
                path = os.path.normpath(os.path.join(folder, name))
                try:
                    if os.path.getsize(path) > MAX_BYTES:
                        continue
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        text = handle.read()
                except OSError:
                    continue
                if not _FILE_WIDE.search(text):
                    continue
                targets = []
                for _, spec in _import_bindings(text):  # a plain scan: an import in a string only costs a look
                    module = spec.rpartition(".")[0] if not spec.endswith(".") else ""
                    target = self._first_module_file(path, root, [c for c in (spec, module) if c.strip(".")])
                    if target is not None:
                        targets.append(os.path.normpath(target))
                for target in dict.fromkeys(targets):
                    if target != path:
                        found.setdefault(target, []).append(path)
        return found

    def passed(self, importer: str, root: str, depth: int = 1) -> List[dict]:
        """``facts.passed_arguments`` of ``importer``, each record with the ``target`` file and
        the ``name`` of the function it calls, and its ``place``; by the file's stat.
        ``depth``: the importer's own parameters are read through ``depth - 1`` more levels
        of importers (``model_params.py`` passes on ``_to is None``, where ``_to`` is what
        ``trainer.py`` passes it)."""
        try:
            stat = os.stat(importer)
        except OSError:
            return []
        key = (stat.st_mtime_ns, stat.st_size)
        memo = self._passed.get((importer, depth))
        if memo is not None and memo[0] == key:
            return memo[1]
        records: List[dict] = []
        try:
            with open(importer, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            module = cst.parse_module(text)
            facts = index_module(module)
            facts.project = ProjectView(self, importer, root, callers=depth - 1)
            positions = Positions(module, line_starts(text))

            def target_of(spec: str) -> Optional[str]:
                module_name, _, name = spec.rpartition(".")
                return self.module_file(importer, root, module_name) if module_name and name else None

            for record in passed_arguments(facts, lambda node: positions(node).start.line,
                                           lambda spec: target_of(spec) is not None):
                name = record["spec"].rpartition(".")[2]
                if "method" in record:
                    name = f"{name}.{record['method']}"  # a method of the project class
                target = target_of(record["spec"])
                place = f"{os.path.relpath(importer, root)}:{record['line']}"
                for data in record["args"].values():  # where a module passed was made in its dtype
                    made = data.get("dtype")
                    if made is not None:
                        at = f"{os.path.relpath(importer, root)}:{made[2]}" if made[2] is not None else place
                        data["dtype"] = [made[0], made[1], at]
                records.append({**record, "target": os.path.normpath(target), "name": name, "place": place})
        except Exception:  # noqa: BLE001 - a file that does not parse (or a bug here): it passes nothing known
            records = []
        self._passed[(importer, depth)] = (key, records)
        return records

    def _defined(self, importer: str, root: str, spec: str, part: str, depth: int = 0) -> Optional[Tuple[str, object]]:
        """(file, entry) of what ``spec`` names in ``importer`` in the ``part`` of its file's
        index ("functions" of its summary, its "ties", "dtypes" or "classes"), following a package
        ``__init__``'s re-exports."""
        level = len(spec) - len(spec.lstrip("."))
        inner, _, name = spec[level:].rpartition(".")
        module = "." * level + inner
        if not name or not module:
            return None
        path = self.module_file(importer, root, module)
        if path is None:
            return None
        names = self._part(path, "names")
        if part != "functions":
            entry = self._part(path, part).get(name)
        else:  # the summary only where it may hold the function
            entry = self.summary(path).functions.get(name) if name in names["functions"] else None
        if entry is not None:
            return path, entry
        if depth < MAX_REEXPORT_DEPTH and os.path.basename(path) == "__init__.py":
            target = names["exports"].get(name)
            if target is not None:
                return self._defined(path, root, target, part, depth + 1)
        return None

    def helper(self, importer: str, root: str, spec: str) -> Optional[Tuple[str, Helper]]:
        """(file, summary) of the project function ``spec`` names in ``importer``."""
        found = self._defined(importer, root, spec, "functions")
        return (found[0], Helper.from_json(found[1], os.path.relpath(found[0], root))) if found is not None else None

    def class_ties(self, importer: str, root: str, spec: str) -> Optional[Tuple[str, list]]:
        """(file, ties) of the project class ``spec`` names in ``importer`` (``class_ties_of_text``)."""
        return self._defined(importer, root, spec, "ties")

    def class_methods(self, importer: str, root: str, spec: str) -> Optional[Tuple[str, dict]]:
        """(file, {method: what it does}) of the project class ``spec`` names in ``importer``
        (``class_methods_of_text``)."""
        return self._defined(importer, root, spec, "classes")

    def returned_dtype(self, importer: str, root: str, spec: str) -> Optional[Tuple[str, list]]:
        """(file, [dtype, line]) of the project function ``spec`` names in ``importer`` when it
        returns a module made in that dtype (``returned_dtypes_of_text``)."""
        return self._defined(importer, root, spec, "dtypes")

    def resolved(self, importer: str, root: str, spec: str, text: str) -> Tuple[Optional[Helper], Dict[str, Helper]]:
        """(the project function ``spec`` names, the functions of the project module it
        names) as ``importer``'s imports see them: what ``ProjectView.imported_helpers`` reads
        for every import of every file, looked up once per folder (an import resolves the
        same from every file of a folder) and kept as the index keeps its other lookups (for
        the run; a long-lived index reads them again after ``memo_seconds``).  The module's
        functions only where ``text`` (the importer's) names one its summary may hold
        (``summarized_names_of_text``): a call of one through the module writes ``.name``;
        {} otherwise, and the module is not summarized."""
        key = (os.path.dirname(importer), root, spec)
        found = self._resolved.get(key)
        if found is None:
            helper = self.helper(importer, root, spec)
            path = self.module_file(importer, root, spec)
            names = tuple(self._part(path, "names")["functions"]) if path is not None else ()
            found = (helper[1] if helper is not None else None, path, names)
            self._resolved[key] = found
        helper, path, names = found
        if path is None or not any("." + name in text for name in names):
            return helper, {}
        return helper, self.module_helpers(path, root)

    def module_helpers(self, path: str, root: str) -> Dict[str, Helper]:
        """The summaries of the functions of the project file ``path``."""
        summary = self.summary(path)
        memo = self._module_helpers.get((path, root))
        if memo is None or memo[0] is not summary:
            relative = os.path.relpath(path, root)
            memo = (summary, {name: Helper.from_json(data, relative) for name, data in summary.functions.items()})
            self._module_helpers[(path, root)] = memo
        return memo[1]


def parts_in_worker(cache_dir: Optional[str], path: str) -> Dict[str, tuple]:
    """A worker's part of ``ProjectIndex.prefetch``: part -> (the file's stat key, that part)
    for the file's "names" and, where those name a function a summary may hold, its
    "summary" (the gate reads it where an importer calls one); {} where it cannot be read."""
    index = ProjectIndex(cache_dir)
    if index._part(path, "names")["functions"]:
        index.summary(path)
    return {part: memo for (_, part), memo in index._parts.items()}


# the parts of a file's index read only when a rule asks (not by the gate): a cached
# result's tag holds what they answer for the file's imports (``imported_answers``)
_ASKED_PARTS = ("dtypes", "classes")
# the gate's kind of a name imported from a project file that no helper summary covers
IMPORTED = frozenset({"imported"})


# how many levels of importers a file's view reads for what is passed to its functions
CALLER_DEPTH = 2


class ProjectView:
    """The project as one file sees it (``ModuleFacts.project``)."""

    def __init__(self, index: ProjectIndex, path: str, root: str, callers: int = CALLER_DEPTH) -> None:
        self.index = index
        self.path = path
        self.root = root
        # how many levels of importers it reads for what other files pass to this one's
        # functions (one less while a caller's own records are computed: a module importing
        # it back ends the chain instead of cycling; 0: none)
        self.callers = callers
        self._helpers: Dict[str, Optional[Helper]] = {}
        self._scans: Dict[str, Dict[str, Helper]] = {}
        self._bindings: Dict[str, List[Tuple[str, str]]] = {}
        # what starts this file when known and not an FSDP launch (``launch.Launcher``):
        # accelerate's plugin then reads no launcher settings (``facts.frameworks``)
        self.launcher = None

    def helper(self, spec: str) -> Optional[Helper]:
        if spec not in self._helpers:
            found = self.index.helper(self.path, self.root, spec)
            self._helpers[spec] = found[1] if found is not None else None
        return self._helpers[spec]

    def class_ties(self, spec: str) -> List[Tuple[str, str, str]]:
        """(first path, second path, place) of each tie every instance of the project class
        ``spec`` makes (``self.output.weight = self.embedding.weight`` in its ``__init__``)."""
        found = self.index.class_ties(self.path, self.root, spec)
        if found is None:
            return []
        place = os.path.relpath(found[0], self.root)
        return [(first, second, f"{place}:{line}") for first, second, line in found[1]]

    def class_method(self, spec: str, method: str) -> Optional[Tuple[dict, str]]:
        """(what the method does: ``class_methods_of_text``'s entry, ``file:line`` of the
        method) for the method ``method`` of the project class ``spec``."""
        found = self.index.class_methods(self.path, self.root, spec)
        if found is None or method not in found[1]:
            return None
        entry = found[1][method]
        return entry, f"{os.path.relpath(found[0], self.root)}:{entry.get('line')}"

    def returned_dtype(self, spec: str) -> Optional[Tuple[str, str]]:
        """(dtype, ``file:line`` where it is made) when the project function ``spec`` returns a
        module made in a known dtype."""
        found = self.index.returned_dtype(self.path, self.root, spec)
        if found is None:
            return None
        dtype, line = found[1]
        return dtype, f"{os.path.relpath(found[0], self.root)}:{line}"

    def imported_answers(self, text: str) -> List[str]:
        """What ``returned_dtype`` and ``class_method`` can answer for ``text``'s
        imports (a cached result's tag): ``part:bound=answer`` for each imported function or
        class, and each function or class of an imported module, the "dtypes" or "classes"
        part of its file holds."""
        found = []
        for bound, spec in self._used_bindings(text):
            path = self.index.module_file(self.path, self.root, spec)
            for part in _ASKED_PARTS:
                answer = self.index._defined(self.path, self.root, spec, part)
                if answer is not None:
                    found.append(f"{part}:{bound}={os.path.relpath(answer[0], self.root)}:{json.dumps(answer[1])}")
                if path is not None:
                    relative = os.path.relpath(path, self.root)
                    found += [f"{part}:{bound}.{name}={relative}:{json.dumps(entry)}"
                              for name, entry in sorted(self.index._part(path, part).items())]
        return sorted(found)

    def imported_modules(self, text: str) -> List[str]:
        """The project files whose summaries ``imported_helpers`` reads first for ``text``: of
        each import, the module it names and the module of the name it imports (a package's
        re-exports are followed when they are read)."""
        found: Dict[str, None] = {}
        for _, spec in _import_bindings(text):
            level = len(spec) - len(spec.lstrip("."))
            for module in (spec, "." * level + spec[level:].rpartition(".")[0]):
                if module.strip("."):
                    path = self.index.module_file(self.path, self.root, module)
                    if path is not None:
                        found[path] = None
        return list(found)

    def _used_bindings(self, text: str) -> List[Tuple[str, str]]:
        """(bound name, what it names) of each import of ``text`` whose name occurs again
        (a name only imported is never called), once per text."""
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        found = self._bindings.get(key)
        if found is None:
            found = self._bindings[key] = [(b, spec) for b, spec in _import_bindings(text) if _occurs_twice(text, b)]
        return found

    def imported_helpers(self, text: str) -> Dict[str, Helper]:
        """Local dotted name (as a call writes it) -> the summary of the project helper it
        calls, for every import statement of ``text`` (functions, and the functions of
        imported project modules)."""
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        if key not in self._scans:
            found: Dict[str, Helper] = {}
            for bound, spec in self._used_bindings(text):
                helper, inner_helpers = self.index.resolved(self.path, self.root, spec, text)
                if helper is None and not inner_helpers:
                    continue  # nothing there
                if helper is not None:
                    found[bound] = helper
                for name, inner in inner_helpers.items():
                    found[f"{bound}.{name}"] = inner
            self._scans[key] = found
        return self._scans[key]

    def passed(self, function: str, params: Tuple[str, ...], param: str,
               through: FrozenSet[str] = frozenset()) -> List[ExternalWrap]:
        """The FSDP modules calls in other project files pass for ``param`` of this file's
        top-level function ``function``, or method ``Class.method`` (``facts.passed_arguments``).
        ``through``: the methods of the class the value went through on its way here
        (``self.train_loop(model)`` in ``fit``): a call on an instance of a subclass that
        overrides one of them runs that subclass's own, and says nothing here."""
        if not self.callers:
            return []
        return external_wraps([r for r in self._passed_records() if r["name"] == function
                               and through.isdisjoint(r.get("overrides", ()))], params, param)

    def arguments(self, function: str, params: Tuple[str, ...], param: str) -> List[Optional[dict]]:
        """Per call in another project file of this file's top-level function (or class)
        ``function``: what that file knows of the argument it passes for ``param``
        (``passed_arguments.argument_records``; ``facts.callers``)."""
        if not self.callers:
            return []
        return argument_records([r for r in self._passed_records() if r["name"] == function], params, param)

    def _passed_records(self) -> List[dict]:
        """The records of calls of this file's functions that pass FSDP modules."""
        path = os.path.normpath(self.path)
        return [r for importer in self.index.importers(path, self.root)
                for r in self.index.passed(importer, self.root, self.callers) if r["target"] == path]

    def _importers_within(self, depth: int) -> List[str]:
        """The files whose records this view may read: importers of this file, and of
        those, up to ``depth`` levels."""
        found: List[str] = []
        level = [os.path.normpath(self.path)]
        for _ in range(max(depth, 0)):
            level = [i for path in level for i in self.index.importers(path, self.root) if i not in found]
            level = list(dict.fromkeys(level))
            found.extend(level)
        return found

    def gate_kinds(self, text: str) -> Dict[str, FrozenSet[str]]:
        """What the gate reads: local dotted name -> what the helper does ("collective",
        "shards", "saves"), for helpers whose name the text uses beyond its import;
        ``IMPORTED`` ("imported") for the other names of project files it imports and uses
        (a class of another file among them: ``ProjectView.class_method``); and
        under ``PASSED``, "wraps" when a project file that names FSDP imports this one (it
        may pass an FSDP module to one of its functions: ``passed``, which reads whether
        it does; the gate's "fsdp1_passed" fact)."""
        found = {}
        if self.callers and "def " in text and self.index.importers(os.path.normpath(self.path), self.root):
            found[PASSED] = frozenset({"wraps"})
        for name, helper in self.imported_helpers(text).items():
            if helper.kinds and _occurs_twice(text, name.rsplit(".", 1)[-1]):
                found[name] = frozenset(helper.kinds)
        for bound, spec in self._used_bindings(text):
            if bound not in found and self._names_project_file(spec):
                found[bound] = IMPORTED
        return found

    def _names_project_file(self, spec: str) -> bool:
        """``spec`` (what an import binds) is a module of the project or a name in one."""
        level = len(spec) - len(spec.lstrip("."))
        parent = "." * level + spec[level:].rpartition(".")[0]
        return any(m.strip(".") and self.index.module_file(self.path, self.root, m) is not None for m in (spec, parent))

    def tag(self, text: str) -> str:
        """What a cached result of this file depends on in other files: the summaries of
        the helpers it imports, what its imported functions return and its imported classes'
        methods use (``imported_answers``), and the contents of the files that import it and may pass
        it FSDP modules or values made on one rank."""
        helpers = self.imported_helpers(text)
        importers = self._importers_within(self.callers)
        answers = self.imported_answers(text)
        if not helpers and self.launcher is None and not importers and not answers:
            return ""
        pieces = sorted(f"{name}={json.dumps(h.to_json(), sort_keys=True)}" for name, h in helpers.items())
        pieces += answers
        pieces += [f"importer={importer}|{self.index.digest(importer)}" for importer in importers]
        if self.launcher is not None:
            pieces.append(f"launcher={self.launcher.name}|{self.launcher.source}")
        return "project=" + hashlib.sha256("\n".join(pieces).encode()).hexdigest()
