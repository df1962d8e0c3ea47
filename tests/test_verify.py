"""The runtime verifier: real torchrun runs on CPU/gloo, and its own plumbing.

Tests that start torchrun are marked ``slow``.  None depends on timing that load can break:
ranks that must end in a given order wait for each other's files (events), and bounds are
generous (they only stop a broken run from hanging the suite).
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")

from fsdp_lint.rules import ALL_RULES  # noqa: E402
from fsdp_lint.scenarios.registry import forms, scenario_for, scenarios_for  # noqa: E402
from fsdp_lint.verify import judge as judge_mod  # noqa: E402
from fsdp_lint.verify.launcher import launch  # noqa: E402
from fsdp_lint.verify.scenario import Scenario, installed_versions  # noqa: E402


def expected_verdict(rule, device="cpu", nproc=2, form=""):
    """What the scenario's own declarations say this torch (and these frameworks) must give."""
    scenario = scenario_for(rule.code, device, form)
    if scenario.cannot_run(device, nproc, torch.__version__, installed_versions(scenario.packages)):
        return judge_mod.SKIPPED
    if not scenario.expected_on(torch.__version__):
        return judge_mod.NOT_REPRODUCED
    return judge_mod.CONFIRMED


def expected_verdicts(rules, device="cpu", nproc=2):
    """(code, form) -> verdict, for every form of every rule."""
    return {
        (rule.code, s.form): expected_verdict(rule, device, nproc, s.form)
        for rule in rules for s in scenarios_for(rule.code, device)
    }


def _wait_for(predicate, what, bound=300.0):
    """Wait for an event (a file, a line); the bound only keeps a broken run from hanging."""
    end = time.monotonic() + bound
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.2)


@pytest.mark.slow
def test_verify_every_rule_on_cpu(verify_every_rule_on_cpu):
    result, tmp_path = verify_every_rule_on_cpu.result, verify_every_rule_on_cpu.log_dir  # run once per session
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    assert data["torch"] == torch.__version__ and data["backend"] == "gloo"
    verdicts = {(r["code"], r["form"]): r["verdict"] for r in data["results"]}
    assert verdicts == expected_verdicts(ALL_RULES), data
    assert result.returncode == 0
    assert "Failed to initialize NumPy" not in (tmp_path / "FSD004" / "flagged" / "rank0.log").read_text()
    # progress lines, and each rank's log kept where it says
    assert "[FSD001] flagged program: started" in result.stderr
    assert str(tmp_path) in result.stderr
    assert (tmp_path / "FSD001" / "flagged" / "rank0.log").exists()
    assert (tmp_path / "FSD001" / "fixed" / "rank1.log").exists()
    by_code = {r["code"]: r for r in data["results"] if r["form"] == ""}
    # FSD104: where each rank waits, from its stack when the launcher saw that no rank
    # progressed (long before the scenario's 60 s timeout)
    hang = by_code["FSD104"]["flagged"]
    assert re.match(r"hang, no rank progressed for \d+ s: rank 0 `", hang), hang
    assert hang.count("-> blocked in torch.distributed ") == 2, hang  # both ranks' stacks
    # evidence is the exception line, never a warning
    assert "Warning" not in by_code["FSD004"]["flagged"]
    assert "NotImplementedError" in by_code["FSD004"]["flagged"]


def test_verify_cuda_skips_with_the_reason_before_running(cli, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA devices")
    result = cli("verify", "FSD001", "FSD003", "--device", "cuda", "--log-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "| FSD001 |" in result.stdout
    assert "SKIPPED (needs 2 CUDA devices on this node, found 0)" in result.stdout
    assert "SKIPPED (the bug needs FSDP parameters on the CPU device" in result.stdout
    assert "started" not in result.stderr


def test_rule_named_twice_runs_once(cli, tmp_path):
    result = cli("verify", "FSD104", "collective-on-one-rank", "fsd104", "--device", "cuda", "--nproc", "1",
                 "--format", "json", "--log-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [(r["code"], r["form"]) for r in data["results"]] == [("FSD104", f) for f in forms("FSD104")]


def test_one_rank_skips_what_needs_two_with_the_reason(cli, tmp_path):
    """With --nproc 1 the rules that need a peer are SKIPPED, decided before running."""
    # (rules every form of which needs a peer: FSD106's format form fails on one rank too)
    needs_two = [r.code for r in ALL_RULES if all(s.min_ranks > 1 for s in scenarios_for(r.code, "cuda"))]
    assert {"FSD001", "FSD005", "FSD006", "FSD007", "FSD011", "FSD012", "FSD102", "FSD104"} <= set(needs_two)
    result = cli("verify", *needs_two, "--nproc", "1", "--format", "json", "--log-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    for item in data["results"]:
        assert item["verdict"] == "SKIPPED", item
        scenario = scenario_for(item["code"], "cpu", item["form"])
        if "cpu" in scenario.devices:
            assert item["reason"].startswith("needs at least 2 ranks, got 1"), item
        else:  # a framework form that cannot use FSDP on CPU says so first
            assert item["reason"] == scenario.not_on["cpu"], item
    assert "started" not in result.stderr


@pytest.mark.slow
def test_one_rank_runs_what_does_not_need_two(cli, tmp_path):
    result = cli("verify", "FSD010", "--nproc", "1", "--format", "json", "--log-dir", tmp_path)
    data = json.loads(result.stdout)
    verdicts = {(r["code"], r["form"]): r["verdict"] for r in data["results"]}
    # FSD010's state-dict form reproduces only before torch 2.1: on the installed torch its
    # flagged program runs clean, and the verifier says that this is expected
    # (FSD010's summon form raises on one rank as on two; the other rules that need one rank
    # are judged with two by the shared run, which one-rank runs would repeat)
    assert verdicts == {("FSD010", ""): "CONFIRMED", ("FSD010", "state-dict"): "NOT REPRODUCED"}
    state_dict = next(r for r in data["results"] if r["form"] == "state-dict")
    assert "as expected: the hazard is fixed from torch 2.1" in state_dict["reason"]
    assert result.returncode == 0


def _program(tmp_path, body):
    path = tmp_path / "prog.py"
    path.write_text(
        "import os, sys, time, signal\nrank = int(os.environ['RANK'])\n"
        "logs = os.environ['FSDP_LINT_RESULT_DIR']\n"
        "def wait_for(name):\n"
        "    while not os.path.exists(os.path.join(logs, name)):\n"
        "        time.sleep(0.1)\n"
        + textwrap.dedent(body)
    )
    return str(path)


@pytest.mark.slow
def test_hang_is_killed_at_the_timeout_with_each_ranks_stack(tmp_path):
    """Ranks that sleep use no CPU, but they wait for no peer: the progress watch (which
    looks after 2 quiet seconds here) must leave them to the timeout."""
    program = _program(
        tmp_path,
        "open(os.path.join(logs, f'started{rank}'), 'w').close()\n"
        "def wait_forever():\n"
        "    time.sleep(600)\n"
        "wait_forever()\n",
    )
    # 12 s: past the watch's probes at 2 and 6 s, before its next one at 14 s
    outcome = launch(program, str(tmp_path / "logs"), nproc=2, timeout=12, quiet=2.0)
    assert outcome.timed_out and outcome.hang_decided == "the 12 s timeout"
    assert outcome.seconds >= 12
    assert all(r.hung for r in outcome.ranks)
    assert outcome.ranks[0].describe() == "hung, killed at the timeout"
    scenario = Scenario(program="x", hazard="hang", hang_is_hazard=True, timeout=12)
    assert judge_mod.hazard_evidence(scenario, outcome) == [
        "hang at the 12 s timeout: rank 0 `time.sleep(600)` (line 9); rank 1 `time.sleep(600)` (line 9)"
    ]


@pytest.mark.slow
def test_a_rank_waiting_for_a_busy_peer_is_not_hung(tmp_path):
    """A rank blocked in a collective while its peer computes (first in its own process, then
    in a child process) for longer than the quiet window: the job runs to its end."""
    program = _program(
        tmp_path,
        "import json, subprocess\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "BUSY = 'import time\\nend = time.monotonic() + 5\\nwhile time.monotonic() < end:\\n    pass\\n'\n"
        "if rank == 0:\n"
        "    exec(BUSY)\n"
        "dist.barrier()\n"
        "if rank == 1:\n"
        "    subprocess.run([sys.executable, '-c', BUSY], check=True)\n"
        "dist.barrier()\n"
        "json.dump({'hazard': False}, open(os.path.join(logs, f'rank{rank}.json'), 'w'))\n"
        "dist.destroy_process_group()\n",
    )
    outcome = launch(program, str(tmp_path / "logs"), nproc=2, timeout=300, quiet=2.0)
    assert not outcome.timed_out and outcome.clean, outcome.describe()
    assert outcome.hang_decided == ""


@pytest.mark.slow
def test_ranks_blocked_in_a_collective_are_stopped_before_the_timeout(tmp_path):
    """Each rank waits to receive from the other: no rank can progress.  Stopped once none
    did for the quiet window, with both stacks, long before the timeout."""
    program = _program(
        tmp_path,
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.zeros(4)\n"
        "dist.recv(t, src=1 - rank)\n",
    )
    outcome = launch(program, str(tmp_path / "logs"), nproc=2, timeout=300)
    assert outcome.timed_out and outcome.early_hang, outcome.describe()
    assert re.fullmatch(r"no rank progressed for \d+ s", outcome.hang_decided)
    assert outcome.seconds < 300
    assert all(r.hung and r.describe() == f"hung, stopped after {outcome.hang_decided}" for r in outcome.ranks)
    scenario = Scenario(program="x", hazard="hang", hang_is_hazard=True, timeout=300)
    where = "`dist.recv(t, src=1 - rank)` (line 10) -> blocked in torch.distributed recv"
    assert judge_mod.hazard_evidence(scenario, outcome) == [
        f"hang, {outcome.hang_decided}: rank 0 {where}; rank 1 {where}"]


@pytest.mark.slow
def test_signal_death_is_reported(tmp_path):
    # rank 1 dies only once rank 0's program runs (its shim then forwards the launcher's SIGTERM)
    program = _program(
        tmp_path,
        "if rank == 0:\n"
        "    open(os.path.join(logs, 'ready0'), 'w').close()\n"
        "    time.sleep(600)\n"
        "wait_for('ready0')\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n",
    )
    outcome = launch(program, str(tmp_path / "logs"), nproc=2, timeout=300)
    assert not outcome.timed_out
    rank1 = outcome.ranks[1]
    assert rank1.signal == "SIGSEGV" and rank1.describe() == "killed by SIGSEGV"
    assert outcome.ranks[0].terminated  # the launcher stopped the healthy rank
    assert "rank 1: killed by SIGSEGV" in outcome.describe()


@pytest.mark.slow
def test_rank_failing_alone_is_reported_per_rank(tmp_path):
    # rank 1 fails only after rank 0 has ended (its exit record exists): torchrun cannot
    # stop rank 0 first, whatever the load
    program = _program(
        tmp_path,
        "import json\n"
        "if rank == 1:\n"
        "    wait_for('rank0.exit.json')\n"
        "    print('UserWarning: something harmless', flush=True)\n"
        "    print('RuntimeError: boom on rank one', flush=True)\n"
        "    print('[W] destroy_process_group() was not called before program exit', flush=True)\n"
        "    sys.exit(3)\n"
        "json.dump({'hazard': False}, open(os.path.join(logs, 'rank0.json'), 'w'))\n",
    )
    outcome = launch(program, str(tmp_path / "logs"), nproc=2, timeout=300)
    assert outcome.ranks[0].returncode == 0 and outcome.ranks[0].report == {"hazard": False}
    assert outcome.ranks[1].returncode == 3
    assert outcome.ranks[1].describe() == "exit 3: RuntimeError: boom on rank one"
    assert not outcome.clean
    scenario = Scenario(program="x", hazard="boom", errors=(r"RuntimeError: boom",))
    assert judge_mod.hazard_evidence(scenario, outcome) == ["rank 1: RuntimeError: boom on rank one"]


def test_verify_without_torch_says_how_to_get_it(tmp_path, cli):
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named torch (simulated)')\n")
    env_path = os.pathsep.join([str(tmp_path / "fake"), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "fsdp_lint", "verify", "FSD004", "--log-dir", str(tmp_path / "logs")],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": env_path},
    )
    assert result.returncode == 2
    assert "pip install '.[verify]' in the fsdp-lint clone" in result.stderr


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig, ignored_at_start", [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGINT", "SIGTERM", "SIGINT-inherited-ignored"])
def test_interrupt_stops_the_torchrun_job_and_keeps_the_logs(tmp_path, sig, ignored_at_start):
    """``ignored_at_start``: started as a shell starts a background job (``cmd &`` in a
    script, ``nohup``), with SIGINT ignored; Python then installs no handler of its own."""
    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fsdp_lint", "verify", "FSD104", "--timeout", "600", "--log-dir", str(logs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored_at_start else None,
    )
    run = logs / "FSD104" / "flagged"
    pid_files = [run / "rank0.pid", run / "rank1.pid"]
    pids = []
    try:
        # the event: both ranks' programs are running (and hang in the collective)
        _wait_for(lambda: all(p.exists() and p.read_text().strip() for p in pid_files), "both ranks started")
        pids = [int(p.read_text()) for p in pid_files]
        assert all(_alive(pid) for pid in pids)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            for pid in pids:  # a failed stop must not leave the job behind for the next tests
                with contextlib.suppress(OSError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "interrupted" in err and str(logs) in err
    _wait_for(lambda: not any(_alive(pid) for pid in pids), "the ranks are gone", bound=60)
    assert (run / "rank0.log").exists() and (run / "launcher.log").exists()


def test_a_process_that_does_not_catch_sigusr1_yet_is_never_sent_it(tmp_path):
    """The stack probe skips a rank's program that has not registered its SIGUSR1 handler
    (still starting): SIGUSR1's default action would kill it (seen in CI under load)."""
    import signal
    import subprocess
    import sys

    from fsdp_lint.verify.launcher import _catches, dump_stacks

    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc here")
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ready = tmp_path / "ready"
    caught = subprocess.Popen([sys.executable, "-c", (
        "import faulthandler, signal, sys, time\n"
        "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(30)\n"
    )], stderr=open(tmp_path / "rank1.log", "w"))
    try:
        while not ready.exists():
            time.sleep(0.05)
        time.sleep(0.3)
        assert not _catches(bare.pid, signal.SIGUSR1)
        assert _catches(caught.pid, signal.SIGUSR1)
        (tmp_path / "rank0.pid").write_text(str(bare.pid))
        (tmp_path / "rank1.pid").write_text(str(caught.pid))
        (tmp_path / "rank0.log").write_text("")
        dump_stacks(str(tmp_path), wait=5.0)
        assert bare.poll() is None, "the probe killed a process without a SIGUSR1 handler"
        assert caught.poll() is None
        assert "most recent call first" in (tmp_path / "rank1.log").read_text()  # the one that catches it dumped its stack
    finally:
        bare.kill()
        caught.kill()
