"""Findings of the static check against the hazards the job showed, by rule and site.

CONFIRMED    the hazard was observed at the finding's site (the evidence says how)
RAN CLEAN    the site ran to completion, the rule's observation window was reached there
             (``windows``: e.g. the optimizer's first step for FSD101, the summon block's
             exit for FSD001) and the hazard did not show on this torch/device
NOT REACHED  the site never ran in this job, or it ran and the job went on without reaching
             the rule's observation window (the evidence says which)
ERROR        the site ran, but the job failed before the rule's observation window was
             reached: nothing is known of the hazard (the evidence has the job's error)
MISSED BY STATIC ANALYSIS   a hazard observed at a site no finding of that rule names

A finding's site is the rows of its flagged expression (a multi-line call matches on any of
its rows); a hazard's sites are where the user's code called the API (and, for a forward or
backward inside a summon, the block's own site as well).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

from fsdp_lint.diagnostics import Diagnostic
from fsdp_lint.verify.program.evidence import Hazard, JobEvidence
from fsdp_lint.verify.program.windows import NOT_OBSERVED, WINDOW_TEXT

CONFIRMED = "CONFIRMED"
RAN_CLEAN = "RAN CLEAN"
NOT_REACHED = "NOT REACHED"
ERROR = "ERROR"
MISSED = "MISSED BY STATIC ANALYSIS"


@dataclass
class FindingResult:
    finding: Diagnostic
    verdict: str
    evidence: List[str] = field(default_factory=list)


@dataclass
class Verification:
    results: List[FindingResult]
    missed: List[Hazard]
    job: JobEvidence

    def count(self, verdict: str) -> int:
        if verdict == MISSED:
            return len(self.missed)
        return sum(1 for r in self.results if r.verdict == verdict)


def _span(finding: Diagnostic) -> Tuple[str, int, int]:
    first, last = finding.location.row, max(finding.location.row, finding.end_location.row)
    return os.path.realpath(finding.filename), first, last


def _covers(span: Tuple[str, int, int], site) -> bool:
    path, first, last = span
    return site is not None and os.path.realpath(site[0]) == path and first <= site[1] <= last


def join(findings: Sequence[Diagnostic], job: JobEvidence) -> Verification:
    results = []
    matched = set()
    for finding in sorted(findings, key=lambda d: d.sort_key()):
        span = _span(finding)
        hits = [
            (i, h) for i, h in enumerate(job.hazards)
            if h.rule == finding.code and any(_covers(span, s) for s in h.sites())
        ]
        if hits:
            matched.update(i for i, _ in hits)
            evidence = [line for _, h in hits for line in h.evidence]
            results.append(FindingResult(finding, CONFIRMED, evidence))
        elif any(_covers(span, site) for site in job.windows.get(finding.code, ())):
            ran = (f"the site ran and reached {WINDOW_TEXT[finding.code]}; "
                   "the hazard did not show on this torch/device")
            results.append(FindingResult(finding, RAN_CLEAN, [ran]))
        elif any(_covers(span, site) for site in job.reached):
            window = WINDOW_TEXT.get(finding.code)
            short = f"the site ran, but never reached {window}" if window else f"the site ran, but {NOT_OBSERVED}"
            if job.error:
                results.append(FindingResult(finding, ERROR, [f"{short}: the job failed first: {job.error}"]))
            else:
                results.append(FindingResult(finding, NOT_REACHED, [short]))
        else:
            never = "the site never ran in this job"
            results.append(FindingResult(finding, NOT_REACHED, [never + (f" (the job failed first: {job.error})"
                                                                           if job.error else "")]))
    missed = [h for i, h in enumerate(job.hazards) if i not in matched]
    missed.sort(key=lambda h: (h.site or ("", 0), h.rule))
    return Verification(results, missed, job)
