"""Rule documentation as users read it: ``fsdp-lint rule FSD001`` and ``docs/rules/*.md``.

A rule's doc is its own ruff-style text plus the verifier's measured results, read from
``fsdp_lint/verify/measured/*.json`` (one file per ``fsdp-lint verify --format json`` run,
with the machine it ran on).  ``python -m fsdp_lint.docs docs`` rewrites the docs folder;
a test checks the committed docs are current.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List

MEASURED = Path(__file__).resolve().parent / "verify" / "measured"
FIX_WORDS = {"always": "Fix is always available.", "sometimes": "Fix is sometimes available.", "never": "No automatic fix."}


def measured_runs() -> List[dict]:
    runs = []
    for path in sorted(MEASURED.glob("*.json")):
        with open(path, encoding="utf-8") as handle:
            runs.append(json.load(handle))
    return runs


def verification_table(rule) -> str:
    rows = []
    for run in measured_runs():
        for result in run["results"]:
            if result["code"] == rule.code:
                what = result["flagged"] if result["verdict"] != "SKIPPED" else result["reason"]
                rows.append(
                    f"| {run['torch']} | {run['backend']}/{run['device']} | {run.get('machine', '')} "
                    f"| {result['verdict']} | {what} |"
                )
    if not rows:
        return "Not run by the verifier yet."
    head = "| torch | backend/device | machine | verdict | what the flagged program did |\n|---|---|---|---|---|"
    return head + "\n" + "\n".join(rows)


def render_rule(rule) -> str:
    known = f"\nHazard fixed in torch {rule.hazard_fixed_in}.\n" if rule.hazard_fixed_in else ""
    return (
        f"# {rule.name} ({rule.code})\n\n{FIX_WORDS[rule.fix_availability]}\n{known}\n{rule.doc}\n"
        f"## Verified (`fsdp-lint verify {rule.code}`)\n"
        f"{verification_table(rule)}\n"
    )


DIFFERENCES = """## CPU against GPU: what differs

- FSD001: CONFIRMED on CPU with torch 2.13.0 and 2.11 (the whole local shard overwritten with
  the block's scratch data). The first 2.11 CPU run, with a block that allocated nothing, came
  out clean: what lands in the shard is whatever reuses the freed memory. NOT REPRODUCED on 2 GPUs with real
  `CPUOffload(offload_params=True)` (torch 2.11): there the parameters are on the GPU when
  `to_cpu()` runs, so `writeback=False` only declares a read-only block.
- FSD003: CONFIRMED on CPU (torch 2.13.0 and 2.11); SKIPPED on CUDA, where FSDP's parameters
  live on the GPU and pytorch#188989 cannot be reached.
- FSD006, FSD103: SKIPPED on CPU (FSD006 needs parameters on a GPU to avoid pytorch#188989;
  FSD103 needs real CPU parameter offload, which needs CUDA); CONFIRMED on 2 GPUs.
- FSD002: the slowdown is 1.3-1.4x on 2-core CPU/gloo and 1.2-1.4x on 2 GPUs with a 134M
  parameter MLP (the GPU scenario uses a wider model; per-step times of a few ms).
- FSD104: a hang on both; on GPU the first run's fixed program was judged FIX FAILED because
  the scenario's error pattern matched a benign CUDA "stream mismatch" UserWarning; the
  pattern was narrowed and FSD104 re-run (the table shows the re-run).
- Every other rule: the same verdict (CONFIRMED) on CPU and GPU.
"""


def render_verification() -> str:
    from fsdp_lint.verify.command import render_table

    parts = ["# Runtime verification\n",
             "Each table is one `fsdp-lint verify --format json` run, as measured (CPU runs use gloo;",
             "GPU runs use NCCL with NVLink multicast off). `fsdp-lint verify` reproduces them on your",
             "own torch and hardware.\n", DIFFERENCES]
    from fsdp_lint.rules import BY_CODE

    for run in measured_runs():
        parts.append(f"## torch {run['torch']}, {run['backend']}/{run['device']}: {run.get('machine', '')} ({run.get('date', '')})\n")
        results = []
        for item in run["results"]:
            rule = BY_CODE.get(item["code"])
            if rule is None:
                continue
            from fsdp_lint.verify.judge import Judgement

            results.append((rule, Judgement(item["verdict"], item["flagged"], item["fixed"], item["reason"])))
        parts.append(render_table(run["torch"], f"{run['backend']}/{run['device']}, {run['nproc']} ranks", results) + "\n")
    return "\n".join(parts)


def write_docs(folder: Path) -> List[Path]:
    from fsdp_lint.rules import ALL_RULES

    written = []
    (folder / "rules").mkdir(parents=True, exist_ok=True)
    for rule in ALL_RULES:
        path = folder / "rules" / f"{rule.code}.md"
        path.write_text(render_rule(rule), encoding="utf-8")
        written.append(path)
    path = folder / "verification.md"
    path.write_text(render_verification(), encoding="utf-8")
    written.append(path)
    return written


if __name__ == "__main__":
    for written in write_docs(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(written)
