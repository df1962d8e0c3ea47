"""FSD001 scenario on GPUs: real CPUOffload(offload_params=True), a read-only summon with the
default writeback.

The corruption of pytorch#188989 needs CPU-resident parameters on torch <= 2.13 and does
not show here (the parameters are on the GPU when ``to_cpu()`` runs); the cost does: on exit
of every summon block each rank copies its slice of the full parameters back into its
host-resident shard.  24 x Linear(4096, 4096) (~403M parameters), FSDP per layer; after one
forward/backward, the median of read-only summons (the norm of every parameter).  The fixed
program passes writeback=False.  Measured on 2 x H200 with torch 2.11 before this program
existed: 46.3 ms against 28.2 ms (+64 %).
"""

import time

import torch
from torch.distributed.fsdp import CPUOffload
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp_lint.scenarios import _harness

WIDTH, LAYERS = 4096, 24
WARMUP, REPEATS = 2, 7


def main():
    rank, _, device, local_rank = _harness.init()
    net = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    model = FSDP(
        net,
        cpu_offload=CPUOffload(offload_params=True),
        auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}),
        device_id=torch.device("cuda", local_rank),
    )
    model(torch.randn(8, WIDTH, device="cuda")).sum().backward()
    times = []
    for _ in range(WARMUP + REPEATS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with FSDP.summon_full_params(model):
            norm = sum(float(p.norm()) for p in model.parameters())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    seconds = _harness.median(times[WARMUP:])
    _harness.report(
        hazard=False,
        step_time=seconds,
        detail=f"read-only summon {seconds * 1000:.1f} ms (median of {REPEATS}), norm sum {norm:.1f}",
    )
    _harness.finish()


if __name__ == "__main__":
    main()
