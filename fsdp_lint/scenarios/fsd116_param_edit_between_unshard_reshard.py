"""FSD116 scenario: parameters scaled in place between FSDP2's unshard() and reshard()."""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, world, device, _ = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda()
    fully_shard(model, mesh=init_device_mesh(device, (world,)))
    model(torch.randn(4, 64, device=device)).sum().backward()
    before = [p.to_local().detach().clone() for p in model.parameters()]
    model.unshard()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    model.reshard()
    after = [p.to_local().detach() for p in model.parameters()]
    lost = sum(1 for b, a in zip(before, after) if not torch.allclose(a, b * 0.5))
    _harness.report(hazard=lost > 0,
                    detail=f"{lost}/{len(after)} local shards kept their old values after reshard()")
    _harness.finish()


if __name__ == "__main__":
    main()
