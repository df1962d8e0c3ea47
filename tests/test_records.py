"""Records of verifier runs: machine-written, valid, the only source of the docs; ``fsdp-lint
rule`` says which torch the user has without importing it."""

import copy
import json
import subprocess
import sys
from importlib import metadata

import pytest

from fsdp_lint.docs import on_your_torch, render_rule, render_verification
from fsdp_lint.rules import lookup
from fsdp_lint.verify import records
from fsdp_lint.verify.judge import CONFIRMED, Judgement
from fsdp_lint.verify.launcher import ProgramOutcome, RankOutcome, Topology


def test_shipped_records_are_valid_and_include_a_recorded_run():
    shipped = records.load()
    assert shipped
    for record in shipped:
        assert records.problems(record) == [], record["_file"]
    assert any(r["provenance"] == "recorded" for r in shipped)


def test_imported_records_say_what_is_known():
    for record in records.load():
        if record["provenance"] == "imported":
            assert record["note"] and record["fsdp_lint"]["commit"] is None and record["scenario_hashes"] is None


def test_a_built_record_holds_versions_hashes_and_every_rank(tmp_path):
    rule = lookup("FSD102")
    flagged = ProgramOutcome("flagged.py", str(tmp_path), seconds=3.2)
    flagged.ranks = [RankOutcome(0, returncode=0, report={"hazard": True, "detail": "norms 1, 2"}),
                     RankOutcome(1, returncode=0, report={"hazard": True, "detail": "norms 1, 2"})]
    fixed = ProgramOutcome("fixed.py", str(tmp_path), seconds=3.0)
    fixed.ranks = [RankOutcome(0, returncode=0, report={"hazard": False}), RankOutcome(1, returncode=0, report={})]
    judgement = Judgement(CONFIRMED, "ranks 0, 1: norms 1, 2", "clean", outcomes=(flagged, fixed))
    info = {"version": "2.13.0+cpu", "cuda": None, "git_version": "abc", "debug": False, "python": "3.11.7",
            "device_names": []}
    record = records.build(info, Topology(nproc=2), "gloo", "cpu", [(rule, judgement, None)], ["fsdp-lint", "verify"])
    assert records.problems(record) == []
    assert record["scenario_hashes"]["fsd102_clip_grad_norm_on_sharded_fsdp.py"] == records.scenario_hashes()[
        "fsd102_clip_grad_norm_on_sharded_fsdp.py"] and len(record["scenario_hashes"]["_harness.py"]) == 64
    ranks = record["results"][0]["programs"]["flagged"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["report"]["detail"] == "norms 1, 2"
    path = records.write(record, tmp_path / "out")
    assert path.name.endswith("-gloo-cpu-2ranks-torch-2.13.0-cpu.json")
    assert json.loads(path.read_text())["torch"]["version"] == "2.13.0+cpu"
    some = records.build(info, Topology(nproc=2), "gloo", "cpu", [(rule, judgement, None)], ["fsdp-lint", "verify"],
                         some_rules=True)
    assert records.file_name(some).endswith("-torch-2.13.0-cpu-FSD102-FSD102.json")  # never overwrites a full run


def test_docs_follow_the_records():
    """A changed verdict in a record changes the rendered docs (so the committed-docs test fails)."""
    shipped = records.load()
    rule = lookup("FSD004")
    changed = copy.deepcopy(shipped)
    for record in changed:
        for result in record["results"]:
            if result["code"] == "FSD004":
                result["verdict"] = "NOT REPRODUCED"
    assert render_rule(rule, changed) != render_rule(rule, shipped)
    assert render_verification(changed) != render_verification(shipped)


def test_on_your_torch_says_whether_the_hazard_was_reproduced():
    shipped = records.load()
    rule = lookup("FSD003")
    versions = {r["torch"]["version"] for r in shipped if any(x["code"] == "FSD003" for x in r["results"])}
    version = sorted(versions)[0]
    text = on_your_torch(rule, version, shipped)
    assert f"Installed: torch {version}" in text and "The hazard was" in text
    assert "No record for this torch version" in on_your_torch(rule, "9.9.9", shipped)
    assert "torch is not installed" in on_your_torch(rule, None, shipped)


def test_rule_command_reads_the_torch_version_without_importing_torch():
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pytest.skip("torch is not installed")
    code = (
        "import sys, io, contextlib\n"
        "from fsdp_lint.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    main(['rule', 'FSD001'])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(out.getvalue())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"Installed: torch {version} (package metadata)." in done.stdout


def test_an_explicit_commit_wins_over_the_checkouts_git(monkeypatch):
    from fsdp_lint.verify.records import git_state

    monkeypatch.setenv("FSDP_LINT_GIT_COMMIT", "df9a86c953a14db0afac6b0fb6b1b0aad335bd8b")
    state = git_state()
    assert state["commit"] == "df9a86c953a14db0afac6b0fb6b1b0aad335bd8b"
    assert state["commit_from"] == "FSDP_LINT_GIT_COMMIT"


def test_program_table_records_are_written_and_rendered(tmp_path):
    from fsdp_lint.docs import load_program_records, render_program_records
    from fsdp_lint.verify.program.table import write_record

    record = {
        "format": 1, "command": ["python", "-m", "fsdp_lint.verify.program.table", "FSD002", "FSD003"],
        "fsdp_lint": {"version": "0.1.0", "commit": "abc123", "dirty": True}, "torch": "2.13.0+cpu",
        "device": "cpu", "nproc": 2, "device_names": ["x86_64"], "date": "2026-11-30T00:00:00Z",
        "rows": [{"code": "FSD002", "flagged": "CONFIRMED at line 3: a|b", "fixed": "nothing for the rule",
                  "result": "PASS"},
                 {"code": "FSD003", "flagged": "-", "fixed": "-", "result": "SKIPPED (needs CUDA)"}],
    }
    path = write_record(record, tmp_path)
    assert path.name == "program-2026-11-30-cpu-2ranks-torch-2.13.0-cpu-FSD002-FSD003.json"
    text = render_program_records(load_program_records(tmp_path))
    assert "| FSD002 | CONFIRMED at line 3: a\\|b | nothing for the rule | PASS |" in text
    assert "| FSD003 | - | - | SKIPPED (needs CUDA) |" in text
    assert "commit abc123, with uncommitted changes" in text
