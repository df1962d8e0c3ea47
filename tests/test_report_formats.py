"""``--format gitlab`` (schema-checked, as SARIF is) and ``--format junit`` (the element
structure CI systems read, with the standard library's XML parser), through the real
command line (issue 27, item 4)."""

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import jsonschema
import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READ_ONLY = FIXTURES / "FSD001" / "fix" / "read_only.py"
LOOPS = FIXTURES / "FSD002" / "fires" / "training_loops.py"
GITLAB_SCHEMA = Path(__file__).resolve().parent / "data" / "gitlab-code-quality.schema.json"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "src").mkdir()
    shutil.copy(READ_ONLY, tmp_path / "src" / "a.py")
    shutil.copy(LOOPS, tmp_path / "src" / "loops.py")
    (tmp_path / "src" / "broken.py").write_text("from torch.distributed.fsdp import fully_shard\ndef f(:\n")
    return tmp_path


def _validate(report):
    schema = json.loads(GITLAB_SCHEMA.read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(report)


def test_gitlab_report_validates_and_matches_the_json_findings(cli, project):
    result = cli("check", "--format", "gitlab", "--no-cache", "src", cwd=project)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    _validate(report)
    plain = json.loads(cli("check", "--format", "json", "--no-cache", "src", cwd=project).stdout)
    assert [(i["check_name"], i["location"]["path"], i["location"]["lines"]["begin"]) for i in report] == [
        (d["code"], d["filename"].replace("\\", "/"), d["location"]["row"]) for d in plain
    ]
    assert len({i["fingerprint"] for i in report}) == len(report)  # GitLab needs them unique
    syntax = [i for i in report if i["check_name"] == "FSD900"]
    assert syntax and syntax[0]["severity"] == "critical"
    assert {i["severity"] for i in report if i["check_name"] != "FSD900"} == {"major"}
    assert report[0]["description"].startswith(report[0]["check_name"] + " ")


def test_gitlab_fingerprints_survive_line_moves_and_paths_follow_ci_project_dir(cli, project, monkeypatch):
    first = json.loads(cli("check", "--format", "gitlab", "--no-cache", "src/a.py", cwd=project).stdout)
    a = project / "src" / "a.py"
    a.write_text("import os\n\n" + a.read_text())
    moved = json.loads(cli("check", "--format", "gitlab", "--no-cache", "src/a.py", cwd=project).stdout)
    assert [i["fingerprint"] for i in moved] == [i["fingerprint"] for i in first]
    assert [i["location"]["lines"]["begin"] for i in moved] == [i["location"]["lines"]["begin"] + 2 for i in first]
    # run from inside src with CI_PROJECT_DIR at the checkout: paths are the repository's
    monkeypatch.setenv("CI_PROJECT_DIR", str(project))
    inside = json.loads(cli("check", "--format", "gitlab", "--no-cache", "a.py", cwd=project / "src").stdout)
    assert {i["location"]["path"] for i in inside} == {"src/a.py"}
    _validate(inside)


def test_the_gitlab_schema_rejects_a_broken_report():
    broken = [{"description": "x", "check_name": "FSD001", "fingerprint": "f", "severity": "error",
               "location": {"path": "a.py", "lines": {"begin": 1}}}]
    with pytest.raises(jsonschema.ValidationError):
        _validate(broken)
    with pytest.raises(jsonschema.ValidationError):
        _validate([{"description": "x", "check_name": "FSD001", "fingerprint": "f", "severity": "major",
                    "location": {"path": "a.py"}}])


def _junit(text):
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert suites and all(child.tag == "testsuite" for child in root)
    total = failures = 0
    for suite in suites:
        cases = suite.findall("testcase")
        failed = [case for case in cases if case.find("failure") is not None]
        assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) == len(failed)
        assert int(suite.get("errors")) == 0 and suite.get("name")
        for case in cases:
            assert case.get("name") and case.get("classname")
            for failure in case.findall("failure"):
                assert failure.get("message") and failure.text
        total += len(cases)
        failures += len(failed)
    assert int(root.get("tests")) == total and int(root.get("failures")) == failures
    return suites


def test_junit_report_has_one_suite_per_file_and_one_failing_case_per_finding(cli, project):
    result = cli("check", "--format", "junit", "--no-cache", "src", cwd=project)
    assert result.returncode == 1 and result.stdout.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    suites = _junit(result.stdout)
    plain = json.loads(cli("check", "--format", "json", "--no-cache", "src", cwd=project).stdout)
    assert [s.get("name") for s in suites] == sorted({d["filename"] for d in plain})
    cases = [(s.get("name"), c.get("name"), int(c.get("line")), int(c.get("column"))) for s in suites for c in s]
    assert cases == [(d["filename"], "org.fsdp-lint." + d["code"], d["location"]["row"], d["location"]["column"])
                     for d in plain]
    first = suites[0].find("testcase/failure")
    assert first.get("message") == plain[0]["message"]
    assert first.text == f"line {plain[0]['location']['row']}, col {plain[0]['location']['column']}, " \
                         f"{plain[0]['code']} {plain[0]['message']}"


def test_junit_for_a_clean_run_is_one_passing_case(cli, tmp_path):
    (tmp_path / "ok.py").write_text("import torch\n")
    result = cli("check", "--format", "junit", "--no-cache", "ok.py", cwd=tmp_path)
    assert result.returncode == 0
    (suite,) = _junit(result.stdout)
    (case,) = suite.findall("testcase")
    assert case.find("failure") is None and case.get("name") == "No errors found"


def test_junit_escapes_markup_in_messages(cli, tmp_path):
    """A message with quotes, ``<`` and ``&`` (FSD900 quotes the source) stays well-formed."""
    (tmp_path / "bad.py").write_text('from torch.distributed.fsdp import fully_shard\nx = "<a & b>" if\n')
    result = cli("check", "--format", "junit", "--no-cache", "bad.py", cwd=tmp_path)
    (suite,) = _junit(result.stdout)
    assert suite.find("testcase").get("name") == "org.fsdp-lint.FSD900"
