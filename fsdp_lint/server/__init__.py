"""``fsdp-lint server``: a Language Server Protocol server over stdio (pygls).

Needs the ``server`` extra (``pip install '.[server]'`` from the clone); the linter itself needs
only libcst, and only ``fsdp-lint server`` imports this package.  Modules: ``app`` (the server and its LSP handlers), ``linting`` (which
documents, which settings, the engine), ``lsp_diagnostics`` (findings as LSP diagnostics),
``actions`` (quick fixes, fix all, noqa), ``hover`` (rule pages), ``settings`` (what the
editor may set), ``text_index`` (offsets and LSP positions), ``incremental`` (re-parsing
only the statements an edit changed).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

INSTALL_HINT = "fsdp-lint server needs pygls: pip install '.[server]' in the fsdp-lint clone"

try:
    from fsdp_lint.server.app import create_server
except ImportError as exc:  # pygls or lsprotocol missing: said by main, when asked for the server
    create_server = None
    _MISSING = str(exc)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(
        prog="fsdp-lint server",
        description="Run the fsdp-lint language server on standard input and output (LSP). "
        "Editors start it; see docs/editors.md.",
    )
    parser.parse_args(list(argv))
    if create_server is None:
        print(f"fsdp-lint: error: {INSTALL_HINT} ({_MISSING})", file=sys.stderr)
        return 2
    # the protocol owns standard output: anything else printed goes to standard error
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    create_server().start_io(stdin, stdout)
    return 0
