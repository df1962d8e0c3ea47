"""Each rule's documentation: ruff's sections, examples that behave as documented, the
``rule``/``rules`` commands and the README's rule table."""

import json
import re
from pathlib import Path

import pytest

from fsdp_lint.cli import main
from fsdp_lint.rules import ALL_RULES, lookup, select_rules
from tests.helpers import lint

SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Known problems", "Fix safety", "References")
README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_doc_has_ruff_sections(rule):
    assert re.fullmatch(r"FSD\d{3}", rule.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rule.name)
    for title in SECTIONS:
        assert rule.section(title), f"{rule.code} lacks '## {title}'"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_doc_says_what_it_assumes_when_it_cannot_see(rule):
    """Issue 23: each rule's doc says what it assumes when the file does not show enough, in
    a ruff-style '## Known problems' section just before '## Fix safety', written (the
    ``scripts/new_rule.py`` template's TODO fails here until it is)."""
    titles = re.findall(r"^## (.+)$", rule.doc, re.M)
    assert titles.index("Known problems") + 1 == titles.index("Fix safety"), titles
    assert "TODO" not in rule.section("Known problems"), rule.code


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_examples_behave_as_documented(rule):
    bad = rule.examples("Example")
    good = rule.examples("Use instead")
    assert bad and good
    for code in bad:
        assert rule.code in {d.code for d in lint(code)}, code
    for code in good:
        assert rule.code not in {d.code for d in lint(code)}, code


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_command_prints_doc_by_code_and_name(rule, capsys):
    # in-process, through the command line's entry point (test_rule_command_unknown and
    # test_rules_json run it as a separate process)
    def printed(name):
        assert main(["rule", name]) == 0
        return capsys.readouterr().out

    by_code = printed(rule.code)
    assert by_code == printed(rule.name)
    assert "## Why is this bad?" in by_code and rule.name in by_code
    assert "## Known problems\n" + rule.section("Known problems") in by_code


def test_rule_command_unknown(cli):
    result = cli("rule", "FSD999")
    assert result.returncode == 2 and "unknown rule" in result.stderr


def test_rules_json(cli):
    data = json.loads(cli("rules", "--format", "json").stdout)
    assert [d["code"] for d in data] == [r.code for r in ALL_RULES]
    assert {"code", "name", "summary", "fix"} <= set(data[0])


def test_readme_rule_table_lists_every_rule():
    text = README.read_text()
    for rule in ALL_RULES:
        assert re.search(rf"\|\s*{rule.code}\s*\|\s*`{rule.name}`\s*\|", text), rule.code


def test_selectors_accept_codes_prefixes_names():
    assert [r.code for r in select_rules(["FSD001"])] == ["FSD001"]
    assert [r.code for r in select_rules(["summon-in-training-loop"])] == ["FSD002"]
    assert len(select_rules(["FSD"])) == len(ALL_RULES)
    assert "FSD001" not in [r.code for r in select_rules(["ALL"], ["FSD001"])]
    assert lookup("fsd001") is lookup("summon-writeback-with-cpu-offload")


def test_committed_docs_are_current(tmp_path):
    from fsdp_lint.docs import write_docs

    docs = Path(__file__).resolve().parent.parent / "docs"
    for path in write_docs(tmp_path):
        committed = docs / path.relative_to(tmp_path)
        assert committed.read_text() == path.read_text(), f"run: python -m fsdp_lint.docs docs ({committed})"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_doc_shows_verifier_results_and_markers_are_identifiers(rule):
    from fsdp_lint.docs import render_rule

    assert "## Verified" in render_rule(rule)
    assert all(m.isidentifier() for m in rule.markers[0])  # the ast stage matches identifiers


def test_readme_fix_column_agrees_with_rules():
    text = README.read_text()
    for rule in ALL_RULES:
        row = re.search(rf"\|\s*{rule.code}\s*\|[^|]*\|\s*([^|]+?)\s*\|", text).group(1)
        assert (row == "none") == (rule.fix_availability == "never"), rule.code
