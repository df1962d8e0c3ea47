"""The verifier's torchrun jobs started from one host process (``verify.torchrun_host``):
each job is torchrun's own ``main`` in a child of the host, its ranks fresh interpreters;
the same job started as ``python -m torch.distributed.run`` (the switch off) ends the same
way."""

import json
import os
import sys

import pytest

from fsdp_lint.verify import torchrun_host
from fsdp_lint.verify.launcher import launch

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

# A rank's program that records its ancestors: program <- rank shim <- torchrun's agent
# (the job) <- what started the job.
PROGRAM = """\
import json, os, sys
def parent(pid):
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])
rank = int(os.environ["RANK"])
shim = os.getppid()
agent = parent(shim)
json.dump({"agent": agent, "above": parent(agent), "code": int(sys.argv[1]) if len(sys.argv) > 1 else 0},
          open(os.path.join(os.environ["FSDP_LINT_RESULT_DIR"], f"ancestry{rank}.json"), "w"))
if rank == 1 and os.environ.get("FAIL_RANK_ONE"):
    raise SystemExit(3)
if os.environ.get("FAIL_RANK_ONE"):
    import time
    time.sleep(60)  # still running when rank 1 fails: torchrun stops it, the same way every run
json.dump({"hazard": False}, open(os.path.join(os.environ["FSDP_LINT_RESULT_DIR"], f"rank{rank}.json"), "w"))
"""


def _ancestry(log_dir):
    return [json.loads((log_dir / f"ancestry{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture
def program(tmp_path):
    if not os.path.exists("/proc/self/stat"):
        pytest.skip("no /proc here")
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


def test_a_job_runs_under_the_host_and_ends_as_under_the_command(program, tmp_path, monkeypatch):
    monkeypatch.delenv(torchrun_host.HOST_ENV, raising=False)
    hosted = launch(str(program), str(tmp_path / "hosted"), nproc=2, timeout=120)
    assert hosted.clean, hosted.describe()
    host = torchrun_host._HOSTS[sys.executable]
    ancestry = _ancestry(tmp_path / "hosted")
    assert ancestry[0]["agent"] == ancestry[1]["agent"]  # one agent for both ranks
    assert {a["above"] for a in ancestry} == {host.proc.pid}  # the agent is the host's child

    monkeypatch.setenv(torchrun_host.HOST_ENV, "0")
    plain = launch(str(program), str(tmp_path / "plain"), nproc=2, timeout=120)
    assert plain.clean, plain.describe()
    assert host.proc.pid not in {a["above"] for a in _ancestry(tmp_path / "plain")}  # torchrun started as a command
    assert [r.describe() for r in plain.ranks] == [r.describe() for r in hosted.ranks] == ["exit 0", "exit 0"]


def test_a_failing_rank_is_reported_the_same_both_ways(program, tmp_path, monkeypatch):
    monkeypatch.setenv("FAIL_RANK_ONE", "1")
    outcomes = []
    for switch in ("1", "0"):
        monkeypatch.setenv(torchrun_host.HOST_ENV, switch)
        outcome = launch(str(program), str(tmp_path / f"run{switch}"), nproc=2, timeout=120)
        outcomes.append([(r.rank, r.returncode) for r in outcome.ranks])
        assert not outcome.clean and outcome.launcher_error is None
    # rank 0 is still running when rank 1 exits 3 (it waits): torchrun's agent stops it both
    # ways (had it already exited, its code would depend on timing)
    assert outcomes[0] == outcomes[1] and (1, 3) in outcomes[0] and outcomes[0][0][1] != 0, outcomes


def test_the_host_exits_when_its_input_closes(tmp_path):
    host = torchrun_host.Host(sys.executable, dict(os.environ))
    assert host.ready
    host.proc.stdin.close()
    assert host.proc.wait(timeout=30) == 0
