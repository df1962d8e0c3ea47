"""Small helpers shared by the tests: lint or fix a string with all rules."""

import textwrap

from fsdp_lint.engine import lint_text
from fsdp_lint.fixer import fix_text
from fsdp_lint.rules import ALL_RULES


def lint(source: str, rules=ALL_RULES, dedent=True):
    text = textwrap.dedent(source) if dedent else source
    return lint_text(text, "<test>", rules).diagnostics


def codes_rows(source: str, rules=ALL_RULES):
    return sorted((d.code, d.location.row) for d in lint(source, rules))


def fix(source: str, unsafe=False, rules=ALL_RULES):
    return fix_text(source, "<test>", rules, unsafe).text
