"""The HTML of ``verify --report``: one self-contained page (inline CSS and SVG, no script,
no external reference) from the verifier's machine records, or from ``verify --program``'s
JSON report and its log folder.

Rules (``verify [CODES] --report``): the environment of each run, a rule-by-torch grid when
several interpreters ran (``--python``), then one section per rule with each run's verdict,
the flagged and the fixed program's evidence side by side and a plot of what was measured:
time and bytes all-gathered per step, host memory per rank, shard elements changed, where
each rank was blocked when the program hung, else how each rank ended.

Program (``verify --program ... --report``): the job (how each rank ended, time per
optimizer step, where each rank was blocked when it hung), then one section per finding
and per hazard the static check missed, with when its site ran on each rank.
"""

from __future__ import annotations

import html
import os
from typing import Dict, List, Optional, Sequence, Tuple

from fsdp_lint.verify.html_report import plots
from fsdp_lint.verify.program.evidence import read_events
from fsdp_lint.verify.records import hung_stack, last_events
from fsdp_lint.verify.scenario import label

# the verifier's verdicts (judge.py), and verify --program's (program/join.py)
RULE_COLOURS = {
    "CONFIRMED": "#1e8449", "NOT REPRODUCED": "#b7950b", "FIX FAILED": "#c0392b", "ERROR": "#6c3483",
    "SKIPPED": "#7f8c8d",
}
PROGRAM_COLOURS = {
    "CONFIRMED": "#c0392b", "MISSED BY STATIC ANALYSIS": "#c0392b", "RAN CLEAN": "#1e8449",
    "NOT REACHED": "#7f8c8d", "ERROR": "#6c3483",
}
RULE_MEANING = {
    "CONFIRMED": "the flagged program showed the hazard, the fixed one ran clean",
    "NOT REPRODUCED": "the flagged program ran clean on this torch and device",
    "FIX FAILED": "the fixed program misbehaved: a bug in the rule",
    "ERROR": "a failure that is not the hazard",
    "SKIPPED": "cannot run here",
}
PROGRAM_MEANING = {
    "CONFIRMED": "the hazard was observed at the finding's site",
    "MISSED BY STATIC ANALYSIS": "a hazard at a site no finding names",
    "RAN CLEAN": "the site ran and the hazard did not show",
    "NOT REACHED": "the site never reached the moment the hazard would show",
    "ERROR": "the job failed before anything was known",
}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1180px;
       padding: 18px 24px 60px; color: #1c2833; background: #fdfefe; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 0 0 6px; }
h3 { font-size: 14px; margin: 10px 0 4px; }
.sub { color: #566573; margin: 0 0 14px; }
table.env { border-collapse: collapse; margin: 6px 0 14px; font-size: 13px; }
table.env th, table.env td { text-align: left; padding: 3px 10px; border-bottom: 1px solid #e5e8e8;
                             vertical-align: top; }
table.env th { color: #566573; font-weight: 600; }
.verdict { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-size: 12px;
           font-weight: 600; white-space: nowrap; }
section.rule, section.finding, section.job { border: 1px solid #d5d8dc; border-radius: 8px; padding: 12px 16px;
                                              margin: 14px 0; background: #fff; }
.result { border-top: 1px dashed #d5d8dc; padding-top: 8px; margin-top: 8px; }
.result:first-of-type { border-top: 0; margin-top: 0; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; margin: 6px 0; }
.pair > div { background: #f8f9f9; border-radius: 6px; padding: 6px 10px; font-size: 13px; overflow-wrap: anywhere; }
.pair h4 { margin: 0 0 4px; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.flagged h4 { color: #c0392b; } .fixed h4 { color: #2471a3; }
.reason { color: #566573; font-size: 13px; }
ul.evidence { margin: 4px 0; padding-left: 18px; font-size: 13px; }
code { font-size: 12px; background: #f2f3f4; padding: 0 3px; border-radius: 3px; }
svg.plot { display: block; max-width: 100%; height: auto; margin: 6px 0; }
.legend span { margin-right: 12px; font-size: 12px; }
.toc a { margin-right: 8px; font-size: 13px; }
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _badge(verdict: str, colours: Dict[str, str]) -> str:
    return f'<span class="verdict" style="background:{colours.get(verdict, "#7f8c8d")}">{_e(verdict)}</span>'


def _document(title: str, body: List[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{_e(title)}</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )


def _legend(colours: Dict[str, str], meaning: Dict[str, str]) -> str:
    return '<p class="legend">' + "".join(
        f"<span>{_badge(v, colours)} {_e(meaning[v])}</span>" for v in colours if v in meaning) + "</p>"


def _table(rows: Sequence[Tuple[str, str]]) -> str:
    return '<table class="env">' + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _commit(source: dict) -> str:
    commit = source.get("commit")
    if not commit:
        return f"{source.get('version') or '?'} (commit unknown)"
    dirty = " + uncommitted changes" if source.get("dirty") else ""
    return f"{source.get('version') or '?'}, commit {commit[:12]}{dirty}"


# -- how a rank ended ---------------------------------------------------------------------


def rank_end(entry: dict) -> Tuple[str, str]:
    """(class for ``plots.END_COLOURS``, words) of a record's rank entry."""
    if entry.get("hung"):
        return "hung", "hung"
    if entry.get("signal") and not entry.get("terminated"):
        return "signal", f"killed by {entry['signal']}"
    if entry.get("terminated"):
        return "stopped", "stopped by the launcher"
    code = entry.get("returncode")
    if code is None:
        return "no record", "no exit record"
    if code == 0:
        return "exit 0", "exit 0"
    line = (entry.get("failure_line") or "").split("]: ", 1)[-1]
    return "exception", line or f"exit {code}"


_PROGRAM_END = {"finished": "exit 0", "stopped": "exit 0", "hazard": "exception", "exception": "exception",
                "communication": "exception", "signal": "signal", "hung": "hung", "terminated": "stopped",
                "missing": "no record"}


# -- where a hung rank was ----------------------------------------------------------------


def blocked_in(stack: Sequence[dict]) -> Tuple[Optional[str], str]:
    """(the torch.distributed call the rank was blocked in, its own code's innermost line)
    from a record's stack (outermost frame first)."""
    inner = list(reversed(stack))
    call = next((f for f in inner if f["file"].endswith("distributed_c10d.py")), None)
    if call is None:
        call = next((f for f in inner if f["file"].startswith("torch/distributed/")
                     and f["func"] not in ("wrapper", "inner")), None)
    own = next((f for f in inner if f.get("own")), None)
    at = f"{own['file']}:{own['line']}" if own else ""
    if call is not None:
        return call["func"], at
    return (f"{inner[0]['func']} ({inner[0]['file']}:{inner[0]['line']})" if inner else None), at


def _event_label(event: dict) -> str:
    name = event.get("api") or {"step": f"step {event.get('step')}", "summon_enter": "summon",
                                 "summon_exit": "summon exit"}.get(event.get("e"), event.get("e") or "?")
    site = event.get("site")
    return f"{name} L{site[1]}" if site else name


def lane(rank: int, timeline: Optional[dict], stack: Optional[Sequence[dict]], state: str) -> dict:
    events = [(e["t"], _event_label(e)) for e in (timeline or {}).get("events", []) if e.get("e") != "start"]
    blocked, at = blocked_in(stack) if stack else (None, "")
    return {"rank": rank, "events": events[-8:], "stopped": (timeline or {}).get("stopped"),
            "blocked": blocked, "at": at, "state": "" if blocked else state}


def _hang_plot(title: str, ranks: Sequence[dict]) -> str:
    lanes = [lane(r["rank"], r.get("timeline"), r.get("stack"), r.get("outcome") or rank_end(r)[1]) for r in ranks]
    return plots.hang_lanes(title, lanes)


# -- rules: one record per interpreter ------------------------------------------------------


def _reports(result: dict, kind: str) -> Dict[int, dict]:
    program = (result.get("programs") or {}).get(kind) or {}
    return {r["rank"]: r["report"] for r in program.get("ranks", []) if isinstance(r.get("report"), dict)}


def _per_kind(result: dict, key: str) -> Dict[str, Dict[int, object]]:
    found = {}
    for kind in ("flagged", "fixed"):
        values = {rank: report[key] for rank, report in _reports(result, kind).items() if key in report}
        if values:
            found[kind] = values
    return found


def result_plots(result: dict) -> List[str]:
    """The plots of one rule's result: what its programs measured, else how their ranks
    ended.  Empty for a result whose programs never ran (SKIPPED, or no record of them)."""
    programs = result.get("programs") or {}
    if not programs:
        return []
    name = label(result["code"], result.get("form") or "")
    found = []
    steps = _per_kind(result, "step_times")
    if steps:
        gathered = _per_kind(result, "step_gathered") or None
        found.append(plots.step_series(f"{name}: flagged vs fixed, per step",
                                       {k: {r: [t * 1000 for t in v] for r, v in ranks.items()}
                                        for k, ranks in steps.items()}, "ms", gathered))
    elif _per_kind(result, "step_time"):
        medians = _per_kind(result, "step_time")
        found.append(plots.rank_bars(f"{name}: median step time per rank",
                                     {k: {r: t * 1000 for r, t in v.items()} for k, v in medians.items()}, "ms"))
    growth = _per_kind(result, "growth")
    if growth:
        per_rank = {}
        for kind, ranks in growth.items():
            values = next(iter(ranks.values()))  # every rank reports every rank's growth (gathered)
            per_rank[kind] = {rank: value / plots.MIB for rank, value in enumerate(values)}
        full = next(iter(next(iter(_per_kind(result, "full_bytes").values()), {}).values()), None)
        reference = (full / plots.MIB, "full model") if full else None
        found.append(plots.rank_bars(f"{name}: host memory growth per rank", per_rank, "MiB", reference))
    changed = _per_kind(result, "changed")
    if changed:
        total = next(iter(next(iter(_per_kind(result, "total").values()), {}).values()), None)
        found.append(plots.rank_bars(f"{name}: local shard elements changed", changed, "elements",
                                     (total, "shard size") if total else None))
    for kind in ("flagged", "fixed"):
        program = programs.get(kind) or {}
        if program.get("timed_out") or any(r.get("hung") for r in program.get("ranks", [])):
            found.append(_hang_plot(f"{name}: where each rank was when the {kind} program hung",
                                    program.get("ranks", [])))
    if not found:
        ends = {kind: [(r["rank"], *rank_end(r)) for r in programs[kind].get("ranks", [])]
                for kind in ("flagged", "fixed") if kind in programs}
        seconds = {kind: programs[kind]["seconds"] for kind in ends if programs[kind].get("seconds") is not None}
        found.append(plots.outcome_grid(f"{name}: how each rank ended", ends, seconds))
    return found


def _where(record: dict) -> str:
    return (f"torch {record['torch'].get('version')}, {record['backend']}/{record['device']}, "
            f"{record['world_size']} rank{'s' if record['world_size'] != 1 else ''}")


def _column(record: dict) -> str:
    return f"torch {record['torch'].get('version')}\n{record['backend']}/{record['device']}, {record['world_size']}r"


def _rank_lines(result: dict, kind: str) -> str:
    program = (result.get("programs") or {}).get(kind)
    if not program:
        return ""
    items = "".join(f"<li>rank {r['rank']}: {_e(r.get('outcome') or rank_end(r)[1])}</li>"
                    for r in program.get("ranks", []))
    return f'<ul class="evidence">{items}</ul><p class="reason">{program.get("seconds", 0):.1f} s</p>'


def _environment(records: Sequence[dict]) -> List[str]:
    """One column per run (interpreter)."""
    columns = []
    for record in records:
        torch = record["torch"]
        build = ", ".join(p for p in (f"CUDA {torch['cuda']}" if torch.get("cuda") else "",
                                      f"git {torch['git_version'][:10]}" if torch.get("git_version") else "") if p)
        columns.append({
            "torch": f"{torch.get('version')}" + (f" ({build})" if build else ""),
            "backend / device": f"{record['backend']} / {record['device']}",
            "devices": ", ".join(record.get("device_names") or []) or record.get("machine") or "-",
            "ranks": f"{record['world_size']} ({record['nproc']} per node x {record['nnodes']} node(s))",
            "python": record.get("python") or "-",
            "fsdp-lint": _commit(record.get("fsdp_lint") or {}),
            "date": record.get("date", "-"),
            "record": record.get("provenance", "recorded") + (f": {record['note']}" if record.get("note") else ""),
            "command": " ".join(record.get("command") or []) or "-",
        })
    rows = "".join(
        f"<tr><th>{_e(key)}</th>" + "".join(f"<td>{_e(column[key])}</td>" for column in columns) + "</tr>"
        for key in columns[0]
    ) if columns else ""
    return ["<h2>Environment</h2>", f'<table class="env">{rows}</table>']


def _grid(records: Sequence[dict], rows: List[str]) -> List[str]:
    columns = [_column(r) for r in records]
    cells = {}
    for record, column in zip(records, columns):
        for result in record["results"]:
            cells[(label(result["code"], result.get("form") or ""), column)] = result["verdict"]
    svg = plots.verdict_grid("verdict of each rule on each torch", rows, columns, cells, RULE_COLOURS)
    return ['<section class="job" id="matrix"><h2>Rule by torch version</h2>', svg, "</section>"]


def rules_page(records: Sequence[dict]) -> str:
    """The report of one verifier run: one record per interpreter (``--python`` matrix)."""
    order: List[str] = []
    by_rule: Dict[str, List[Tuple[dict, dict]]] = {}
    names: Dict[str, str] = {}
    for record in records:
        for result in record["results"]:
            key = label(result["code"], result.get("form") or "")
            if key not in by_rule:
                order.append(key)
                by_rule[key] = []
            by_rule[key].append((record, result))
            names[key] = result.get("name", "")
    counts: Dict[str, int] = {}
    for record in records:
        for result in record["results"]:
            counts[result["verdict"]] = counts.get(result["verdict"], 0) + 1
    body = [
        "<h1>fsdp-lint verify report</h1>",
        f'<p class="sub">{len(order)} rule scenario(s) on {len(records)} interpreter(s): '
        + ", ".join(f"{n} {_e(v.lower())}" for v, n in counts.items()) + "</p>",
        _legend(RULE_COLOURS, RULE_MEANING),
        '<p class="toc">' + "".join(f'<a href="#{_anchor(k)}">{_e(k)}</a>' for k in order) + "</p>",
        *_environment(records),
    ]
    if len(records) > 1:
        body += _grid(records, order)
    for key in order:
        code = key.split(" ")[0]
        body.append(f'<section class="rule" id="{_anchor(key)}" data-rule="{_e(code)}">'
                    f"<h2>{_e(key)} <small>{_e(names[key])}</small></h2>")
        for record, result in by_rule[key]:
            where = _where(record)
            body.append(f'<div class="result"><h3>{_e(where)}: {_badge(result["verdict"], RULE_COLOURS)}</h3>')
            if result.get("reason"):
                body.append(f'<p class="reason">{_e(result["reason"])}</p>')
            if result["verdict"] != "SKIPPED":
                body.append(
                    '<div class="pair">'
                    f'<div class="flagged"><h4>flagged program</h4>{_e(result.get("flagged", "-"))}'
                    f'{_rank_lines(result, "flagged")}</div>'
                    f'<div class="fixed"><h4>fixed program</h4>{_e(result.get("fixed", "-"))}'
                    f'{_rank_lines(result, "fixed")}</div></div>'
                )
            body.extend(result_plots(result))
            body.append("</div>")
        body.append("</section>")
    return _document("fsdp-lint verify report", body)


def _anchor(key: str) -> str:
    return "rule-" + "".join(c if c.isalnum() else "-" for c in key).strip("-")


# -- verify --program -----------------------------------------------------------------------


def _site_rows(finding: dict) -> Tuple[str, int, int]:
    start = finding["location"]["row"]
    end = max(start, (finding.get("end_location") or {}).get("row", start))
    return os.path.realpath(finding["filename"]), start, end


def _at(site, span: Tuple[str, int, int]) -> bool:
    if not (isinstance(site, (list, tuple)) and len(site) == 2 and site[0]):
        return False
    path, first, last = span
    return os.path.realpath(str(site[0])) == path and first <= int(site[1]) <= last


def program_plots(report: dict, events: Dict[int, List[dict]]) -> Tuple[List[str], Dict[int, float]]:
    """The job's plots (how each rank ended, time per optimizer step, where hung ranks were)
    and each rank's start time (for the findings' timelines)."""
    job = report["job"]
    found = []
    starts = {rank: next((r["t"] for r in rows if r.get("e") == "start"), rows[0]["t"] if rows else 0.0)
              for rank, rows in events.items()}
    ends = {"job": [(end["rank"], _PROGRAM_END.get(end["end"], "no record"), end["end"]) for end in job["ranks"]]}
    found.append(plots.outcome_grid("how each rank ended", ends, {}))
    steps = {}
    for rank, rows in events.items():
        times = [r["t"] for r in rows if r.get("e") == "step"]
        if len(times) >= 2:
            steps[rank] = [(b - a) * 1000 for a, b in zip(times, times[1:])]
    if steps:
        found.append(plots.step_series("time between optimizer steps, per rank", {"job": steps}, "ms"))
    hung = [end["rank"] for end in job["ranks"] if end["end"] == "hung"]
    if hung or job.get("hang_decided"):
        log_dir = report["log_dir"]
        ranks = []
        for end in job["ranks"]:
            rank = end["rank"]
            try:
                with open(os.path.join(log_dir, f"rank{rank}.log"), encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
            except OSError:
                text = ""
            ranks.append({"rank": rank, "hung": end["end"] == "hung", "outcome": end["detail"] or end["end"],
                          "timeline": last_events(log_dir, rank),
                          "stack": hung_stack(text) if end["end"] == "hung" else None})
        found.append(_hang_plot("where each rank was when the job hung", ranks))
    return found, starts


def _finding_plot(title: str, span, rule: str, events: Dict[int, List[dict]], starts: Dict[int, float]) -> str:
    lanes, end = {}, 0.0
    for rank, rows in events.items():
        start = starts.get(rank, 0.0)
        lane_ = {"steps": [], "ran": [], "hazard": []}
        for row in rows:
            t = row.get("t", start) - start
            end = max(end, t)
            if row.get("e") == "step":
                lane_["steps"].append(t)
            elif row.get("e") in ("hazard", "exception") and row.get("rule") == rule and (
                    _at(row.get("site"), span) or any(_at(s, span) for s in row.get("also") or [])):
                lane_["hazard"].append(t)
            elif _at(row.get("site"), span):
                lane_["ran"].append(t)
        lanes[rank] = lane_
    return plots.site_timeline(title, lanes, end)


def program_page(report: dict, source: Optional[dict] = None, seconds: Optional[float] = None) -> str:
    """The report of one ``verify --program`` job: ``report`` as ``program.report.to_json``
    writes it (its ``log_dir`` holds the ranks' events and logs)."""
    job = report["job"]
    events = read_events(report["log_dir"], report["nproc"])
    job_plots, starts = program_plots(report, events)
    counts = ", ".join(f"{n} {_e(v.lower())}" for v, n in report["summary"].items())
    rows = [
        ("program", report["program"]),
        ("torch", report["torch"]),
        ("backend / device", f"{report['backend']} / {report['device']}"),
        ("ranks", str(report["nproc"])),
        ("fsdp-lint", _commit(source or {})),
        ("job", job["status"] + (f": {job['error']}" if job.get("error") else "")
         + f"; {job['optimizer_steps']} optimizer step(s)" + (f"; {seconds:.1f} s" if seconds is not None else "")),
        ("events and logs", report["log_dir"]),
    ]
    body = [
        f"<h1>fsdp-lint verify --program report</h1><p class=\"sub\">{_e(report['program'])}: {counts}</p>",
        _legend(PROGRAM_COLOURS, PROGRAM_MEANING),
        "<h2>Environment</h2>", _table(rows),
        '<section class="job" id="job"><h2>The job</h2>',
        *[f'<p class="reason">note: {_e(n)}</p>' for n in job.get("notes") or []],
        *job_plots, "</section>",
    ]
    items = [(f, f["verdict"]) for f in report["findings"]] + [(m, m["verdict"]) for m in report["missed"]]
    for index, (item, verdict) in enumerate(items):
        if "location" in item:
            span = _site_rows(item)
            where = f"{_short(item['filename'])}:{item['location']['row']}"
            title = f"{item['code']} {item['name']}"
        else:
            site = item.get("site") or {}
            span = (os.path.realpath(site.get("filename", "")), site.get("row", 0), site.get("row", 0))
            where = f"{_short(site.get('filename', '?'))}:{site.get('row', '?')}" if site else "unknown site"
            title = f"{item['code']} (no finding)"
        body.append(f'<section class="finding" id="finding-{index}" data-rule="{_e(item["code"])}">'
                    f"<h2>{_e(where)}: {_e(title)} {_badge(verdict, PROGRAM_COLOURS)}</h2>")
        if item.get("message"):
            body.append(f'<p class="reason">{_e(item["message"])}</p>')
        body.append('<ul class="evidence">' + "".join(f"<li>{_e(line)}</li>" for line in item.get("evidence") or [])
                    + "</ul>")
        body.append(_finding_plot(f"{item['code']} at {where}: when the site ran on each rank", span, item["code"],
                                  events, starts))
        body.append("</section>")
    return _document(f"fsdp-lint verify --program report: {report['program']}", body)


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel
