import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def run_cli(*args, cwd=None, input=None):
    """Run the installed CLI as a user would (a separate process)."""
    return subprocess.run(
        [sys.executable, "-m", "fsdp_lint", *map(str, args)],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=input is None or isinstance(input, str),
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )


@pytest.fixture
def cli():
    return run_cli


class VerifyRun:
    """One finished ``fsdp-lint verify --format json --log-dir LOG_DIR`` run: its process
    result, its JSON and its logs, judged by every test that needs those programs' results."""

    def __init__(self, result, log_dir: Path):
        self.result = result
        self.log_dir = log_dir
        self.data = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None

    def rows(self, codes=None, forms=None):
        """(code, form) -> result row, for ``codes`` and ``forms`` (None: all)."""
        assert self.data is not None, self.result.stderr
        return {
            (r["code"], r["form"]): r for r in self.data["results"]
            if (codes is None or r["code"] in codes) and (forms is None or r["form"] in forms)
        }


@pytest.fixture(scope="session")
def verify_every_rule_on_cpu(tmp_path_factory):
    """``fsdp-lint verify --observe`` of every rule and every form on CPU/gloo with 2 ranks,
    run once per test session (each of its programs is a torchrun job, run under
    ``verify --program``'s runtime layer): tests/test_verify.py judges the whole run,
    tests/test_verify_nodes.py compares two nodes' verdicts with its FSD004 and FSD102 rows,
    tests/test_verify_frameworks.py judges its framework forms, tests/test_verify_program.py
    judges what the runtime layer found in each rule's flagged and fixed program."""
    pytest.importorskip("torch")
    log_dir = tmp_path_factory.mktemp("verify-every-rule")
    return VerifyRun(run_cli("verify", "--observe", "--format", "json", "--log-dir", log_dir), log_dir)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the tests that judge the shared ``verify_every_rule_on_cpu`` run go
    to one worker (``--dist loadgroup``), so that run happens once per session, not once per
    worker, and they come first."""
    shared = [item for item in items if "verify_every_rule_on_cpu" in getattr(item, "fixturenames", ())]
    for item in shared:
        item.add_marker(pytest.mark.xdist_group("verify-every-rule"))
    if hasattr(config, "workerinput"):  # collected in an xdist worker (each collects the same, in this order)
        # the shared run is the longest single piece of work: handed out first, it overlaps
        # the rest of the suite instead of running alone at the end
        ids = set(map(id, shared))
        items[:] = shared + [item for item in items if id(item) not in ids]
