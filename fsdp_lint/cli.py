"""Command line: ``fsdp-lint [check] [PATHS...]``, ``rule CODE``, ``rules``, ``verify``.

Exit codes as ruff's: 0 no findings left, 1 findings remain, 2 usage, configuration or
internal error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import List, Optional, Sequence

from fsdp_lint import __version__

SUBCOMMANDS = ("check", "rule", "rules", "verify")


def _codes(value: str) -> List[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fsdp-lint check", description="Lint (and fix) Python files for PyTorch FSDP misuse."
    )
    parser.add_argument("paths", nargs="*", help="files or directories (default: .)")
    parser.add_argument("--fix", action="store_true", help="apply safe fixes")
    parser.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes (with --fix or --diff)")
    parser.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    parser.add_argument("--select", type=_codes, default=None, help="codes, prefixes or names (comma-separated); ALL")
    parser.add_argument("--ignore", type=_codes, default=None, help="codes, prefixes or names to skip")
    parser.add_argument("--statistics", action="store_true", help="print a count per rule instead of each finding")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    parser.add_argument("--format", default="text", help="output format: text or json")
    parser.add_argument("--exclude", type=_codes, default=None, help="glob patterns of paths to skip")
    parser.add_argument(
        "--force-exclude", action="store_true", help="apply excludes to files named on the command line too"
    )
    return parser


def _run_check(argv: Sequence[str]) -> int:
    from fsdp_lint.check import Settings, display_path, exit_code, process_file
    from fsdp_lint.files import discover
    from fsdp_lint.output import FORMATS, render
    from fsdp_lint.rules import UnknownRuleError, select_rules

    args = _check_parser().parse_args(argv)
    if args.format not in FORMATS:
        print(f"fsdp-lint: error: unknown --format {args.format!r} (allowed: {', '.join(FORMATS)})", file=sys.stderr)
        return 2
    try:
        rules = select_rules(args.select or (), args.ignore or ())
    except UnknownRuleError as exc:
        print(f"fsdp-lint: error: {exc}", file=sys.stderr)
        return 2
    settings = Settings(rules=rules, fix=args.fix, unsafe_fixes=args.unsafe_fixes, diff=args.diff)
    found = discover(args.paths or ["."], excludes=args.exclude or (), force_exclude=args.force_exclude)
    from fsdp_lint.engine import IO_ERROR, error_diagnostic

    diagnostics = [error_diagnostic(IO_ERROR, path, why) for path, why in found.problems]
    fixed = 0
    diffs = []
    for path in found.files:
        report = process_file(path, settings)
        diagnostics.extend(report.diagnostics)
        fixed += report.fixed
        if report.diff:
            diffs.append(report.diff)
    for d in diagnostics:
        d.filename = display_path(d.filename)
    diagnostics.sort(key=lambda d: d.sort_key())
    out = sys.stdout
    if args.diff:
        out.write("".join(diffs))
    elif args.statistics:
        counts = Counter((d.code, d.name) for d in diagnostics)
        for (code, name), count in sorted(counts.items()):
            out.write(f"{count:>5}\t{code}\t{name}\n")
    else:
        out.write(render(args.format, diagnostics))
        if args.format == "text":
            _summary(out, diagnostics, fixed, args.fix)
    code = exit_code(diagnostics, fixed, args.diff)
    if args.exit_zero and code == 1:
        return 0
    return code


def _summary(out, diagnostics, fixed: int, fixing: bool) -> None:
    from fsdp_lint.diagnostics import SAFE

    remaining = len(diagnostics)
    if fixed:
        out.write(f"Found {remaining + fixed} error(s) ({fixed} fixed, {remaining} remaining).\n")
    elif remaining:
        out.write(f"Found {remaining} error(s).\n")
    fixable = sum(1 for d in diagnostics if d.fix is not None and d.fix.applicability == SAFE)
    unsafe = sum(1 for d in diagnostics if d.fix is not None and d.fix.applicability != SAFE)
    if fixable and not fixing:
        out.write(f"[*] {fixable} fixable with the `--fix` option.\n")
    if unsafe:
        out.write(f"{unsafe} more fix(es) available with `--fix --unsafe-fixes`.\n")


def _run_rule(argv: Sequence[str]) -> int:
    from fsdp_lint.rules import UnknownRuleError, lookup

    parser = argparse.ArgumentParser(prog="fsdp-lint rule", description="Print a rule's documentation.")
    parser.add_argument("rule", help="code (FSD001) or name (summon-writeback-with-cpu-offload)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    try:
        rule = lookup(args.rule)
    except UnknownRuleError as exc:
        print(f"fsdp-lint: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(_rule_json(rule, with_doc=True), indent=2))
    else:
        print(f"# {rule.name} ({rule.code})\n")
        print(f"Fix is {rule.fix_availability} available.\n" if rule.fix_availability != "never" else "No automatic fix.\n")
        print(rule.doc)
    return 0


def _rule_json(rule, with_doc: bool = False) -> dict:
    data = {
        "code": rule.code,
        "name": rule.name,
        "summary": rule.summary,
        "fix": rule.fix_availability,
        "hazard_fixed_in": rule.hazard_fixed_in,
        "url": rule.url(),
    }
    if with_doc:
        data["explanation"] = rule.doc
    return data


def _run_rules(argv: Sequence[str]) -> int:
    from fsdp_lint.rules import ALL_RULES

    parser = argparse.ArgumentParser(prog="fsdp-lint rules", description="List all rules.")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    if args.format == "json":
        print(json.dumps([_rule_json(rule) for rule in ALL_RULES], indent=2))
        return 0
    for rule in ALL_RULES:
        fix = {"always": "fix", "sometimes": "fix*", "never": ""}[rule.fix_availability]
        print(f"{rule.code}  {rule.name:<45} {fix:<5} {rule.summary}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        print(f"fsdp-lint {__version__}")
        return 0
    if argv[:1] in (["-h"], ["--help"]):
        print(
            "usage: fsdp-lint [check] [PATHS...] [options]\n"
            "       fsdp-lint rule CODE | rules | verify [CODES...]\n\n"
            "Commands:\n"
            "  check    lint files (the default); --fix applies safe fixes\n"
            "  rule     print a rule's documentation\n"
            "  rules    list all rules\n"
            "  verify   run each rule's runtime scenario under torchrun (needs torch)\n\n"
            "Run `fsdp-lint check --help` for the options of check."
        )
        return 0
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else "check"
    rest = argv[1:] if argv and argv[0] in SUBCOMMANDS else argv
    try:
        if command == "rule":
            return _run_rule(rest)
        if command == "rules":
            return _run_rules(rest)
        if command == "verify":
            from fsdp_lint.verify.command import run_verify

            return run_verify(rest)
        return _run_check(rest)
    except SystemExit as exc:  # argparse: usage errors exit 2
        return int(exc.code or 0)
    except KeyboardInterrupt:
        return 130
