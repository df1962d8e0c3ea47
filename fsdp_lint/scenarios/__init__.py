"""Runtime scenarios of the rules: small FSDP programs run by ``fsdp-lint verify``.

Each ``fsdXXX_*.py`` program is written in the misuse pattern its rule flags; the
verifier derives the fixed program with the rule's own autofix, or, for a rule without
one, applies the hand-written fix its scenario declares (``Scenario.fixed_by``).
``_harness`` holds the plumbing they share (process group, device, per-rank report); it
never hides the FSDP calls the rules look at.
"""
