"""Applying fixes to a file's text: non-overlapping edits, re-parse, re-lint, repeat.

The loop is bounded; a result that libcst cannot parse is never kept (the text stays as
it was before that round and the file gets a diagnostic).  Suppressed findings never
reach this module, so suppressed lines are never touched.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import List, Sequence, Tuple, Type

from fsdp_lint.lazy_libcst import cst

from fsdp_lint.diagnostics import INTERNAL_ERROR, SAFE, Diagnostic, Edit, apply_edits, error_diagnostic
from fsdp_lint.engine import LintResult, lint_text
from fsdp_lint.rules.base import Rule

MAX_ROUNDS = 10


@dataclass
class FixOutcome:
    text: str
    applied: int = 0  # fixes applied (one fix can settle several findings on the same code)
    diagnostics: List[Diagnostic] = field(default_factory=list)  # what remains
    initial: List[Diagnostic] = field(default_factory=list)  # the findings before fixing

    @property
    def resolved(self) -> int:
        """Findings the fixes made go away, counted per rule, so that found = resolved +
        remaining holds whatever the number of fixes it took."""
        before = Counter(d.code for d in self.initial)
        after = Counter(d.code for d in self.diagnostics)
        return sum(max(0, count - after[code]) for code, count in before.items())


def applicable(diagnostic: Diagnostic, unsafe: bool) -> bool:
    fix = diagnostic.fix
    return fix is not None and (fix.applicability == SAFE or unsafe)


def _non_overlapping(diagnostics: Sequence[Diagnostic], unsafe: bool) -> Tuple[List[Edit], int]:
    """The edits of the fixes that fit together in one round, and how many fixes they are."""
    chosen: List[Edit] = []
    fixes = 0
    taken: List[tuple] = []
    for diagnostic in diagnostics:
        if not applicable(diagnostic, unsafe):
            continue
        spans = [(e.start_offset, e.end_offset) for e in diagnostic.fix.edits]
        if any(s <= te and ts <= e for s, e in spans for ts, te in taken):
            continue  # overlaps (or touches) an edit already chosen: next round
        taken.extend(spans)
        chosen.extend(diagnostic.fix.edits)
        fixes += 1
    return chosen, fixes


def _parses(text: str) -> bool:
    try:
        cst.parse_module(text)
    except Exception:  # noqa: BLE001
        return False
    return True


def fix_text(
    text: str, filename: str, rules: Sequence[Type[Rule]], unsafe: bool = False, launch=None, gate=None,
    unused_noqa: bool = False, project=None,
) -> FixOutcome:
    outcome = FixOutcome(text)
    result: LintResult = lint_text(
        text, filename, rules, launch=launch, gate=gate, unused_noqa=unused_noqa, project=project
    )
    outcome.initial = list(result.diagnostics)
    for _ in range(MAX_ROUNDS):
        edits, fixes = _non_overlapping(result.diagnostics, unsafe)
        if not edits:
            break
        candidate = apply_edits(outcome.text, edits)
        if candidate == outcome.text:
            break
        if not _parses(candidate):
            result.diagnostics.append(
                error_diagnostic(
                    INTERNAL_ERROR,
                    filename,
                    "a fix produced code that does not parse; the file was left unchanged "
                    "by that fix; please report it",
                )
            )
            break
        outcome.text = candidate
        outcome.applied += fixes
        result = lint_text(candidate, filename, rules, launch=launch, unused_noqa=unused_noqa, project=project)
    outcome.diagnostics = result.diagnostics
    return outcome
