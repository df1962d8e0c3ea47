"""Per rule, what the runtime layer must have seen at a site before a finding there may be
called RAN CLEAN: the site ran to completion AND the moment the hazard would show (its
observation window) was reached.

A site that merely appears in the events (an optimizer built, a summon entered, the line
where an exception was raised) is not enough: a job that died at the FSDP wrap right after
the optimizer was built never took the optimizer step at which FSD101 is checked, and a
summon that raised on entry never reached the exit at which FSD001 compares the shards.

Each window is decided from one rank's events unless it needs every rank (hazards that only
show across ranks).  Rules whose hazard the layer does not observe (FSD007 outside a summon,
FSD105 to FSD108) have no window: their findings are never RAN CLEAN.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Dict, List, Optional, Set, Tuple

Site = Tuple[str, int]

# what must have happened at the site, in words (for the verdict's evidence)
WINDOW_TEXT: Dict[str, str] = {
    "FSD001": "the exit of the `writeback=True` summon block with the shard checksums taken (where the write-back "
              "is measured; --no-checksums turns them off)",
    "FSD002": "the summon block's exit in at least 3 optimizer steps",
    "FSD003": "the exit of the summon block (its entry, where the full parameters' storage is checked, succeeded)",
    "FSD004": "the exit of the summon block (its entry, where the options are validated, succeeded)",
    "FSD005": "the exit of the summon block on at least two ranks with the shard checksums taken",
    "FSD006": "the exit of the `offload_to_cpu=True` summon block over parameters that live on an accelerator",
    "FSD008": "the exit of the summon block (its entry, where forward/backward is checked, succeeded)",
    "FSD009": "the exit of the summon block (its entry, where the options are validated, succeeded)",
    "FSD010": "the exit of the summon block (its entry, where the options are validated, succeeded)",
    "FSD011": "the exit of the summon block (inside it, the parameters are checked for FSDP2 shards)",
    "FSD012": "the entry of the `summon_full_params` context manager",
    "FSD101": "the first step of the optimizer built at this line, after FSDP wrapped a module (where its "
              "parameters are compared with the wrapped model's)",
    "FSD102": "a `clip_grad_norm_` over sharded FSDP1 parameters that returned on at least two ranks",
    "FSD103": "a `.cuda()`/`.to()` of an FSDP module that offloads its parameters, returned",
    "FSD104": "the collective at this line on every rank, with every rank alive to the end of the job",
}
NOT_OBSERVED = "the runtime layer does not observe this rule's hazard at this line"


def _site(value) -> Optional[Site]:
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0]:
        return (str(value[0]), int(value[1]))
    return None


def _rows(events: Dict[int, List[dict]], kind: str, test: Callable[[dict], bool] = lambda row: True):
    for rank, rows in events.items():
        for row in rows:
            if row.get("e") == kind and _site(row.get("site")) and test(row):
                yield rank, _site(row["site"]), row


def _on_ranks(pairs, least: int) -> Set[Site]:
    ranks: Dict[Site, Set[int]] = defaultdict(set)
    for rank, site, _row in pairs:
        ranks[site].add(rank)
    return {site for site, seen in ranks.items() if len(seen) >= least}


def observation_windows(events: Dict[int, List[dict]], collectives_compared: bool) -> Dict[str, Set[Site]]:
    """Rule -> the sites where that rule's observation window was reached in this job.

    ``collectives_compared``: every rank was alive to the end, so the collective counts per
    site were compared (FSD104's judgement, see ``evidence``)."""
    peers = min(2, max(1, len(events)))
    exits = _on_ranks(_rows(events, "summon_exit"), 1)
    windows: Dict[str, Set[Site]] = {code: set(exits) for code in
                                     ("FSD003", "FSD004", "FSD008", "FSD009", "FSD010", "FSD011")}
    windows["FSD001"] = _on_ranks(_rows(events, "summon_exit", lambda r: "shard_changed" in r), 1)
    windows["FSD005"] = _on_ranks(_rows(events, "summon_exit", lambda r: "shard_changed" in r), peers)
    windows["FSD006"] = _on_ranks(_rows(events, "summon_exit", lambda r: "full_bytes" in r), peers)
    windows["FSD002"] = set()
    for rank, rows in events.items():
        steps = sum(1 for row in rows if row.get("e") == "step")
        if steps >= 3:
            windows["FSD002"] |= {site for r, site, _ in _rows({rank: rows}, "summon_exit")}
    windows["FSD012"] = _on_ranks(_rows(events, "summon_enter"), 1)
    windows["FSD101"] = _on_ranks(_rows(events, "first_step", lambda r: r.get("wrapped")), 1)
    windows["FSD102"] = _on_ranks(_rows(events, "clip", lambda r: "norm" in r), peers)
    windows["FSD103"] = _on_ranks(_rows(events, "offload_move"), 1)
    windows["FSD104"] = set()
    if collectives_compared:
        for kind in ("collective", "summon_enter"):
            windows["FSD104"] |= _on_ranks(_rows(events, kind), 1)
    return windows
