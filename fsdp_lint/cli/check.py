"""``fsdp-lint check [PATHS...]`` (the default command) and ``fsdp-lint clean``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from typing import List, Optional, Sequence

from fsdp_lint import baseline
from fsdp_lint.cache import Cache, cache_dir, clean
from fsdp_lint.check import (
    FileReport, Overrides, Settings, add_noqa_directives, display_path, exit_code, notebook_cells, process_stdin,
    run_files,
)
from fsdp_lint.config import ConfigError, ConfigFinder, check_version
from fsdp_lint.diagnostics import IO_ERROR, SAFE, error_diagnostic
from fsdp_lint.files import NOT_PYTHON, discover, matches_any
from fsdp_lint.interrupt import Interrupted, handlers
from fsdp_lint.launch import project_root
from fsdp_lint.output import FORMATS, render
from fsdp_lint.output.fingerprint import Texts
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
    fixing.add_argument(
        "--add-noqa", action="store_true",
        help="add `# noqa: FSDxxx` to each flagged statement (existing codes kept; running it again adds nothing)",
    )
    fixing.add_argument("--show-fixes", action="store_true", help="with --fix: list the fixed findings per file and rule")
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
    files.add_argument(
        "--show-settings", action="store_true",
        help="print the settings used for the first file (config file, selection, rules, target torch, launch)",
    )
    output = parser.add_argument_group("output")
    output.add_argument("--format", default="text", help="text, full, json, sarif, github, gitlab or junit")
    output.add_argument("-o", "--output-file", default=None, help="write the report to this file")
    output.add_argument("--statistics", action="store_true", help="print a count per rule instead of each finding")
    output.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    baselines = parser.add_argument_group("baseline")
    baselines.add_argument(
        "--baseline", metavar="FILE", default=None,
        help="report only findings FILE does not record (matched by rule, file and the flagged statement's text)",
    )
    baselines.add_argument("--write-baseline", metavar="FILE", default=None, help="record every finding in FILE; exit 0")
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
    conflict = _conflict(args)
    if conflict:
        return _error(conflict)
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
    if args.add_noqa and reads_stdin:
        return _error("--add-noqa edits files: it does not read standard input")
    if reads_stdin:
        name = args.stdin_filename or "-"
        if args.show_settings:
            return _emit(args.output_file, show_settings(name, settings, finder, args.format == "json"))
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
            if report.output is not None:  # a notebook: its JSON, fixed cells written back
                sys.stdout.write(report.output)
            else:
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
        if args.show_settings:
            if not found.files:
                return _error("--show-settings: no Python file found under the given path(s)")
            return _emit(args.output_file, show_settings(found.files[0], settings, finder, args.format == "json"))
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
        settings.launch_notes(found.files)
    _show_notes(finder)
    diagnostics = problems + [d for report in reports for d in report.diagnostics]
    # the text each report's findings refer to: the fixed text where fixes were made (written
    # or shown as a diff), the text read from standard input, else the file as it is now
    texts = Texts({
        report.path: report.new_text if report.new_text is not None else report.text
        for report in reports if report.new_text is not None or reads_stdin
    })
    if args.add_noqa:
        added, failures = add_noqa_directives(reports, settings)
        for d in failures:
            d.filename = display_path(d.filename)
            print(f"fsdp-lint: {d.filename}: {d.message}", file=sys.stderr)
        print(f"Added {added} noqa directive(s).", file=sys.stderr)
        return 2 if failures else 0
    for report in reports:
        notebook_cells(report)
    if args.write_baseline:
        try:
            count = baseline.write(args.write_baseline, diagnostics, texts)
        except baseline.BaselineError as exc:
            return _error(str(exc))
        print(f"fsdp-lint: recorded {count} finding(s) in {args.write_baseline}", file=sys.stderr)
        return 2 if any(d.code == "FSD901" for d in diagnostics) else 0
    if args.baseline:
        try:
            diagnostics, hidden = baseline.new_findings(diagnostics, args.baseline, texts)
        except baseline.BaselineError as exc:
            return _error(str(exc))
        if hidden:
            print(f"fsdp-lint: {hidden} finding(s) recorded in {args.baseline} not shown", file=sys.stderr)
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
        report_text.append(render(args.format, diagnostics, texts=texts))
        if args.format == "text":
            if args.show_fixes and args.fix and fixed:
                report_text.append(_fixed_summary(reports, fixed))
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


def _conflict(args) -> Optional[str]:
    """Options that cannot go together, as a usage error (None when they can)."""
    pairs = [
        ("--add-noqa", args.add_noqa, "--fix", args.fix), ("--add-noqa", args.add_noqa, "--diff", args.diff),
        ("--add-noqa", args.add_noqa, "--baseline", args.baseline),
        ("--add-noqa", args.add_noqa, "--write-baseline", args.write_baseline),
        ("--write-baseline", args.write_baseline, "--baseline", args.baseline),
        ("--write-baseline", args.write_baseline, "--fix", args.fix),
        ("--write-baseline", args.write_baseline, "--diff", args.diff),
        ("--show-settings", args.show_settings, "--show-files", args.show_files),
    ]
    for one, on, other, also in pairs:
        if on and also:
            return f"{one} cannot be used with {other}"
    return None


def _fixed_summary(reports: Sequence[FileReport], fixed: int) -> str:
    """ruff's ``--show-fixes`` list: per file, how many findings of each rule were fixed."""
    out = [f"Fixed {fixed} error(s):\n"]
    for report in sorted(reports, key=lambda r: r.path):
        if not report.fixed:
            continue
        gone = Counter((d.code, d.name) for d in report.unfixed)
        gone.subtract(Counter((d.code, d.name) for d in report.diagnostics))
        out.append(f"- {display_path(report.path)}:\n")
        for (code, name), count in sorted(gone.items()):
            if count > 0:
                out.append(f"    {count} \u00d7 {code} ({name})\n")
    return "".join(out)


def show_settings(path: str, settings: Settings, finder: ConfigFinder, as_json: bool = False) -> str:
    """``--show-settings``: what fsdp-lint uses for ``path`` and where each value comes from
    (``--format json``: the same as one JSON object, the launch with each detected setting)."""
    config = finder.for_file(path)
    o = settings.overrides
    where = config.path or "(none: defaults)"

    def origin(cli_value, file_value) -> str:
        if cli_value:
            return "command line"
        return where if file_value else "default"

    select = o.select if o.select is not None else (config.select or ["ALL"])
    ignores = ([] if o.select is not None else config.ignore) + o.ignore
    launch = settings.launch_for(path)
    target = o.target_torch_version or config.target_torch_version
    lines = [
        f"Resolved settings for: {display_path(path)}",
        f"Settings path: {where}",
        f"select = {select!r}  # {origin(o.select is not None, config.select)}",
        f"extend-select = {config.extend_select + o.extend_select!r}",
        f"ignore = {ignores!r}",
        f"per-file-ignores (matching this file) = {config.ignores_for(path)!r}",
        f"rules = {[rule.code for rule in settings.rules_for(path)]!r}",
        f"unused-noqa (FSD800, opt-in) = {str(settings.unused_noqa_for(path)).lower()}",
        f"unsafe-fixes = {str(settings.unsafe_for(path)).lower()}"
        f"  # {origin(o.unsafe_fixes is not None, config.unsafe_fixes is not None)}",
        f"target-torch-version = {target or '(not set: every rule, paths fixed long ago off)'}"
        f"  # {origin(o.target_torch_version, config.target_torch_version)}",
    ]
    if as_json:
        data = {"file": display_path(path), "settings_path": config.path, "select": list(select),
                "ignore": list(ignores), "rules": [rule.code for rule in settings.rules_for(path)],
                "target_torch_version": target, "launch": None}
        if launch is not None:
            data["launch"] = {"source": launch.source, "launcher": launch.launcher or None,
                              "offload_params": launch.offload_params, "use_orig_params": launch.use_orig_params,
                              "fsdp_version": launch.version, "settings": dict(launch.settings),
                              "project_root": project_root(path)}
        return json.dumps(data, indent=2) + "\n"
    if launch is None:
        lines.append("launch = (no FSDP launch detected for this file)")
    else:
        details = [
            f"{key}={value}"
            for key, value in (("offload_params", launch.offload_params), ("use_orig_params", launch.use_orig_params),
                               ("fsdp_version", launch.version))
            if value is not None
        ]
        details += [f"{key}={value}" for key, value in launch.settings]
        lines.append(f"launch = FSDP turned on by {launch.source}" + (f" ({', '.join(details)})" if details else ""))
        lines.append(f"project root (launch paths are relative to it) = {project_root(path)}")
    return "\n".join(lines) + "\n"


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
