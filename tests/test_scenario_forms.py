"""Scenario forms (the same hazard through a framework's own call) and the ``packages`` need:
the registry's data, SKIPPED for a missing or other version of a framework (decided before
anything runs, no framework needed), each form as its own row in verify, records and docs."""

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from fsdp_lint.rules import ALL_RULES, lookup
from fsdp_lint.scenarios import registry
from fsdp_lint.scenarios.registry import forms, scenario_for, scenarios_for, variants
from fsdp_lint.verify.scenario import Scenario, installed_versions, label, spec_matches

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "fsdp_lint" / "scenarios"
FORMS = {
    "FSD007": ("", "generate"),  # a sampling method, through the inner module, in a recursive summon
    "FSD010": ("", "state-dict"),  # plain torch, another call path (below torch 2.1)
    "FSD101": ("", "accelerate", "fabric-fsdp2"),
    "FSD104": ("", "load", "forward", "forward-fsdp2", "accelerate", "fabric", "fabric-fsdp2"),
    "FSD105": ("", "method"),  # a method of the model's own class rather than generate
    "FSD106": ("", "format"),  # the norm formatted with a spec (TypeError) rather than read per rank
    "FSD117": ("", "one-rank"),  # a re-initialisation under a rank test
}
TORCH_FORMS = {"state-dict", "load", "forward", "forward-fsdp2", "one-rank", "format", "generate", "method"}  # forms through torch's own API: no framework to pin
# distribution -> the module a program imports for it
IMPORTED_AS = {"accelerate": "accelerate", "lightning": "lightning"}


def _framework_scenarios():
    return [s for rule in ALL_RULES for s in variants(rule.code) if s.form and s.form not in TORCH_FORMS]


# -- the registry's data ------------------------------------------------------------------


def test_forms_of_each_rule():
    for rule in ALL_RULES:
        assert forms(rule.code) == FORMS.get(rule.code, ("",)), rule.code
    assert forms("FSD999") == ()


def test_plain_form_comes_first_and_is_what_scenario_for_gives_by_default():
    for rule in ALL_RULES:
        assert variants(rule.code)[0].form == ""
        assert scenario_for(rule.code, "cpu").form == ""
    assert scenario_for("FSD104", "cpu", "accelerate").program == "fsd104_accelerate_state_dict_on_main_process.py"
    assert scenario_for("FSD104", "cpu", "nope") is None


def test_scenarios_for_gives_one_variant_per_form():
    found = scenarios_for("FSD104", "cuda")
    assert [s.form for s in found] == list(FORMS["FSD104"])
    assert [s.program for s in scenarios_for("FSD001", "cuda")] == ["fsd001_summon_writeback_with_cpu_offload_cuda.py"]
    assert scenarios_for("FSD999", "cpu") == []


def test_labels():
    assert label("FSD104", "") == "FSD104"
    assert label("FSD104", "accelerate") == "FSD104 (accelerate)"


def test_framework_forms_pin_their_framework_at_the_version_the_rule_cites():
    for scenario in _framework_scenarios():
        code = next(rule.code for rule in ALL_RULES if scenario in variants(rule.code))
        assert scenario.packages, scenario.program
        for name, spec in scenario.packages.items():
            assert re.fullmatch(r"==\d+\.\d+\.\d+", spec), (scenario.program, spec)
            assert spec[2:] in lookup(code).doc, f"{code}'s doc does not cite {name} {spec[2:]}"


def test_the_verify_frameworks_extra_pins_what_the_forms_need():
    text = (ROOT / "pyproject.toml").read_text()
    extra = re.search(r"^verify-frameworks = \[(.*)\]$", text, re.M)
    assert extra, "pyproject.toml has no verify-frameworks extra"
    pins = set(re.findall(r'"([^"]+)"', extra.group(1)))
    needed = {f"{name}{spec}" for s in _framework_scenarios() for name, spec in s.packages.items()}
    assert needed <= pins, needed - pins
    test_extra = re.search(r"^test = \[(.*?)^\]", text, re.M | re.S).group(1)
    assert "accelerate" not in test_extra and "lightning" not in test_extra  # CI's time budget


def test_framework_programs_import_their_framework_and_plain_ones_do_not():
    for rule in ALL_RULES:
        for scenario in variants(rule.code):
            tree = ast.parse((SCENARIOS / scenario.program).read_text())
            imported = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    imported |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module:
                    imported.add(node.module.split(".")[0])
            wanted = {IMPORTED_AS[name] for name in scenario.packages}
            assert wanted <= imported, (scenario.program, wanted - imported)
            assert not (set(IMPORTED_AS.values()) - wanted) & imported, scenario.program


def test_forms_that_cannot_run_on_cpu_say_why_from_the_frameworks_source():
    for scenario in _framework_scenarios():
        if "cpu" not in scenario.devices:
            why = scenario.not_on["cpu"]
            assert re.search(r"\.py l\. \d+", why), why  # a line of the framework's source
            assert scenario.cannot_run("cpu", 2, "2.13.0", {"accelerate": "1.15.0", "lightning": "2.6.6"}) == why


def test_hang_forms_give_up_after_a_minute():
    for scenario in _framework_scenarios():
        if scenario.hang_is_hazard:
            assert scenario.timeout <= 60.0, scenario.program


@pytest.mark.parametrize(
    "code,form",
    [(rule.code, form) for rule in ALL_RULES for form in forms(rule.code)],
    ids=lambda v: v or "torch",
)
def test_the_rule_flags_each_program_and_not_its_fix(tmp_path, code, form):
    """What ``verify`` checks before running, for every variant of every form (no torch, no
    framework needed): the rule fires on the program and not on its fixed program."""
    from fsdp_lint.verify.command import prepare

    for scenario in [s for s in variants(code) if s.form == form]:
        flagged, fixed, problem = prepare(lookup(code), scenario, tmp_path / scenario.program)
        assert problem is None, problem
        assert flagged.read_text() != fixed.read_text()


# -- the packages need ---------------------------------------------------------------------


def test_version_specs():
    assert spec_matches("1.15.0", "==1.15.0") and not spec_matches("1.14.0", "==1.15.0")
    assert spec_matches("2.6.6", ">=2.6,<2.7") and not spec_matches("2.7.0", ">=2.6,<2.7")
    assert spec_matches("1.15.3", "==1.15.*") and not spec_matches("1.16.0", "==1.15.*")
    assert spec_matches("2.13.0+cpu", "!=2.12.0")
    with pytest.raises(ValueError):
        spec_matches("1.0", "~=1.0")


def test_a_missing_or_other_framework_is_skipped_with_the_reason():
    scenario = Scenario(program="p.py", hazard="h", form="accelerate", packages={"accelerate": "==1.15.0"})
    assert scenario.cannot_run("cpu", 2, "2.13.0", {}) == "needs accelerate==1.15.0, not installed"
    assert scenario.cannot_run("cpu", 2, "2.13.0") == "needs accelerate==1.15.0, not installed"
    assert scenario.cannot_run("cpu", 2, "2.13.0", {"accelerate": None}) == "needs accelerate==1.15.0, not installed"
    assert scenario.cannot_run("cpu", 2, "2.13.0", {"accelerate": "1.14.0"}) == "needs accelerate==1.15.0, found 1.14.0"
    assert scenario.cannot_run("cpu", 2, "2.13.0", {"accelerate": "1.15.0"}) is None
    # the device and the ranks are said first
    fabric = scenario_for("FSD104", "cpu", "fabric-fsdp2")
    assert fabric.cannot_run("cpu", 1, "2.13.0", {}).startswith("needs at least 2 ranks, got 1")
    assert fabric.cannot_run("cpu", 2, "2.13.0", {}) == "needs lightning==2.6.6, not installed"
    assert fabric.cannot_run("cpu", 2, "2.13.0", {"lightning": "2.5.0"}) == "needs lightning==2.6.6, found 2.5.0"


def test_installed_versions_reads_package_metadata_without_importing():
    found = installed_versions(["libcst", "surely-not-a-distribution-fsdp-lint"])
    assert found["libcst"] and found["surely-not-a-distribution-fsdp-lint"] is None


def test_verify_skips_a_form_whose_framework_the_target_lacks(tmp_path):
    """The verifier decides from the target interpreter's probe: nothing is launched."""
    from fsdp_lint.verify import command
    from fsdp_lint.verify.launcher import Topology

    args = command._parser().parse_args(["FSD104", "--form", "accelerate", "--form", "fabric", "--form", "fabric-fsdp2"])
    info = {"version": "2.13.0+cpu", "packages": {"lightning": None}}
    started = []
    run = command.Run(args, sys.executable, info, tmp_path, Topology(nproc=2), started.append)
    results = run.verify_rule(lookup("FSD104"))
    by_form = {s.form: j for s, j in results}
    assert list(by_form) == ["accelerate", "fabric", "fabric-fsdp2"]
    assert by_form["fabric-fsdp2"].verdict == "SKIPPED"
    assert by_form["fabric-fsdp2"].reason == "needs lightning==2.6.6, not installed"
    assert by_form["accelerate"].reason == registry.ACCELERATE_FSDP_NEEDS_AN_ACCELERATOR
    assert by_form["fabric"].reason == registry.FABRIC_FSDP_NEEDS_A_GPU
    other = command.Run(args, sys.executable, {"version": "2.13.0", "packages": {"lightning": "2.5.0"}},
                        tmp_path, Topology(nproc=2), started.append)
    args.form = ["fabric-fsdp2"]
    (scenario, judgement), = other.verify_rule(lookup("FSD104"))
    assert judgement.reason == "needs lightning==2.6.6, found 2.5.0"
    assert not started and not list(tmp_path.iterdir())


def test_verify_command_skips_the_fabric_forms_without_lightning(cli, tmp_path):
    """End to end, where Lightning is not installed (CI's test venv): SKIPPED with the reason,
    nothing started, each form its own row."""
    pytest.importorskip("torch")
    if installed_versions(["lightning"])["lightning"] is not None:
        pytest.skip("Lightning is installed here: tests/test_verify_frameworks.py runs the forms")
    result = cli("verify", "FSD101", "FSD104", "--form", "fabric-fsdp2", "--form", "accelerate",
                 "--format", "json", "--log-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    rows = {(r["code"], r["form"]): (r["verdict"], r["reason"]) for r in data["results"]}
    assert rows == {
        ("FSD101", "accelerate"): ("SKIPPED", registry.ACCELERATE_FSDP_NEEDS_AN_ACCELERATOR),
        ("FSD101", "fabric-fsdp2"): ("SKIPPED", "needs lightning==2.6.6, not installed"),
        ("FSD104", "accelerate"): ("SKIPPED", registry.ACCELERATE_FSDP_NEEDS_AN_ACCELERATOR),
        ("FSD104", "fabric-fsdp2"): ("SKIPPED", "needs lightning==2.6.6, not installed"),
    }
    assert data["packages"] == installed_versions(["accelerate", "lightning"])  # the target's probe
    assert data["packages"]["lightning"] is None
    assert "started" not in result.stderr
    table = cli("verify", "FSD104", "--form", "fabric-fsdp2", "--log-dir", tmp_path / "t")
    assert "| FSD104 (fabric-fsdp2) | " in table.stdout
    assert "SKIPPED (needs lightning==2.6.6, not installed)" in table.stdout


def test_an_unknown_form_is_an_error(cli, tmp_path):
    result = cli("verify", "FSD101", "--form", "deepspeed", "--log-dir", tmp_path)
    assert result.returncode == 2
    assert "no selected rule has the form 'deepspeed' (forms: accelerate, fabric-fsdp2, torch)" in result.stderr


# -- records and docs: each form its own row ----------------------------------------------------


def _record(form_results, **extra):
    from fsdp_lint.verify import records
    from fsdp_lint.verify.judge import Judgement
    from fsdp_lint.verify.launcher import Topology

    info = {"version": "2.11.0+cu130", "cuda": "13.0", "git_version": "x", "debug": False, "python": "3.11",
            "device_names": ["NVIDIA H200"] * 2, "packages": {"accelerate": "1.15.0", "lightning": "2.6.6"}}
    results = [
        (lookup(code), Judgement(verdict, f"{code} {form} flagged", "clean"), scenario_for(code, "cuda", form))
        for code, form, verdict in form_results
    ]
    return records.build(info, Topology(nproc=2), "nccl", "cuda", results, ["fsdp-lint", "verify"], **extra)


def test_records_hold_each_form_and_the_frameworks_found(tmp_path):
    from fsdp_lint.verify import records

    record = _record([("FSD104", "", "CONFIRMED"), ("FSD104", "accelerate", "CONFIRMED")], some_rules=True,
                     some_forms=["accelerate", "torch"])
    assert records.problems(record) == []
    assert [(r["code"], r["form"]) for r in record["results"]] == [("FSD104", ""), ("FSD104", "accelerate")]
    assert record["results"][1]["scenario"] == "fsd104_accelerate_state_dict_on_main_process.py"
    assert record["packages"] == {"accelerate": "1.15.0", "lightning": "2.6.6"}
    assert records.file_name(record).endswith("-torch-2.11.0-cu130-FSD104-FSD104-accelerate-torch.json")
    assert records.form_of({"code": "FSD104"}) == ""  # records made before forms: the plain form


def test_docs_show_each_form_as_its_own_row():
    from fsdp_lint.docs import render_rule, render_verification

    record = _record([("FSD104", "", "CONFIRMED"), ("FSD104", "accelerate", "CONFIRMED"),
                      ("FSD104", "fabric", "SKIPPED")])
    record["_file"] = "x.json"
    page = render_rule(lookup("FSD104"), [record])
    plain, rest = page.split("\n### FSD104 (accelerate)\n")
    assert "| FSD104  flagged |" in plain and "accelerate flagged" not in plain
    accelerate, rest = rest.split("\n### FSD104 (fabric)\n")
    assert "| 2.11.0+cu130, accelerate 1.15.0 | nccl/cuda, 2 ranks | 2 x NVIDIA H200 | CONFIRMED | FSD104 accelerate " \
           "flagged |" in accelerate
    assert "accelerate==1.15.0" in accelerate and "Not on cpu: accelerate 1.15.0 enables" in accelerate
    fabric, fabric2 = rest.split("\n### FSD104 (fabric-fsdp2)\n")
    assert "| 2.11.0+cu130, lightning 2.6.6 |" in fabric and "| SKIPPED |" in fabric
    assert fabric2.endswith("Not run by the verifier yet.\n")
    table = render_verification([record])
    assert "\n| FSD104 (accelerate) | CONFIRMED |\n" in table and "\n| FSD104 (fabric-fsdp2) | - |\n" in table
    assert "| FSD104 (accelerate) | CONFIRMED | FSD104 accelerate flagged |" in table


def test_rule_command_shows_the_forms_and_the_frameworks_here(cli):
    result = cli("rule", "FSD104")
    assert result.returncode == 0, result.stderr
    for form in ("accelerate", "fabric", "fabric-fsdp2"):
        assert f"\n### FSD104 ({form})\n" in result.stdout
    assert "## Frameworks here" in result.stdout
    assert "- FSD104 (accelerate) needs accelerate==1.15.0: " in result.stdout
    data = json.loads(cli("rule", "FSD104", "--format", "json").stdout)
    assert [f["label"] for f in data["framework_forms"]] == [
        "FSD104 (accelerate)", "FSD104 (fabric)", "FSD104 (fabric-fsdp2)"]
    assert data["framework_forms"][0]["packages"] == {"accelerate": "==1.15.0"}
    assert "Frameworks here" not in cli("rule", "FSD004").stdout
