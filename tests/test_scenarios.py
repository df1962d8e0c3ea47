"""The scenario registry: every rule has a scenario, declared on the verifier's side; what a
scenario needs decides SKIPPED before anything runs."""

import ast
from pathlib import Path

import pytest

from fsdp_lint.rules import ALL_RULES
from fsdp_lint.scenarios.registry import SCENARIOS, scenario_for, variants
from fsdp_lint.verify.scenario import Scenario
from fsdp_lint.versions import version_tuple

PACKAGE = Path(__file__).resolve().parent.parent / "fsdp_lint"


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


@pytest.mark.parametrize("path", sorted((PACKAGE / "rules").glob("*.py")), ids=lambda p: p.name)
def test_rules_never_import_the_verifier(path):
    bad = [name for name in _imports(path) if name.startswith(("fsdp_lint.verify", "fsdp_lint.scenarios"))]
    assert not bad, f"{path.name} imports {bad}: declare its scenario in fsdp_lint/scenarios/registry.py"


def test_every_rule_has_a_scenario_and_every_scenario_a_rule():
    codes = {rule.code for rule in ALL_RULES}
    assert set(SCENARIOS) == codes
    for code in codes:
        for scenario in variants(code):
            assert isinstance(scenario, Scenario)
            assert (PACKAGE / "scenarios" / scenario.program).is_file(), scenario.program


def test_variants_are_chosen_by_device():
    assert scenario_for("FSD001", "cpu").program == "fsd001_summon_writeback_with_cpu_offload.py"
    assert scenario_for("FSD001", "cuda").program == "fsd001_summon_writeback_with_cpu_offload_cuda.py"
    assert scenario_for("FSD001", "cuda").slowdown and scenario_for("FSD001", "cuda").real_cpu_offload
    assert scenario_for("FSD999", "cpu") is None


def test_needs_decide_skipped_with_the_reason():
    fsd103 = scenario_for("FSD103", "cpu")
    assert "real CPU parameter offload needs CUDA" in fsd103.cannot_run("cpu", 2, "2.13.0")
    assert fsd103.cannot_run("cuda", 1, "2.13.0") is None  # one GPU is enough for it
    fsd102 = scenario_for("FSD102", "cpu")
    assert fsd102.cannot_run("cpu", 1, "2.13.0").startswith("needs at least 2 ranks, got 1")
    assert fsd102.cannot_run("cpu", 2, "2.13.0") is None
    fsd006 = scenario_for("FSD006", "cpu")
    assert "needs torch >= 2.14.1 on cpu, found 2.13.0+cpu" in fsd006.cannot_run("cpu", 2, "2.13.0+cpu")
    assert fsd006.cannot_run("cpu", 2, "2.14.1") is None
    assert fsd006.cannot_run("cuda", 2, "2.11.0+cu130") is None
    assert scenario_for("FSD003", "cuda").cannot_run("cuda", 2, "2.13.0").startswith("the bug needs")


def test_one_rank_leaves_the_rules_that_do_not_need_a_peer():
    runs = {r.code for r in ALL_RULES if scenario_for(r.code, "cuda").cannot_run("cuda", 1, "2.13.0") is None}
    assert runs == {"FSD004", "FSD008", "FSD009", "FSD010", "FSD101", "FSD103", "FSD109", "FSD111", "FSD113",
                    "FSD114", "FSD115", "FSD116", "FSD117", "FSD118", "FSD119"}


def test_hazard_fixed_in_follows_the_version():
    fsd003 = scenario_for("FSD003", "cpu")
    assert fsd003.expected_on("2.13.0+cpu") and not fsd003.expected_on("2.14.1")
    assert version_tuple("2.14.0a0+git123") == (2, 14, 0) and version_tuple("2.13") == (2, 13, 0)
