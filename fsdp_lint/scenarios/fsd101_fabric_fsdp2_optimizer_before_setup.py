"""FSD101 scenario, Lightning Fabric form: the optimizer is built before ``fabric.setup(model,
optimizer)`` shards the model with ``ModelParallelStrategy`` (FSDP2 ``fully_shard`` in the
user's ``parallelize_fn``); Fabric maps no optimizer parameters, so its steps never reach the
new DTensor weights."""

import lightning as L
import torch
from lightning.fabric.strategies import ModelParallelStrategy
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def parallelize(model, device_mesh):
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=device_mesh["data_parallel"])
    fully_shard(model, mesh=device_mesh["data_parallel"])
    return model


def full_weights(model):
    return [p.full_tensor().detach().clone() for p in model.parameters()]


def main():
    ranks, nodes = _harness.torchrun_sizes()
    strategy = ModelParallelStrategy(
        parallelize_fn=parallelize, data_parallel_size=ranks * nodes, tensor_parallel_size=1
    )
    fabric = L.Fabric(accelerator=_harness.device_kind(), devices=ranks, num_nodes=nodes, strategy=strategy)
    fabric.launch()
    torch.manual_seed(0)
    with fabric.init_module():
        model = _harness.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    before = full_weights(model)
    for _ in range(3):
        fabric.backward(model(torch.randn(8, 64, device=fabric.device)).square().mean())
        optimizer.step()
        optimizer.zero_grad()
    after = full_weights(model)
    changed = sum(int(not torch.equal(a, b)) for a, b in zip(after, before))
    _harness.report(hazard=changed == 0, detail=f"{changed}/{len(before)} parameters changed by 3 optimizer steps")
    _harness.finish()


if __name__ == "__main__":
    main()
