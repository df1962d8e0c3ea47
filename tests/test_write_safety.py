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


@pytest.mark.slow
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


@pytest.mark.slow
def test_self_check_on_torch_distributed(cli):
    torch = pytest.importorskip("torch")
    tree = Path(torch.__file__).parent / "distributed"
    data = _self_check(cli, tree)
    # torch's own FSDP package calls the APIs internally: whatever it reports must be real findings
    assert all(d["code"].startswith("FSD") for d in data)


# --- permissions, owner, group, symbolic links -------------------------------------------

NOBODY = 65534


def _fix_as(cwd, *args, user=None):
    """``fsdp-lint check --fix`` as a separate process, as another user when ``user`` is given."""
    import os

    as_user = [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    return subprocess.run(
        [*as_user, sys.executable, "-m", "fsdp_lint", "check", "--fix", "--no-cache", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )


@pytest.fixture
def shared_dir():
    """A folder another user can reach (pytest's own tmp_path is private to root)."""
    import os
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="fsdp-lint-perm-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _other_user_or_skip():
    import os
    import shutil

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run fsdp-lint as another user")
    probe = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c", "import fsdp_lint, libcst"],
        cwd="/", capture_output=True, text=True,
    )
    if probe.returncode != 0:  # the checkout or its venv lies under a folder only root may enter
        pytest.skip(f"user {NOBODY} cannot import fsdp-lint from this checkout: {probe.stderr.strip().splitlines()[-1:]}")
    return NOBODY


def test_read_only_file_is_not_written_and_keeps_its_findings(tmp_path):
    """Root may write anything, so the file's own write bits decide: a file without any
    write bit (chmod 444) is never replaced, whoever runs the fix."""
    import os
    import stat

    target = tmp_path / "train.py"
    target.write_text(BAD)
    target.chmod(0o444)
    result = _fix_as(tmp_path, "train.py")
    assert result.returncode == 1, result.stderr
    assert target.read_text() == BAD and stat.S_IMODE(os.stat(target).st_mode) == 0o444
    assert "train.py:4:6: FSD001 [*]" in result.stdout  # the finding is still shown
    refused = [line for line in result.stdout.splitlines() if "FSD902" in line]
    assert len(refused) == 1 and "fixes not written: read-only file (mode 444" in refused[0], result.stdout
    assert "fixed" not in result.stderr


def test_file_the_user_cannot_write_is_not_replaced(shared_dir):
    """The folder is writable, so the old rename would have replaced root's file."""
    import os

    user = _other_user_or_skip()
    os.chmod(shared_dir, 0o777)
    target = shared_dir / "train.py"
    target.write_text(BAD)
    target.chmod(0o644)  # root's file: others may read it only
    result = _fix_as(shared_dir, "train.py", user=user)
    assert result.returncode == 1, result.stderr
    assert target.read_text() == BAD and os.stat(target).st_uid == 0
    assert "train.py:4:6: FSD001 [*]" in result.stdout
    assert "FSD902 fixes not written: permission denied: you cannot write this file" in result.stdout
    assert not list(shared_dir.glob(".fsdp-lint-*"))


def test_folder_the_user_cannot_write_keeps_the_findings(shared_dir):
    import os

    user = _other_user_or_skip()
    target = shared_dir / "train.py"
    target.write_text(BAD)
    os.chown(target, user, user)  # the user's own file, in root's folder
    result = _fix_as(shared_dir, "train.py", user=user)
    assert result.returncode == 1, result.stderr
    assert target.read_text() == BAD
    assert "train.py:4:6: FSD001 [*]" in result.stdout  # was lost: the FSD902 alone was shown
    assert f"the folder {shared_dir} is not writable" in result.stdout


def test_fix_keeps_owner_group_and_mode(tmp_path):
    import os
    import stat

    if os.geteuid() != 0:
        pytest.skip("needs root to give the file another owner")
    target = tmp_path / "train.py"
    target.write_text(BAD)
    os.chown(target, NOBODY, NOBODY)
    target.chmod(0o640)
    result = _fix_as(tmp_path, "train.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert target.read_text() == GOOD
    st = os.stat(target)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o640)


def test_fix_writes_through_a_symbolic_link(tmp_path):
    """The link stays a link; its target gets the fix (ruff writes through links too).
    Linting the folder reaches the file twice, by the link and by its own name."""
    import os

    (tmp_path / "real").mkdir()
    (tmp_path / "proj").mkdir()
    real = tmp_path / "real" / "target.py"
    real.write_text(BAD)
    link = tmp_path / "proj" / "link.py"
    link.symlink_to(os.path.join("..", "real", "target.py"))
    result = _fix_as(tmp_path, "proj/link.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert link.is_symlink() and os.readlink(link) == os.path.join("..", "real", "target.py")
    assert real.read_text() == GOOD
    real.write_text(BAD)
    both = _fix_as(tmp_path, ".")
    assert both.returncode == 0, both.stdout + both.stderr
    assert link.is_symlink() and real.read_text() == GOOD
    assert not list((tmp_path / "real").glob(".fsdp-lint-*"))
