"""FSD112 scenario: rank 0 saves model.state_dict() of an FSDP2 model; the file is reloaded."""

import os

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # noqa: F401 - the fixed program uses it
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, world, device, _ = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda()
    full_shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    fully_shard(model, mesh=init_device_mesh(device, (world,)))
    path = os.path.join(_harness.result_dir(), "model.pt")
    if rank == 0:
        torch.save(model.state_dict(), path)
    dist.barrier()
    saved = torch.load(path, map_location="cpu", weights_only=False)
    shapes = {k: tuple(v.to_local().shape) if hasattr(v, "to_local") else tuple(v.shape) for k, v in saved.items()}
    partial = sorted(k for k, shape in shapes.items() if shape != full_shapes.get(k, shape))
    _harness.report(hazard=bool(partial), detail=f"{len(partial)}/{len(shapes)} saved tensors hold one rank's shard only")
    _harness.finish()


if __name__ == "__main__":
    main()
