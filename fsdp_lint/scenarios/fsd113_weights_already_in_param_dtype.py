"""FSD113 scenario: weights cast to bf16, then fully_shard with a bf16 MixedPrecisionPolicy."""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, world, device, _ = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda()
    model = model.to(torch.bfloat16)
    fully_shard(model, mesh=init_device_mesh(device, (world,)),
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 64, device=device)).float().sum().backward()
    optimizer.step()
    low = sorted({str(p.dtype) for p in model.parameters()} | {str(s["exp_avg"].dtype) for s in optimizer.state.values()})
    _harness.report(hazard="torch.bfloat16" in low,
                    detail=f"rank {rank}: sharded parameters and optimizer state in {', '.join(low)}")
    _harness.finish()


if __name__ == "__main__":
    main()
