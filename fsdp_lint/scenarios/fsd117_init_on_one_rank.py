"""FSD117 scenario, one-rank form: an MLP built on the meta device, fully_shard-ed and
materialised with to_empty(), re-initialised under a rank test (rank 0 only, as a load
that runs only where a checkpoint is read); are every rank's own shards nn.Linear's init?"""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, world, device, _ = _harness.init()
    with torch.device("meta"):
        model = _harness.mlp()
    mesh = init_device_mesh(device, (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)
    if dist.get_rank() == 0:
        for layer in model.modules():
            if isinstance(layer, torch.nn.Linear):
                layer.reset_parameters()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    local = [p.to_local().detach().float().clone() for p in model.parameters()]  # this rank's shards, before the step
    batch = torch.randn(8, 64, device=device)
    loss = model(batch).pow(2).mean()
    loss.backward()
    optimizer.step()
    bad = _harness.not_linear_init(local)
    _harness.report(hazard=bad > 0, detail=f"{bad}/6 of this rank's shards not nn.Linear's init after a "
                    f"re-initialisation on rank 0 only; first loss {loss.item():.3g}")
    _harness.finish()


if __name__ == "__main__":
    main()
