"""The runtime verifier: real torchrun runs on CPU/gloo, and its own plumbing."""

import json
import os
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from fsdp_lint.rules import ALL_RULES  # noqa: E402
from fsdp_lint.verify import judge as judge_mod  # noqa: E402
from fsdp_lint.verify.launcher import launch  # noqa: E402
from fsdp_lint.verify.scenario import Scenario  # noqa: E402


def _version_tuple(text):
    return tuple(int(part) for part in text.split("+")[0].split(".")[:3])


def expected_cpu_verdict(rule):
    """A rule whose hazard torch fixed at or before the installed version must not reproduce."""
    if rule.hazard_fixed_in and _version_tuple(torch.__version__) >= _version_tuple(rule.hazard_fixed_in):
        return judge_mod.NOT_REPRODUCED
    if "cpu" not in rule.scenario.devices:
        return judge_mod.SKIPPED
    return judge_mod.CONFIRMED


def test_verify_every_rule_on_cpu(cli, tmp_path):
    result = cli("verify", "--format", "json", "--log-dir", tmp_path)
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    assert data["torch"] == torch.__version__ and data["backend"] == "gloo"
    verdicts = {r["code"]: r["verdict"] for r in data["results"]}
    assert verdicts == {rule.code: expected_cpu_verdict(rule) for rule in ALL_RULES}, data
    assert result.returncode == 0
    # progress lines, and each rank's log kept where it says
    assert "[FSD001] flagged program: started" in result.stderr
    assert str(tmp_path) in result.stderr
    assert (tmp_path / "FSD001" / "flagged" / "rank0.log").exists()
    assert (tmp_path / "FSD001" / "fixed" / "rank1.log").exists()


def test_verify_text_table_and_cuda_skip(cli, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA devices")
    result = cli("verify", "FSD001", "--device", "cuda", "--log-dir", tmp_path)
    assert result.returncode == 0
    assert "| FSD001 |" in result.stdout and "SKIPPED (needs 2 CUDA devices, found 0)" in result.stdout


def _program(tmp_path, body):
    path = tmp_path / "prog.py"
    path.write_text("import os, sys, time, signal\nrank = int(os.environ['RANK'])\n" + textwrap.dedent(body))
    return str(path)


def test_hang_is_killed_at_the_timeout(tmp_path):
    program = _program(tmp_path, "time.sleep(600)\n")
    outcome = launch(program, str(tmp_path / "logs"), nproc=2, timeout=8)
    assert outcome.timed_out and outcome.seconds < 60
    assert all(r.hung for r in outcome.ranks)
    scenario = Scenario(program="x", hazard="hang", hang_is_hazard=True, timeout=8)
    assert judge_mod.hazard_evidence(scenario, outcome) == ["hang: rank(s) 0, 1 killed at the 8 s timeout"]


def test_signal_death_is_reported(tmp_path):
    program = _program(tmp_path, "if rank == 1:\n    os.kill(os.getpid(), signal.SIGSEGV)\ntime.sleep(30)\n")
    outcome = launch(program, str(tmp_path / "logs"), nproc=2, timeout=60)
    assert not outcome.timed_out
    rank1 = outcome.ranks[1]
    assert rank1.signal == "SIGSEGV" and rank1.describe() == "killed by SIGSEGV"
    assert outcome.ranks[0].terminated  # the launcher stopped the healthy rank
    assert "rank 1: killed by SIGSEGV" in outcome.describe()


def test_rank_failing_alone_is_reported_per_rank(tmp_path):
    program = _program(
        tmp_path,
        "import json\n"
        "if rank == 1:\n    print('RuntimeError: boom on rank one', flush=True)\n    sys.exit(3)\n"
        "json.dump({'hazard': False}, open(os.path.join(os.environ['FSDP_LINT_RESULT_DIR'], 'rank0.json'), 'w'))\n",
    )
    outcome = launch(program, str(tmp_path / "logs"), nproc=2, timeout=60)
    assert outcome.ranks[1].returncode == 3
    assert outcome.ranks[1].describe() == "exit 3: RuntimeError: boom on rank one"
    assert outcome.ranks[0].returncode == 0 and outcome.ranks[0].report == {"hazard": False}
    assert not outcome.clean
    scenario = Scenario(program="x", hazard="boom", errors=(r"RuntimeError: boom",))
    assert judge_mod.hazard_evidence(scenario, outcome) == ["rank 1: RuntimeError: boom on rank one"]


def test_verify_without_torch_says_how_to_get_it(tmp_path, cli):
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named torch (simulated)')\n")
    env_path = os.pathsep.join([str(tmp_path / "fake"), os.environ.get("PYTHONPATH", "")])
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", "fsdp_lint", "verify"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": env_path},
    )
    assert result.returncode == 2
    assert "pip install 'fsdp-lint[verify]'" in result.stderr
