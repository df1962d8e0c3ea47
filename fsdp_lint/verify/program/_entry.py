"""Script each torchrun rank runs (through the verifier's rank shim): puts the user's
folder first on ``sys.path`` as Python would for ``python train.py``, installs the runtime
layer, then runs the user's program or module."""

import json
import os
import sys

if __name__ == "__main__":
    _spec = json.loads(os.environ["FSDP_LINT_OBSERVE"])
    sys.path[0] = os.path.dirname(os.path.abspath(_spec["target"])) if not _spec.get("module") else os.getcwd()
    from fsdp_lint.verify.program.observe import main

    sys.exit(main())
