"""Verdict logic on synthetic outcomes (no processes)."""

from fsdp_lint.verify import judge as j
from fsdp_lint.verify.launcher import ProgramOutcome, RankOutcome
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
