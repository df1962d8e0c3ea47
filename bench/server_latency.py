"""``fsdp-lint server`` latency: from a change to its diagnostics, for a 1,000-line candidate
file, once the server is warm.  A benchmark, not a test: it prints numbers, asserts nothing.

    python bench/server_latency.py                 # 30 timed changes after 5 warm-up changes
    python bench/server_latency.py --changes 50 --debounce-ms 100

The server runs as editors run it (``python -m fsdp_lint server``, stdio, pygls's client on
the other side).  With ``--debounce-ms 0`` (the default here) the time is the server's own:
reading the change, linting, converting and sending the diagnostics.  An editor's default
settings add the debounce wait (100 ms) on top; ``--debounce-ms 100`` shows it.

The file is a training module in the style of accelerate / Lightning FSDP code: a block of
about 50 lines (wrapping with CPU offload, a summon that only reads, a checkpoint on rank 0,
an optimizer, gradient clipping) repeated with different names up to 1,000 lines; each
change edits one line in the middle of the file, as typing does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HEADER = '''\
"""Sharded fine-tuning entry points (FSDP with CPU parameter offload)."""

import math
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy, StateDictType, FullStateDictConfig

'''

BLOCK = '''\

def build_model_{i}(module: torch.nn.Module, device_id: int):
    """Wrap ``module`` for stage {i}; parameters live on the CPU between steps."""
    wrapped = FSDP(
        module,
        cpu_offload=CPUOffload(offload_params=True),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        device_id=device_id,
    )
    return wrapped


def parameter_report_{i}(model) -> dict:
    with FSDP.summon_full_params(model):
        total = sum(p.numel() for p in model.parameters())
        norms = {{n: float(p.norm()) for n, p in model.named_parameters()}}
    return {{"total": total, "norms": norms}}


def train_stage_{i}(model, loader, steps: int, lr: float = 3e-4):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for step, batch in enumerate(loader):
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= steps:
            break
    return optimizer


def save_stage_{i}(model, path: str):
    cfg = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
        state = model.state_dict()
    if dist.get_rank() == 0:
        torch.save(state, os.path.join(path, "stage_{i}.pt"))
    dist.barrier()


def warmup_factor_{i}(step: int, warmup: int = 100) -> float:
    return min(1.0, (step + 1) / warmup) * math.cos(step / 1000)
'''


def candidate(lines: int = 1000) -> str:
    """Whole blocks while they fit, then one-line settings up to exactly ``lines`` lines."""
    text, i = HEADER, 0
    while text.count("\n") + BLOCK.count("\n") <= lines:
        text += BLOCK.format(i=i)
        i += 1
    k = 0
    while text.count("\n") < lines:
        text += f"STAGE_{k}_STEPS = {100 * (k + 1)}\n"
        k += 1
    return text


async def measure(path: Path, text: str, changes: int, warmup: int, debounce_ms: int):
    from tests.lsp_session import Session

    session = Session(path.parent, path.parent / "server-stderr.log")
    await session.start({"fsdp-lint": {"debounceMs": debounce_ms}})
    try:
        uri = session.open(path, text)
        first = await session.next_publish(uri, 1)
        lines = text.split("\n")
        target = next(n for n in range(len(lines) // 2, len(lines)) if "lr: float = 3e-4" in lines[n])
        times = []
        for n in range(warmup + changes):
            edited = list(lines)
            edited[target] = lines[target].replace("3e-4", f"{n + 1}e-5")
            start = time.perf_counter()
            version = session.change(uri, "\n".join(edited))
            await session.next_publish(uri, version)
            if n >= warmup:
                times.append(time.perf_counter() - start)
        return len(first.diagnostics), times
    finally:
        await session.stop()


def engine_times(text: str, changes: int):
    """The engine alone on the same edits: a full ``lint_text`` and one with the server's
    incremental parse, so the table can say how much of the latency is the server's."""
    from fsdp_lint.engine import lint_text
    from fsdp_lint.rules import ALL_RULES
    from fsdp_lint.server.incremental import ParseCache

    lines = text.split("\n")
    target = next(n for n in range(len(lines) // 2, len(lines)) if "lr: float = 3e-4" in lines[n])
    cache = ParseCache()
    lint_text(text, "finetune.py", ALL_RULES, cache.parse)
    full, incremental = [], []
    for n in range(changes):
        edited = list(lines)
        edited[target] = lines[target].replace("3e-4", f"{n + 1}e-6")
        edited = "\n".join(edited)
        start = time.perf_counter()
        lint_text(edited, "finetune.py", ALL_RULES)
        full.append(time.perf_counter() - start)
        start = time.perf_counter()
        lint_text(edited, "finetune.py", ALL_RULES, cache.parse)
        incremental.append(time.perf_counter() - start)
    return full, incremental


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--debounce-ms", type=int, default=0)
    args = parser.parse_args()
    text = candidate(args.lines)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "finetune.py"
        path.write_text(text)
        load_before = os.getloadavg()
        findings, times = asyncio.run(measure(path, text, args.changes, args.warmup, args.debounce_ms))
        in_process = engine_times(text, args.changes)
        load_after = os.getloadavg()
    ms = sorted(t * 1000 for t in times)
    full, incremental = (statistics.median(t) * 1000 for t in in_process)
    print(f"file: {text.count(chr(10))} lines, {findings} findings; debounceMs {args.debounce_ms}; "
          f"{args.changes} timed changes after {args.warmup} warm-up")
    print(f"change -> diagnostics: median {statistics.median(ms):.1f} ms, "
          f"p90 {ms[int(0.9 * (len(ms) - 1))]:.1f} ms, min {ms[0]:.1f} ms, max {ms[-1]:.1f} ms")
    print(f"the same edits in one process, no server: lint_text {full:.1f} ms; "
          f"with the incremental parse {incremental:.1f} ms (medians)")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.system()}; libcst {_version('libcst')}, pygls {_version('pygls')}")
    print(f"load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
          f"after: {', '.join(f'{x:.2f}' for x in load_after)}")
    return 0


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    sys.exit(main())
