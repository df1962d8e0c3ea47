"""FSD104 scenario, Lightning Fabric form with ``ModelParallelStrategy`` (FSDP2): ``fabric.save``
called on global rank 0 only; it broadcasts the path, writes a distributed checkpoint (every
rank's shard) and ends in a barrier ("This method must be called on all processes!")."""

import os

import lightning as L
import torch
from lightning.fabric.strategies import ModelParallelStrategy
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def parallelize(model, device_mesh):
    fully_shard(model, mesh=device_mesh["data_parallel"])
    return model


def main():
    ranks, nodes = _harness.torchrun_sizes()
    strategy = ModelParallelStrategy(
        parallelize_fn=parallelize, data_parallel_size=ranks * nodes, tensor_parallel_size=1
    )
    fabric = L.Fabric(accelerator=_harness.device_kind(), devices=ranks, num_nodes=nodes, strategy=strategy)
    fabric.launch()
    with fabric.init_module():
        model = _harness.mlp()
    model = fabric.setup_module(model)
    path = os.path.join(_harness.result_dir(), "checkpoint")
    if fabric.global_rank == 0:
        fabric.save(path, {"model": model})
    fabric.backward(model(torch.randn(8, 64, device=fabric.device)).sum())
    _harness.report(hazard=False, detail="the step after the save completed")
    _harness.finish()


if __name__ == "__main__":
    main()
