"""What a rule declares about its runtime scenario (no torch, no libcst here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class Scenario:
    program: str  # file name in fsdp_lint/scenarios/
    hazard: str  # what "the hazard happened" means, in words
    # the hand-written fix, for rules without an autofix: (old, new) replacements applied to
    # the program, each ``old`` found exactly once; empty: the rule's own autofix
    fixed_by: Tuple[Tuple[str, str], ...] = ()
    unsafe_fix: bool = False  # the autofix to verify is the unsafe one
    devices: Tuple[str, ...] = ("cpu", "cuda")
    not_on: Dict[str, str] = field(default_factory=dict)  # device -> why it cannot run there
    errors: Tuple[str, ...] = ()  # regexes: a rank's output matching one shows the hazard
    signal_is_hazard: bool = False  # a rank killed by a signal (SIGSEGV) shows the hazard
    hang_is_hazard: bool = False  # the program running into its timeout shows the hazard
    slowdown: Optional[float] = None  # flagged/fixed median step time at or above this shows it
    timeout: float = 180.0
