"""From two program outcomes (flagged, fixed) to a verdict.

CONFIRMED       the flagged program showed the hazard and the fixed program ran clean
NOT REPRODUCED  the flagged program ran clean on this torch/device: said plainly
FIX FAILED      the fixed program misbehaved (or showed the hazard): a bug in the rule
ERROR           launcher or environment problem, or a failure that is not the hazard
SKIPPED         the scenario cannot run here: device, rank count or torch version (decided
                before running, with the reason)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from fsdp_lint.verify.launcher import ProgramOutcome
from fsdp_lint.verify.logs import is_warning_line
from fsdp_lint.verify.scenario import Scenario
from fsdp_lint.verify.stacks import blocked_at

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
    outcomes: Tuple[ProgramOutcome, ...] = field(default=(), compare=False, repr=False)  # flagged, fixed
    # ``verify --observe``: what the runtime layer reported of each program ("flagged"/"fixed")
    layer: Dict[str, dict] = field(default_factory=dict, compare=False, repr=False)


def clean_text(outcome: ProgramOutcome) -> str:
    """A clean program in words: its ranks' own reports when they measured something."""
    details = [f"rank {r.rank}: {r.report['detail']}" for r in outcome.ranks if r.report and r.report.get("detail")]
    return "clean: " + ("; ".join(_merge(details)) if details else outcome.describe())


def _merge(lines: List[str]) -> List[str]:
    """``rank 0: X`` and ``rank 1: X`` -> ``ranks 0, 1: X`` (reports that gathered every rank's
    value say the same on each rank)."""
    order: List[str] = []
    ranks: dict = {}
    for line in lines:
        match = re.match(r"rank (\d+): (.*)$", line, re.S)
        if not match:
            order.append(line)
            continue
        text = match.group(2)
        if text not in ranks:
            ranks[text] = []
            order.append(text)
        ranks[text].append(match.group(1))
    merged = []
    for text in order:
        if text in ranks:
            who = ranks[text]
            merged.append(f"rank {who[0]}: {text}" if len(who) == 1 else f"ranks {', '.join(who)}: {text}")
        else:
            merged.append(text)
    return merged


def hazard_evidence(scenario: Scenario, outcome: ProgramOutcome) -> List[str]:
    """What in ``outcome`` shows the scenario's hazard (empty: nothing).  A Python warning
    is never evidence, whatever the patterns say: only exceptions, measurements, signals and
    hangs are."""
    evidence = []
    patterns = [re.compile(p) for p in scenario.errors]
    for rank in outcome.ranks:
        report = rank.report or {}
        if report.get("hazard"):
            evidence.append(f"rank {rank.rank}: {report.get('detail', 'hazard reported')}")
        if patterns:
            for line in rank.log_text().splitlines():
                if is_warning_line(line):
                    continue
                if any(p.search(line) for p in patterns):
                    evidence.append(f"rank {rank.rank}: {line.strip()[:200]}")
                    break
        if scenario.signal_is_hazard and rank.signal and not rank.terminated:
            evidence.append(f"rank {rank.rank}: killed by {rank.signal}")
    if scenario.hang_is_hazard and outcome.timed_out:
        evidence.append(hang_evidence(outcome))
    return _merge(evidence)


def hang_evidence(outcome: ProgramOutcome) -> str:
    """``hang, no rank progressed for 5 s: rank 0 `state = model.state_dict()` (line 15) ->
    blocked in torch.distributed all_gather_into_tensor; rank 1 ...`` from each rank's stack
    dump (``hang at the 60 s timeout: ...`` when the timeout decided)."""
    where = []
    for rank in outcome.ranks:
        if not rank.hung:
            where.append(f"rank {rank.rank} {rank.describe()}")
            continue
        at = blocked_at(rank.log_text(), outcome.program)
        where.append(f"rank {rank.rank} {at}" if at else f"rank {rank.rank} hung (no stack dumped)")
    words = outcome.hang_words()
    return (f"hang {words}: " if words.startswith("at ") else f"hang, {words}: ") + "; ".join(where)


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


def judge(
    scenario: Scenario, flagged: ProgramOutcome, fixed: ProgramOutcome, torch_version: Optional[str] = None
) -> Judgement:
    """``torch_version``: the torch the programs ran on; a clean run on a release from the
    scenario's ``hazard_fixed_in`` on says that this is the expected outcome."""
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
        return Judgement(CONFIRMED, flagged_text, clean_text(fixed))
    if flagged.clean:
        why = "the flagged program ran clean on this torch and device"
        if torch_version and not scenario.expected_on(torch_version):
            why += f", as expected: the hazard is fixed from torch {scenario.hazard_fixed_in}"
        return Judgement(NOT_REPRODUCED, clean_text(flagged), clean_text(fixed), why)
    return Judgement(
        ERROR, flagged.describe(), clean_text(fixed),
        "the flagged program failed without the expected signature",
    )


def summarize(judgements: List[Tuple[str, Judgement]]) -> int:
    """Exit status: 1 on FIX FAILED or ERROR."""
    return 1 if any(j.verdict in (FIX_FAILED, ERROR) for _, j in judgements) else 0
