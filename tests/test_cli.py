"""The check command end to end, as a separate process: output, exit codes, fixing."""

import json
import os
import shutil
import stat
from pathlib import Path

import libcst
import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BAD = FIXTURES / "FSD001" / "fix" / "read_only.py"
GOOD = FIXTURES / "FSD001" / "fix" / "read_only.fixed.py"


def test_text_output_and_exit_code(cli, tmp_path):
    target = tmp_path / "bad.py"
    shutil.copy(BAD, target)
    result = cli("check", target)
    assert result.returncode == 1
    lines = [line for line in result.stdout.splitlines() if ": FSD" in line]
    assert len(lines) == 6
    assert lines[0].startswith(f"{target}:4:6: FSD001 [*] `summon_full_params` writes")
    assert "[*] 6 fixable with the `--fix` option." in result.stdout


def test_default_command_is_check(cli, tmp_path):
    target = tmp_path / "bad.py"
    shutil.copy(BAD, target)
    assert cli(target).stdout == cli("check", target).stdout


def test_json_output(cli, tmp_path):
    target = tmp_path / "bad.py"
    shutil.copy(BAD, target)
    data = json.loads(cli("check", "--format", "json", target).stdout)
    first = data[0]
    assert set(first) == {"code", "name", "message", "filename", "location", "end_location", "fix", "url", "cell"}
    assert first["cell"] is None  # ruff's: a notebook's cell, null for other files
    assert first["code"] == "FSD001" and first["name"] == "summon-writeback-with-cpu-offload"
    assert first["location"] == {"row": 4, "column": 6}
    assert first["end_location"] == {"row": 4, "column": 36}
    assert first["fix"]["applicability"] == "safe"
    assert first["fix"]["edits"] == [
        {"content": ", writeback=False", "location": {"row": 4, "column": 35}, "end_location": {"row": 4, "column": 35}}
    ]


def test_fix_writes_safe_fixes_only_and_twice_equals_once(cli, tmp_path):
    target = tmp_path / "bad.py"
    shutil.copy(BAD, target)
    os.chmod(target, 0o640)
    first = cli("check", "--fix", target)
    assert first.returncode == 0, first.stdout
    assert target.read_text() == GOOD.read_text()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    second = cli("check", "--fix", target)
    assert second.returncode == 0 and target.read_text() == GOOD.read_text()


def test_unsafe_fixes_need_the_flag(cli, tmp_path):
    source = FIXTURES / "FSD001" / "fix" / "hands_to_helpers.py"  # unsafe fixes only
    target = tmp_path / "m.py"
    shutil.copy(source, target)
    assert cli("check", "--fix", target).returncode == 1
    assert target.read_text() == source.read_text()
    assert cli("check", "--fix", "--unsafe-fixes", target).returncode == 0
    assert target.read_text() == (FIXTURES / "FSD001" / "fix" / "hands_to_helpers.unsafe.py").read_text()


def test_diff_writes_nothing(cli, tmp_path):
    target = tmp_path / "bad.py"
    shutil.copy(BAD, target)
    result = cli("check", "--diff", target)
    assert result.returncode == 1
    assert "+with FSDP.summon_full_params(model, writeback=False):  # only reads" in result.stdout
    assert target.read_text() == BAD.read_text()


def test_syntax_error_does_not_stop_other_files(cli, tmp_path):
    (tmp_path / "a_broken.py").write_text("import torch\nsummon_full_params(\nCPUOffload\n")
    shutil.copy(BAD, tmp_path / "b.py")
    (tmp_path / "c_undecodable.py").write_bytes(b"# summon_full_params CPUOffload\nx = '\xff\xfe'\n")
    result = cli("check", "--format", "json", tmp_path)
    data = json.loads(result.stdout)
    codes = {(Path(d["filename"]).name, d["code"]) for d in data}
    assert ("a_broken.py", "FSD900") in codes
    assert ("c_undecodable.py", "FSD902") in codes
    assert ("b.py", "FSD001") in codes
    broken = [d for d in data if d["code"] == "FSD900"][0]
    assert broken["location"]["row"] >= 2 and "syntax error" in broken["message"]
    assert result.returncode == 1


def test_fix_keeps_encoding_bom_and_newlines(cli, tmp_path):
    text = BAD.read_text().replace("# only reads", "# lit en ré")
    crlf = tmp_path / "crlf.py"
    crlf.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    latin = tmp_path / "latin.py"
    latin.write_bytes(("# -*- coding: latin-1 -*-\n" + text).encode("latin-1"))
    assert cli("check", "--fix", crlf, latin).returncode == 0
    fixed = GOOD.read_text().replace("# only reads", "# lit en ré")
    assert crlf.read_bytes() == b"\xef\xbb\xbf" + fixed.replace("\n", "\r\n").encode("utf-8")
    assert latin.read_bytes() == ("# -*- coding: latin-1 -*-\n" + fixed).encode("latin-1")


def test_select_ignore_statistics_exit_zero(cli, tmp_path):
    target = tmp_path / "bad.py"
    shutil.copy(FIXTURES / "FSD002" / "fires" / "training_loops.py", target)
    assert cli("check", "--select", "FSD001", target).returncode == 0
    assert cli("check", "--ignore", "summon-in-training-loop,FSD104", target).returncode == 0
    stats = cli("check", "--statistics", target)
    assert stats.stdout.split() == ["5", "FSD002", "summon-in-training-loop", "1", "FSD104", "collective-on-one-rank"]
    assert cli("check", "--exit-zero", target).returncode == 0
    assert cli("check", "--select", "NOPE", target).returncode == 2


def test_directory_walk_skips_venv_and_gitignored(cli, tmp_path):
    for sub in ("pkg", ".venv/lib", "ignored"):
        (tmp_path / sub).mkdir(parents=True)
        shutil.copy(BAD, tmp_path / sub / "m.py")
    (tmp_path / ".gitignore").write_text("ignored/\n")
    data = json.loads(cli("check", "--format", "json", ".", cwd=tmp_path).stdout)
    assert {d["filename"] for d in data} == {os.path.join("pkg", "m.py")}


def test_fixed_output_always_parses(tmp_path):
    from tests.helpers import fix

    for path in FIXTURES.rglob("*.py"):
        libcst.parse_module(fix(path.read_text(), unsafe=True))


# --- validation, files that are not Python, counts, rules legend, stdin ------------------


def test_command_line_values_are_validated_like_the_config_file(cli, tmp_path):
    target = tmp_path / "bad.py"
    shutil.copy(BAD, target)
    (tmp_path / "pyproject.toml").write_text('[tool.fsdp-lint]\ntarget-torch-version = "banana"\n')
    from_file = cli("check", target, cwd=tmp_path)
    (tmp_path / "pyproject.toml").unlink()
    from_option = cli("check", "--target-torch-version", "banana", target, cwd=tmp_path)
    assert from_file.returncode == from_option.returncode == 2
    rule = 'must be a version string such as "2.13" or "2.14.1"'
    assert rule in from_file.stderr and rule in from_option.stderr
    assert "--target-torch-version" in from_option.stderr and from_option.stdout == ""
    for bad in (["-j", "0"], ["-j", "many"], ["--format", "xml"], ["--select", "FSD999"],
                ["--config", tmp_path / "missing.toml"], ["-o", tmp_path / "no" / "such" / "dir.txt"]):
        result = cli("check", *bad, target, cwd=tmp_path)
        assert result.returncode == 2 and "error" in result.stderr and "Traceback" not in result.stderr, (bad, result.stderr)


def test_path_that_does_not_exist_is_a_usage_error(cli, tmp_path):
    result = cli("check", "nope/", cwd=tmp_path)
    assert result.returncode == 2
    assert "fsdp-lint: error: no such file or directory: nope/" in result.stderr


def test_named_non_python_file_is_skipped_with_a_notice(cli, tmp_path):
    (tmp_path / "NOTES.md").write_text("# Notes\n\nWe call summon_full_params with CPUOffload.\n")
    (tmp_path / "launch").write_text("#!/usr/bin/env python3\n" + BAD.read_text())  # a script: linted
    shutil.copy(BAD, tmp_path / "bad.py")
    result = cli("check", "--format", "json", "NOTES.md", "launch", "bad.py", cwd=tmp_path)
    data = json.loads(result.stdout)
    assert {d["filename"] for d in data} == {"launch", "bad.py"}
    assert "FSD900" not in {d["code"] for d in data}
    assert "warning: skipped NOTES.md: not a Python file" in result.stderr
    only_notes = cli("check", "NOTES.md", cwd=tmp_path)
    assert only_notes.returncode == 0 and only_notes.stdout == "All checks passed!\n"  # as ruff: nothing was found


def test_a_run_that_finds_no_python_file_says_so(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    result = cli("check", "empty", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "All checks passed!\n"  # as ruff, under its warning
    assert "warning: No Python files found under the given path(s)" in result.stderr
    shutil.copy(BAD, tmp_path / "empty" / "a.py")
    assert "No Python files" not in cli("check", "empty", cwd=tmp_path).stderr


SHARED_FIX = '''"""Log parameter statistics from rank 0 (CPU-offloaded FSDP)."""
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP

model = FSDP(build_model(), cpu_offload=CPUOffload(offload_params=True))
with FSDP.summon_full_params(model, rank0_only=True):
    if dist.get_rank() == 0:
        print(sum(p.numel() for p in model.parameters()))
with FSDP.summon_full_params(model):
    print(model.weight.shape)
'''


def test_counts_agree_between_check_and_fix(cli, tmp_path):
    """FSD001 and FSD004 on one call share a fix (`writeback=False`): 3 findings, 3 fixable,
    2 fixes.  The fix run says it found the same 3 and explains the fix count."""
    target = tmp_path / "stats.py"
    target.write_text(SHARED_FIX)
    checked = cli("check", "--no-cache", target)
    assert "Found 3 error(s)." in checked.stdout and "[*] 3 fixable with the `--fix` option." in checked.stdout
    fixed = cli("check", "--fix", target)
    assert fixed.returncode == 0, fixed.stdout
    assert "Found 3 error(s) (3 fixed, 0 remaining)." in fixed.stdout
    assert "2 fix(es) resolved 3 findings" in fixed.stdout
    assert "fixed" not in fixed.stderr  # said once, by the summary
    assert target.read_text().count("writeback=False") == 2


def test_rules_listing_has_a_legend(cli):
    result = cli("rules")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["Code", "Name", "Fix", "Summary"]
    marks = {line.split()[0]: line.split()[2] for line in lines[1:] if line.startswith("FSD") and len(line.split()) > 2}
    assert marks["FSD004"] == "fix*" and marks["FSD001"] == "fix*"  # a **kwargs call gets no FSD004 fix
    assert any(line.strip().startswith("fix ") and "every finding" in line for line in lines)
    assert any(line.strip().startswith("fix*") and "some findings" in line for line in lines)
    assert "--unsafe-fixes" in result.stdout


def test_stdin_filename_without_dash_reads_standard_input(cli, tmp_path):
    """As ruff: `--stdin-filename` with no path reads standard input (it used to lint `.`)."""
    shutil.copy(GOOD, tmp_path / "on_disk.py")
    (tmp_path / "other.py").write_text(BAD.read_text())  # would be found if `.` were linted
    result = cli("check", "--stdin-filename", "pkg/train.py", cwd=tmp_path, input=BAD.read_text())
    assert result.returncode == 1
    assert "pkg/train.py:4:6: FSD001" in result.stdout and "other.py" not in result.stdout
    fixed = cli("check", "--fix", "--stdin-filename", "pkg/train.py", cwd=tmp_path, input=BAD.read_text())
    assert fixed.stdout == GOOD.read_text()


@pytest.mark.parametrize("command", [["rules"], ["rule", "FSD001"]])
def test_output_piped_into_a_reader_that_leaves_early_ends_quietly(command):
    """``fsdp-lint rules | head -1``: the reader leaves after one line; no BrokenPipeError
    traceback (ruff and Python's own advice: stop quietly)."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "fsdp_lint", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


FSDP_IMPORT = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
# body -> CPython's (line, column, message) for FSDP_IMPORT + body (``ast.parse`` on 3.11+)
BROKEN = {
    "unclosed.py": ("x = (1,\n 2\ny = 3\n", 2, 5, "'(' was never closed"),
    "dedent.py": ("if True:\n        x = 1\n    y = 2\n", 4, 10, "unindent does not match any outer indentation level"),
    "print2.py": ('print "hello"\n', 2, 1, "Missing parentheses in call to 'print'. Did you mean print(...)?"),
    "bad_def.py": ("def f(:\n    pass\n", 2, 7, "invalid syntax"),
}


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("cache", [True, False])
def test_file_naming_fsdp_that_does_not_parse_gets_cpythons_fsd900(cli, tmp_path, jobs, cache):
    """A file that names something a rule is about (here only the FSDP import: no rule's
    every marker group) and that CPython cannot parse is never clean: FSD900 at CPython's
    line and column, with CPython's message.  A file naming nothing is not parsed."""
    for name, (body, *_) in BROKEN.items():
        (tmp_path / name).write_text(FSDP_IMPORT + body)
    (tmp_path / "no_topic.py").write_text("def f(:\n    pass\n")
    extra = ["--cache-dir", str(tmp_path / "cache")] if cache else ["--no-cache"]
    for _ in range(2 if cache else 1):  # the second run reads the cache
        result = cli("check", "--format", "json", "-j", jobs, *extra, tmp_path)
        assert result.returncode == 1, result.stderr
        found = {
            Path(d["filename"]).name: (d["location"]["row"], d["location"]["column"], d["message"])
            for d in json.loads(result.stdout)
        }
        assert found == {
            name: (row, column, f"syntax error, file not checked: {message}")
            for name, (_, row, column, message) in BROKEN.items()
        }


@pytest.mark.parametrize("typo, command", [("chek", "check"), ("verfy", "verify"), ("ruls", "rules"), ("clena", "clean")])
def test_a_mistyped_command_gets_a_did_you_mean(cli, tmp_path, typo, command):
    result = cli(typo, ".", cwd=tmp_path)
    assert result.returncode == 2
    assert f"unknown command {typo!r}; did you mean {command!r}?" in result.stderr
    assert "no such file or directory" not in result.stderr and result.stdout == ""


def test_a_path_named_like_a_command_is_still_a_path(cli, tmp_path):
    (tmp_path / "chek").mkdir()
    shutil.copy(BAD, tmp_path / "chek" / "a.py")
    result = cli("chek", cwd=tmp_path)
    assert result.returncode == 1 and "FSD001" in result.stdout
    assert "no such file or directory: nope" in cli("nope", cwd=tmp_path).stderr  # not close to a command


def test_diff_with_only_unfixable_findings_says_so(cli, tmp_path):
    """ruff's "No fixes available": --diff used to print nothing at all and exit 1."""
    target = tmp_path / "loops.py"
    shutil.copy(FIXTURES / "FSD002" / "fires" / "training_loops.py", target)
    result = cli("check", "--diff", "--select", "FSD002", target)
    assert result.returncode == 1 and result.stdout == ""
    found = len(json.loads(cli("check", "--format", "json", "--select", "FSD002", target).stdout))
    assert found > 0
    assert f"No fixes available ({found} finding(s) have no fix)." in result.stderr
    with_fixes = cli("check", "--diff", BAD)
    assert with_fixes.returncode == 1 and with_fixes.stdout.startswith("---")
    assert "Would fix 6 finding(s)." in with_fixes.stderr


def test_a_clean_run_says_all_checks_passed_in_text_only(cli, tmp_path):
    """As ruff: a clean text run prints `All checks passed!` on standard output; machine
    formats, --statistics and --diff print no such line."""
    shutil.copy(GOOD, tmp_path / "good.py")
    text = cli("check", "--no-cache", tmp_path)
    assert text.returncode == 0 and text.stdout == "All checks passed!\n" and text.stderr == ""
    assert cli("check", "--no-cache", "--format", "json", tmp_path).stdout.strip() == "[]"
    for fmt in ("github", "sarif"):
        assert "All checks passed" not in cli("check", "--no-cache", "--format", fmt, tmp_path).stdout
    assert cli("check", "--no-cache", "--statistics", tmp_path).stdout == ""
    assert cli("check", "--diff", tmp_path).stdout == ""
    shutil.copy(BAD, tmp_path / "bad.py")
    assert "All checks passed" not in cli("check", "--no-cache", tmp_path).stdout


def test_fixed_count_said_once(cli, tmp_path):
    """`--fix` said how many it fixed twice (the summary on stdout and a line on stderr):
    once now, by the summary in text output and on stderr for the machine formats."""
    target = tmp_path / "bad.py"
    shutil.copy(BAD, target)
    result = cli("check", "--fix", target)
    both = result.stdout + result.stderr
    assert result.returncode == 0
    assert "Found 6 error(s) (6 fixed, 0 remaining)." in result.stdout
    assert both.count("fixed") == 1, both
    shutil.copy(BAD, target)
    machine = cli("check", "--fix", "--format", "json", target)
    assert json.loads(machine.stdout) == []
    assert (machine.stdout + machine.stderr).count("fixed") == 1 and "fixed 6 finding(s)" in machine.stderr
