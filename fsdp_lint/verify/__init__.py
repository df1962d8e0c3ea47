"""``fsdp-lint verify``: run each rule's scenario under torchrun and judge what happened.

- ``scenario``: what a rule declares about its scenario (program, hazard, signatures).
- ``rank_shim``: runs inside each torchrun rank; records that rank's exit and log.
- ``launcher``: starts torchrun with a timeout and collects each rank's outcome; ``probe``
  asks an interpreter about its torch in a child process (the command never imports torch).
- ``logs``: the line of a rank's log that says why it failed; Python warning lines.
- ``judge``: turns the flagged and fixed programs' outcomes into a verdict.
- ``command``: the command line, progress lines, the verdict table and JSON.
"""
