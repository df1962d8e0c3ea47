"""The real pre-commit, pointed at this repository: it blocks a commit with an FSD001
finding, the `--fix` hook rewrites the file, and the fixed file passes."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import git

pytest.importorskip("pre_commit")
pytestmark = pytest.mark.slow  # pre-commit builds the hook's environment

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "fixtures" / "FSD001" / "fix" / "read_only.py"
GOOD = ROOT / "fixtures" / "FSD001" / "fix" / "read_only.fixed.py"


@pytest.fixture
def hook_repo(pre_commit_hook):
    """A committed snapshot of this working tree (what pre-commit installs the hook from)."""
    return pre_commit_hook[:2]


@pytest.fixture
def user_repo(tmp_path):
    repo = tmp_path / "user"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    shutil.copy(BAD, repo / "train.py")
    git("add", "train.py", cwd=repo)
    return repo


def pre_commit(*args, cwd, home):
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never"}
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=cwd, capture_output=True, text=True, env=env)


def hook_config(snapshot, rev, fix=False) -> str:
    """A `.pre-commit-config.yaml` using the hook repository ``snapshot`` at ``rev`` (the
    --fix hook with ``fix``): pre-commit keys its environment by repository and commit."""
    args = "    args: [--fix]\n" if fix else ""
    return f"repos:\n- repo: {snapshot}\n  rev: {rev}\n  hooks:\n  - id: fsdp-lint\n{args}"


def test_hook_blocks_then_fix_hook_rewrites_then_passes(hook_repo, user_repo, pre_commit_hook):
    snapshot, rev = hook_repo
    home = pre_commit_hook[2]
    blocked = pre_commit("try-repo", str(snapshot), "fsdp-lint", "--files", "train.py", cwd=user_repo, home=home)
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert "FSD001" in blocked.stdout
    assert (user_repo / "train.py").read_text() == BAD.read_text()

    (user_repo / ".pre-commit-config.yaml").write_text(hook_config(snapshot, rev, fix=True))
    fixing = pre_commit("run", "--files", "train.py", cwd=user_repo, home=home)
    assert fixing.returncode == 1, fixing.stdout  # pre-commit fails a hook that changed files
    assert "files were modified by this hook" in fixing.stdout
    assert (user_repo / "train.py").read_text() == GOOD.read_text()

    git("add", "train.py", cwd=user_repo)
    passing = pre_commit("run", "--files", "train.py", cwd=user_repo, home=home)
    assert passing.returncode == 0, passing.stdout + passing.stderr


def _readme_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## pre-commit", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_readme_snippet_works_and_autoupdate_pins_a_commit(hook_repo, user_repo, pre_commit_hook):
    """The README's configuration, pointed at a copy of this repository (no release tags,
    like the real one), installs and runs; `pre-commit autoupdate` then pins a commit."""
    snapshot, rev = hook_repo
    home = pre_commit_hook[2]
    snippet = _readme_snippet()
    assert "https://github.com/fsdp-lint/fsdp-lint" in snippet
    config = user_repo / ".pre-commit-config.yaml"
    config.write_text(snippet.replace("https://github.com/fsdp-lint/fsdp-lint", str(snapshot)))
    fixing = pre_commit("run", "--files", "train.py", cwd=user_repo, home=home)
    assert "files were modified by this hook" in fixing.stdout, fixing.stdout + fixing.stderr
    assert (user_repo / "train.py").read_text() == GOOD.read_text()
    updated = pre_commit("autoupdate", cwd=user_repo, home=home)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert f"rev: {rev}" in config.read_text()
    git("add", "train.py", cwd=user_repo)
    passing = pre_commit("run", "--files", "train.py", cwd=user_repo, home=home)
    assert passing.returncode == 0, passing.stdout + passing.stderr
