"""FSD109 scenario: gradient accumulation with FSDP1's no_sync() on an FSDP2 module."""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, world, device, local_rank = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda()
    fully_shard(model, mesh=init_device_mesh(device, (world,)))
    batches = [torch.randn(4, 64, device=device) for _ in range(3)]
    for i, batch in enumerate(batches):
        if i < len(batches) - 1:
            with model.no_sync():
                model(batch).sum().backward()
        else:
            model(batch).sum().backward()
    grads = sum(1 for p in model.parameters() if p.grad is not None)
    _harness.report(hazard=False, detail=f"rank {rank}: {grads} parameters got accumulated gradients")
    _harness.finish()


if __name__ == "__main__":
    main()
