"""Every ``fsdp-lint ...`` command shown in README.md's code blocks is accepted by the
command line's argument parsing as written (no usage error).  Parsing only: nothing is
linted or run, so paths such as ``src/`` and ``train.py`` need not exist."""

import re
import shlex
from pathlib import Path

import pytest

from fsdp_lint.cli import SUBCOMMANDS, _mistyped_command
from fsdp_lint.cli.check import _check_parser
from fsdp_lint.output import FORMATS
from fsdp_lint.rules import lookup, matching
from fsdp_lint.verify.command import _parser as verify_parser, _unique_rules, _unknown_forms
from fsdp_lint.verify.program.options import parse as parse_program, wants_program

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
_SHELL = ("bash", "sh", "console", "shell")


def _shell_blocks(text):
    """The bodies of the fenced blocks marked as shell."""
    blocks, body, language = [], None, None
    for line in text.splitlines():
        if line.startswith("```"):
            if body is None:
                body, language = [], line[3:].strip()
            else:
                if language in _SHELL:
                    blocks.append("\n".join(body))
                body = None
        elif body is not None:
            body.append(line)
    return blocks


def readme_commands():
    """The argument lists of each ``fsdp-lint`` invocation in the README's shell blocks
    (``a && b`` and ``x | fsdp-lint ...`` split; comments dropped)."""
    found = []
    for block in _shell_blocks(README.read_text()):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            command = []
            for word in words + ["&&"]:
                if word in ("&&", "|", "||", ";"):
                    if command and Path(command[0]).name == "fsdp-lint":
                        found.append(command[1:])
                    command = []
                else:
                    command.append(word)
    return found


def accepted(argv):
    """Parse ``argv`` as ``fsdp-lint`` does; raises (SystemExit 2 from argparse, or the
    command's own error) where the command line would stop with a usage error."""
    if argv:
        assert _mistyped_command(argv[0]) is None, argv[0]
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else "check"
    rest = argv[1:] if argv and argv[0] in SUBCOMMANDS else argv
    if command == "check":
        args = _check_parser().parse_args(rest)
        assert args.format in FORMATS, args.format
        for selector in (args.select or []) + args.extend_select + args.ignore:
            matching(selector)
    elif command == "verify":
        if wants_program(rest):
            parse_program(rest)
        else:
            args = verify_parser().parse_args(rest)
            rules = _unique_rules(args.rules)
            assert not _unknown_forms(args.form, rules), args.form
    elif command == "rule":
        lookup(rest[0])
    else:
        pytest.fail(f"teach this test the {command!r} command (README shows `fsdp-lint {' '.join(argv)}`)")


COMMANDS = readme_commands()


def test_the_readme_shows_commands():
    assert len(COMMANDS) >= 15
    assert ["fixtures/"] in COMMANDS and ["verify"] in COMMANDS


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv) or "(none)")
def test_readme_command_is_accepted(argv):
    try:
        accepted(argv)
    except SystemExit as exc:
        pytest.fail(f"`fsdp-lint {' '.join(argv)}` is a usage error (exit {exc.code})")


@pytest.mark.parametrize("argv", [["--frobnicate", "src/"], ["check", "--format", "xml"], ["chek", "src/"],
                                  ["verify", "--nproc", "0"], ["verify", "--program", "t.py", "--steps", "0"]])
def test_the_check_catches_a_command_the_cli_refuses(argv):
    with pytest.raises((SystemExit, AssertionError, Exception)):
        accepted(argv)


@pytest.mark.slow
def test_the_first_set_up_command_and_the_server_extra_work_in_a_fresh_clone(tmp_path):
    """README's first set-up command, as written, in a fresh clone of this repository: it
    installs, lints the bundled examples and exits 1 with their findings; then the editor
    guide's ``pip install '.[server]'`` from the clone gives a working ``fsdp-lint server``.
    (The second set-up command is the one running this test.)"""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to clone")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    readme = (clone / "README.md").read_text()
    first = re.findall(r"```bash\n(python3 -m venv .*?)\n```", readme)[0]
    done = subprocess.run(first, shell=True, cwd=clone, capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stderr[-2000:]
    assert re.search(r"Found \d+ error", done.stdout), done.stdout[-2000:]
    extra = subprocess.run([str(clone / ".venv" / "bin" / "pip"), "install", "-q", ".[server]"], cwd=clone,
                           capture_output=True, text=True, timeout=900)
    assert extra.returncode == 0, extra.stderr[-2000:]
    server = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", "import pygls, fsdp_lint.server.app"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert server.returncode == 0, server.stderr[-2000:]
