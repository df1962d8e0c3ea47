"""FSD002 scenario: a training loop that summons the full parameters on every step.

The hazard: every timed step all-gathers the whole model once more, inside the summon
block, on top of the forward's and backward's own all-gathers.  The bytes are counted where
FSDP all-gathers a flat parameter (``FlatParamHandle._all_gather_flat_param``), so the
verdict does not depend on timing, which a busy machine distorts; each program's median
step time is reported beside it, and each timed step's time and bytes all-gathered
(forward, backward and block) for the plots of ``verify --report``.  The fixed program
guards the summon to every 1000 steps: its timed steps gather nothing in the block.
"""

import time

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp._flat_param import FlatParamHandle

from fsdp_lint.scenarios import _harness

STEPS = 20
WARMUP = 2


MB = 1024 * 1024
gathered = [0]  # bytes FSDP has all-gathered so far (the unsharded flat parameters' size)


def _count_all_gathers():
    original = FlatParamHandle._all_gather_flat_param

    def counting(self, padded_unsharded_flat_param, *args, **kwargs):
        gathered[0] += padded_unsharded_flat_param.numel() * padded_unsharded_flat_param.element_size()
        return original(self, padded_unsharded_flat_param, *args, **kwargs)

    FlatParamHandle._all_gather_flat_param = counting


def main():
    _count_all_gathers()
    rank, _, device, local_rank = _harness.init()
    width, depth = (512, 8) if device == "cpu" else (4096, 8)
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    net = _harness.mlp(width, depth)
    full_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    model = FSDP(net, device_id=where)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(4, width, device=where)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times, in_block, per_step = [], [], []
    for step in range(WARMUP + STEPS):
        sync()
        start = time.perf_counter()
        step_start = gathered[0]
        loss = model(batch).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        before = gathered[0]
        with FSDP.summon_full_params(model, writeback=False):
            count = sum(p.numel() for p in model.parameters())
        in_block.append(gathered[0] - before)
        sync()
        times.append(time.perf_counter() - start)
        per_step.append(gathered[0] - step_start)
    seconds = _harness.median(times[WARMUP:])
    timed = in_block[WARMUP:]
    every = sum(1 for b in timed if b >= full_bytes)
    _harness.report(
        hazard=every == len(timed),
        step_time=seconds,
        step_times=[round(t, 6) for t in times[WARMUP:]],
        step_gathered=per_step[WARMUP:],
        detail=f"{every} of {len(timed)} steps all-gathered the full model ({full_bytes / MB:.1f} MB) again in the "
        f"summon block, {sum(timed) / MB:.1f} MB in all; median step {seconds * 1000:.2f} ms, {count} parameters",
    )
    _harness.finish()


if __name__ == "__main__":
    main()
