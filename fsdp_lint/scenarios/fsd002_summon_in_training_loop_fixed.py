"""FSD002 scenario, fixed by hand: the summon is guarded to every 1000 steps."""

import time

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness

STEPS = 40
WARMUP = 2


def main():
    rank, _, device, local_rank = _harness.init()
    width, depth = (1024, 8) if device == "cpu" else (4096, 8)
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(width, depth), device_id=where)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(4, width, device=where)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for step in range(WARMUP + STEPS):
        sync()
        start = time.perf_counter()
        loss = model(batch).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 1000 == 0:
            with FSDP.summon_full_params(model, writeback=False):
                count = sum(p.numel() for p in model.parameters())
        sync()
        times.append(time.perf_counter() - start)
    seconds = _harness.median(times[WARMUP:])
    _harness.report(hazard=False, step_time=seconds, detail=f"median step {seconds * 1000:.2f} ms, {count} parameters")
    _harness.finish()


if __name__ == "__main__":
    main()
