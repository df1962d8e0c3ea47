"""Input the engine must survive: each case gets a clear per-file diagnostic (file, line,
what) where something is wrong, and the run goes on with the other files."""

import json
import os
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOOD = (FIXTURES / "FSD001" / "fix" / "read_only.py").read_bytes()
HEADER = b"from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, CPUOffload\n"

# name -> (bytes, expected code or None for "no error", expected row)
CASES = {
    "unclosed_bracket.py": (HEADER + b"with FSDP.summon_full_params(\n", "FSD900", 2),
    "python2_print.py": (HEADER + b"print 'summon_full_params'\n", "FSD900", 2),
    "bad_indent.py": (HEADER + b"def f():\nreturn FSDP.summon_full_params(m)\n", "FSD900", 3),
    "non_utf8.py": (HEADER + b"x = 'CPUOffload summon_full_params \xff\xfe'\n", "FSD902", 2),
    "binary.py": (b"\x7fELF\x00\x01\x02summon_full_params CPUOffload", "FSD902", 1),
    "latin1.py": (b"# -*- coding: latin-1 -*-\n" + HEADER + b"x = '\xe9'  # summon_full_params CPUOffload\n", None, 0),
    "bad_coding.py": (b"# -*- coding: no-such-codec -*-\nsummon_full_params CPUOffload\n", "FSD902", 1),
    "bom.py": (b"\xef\xbb\xbf" + GOOD, "FSD001", 4),
    "crlf.py": (GOOD.replace(b"\n", b"\r\n"), "FSD001", 4),
    "mixed_newlines.py": (GOOD.replace(b"\n", b"\r\n", 3), "FSD001", 4),
    "cr_only.py": (GOOD.replace(b"\n", b"\r"), "FSD001", 4),
    "tabs.py": (HEADER + b"model = FSDP(n, cpu_offload=CPUOffload(True))\nif x:\n\twith FSDP.summon_full_params(model):\n\t\tpass\n", "FSD001", 4),
    "form_feed.py": (b"\x0c" + GOOD, "FSD001", 4),
    "no_trailing_newline.py": (GOOD.rstrip(b"\n"), "FSD001", 4),
    "empty.py": (b"", None, 0),
    "deep_nesting.py": (HEADER + b"x = " + b"[" * 1000 + b"]" * 1000 + b"  # summon_full_params CPUOffload\n", "FSD900", 1),
    "nesting_at_limit.py": (HEADER + b"x = " + b"[" * 150 + b"]" * 150 + b"  # summon_full_params CPUOffload\n", None, 0),
    "very_deep_nesting.py": (HEADER + b"x = " + b"(" * 20000 + b")" * 20000 + b"  # summon_full_params CPUOffload\n", "FSD900", 1),
    "newer_syntax.py": (HEADER + b"type Alias = int\n" + GOOD, "FSD001", 6),
}


def _run(cli, tmp_path, *extra):
    result = cli("check", "--format", "json", "--no-cache", *extra, tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    return result, json.loads(result.stdout)


@pytest.fixture
def tree(tmp_path):
    for name, (data, _, _) in CASES.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_every_hostile_file_gets_its_diagnostic_and_the_run_goes_on(cli, tree, jobs):
    result, data = _run(cli, tree, "-j", jobs)
    by_file = {}
    for d in data:
        by_file.setdefault(Path(d["filename"]).name, []).append(d)
    for name, (_, code, row) in CASES.items():
        found = by_file.get(name, [])
        if code is None:
            assert [d for d in found if d["code"] in ("FSD900", "FSD901", "FSD902")] == [], (name, found)
            continue
        hits = [d for d in found if d["code"] == code]
        assert hits, (name, found)
        assert hits[0]["location"]["row"] == row, (name, hits[0])
        assert hits[0]["message"], name
    assert result.returncode == 1


@pytest.mark.slow
def test_large_generated_file(cli, tmp_path):
    block = GOOD.decode()
    # 2 MB, 25,000 functions: far past what the slicing and the cache are tuned for, and
    # still a few seconds per stage
    body = "\n".join(f"def f{i}(model):\n    x_{i} = [{i}] * 3\n    return x_{i}\n" for i in range(25000))
    target = tmp_path / "big.py"
    target.write_text(block + body)
    assert target.stat().st_size > 1_500_000
    result, data = _run(cli, tmp_path)
    assert [d["code"] for d in data].count("FSD001") == 6


def test_symlinks_spaces_and_non_ascii_names(cli, tmp_path):
    (tmp_path / "dir with space").mkdir()
    (tmp_path / "dir with space" / "modèle ü.py").write_bytes(GOOD)
    (tmp_path / "dir with space" / "loop").symlink_to(tmp_path)
    (tmp_path / "dangling.py").symlink_to(tmp_path / "missing.py")
    result, data = _run(cli, tmp_path)
    names = {(Path(d["filename"]).name, d["code"]) for d in data}
    assert ("modèle ü.py", "FSD001") in names
    assert ("dangling.py", "FSD902") in names
    broken = [d for d in data if Path(d["filename"]).name == "dangling.py"][0]
    assert "broken symbolic link" in broken["message"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(cli, tmp_path):
    target = tmp_path / "secret.py"
    target.write_bytes(GOOD)
    target.chmod(0)
    _, data = _run(cli, tmp_path)
    assert data[0]["code"] == "FSD902" and "cannot read file" in data[0]["message"]


def test_missing_path_is_a_usage_error(cli, tmp_path):
    """As ruff: a path that does not exist stops the run with exit status 2, naming it."""
    shutil.copy(FIXTURES / "FSD001" / "fix" / "read_only.py", tmp_path / "a.py")
    result = cli("check", "--format", "json", tmp_path / "a.py", tmp_path / "nope.py")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "no such file or directory" in result.stderr and "nope.py" in result.stderr
    assert "Traceback" not in result.stderr


def test_libcst_failure_that_cpython_accepts_becomes_a_diagnostic(monkeypatch):
    """libcst 1.9 accepted every construct CPython 3.11 accepts that we tried, so the
    parser's own failure modes are forced here: each becomes FSD900, never a traceback."""
    from fsdp_lint.engine import lint_text
    from fsdp_lint.lazy_libcst import cst
    from fsdp_lint.rules import ALL_RULES

    for exc in (RecursionError(), ValueError("unsupported"), MemoryError()):
        def boom(text, exc=exc):
            raise exc

        monkeypatch.setattr(cst, "parse_module", boom)  # the name the package parses with
        diagnostics = lint_text(GOOD.decode(), "x.py", ALL_RULES).diagnostics
        assert [d.code for d in diagnostics] == ["FSD900"], exc


def test_internal_error_in_one_rule(monkeypatch, capsys, tmp_path):
    from fsdp_lint import cli
    from fsdp_lint.rules.fsd002_summon_in_training_loop import SummonInTrainingLoop

    def broken(self, facts, report):
        raise KeyError("boom")

    monkeypatch.setattr(SummonInTrainingLoop, "check", broken)
    target = tmp_path / "loops.py"
    target.write_text((FIXTURES / "FSD002" / "fires" / "training_loops.py").read_text())
    code = cli.main(["check", "--format", "json", "--no-cache", "-j", "1", str(target)])
    data = json.loads(capsys.readouterr().out)
    assert code == 2
    internal = [d for d in data if d["code"] == "FSD901"]
    assert len(internal) == 1 and "FSD002" in internal[0]["message"] and "report" in internal[0]["message"]
    assert internal[0]["filename"].endswith("loops.py")
    assert any(d["code"] == "FSD104" for d in data)  # the other rules still report


def test_linting_never_executes_the_code(cli, tmp_path):
    marker = tmp_path / "pwned"
    source = (
        "import os\n"
        f"os.system('touch {marker}')\n"
        f"open({str(marker)!r}, 'w').write('x')\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, CPUOffload\n"
        "model = FSDP(net, cpu_offload=CPUOffload(True))\n"
        "with FSDP.summon_full_params(model):\n"
        "    __import__('os').system('touch pwned2')\n"
    )
    (tmp_path / "evil.py").write_text(source)
    result = cli("check", "--fix", "--unsafe-fixes", "--no-cache", tmp_path / "evil.py", cwd=tmp_path)
    assert result.returncode == 0
    assert not marker.exists() and not (tmp_path / "pwned2").exists()


def test_the_linter_never_imports_torch(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\nfrom fsdp_lint.cli import main\n"
        f"main(['check', '--no-cache', '--exit-zero', '-j', '1', {str(FIXTURES)!r}])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_worker_crash_names_the_file_and_the_others_finish(tmp_path, monkeypatch):
    """A crash in native code kills a worker process: the pool must not hang, the file
    that crashed gets FSD901, and every other file still gets its findings."""
    from fsdp_lint import check

    real = check.process_source

    def dying(source, settings, write=True):
        if source.path.endswith("boom.py"):
            os._exit(1)  # what a C-stack overflow in the parser looks like from outside
        return real(source, settings, write)

    monkeypatch.setattr(check, "process_source", dying)  # inherited by the forked workers
    for name in ("a.py", "boom.py", "c.py"):
        (tmp_path / name).write_bytes(GOOD)
    reports = check.run_files([str(tmp_path / n) for n in ("a.py", "boom.py", "c.py")], check.Settings(), jobs=2)
    codes = {Path(r.path).name: {d.code for d in r.diagnostics} for r in reports}
    assert codes == {"a.py": {"FSD001"}, "boom.py": {"FSD901"}, "c.py": {"FSD001"}}
