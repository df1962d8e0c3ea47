"""Linting one file's text: pre-filter, one libcst parse, one traversal, all rules.

    text -> markers pre-filter -> ``ast`` screen (which rules can fire, and where;
         ``screen``) -> slice (large files: the top-level statements holding the
         candidate sites and what the facts read for them; ``slicing``) -> libcst parse
         -> facts.index (one traversal) -> each rule's check (queries the shared facts)
         -> positions (only when a rule reported something; mapped back from the slice)
         -> suppression -> diagnostics

Fixes are turned into minimal text edits here; applying them is ``fixer``'s job.
"""

from __future__ import annotations

import ast
import os
import re
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple, Type

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.diagnostics import (
    INTERNAL_ERROR, IO_ERROR, SAFE, SYNTAX_ERROR, UNUSED_NOQA, Diagnostic, Edit, Fix, Location, error_diagnostic,
)
from fsdp_lint.facts.index import index_module
from fsdp_lint.noqa import Suppressions, without_codes
from fsdp_lint.positions import Positions
from fsdp_lint.rules import BY_CODE
from fsdp_lint.rules.base import Reporter, Rule
from fsdp_lint.screen import Screening, ast_confirms  # noqa: F401 - ast_confirms: callers ask the engine
from fsdp_lint.slicing import MAX_SHARE, MIN_CHARS, slice_text
from fsdp_lint.source import line_starts

_FSD_CODE = re.compile(r"^FSD[0-9]{3}$", re.I)
REPORT_URL = "https://github.com/fsdp-lint/fsdp-lint/issues"
# Large files are sliced (``fsdp_lint.slicing``): libcst parses the statements holding the
# screen's candidate sites and what the facts read for them.  FSDP_LINT_SLICE=0 (or off)
# parses every file whole; FSDP_LINT_SLICE=all slices files of any size (tests and
# benchmarks only).
_SLICE_MODE = os.environ.get("FSDP_LINT_SLICE", "on")
# The gate in front of libcst (text markers, the ``ast`` screen, slicing) only ever skips
# work that could not change a finding.  FSDP_LINT_GATE=0 (or off/false/no) turns the
# whole gate off: every selected rule's full analysis runs on every whole file.  Slower,
# never different; ``tests/test_gate.py`` compares the two through the command line.
GATE_ENV = "FSDP_LINT_GATE"


def gate_on() -> bool:
    """Whether the gate runs (read on every call: the switch holds in workers and tests)."""
    return os.environ.get(GATE_ENV, "on").strip().lower() not in ("0", "off", "false", "no")


@dataclass
class LintResult:
    diagnostics: List[Diagnostic] = field(default_factory=list)
    parsed: bool = False  # libcst parsed the text (False: skipped or a syntax error)
    # findings a noqa comment suppressed: (code, name, first row, last row)
    suppressed: List[Tuple[str, str, int, int]] = field(default_factory=list)


_GATES: dict = {}


def _gate(rules: Sequence[Type[Rule]]):
    """Strings one of which every file wanted by some of ``rules`` contains: from each
    rule, its first marker group, or a later one whose shortest marker is longer (rarer:
    ``FullyShardedDataParallel`` rather than ``to``); a string containing another is left
    out.  A marker that counts only where its pattern matches too (``Rule.marker_needs``:
    FSD104's ``evaluate`` where the text shows FSDP and transformers) is kept apart with
    that pattern.  Returns (the strings, factored; the (marker, pattern) pairs), or None
    when a rule has no markers (every file is wanted)."""
    key = tuple(rules)  # the classes: a test's variant of a rule keeps its code
    if key not in _GATES:
        strings = set()
        needs = []
        for rule in rules:
            if not rule.markers:
                _GATES[key] = None
                return None
            group = rule.markers[0]
            for other in rule.markers[1:]:
                if min(map(len, other)) > min(map(len, group)):
                    group = other
            for marker in group:
                need = rule.marker_needs.get(marker) if group is rule.markers[0] else None
                if need is None:
                    strings.add(marker)
                else:
                    needs.append((marker, need))
        needs = [(m, p) for m, p in needs if not any(o in m for o in strings)]
        _GATES[key] = (_factored(sorted(m for m in strings if not any(o != m and o in m for o in strings))),
                       tuple(needs))
    return _GATES[key]


def _factored(strings: List[str], width: int = 10) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    """The gate as (key, strings that contain it) pairs: a piece several strings share is
    searched once (``state_dict`` for the seven ``*state_dict`` markers)."""
    groups = []
    left = list(strings)
    while True:
        counts: dict = {}
        for string in left:
            for piece in {string[i : i + width] for i in range(len(string) - width + 1)}:
                counts[piece] = counts.get(piece, 0) + 1
        piece, count = max(counts.items(), key=lambda item: (item[1], item[0]), default=("", 0))
        if count < 3:
            break
        groups.append((piece, tuple(m for m in left if piece in m)))
        left = [m for m in left if piece not in m]
    return tuple(groups) + tuple((m, (m,)) for m in left)


def project_kinds(project, text: str) -> Dict[str, FrozenSet[str]]:
    """What the project helpers the file calls do (``ProjectView.gate_kinds``), by the
    dotted name a call writes; {} without a project."""
    return project.gate_kinds(text) if project is not None else {}


def wanted_rules(text: str, rules: Sequence[Type[Rule]], launch=None, project=None,
                 kinds: Optional[Dict[str, FrozenSet[str]]] = None) -> List[Type[Rule]]:
    """Stage 1: the rules whose text markers all occur in the file (most files contain
    none of the gate's strings and are settled by them alone), and those a project helper
    the file calls concerns (``Rule.project_kinds``, read off the project index).  Every
    rule with the gate off (``gate_on``).  ``kinds``: ``project_kinds`` where the caller has them."""
    if not gate_on():
        return list(rules)
    kinds = frozenset().union(*(project_kinds(project, text) if kinds is None else kinds).values())
    kinds &= frozenset().union(*(rule.project_kinds for rule in rules))  # those that wake a rule
    gate = _gate(rules)
    if not kinds and gate is not None and not (launch is not None and any(rule.launch_markers for rule in rules)) \
            and not _passes(gate, text, launch is not None):
        return []  # (a launched file may be wanted by a rule's ``launch_markers`` alone)
    return [rule for rule in rules if rule.wanted(text, launch is not None) or not kinds.isdisjoint(rule.project_kinds)]


def names_a_topic(text: str, rules: Sequence[Type[Rule]]) -> bool:
    """Whether ``text`` passes the marker stage's first test: it names something one of
    ``rules`` is about (one of the gate's strings), though perhaps no rule's every marker
    group.  Such a file is parsed when CPython cannot parse it, so that it gets FSD900; a
    file naming no topic is never parsed and so never reported (ruff reports those)."""
    if not gate_on():
        return True
    gate = _gate(rules)
    return gate is None or _passes(gate, text, False)


def _passes(gate, text: str, launched: bool) -> bool:
    """``text`` holds one of the gate's strings, or a marker kept apart whose pattern
    matches too (or whose file is launched: a launch may meet the need, ``Rule.wanted``)."""
    strings, needs = gate
    return any(key in text and any(m in text for m in group) for key, group in strings) or any(
        marker in text and (launched or need.search(text)) for marker, need in needs)


class FileGate:
    """The gate's stages for one text, each run at most once however many callers ask
    (``check.cheap_answer``, then ``lint_text_sliced`` and the fixer's first lint): the
    markers, the ``ast`` stage (``screen.Screening``: one parse, one summary) and the
    cache key with whether it was already looked up.  ``for_text`` hands back a gate only
    for the very text, rules and launch it was made for."""

    def __init__(
        self, text: str, rules: Sequence[Type[Rule]], launch=None, tree: Optional[ast.Module] = None, project=None
    ) -> None:
        self.text = text
        self._tree = tree  # the caller's ``ast`` of ``text`` (flake8 hands one over)
        self.rules = list(rules)
        self.launch = launch
        self.project = project  # ``fsdp_lint.project.ProjectView`` or None
        self._project_sent = False  # unpickled in a worker: the worker's view stands in
        self.gated = gate_on()
        # what the project helpers the file calls do, read once: a worker gets them with the
        # gate and does not summarize the project's files again
        self.kinds = project_kinds(project, text) if self.gated else {}
        self.wanted = wanted_rules(text, self.rules, launch, project, self.kinds)
        self._topic: Optional[bool] = None
        self._screening: Optional[Screening] = None
        self.cache_key: Optional[str] = None
        self.cache_missed = False  # the cache was asked for ``cache_key`` and had nothing

    @classmethod
    def for_text(
        cls, text: str, rules: Sequence[Type[Rule]], launch=None, known: Optional["FileGate"] = None, project=None
    ) -> "FileGate":
        rules = list(rules)
        if known is not None and known.text is text and known.launch == launch and (
            known.project is project or known._project_sent
        ):
            if known._project_sent:
                known.project, known._project_sent = project, False
            if known.rules == rules:
                return known
            if known.rules == [rule.code for rule in rules]:  # sent to a worker: rebind the codes
                by_code = {rule.code: rule for rule in rules}
                known.rules, known.wanted = rules, [by_code[code] for code in known.wanted]
                return known
        return cls(text, rules, launch, project=project)

    @property
    def topic(self) -> bool:
        """``names_a_topic``."""
        if self._topic is None:
            self._topic = bool(self.wanted) or names_a_topic(self.text, self.rules)
        return self._topic

    @property
    def screening(self) -> Screening:
        if self._screening is None:
            self._screening = Screening(self.text, self.wanted, self._tree, self.kinds,
                                        self.launch is not None)
        return self._screening

    def __getstate__(self):
        # a worker gets the markers' answer and the cache key, not the main process's trees
        # (and the rules by code: a worker's rule classes are its own, ``Settings.rules_for``)
        state = dict(self.__dict__)
        state["_screening"] = state["_tree"] = state["project"] = None
        state["_project_sent"] = self.project is not None
        state["rules"] = [rule.code for rule in self.rules]
        state["wanted"] = [rule.code for rule in self.wanted]
        return state


def cpython_syntax_error(text: str) -> Optional[SyntaxError]:
    """CPython's own SyntaxError for ``text`` (``ast.parse``), or None where it parses (or
    fails for another reason: null bytes, too deep for the stack).  ``compile`` asks first:
    it parses the same way without making ``ast``'s Python objects (about a fifth of the
    time), and what compiles also parses; where it fails (it also refuses some code the
    parser accepts, ``return`` outside a function), ``ast.parse`` answers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(text, "<fsdp-lint>", "exec", dont_inherit=True)
            return None
        except Exception:  # noqa: BLE001 - any failure: the parser's own answer below
            pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError, OverflowError):
        return None
    return None


MAX_NESTING = 200  # CPython's own limit on nested brackets ("too many nested parentheses")
_NOT_BRACKETS = re.compile(r"[^()\[\]{}]+")


def _too_deeply_nested(text: str) -> bool:
    """libcst's native parser can overflow the C stack on pathological nesting (a crash,
    not an exception).  CPython refuses more than 200 nested brackets, so such a file is
    not valid Python anyway.  The bracket scan over-estimates (brackets in strings count),
    so ``ast`` confirms before the file is refused."""
    depth = deepest = 0
    for char in _NOT_BRACKETS.sub("", text):
        depth = depth + 1 if char in "([{" else max(0, depth - 1)
        if depth > deepest:
            deepest = depth
    if deepest <= MAX_NESTING:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except SyntaxError as exc:
        return "nested" in str(exc)
    except (RecursionError, MemoryError):
        return True
    except ValueError:
        return False
    return False


def _parse(text: str, filename: str, parser=None):
    if _too_deeply_nested(text):
        return None, error_diagnostic(
            SYNTAX_ERROR,
            filename,
            f"more than {MAX_NESTING} nested brackets (CPython refuses them too), file not checked",
        )
    try:
        return (parser or cst.parse_module)(text), None
    except cst.ParserSyntaxError as exc:
        row, column = exc.raw_line, exc.raw_column + 1
        message = f"syntax error, file not checked: {exc.message}"
        error = error_diagnostic(SYNTAX_ERROR, filename, message, row, column)
    except RecursionError:
        error = error_diagnostic(SYNTAX_ERROR, filename, "file too deeply nested for the parser, file not checked")
    except Exception as exc:  # noqa: BLE001 - libcst's own limits (e.g. unsupported syntax)
        error = error_diagnostic(
            SYNTAX_ERROR, filename, f"libcst cannot parse this file ({type(exc).__name__}: {exc})"
        )
    return None, _cpython_error(text, filename) or error


def _cpython_error(text: str, filename: str) -> Optional[Diagnostic]:
    """The FSD900 users see from ``python file.py``: CPython's message, line and column
    (libcst's are kept only where CPython parses the file)."""
    exc = cpython_syntax_error(text)
    if exc is None:
        return None
    row = exc.lineno or 1
    column = exc.offset if exc.offset and exc.offset > 0 else 1
    message = f"syntax error, file not checked: {exc.msg}"
    return error_diagnostic(SYNTAX_ERROR, filename, message, row, column)


_COMMENT = re.compile(r"#[^\r\n]*")


def _code(module, node, indent: str) -> str:
    """``node``'s code as it stands in the file: continuation lines of a multi-line call
    carry the indentation of the block the statement is in (``code_for_node`` alone
    renders them as if at module level)."""
    state = cst._nodes.internal.CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    if indent:
        state.indent_tokens.append(indent)
    node._codegen(state)
    return "".join(state.tokens)


def _deletion(positions, text, node) -> Optional[Edit]:
    """Delete the whole lines of a simple statement (nothing else may share them)."""
    begin, end = positions.offsets(node)
    line_start = text.rfind("\n", 0, begin) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    if text[line_start:begin].strip() or text[end:line_end].strip() not in ("", "\\"):
        return None
    if _COMMENT.search(text[begin:line_end]):
        return None
    return Edit("", _location(positions, line_start), _location(positions, line_end), line_start, line_end)


def _fix_edits(module, positions, text, proposal, indent: str) -> Optional[Fix]:
    main = _replacement(module, positions, text, proposal.old, proposal.new, indent)
    if main is None:
        return None
    edits = [main]
    for old, new in proposal.also:
        if new is None:
            extra = _deletion(positions, text, old)
        else:
            line = text[text.rfind("\n", 0, positions.offsets(old)[0]) + 1:]
            extra = _replacement(module, positions, text, old, new, line[: len(line) - len(line.lstrip(" \t"))])
        if extra is None:
            return None  # all or nothing: a partial fix could leave the file wrong
        edits.append(extra)
    edits.sort(key=lambda e: e.start_offset)
    return Fix(proposal.applicability, proposal.message, tuple(edits))


def _replacement(module, positions, text, old, new, indent: str) -> Optional[Edit]:
    old_code = _code(module, old, indent)
    new_code = _code(module, new, indent)
    if sorted(_COMMENT.findall(old_code)) != sorted(_COMMENT.findall(new_code)):
        return None  # a fix that would drop or alter a comment is not offered: nothing the user wrote is lost
    begin, end = positions.offsets(old)
    if text[begin:end] != old_code:
        return None  # positions disagree with the text: never risk a wrong edit
    prefix = 0
    limit = min(len(old_code), len(new_code))
    while prefix < limit and old_code[prefix] == new_code[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < limit - prefix
        and old_code[len(old_code) - 1 - suffix] == new_code[len(new_code) - 1 - suffix]
    ):
        suffix += 1
    edit_start, edit_end = begin + prefix, end - suffix
    content = new_code[prefix : len(new_code) - suffix]
    return Edit(content, _location(positions, edit_start), _location(positions, edit_end), edit_start, edit_end)


def _location(positions, offset: int) -> Location:
    position = positions.position(offset)
    return Location(position.line, position.column + 1)


def _slice_from() -> Optional[int]:
    """The smallest text sliced (None: never), from the internal switch."""
    if _SLICE_MODE == "all":
        return 0
    if _SLICE_MODE == "on":
        return MIN_CHARS
    return None


def lint_text(
    text: str, filename: str, rules: Sequence[Type[Rule]], parser=None, launch=None, gate: Optional[FileGate] = None,
    unused_noqa: bool = False, project=None,
) -> LintResult:
    """``parser``: a stand-in for ``libcst.parse_module`` (same result, same errors); the
    language server passes one that re-parses only the statements an edit changed (its
    texts are parsed whole: no slicing).  ``launch``: how the project launches the file when
    that turns FSDP on (``fsdp_lint.launch``), None otherwise.  ``gate``: the text's
    ``FileGate`` when an earlier stage made one (its answers are not computed again).
    ``unused_noqa``: also report FSD800 (noqa codes of ``rules`` that suppressed nothing).
    ``project``: the project's other files as this one imports them
    (``fsdp_lint.project.ProjectView``), or None."""
    result = lint_text_sliced(
        text, filename, rules, None if parser is not None else _slice_from(), parser, launch, gate, project
    )
    if unused_noqa:
        result.diagnostics.extend(unused_noqa_diagnostics(text, filename, rules, result))
        result.diagnostics.sort(key=Diagnostic.sort_key)
    return result


def _known_code(code: str) -> bool:
    return code in BY_CODE


def has_fsd_noqa(text: str) -> bool:
    """Whether a noqa comment could name an FSD rule (the cheap test before FSD800)."""
    return "noqa" in text.lower() and bool(Suppressions(text).directives)


def unused_noqa_diagnostics(text: str, filename: str, rules: Sequence[Type[Rule]], result: LintResult) -> List[Diagnostic]:
    """FSD800: in each ``# noqa: CODES`` comment, the codes (or names) of selected rules
    that suppressed no finding of this run, and ``FSDnnn`` codes no rule has.  Codes of
    other tools (``F401``) and of rules not selected here are left alone (another run may
    select them); a file whose analysis did not finish (FSD900, FSD901) is not judged.
    The fix (safe) drops those codes, or the whole directive when none is left."""
    if any(d.code in (SYNTAX_ERROR[0], INTERNAL_ERROR[0]) for d in result.diagnostics):
        return []
    suppressions = Suppressions(text)
    if suppressions.whole_file or not suppressions.directives:
        return []
    for code, name, first, last in result.suppressed:
        suppressions.suppresses(code, name, first, last)
    selected = {}
    for rule in rules:
        selected[rule.code.upper()] = rule
        selected[rule.name.upper()] = rule
    known = {UNUSED_NOQA[0], UNUSED_NOQA[1].upper(), SYNTAX_ERROR[0], INTERNAL_ERROR[0], IO_ERROR[0]}
    starts = line_starts(text)
    out = []
    for row, directive in sorted(suppressions.directives.items()):
        unused, unknown = [], []
        for written in directive.codes:
            key = written.upper()
            if (row, key) in suppressions.used or key in known:
                continue
            if key in selected:
                unused.append(written)
            elif _FSD_CODE.match(key) and not _known_code(key):
                unknown.append(written)
        if not unused and not unknown:
            continue
        names = [UNUSED_NOQA[0], UNUSED_NOQA[1].upper()]
        if any(code.upper() in names for code in directive.codes):
            continue  # the comment suppresses FSD800 itself
        parts = []
        if unused:
            parts.append("unused: " + ", ".join(f"`{c}`" for c in unused))
        if unknown:
            parts.append("unknown: " + ", ".join(f"`{c}`" for c in unknown))
        start = starts[row - 1]
        end = starts[row] if row < len(starts) else len(text)
        line = text[start:end]
        body = line.rstrip("\r\n")
        fix = None
        change = without_codes(directive, unused + unknown)
        if change is not None:
            begin, finish, content = change
            new_body = body[:begin] + content + body[finish:]
            if not content:
                new_body = new_body.rstrip()
            edit = Edit(new_body, Location(row, 1), Location(row, len(body) + 1), start, start + len(body))
            fix = Fix(SAFE, "Remove the unused `noqa` code(s)", (edit,))
        loc = Location(row, directive.start + 1)
        out.append(
            Diagnostic(
                UNUSED_NOQA[0], UNUSED_NOQA[1], f"Unused `noqa` directive ({'; '.join(parts)})", filename,
                loc, Location(row, directive.end + 1), fix=fix, statement_rows=(row, row),
            )
        )
    return out


def lint_text_sliced(
    text: str, filename: str, rules: Sequence[Type[Rule]], slice_from: Optional[int], parser=None, launch=None,
    gate: Optional[FileGate] = None, project=None,
) -> LintResult:
    """``lint_text`` with the slicing threshold given: texts of at least ``slice_from``
    characters are sliced, None parses every text whole (the tests compare both)."""
    result = LintResult()
    gate = FileGate.for_text(text, rules, launch, gate, project)
    gated = gate.gated
    active = gate.wanted
    if not gate.topic:
        return result  # names nothing a rule is about: not parsed, never reported
    sites = None
    tree = None
    if gated:
        screening = gate.screening
        tree = screening.tree
        if tree is not None:  # where CPython cannot parse, libcst decides (FSD900, or newer syntax)
            active, sites = screening.live_and_sites()
            if not active:
                return result  # no selected rule can report anything here: libcst is not needed
    piece = None
    if gated and slice_from is not None and len(text) >= slice_from:
        piece = slice_text(text, active, slice_from, 1.0 if slice_from == 0 else MAX_SHARE, tree, sites)
    module, error = _parse(text if piece is None else piece.text, filename, parser)
    if error is not None and piece is not None:
        piece = None  # the error and its position come from the whole text, as without slicing
        module, error = _parse(text, filename, parser)
    if error is not None:
        result.diagnostics.append(error)
        return result
    result.parsed = True
    try:
        facts = index_module(module)
        facts.launch = launch
        facts.project = project
    except RecursionError:
        result.diagnostics.append(
            error_diagnostic(SYNTAX_ERROR, filename, "file too deeply nested to analyse, file not checked")
        )
        return result
    starts = line_starts(text)
    positions = Positions(module, starts, piece)
    reporter = Reporter(positions)
    owners = []
    for rule in active:
        before = len(reporter.findings)
        try:
            rule().check(facts, reporter)
        except Exception as exc:  # noqa: BLE001 - one rule's bug must not hide the others
            del reporter.findings[before:]
            where = traceback.extract_tb(exc.__traceback__)[-1]
            result.diagnostics.append(
                error_diagnostic(
                    INTERNAL_ERROR,
                    filename,
                    f"internal error in rule {rule.code} ({rule.name}): {type(exc).__name__}: {exc} "
                    f"at {where.filename}:{where.lineno}; please report it at {REPORT_URL}",
                )
            )
            continue
        owners.extend([rule] * (len(reporter.findings) - before))
    if not reporter.findings:
        return result
    suppressions = Suppressions(text)
    for rule, (node, message, proposal, statement) in zip(owners, reporter.findings):
        rng = positions(node)
        first = rng.start.line
        last = rng.end.line
        if statement is not None:
            srng = positions(statement)
            first = min(first, srng.start.line)
            if isinstance(statement, cst.SimpleStatementLine):
                last = max(last, srng.end.line)
        if suppressions.suppresses(rule.code, rule.name, first, last):
            result.suppressed.append((rule.code, rule.name, first, last))
            continue
        fix = None
        if proposal:
            line = text[starts[first - 1]:starts[first] if first < len(starts) else len(text)]
            indent = line[: len(line) - len(line.lstrip(" \t"))]
            fix = _fix_edits(module, positions, text, proposal, indent)
            if fix is not None and any(suppressions.marks_any(e.location.row, e.end_location.row) for e in fix.edits):
                fix = None  # a line with a suppression comment is never edited
        result.diagnostics.append(
            Diagnostic(
                code=rule.code,
                name=rule.name,
                message=message,
                filename=filename,
                location=Location(rng.start.line, rng.start.column + 1),
                end_location=Location(rng.end.line, rng.end.column + 1),
                fix=fix,
                url=rule.url(),
                statement_rows=(first, last),
            )
        )
    result.diagnostics.sort(key=Diagnostic.sort_key)
    return result
