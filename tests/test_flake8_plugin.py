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
