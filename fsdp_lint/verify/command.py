"""``fsdp-lint verify [CODES...]``: prove each rule at runtime, on the installed torch."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from fsdp_lint.verify.judge import ERROR, SKIPPED, Judgement, judge, summarize

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
INSTALL_HINT = "install it with: pip install 'fsdp-lint[verify]' (or pip install torch)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fsdp-lint verify", description="Run each rule's runtime scenario under torchrun and judge it."
    )
    parser.add_argument("rules", nargs="*", help="codes or names (default: every rule)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None, help="default: gloo (cpu), nccl (cuda)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--nproc", type=int, default=2, help="ranks per program (default 2)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per program (default: the scenario's)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--log-dir", default=None, help="where each rank's log is kept (default: a new temp folder)")
    return parser


def _torch_info(device: str, nproc: int) -> Tuple[Optional[str], Optional[str]]:
    """(torch version, reason the device cannot be used)."""
    try:
        import torch
    except ImportError as exc:
        print(f"fsdp-lint verify: torch is not importable ({exc}); {INSTALL_HINT}", file=sys.stderr)
        return None, None
    reason = None
    if device == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count < nproc:
            reason = f"needs {nproc} CUDA devices, found {count}"
    return torch.__version__, reason


def prepare(rule, workdir: Path) -> Tuple[Optional[Path], Optional[Path], Optional[str]]:
    """Write the flagged and the fixed program; check the rule fires on one and not the other."""
    from fsdp_lint.engine import lint_text
    from fsdp_lint.fixer import fix_text

    scenario = rule.scenario
    flagged_text = (SCENARIOS / scenario.program).read_text()
    if not [d for d in lint_text(flagged_text, scenario.program, [rule]).diagnostics if d.code == rule.code]:
        return None, None, f"{rule.code} does not fire on its own scenario {scenario.program}"
    if scenario.fixed_by:
        fixed_text = flagged_text
        for old, new in scenario.fixed_by:
            if fixed_text.count(old) != 1:
                return None, None, f"the hand-written fix of {rule.code} does not apply: {old.strip()[:60]!r}"
            fixed_text = fixed_text.replace(old, new)
        how = "hand-written fix"
    else:
        outcome = fix_text(flagged_text, scenario.program, [rule], unsafe=scenario.unsafe_fix)
        fixed_text = outcome.text
        how = f"{'unsafe' if scenario.unsafe_fix else 'safe'} autofix"
        if fixed_text == flagged_text:
            return None, None, f"the {how} of {rule.code} changed nothing"
    if [d for d in lint_text(fixed_text, "fixed.py", [rule]).diagnostics if d.code == rule.code]:
        return None, None, f"{rule.code} still fires on the fixed program ({how})"
    workdir.mkdir(parents=True, exist_ok=True)
    flagged, fixed = workdir / "flagged.py", workdir / "fixed.py"
    flagged.write_text(flagged_text)
    fixed.write_text(fixed_text)
    return flagged, fixed, None


def verify_rule(rule, args, backend: str, device_problem: Optional[str], root: Path, progress) -> Judgement:
    from fsdp_lint.verify.launcher import launch

    scenario = rule.scenario
    if scenario is None:
        return Judgement(ERROR, "-", "-", "the rule has no runtime scenario")
    if args.device not in scenario.devices:
        why = scenario.not_on.get(args.device, f"runs only on {', '.join(scenario.devices)}")
        return Judgement(SKIPPED, "-", "-", why)
    if device_problem:
        return Judgement(SKIPPED, "-", "-", device_problem)
    flagged, fixed, problem = prepare(rule, root / rule.code)
    if problem:
        return Judgement(ERROR, "-", "-", problem)
    timeout = args.timeout or scenario.timeout
    outcomes = []
    for label, program in (("flagged", flagged), ("fixed", fixed)):
        progress(f"[{rule.code}] {label} program: started ({args.nproc} ranks, {backend}/{args.device})")
        outcome = launch(
            str(program), str(root / rule.code / label), args.nproc, backend, args.device, timeout
        )
        progress(f"[{rule.code}] {label} program: finished in {outcome.seconds:.1f} s: {outcome.describe()}")
        outcomes.append(outcome)
    return judge(scenario, *outcomes)


def run_verify(argv) -> int:
    from fsdp_lint.rules import ALL_RULES, UnknownRuleError, lookup
    from fsdp_lint.verify.program.options import wants_program

    if wants_program(list(argv)):  # `verify --program train.py` / `verify -m pkg.mod`: the user's own job
        from fsdp_lint.verify.program.command import run_program

        return run_program(list(argv))
    args = _parser().parse_args(argv)
    backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    try:
        rules = [lookup(code) for code in args.rules] if args.rules else list(ALL_RULES)
    except UnknownRuleError as exc:
        print(f"fsdp-lint verify: error: {exc}", file=sys.stderr)
        return 2
    version, device_problem = _torch_info(args.device, args.nproc)
    if version is None:
        return 2
    root = Path(args.log_dir or tempfile.mkdtemp(prefix="fsdp-lint-verify-")).resolve()
    root.mkdir(parents=True, exist_ok=True)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results: List[Tuple[object, Judgement]] = []
    for rule in rules:
        results.append((rule, verify_rule(rule, args, backend, device_problem, root, progress)))
    where = f"{backend}/{args.device}, {args.nproc} ranks"
    if args.format == "json":
        print(json.dumps(
            {
                "torch": version,
                "backend": backend,
                "device": args.device,
                "nproc": args.nproc,
                "log_dir": str(root),
                "machine": _machine(),
                "results": [
                    {
                        "code": rule.code,
                        "name": rule.name,
                        "verdict": j.verdict,
                        "flagged": j.flagged,
                        "fixed": j.fixed,
                        "reason": j.reason,
                        "hazard_fixed_in": rule.hazard_fixed_in,
                    }
                    for rule, j in results
                ],
            },
            indent=2,
        ))
    else:
        print(render_table(version, where, results))
    print(f"logs of each rank of each program: {root}{os.sep}", file=sys.stderr)
    return summarize([(rule.code, j) for rule, j in results])


def _machine() -> str:
    import platform

    text = f"{platform.machine()}, {os.cpu_count()} cores"
    try:
        import torch

        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            text += ", " + ", ".join(names)
    except Exception:  # noqa: BLE001 - a description only
        pass
    return text


def render_table(version: str, where: str, results) -> str:
    lines = [
        "| rule | torch | backend/device | flagged program | fixed program | verdict |",
        "|------|-------|----------------|-----------------|---------------|---------|",
    ]
    for rule, j in results:
        verdict = j.verdict + (f" ({j.reason})" if j.reason else "")
        lines.append(f"| {rule.code} | {version} | {where} | {j.flagged} | {j.fixed} | {verdict} |")
    return "\n".join(lines)
