"""FSD111 scenario: an EMA copy made with copy.deepcopy after fully_shard."""

import copy

import torch  # noqa: F401 - the fixed program uses it
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, world, device, _ = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda()
    mesh = init_device_mesh(device, (world,))
    fully_shard(model, mesh=mesh)
    ema = copy.deepcopy(model)
    same = sum(1 for a, b in zip(model.parameters(), ema.parameters()) if a.shape == b.shape)
    _harness.report(hazard=False, detail=f"rank {rank}: copied {same} parameters")
    _harness.finish()


if __name__ == "__main__":
    main()
