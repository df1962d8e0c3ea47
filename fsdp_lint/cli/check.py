"""``fsdp-lint check [PATHS...]`` (the default command) and ``fsdp-lint clean``."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from typing import List, Optional, Sequence

from fsdp_lint.cache import Cache, cache_dir, clean
from fsdp_lint.check import Overrides, Settings, display_path, exit_code, process_stdin, run_files
from fsdp_lint.config import ConfigError, ConfigFinder, check_version
from fsdp_lint.diagnostics import SAFE
from fsdp_lint.engine import IO_ERROR, error_diagnostic
from fsdp_lint.files import NOT_PYTHON, discover, matches_any
from fsdp_lint.interrupt import Interrupted, handlers
from fsdp_lint.output import FORMATS, render
from fsdp_lint.output.progress import Progress
from fsdp_lint.rules import UnknownRuleError, matching


def _codes(value: str) -> List[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _version(value: str) -> str:
    """``--target-torch-version``: validated as ``target-torch-version`` in pyproject."""
    try:
        return check_version(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: must be a whole number of processes, 1 or more")
    return jobs


def _check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fsdp-lint check", description="Lint (and fix) Python files for PyTorch FSDP misuse."
    )
    parser.add_argument("paths", nargs="*", help="files or directories (default: .); - reads standard input")
    fixing = parser.add_argument_group("fixing")
    fixing.add_argument("--fix", action="store_true", help="apply safe fixes")
    fixing.add_argument("--unsafe-fixes", action="store_true", default=None, help="also apply unsafe fixes")
    fixing.add_argument("--no-unsafe-fixes", dest="unsafe_fixes", action="store_false", help="never unsafe fixes")
    fixing.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    fixing.add_argument("--exit-non-zero-on-fix", action="store_true", help="exit 1 when a file was fixed")
    rules = parser.add_argument_group("rule selection")
    rules.add_argument("--select", type=_codes, default=None, help="codes, prefixes or names (comma-separated); ALL")
    rules.add_argument("--extend-select", type=_codes, default=[], help="add to the selection")
    rules.add_argument("--ignore", type=_codes, default=[], help="codes, prefixes or names to skip")
    rules.add_argument(
        "--target-torch-version", type=_version, default=None, help="skip rules whose hazard this torch fixed (2.14.1)"
    )
    files = parser.add_argument_group("files")
    files.add_argument("--config", default=None, help="a pyproject.toml to use instead of searching")
    files.add_argument("--exclude", type=_codes, default=None, help="glob patterns to skip (replace the defaults)")
    files.add_argument("--extend-exclude", type=_codes, default=[], help="more glob patterns to skip")
    files.add_argument("--force-exclude", action="store_true", help="apply excludes to files named on the command line")
    files.add_argument("--stdin-filename", default=None, help="the path of the source read from standard input")
    files.add_argument("--show-files", action="store_true", help="list what would be linted, and why the rest is skipped")
    output = parser.add_argument_group("output")
    output.add_argument("--format", default="text", help="text, full, json, sarif or github")
    output.add_argument("-o", "--output-file", default=None, help="write the report to this file")
    output.add_argument("--statistics", action="store_true", help="print a count per rule instead of each finding")
    output.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    speed = parser.add_argument_group("speed")
    speed.add_argument("-j", "--jobs", type=_jobs, default=None, help="processes (default: all cores)")
    speed.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    speed.add_argument(
        "--cache-dir",
        default=None,
        help="where the cache lives (default: $FSD_LINT_CACHE_DIR, else .fsdp_lint_cache beside the nearest pyproject.toml)",
    )
    return parser


def _error(message: str) -> int:
    print(f"fsdp-lint: error: {message}", file=sys.stderr)
    return 2


def _warn(message: str) -> None:
    print(f"fsdp-lint: warning: {message}", file=sys.stderr)


def run(argv: Sequence[str]) -> int:
    """``fsdp-lint check``: Ctrl-C and SIGTERM stop the workers and never leave a file half-written."""
    try:
        with handlers():
            return _run_check(argv)
    except Interrupted as exc:
        print("fsdp-lint: interrupted", file=sys.stderr)
        return exc.exit_code


def run_clean(argv: Sequence[str]) -> int:
    """``fsdp-lint clean [DIR]``: remove the result cache."""
    target = argv[0] if argv else cache_dir()
    print(f"removed {target}" if clean(target) else f"no cache at {target}")
    return 0


def _run_check(argv: Sequence[str]) -> int:
    args = _check_parser().parse_args(argv)
    if args.format not in FORMATS:
        return _error(f"unknown --format {args.format!r} (allowed: {', '.join(FORMATS)})")
    try:
        for selector in (args.select or []) + args.extend_select + args.ignore:
            matching(selector)
        finder = ConfigFinder(args.config)
        root_config = finder.for_directory(os.getcwd())
    except (UnknownRuleError, ConfigError) as exc:
        return _error(str(exc))
    _show_notes(finder)
    reads_stdin = args.paths == ["-"] or (args.stdin_filename is not None and not args.paths)
    paths = args.paths or ["."]
    if not reads_stdin:
        missing = [path for path in paths if not os.path.lexists(path)]
        if missing:
            return _error("no such file or directory: " + ", ".join(missing))
    overrides = Overrides(args.select, args.extend_select, args.ignore, args.unsafe_fixes, args.target_torch_version)
    cache = None if args.no_cache or args.fix or args.diff else Cache(cache_dir(args.cache_dir, args.config))
    settings = Settings(finder=finder, overrides=overrides, fix=args.fix, diff=args.diff, cache=cache)
    excludes = list(args.exclude if args.exclude is not None else (root_config.exclude or []))
    excludes += root_config.extend_exclude + args.extend_exclude
    report_text: List[str] = []
    if reads_stdin:
        name = args.stdin_filename or "-"
        if args.force_exclude and matches_any(name, excludes):
            data = sys.stdin.buffer.read()
            if args.fix:
                sys.stdout.buffer.write(data)
            return 0
        try:
            report = process_stdin(sys.stdin.buffer.read(), name, settings)
        except ConfigError as exc:
            return _error(str(exc))
        if args.fix:
            sys.stdout.write(report.new_text if report.new_text is not None else report.text)
        reports = [report]
        problems = []
    else:
        found = discover(paths, excludes=excludes, force_exclude=args.force_exclude)
        if args.show_files:
            lines = [f"{display_path(path)}\n" for path in found.files]
            lines += [f"skipped {display_path(path)} ({why})\n" for path, why in found.skipped]
            lines += [f"problem {display_path(path)} ({why})\n" for path, why in found.problems]
            return _emit(args.output_file, "".join(lines))
        for path in found.not_python:
            _warn(f"skipped {display_path(path)}: {NOT_PYTHON}")
        if not found.files and not found.problems:
            _warn("No Python files found under the given path(s)")
        jobs = args.jobs or os.cpu_count() or 1
        progress = Progress(len(found.files), sys.stderr)
        try:
            reports = run_files(found.files, settings, jobs=max(1, jobs), progress=progress.update)
        except ConfigError as exc:
            return _error(str(exc))
        finally:
            progress.finish()
        problems = [error_diagnostic(IO_ERROR, path, why) for path, why in found.problems]
    _show_notes(finder)
    diagnostics = problems + [d for report in reports for d in report.diagnostics]
    fixed = sum(report.fixed for report in reports)
    fixes = sum(report.fixes for report in reports)
    summarised = args.format == "text" and not args.diff and not args.statistics
    if fixed and args.fix and not args.diff and not reads_stdin and not summarised:
        # the text summary says it ("N fixed"); other formats get it here, once
        print(f"fsdp-lint: fixed {fixed} finding(s)", file=sys.stderr)
    for d in diagnostics:
        d.filename = display_path(d.filename)
    diagnostics.sort(key=lambda d: d.sort_key())
    if args.diff:
        report_text.append("".join(report.diff for report in sorted(reports, key=lambda r: r.path)))
        _diff_summary(diagnostics, fixed)
    elif args.statistics:
        counts = Counter((d.code, d.name) for d in diagnostics)
        for (code, name), count in sorted(counts.items()):
            report_text.append(f"{count:>5}\t{code}\t{name}\n")
    else:
        report_text.append(render(args.format, diagnostics))
        if args.format == "text":
            report_text.append(_summary(diagnostics, fixed, fixes, args.fix))
            if not diagnostics and not fixed and not (reads_stdin and args.fix):
                report_text.append("All checks passed!\n")
    if reads_stdin and args.fix and not args.output_file:
        # standard output holds the fixed source: the report goes to standard error
        sys.stderr.write("".join(report_text))
    else:
        status = _emit(args.output_file, "".join(report_text))
        if status:
            return status
    code = exit_code(diagnostics, fixed, args.diff)
    if code == 0 and fixed and args.exit_non_zero_on_fix:
        code = 1
    if args.exit_zero and code == 1:
        return 0
    return code


def _show_notes(finder: ConfigFinder) -> None:
    """The configuration warnings (a misnamed table) not shown yet, each once."""
    for note in finder.new_notes():
        _warn(note)


def _diff_summary(diagnostics, fixed: int) -> None:
    """ruff's lines under ``--diff``, on standard error: how many findings the diff fixes,
    and when none, that there is nothing to show and why (the exit status stays 1)."""
    no_fix = sum(1 for d in diagnostics if d.fix is None)
    unsafe = len(diagnostics) - no_fix
    more = f"; {unsafe} more fixable with `--unsafe-fixes`" if unsafe else ""
    if fixed:
        left = f" ({no_fix} finding(s) have no fix{more})" if no_fix or unsafe else ""
        print(f"Would fix {fixed} finding(s){left}.", file=sys.stderr)
    elif diagnostics:
        print(f"No fixes available ({no_fix} finding(s) have no fix{more}).", file=sys.stderr)


def _emit(output_file: Optional[str], text: str) -> int:
    """Write the report to ``--output-file`` (written whole, at the end) or standard output."""
    if not output_file:
        sys.stdout.write(text)
        return 0
    try:
        with open(output_file, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        return _error(f"cannot write --output-file {output_file}: {exc.strerror or exc}")
    return 0


def _summary(diagnostics, fixed: int, fixes: int, fixing: bool) -> str:
    """ruff's summary lines.  ``Found`` counts the same findings as a run without ``--fix``:
    fixed (resolved by the fixes) plus remaining."""
    out = []
    remaining = len(diagnostics)
    if fixed:
        out.append(f"Found {remaining + fixed} error(s) ({fixed} fixed, {remaining} remaining).\n")
        if fixes < fixed:
            out.append(
                f"{fixes} fix(es) resolved {fixed} findings: one fix can settle several findings "
                "on the same call (e.g. `writeback=False` answers FSD001 and FSD004).\n"
            )
    elif remaining:
        out.append(f"Found {remaining} error(s).\n")
    fixable = sum(1 for d in diagnostics if d.fix is not None and d.fix.applicability == SAFE)
    unsafe = sum(1 for d in diagnostics if d.fix is not None and d.fix.applicability != SAFE)
    if fixable and not fixing:
        out.append(f"[*] {fixable} fixable with the `--fix` option.\n")
    if unsafe:
        out.append(f"{unsafe} more fix(es) available with `--fix --unsafe-fixes`.\n")
    return "".join(out)
