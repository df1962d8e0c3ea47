"""FSD110 scenario: a full (unsharded) checkpoint loaded with load_state_dict after fully_shard."""

import os

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict  # noqa: F401 - the fixed program uses it
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, world, device, _ = _harness.init()
    torch.manual_seed(0)
    model = _harness.mlp()
    path = os.path.join(_harness.result_dir(), "pretrained.pt")
    if rank == 0:
        torch.save({k: torch.ones_like(v) for k, v in model.state_dict().items()}, path)
    dist.barrier()
    if device == "cuda":
        model = model.cuda()
    fully_shard(model, mesh=init_device_mesh(device, (world,)))
    model.load_state_dict(torch.load(path))
    loaded = all(bool((p.full_tensor() == 1).all()) for p in model.parameters())
    _harness.report(hazard=not loaded, detail=f"rank {rank}: checkpoint values {'in' if loaded else 'not in'} the shards")
    _harness.finish()


if __name__ == "__main__":
    main()
