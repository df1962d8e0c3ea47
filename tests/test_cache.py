"""The result cache: one per project (beside the nearest pyproject.toml), invisible to git,
movable (--cache-dir, FSD_LINT_CACHE_DIR), off with --no-cache, and a hit that really
skips the work (a warm run parses nothing)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fsdp_lint import check
from fsdp_lint.cache import Cache
from fsdp_lint.screen import Screening
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def project(tmp_path):
    """A repository laid out as ruff users have theirs: pyproject.toml at the top, code in src/."""
    root = tmp_path / "repo"
    (root / "src" / "trainer").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "trainer"\nversion = "0.1"\n')
    shutil.copy(FIXTURES / "FSD001" / "fix" / "read_only.py", root / "src" / "trainer" / "offload.py")
    shutil.copy(FIXTURES / "FSD002" / "fires" / "training_loops.py", root / "src" / "trainer" / "loops.py")
    (root / "src" / "trainer" / "data.py").write_text(
        '"""Batches for the trainer; gathering (summon_full_params, CPUOffload) is offload.py\'s job."""\n'
        "import torch\n\n\ndef collate(batch):\n    return torch.stack(batch)\n"
    )
    return root


def _run(cwd, *args, env=None):
    """``fsdp-lint check`` in ``cwd``, with only the given FSD_LINT_CACHE_DIR."""
    command_env = {k: v for k, v in os.environ.items() if k != "FSD_LINT_CACHE_DIR"}
    command_env.update(env or {})
    result = run_cli("check", *args, cwd=cwd, env=command_env)
    assert result.returncode == 1, result.stdout + result.stderr
    return result


def _entries(directory: Path):
    return [p for p in directory.rglob("*.json")] if directory.is_dir() else []


def test_cache_sits_beside_the_nearest_pyproject_and_git_ignores_it(project):
    _run(project / "src", ".")  # run from a subfolder, as the user did
    cache = project / ".fsdp_lint_cache"
    assert _entries(cache), list(project.rglob("*"))
    assert not (project / "src" / ".fsdp_lint_cache").exists()
    assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    staged = subprocess.run(["git", "ls-files"], cwd=project, check=True, capture_output=True, text=True).stdout
    assert "src/trainer/offload.py" in staged and ".fsdp_lint_cache" not in staged


def test_without_pyproject_the_cache_is_in_the_working_directory(project):
    (project / "pyproject.toml").unlink()
    _run(project / "src", ".")
    assert _entries(project / "src" / ".fsdp_lint_cache")


def test_cache_dir_from_env_option_and_no_cache(project, tmp_path):
    elsewhere = tmp_path / "ci-cache"
    _run(project, "src", env={"FSD_LINT_CACHE_DIR": str(elsewhere)})
    assert _entries(elsewhere) and (elsewhere / ".gitignore").is_file()
    assert not (project / ".fsdp_lint_cache").exists()
    option = tmp_path / "option-cache"
    _run(project, "--cache-dir", option, "src", env={"FSD_LINT_CACHE_DIR": str(elsewhere)})
    assert _entries(option)  # the option wins over the environment
    shutil.rmtree(elsewhere)
    shutil.rmtree(option)
    _run(project, "--no-cache", "src", env={"FSD_LINT_CACHE_DIR": str(elsewhere)})
    assert not elsewhere.exists() and not (project / ".fsdp_lint_cache").exists()


def test_clean_removes_the_project_cache_and_nothing_else(cli, project):
    _run(project / "src", ".")
    assert cli("clean", cwd=project / "src").returncode == 0
    assert not (project / ".fsdp_lint_cache").exists()
    keep = project / "notes"
    keep.mkdir()
    (keep / "todo.txt").write_text("x")
    assert "no cache" in cli("clean", "notes", cwd=project).stdout
    assert (keep / "todo.txt").exists()


def test_a_cache_hit_does_no_work(project, tmp_path, monkeypatch):
    """The warm run answers every file from the cache: no libcst parse, no ``ast`` stage.
    With a cache whose ``get`` always misses, this fails."""
    paths = sorted(str(p) for p in (project / "src").rglob("*.py"))
    work = {"lint": 0, "compile": 0}
    real_lint, real_compile = check.lint_text, Screening.confirmed_live

    def counted_lint(*args, **kwargs):
        work["lint"] += 1
        return real_lint(*args, **kwargs)

    def counted_compile(self):
        work["compile"] += 1
        return real_compile(self)

    monkeypatch.setattr(check, "lint_text", counted_lint)
    monkeypatch.setattr(Screening, "confirmed_live", counted_compile)
    settings = check.Settings(cache=Cache(str(tmp_path / "cache")))
    cold = check.run_files(paths, settings, jobs=1)
    assert work == {"lint": 2, "compile": 3}, work  # data.py: settled by the compile stage
    work.update(lint=0, compile=0)
    warm = check.run_files(paths, check.Settings(cache=Cache(str(tmp_path / "cache"))), jobs=1)
    assert work == {"lint": 0, "compile": 0}
    assert [(r.path, [(d.code, d.location, d.fix) for d in r.diagnostics]) for r in warm] == [
        (r.path, [(d.code, d.location, d.fix) for d in r.diagnostics]) for r in cold
    ]
    assert sum(len(r.diagnostics) for r in warm) == 12


def test_a_changed_file_or_other_rules_miss_the_cache(project, tmp_path, monkeypatch):
    target = project / "src" / "trainer" / "offload.py"
    calls = []
    real = check.lint_text
    monkeypatch.setattr(check, "lint_text", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    cache = Cache(str(tmp_path / "cache"))
    check.run_files([str(target)], check.Settings(cache=cache))
    target.write_text(target.read_text() + "\n")
    check.run_files([str(target)], check.Settings(cache=cache))
    from fsdp_lint.check import Overrides

    check.run_files([str(target)], check.Settings(cache=cache, overrides=Overrides(ignore=["FSD104"])))
    assert calls == [str(target)] * 3


def test_a_change_to_fsdp_lints_own_code_misses_the_cache(tmp_path, monkeypatch):
    """An editable install whose code changed under the same version: the fingerprint of its
    modules differs, and so does every cache key (``cache.code_fingerprint``)."""
    from fsdp_lint import cache, code_identity

    package = tmp_path / "fsdp_lint"
    (package / "rules").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    rule = package / "rules" / "fsd001.py"
    rule.write_text("CODE = 'FSD001'\n")
    (package / "README.txt").write_text("not code")
    before = code_identity.fingerprint_of(str(package))
    assert code_identity.fingerprint_of(str(package)) == before  # stable
    (package / "README.txt").write_text("not code, changed")
    assert code_identity.fingerprint_of(str(package)) == before  # only modules count
    rule.write_text("CODE = 'FSD001'  # edited\n")
    after = code_identity.fingerprint_of(str(package))
    assert after != before
    monkeypatch.setattr(cache, "code_fingerprint", lambda: before)
    key = Cache.key(b"x = 1\n", ["FSD001"])
    monkeypatch.setattr(cache, "code_fingerprint", lambda: after)
    assert Cache.key(b"x = 1\n", ["FSD001"]) != key
