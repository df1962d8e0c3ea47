"""FSD104 scenario (forward): after a training step, rank 0 alone runs an evaluation
forward of an FSDP1 model whose layers are FSDP units of their own (FULL_SHARD, the
default): each layer all-gathers its parameters and frees them after its forward, so rank 0
runs all-gathers the other rank never joins and the job hangs.  (With the root as the only
unit it does not: the root keeps its parameters gathered after a forward.)"""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}), device_id=where)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 64, device=where)).sum().backward()
    optimizer.step()
    with torch.no_grad():
        if dist.get_rank() == 0:
            loss = model(torch.randn(8, 64, device=where)).pow(2).mean()
            print(f"eval loss {loss.item():.4f}", flush=True)
    model(torch.randn(8, 64, device=where)).sum().backward()
    _harness.report(hazard=False, detail="the step after the evaluation completed")
    _harness.finish()


if __name__ == "__main__":
    main()
