"""FSD104 scenario, Lightning Fabric form: ``fabric.save`` with ``strategy="fsdp"`` called on
global rank 0 only; it broadcasts the path, saves every rank's shard and ends in a barrier
("This method must be called on all processes!")."""

import os

import lightning as L
import torch

from fsdp_lint.scenarios import _harness


def main():
    ranks, nodes = _harness.torchrun_sizes()
    fabric = L.Fabric(accelerator=_harness.device_kind(), devices=ranks, num_nodes=nodes, strategy="fsdp")
    fabric.launch()
    model = fabric.setup_module(_harness.mlp())
    path = os.path.join(_harness.result_dir(), "checkpoint")
    if fabric.global_rank == 0:
        fabric.save(path, {"model": model})
    fabric.backward(model(torch.randn(8, 64, device=fabric.device)).sum())
    _harness.report(hazard=False, detail="the step after the save completed")
    _harness.finish()


if __name__ == "__main__":
    main()
