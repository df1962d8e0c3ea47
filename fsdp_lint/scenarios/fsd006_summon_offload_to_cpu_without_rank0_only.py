"""FSD006 scenario: offload_to_cpu=True without rank0_only=True; every rank copies the model.

Each rank measures its own resident host memory (``/proc/self/statm``) just before the block
and inside it, and compares the growth with the full model's size.  The hazard: every rank
grew by at least half the full model.  The fixed program passes rank0_only=True: only rank 0
holds the copy.  GPU: parameters on each rank's GPU.  CPU (torch >= 2.14.1 only; earlier
releases hit pytorch#188989 on CPU-resident parameters): the full parameters land in host
memory on every rank as well.
"""

import os

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness

MB = 1024 * 1024


def resident_bytes():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    net = _harness.mlp(2048, 8)
    full_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    model = FSDP(net, device_id=where)
    model(torch.randn(4, 2048, device=where)).sum().backward()
    with FSDP.summon_full_params(model, writeback=False):
        pass
    if device == "cuda":
        torch.cuda.synchronize()
    before = resident_bytes()
    with FSDP.summon_full_params(model, offload_to_cpu=True, writeback=False):
        grown = resident_bytes() - before
        on_host = sum(p.numel() for p in model.parameters() if p.device.type == "cpu")
    growth = _harness.gather(grown)
    _harness.report(
        hazard=min(growth) >= 0.5 * full_bytes,
        detail="host memory growth inside the block: "
        + ", ".join(f"rank {r} +{g / MB:.1f} MB ({g / full_bytes:.2f}x)" for r, g in enumerate(growth))
        + f" of the full model's {full_bytes / MB:.1f} MB",
        growth=growth,
        full_bytes=full_bytes,
        on_host=on_host,
    )
    _harness.finish()


if __name__ == "__main__":
    main()
