import json
import shutil
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import git

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


# ``run_cli`` forks this test process (fsdp_lint and libcst already imported) and runs the
# command line's ``main`` in the child, a separate process with its own folder, streams and
# exit status as ``python -m fsdp_lint`` has, without the 0.3-0.4 s of imports each time.
# ``verify`` and ``server`` (threads, process groups, long-lived streams), a platform without
# ``os.fork``, an ``env`` setting what fsdp_lint reads on import (``FSDP_LINT_SLICE``) and
# ``FSDP_LINT_TEST_FORK=0`` start the module as a command instead.
_FORKED = hasattr(os, "fork") and os.environ.get("FSDP_LINT_TEST_FORK", "1") != "0"


def run_cli(*args, cwd=None, input=None, env=None):
    """Run the CLI as a user would (a separate process, with ``env`` as its whole
    environment when given), and what it printed."""
    argv = [str(a) for a in args]
    text = input is None or isinstance(input, str)
    env = {**(os.environ if env is None else env), "PYTHONIOENCODING": "utf-8"}
    if (
        not _FORKED
        or (argv and argv[0] in ("verify", "server"))
        or env.get("FSDP_LINT_SLICE") != os.environ.get("FSDP_LINT_SLICE")
    ):
        return subprocess.run(
            [sys.executable, "-m", "fsdp_lint", *argv], cwd=cwd, input=input, capture_output=True, text=text, env=env
        )
    return _forked_cli(argv, cwd, input, text, env)


def _forked_cli(argv, cwd, input, text, env):
    import io
    import tempfile

    from fsdp_lint.cli import main

    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        if input is not None:
            stdin.write(input.encode("utf-8") if isinstance(input, str) else input)
            stdin.seek(0)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                if cwd is not None:
                    os.chdir(cwd)
                for fd, stream in ((0, stdin), (1, stdout), (2, stderr)):
                    os.dup2(stream.fileno(), fd)
                os.environ.clear()
                os.environ.update(env)
                sys.stdin = io.TextIOWrapper(io.FileIO(0, "rb", closefd=False), encoding="utf-8")
                sys.stdout = io.TextIOWrapper(io.FileIO(1, "wb", closefd=False), encoding="utf-8")
                sys.stderr = io.TextIOWrapper(
                    io.FileIO(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
                )
                sys.argv = ["fsdp-lint", *argv]
                try:
                    code = main(argv)
                except SystemExit as exit_:
                    code = exit_.code
                if code is None:
                    code = 0
                elif not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        returncode = os.waitstatus_to_exitcode(status)
        outputs = []
        for stream in (stdout, stderr):
            stream.seek(0)
            data = stream.read()
            outputs.append(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=None).read() if text else data)
    return subprocess.CompletedProcess([sys.executable, "-m", "fsdp_lint", *argv], returncode, *outputs)


@pytest.fixture
def cli():
    return run_cli


class VerifyRun:
    """One finished ``fsdp-lint verify --format json --log-dir LOG_DIR`` run: its process
    result, its JSON and its logs, judged by every test that needs those programs' results."""

    def __init__(self, result, log_dir: Path, report: Path = None):
        self.result = result
        self.log_dir = log_dir
        self.report = report  # the run's --report page
        self.data = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None

    def rows(self, codes=None, forms=None):
        """(code, form) -> result row, for ``codes`` and ``forms`` (None: all)."""
        assert self.data is not None, self.result.stderr
        return {
            (r["code"], r["form"]): r for r in self.data["results"]
            if (codes is None or r["code"] in codes) and (forms is None or r["form"] in forms)
        }


# ``fsdp-lint verify --observe`` of every rule, shared by every test process: started in the
# background by the first process to reach ``_start_shared_verify`` (pytest-xdist runs one
# process per core), so it overlaps the rest of the suite; each process that needs it waits
# for its result files.
_VERIFY_ARGS = ("verify", "--observe", "--format", "json")
_RUNNER = (
    "import os, subprocess, sys\n"
    "out, err, rc, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]\n"
    "with open(out, 'w') as o, open(err, 'w') as e:\n"
    "    code = subprocess.run(args, stdout=o, stderr=e).returncode\n"
    "open(rc + '.tmp', 'w').write(str(code))\n"
    "os.replace(rc + '.tmp', rc)\n"
)


def _shared_root(tmp_path_factory) -> Path:
    """The folder every test process of this session shares (under xdist each has its own
    basetemp below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _needs_shared_verify(session) -> bool:
    return any("verify_every_rule_on_cpu" in getattr(item, "fixturenames", ()) for item in session.items)


@pytest.fixture(scope="session", autouse=True)
def _start_shared_verify(request, tmp_path_factory):
    if not _needs_shared_verify(request.session):
        return
    try:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return
    except (ImportError, ValueError):
        return
    root = _shared_root(tmp_path_factory)
    try:
        os.close(os.open(root / "verify-every-rule.started", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return  # another test process started it
    log_dir = root / "verify-every-rule"
    log_dir.mkdir(exist_ok=True)
    subprocess.Popen(
        [sys.executable, "-c", _RUNNER, str(root / "verify.out"), str(root / "verify.err"), str(root / "verify.rc"),
         sys.executable, "-m", "fsdp_lint", *_VERIFY_ARGS, "--log-dir", str(log_dir),
         "--report", str(root / "verify-report.html")],
        env={**os.environ, "PYTHONIOENCODING": "utf-8"}, start_new_session=True,
    )


@pytest.fixture(scope="session")
def verify_every_rule_on_cpu(tmp_path_factory, _start_shared_verify):
    """``fsdp-lint verify --observe`` of every rule and every form on CPU/gloo with 2 ranks,
    run once per test session whatever the number of test processes (each of its programs
    is a torchrun job, run under ``verify --program``'s runtime layer): tests/test_verify.py
    judges the whole run, tests/test_verify_nodes.py compares two nodes' verdicts with its
    FSD004 and FSD102 rows, tests/test_verify_frameworks.py judges its framework forms,
    tests/test_verify_program.py judges what the runtime layer found in each rule's flagged
    and fixed program, tests/test_html_report.py the HTML page it wrote (``--report``)."""
    pytest.importorskip("torch")
    root = _shared_root(tmp_path_factory)
    rc = root / "verify.rc"
    deadline = time.monotonic() + 3600
    while not rc.exists():
        assert (root / "verify-every-rule.started").exists(), "the shared verify run was never started"
        assert time.monotonic() < deadline, "the shared verify run did not finish within an hour"
        time.sleep(0.5)
    result = subprocess.CompletedProcess(
        [sys.executable, "-m", "fsdp_lint", *_VERIFY_ARGS], int(rc.read_text()),
        (root / "verify.out").read_text(encoding="utf-8"), (root / "verify.err").read_text(encoding="utf-8"),
    )
    return VerifyRun(result, root / "verify-every-rule", root / "verify-report.html")


# pre-commit's tests install the hook from one committed snapshot of this working tree into
# one PRE_COMMIT_HOME shared by every test process of the session: pre-commit builds the
# hook's environment once per (repository, revision) and locks its store while it does, so
# the tests that run the hook (tests/test_pre_commit.py, tests/test_notebooks.py) pay for
# one build instead of one per test.
@pytest.fixture(scope="session")
def pre_commit_hook(tmp_path_factory):
    """(snapshot folder, its commit, the shared PRE_COMMIT_HOME)."""
    from filelock import FileLock

    root = _shared_root(tmp_path_factory)
    snapshot, home = root / "hook-repo", root / "pre-commit-home"
    with FileLock(str(root / "hook-repo.lock")):
        if not (snapshot / ".git").is_dir() or not (root / "hook-repo.done").exists():
            snapshot.mkdir(exist_ok=True)
            for name in git("ls-files", "-co", "--exclude-standard", cwd=ROOT).splitlines():
                source = ROOT / name
                if source.is_file() and not name.startswith("tests/data"):
                    (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, snapshot / name)
            for args in (("init", "-q", "-b", "main"), ("add", "-A"),
                         ("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "s")):
                git(*args, cwd=snapshot)
            home.mkdir(exist_ok=True)
            (root / "hook-repo.done").write_text("")
    return snapshot, git("rev-parse", "HEAD", cwd=snapshot), home
