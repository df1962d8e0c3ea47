import sys

from fsdp_lint.cli import console

sys.exit(console())
