"""The real flake8, with fsdp-lint's plugin installed, against the CLI on every fixture."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flake8")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def flake8(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "FSD", "--format", "%(path)s|%(row)d|%(col)d|%(code)s", *map(str, args)],
        capture_output=True, text=True, cwd=cwd,
    )


def _cli_findings(cli, target):
    data = json.loads(cli("check", "--format", "json", "--no-cache", target).stdout)
    return {(str(Path(d["filename"]).resolve()), d["location"]["row"], d["location"]["column"], d["code"]) for d in data}


def _flake8_findings(result):
    found = set()
    for line in result.stdout.splitlines():
        path, row, col, code = line.split("|")
        found.add((str(Path(path).resolve()), int(row), int(col), code))
    return found


def test_same_findings_as_the_cli_on_every_fixture(cli):
    result = flake8("--jobs", "2", FIXTURES)
    flake = _flake8_findings(result)
    assert flake, result.stderr
    assert flake == _cli_findings(cli, FIXTURES)


def test_flake8_options_and_noqa(tmp_path):
    target = tmp_path / "m.py"
    target.write_text((FIXTURES / "FSD002" / "fires" / "training_loops.py").read_text())
    assert len(_flake8_findings(flake8(target))) == 6
    ignored = _flake8_findings(flake8("--extend-ignore", "FSD002", target))
    assert {f[3] for f in ignored} == {"FSD104"}
    text = target.read_text().replace("with FSDP.summon_full_params(model, writeback=False):\n            print",
                                      "with FSDP.summon_full_params(model, writeback=False):  # noqa: FSD002\n            print")
    target.write_text(text)
    assert len(_flake8_findings(flake8(target))) == 5


def test_unparseable_file_does_not_abort_flake8(tmp_path):
    (tmp_path / "a.py").write_text("from torch.distributed.fsdp import FullyShardedDataParallel as F\nsummon_full_params(\n")
    (tmp_path / "b.py").write_text((FIXTURES / "FSD012" / "fires" / "bare.py").read_text())
    result = subprocess.run([sys.executable, "-m", "flake8", "--select", "FSD,E999", str(tmp_path)],
                            capture_output=True, text=True)
    assert "E999" in result.stdout and "FSD012" in result.stdout, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_flake8_reads_the_same_tool_fsdp_lint_table_as_the_cli(cli, tmp_path):
    """per-file-ignores, target-torch-version, select and ignore from pyproject.toml reach
    the plugin: flake8 and the CLI report the same findings on the same project."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "train").mkdir()
    loops = (FIXTURES / "FSD002" / "fires" / "training_loops.py").read_text()
    (tmp_path / "tests" / "test_loops.py").write_text(loops)
    (tmp_path / "train" / "loops.py").write_text(loops)
    (tmp_path / "train" / "offload.py").write_text((FIXTURES / "FSD001" / "fix" / "read_only.py").read_text())
    (tmp_path / "train" / "grads.py").write_text((FIXTURES / "FSD009" / "fires" / "with_grads.py").read_text())
    (tmp_path / "pyproject.toml").write_text(
        "[tool.fsdp-lint]\n"
        'ignore = ["FSD009"]\n'
        'per-file-ignores = { "tests/*" = ["FSD002"] }\n'
        'target-torch-version = "2.14.1"\n'
    )
    before = _flake8_findings(flake8(tmp_path, cwd=tmp_path))
    found = _cli_findings(cli, tmp_path)
    codes = {(Path(f[0]).relative_to(tmp_path).as_posix(), f[3]) for f in found}
    assert ("train/loops.py", "FSD002") in codes and ("tests/test_loops.py", "FSD104") in codes
    assert not {c for c in codes if c[0] == "tests/test_loops.py" and c[1] == "FSD002"}
    assert not {c for c in codes if c[1] in ("FSD001", "FSD009")}  # fixed in 2.14.1; ignored
    assert before == found
    (tmp_path / "pyproject.toml").write_text('[tool.fsdp-lint]\nselect = ["FSD104"]\n')
    only = _flake8_findings(flake8(tmp_path, cwd=tmp_path))
    assert only and {f[3] for f in only} == {"FSD104"}


def test_flake8_reports_an_invalid_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.fsdp-lint]\ntarget-torch-version = "banana"\n')
    (tmp_path / "m.py").write_text((FIXTURES / "FSD001" / "fix" / "read_only.py").read_text())
    result = subprocess.run([sys.executable, "-m", "flake8", "--select", "FSD", "m.py"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert "FSD902 invalid fsdp-lint configuration" in result.stdout and "target-torch-version" in result.stdout
    assert "Traceback" not in result.stderr
