"""Verdict logic on synthetic outcomes (no processes)."""

from fsdp_lint.verify import judge as j
from fsdp_lint.verify.launcher import ProgramOutcome, RankOutcome
from fsdp_lint.verify.logs import failure_line
from fsdp_lint.verify.scenario import Scenario


def outcome(*ranks, timed_out=False):
    out = ProgramOutcome("p", "/nonexistent", timed_out=timed_out)
    out.ranks = list(ranks)
    return out


def ok(rank, **report):
    return RankOutcome(rank, returncode=0, report={"hazard": False, **report})


SCENARIO = Scenario(program="p", hazard="h")


def test_confirmed_not_reproduced_fix_failed_error():
    bad = outcome(RankOutcome(0, returncode=0, report={"hazard": True, "detail": "shard changed"}), ok(1))
    clean = outcome(ok(0), ok(1))
    assert j.judge(SCENARIO, bad, clean).verdict == j.CONFIRMED
    assert j.judge(SCENARIO, clean, clean).verdict == j.NOT_REPRODUCED
    assert j.judge(SCENARIO, bad, bad).verdict == j.FIX_FAILED
    crashed = outcome(RankOutcome(0, returncode=1), ok(1))
    assert j.judge(SCENARIO, crashed, clean).verdict == j.ERROR
    assert j.judge(SCENARIO, crashed, crashed).verdict == j.ERROR
    assert j.judge(SCENARIO, bad, crashed).verdict == j.FIX_FAILED


def test_not_reproduced_says_when_the_hazard_is_fixed_on_this_torch():
    fixed_in = Scenario(program="p", hazard="h", hazard_fixed_in="2.1")
    clean = outcome(ok(0), ok(1))
    on_new = j.judge(fixed_in, clean, clean, "2.13.0+cpu")
    assert on_new.verdict == j.NOT_REPRODUCED and "as expected: the hazard is fixed from torch 2.1" in on_new.reason
    on_old = j.judge(fixed_in, clean, clean, "2.0.1")
    assert on_old.verdict == j.NOT_REPRODUCED and "as expected" not in on_old.reason


def test_signal_counts_only_when_declared():
    segv = outcome(RankOutcome(0, returncode=-11, signal="SIGSEGV"), ok(1))
    clean = outcome(ok(0), ok(1))
    assert j.judge(Scenario(program="p", hazard="h", signal_is_hazard=True), segv, clean).verdict == j.CONFIRMED
    assert j.judge(SCENARIO, segv, clean).verdict == j.ERROR


def test_slowdown_threshold():
    scenario = Scenario(program="p", hazard="slow", slowdown=1.10)
    slow = outcome(ok(0, step_time=0.12), ok(1, step_time=0.11))
    fast = outcome(ok(0, step_time=0.10), ok(1, step_time=0.10))
    assert j.judge(scenario, slow, fast).verdict == j.CONFIRMED
    assert j.judge(scenario, fast, fast).verdict == j.NOT_REPRODUCED
    assert j.summarize([("a", j.judge(scenario, fast, fast))]) == 0
    assert j.summarize([("a", j.Judgement(j.FIX_FAILED, "", ""))]) == 1


def _logged(tmp_path, rank, text, **kw):
    path = tmp_path / f"rank{rank}.log"
    path.write_text(text)
    return RankOutcome(rank, log_path=str(path), **kw)


def test_a_warning_is_never_evidence_even_when_the_pattern_matches(tmp_path):
    warning = (
        "/x/torch/distributed/fsdp/_unshard_param_utils.py:290: UserWarning: offload_to_cpu=True and "
        "rank0_only=False may result in the unsharded parameters being redundantly copied to CPU memory\n"
        "  warnings.warn(\n"
    )
    scenario = Scenario(program="p", hazard="h", errors=(r"redundantly copied to CPU memory",))
    warned = outcome(_logged(tmp_path, 0, warning, returncode=0, report={"hazard": False}), ok(1))
    assert j.hazard_evidence(scenario, warned) == []
    assert j.judge(scenario, warned, outcome(ok(0), ok(1))).verdict == j.NOT_REPRODUCED


def test_evidence_is_the_exception_line_not_a_trailing_warning(tmp_path):
    log = (
        "Traceback (most recent call last):\n"
        '  File "flagged.py", line 12, in main\n'
        "[rank0]: NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet\n"
        "[W1130 destroy_process_group() was not called before program exit, which can leak resources.\n"
        "/x/warnings.py:3: UserWarning: something\n"
    )
    rank = _logged(tmp_path, 0, log, returncode=1)
    assert rank.describe() == "exit 1: [rank0]: NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet"
    assert failure_line("all good\nUserWarning: x\n") == "all good"


def test_identical_reports_of_every_rank_are_said_once():
    same = {"hazard": True, "detail": "norms 4.41, 9.52"}
    both = outcome(RankOutcome(0, returncode=0, report=same), RankOutcome(1, returncode=0, report=same))
    assert j.hazard_evidence(SCENARIO, both) == ["ranks 0, 1: norms 4.41, 9.52"]


def test_hang_evidence_names_where_each_rank_waits(tmp_path):
    program = tmp_path / "flagged.py"
    program.write_text("import x\n\ndef main():\n    state = model.state_dict()\n    model(batch).sum().backward()\n")
    dump = (
        "Thread 0x00007f1 (most recent call first):\n"
        '  File "/v/lib/torch/distributed/distributed_c10d.py", line 4001 in {func}\n'
        '  File "/v/lib/torch/distributed/c10d_logger.py", line 81 in wrapper\n'
        '  File "/v/lib/torch/nn/modules/module.py", line 2100 in {outer}\n'
        f'  File "{program}", line {{line}} in main\n'
        '  File "<string>", line 5 in <module>\n'
    )
    ranks = [
        _logged(tmp_path, 0, "gathered\n" + dump.format(func="all_gather_into_tensor", outer="state_dict", line=4),
                hung=True),
        _logged(tmp_path, 1, dump.format(func="_reduce_scatter_base", outer="_call_impl", line=5), hung=True),
    ]
    hung = outcome(*ranks, timed_out=True)
    hung.program, hung.timeout = str(program), 60
    scenario = Scenario(program="p", hazard="hang", hang_is_hazard=True)
    assert j.hazard_evidence(scenario, hung) == [
        "hang at the 60 s timeout: "
        "rank 0 `state = model.state_dict()` (line 4) -> state_dict -> blocked in torch.distributed "
        "all_gather_into_tensor; "
        "rank 1 `model(batch).sum().backward()` (line 5) -> blocked in torch.distributed _reduce_scatter_base"
    ]
    assert j.judge(scenario, hung, outcome(ok(0), ok(1))).verdict == j.CONFIRMED
    # stopped early by the launcher's progress watch: the evidence says so, not "the timeout"
    early = outcome(*ranks, timed_out=True)
    early.program, early.timeout, early.hang_decided = str(program), 60, "no rank progressed for 5 s"
    assert j.hazard_evidence(scenario, early) == [
        "hang, no rank progressed for 5 s: "
        "rank 0 `state = model.state_dict()` (line 4) -> state_dict -> blocked in torch.distributed "
        "all_gather_into_tensor; "
        "rank 1 `model(batch).sum().backward()` (line 5) -> blocked in torch.distributed _reduce_scatter_base"
    ]
    assert j.judge(scenario, early, outcome(ok(0), ok(1))).verdict == j.CONFIRMED


def test_a_rank_waits_in_torch_distributed_only_where_its_main_thread_does():
    from fsdp_lint.verify.stacks import all_dumps, waits_in_torch_distributed

    def dump(*frames, current=True):
        head = "Current thread" if current else "Thread"
        return (f"{head} 0x00007f1 (most recent call first):\n"
                + "".join(f'  File "{f}", line 3 in fn\n' for f in frames)
                + '  File "<string>", line 5 in <module>\n\n')

    c10d = "/v/lib/torch/distributed/distributed_c10d.py"
    fsdp = "/v/lib/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py"
    side = "Thread 0x00007f2 (most recent call first):\n" + f'  File "{c10d}", line 9 in barrier\n\n'
    assert waits_in_torch_distributed("log line\n" + dump(c10d, "/w/prog.py"))
    assert waits_in_torch_distributed(dump(fsdp, "/w/prog.py"))  # a work object's wait()
    assert not waits_in_torch_distributed(dump("/w/prog.py"))  # time.sleep, input(): not a peer
    assert not waits_in_torch_distributed(dump("/v/lib/torch/distributed/checkpoint/filesystem.py", "/w/p.py"))
    assert not waits_in_torch_distributed(side)  # only a side thread waits: the main thread's place is unknown
    assert not waits_in_torch_distributed(dump(c10d, "/w/p.py") + "more output\n" + dump("/w/p.py"))  # the last one
    assert not waits_in_torch_distributed("no dump at all\n")
    assert len(all_dumps(dump(c10d) + "x\n" + dump(c10d, current=False) + side)) == 2


def test_writeback_cost_on_gpu_is_judged_by_its_ratio():
    from fsdp_lint.scenarios.registry import scenario_for

    gpu = scenario_for("FSD001", "cuda")
    default = outcome(ok(0, step_time=0.0463), ok(1, step_time=0.0460))
    no_writeback = outcome(ok(0, step_time=0.0282), ok(1, step_time=0.0280))
    assert j.judge(gpu, default, no_writeback).verdict == j.CONFIRMED  # +64 %, as measured on 2 x H200
    without_offload = outcome(ok(0, step_time=0.0123), ok(1, step_time=0.0123))
    assert j.judge(gpu, without_offload, outcome(ok(0, step_time=0.0112), ok(1, step_time=0.0112))).verdict == (
        j.NOT_REPRODUCED  # +10 %: the cost without offload stays under the threshold
    )
