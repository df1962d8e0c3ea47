"""Writes are atomic and race-free; unparseable files are never written; the linter
checks its own source and torch's distributed package without a crash."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent
BAD = (FIXTURES / "FSD001" / "fix" / "read_only.py").read_text()
GOOD = (FIXTURES / "FSD001" / "fix" / "read_only.fixed.py").read_text()


def test_concurrent_fix_processes_leave_each_file_original_or_fixed(tmp_path):
    for index in range(40):
        (tmp_path / f"m{index}.py").write_text(BAD)
    command = [sys.executable, "-m", "fsdp_lint", "check", "--fix", "--no-cache", "-j", "1", str(tmp_path)]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outputs):
        assert proc.returncode in (0, 1), err
        assert b"Traceback" not in err
    for index in range(40):
        assert (tmp_path / f"m{index}.py").read_text() in (BAD, GOOD)
    assert not list(tmp_path.glob(".fsdp-lint-*"))  # no temp file left behind
    final = subprocess.run(command, capture_output=True)
    assert final.returncode == 0 and all((tmp_path / f"m{i}.py").read_text() == GOOD for i in range(40))


def test_file_changed_between_read_and_write_is_not_overwritten(tmp_path, monkeypatch):
    from fsdp_lint import source as source_mod
    from fsdp_lint.check import Settings, process_file

    target = tmp_path / "m.py"
    target.write_text(BAD)
    real = source_mod.read_source

    def read_then_edit(path):
        result = real(path)
        Path(path).write_text(BAD + "\n# edited by someone else\n")
        return result

    monkeypatch.setattr("fsdp_lint.check.read_source", read_then_edit)
    report = process_file(str(target), Settings(fix=True))
    assert target.read_text().endswith("# edited by someone else\n")
    assert any("changed on disk" in d.message for d in report.diagnostics)


def test_unparseable_file_is_never_written(cli, tmp_path):
    target = tmp_path / "broken.py"
    data = BAD.encode() + b"\nwith FSDP.summon_full_params(model:\n"
    target.write_bytes(data)
    result = cli("check", "--fix", "--unsafe-fixes", "--no-cache", target)
    assert result.returncode == 1 and "FSD900" in result.stdout
    assert target.read_bytes() == data


def _compiles(path: Path) -> bool:
    try:
        compile(path.read_bytes(), str(path), "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def _self_check(cli, tree):
    result = cli("check", "--format", "json", "--no-cache", "--exit-zero", tree)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    bad = [d for d in data if d["code"] in ("FSD900", "FSD901", "FSD902") and _compiles(Path(d["filename"]))]
    assert bad == []
    return data


def test_self_check_on_own_source(cli):
    _self_check(cli, ROOT / "fsdp_lint")


def test_self_check_on_torch_distributed(cli):
    torch = pytest.importorskip("torch")
    tree = Path(torch.__file__).parent / "distributed"
    data = _self_check(cli, tree)
    # torch's own FSDP package calls the APIs internally: whatever it reports must be real findings
    assert all(d["code"].startswith("FSD") for d in data)
