"""Every rule's fixtures: files that must fire (exactly where expected.txt says), files
that must stay quiet, and fix pairs (before / after --fix / after --unsafe-fixes).

Files in a ``target-torch-X.Y`` folder under ``fires/`` or ``quiet/`` are linted for code
that targets that torch version (``target-torch-version``), with their own expected.txt."""

from pathlib import Path

import libcst
import pytest

from fsdp_lint.rules import ALL_RULES, BY_CODE
from tests.helpers import FIXTURE_TARGET, fix, fixture_rules, lint

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RULE_DIRS = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name in BY_CODE)


def _expected(folder: Path):
    expected = {}
    for line in (folder / "expected.txt").read_text().splitlines():
        if line.strip():
            where, code = line.split()
            name, row = where.split(":")
            expected.setdefault(name, []).append((code, int(row)))
    return expected


def test_every_rule_has_fixtures():
    assert {p.name for p in RULE_DIRS} == {rule.code for rule in ALL_RULES}
    for folder in RULE_DIRS:
        assert list((folder / "fires").glob("*.py")), folder
        assert list((folder / "quiet").glob("*.py")), folder


def _cases(kind):
    return [(folder, path) for folder in RULE_DIRS for path in sorted((folder / kind).glob("*.py"))
            + sorted((folder / kind).glob(FIXTURE_TARGET + "*/*.py"))]


FIRES = _cases("fires")
QUIET = _cases("quiet")
FIXES = [
    path
    for folder in RULE_DIRS
    for path in sorted((folder / "fix").glob("*.py"))
    if path.name.count(".") == 1
]


@pytest.mark.parametrize("folder,path", FIRES, ids=lambda v: getattr(v, "name", str(v)))
def test_fires_exactly_where_expected(folder, path):
    expected = sorted(_expected(path.parent).get(path.name, []))
    assert expected, f"{path.name} has no line in expected.txt"
    found = sorted((d.code, d.location.row) for d in lint(path.read_text(), fixture_rules(path), dedent=False))
    assert found == expected


@pytest.mark.parametrize("folder,path", QUIET, ids=lambda v: getattr(v, "name", str(v)))
def test_quiet(folder, path):
    found = [d for d in lint(path.read_text(), fixture_rules(path), dedent=False) if d.code == folder.name]
    assert found == []


@pytest.mark.parametrize("before", FIXES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_fix_pairs(before):
    source = before.read_text()
    for unsafe, suffix in ((False, ".fixed.py"), (True, ".unsafe.py")):
        after_path = before.with_name(before.name[:-3] + suffix)
        if not after_path.exists():
            assert unsafe, f"missing {after_path.name}"  # the .unsafe.py result is optional
            continue
        after = after_path.read_text()
        fixed = fix(source, unsafe=unsafe)
        assert fixed == after
        libcst.parse_module(fixed)
        assert fix(fixed, unsafe=unsafe) == fixed  # --fix twice equals once


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.py")), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_cheap_stages_never_drop_a_finding(path):
    """The text markers and the ``ast`` stage only skip files that cannot produce a finding."""
    from fsdp_lint.engine import ast_confirms, lint_text, wanted_rules

    text = path.read_text()
    for rule in fixture_rules(path):
        if [d for d in lint_text(text, path.name, [rule]).diagnostics if d.code == rule.code]:
            assert wanted_rules(text, [rule]) == [rule]
            assert ast_confirms(text, [rule])
