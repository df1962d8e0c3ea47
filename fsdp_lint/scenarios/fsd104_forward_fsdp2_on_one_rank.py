"""FSD104 scenario (forward-fsdp2): after a training step, rank 0 alone runs an evaluation
forward of a model sharded with FSDP2 ``fully_shard``, layer by layer and then the root:
each layer all-gathers its parameters and frees them after its forward
(``reshard_after_forward`` left at its default), so rank 0 runs all-gathers the other rank
never joins and the job hangs.  (Sharding the root alone does not: it keeps its parameters
gathered after a forward.)"""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = _harness.mlp().to(where)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
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
