"""FSD001 scenario on CPU: a read-only summon with the default writeback, parameters on the CPU.

The combination of pytorch#188989: FSDP placed on the CPU device (gloo), the summon with
``offload_to_cpu=True`` and the default ``writeback=True`` (torch <= 2.13: the local shard is
overwritten with freed memory on exit; fixed in 2.14.1).  The GPU variant, with real
CPUOffload(offload_params=True), is ``fsd001_summon_writeback_with_cpu_offload_cuda.py``.
The hazard: the local shard differs after a block that never touched a parameter.  The shard
is overwritten from freed memory, so what lands there is whatever reused it: without any
allocation in the block it came out unchanged in 1 of 8 runs (torch 2.13.0); with the block's
own scratch tensor (as any block that computes something has) it was overwritten in 10 of 10,
and the writeback=False program kept it intact in 10 of 10.
"""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    _harness.init()
    net = _harness.mlp()
    full_size = sum(p.numel() for p in net.parameters())
    model = FSDP(net, device_id=torch.device("cpu"), use_orig_params=True)
    handles = [m._handle for m in FSDP.fsdp_modules(model) if m._handle is not None]
    before = [h.flat_param.detach().to("cpu", copy=True) for h in handles]
    with FSDP.summon_full_params(model, offload_to_cpu=True):
        names = [name for name, _ in model.named_parameters()]  # reads no tensor data
        scratch = torch.full((full_size,), 0.5)  # the block's own work memory, no parameter in it
    after = [h.flat_param.detach().to("cpu", copy=True) for h in handles]
    changed = sum(int((a != b).sum()) for a, b in zip(after, before))
    total = sum(b.numel() for b in before)
    _harness.report(
        hazard=changed > 0,
        detail=f"{changed}/{total} local shard elements changed by a read-only summon of {len(names)} parameters"
        f" ({scratch.numel()} elements of scratch memory used in the block)",
        changed=changed,
        total=total,
    )
    _harness.finish()


if __name__ == "__main__":
    main()
