"""FSD119 scenario: a warm-up forward of the fully_shard-ed root, then the optimizer built from
model.parameters(); four training steps; which sharded parameters steps 2-4 changed."""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from fsdp_lint.scenarios import _harness


def main():
    _, world, device, _ = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda()
    mesh = init_device_mesh(device, (world,))
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)
    batch = torch.randn(8, 64, device=device)
    with torch.no_grad():
        model(batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    held = optimizer.param_groups[0]["params"]
    plain = sum(not isinstance(p, DTensor) for p in held)
    before = None
    for step in range(4):
        model(batch).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        if step == 0:  # after a backward every parameter is a sharded DTensor again
            before = [p.to_local().detach().clone() for p in model.parameters() if isinstance(p, DTensor)]
    after = [p.to_local().detach().clone() for p in model.parameters() if isinstance(p, DTensor)]
    unchanged = sum(torch.equal(a, b) for a, b in zip(before, after))
    _harness.report(hazard=unchanged > 0,
                    detail=f"the optimizer holds {plain}/{len(held)} plain (unsharded) tensors; "
                    f"{unchanged}/{len(after)} sharded parameters unchanged by steps 2-4")
    _harness.finish()


if __name__ == "__main__":
    main()
