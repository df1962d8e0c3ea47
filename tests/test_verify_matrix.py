"""The torch-version matrix: ``fsdp-lint verify --python A --python B`` runs the scenarios
under each interpreter's torch and prints one table, rule by version.

Needs a second interpreter with another torch, named by ``FSDP_LINT_MATRIX_PYTHON`` (e.g. a
venv with ``pip install torch==2.14.1``, the release that fixed pytorch#188989); skipped
without it.  Not part of CI (see docs/verification.md, "Torch versions").
"""

import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")

from fsdp_lint.scenarios.registry import scenario_for  # noqa: E402

OTHER = os.environ.get("FSDP_LINT_MATRIX_PYTHON")


@pytest.mark.slow
@pytest.mark.matrix
@pytest.mark.skipif(not OTHER, reason="set FSDP_LINT_MATRIX_PYTHON to an interpreter with another torch")
def test_matrix_shows_the_release_that_fixed_the_bug(cli, tmp_path):
    result = cli("verify", "FSD001", "FSD003", "--python", sys.executable, "--python", OTHER,
                 "--format", "json", "--log-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    versions = [run["torch"] for run in runs]
    assert len(set(versions)) == 2, versions
    for run in runs:
        for item in run["results"]:
            scenario = scenario_for(item["code"], "cpu")
            expected = "CONFIRMED" if scenario.expected_on(run["torch"]) else "NOT REPRODUCED"
            assert item["verdict"] == expected, (run["torch"], item)
    assert {r["results"][0]["verdict"] for r in runs} == {"CONFIRMED", "NOT REPRODUCED"}, versions
