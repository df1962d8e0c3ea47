"""``fsdp-lint verify --program``: check the program, run it under torchrun with the
runtime layer, join the events to the findings, report."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

from fsdp_lint import __version__
from fsdp_lint.check import Settings, run_files
from fsdp_lint.diagnostics import INTERNAL_ERROR, IO_ERROR, SYNTAX_ERROR
from fsdp_lint.files import discover
from fsdp_lint.verify import html_report
from fsdp_lint.verify.launcher import launch, probe
from fsdp_lint.verify.program.evidence import collect
from fsdp_lint.verify.program.join import join
from fsdp_lint.verify.program.options import OptionsError, ProgramOptions, parse
from fsdp_lint.verify.program.report import RunInfo, exit_status, render, to_json
from fsdp_lint.verify.records import git_state

ENTRY = Path(__file__).resolve().parent / "_entry.py"
SPEC_ENV = "FSDP_LINT_OBSERVE"  # the layer's spec (``observe.SPEC_ENV``; observe imports torch, this process never does)
INSTALL_HINT = "install it with: pip install '.[verify]' in the fsdp-lint clone (or pip install torch)"


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def module_file(module: str) -> Optional[Path]:
    """The file ``python -m module`` would run from the current folder, found without
    importing anything (the linter never runs the user's code)."""
    parts = module.split(".")
    for root in [os.getcwd()] + [p for p in sys.path if p and os.path.isdir(p)]:
        base = Path(root, *parts)
        for candidate in (base.with_suffix(".py"), base / "__main__.py"):
            if candidate.is_file():
                return candidate
    return None


def source_paths(opts: ProgramOptions) -> Tuple[List[str], Optional[str]]:
    """(paths to check, problem)."""
    if opts.program:
        program = Path(opts.program)
        if not program.is_file():
            return [], f"no such program: {opts.program}"
        return (opts.src or [str(program.resolve().parent)]), None
    found = module_file(opts.module)
    if opts.src:
        return opts.src, None
    if found is None:
        return [], f"cannot find the file of module {opts.module!r} from {os.getcwd()}; name the code with --src"
    top = Path(os.getcwd(), opts.module.split(".")[0])
    return [str(top if top.is_dir() else found)], None


def static_findings(paths: List[str]):
    """The check command's own findings for these paths (its config, its file discovery)."""
    found = discover(paths)
    reports = run_files(found.files, Settings())
    skipped = {INTERNAL_ERROR[0], IO_ERROR[0], SYNTAX_ERROR[0]}
    findings, problems = [], []
    for report in reports:
        for d in report.diagnostics:
            (problems if d.code in skipped else findings).append(d)
    return findings, problems, len(found.files)


def _device(opts: ProgramOptions, torch_info: dict) -> Tuple[str, str]:
    """``torch_info``: what ``launcher.probe`` says about this interpreter's torch."""
    device = opts.device
    if device is None:
        device = "cuda" if torch_info["cuda_devices"] >= opts.nproc else "cpu"
    backend = opts.backend or ("nccl" if device == "cuda" else "gloo")
    return device, backend


def run_program(argv: List[str]) -> int:
    try:
        opts = parse(argv)
    except OptionsError as exc:
        print(f"fsdp-lint verify: error: {exc}", file=sys.stderr)
        return 2
    if opts.report and html_report.missing():
        print(f"fsdp-lint verify: error: {html_report.missing()}", file=sys.stderr)
        return 2
    paths, problem = source_paths(opts)
    if problem:
        print(f"fsdp-lint verify: error: {problem}", file=sys.stderr)
        return 2
    # this interpreter's torch, asked in a child process (the scratch folder is for others')
    torch_info, problem = probe(sys.executable, tempfile.gettempdir())
    if torch_info is None:
        print(f"fsdp-lint verify: {problem}; {INSTALL_HINT}", file=sys.stderr)
        return 2
    findings, problems, files = static_findings(paths)
    for d in problems:
        _progress(f"fsdp-lint verify: {d.filename}:{d.location.row}: {d.code} {d.message}")
    _progress(f"static check: {len(findings)} finding(s) in {files} file(s) under {', '.join(paths)}")
    device, backend = _device(opts, torch_info)
    log_dir = Path(opts.log_dir or tempfile.mkdtemp(prefix="fsdp-lint-program-")).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "target": opts.module or str(Path(opts.program).resolve()),
        "module": bool(opts.module),
        "argv": opts.program_args,
        "dir": str(log_dir),
        "steps": opts.steps,
        "checksums": opts.checksums,
    }
    env = dict(opts.torchrun_env)
    env[SPEC_ENV] = json.dumps(spec)
    _progress(f"running {opts.target} under torchrun: {opts.nproc} rank(s), {backend}/{device}, "
              f"timeout {opts.timeout:.0f} s" + (f", stop after {opts.steps} optimizer step(s)" if opts.steps else ""))
    start = time.monotonic()
    outcome = launch(str(ENTRY), str(log_dir), opts.nproc, backend, device, opts.timeout, env=env)
    seconds = time.monotonic() - start
    _progress(f"finished in {seconds:.1f} s: {outcome.describe()}")
    verification = join(findings, collect(outcome, opts.nproc))
    info = RunInfo(opts.target, torch_info["version"], opts.nproc, backend, device, str(log_dir), seconds)
    print(render(verification, info, opts.output_format))
    if opts.report:
        source = {"version": __version__, **git_state()}
        path = html_report.write_program(opts.report, to_json(verification, info), source, seconds)
        _progress(f"report written: {path}")
    return exit_status(verification)
