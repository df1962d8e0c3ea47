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
