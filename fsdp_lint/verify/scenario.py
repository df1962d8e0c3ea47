"""What a rule declares about its runtime scenario (no torch, no libcst here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class Scenario:
    program: str  # file name in fsdp_lint/scenarios/
    hazard: str  # what "the hazard happened" means, in words
    fixed_program: Optional[str] = None  # hand-written fix; None: the rule's own autofix
    unsafe_fix: bool = False  # the autofix to verify is the unsafe one
    devices: Tuple[str, ...] = ("cpu", "cuda")
    not_on: Dict[str, str] = field(default_factory=dict)  # device -> why it cannot run there
    errors: Tuple[str, ...] = ()  # regexes: a rank's output matching one shows the hazard
    signal_is_hazard: bool = False  # a rank killed by a signal (SIGSEGV) shows the hazard
    hang_is_hazard: bool = False  # the program running into its timeout shows the hazard
    slowdown: Optional[float] = None  # flagged/fixed median step time at or above this shows it
    timeout: float = 180.0
