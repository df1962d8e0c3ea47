"""FSD011 scenario: FSDP1's summon_full_params on an FSDP2 (fully_shard) model."""

from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness

def main():
    rank, world, device, _ = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda()
    full_shapes = [tuple(p.shape) for p in model.parameters()]
    fully_shard(model, mesh=init_device_mesh(device, (world,)))
    with FSDP.summon_full_params(model, writeback=False):
        seen = [tuple(p.to_local().shape) if hasattr(p, "to_local") else tuple(p.shape) for p in model.parameters()]
    wrong = sum(1 for a, b in zip(seen, full_shapes) if a != b)
    _harness.report(hazard=wrong > 0, detail=f"{wrong}/{len(seen)} parameters not full inside the block")
    _harness.finish()

if __name__ == "__main__":
    main()
