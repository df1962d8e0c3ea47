"""What the verifier knows about one rule's runtime scenario (no torch, no libcst here).

A scenario names its program, what it needs to run (devices, ranks, torch versions,
other distributions such as a training framework), how the fixed program is derived, and
how the judge recognises the hazard.  The declarations live in
``fsdp_lint/scenarios/registry.py``, keyed by rule code; rules never import this.

A rule can have several *forms*: the same hazard reached through plain torch (form ``""``)
and through a framework's own call (form ``"accelerate"``: ``accelerator.prepare``).  Every
form runs and is judged on its own, shown as ``FSD104 (accelerate)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import metadata
from typing import Dict, Mapping, Optional, Tuple

from fsdp_lint.versions import version_tuple


REAL_CPU_OFFLOAD_WHY = "real CPU parameter offload needs CUDA (pin_memory raises without an accelerator)"


def spec_matches(version: str, spec: str) -> bool:
    """Whether ``version`` meets ``spec``: comma-separated clauses of ``==``, ``!=``, ``>=``,
    ``<=``, ``>``, ``<`` and a version (``==1.15.*`` matches by prefix); releases only, as
    ``version_tuple`` reads them (no ``packaging`` needed)."""
    have = version_tuple(version)
    for clause in (c.strip() for c in spec.split(",") if c.strip()):
        match = re.match(r"(==|!=|>=|<=|>|<)\s*(\S+)$", clause)
        if not match:
            raise ValueError(f"unsupported version spec {clause!r} (use ==, !=, >=, <=, >, <)")
        op, text = match.groups()
        if text.endswith(".*"):
            prefix = tuple(int(p) for p in text[:-2].split("."))
            same = have[: len(prefix)] == prefix
            ok = same if op == "==" else (not same if op == "!=" else None)
            if ok is None:
                raise ValueError(f"a wildcard works with == and != only: {clause!r}")
        else:
            want = version_tuple(text)
            ok = {"==": have == want, "!=": have != want, ">=": have >= want, "<=": have <= want,
                  ">": have > want, "<": have < want}[op]
        if not ok:
            return False
    return True


def label(code: str, form: str) -> str:
    """How a rule's scenario form is named in tables: ``FSD104``, ``FSD104 (accelerate)``."""
    return f"{code} ({form})" if form else code


@dataclass(frozen=True)
class Scenario:
    program: str  # file name in fsdp_lint/scenarios/
    hazard: str  # what "the hazard happened" means, in words
    # which form of the rule this is: "" the plain torch one; a name ("accelerate") for the
    # same hazard reached through a framework's call.  Every form runs and is judged.
    form: str = ""
    # -- what it needs to run (unmet: SKIPPED with the reason, decided before running) --------
    devices: Tuple[str, ...] = ("cpu", "cuda")
    not_on: Dict[str, str] = field(default_factory=dict)  # device -> why it cannot run there
    min_ranks: int = 1  # the hazard needs this many ranks (world size 1 falls back to NO_SHARD)
    ranks_why: str = ""  # why it needs them
    real_cpu_offload: bool = False  # CPUOffload(offload_params=True): needs an accelerator
    torch_min: Dict[str, str] = field(default_factory=dict)  # device -> lowest torch it can run on
    torch_why: str = ""  # why, for torch_min
    # distribution -> version spec the program imports ({"accelerate": "==1.15.0"}), checked
    # against the target interpreter's package metadata (the verifier's probe)
    packages: Dict[str, str] = field(default_factory=dict)
    # the target torch version the program is linted for (``target-torch-version``): for a
    # rule path that reports only below a release (``Rule.paths_fixed_in``)
    lint_target: Optional[str] = None
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

    def cannot_run(
        self, device: str, nproc: int, torch_version: Optional[str],
        installed: Optional[Mapping[str, Optional[str]]] = None,
    ) -> Optional[str]:
        """Why this scenario cannot run here (the SKIPPED reason), or None.  ``installed``:
        the target interpreter's version of each distribution (None, or left out: not
        installed) for ``packages``."""
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
        for name, spec in self.packages.items():
            found = (installed or {}).get(name)
            if found is None:
                return f"needs {name}{spec}, not installed"
            if not spec_matches(found, spec):
                return f"needs {name}{spec}, found {found}"
        return None

    def expected_on(self, torch_version: str) -> bool:
        """Whether this torch should still show the hazard (False from ``hazard_fixed_in`` on)."""
        return not (self.hazard_fixed_in and version_tuple(torch_version) >= version_tuple(self.hazard_fixed_in))


def installed_versions(names) -> Dict[str, Optional[str]]:
    """This interpreter's version of each distribution (None: not installed), from package
    metadata: nothing is imported.  The verifier asks the target interpreter the same way."""
    found: Dict[str, Optional[str]] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found
