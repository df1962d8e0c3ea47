"""What the verifier knows about one rule's runtime scenario (no torch, no libcst here).

A scenario names its program, what it needs to run (devices, ranks, torch versions), how
the fixed program is derived, and how the judge recognises the hazard.  The declarations
live in ``fsdp_lint/scenarios/registry.py``, keyed by rule code; rules never import this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple


REAL_CPU_OFFLOAD_WHY = "real CPU parameter offload needs CUDA (pin_memory raises without an accelerator)"


def version_tuple(text: str) -> Tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; pre-release tags (``2.14.0a0``) count as the release."""
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        match = re.match(r"\d+", piece)
        parts.append(int(match.group()) if match else 0)
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


@dataclass(frozen=True)
class Scenario:
    program: str  # file name in fsdp_lint/scenarios/
    hazard: str  # what "the hazard happened" means, in words
    # -- what it needs to run (unmet: SKIPPED with the reason, decided before running) --------
    devices: Tuple[str, ...] = ("cpu", "cuda")
    not_on: Dict[str, str] = field(default_factory=dict)  # device -> why it cannot run there
    min_ranks: int = 1  # the hazard needs this many ranks (world size 1 falls back to NO_SHARD)
    ranks_why: str = ""  # why it needs them
    real_cpu_offload: bool = False  # CPUOffload(offload_params=True): needs an accelerator
    torch_min: Dict[str, str] = field(default_factory=dict)  # device -> lowest torch it can run on
    torch_why: str = ""  # why, for torch_min
    # -- how the fixed program is derived ------------------------------------------------------
    # the hand-written fix, for rules without an autofix: (old, new) replacements applied to
    # the program, each ``old`` found exactly once; empty: the rule's own autofix
    fixed_by: Tuple[Tuple[str, str], ...] = ()
    unsafe_fix: bool = False  # the autofix to verify is the unsafe one
    # -- how the judge recognises the hazard ---------------------------------------------------
    errors: Tuple[str, ...] = ()  # regexes: a rank's output line matching one (never a warning)
    signal_is_hazard: bool = False  # a rank killed by a signal (SIGSEGV) shows the hazard
    hang_is_hazard: bool = False  # the program running into its timeout shows the hazard
    slowdown: Optional[float] = None  # flagged/fixed median time at or above this shows it
    hazard_fixed_in: Optional[str] = None  # torch release whose runtime no longer shows it
    timeout: float = 180.0

    def cannot_run(self, device: str, nproc: int, torch_version: Optional[str]) -> Optional[str]:
        """Why this scenario cannot run here (the SKIPPED reason), or None."""
        if self.real_cpu_offload and device != "cuda":
            return REAL_CPU_OFFLOAD_WHY
        if device not in self.devices:
            return self.not_on.get(device, f"runs only on {', '.join(self.devices)}")
        if nproc < self.min_ranks:
            why = f": {self.ranks_why}" if self.ranks_why else ""
            return f"needs at least {self.min_ranks} ranks, got {nproc}{why}"
        lowest = self.torch_min.get(device)
        if lowest and torch_version and version_tuple(torch_version) < version_tuple(lowest):
            why = f": {self.torch_why}" if self.torch_why else ""
            return f"needs torch >= {lowest} on {device}, found {torch_version}{why}"
        return None

    def expected_on(self, torch_version: str) -> bool:
        """Whether this torch should still show the hazard (False from ``hazard_fixed_in`` on)."""
        return not (self.hazard_fixed_in and version_tuple(torch_version) >= version_tuple(self.hazard_fixed_in))
