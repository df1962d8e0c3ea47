"""From two program outcomes (flagged, fixed) to a verdict.

CONFIRMED       the flagged program showed the hazard and the fixed program ran clean
NOT REPRODUCED  the flagged program ran clean on this torch/device: said plainly
FIX FAILED      the fixed program misbehaved (or showed the hazard): a bug in the rule
ERROR           launcher or environment problem, or a failure that is not the hazard
SKIPPED         the scenario cannot run on the chosen device (decided before running)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from fsdp_lint.verify.launcher import ProgramOutcome
from fsdp_lint.verify.scenario import Scenario

CONFIRMED = "CONFIRMED"
NOT_REPRODUCED = "NOT REPRODUCED"
FIX_FAILED = "FIX FAILED"
ERROR = "ERROR"
SKIPPED = "SKIPPED"


@dataclass
class Judgement:
    verdict: str
    flagged: str  # what the flagged program did, in words
    fixed: str
    reason: str = ""


def hazard_evidence(scenario: Scenario, outcome: ProgramOutcome) -> List[str]:
    evidence = []
    patterns = [re.compile(p) for p in scenario.errors]
    for rank in outcome.ranks:
        report = rank.report or {}
        if report.get("hazard"):
            evidence.append(f"rank {rank.rank}: {report.get('detail', 'hazard reported')}")
        if patterns:
            for line in rank.log_text().splitlines():
                if any(p.search(line) for p in patterns):
                    evidence.append(f"rank {rank.rank}: {line.strip()[:200]}")
                    break
        if scenario.signal_is_hazard and rank.signal and not rank.terminated:
            evidence.append(f"rank {rank.rank}: killed by {rank.signal}")
    if scenario.hang_is_hazard and outcome.timed_out:
        hung = [str(r.rank) for r in outcome.ranks if r.hung]
        evidence.append(f"hang: rank(s) {', '.join(hung) or '?'} killed at the {scenario.timeout:.0f} s timeout")
    return evidence


def _step_time(outcome: ProgramOutcome) -> Optional[float]:
    times = [r.report.get("step_time") for r in outcome.ranks if r.report and r.report.get("step_time")]
    return max(times) if times else None


def _slowdown(scenario: Scenario, flagged: ProgramOutcome, fixed: ProgramOutcome) -> Judgement:
    if not fixed.clean:
        return Judgement(FIX_FAILED, flagged.describe(), fixed.describe(), "the fixed program did not run clean")
    if not flagged.clean:
        return Judgement(ERROR, flagged.describe(), fixed.describe(), "the flagged program did not run clean")
    slow, fast = _step_time(flagged), _step_time(fixed)
    if not slow or not fast:
        return Judgement(ERROR, flagged.describe(), fixed.describe(), "no step_time reported")
    ratio = slow / fast
    flagged_text = f"{slow * 1000:.1f} ms/step ({ratio:.2f}x the fixed program)"
    fixed_text = f"{fast * 1000:.1f} ms/step"
    if ratio >= scenario.slowdown:
        return Judgement(CONFIRMED, flagged_text, fixed_text, f"slowdown {ratio:.2f}x >= {scenario.slowdown:.2f}x")
    return Judgement(
        NOT_REPRODUCED, flagged_text, fixed_text, f"slowdown {ratio:.2f}x < {scenario.slowdown:.2f}x threshold"
    )


def judge(scenario: Scenario, flagged: ProgramOutcome, fixed: ProgramOutcome) -> Judgement:
    for outcome in (flagged, fixed):
        if outcome.launcher_error:
            return Judgement(ERROR, flagged.describe(), fixed.describe(), outcome.launcher_error)
    if scenario.slowdown is not None:
        return _slowdown(scenario, flagged, fixed)
    seen = hazard_evidence(scenario, flagged)
    fixed_seen = hazard_evidence(scenario, fixed)
    flagged_text = "; ".join(seen) if seen else flagged.describe()
    if fixed_seen:
        return Judgement(FIX_FAILED, flagged_text, "; ".join(fixed_seen), "the fixed program shows the hazard")
    if not fixed.clean:
        if not seen and not flagged.clean:
            return Judgement(ERROR, flagged_text, fixed.describe(), "both programs failed without the hazard")
        return Judgement(FIX_FAILED, flagged_text, fixed.describe(), "the fixed program did not run clean")
    if seen:
        return Judgement(CONFIRMED, flagged_text, "clean: " + fixed.describe())
    if flagged.clean:
        return Judgement(
            NOT_REPRODUCED, "clean: " + flagged.describe(), "clean: " + fixed.describe(),
            "the flagged program ran clean on this torch and device",
        )
    return Judgement(
        ERROR, flagged.describe(), "clean: " + fixed.describe(),
        "the flagged program failed without the expected signature",
    )


def summarize(judgements: List[Tuple[str, Judgement]]) -> int:
    """Exit status: 1 on FIX FAILED or ERROR."""
    return 1 if any(j.verdict in (FIX_FAILED, ERROR) for _, j in judgements) else 0
