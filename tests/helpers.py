"""Small helpers shared by the tests: lint or fix a string with all rules."""

import subprocess
import textwrap

from fsdp_lint.engine import lint_text
from fsdp_lint.fixer import fix_text
from fsdp_lint.rules import ALL_RULES, for_target


def lint(source: str, rules=ALL_RULES, dedent=True):
    text = textwrap.dedent(source) if dedent else source
    return lint_text(text, "<test>", rules).diagnostics


def codes_rows(source: str, rules=ALL_RULES):
    return sorted((d.code, d.location.row) for d in lint(source, rules))


def fix(source: str, unsafe=False, rules=ALL_RULES):
    return fix_text(source, "<test>", rules, unsafe).text


FIXTURE_TARGET = "target-torch-"


def fixture_rules(path):
    """The rules a fixture is linted with: those for its folder's target torch version
    (``fires/target-torch-2.0/x.py``), or for no target."""
    name = path.parent.name
    return for_target(ALL_RULES, name[len(FIXTURE_TARGET):] if name.startswith(FIXTURE_TARGET) else None)


def git(*args, cwd):
    """Run git in ``cwd``; its standard output, stripped (fails the test on an error)."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()
