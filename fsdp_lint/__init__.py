"""fsdp-lint: a static linter for PyTorch FSDP misuse, built on libcst.

The linter never imports torch or the code it reads; only ``fsdp-lint verify``
(the runtime verifier) needs torch.
"""

__version__ = "0.1.0"
