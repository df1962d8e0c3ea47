"""``fsdp-lint verify --program`` output: text (one line per finding, ruff-style, with the
evidence indented under it), JSON, and SARIF 2.1.0."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

from fsdp_lint import __version__
from fsdp_lint.rules import ALL_RULES
from fsdp_lint.verify.program.join import CONFIRMED, ERROR, MISSED, NOT_REACHED, RAN_CLEAN, Verification

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_LEVEL = {CONFIRMED: "error", MISSED: "error", ERROR: "warning", RAN_CLEAN: "note", NOT_REACHED: "note"}
VERDICTS = (CONFIRMED, RAN_CLEAN, NOT_REACHED, ERROR, MISSED)


@dataclass
class RunInfo:
    target: str
    torch: str
    nproc: int
    backend: str
    device: str
    log_dir: str
    seconds: float


def _path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _site_text(site) -> str:
    return f"{_path(site[0])}:{site[1]}" if site else "<unknown site>"


def job_summary(v: Verification, info: RunInfo) -> str:
    job = v.job
    if job.error:
        how = "ERROR"
    else:
        states = sorted({end.state for end in job.ranks})
        how = {
            ("finished",): "ran to the end on every rank",
            ("stopped",): f"stopped by --steps after {job.steps} optimizer step(s)",
        }.get(tuple(states))
        if how is None:
            hung = (f"hung, stopped after {job.hang_decided}" if job.hang_decided.startswith("no rank")
                    else "hung, killed at the timeout")
            ends = {"hazard": "raised", "terminated": "stopped by torchrun", "hung": hung,
                    "communication": "failed in a collective", "signal": "killed by a signal"}
            how = "ended early on the hazard(s) below (" + ", ".join(
                f"rank {end.rank}: {ends.get(end.state, end.state)}" for end in job.ranks) + ")"
    return (f"{info.target}: {info.nproc} rank(s), {info.backend}/{info.device}, torch {info.torch}: {how}; "
            f"{job.steps} optimizer step(s) seen, {info.seconds:.1f} s")


def render_text(v: Verification, info: RunInfo) -> str:
    lines = [job_summary(v, info)]
    if v.job.error:
        lines.append(f"ERROR: the job failed for a reason no rule explains: {v.job.error}")
        if v.job.error_traceback:
            lines.extend("    " + line for line in v.job.error_traceback.rstrip().splitlines())
    for note in v.job.notes:
        lines.append(f"note: {note}")
    if v.job.stacks:
        when = "when it stopped" if v.job.hang_decided.startswith("no rank") else "at the timeout"
        lines.append(f"stacks of every rank {when}: " + ", ".join(v.job.stacks))
    for r in v.results:
        f = r.finding
        lines.append(f"{_path(f.filename)}:{f.location.row}:{f.location.column}: {f.code} {r.verdict} {f.message}")
        lines.extend(f"    {line}" for line in r.evidence)
    if v.missed:
        lines.append(MISSED + ":")
        for h in v.missed:
            lines.append(f"{_site_text(h.site)}: {h.rule} {MISSED}")
            lines.extend(f"    {line}" for line in h.evidence)
    counts = ", ".join(f"{v.count(k)} {k.lower()}" for k in VERDICTS)
    lines.append(f"{len(v.results)} finding(s): {counts}.")
    lines.append(f"events and each rank's log: {info.log_dir}{os.sep}")
    return "\n".join(lines)


def _site_json(site) -> Optional[dict]:
    return {"filename": site[0], "row": site[1]} if site else None


def to_json(v: Verification, info: RunInfo) -> dict:
    job = v.job
    return {
        "program": info.target,
        "torch": info.torch,
        "nproc": info.nproc,
        "backend": info.backend,
        "device": info.device,
        "log_dir": info.log_dir,
        "job": {
            "status": "ERROR" if job.error else "OK",
            "error": job.error,
            "traceback": job.error_traceback or None,
            "optimizer_steps": job.steps,
            "ranks": [{"rank": e.rank, "end": e.state, "detail": e.detail} for e in job.ranks],
            "stacks": job.stacks,
            "hang_decided": job.hang_decided or None,
            "notes": job.notes,
        },
        "findings": [
            {
                "code": r.finding.code,
                "name": r.finding.name,
                "message": r.finding.message,
                "filename": r.finding.filename,
                "location": {"row": r.finding.location.row, "column": r.finding.location.column},
                "end_location": {"row": r.finding.end_location.row, "column": r.finding.end_location.column},
                "verdict": r.verdict,
                "evidence": r.evidence,
            }
            for r in v.results
        ],
        "missed": [
            {"code": h.rule, "site": _site_json(h.site), "also": [_site_json(s) for s in h.also],
             "verdict": MISSED, "evidence": h.evidence}
            for h in v.missed
        ],
        "summary": {k: v.count(k) for k in VERDICTS},
    }


def _uri(path: str) -> str:
    return _path(path).replace(os.sep, "/")


def to_sarif(v: Verification, info: RunInfo) -> dict:
    rules = [
        {"id": rule.code, "name": rule.name, "shortDescription": {"text": rule.summary}, "helpUri": rule.url()}
        for rule in ALL_RULES
    ]
    results = []
    for r in v.results:
        f = r.finding
        results.append({
            "ruleId": f.code,
            "level": SARIF_LEVEL[r.verdict],
            "message": {"text": f"{r.verdict}: {f.message}" + ("\n" + "\n".join(r.evidence) if r.evidence else "")},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(f.filename)},
                "region": {"startLine": f.location.row, "startColumn": f.location.column,
                           "endLine": f.end_location.row, "endColumn": f.end_location.column},
            }}],
            "properties": {"verdict": r.verdict, "evidence": r.evidence},
        })
    for h in v.missed:
        location = ([{"physicalLocation": {"artifactLocation": {"uri": _uri(h.site[0])},
                                           "region": {"startLine": h.site[1]}}}] if h.site else [])
        results.append({
            "ruleId": h.rule,
            "level": SARIF_LEVEL[MISSED],
            "message": {"text": f"{MISSED}: " + "\n".join(h.evidence)},
            "locations": location,
            "properties": {"verdict": MISSED, "evidence": h.evidence},
        })
    invocation = {"executionSuccessful": not v.job.error}
    if v.job.error:
        invocation["toolExecutionNotifications"] = [{"level": "error", "message": {"text": v.job.error}}]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "fsdp-lint", "version": __version__,
                                "informationUri": "https://github.com/fsdp-lint/fsdp-lint", "rules": rules}},
            "invocations": [invocation],
            "results": results,
            "properties": {"program": info.target, "torch": info.torch, "nproc": info.nproc,
                           "backend": info.backend, "device": info.device},
        }],
    }


def render(v: Verification, info: RunInfo, output_format: str) -> str:
    if output_format == "json":
        return json.dumps(to_json(v, info), indent=2)
    if output_format == "sarif":
        return json.dumps(to_sarif(v, info), indent=2)
    return render_text(v, info)


def exit_status(v: Verification) -> int:
    """2: the job could not be verified (ERROR); 1: a hazard was confirmed or missed; 0: neither."""
    if v.job.error:
        return 2
    return 1 if v.count(CONFIRMED) or v.count(MISSED) else 0
