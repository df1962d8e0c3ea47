"""The ``ast`` screen (``fsdp_lint.screen``) drops a rule for a file only when the rule
cannot report anything there: every fixture, and every fixture inside a large module of
unrelated code, gives the same diagnostics with and without it."""

from pathlib import Path

import pytest

import fsdp_lint.screen as screen
from fsdp_lint.engine import lint_text_sliced
from fsdp_lint.rules import ALL_RULES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.rglob("*.py"))


def _seen(diagnostics):
    return [
        (d.code, d.location, d.end_location, d.message, d.statement_rows,
         None if d.fix is None else (d.fix.applicability, d.fix.message, d.fix.edits))
        for d in diagnostics
    ]


def _unscreened(monkeypatch, text, name):
    with monkeypatch.context() as patch:
        patch.setattr(screen, "live_rules", lambda tree, rules: list(rules))
        return lint_text_sliced(text, name, ALL_RULES, None).diagnostics


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_fixture_same_with_and_without_the_screen(path, monkeypatch):
    text = path.read_text()
    whole = _unscreened(monkeypatch, text, path.name)
    assert _seen(lint_text_sliced(text, path.name, ALL_RULES, None).diagnostics) == _seen(whole)
    # each rule that reports is kept by the screen on its own
    fired = {d.code for d in whole}
    kept = {r.code for r in screen.live_rules(screen.parse(text), [r for r in ALL_RULES if r.code in fired])}
    assert fired <= kept


def test_rules_without_a_condition_are_kept():
    tree = screen.parse("x = 1\n")
    unscreened = [r for r in ALL_RULES if r.code not in screen._SCREENS]
    assert screen.live_rules(tree, unscreened) == unscreened


def test_unparsable_text_keeps_every_rule():
    assert screen.live_rules(screen.parse("def broken(:\n"), ALL_RULES) == list(ALL_RULES)
