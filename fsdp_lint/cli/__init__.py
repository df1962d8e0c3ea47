"""Command line: ``fsdp-lint [check] [PATHS...]``, ``rule CODE``, ``rules``, ``verify``,
``clean``, ``server``.

Exit codes as ruff's: 0 no findings left, 1 findings remain, 2 usage, configuration or
internal error.

Each command lives in its own module, and ``main`` imports the one it runs: ``--version``
loads none of the linter, ``check`` neither the rule pages (package metadata), the verifier
nor the language server (pygls, an optional extra).  These imports are the package's only
function-level ones besides libcst's (ARCHITECTURE.md, tests/test_layers.py).
"""

from __future__ import annotations

import difflib
import os
import sys
from typing import Optional, Sequence

from fsdp_lint import __version__
from fsdp_lint.collector import tune_for_a_run
from fsdp_lint.interrupt import handlers, received

SUBCOMMANDS = ("check", "rule", "rules", "verify", "clean", "server")
HELP = """\
usage: fsdp-lint [check] [PATHS...] [options]
       fsdp-lint rule CODE | rules | verify [CODES...]

Commands:
  check    lint files (the default); --fix applies safe fixes
  rule     print a rule's documentation
  rules    list all rules
  clean    remove the result cache (.fsdp_lint_cache beside the nearest pyproject.toml)
  verify   run each rule's runtime scenario under torchrun (needs torch)
  server   run the language server on stdio (needs the `server` extra)

Run `fsdp-lint check --help` for the options of check."""


def _mistyped_command(first: str) -> Optional[str]:
    """The command ``first`` looks like a typo of (``chek``: ``check``), when it is neither a
    command, an option nor an existing path; None otherwise."""
    if first in SUBCOMMANDS or first.startswith("-") or os.path.lexists(first):
        return None
    close = difflib.get_close_matches(first, SUBCOMMANDS, n=1)
    return close[0] if close else None


def console() -> int:
    """The ``fsdp-lint`` command (and ``python -m fsdp_lint``): ``main`` in a process of its
    own, whose garbage collector it tunes (``collector``; callers of ``main`` in their own
    process keep theirs)."""
    tune_for_a_run()
    code = main()
    if received() is not None:
        # stopped by a signal: the workers are stopped and every file is whole; leave now,
        # without the interpreter's exit, whose wait for the worker pool's threads could
        # hang when the signal came at a bad moment for them (seen once in CI, under load)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        print(f"fsdp-lint {__version__}")
        return 0
    if argv[:1] in (["-h"], ["--help"]):
        print(HELP)
        return 0
    typo = _mistyped_command(argv[0]) if argv else None
    if typo is not None:
        print(f"fsdp-lint: error: unknown command {argv[0]!r}; did you mean {typo!r}?", file=sys.stderr)
        print("Run `fsdp-lint --help` for the commands.", file=sys.stderr)
        return 2
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else "check"
    rest = argv[1:] if argv and argv[0] in SUBCOMMANDS else argv
    try:
        if command == "rule":
            from fsdp_lint.cli.rule import run
        elif command == "rules":
            from fsdp_lint.cli.rules import run
        elif command == "verify":
            from fsdp_lint.verify.command import run_verify as run
        elif command == "server":
            from fsdp_lint.server import main as run
        elif command == "clean":
            from fsdp_lint.cli.check import run_clean as run
        else:
            from fsdp_lint.cli.check import run
        if command == "verify":
            # SIGINT and SIGTERM raise in the main thread whatever the inherited disposition
            # (a background job starts with SIGINT ignored): the torchrun jobs are stopped
            with handlers():
                return run(rest)
        return run(rest)
    except SystemExit as exc:  # argparse: usage errors exit 2
        return int(exc.code or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `fsdp-lint src/ | head`: the reader left; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the final flush at exit must not fail again
        return 1
