"""From every rank's events (and how each rank ended) to the hazards the job showed.

A hazard is (rule, site) with the evidence, per rank.  Some come straight from one rank's
events (a summon that overwrote the shard, an exception with PyTorch's own text); others
only show across ranks or across steps, and are decided here:

- FSD002: a summon site entered in at least 3 optimizer steps and in at least half of them.
- FSD005: the same summon entry (site, n-th time) left some ranks' shards changed and
  others' not, after an edit (``rank0_only=True``; or ``writeback=True`` and a rank wrote).
- FSD006: every rank held (at least half of) the full model in host memory inside the block,
  gathered from parameters that lived on the GPU; the resident memory growth is reported.
- FSD102: ``clip_grad_norm_`` over FSDP1 shards: each rank's norm against the norm over
  every rank's shards.
- FSD104: a collective site that some ranks entered more often than others, while every
  rank was still running at the end (all hung, or all finished), or ended in a collective
  (a communication failure, or gloo's abort on a collective mismatch: ``Received data size
  doesn't match expected size``).

The job's own end: a rank that failed for a reason no hazard explains makes the job ERROR
(with that rank's traceback); a hang is explained only by an FSD104 hazard.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from fsdp_lint.verify.launcher import ProgramOutcome, RankOutcome
from fsdp_lint.verify.program.windows import observation_windows

Site = Tuple[str, int]

# gloo's own check when two ranks meet in different collectives: it aborts the process
# (SIGABRT, the text only in the rank's log) or raises
COLLECTIVE_MISMATCH = re.compile(r"Received data size doesn't match expected size|distributed collective mismatch")
COMMUNICATION_FAILURE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Timed out waiting for|Watchdog caught collective operation "
    r"timeout|NCCL (communicator was aborted|error)|ProcessGroupGloo.*(closed|timed out)|"
    + COLLECTIVE_MISMATCH.pattern
)
TRACEBACK_START = "Traceback (most recent call last):"


@dataclass
class Hazard:
    rule: str
    site: Optional[Site]
    also: List[Site] = field(default_factory=list)
    evidence: List[str] = field(default_factory=list)
    ranks: Set[int] = field(default_factory=set)

    def sites(self) -> List[Site]:
        return [s for s in [self.site, *self.also] if s]


@dataclass
class RankEnd:
    rank: int
    state: str  # finished, stopped, hazard, communication, exception, signal, hung, terminated, missing
    detail: str = ""
    traceback: str = ""


@dataclass
class JobEvidence:
    hazards: List[Hazard] = field(default_factory=list)
    reached: Set[Site] = field(default_factory=set)
    # rule -> sites where the rule's observation window was reached (see ``windows``)
    windows: Dict[str, Set[Site]] = field(default_factory=dict)
    ranks: List[RankEnd] = field(default_factory=list)
    steps: int = 0
    error: Optional[str] = None  # why the job is ERROR (None: it ran, or only hazards stopped it)
    error_traceback: str = ""
    stacks: List[str] = field(default_factory=list)  # stack dump files of a stopped job
    hang_decided: str = ""  # a hung job: "the 600 s timeout" or "no rank progressed for 5 s"
    notes: List[str] = field(default_factory=list)


def _site(value) -> Optional[Site]:
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0]:
        return (str(value[0]), int(value[1]))
    return None


def read_events(log_dir: str, nproc: int) -> Dict[int, List[dict]]:
    events: Dict[int, List[dict]] = {}
    for rank in range(nproc):
        path = os.path.join(log_dir, f"rank{rank}.events.jsonl")
        rows = []
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        continue  # a line cut by a kill
        except OSError:
            pass
        events[rank] = rows
    return events


class _Collector:
    def __init__(self) -> None:
        self.by_key: Dict[Tuple[str, Optional[Site]], Hazard] = {}

    def add(self, rule: str, site: Optional[Site], rank: Optional[int], text: str, also=()) -> None:
        key = (rule, site)
        hazard = self.by_key.get(key)
        if hazard is None:
            hazard = self.by_key[key] = Hazard(rule, site)
        for extra in also:
            if extra and extra not in hazard.also and extra != site:
                hazard.also.append(extra)
        line = f"rank {rank}: {text}" if rank is not None else text
        if line not in hazard.evidence and len(hazard.evidence) < 8:
            hazard.evidence.append(line)
        if rank is not None:
            hazard.ranks.add(rank)


def _last_traceback(text: str) -> str:
    start = text.rfind(TRACEBACK_START)
    if start < 0:
        lines = [line for line in text.splitlines() if line.strip()]
        return "\n".join(lines[-15:])
    block = text[start:].splitlines()
    out = []
    for line in block:
        out.append(line)
        if line and not line.startswith((" ", TRACEBACK_START)) and len(out) > 1:
            break
    return "\n".join(out)


def _raised(row: dict) -> str:
    message = (row.get("message") or "").splitlines()[0] if row.get("message") else ""
    if len(message) > 160:
        cut = message.find(". ", 60, 160)
        message = message[: cut + 1] if cut > 0 else message[:160] + "..."
    return f"raised `{message}`" + (f" ({row['note']})" if row.get("note") else "")


def collect(outcome: ProgramOutcome, nproc: int) -> JobEvidence:
    job = JobEvidence()
    if outcome.launcher_error:
        job.error = outcome.launcher_error
        return job
    events = read_events(outcome.log_dir, nproc)
    hazards = _Collector()
    for rank, rows in events.items():
        for row in rows:
            for key in ("site", "summon_site"):
                site = _site(row.get(key))
                if site:
                    job.reached.add(site)
            for extra in row.get("also") or []:
                if _site(extra):
                    job.reached.add(_site(extra))
            if row.get("e") == "hazard" and row.get("rule"):
                hazards.add(row["rule"], _site(row.get("site")), rank, row.get("evidence", ""))
            elif row.get("e") == "exception" and row.get("rule"):
                hazards.add(row["rule"], _site(row.get("site")), rank, _raised(row),
                            also=[_site(s) for s in row.get("also") or []])
        job.steps = max(job.steps, sum(1 for row in rows if row.get("e") == "step"))
    _summons_per_step(events, hazards)
    _divergent_edits(events, hazards)
    _host_memory(events, hazards)
    _local_norms(events, hazards)
    job.ranks = [_rank_end(rank, outcome, events.get(rank.rank, [])) for rank in outcome.ranks]
    compared = _unmatched_collectives(events, job, hazards, outcome)
    job.windows = observation_windows(events, compared)
    job.hazards = list(hazards.by_key.values())
    _judge_job(job, outcome)
    return job


def _summons_per_step(events, hazards: _Collector) -> None:
    for rank, rows in events.items():
        steps = sum(1 for row in rows if row.get("e") == "step")
        step_times = [row["t"] for row in rows if row.get("e") == "step"]
        by_site: Dict[Site, List[dict]] = defaultdict(list)
        for row in rows:
            if row.get("e") == "summon_exit" and _site(row.get("site")):
                by_site[_site(row["site"])].append(row)
        for site, exits in by_site.items():
            in_steps = {row.get("step") for row in exits}
            if steps >= 3 and len(in_steps) >= 3 and 2 * len(in_steps) >= steps:
                seconds = sum(row.get("seconds", 0.0) for row in exits)
                text = (f"entered in {len(in_steps)} of {steps} optimizer steps ({len(exits)} times), "
                        f"{1000 * seconds / len(exits):.2f} ms per entry")
                if len(step_times) >= 2 and step_times[-1] > step_times[0]:
                    share = seconds * (len(step_times) - 1) / len(exits) / (step_times[-1] - step_times[0])
                    text += f" ({100 * share:.0f} % of the mean step time)"
                hazards.add("FSD002", site, rank, text)


def _by_entry(events, kind: str) -> Dict[Tuple[Site, int], Dict[int, dict]]:
    entries: Dict[Tuple[Site, int], Dict[int, dict]] = defaultdict(dict)
    for rank, rows in events.items():
        for row in rows:
            if row.get("e") == kind and _site(row.get("site")) and "index" in row:
                entries[(_site(row["site"]), row["index"])][rank] = row
    return entries


def _divergent_edits(events, hazards: _Collector) -> None:
    for (site, index), per_rank in _by_entry(events, "summon_exit").items():
        rows = [r for r in per_rank.values() if "shard_changed" in r]
        if len(rows) < 2:
            continue
        options = rows[0].get("options", {})
        changed = {rank: bool(r["shard_changed"]) for rank, r in per_rank.items() if "shard_changed" in r}
        if len(set(changed.values())) < 2:
            continue
        edited = options.get("rank0_only") or any(r.get("wrote") for r in rows)
        if not edited:
            continue
        kept = ", ".join(str(r) for r, c in sorted(changed.items()) if c)
        lost = ", ".join(str(r) for r, c in sorted(changed.items()) if not c)
        hazards.add(
            "FSD005", site, None,
            f"entry {index + 1}: after the block the local shard changed on rank(s) {kept} and not on rank(s) {lost}: "
            "the ranks now hold different models",
        )


def _host_memory(events, hazards: _Collector) -> None:
    for (site, index), per_rank in _by_entry(events, "summon_exit").items():
        held = {
            rank: r for rank, r in per_rank.items()
            if r.get("full_bytes") and r.get("host_bytes", 0) >= 0.5 * r["full_bytes"]
        }
        if len(held) >= 2 and len(held) == len(per_rank):
            for rank, r in sorted(held.items()):
                growth = r.get("host_growth")
                grew = f"; resident memory grew by {growth / 2**20:.2f} MiB" if growth is not None else ""
                hazards.add(
                    "FSD006", site, rank,
                    f"held {r['host_bytes'] / 2**20:.2f} MiB of full parameters in host memory inside the block "
                    f"(full model {r['full_bytes'] / 2**20:.2f} MiB){grew}: every rank keeps its own full copy",
                )


def _local_norms(events, hazards: _Collector) -> None:
    for (site, index), per_rank in _by_entry(events, "clip").items():
        norms = {rank: r["norm"] for rank, r in per_rank.items() if r.get("sharded") and "norm" in r}
        if len(norms) < 2:
            continue
        p = next(iter(per_rank.values())).get("norm_type", 2.0)
        values = list(norms.values())
        if p == float("inf"):
            total = max(values)
        else:
            total = sum(v ** p for v in values) ** (1.0 / p)
        if any(abs(v - total) > 1e-4 * max(total, 1e-12) for v in values):
            hazards.add(
                "FSD102", site, None,
                "each rank clipped by the norm of its own shards: "
                + ", ".join(f"rank {r} {v:.4f}" for r, v in sorted(norms.items()))
                + f"; the norm over all shards is {total:.4f}",
            )


def _rank_end(rank: RankOutcome, outcome: ProgramOutcome, rows: List[dict]) -> RankEnd:
    exits = [row for row in rows if row.get("e") == "exit"]
    stopped = any(row.get("e") == "stopped" for row in rows)
    exceptions = [row for row in rows if row.get("e") == "exception"]
    log = rank.log_text()
    if rank.hung:
        if outcome.early_hang:
            return RankEnd(rank.rank, "hung", f"blocked in torch.distributed, {outcome.hang_decided}")
        return RankEnd(rank.rank, "hung", "still running at the timeout")
    if stopped:
        return RankEnd(rank.rank, "stopped", "stopped by --steps")
    last_exit = exits[-1] if exits else None
    if rank.returncode == 0 or (last_exit and last_exit.get("code") == 0 and not exceptions):
        detail = "exit 0"
        if rank.returncode not in (0, None):
            detail = f"the program finished; the process then failed at interpreter teardown ({rank.describe()})"
        return RankEnd(rank.rank, "finished", detail)
    if rank.terminated:
        return RankEnd(rank.rank, "terminated", "stopped by torchrun after another rank failed")
    if exceptions:
        row = exceptions[-1]
        text = row.get("message", "")
        if row.get("rule"):
            return RankEnd(rank.rank, "hazard", text.splitlines()[0] if text else "", row.get("traceback", ""))
        if COMMUNICATION_FAILURE.search(text):
            return RankEnd(rank.rank, "communication", text.splitlines()[0] if text else "", row.get("traceback", ""))
        return RankEnd(rank.rank, "exception", text.splitlines()[0] if text else "", row.get("traceback", ""))
    if rank.signal:
        mismatch = next((line.strip() for line in log.splitlines() if COLLECTIVE_MISMATCH.search(line)), None)
        if mismatch:  # gloo aborted the process: it met another rank in a different collective
            return RankEnd(rank.rank, "communication", f"killed by {rank.signal}: {mismatch[-300:]}",
                           _last_traceback(log))
        return RankEnd(rank.rank, "signal", f"killed by {rank.signal}", _last_traceback(log))
    if last_exit is not None:
        return RankEnd(rank.rank, "exception", f"the program exited with status {last_exit.get('code')}",
                       _last_traceback(log))
    if rank.returncode is None:
        return RankEnd(rank.rank, "missing", "no exit record", _last_traceback(log))
    return RankEnd(rank.rank, "exception", rank.describe(), _last_traceback(log))


def _unmatched_collectives(events, job: JobEvidence, hazards: _Collector, outcome: ProgramOutcome) -> bool:
    """Adds FSD104 hazards; True when the ranks' collective counts could be compared."""
    states = {end.state for end in job.ranks}
    alive_to_the_end = states <= {"hung", "communication", "terminated"} or states <= {"finished", "stopped"}
    if not alive_to_the_end or len(events) < 2:
        return False
    counts: Dict[Site, Dict[int, int]] = defaultdict(lambda: defaultdict(int))
    apis: Dict[Site, str] = {}
    for rank, rows in events.items():
        for row in rows:
            if row.get("e") in ("collective", "summon_enter") and _site(row.get("site")):
                site = _site(row["site"])
                counts[site][rank] += 1
                apis[site] = row.get("api", "summon_full_params")
    ranks = sorted(events)
    for site, per_rank in counts.items():
        numbers = [per_rank.get(r, 0) for r in ranks]
        if len(set(numbers)) < 2:
            continue
        text = (f"`{apis[site]}` (a collective) entered "
                + ", ".join(f"{n} time(s) by rank {r}" for r, n in zip(ranks, numbers))
                + ": the other ranks never joined")
        if outcome.early_hang:
            text += f"; the job stopped making progress ({outcome.hang_decided}) and was stopped"
        elif outcome.timed_out:
            text += "; the job stopped making progress and was killed at the timeout"
        hazards.add("FSD104", site, None, text)
    return True


def _judge_job(job: JobEvidence, outcome: ProgramOutcome) -> None:
    explained_hang = any(h.rule == "FSD104" for h in job.hazards)
    freed_ranks: Set[int] = set()
    for hazard in job.hazards:
        if hazard.rule == "FSD003":
            freed_ranks |= hazard.ranks
    if outcome.timed_out:
        job.hang_decided = outcome.hang_decided
        for end in job.ranks:
            path = os.path.join(outcome.log_dir, f"rank{end.rank}.stacks.txt")
            if os.path.exists(path) and os.path.getsize(path) > 0:
                job.stacks.append(path)
    for end in job.ranks:
        if end.detail.startswith("the program finished;"):
            job.notes.append(f"rank {end.rank}: {end.detail}")
    failures = []
    for end in job.ranks:
        if end.state in ("finished", "stopped", "hazard"):
            continue
        if end.state == "signal" and end.rank in freed_ranks:
            continue  # the crash reading freed full parameters (FSD003)
        if end.state in ("hung", "communication") and explained_hang:
            continue
        failures.append(end)
    explained_failure = any(end.state == "hazard" for end in job.ranks) or explained_hang or bool(freed_ranks)
    failures = [e for e in failures if not (e.state == "terminated" and explained_failure)]
    if not failures:
        return
    failures.sort(key=lambda e: e.state == "terminated")  # the rank that failed first, not the ones stopped after
    end = failures[0]
    ended = [f"rank {e.rank} ({e.detail})" for e in job.ranks if e.state in ("finished", "stopped")]
    if end.state == "hung":
        how = f"{job.hang_decided}; stopped then" if job.hang_decided.startswith("no rank") else "killed at the timeout"
        reason = f"stopped making progress ({how}) and no collective was entered by only some ranks"
        if ended:
            reason += "; " + ", ".join(ended) + " had already ended"
    elif end.state == "communication":
        reason = f"failed in a collective: {end.detail}"
    else:
        reason = end.detail
    job.error = f"rank {end.rank}: {reason}"
    job.error_traceback = end.traceback
