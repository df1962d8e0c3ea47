"""README's "Beside ruff": what it says, checked with the real ruff and flake8 (issue 27,
item 5)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SECTION = README.split("## Beside ruff", 1)[1].split("\n## ", 1)[0]

SOURCE = (
    "import os  # noqa: F401\n"
    "from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP\n\n"
    "model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))\n"
    "with FSDP.summon_full_params(model):  # noqa: FSD001\n"
    "    print(model)\n"
)


def _ruff(tmp_path, pyproject):
    pytest.importorskip("ruff")
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "train.py").write_text(SOURCE)
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "RUF100,RUF102,F401", "--output-format", "concise",
         "train.py"],
        cwd=tmp_path, capture_output=True, text=True,
    )


def test_ruff_reports_fsd_noqa_codes_without_external_and_keeps_them_with_it(tmp_path):
    without = _ruff(tmp_path, "[tool.ruff]\n")
    # ruff 0.17: RUF102 "Invalid rule code in `# noqa`: FSD001" (older: RUF100 "unknown")
    assert without.returncode == 1 and "FSD001" in without.stdout, without.stdout
    toml = re.search(r"```toml\n(.*?)```", SECTION, re.S).group(1)
    assert 'external = ["FSD"]' in toml
    with_external = _ruff(tmp_path, toml)
    assert with_external.returncode == 0, with_external.stdout + with_external.stderr


def test_the_hooks_are_listed_ruff_fsdp_lint_then_the_formatter():
    yaml = re.search(r"```yaml\n(.*?)```", SECTION, re.S).group(1)
    hooks = re.findall(r"- id: ([\w-]+)", yaml)
    assert hooks == ["ruff", "fsdp-lint", "ruff-format"]


def test_flake8_needs_nothing_more(cli, tmp_path):
    """flake8 with the plugin: the FSD noqa suppresses, the F401 one too, and nothing is
    reported about the codes."""
    (tmp_path / "train.py").write_text(SOURCE)
    result = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "F,FSD", "train.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.stdout.splitlines() == ["train.py:4:14: F821 undefined name 'net'"], result.stdout + result.stderr
    (tmp_path / "train.py").write_text(SOURCE.replace("  # noqa: FSD001", ""))
    result = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "F,FSD", "train.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "train.py:5:6: FSD001 " in result.stdout
    (tmp_path / "train.py").write_text(SOURCE)
    # and fsdp-lint agrees: the one finding is suppressed
    assert cli("check", "--no-cache", "train.py", cwd=tmp_path).returncode == 0
