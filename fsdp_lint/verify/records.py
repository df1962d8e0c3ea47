"""Machine-written records of verifier runs (``fsdp-lint verify --record DIR``).

One JSON file per run and interpreter: what ran (fsdp-lint version and git commit, a hash of
every scenario file), where (torch version and build, the versions of the frameworks the
scenarios need, backend, device names, ranks, nodes, date) and what happened (each rule's
verdict, one result per scenario form, and each rank's exit and evidence in the flagged and
the fixed program).  A result's ``form`` names the form (``"accelerate"``); records made
before forms existed have none: their results are the plain torch form.  The records shipped
in ``fsdp_lint/verify/records/`` are the source of the docs (``python -m fsdp_lint.docs docs``)
and of ``fsdp-lint rule``; a test fails when the docs and the records disagree.

Records are never edited by hand.  Runs made before records existed are kept only through
``python -m fsdp_lint.verify.records import-legacy OLD.json --note TEXT``, which marks them
``"provenance": "imported"`` with what is known about them.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import fsdp_lint
from fsdp_lint.verify.logs import failure_line
from fsdp_lint.verify.stacks import main_thread_stack

FORMAT = "fsdp-lint-verify-record/1"
PACKAGE = Path(fsdp_lint.__file__).resolve().parent
SHIPPED = PACKAGE / "verify" / "records"
SCENARIOS = PACKAGE / "scenarios"
REQUIRED = (
    "format", "provenance", "fsdp_lint", "scenario_hashes", "torch", "backend", "device",
    "device_names", "nproc", "nnodes", "world_size", "date", "results",
)
RESULT_KEYS = ("code", "name", "verdict", "flagged", "fixed", "reason")


def scenario_hashes() -> Dict[str, str]:
    """sha256 of every file of the scenarios package (programs, harness, registry)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(SCENARIOS.glob("*.py"))
    }


def git_state() -> Dict[str, Optional[object]]:
    """The commit this fsdp_lint was loaded from: ``FSDP_LINT_GIT_COMMIT`` when the person
    running it says so (a copy on a remote machine, whose own git metadata may be stale: the
    2x H200 records of 2026-11-30 read "7f2ed85b2+changes" that way while the code was
    df9a86c), else the git checkout it sits in."""
    given = os.environ.get("FSDP_LINT_GIT_COMMIT")
    if given:
        return {"commit": given, "dirty": None, "commit_from": "FSDP_LINT_GIT_COMMIT"}

    def git(*args: str) -> Optional[str]:
        try:
            done = subprocess.run(
                ["git", "-C", str(PACKAGE.parent), *args], capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != PACKAGE.parent:
        return {"commit": None, "dirty": None}  # a copy without .git, and nobody said which commit
    status = git("status", "--porcelain", "--", "fsdp_lint", ":!fsdp_lint/verify/records")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


LAST_EVENTS = 16  # the runtime layer's events kept per rank of a hung program
STACK_FRAMES = 40  # innermost frames kept of a hung rank's stack


def short_file(path: str) -> str:
    """A frame's file as the report shows it: ``torch/distributed/distributed_c10d.py``
    from the installed torch, else the file's name (scenario programs live in temp folders)."""
    path = path.replace(os.sep, "/")
    at = path.rfind("/torch/")
    return path[at + 1:] if at >= 0 else path.rsplit("/", 1)[-1]


def _own_file(path: str) -> bool:
    """Whether a frame's file is the user's (or scenario's) code: not torch, not fsdp-lint's
    runtime layer, not the standard library or another installed package."""
    path = path.replace(os.sep, "/")
    if path.startswith("<"):  # <frozen runpy>, <string>: not a file of the program
        return False
    return not any(part in path for part in ("/torch/", "/fsdp_lint/", "/lib/python3", "/site-packages/"))


def hung_stack(text: str) -> List[dict]:
    """A hung rank's program thread at its last stack dump, outermost frame first; ``own``:
    a frame of the program's own code."""
    frames = main_thread_stack(text)[-STACK_FRAMES:]
    return [{"file": short_file(f.file), "line": f.line, "func": f.func, "own": _own_file(f.file)} for f in frames]


def last_events(log_dir: str, rank: int) -> Optional[dict]:
    """The last events the runtime layer wrote for ``rank`` (``verify --observe``), with
    times in seconds from the rank's start, and when the rank was stopped; None when the
    program did not run under the layer."""
    rows = []
    try:
        with open(os.path.join(log_dir, f"rank{rank}.events.jsonl"), encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue  # a line cut by the kill
    except OSError:
        return None
    start = next((row["t"] for row in rows if row.get("e") == "start" and "t" in row), None)
    if start is None:
        return None
    kept = []
    for row in rows[-LAST_EVENTS:]:
        site = row.get("site")
        kept.append({
            "e": row.get("e"), "t": round(row.get("t", start) - start, 4), "step": row.get("step"),
            **({"api": row["api"]} if row.get("api") else {}),
            **({"rule": row["rule"]} if row.get("rule") else {}),
            **({"site": [short_file(str(site[0])), site[1]]} if isinstance(site, list) and len(site) == 2 else {}),
        })
    stopped = None
    try:
        with open(os.path.join(log_dir, f"rank{rank}.exit.json"), encoding="utf-8") as handle:
            ended = json.load(handle)
        stopped = ended.get("terminated_at") or ended.get("ended_at")
    except (OSError, ValueError):
        pass
    return {"events": kept, "stopped": round(stopped - start, 4) if stopped else None}


def _rank_entry(rank, log_dir: str = "", hang: bool = False) -> dict:
    """``hang``: the program was stopped as hung: the entry keeps where the rank was (its
    stack, when it was still running) and its last observed calls."""
    entry = {
        "rank": rank.rank,
        "returncode": rank.returncode,
        "signal": rank.signal,
        "terminated": rank.terminated,
        "hung": rank.hung,
        "outcome": rank.describe(),
    }
    if rank.report is not None:
        entry["report"] = rank.report
    if rank.returncode not in (0, None) or rank.hung:
        entry["failure_line"] = failure_line(rank.log_text())
    if hang and rank.hung:
        entry["stack"] = hung_stack(rank.log_text())
    if hang and log_dir:
        timeline = last_events(log_dir, rank.rank)
        if timeline is not None:
            entry["timeline"] = timeline
    return entry


def _program_entry(outcome) -> dict:
    return {
        "seconds": round(outcome.seconds, 2),
        "timed_out": outcome.timed_out,
        "hang_decided": outcome.hang_decided or None,
        "launcher_error": outcome.launcher_error,
        "ranks": [_rank_entry(rank, outcome.log_dir, bool(outcome.timed_out)) for rank in outcome.ranks],
    }


def source_state() -> dict:
    """What ran: taken when the run starts (files may change while it runs)."""
    return {"fsdp_lint": {"version": fsdp_lint.__version__, **git_state()}, "scenario_hashes": scenario_hashes()}


def build(info: dict, topology, backend: str, device: str, results, command: List[str],
          source: Optional[dict] = None, some_rules: bool = False, some_forms: Optional[List[str]] = None) -> dict:
    """A record of one run: ``info`` from the interpreter's torch probe, ``results`` triples of
    (rule, Judgement, scenario), one per form, ``source`` from ``source_state()`` at the start."""
    source = source or source_state()
    entries = []
    for rule, judgement, scenario in results:
        entry = {
            "code": rule.code,
            "form": scenario.form if scenario else "",
            "name": rule.name,
            "verdict": judgement.verdict,
            "flagged": judgement.flagged,
            "fixed": judgement.fixed,
            "reason": judgement.reason,
            "scenario": scenario.program if scenario else None,
            "hazard_fixed_in": scenario.hazard_fixed_in if scenario else None,
        }
        if judgement.outcomes:
            entry["programs"] = dict(zip(("flagged", "fixed"), map(_program_entry, judgement.outcomes)))
        entries.append(entry)
    return {
        "format": FORMAT,
        "provenance": "recorded",
        "generator": "fsdp-lint verify --record",
        "command": command,
        "fsdp_lint": source["fsdp_lint"],
        "scenario_hashes": source["scenario_hashes"],
        "torch": {key: info.get(key) for key in ("version", "cuda", "git_version", "debug")},
        "python": info.get("python"),
        "packages": info.get("packages") or {},  # the scenarios' frameworks, as the probe found them
        "backend": backend,
        "device": device,
        "device_names": info.get("device_names") or [],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "nproc": topology.nproc,
        "nnodes": topology.nnodes,
        "world_size": topology.world_size,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "some_rules": some_rules,
        **({"some_forms": sorted(some_forms)} if some_forms else {}),  # `verify --form`: these forms only
        "results": entries,
    }


def file_name(record: dict) -> str:
    torch_version = (record["torch"].get("version") or "unknown").replace("+", "-")
    day = record["date"][:10]
    kind = "-imported" if record.get("provenance") == "imported" else ""
    codes = [result["code"] for result in record["results"]]
    part = f"-{codes[0]}-{codes[-1]}" if record.get("some_rules") and codes else ""  # a run of some rules only
    part += "".join(f"-{form}" for form in record.get("some_forms") or [])  # of some forms only
    return (
        f"{day}-{record['backend']}-{record['device']}-{record['world_size']}ranks-torch-{torch_version}"
        f"{part}{kind}.json"
    )


def write(record: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(record)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def form_of(result: dict) -> str:
    """A result's scenario form (``""``: plain torch, also for records made before forms)."""
    return result.get("form") or ""


def problems(record: dict) -> List[str]:
    """What makes ``record`` not a record (missing keys, unknown provenance)."""
    found = [f"missing {key!r}" for key in REQUIRED if key not in record]
    if record.get("format") != FORMAT:
        found.append(f"format is {record.get('format')!r}, not {FORMAT!r}")
    if record.get("provenance") not in ("recorded", "imported"):
        found.append(f"provenance {record.get('provenance')!r}")
    if record.get("provenance") == "imported" and not record.get("note"):
        found.append("an imported record needs a note saying what is known")
    for result in record.get("results", []):
        found += [f"{result.get('code')}: missing {key!r}" for key in RESULT_KEYS if key not in result]
    return found


def load(folder: Path = SHIPPED) -> List[dict]:
    """Every record in ``folder``, oldest first, then by file name."""
    records = []
    for path in sorted(folder.glob("*.json")):
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        record["_file"] = path.name
        records.append(record)
    return sorted(records, key=lambda r: (r["provenance"] != "imported", r["date"], r["_file"]))


def import_legacy(old: dict, note: str, date: str, machine: str) -> dict:
    """A record for a run made before records existed: what the old file says, nothing more
    (no commit, no scenario hashes, no per-rank entries), marked imported, with a note."""
    version = old.get("torch")
    return {
        "format": FORMAT,
        "provenance": "imported",
        "generator": "python -m fsdp_lint.verify.records import-legacy",
        "note": note,
        "command": None,
        "fsdp_lint": {"version": None, "commit": None, "dirty": None},
        "scenario_hashes": None,
        "torch": {"version": version, "cuda": None, "git_version": None, "debug": None},
        "python": None,
        "backend": old["backend"],
        "device": old["device"],
        "device_names": [],
        "machine": machine or old.get("machine", ""),
        "nproc": old["nproc"],
        "nnodes": 1,
        "world_size": old["nproc"],
        "date": date,
        "results": [
            {
                **{key: item[key] for key in RESULT_KEYS},
                "scenario": None,
                "hazard_fixed_in": item.get("hazard_fixed_in"),
                **({"old_note": item["note"]} if item.get("note") else {}),
            }
            for item in old["results"]
        ],
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsdp_lint.verify.records")
    sub = parser.add_subparsers(dest="command", required=True)
    legacy = sub.add_parser("import-legacy", help="wrap a run made before records existed")
    legacy.add_argument("old", type=Path)
    legacy.add_argument("--note", required=True, help="what is known about the run (who, when, which scenarios)")
    legacy.add_argument("--date", required=True, help="when it ran (ISO 8601)")
    legacy.add_argument("--machine", default="")
    legacy.add_argument("--out", type=Path, default=SHIPPED)
    check = sub.add_parser("check", help="validate records")
    check.add_argument("folder", type=Path, nargs="?", default=SHIPPED)
    args = parser.parse_args(argv)
    if args.command == "import-legacy":
        with open(args.old, encoding="utf-8") as handle:
            record = import_legacy(json.load(handle), args.note, args.date, args.machine)
        print(write(record, args.out))
        return 0
    bad = 0
    for record in load(args.folder):
        for problem in problems(record):
            print(f"{record['_file']}: {problem}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
