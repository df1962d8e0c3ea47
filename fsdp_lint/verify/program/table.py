"""Every scenario's flagged and fixed program run as a user program through
``fsdp-lint verify --program``; prints the markdown table of docs/verification.md.

    python -m fsdp_lint.verify.program.table [--device cpu|cuda] [--nproc 2] [--log-dir DIR]
                                             [--record DIR] [CODES...]

A row passes when the flagged program's finding of that rule is CONFIRMED at the scenario's
line and the fixed program shows nothing for the rule (no CONFIRMED, nothing missed) and
ends without ERROR.  Scenarios that cannot run on the device are listed as such.  ``--record DIR`` also writes
the run as JSON (fsdp-lint commit, torch, devices, command, date, rows) into DIR, normally
``fsdp_lint/verify/records/program/``; docs/verification.md renders those records.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

import fsdp_lint
from fsdp_lint.rules import ALL_RULES, lookup
from fsdp_lint.scenarios.registry import scenario_for
from fsdp_lint.verify.command import INSTALL_HINT, prepare
from fsdp_lint.verify.launcher import probe
from fsdp_lint.verify.records import git_state


def _run(program: Path, log_dir: Path, device: str, nproc: int, timeout: float) -> Tuple[int, Optional[dict], str]:
    command = [sys.executable, "-m", "fsdp_lint", "verify", "--program", str(program), "--src", str(program),
               "--format", "json", "--device", device, "--nproc", str(nproc), "--timeout", str(timeout),
               "--log-dir", str(log_dir)]
    result = subprocess.run(command, capture_output=True, text=True)
    try:
        return result.returncode, json.loads(result.stdout), result.stderr
    except ValueError:
        return result.returncode, None, result.stderr[-500:]


def _flagged_cell(code: str, report: Optional[dict]) -> Tuple[str, str]:
    """(CONFIRMED | RAN CLEAN | FAIL, what the flagged program showed)."""
    if report is None:
        return "FAIL", "no report"
    mine = [f for f in report["findings"] if f["code"] == code]
    confirmed = [f for f in mine if f["verdict"] == "CONFIRMED"]
    if report["job"]["status"] == "ERROR":
        return "FAIL", f"ERROR: {report['job']['error'][:120]}"
    if confirmed:
        f = confirmed[0]
        return "CONFIRMED", f"CONFIRMED at line {f['location']['row']}: {f['evidence'][0][:140]}"
    missed = [m for m in report["missed"] if m["code"] == code]
    if missed:
        return "FAIL", f"MISSED at line {missed[0]['site']['row'] if missed[0]['site'] else '?'}"
    verdicts = sorted({f["verdict"] for f in mine}) or ["no finding"]
    return ("RAN CLEAN" if verdicts == ["RAN CLEAN"] else "FAIL"), ", ".join(verdicts)


def _fixed_cell(code: str, report: Optional[dict]) -> Tuple[bool, str]:
    if report is None:
        return False, "no report"
    if report["job"]["status"] == "ERROR":
        return False, f"ERROR: {report['job']['error'][:120]}"
    bad = [f for f in report["findings"] if f["code"] == code and f["verdict"] == "CONFIRMED"]
    bad += [m for m in report["missed"] if m["code"] == code]
    if bad:
        return False, f"{code} still shows: {bad[0].get('evidence', [''])[0][:120]}"
    return True, "nothing for the rule"


def write_record(record: dict, folder: Path) -> Path:
    """``program-<date>-<device>-<n>ranks-torch-<version>-<first>-<last>.json`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    codes = [row["code"] for row in record["rows"]]
    name = (f"program-{record['date'][:10]}-{record['device']}-{record['nproc']}ranks-torch-"
            f"{record['torch'].replace('+', '-')}-{codes[0]}-{codes[-1]}.json")
    path = folder / name
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsdp_lint.verify.program.table")
    parser.add_argument("codes", nargs="*")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--record", default=None, metavar="DIR")
    args = parser.parse_args(argv)
    torch_info, problem = probe(sys.executable, tempfile.gettempdir())  # this interpreter's torch
    if torch_info is None:
        print(f"{problem}; {INSTALL_HINT}", file=sys.stderr)
        return 2
    version = torch_info["version"]
    source = {"version": fsdp_lint.__version__, **git_state()}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entries = []
    root = Path(args.log_dir or tempfile.mkdtemp(prefix="fsdp-lint-program-table-")).resolve()
    rules = [lookup(c) for c in args.codes] if args.codes else list(ALL_RULES)
    rows = ["| rule | torch | device | flagged program | fixed program | result |",
            "|------|-------|--------|-----------------|---------------|--------|"]
    failed = 0
    for rule in rules:
        scenario = scenario_for(rule.code, args.device)
        why = scenario.cannot_run(args.device, args.nproc, version) if scenario else "no scenario"
        if why:
            rows.append(f"| {rule.code} | {version} | {args.device} | - | - | SKIPPED ({why}) |")
            entries.append({"code": rule.code, "flagged": "-", "fixed": "-", "result": f"SKIPPED ({why})"})
            continue
        flagged, fixed, problem = prepare(rule, scenario, root / rule.code)
        if problem:
            rows.append(f"| {rule.code} | {version} | {args.device} | - | - | ERROR ({problem}) |")
            entries.append({"code": rule.code, "flagged": "-", "fixed": "-", "result": f"ERROR ({problem})"})
            failed += 1
            continue
        timeout = max(scenario.timeout, 45.0)
        state, cell1 = _flagged_cell(rule.code, _run(flagged, root / rule.code / "flagged-logs", args.device,
                                                   args.nproc, timeout)[1])
        ok2, cell2 = _fixed_cell(rule.code, _run(fixed, root / rule.code / "fixed-logs", args.device,
                                                 args.nproc, timeout)[1])
        # RAN CLEAN: the hazard does not show on this torch/device (said plainly, not a failure)
        result = {"CONFIRMED": "PASS", "RAN CLEAN": "RAN CLEAN"}.get(state, "FAIL") if ok2 else "FAIL"
        failed += result == "FAIL"
        rows.append(f"| {rule.code} | {version} | {args.device}, {args.nproc} ranks | "
                    f"{cell1.replace('|', '/')} | {cell2.replace('|', '/')} | {result} |")
        entries.append({"code": rule.code, "flagged": cell1, "fixed": cell2, "result": result})
        print(rows[-1], file=sys.stderr, flush=True)
    print("\n".join(rows))
    print(f"logs: {root}{os.sep}", file=sys.stderr)
    if args.record:
        devices = (torch_info.get("device_names", [])[:args.nproc] if args.device == "cuda"
                   else [platform.machine()])
        record = {
            "format": 1, "generator": "python -m fsdp_lint.verify.program.table --record",
            "command": ["python", "-m", "fsdp_lint.verify.program.table", *(argv if argv is not None else sys.argv[1:])],
            "fsdp_lint": source, "torch": version, "device": args.device, "nproc": args.nproc,
            "device_names": devices, "date": started, "rows": entries,
        }
        print(f"record written: {write_record(record, Path(args.record))}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
