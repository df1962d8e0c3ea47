"""``fsdp-lint verify [CODES...]``: prove each rule at runtime, on the installed torch or on
other interpreters' (``--python PATH``, one column per torch version)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from fsdp_lint.engine import lint_text
from fsdp_lint.fixer import fix_text
from fsdp_lint.rules import ALL_RULES, UnknownRuleError, lookup
from fsdp_lint.scenarios.registry import forms, scenarios_for, variants
from fsdp_lint.verify import html_report, records
from fsdp_lint.verify.judge import ERROR, SKIPPED, Judgement, judge, summarize
from fsdp_lint.verify.launcher import Topology, launch, probe
from fsdp_lint.verify.program.command import ENTRY, SPEC_ENV, run_program, static_findings
from fsdp_lint.verify.program.evidence import collect
from fsdp_lint.verify.program.join import join
from fsdp_lint.verify.program.report import RunInfo, to_json
from fsdp_lint.verify.program.options import program_parser, wants_program
from fsdp_lint.verify.scenario import label

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
INSTALL_HINT = "install it with: pip install '.[verify]' in the fsdp-lint clone (or pip install torch)"
PLAIN_FORM = "torch"  # how --form names the plain torch form (form "" in the registry)

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fsdp-lint verify", description="Run each rule's runtime scenario under torchrun and judge it.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_program_help(),
    )
    parser.add_argument("rules", nargs="*", help="codes or names (default: every rule)")
    parser.add_argument(
        "--form", metavar="NAME", action="append", default=None,
        help=f"run only these scenario forms (repeat; {PLAIN_FORM!r}: the plain torch one; e.g. accelerate, "
        "fabric-fsdp2; default: every form)",
    )
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None, help="default: gloo (cpu), nccl (cuda)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--nproc", type=_positive, default=2, help="ranks per node (default 2)")
    parser.add_argument("--timeout", type=_positive_float, default=None, help="seconds per program (default: the scenario's)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="print each SKIPPED reason whole, with its source citations (text output shortens it to one "
        "line; --format json always keeps it whole)",
    )
    parser.add_argument("--log-dir", default=None, help="where each rank's log is kept (default: a new temp folder)")
    parser.add_argument(
        "--observe", action="store_true",
        help="run each program under verify --program's runtime layer too, and report what the layer found in "
        "it (a check of the layer against every scenario, with no extra torchrun job)",
    )
    parser.add_argument(
        "--record", metavar="DIR", default=None,
        help="write a machine record of the run (versions, hashes, every rank's exit and evidence) into DIR",
    )
    parser.add_argument(
        "--report", metavar="FILE", default=None,
        help="write the run as one self-contained HTML page with plots (each rule's evidence, where hung ranks "
        "were blocked, a rule-by-torch grid for --python); needs the 'report' extra (matplotlib)",
    )
    parser.add_argument(
        "--python", metavar="PATH", action="append", default=None,
        help="run the scenarios under this interpreter's torch (repeat for a matrix; default: this one)",
    )
    nodes = parser.add_argument_group("several nodes (passed to torchrun; run the same command on every node)")
    nodes.add_argument("--nnodes", type=_positive, default=1)
    nodes.add_argument("--node-rank", type=int, default=None)
    nodes.add_argument("--rdzv-backend", default=None, help="default: c10d")
    nodes.add_argument(
        "--rdzv-endpoint", default=None,
        help="HOST:PORT; each program uses its own port, counting up from PORT (two per rule)",
    )
    nodes.add_argument("--rdzv-id", default=None, help="run id, the same on every node (default: fsdp-lint-verify)")
    return parser


def _program_help() -> str:
    """``verify --program``'s own help (its parser's, so the two never drift apart), shown
    under the rules' options: one ``verify --help`` lists every option the command takes."""
    text = program_parser().format_help()
    return "Verify your own job instead (verify --program / verify -m):\n\n" + "\n".join(
        f"  {line}" if line else line for line in text.splitlines()
    ) + (
        "\n\n  Options it does not know go to torchrun (--master-port 29600); everything after `--` goes"
        "\n  to your program."
    )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def prepare(rule, scenario, workdir: Path) -> Tuple[Optional[Path], Optional[Path], Optional[str]]:
    """Write the flagged and the fixed program; check the rule fires on one and not the other."""
    flagged_text = (SCENARIOS / scenario.program).read_text()
    rule = rule.for_target(scenario.lint_target)
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


class Run:
    """One interpreter's pass over the rules."""

    def __init__(self, args, python: str, info: dict, root: Path, topology: Topology, progress):
        self.args, self.python, self.info, self.root = args, python, info, root
        self.topology, self.progress = topology, progress
        self.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
        self.index = 0

    def device_problem(self) -> Optional[str]:
        if self.args.device == "cuda" and self.info.get("cuda_devices", 0) < self.topology.nproc:
            return f"needs {self.topology.nproc} CUDA devices on this node, found {self.info.get('cuda_devices', 0)}"
        return None

    def verify_rule(self, rule) -> List[Tuple[object, Judgement]]:
        """(scenario, judgement) for every form of the rule's scenario (those ``--form`` names),
        the plain one first."""
        found = scenarios_for(rule.code, self.args.device)
        if not found:
            return [(None, Judgement(ERROR, "-", "-", "the rule has no runtime scenario"))]
        wanted = _wanted_forms(self.args.form)
        return [(s, self.verify_form(rule, s)) for s in found if wanted is None or s.form in wanted]

    def verify_form(self, rule, scenario) -> Judgement:
        args = self.args
        name = label(rule.code, scenario.form)
        why = scenario.cannot_run(
            args.device, self.topology.world_size, self.info["version"], self.info.get("packages") or {}
        )
        if why is None:
            why = self.device_problem()
        if why:
            return Judgement(SKIPPED, "-", "-", why)
        folder = self.root / (f"{rule.code}-{scenario.form}" if scenario.form else rule.code)
        flagged, fixed, problem = prepare(rule, scenario, folder)
        if problem:
            return Judgement(ERROR, "-", "-", problem)
        timeout = args.timeout or scenario.timeout
        outcomes = []
        where = f"{ranks(self.topology.world_size)}, {self.backend}/{args.device}, torch {self.info['version']}"
        layer = {}
        for kind, program in (("flagged", flagged), ("fixed", fixed)):
            self.progress(f"[{name}] {kind} program: started ({where})")
            log_dir = folder / kind
            env = observed(program, log_dir) if args.observe else None
            outcome = launch(
                str(ENTRY) if args.observe else str(program), str(log_dir), self.topology.nproc, self.backend,
                args.device, timeout, env=env, python=self.python, topology=self.topology, index=self.index,
                tag=f"{folder.name}-{kind}",
            )
            self.index += 1
            self.progress(f"[{name}] {kind} program: finished in {outcome.seconds:.1f} s: {outcome.describe()}")
            outcomes.append(outcome)
            if args.observe:
                layer[kind] = layer_report(program, outcome, self.topology.nproc, self.backend, args.device,
                                           self.info["version"])
        judgement = judge(scenario, *outcomes, self.info["version"])
        judgement.outcomes = tuple(outcomes)
        judgement.layer = layer
        return judgement


def observed(program: Path, log_dir: Path) -> dict:
    """The environment that runs ``program`` under ``verify --program``'s runtime layer
    (``ENTRY``), its events kept beside the ranks' reports in ``log_dir``."""
    spec = {"target": str(program), "module": False, "argv": [], "dir": str(log_dir), "steps": None, "checksums": True}
    return {SPEC_ENV: json.dumps(spec)}


def layer_report(program: Path, outcome, nproc: int, backend: str, device: str, version: str) -> dict:
    """What ``verify --program`` says of one scenario program's run: its static findings
    joined to the layer's events (``program.report.to_json``)."""
    findings, _, _ = static_findings([str(program)])
    verification = join(findings, collect(outcome, nproc))
    info = RunInfo(str(program), version, nproc, backend, device, outcome.log_dir, outcome.seconds)
    return to_json(verification, info)


def layer_lines(results) -> List[str]:
    """One line per program run under the layer (``--observe``): the verdicts it gave."""
    lines = []
    for rule, j, _ in results:
        for kind, report in j.layer.items():
            verdicts = [f"{f['code']} {f['verdict']} at line {f['location']['row']}" for f in report["findings"]]
            verdicts += [f"{m['code']} {m['verdict']}" for m in report["missed"]]
            status = "" if report["job"]["status"] == "OK" else f" (job {report['job']['status']})"
            lines.append(f"[{rule.code}] runtime layer, {kind} program{status}: " + ("; ".join(verdicts) or "no finding"))
    return lines


def ranks(count: int) -> str:
    return f"{count} rank" if count == 1 else f"{count} ranks"


def _unique_rules(names: List[str]):
    if not names:
        return list(ALL_RULES)
    chosen = []
    for name in names:
        rule = lookup(name)
        if rule not in chosen:  # a rule named twice (code and name) runs once
            chosen.append(rule)
    return chosen


def _wanted_forms(names: Optional[List[str]]) -> Optional[set]:
    """``--form`` values as registry forms (``torch`` -> ``""``); None: every form."""
    if not names:
        return None
    return {"" if name == PLAIN_FORM else name for name in names}


def _unknown_forms(names: Optional[List[str]], rules) -> List[str]:
    """``--form`` values that no selected rule has."""
    known = {form for rule in rules for form in forms(rule.code)}
    return [name for name in names or [] if ("" if name == PLAIN_FORM else name) not in known]


def run_verify(argv) -> int:
    if wants_program(list(argv)):  # `verify --program train.py` / `verify -m pkg.mod`: the user's own job
        return run_program(list(argv))
    args = _parser().parse_args(argv)
    try:
        rules = _unique_rules(args.rules)
    except UnknownRuleError as exc:
        print(f"fsdp-lint verify: error: {exc}", file=sys.stderr)
        return 2
    unknown = _unknown_forms(args.form, rules)
    if unknown:
        known = sorted({f or PLAIN_FORM for rule in rules for f in forms(rule.code)})
        print(f"fsdp-lint verify: error: no selected rule has the form {', '.join(map(repr, unknown))} "
              f"(forms: {', '.join(known)})", file=sys.stderr)
        return 2
    if args.report and html_report.missing():
        print(f"fsdp-lint verify: error: {html_report.missing()}", file=sys.stderr)
        return 2
    topology = Topology(
        nproc=args.nproc, nnodes=args.nnodes, node_rank=args.node_rank, rdzv_backend=args.rdzv_backend,
        rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
    )
    if args.nnodes > 1 and not args.rdzv_endpoint:
        print("fsdp-lint verify: error: --nnodes above 1 needs --rdzv-endpoint HOST:PORT", file=sys.stderr)
        return 2
    root = Path(args.log_dir or tempfile.mkdtemp(prefix="fsdp-lint-verify-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    pythons = args.python or [sys.executable]
    wanted = _wanted_forms(args.form)
    packages = sorted({
        name for rule in rules for s in variants(rule.code) if wanted is None or s.form in wanted
        for name in s.packages
    })

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    source = None
    if args.record or args.report:
        source = records.source_state()
    runs = []
    try:
        for python in pythons:
            info, problem = probe(python, str(root), packages)
            if info is None:
                print(f"fsdp-lint verify: {problem}; {INSTALL_HINT}", file=sys.stderr)
                return 2
            folder = root if len(pythons) == 1 else root / f"torch-{info['version']}"
            run = Run(args, python, info, folder, topology, progress)
            results = []
            for rule in rules:
                for scenario, judgement in run.verify_rule(rule):
                    results.append((rule, judgement, scenario))
            runs.append((run, results))
    except KeyboardInterrupt:
        print(f"fsdp-lint verify: interrupted; the torchrun jobs were stopped; logs so far: {root}{os.sep}",
              file=sys.stderr, flush=True)
        return 130
    built = [
        records.build(
            run.info, topology, run.backend, args.device, results, ["fsdp-lint", "verify", *argv], source,
            some_rules=bool(args.rules or args.form), some_forms=args.form,
        )
        for run, results in runs
    ] if args.record or args.report else []
    if args.record:
        for record in built:
            progress(f"record written: {records.write(record, Path(args.record))}")
    if args.report:  # the page is built from the same records
        progress(f"report written: {html_report.write_rules(args.report, built)}")
    if args.format == "json":
        print(json.dumps(_json(runs, args, topology, root), indent=2))
    elif len(runs) == 1:
        run, results = runs[0]
        where = f"{run.backend}/{args.device}, {ranks(topology.world_size)}"
        print(render_table(run.info["version"], where, results, args.verbose))
        if args.observe:
            print("\n".join(layer_lines(results)))
    else:
        print(render_matrix(runs, args.verbose))
    if not args.verbose and args.format != "json" and any(
        short_reason(j.reason) != j.reason for _, results in runs for _, j, _ in results if j.verdict == SKIPPED
    ):
        print("SKIPPED reasons are shortened; --verbose prints them whole, with their sources", file=sys.stderr)
    print(f"logs of each rank of each program: {root}{os.sep}", file=sys.stderr)
    return summarize([(rule.code, j) for _, results in runs for rule, j, _ in results])


def _json(runs, args, topology: Topology, root: Path) -> dict:
    def one(run, results) -> dict:
        return {
            "torch": run.info["version"],
            "python": run.python,
            "backend": run.backend,
            "device": args.device,
            "nproc": topology.nproc,
            "nnodes": topology.nnodes,
            "world_size": topology.world_size,
            "log_dir": str(run.root),
            "device_names": run.info.get("device_names", []),
            "packages": run.info.get("packages") or {},
            "results": [
                {
                    "code": rule.code,
                    "form": scenario.form if scenario else "",
                    "name": rule.name,
                    "verdict": j.verdict,
                    "flagged": j.flagged,
                    "fixed": j.fixed,
                    "reason": j.reason,
                    "hazard_fixed_in": scenario.hazard_fixed_in if scenario else None,
                    **({"layer": j.layer} if j.layer else {}),
                }
                for rule, j, scenario in results
            ],
        }

    if len(runs) == 1:
        return one(*runs[0])
    return {"log_dir": str(root), "runs": [one(run, results) for run, results in runs]}


_REASON_BREAKS = (" (", "; ", ": ")
SHORT_REASON = 100


def short_reason(reason: str) -> str:
    """A SKIPPED reason's first clause (``needs at least 2 ranks, got 1``), without the
    explanation and source citations that follow it; ``--verbose`` and JSON keep those."""
    cuts = [at for at in (reason.find(mark, 15) for mark in _REASON_BREAKS) if at > 0]
    short = reason[: min(cuts)] if cuts else reason
    if len(short) > SHORT_REASON:
        short = short[: SHORT_REASON - 3].rstrip() + "..."
    return short


def _shown_reason(j: Judgement, verbose: bool) -> str:
    return j.reason if verbose or j.verdict != SKIPPED else short_reason(j.reason)


def render_table(version: str, where: str, results, verbose: bool = False) -> str:
    lines = [
        "| rule | torch | backend/device | flagged program | fixed program | verdict |",
        "|------|-------|----------------|-----------------|---------------|---------|",
    ]
    for rule, j, scenario in results:
        verdict = j.verdict + (f" ({_shown_reason(j, verbose)})" if j.reason else "")
        name = label(rule.code, scenario.form if scenario else "")
        lines.append(f"| {name} | {version} | {where} | {j.flagged} | {j.fixed} | {verdict} |")
    return "\n".join(lines)


def render_matrix(runs, verbose: bool = False) -> str:
    """One row per rule and form, one column per interpreter's torch."""
    heads = [f"torch {run.info['version']}" for run, _ in runs]
    lines = ["| rule | " + " | ".join(heads) + " |", "|------|" + "|".join("---" for _ in heads) + "|"]
    for index, (rule, _, scenario) in enumerate(runs[0][1]):
        cells = []
        for _, results in runs:
            j = results[index][1]
            cells.append(j.verdict + (f" ({_shown_reason(j, verbose)})" if j.verdict == SKIPPED else ""))
        lines.append(f"| {label(rule.code, scenario.form if scenario else '')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
